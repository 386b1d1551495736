"""Devices: the names that hold the device, settings classes choosing one, and the values a call
takes as its device followed back to where the script chose them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from accel_convert.codemods.engine.devices import (
    DEVICE_KEYWORDS,
    UNFOLLOWED_INDEX,
    binding_scope,
    chooses_device,
    element_name,
    held_name,
    holds_device,
    written_parts,
)
from accel_convert.codemods.engine.facts import MODULE, FactsDraft, callers_closure
from accel_convert.codemods.engine.names import NameTable, ScopeKey, is_builtin
from accel_convert.codemods.engine.syntax import argument_for, dotted, is_backward
from accel_convert.codemods.model.arguments import options_defined
from accel_convert.codemods.model.calls import instance_class_at
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
)
from accel_convert.codemods.model.state import Analysis


@provider(
    needs=("parsed_arguments", "parser_options", "existing_accelerator"),
    provides=("settings_devices", "settings_devices_unreached"),
    refines=("device_names",),
)
def settings_class_devices(a: Analysis) -> None:
    """``class Config: device = "cuda" if torch.cuda.is_available() else "cpu"`` (or a
    ``@dataclass`` field ``device: str = ...``): a settings class without bases choosing the
    device in its body. The script reads it as ``Config.device`` or through an instance
    (``cfg = Config()``, ``cfg.device``): those name the device like a variable, and are
    rebound once the accelerator exists (``a.settings_devices``, the device rule's): the class attribute of
    a plain class, which its instances read; each instance of a dataclass (which copies the
    default when built), built once with no arguments. Left out (ACC904 stays): a class whose
    instances may hold a device of their own (``cfg.device = ...``, ``self.device = ...``),
    other decorators, a dataclass instance built several times or given arguments."""
    found, frozen = _devices_chosen_in_settings_classes(a)
    if not found:
        return
    built = _instances_built(a, {owner for owner, _ in found.values()})
    instances = {name: dotted(sites[0].value.func) for name, sites in built.items()}  # type: ignore[attr-defined]
    for name, (owner, is_dataclass) in found.items():
        attribute = name.split(".", 1)[1]
        mine = [instance for instance, of in instances.items() if of == owner]
        readers = {name} | {f"{instance}.{attribute}" for instance in mine}
        overridden = _bound_outside_the_class(a, owner, attribute, readers)
        if is_dataclass:
            # Each instance copies the default: rebind each one, built once and plainly.
            overridden = overridden or not all(_built_once_plainly(built[i]) for i in mine)
        if overridden or name in frozen:
            a.settings_devices_unreached.add(name)
            continue
        rebound = [f"{instance}.{attribute}" for instance in mine] if is_dataclass else []
        a.settings_devices.update({target: name for target in [name, *rebound]})
        a.facts.device_names.update(readers)


def _instances_built(a: Analysis, owners: set[str]) -> dict[str, list[AssignRecord]]:
    """Name → the assignments binding it to an instance of one of ``owners`` (``cfg = Config()``)."""
    built: dict[str, list[AssignRecord]] = {}
    for assign in a.r.assigns:
        if len(assign.targets) == 1 and isinstance(assign.value, cst.Call) and dotted(assign.value.func) in owners:
            built.setdefault(assign.targets[0], []).append(assign)
    return built


def _built_once_plainly(sites: list[AssignRecord]) -> bool:
    """One construction, with no arguments (``cfg = Config()``)."""
    return len(sites) == 1 and not sites[0].value.args  # type: ignore[attr-defined]


def _devices_chosen_in_settings_classes(a: Analysis) -> tuple[dict[str, tuple[str, bool]], set[str]]:
    """``Config.device`` → (``Config``, whether it is a dataclass) for each device a settings class
    chooses in its body; and those of frozen dataclasses (``@dataclass(frozen=True)``)."""
    found: dict[str, tuple[str, bool]] = {}
    frozen: set[str] = set()
    for owner, record in a.r.classes.items():
        node = record.node
        decorators = [dotted(d.decorator) or dotted(getattr(d.decorator, "func", None)) for d in node.decorators]
        if node.bases or node.keywords or decorators not in ([], ["dataclass"], ["dataclasses.dataclass"]):
            continue
        for line in node.body.body:
            attribute = _class_attribute(line)
            if attribute is None:
                continue
            target, value = attribute
            if isinstance(target, cst.Name) and chooses_device(value, a.facts, (owner,)):
                found[f"{owner}.{target.value}"] = (owner, bool(decorators))
                if any(isinstance(d.decorator, cst.Call) and d.decorator.args for d in node.decorators):
                    frozen.add(f"{owner}.{target.value}")  # @dataclass(frozen=True): no rebinding
    return found, frozen


def _class_attribute(
    line: cst.BaseStatement | cst.BaseSmallStatement,
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(target, value) of a class body line binding one attribute: ``device = ...`` or
    ``device: str = ...``; None for anything else."""
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return small.targets[0].target, small.value
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return small.target, small.value
    return None


def _bound_outside_the_class(a: Analysis, owner: str, attribute: str, readers: set[str]) -> bool:
    """Whether code outside the class body binds the device again (``cfg.device = ...``,
    ``Config.device = ...``, or ``self.device = ...`` in a method)."""
    return any(
        target in readers or target == f"self.{attribute}"
        for assign in a.r.assigns
        for target in assign.targets
        if assign.scope != (owner,)
    )


@provider(
    needs=("parsed_arguments", "parser_options", "existing_accelerator", "settings_devices", "call_graph"),
    provides=("device_names_elsewhere",),
    refines=("device_names",),
)
def device_name_scopes(a: Analysis) -> None:
    """Which scope each device name belongs to. A device name is read where it is bound
    (:func:`~codemods.engine.devices.binding_scope`: a function's own variable, else the
    module's; a class's ``self.device``): the binding there says whether it holds the device.

    * ``device = get_device(args.gpu)``, a file's function returning a device on every path,
      binds the device (``device_names``).
    * A scope whose every binding of a device name holds something else (``dev =
      errors.std().item()``, ``device = platform.node()``, ``target = "cpu"``) has no device under
      that name, whatever another scope binds (``device_names_elsewhere``).
    * A scope binding a device name to the CPU alone (``device = torch.device("cpu")``, ``"cpu"``)
      keeps the CPU on purpose where another scope of the file chooses a device that may be a GPU
      (metrics collected on the CPU beside ``main()``'s own ``device``); in a script choosing no
      GPU anywhere, it is the script's device, the accelerator's once converted. A script
      creating its accelerator already (converted once) has the device chosen there.
    * Any other binding (an alias, a value followed elsewhere, an unpacking) leaves the scope's
      name a device, as the names are without scopes."""
    choosing = _devices_returned(a)
    kinds: dict[tuple[ScopeKey, str], set[str]] = {}
    for assign in a.r.assigns:
        for target in assign.targets:
            if target in a.facts.device_names:
                key = (binding_scope(target, assign.scope, a.r.names), target)
                kinds.setdefault(key, set()).add(_binding_kind(a, assign, choosing))
    gpu_chosen = {key for key, found in kinds.items() if "device" in found}
    # A script already creating its accelerator (a converted one too) has its device chosen there.
    chosen_elsewhere = a.facts.existing_accelerator is not None
    training = _training_scopes(a)
    for key, found in kinds.items():
        cpu_on_purpose = (chosen_elsewhere or gpu_chosen - {key}) and not _trains_in(key[0], training)
        if found == {"other"} or (found <= {"other", "cpu"} and cpu_on_purpose):
            a.facts.device_names_elsewhere.add(key)


def _training_scopes(a: Analysis) -> set[ScopeKey]:
    """The scopes whose code runs a backward (training, or an input's gradient: either way the
    prepared model computes there), and the module-level functions calling one that does
    (directly or not). Runs before the loops owner decides which backward trains."""
    backward = {call.scope for call in a.r.calls if is_backward(call.node)}
    functions = {scope[0] for scope in backward if scope}
    return backward | {(name,) for name in callers_closure(functions, a.facts.call_graph)}


def _trains_in(scope: ScopeKey, training: set[ScopeKey]) -> bool:
    """Whether code of ``scope`` trains: a CPU device chosen there (``main()``'s own, a trainer's
    ``self.device``) is the one the training runs on, the accelerator's once converted, never a
    CPU kept on purpose for metrics beside it (a ``checksum()`` method's, the module's where only
    ``main()`` trains)."""
    if not scope:
        return () in training
    return any(found[: len(scope)] == scope for found in training)


def _binding_kind(a: Analysis, assign: AssignRecord, choosing: set[str]) -> str:
    """What one binding of a device name gives it: ``device`` (a choice that may be a GPU, or
    what a device function returns), ``cpu`` (the CPU alone), ``other`` (a value that is no
    device: a call of something other than the file's own code, a string naming no device,
    ``None``), or ``unknown`` (anything else, taken for the device as before: an alias, an
    unpacking, a call of the file's own functions or methods)."""
    value, scope = assign.value, assign.scope
    if len(assign.targets) != 1:
        return "unknown"
    if _is_cpu(value) or (
        isinstance(value, cst.Call)
        and a.r.names.qualified_name(value.func, scope, strict=False) == "torch.device"
        and len(value.args) == 1
        and _is_cpu(value.args[0].value)
    ):
        return "cpu"
    if chooses_device(value, a.facts, scope):
        return "device"
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Name) and func.value in choosing:
            return "device"
        own = isinstance(func, cst.Name) and (func.value in a.r.defs or func.value in a.r.classes)
        method = isinstance(func, cst.Attribute) and instance_class_at(a, scope, func.value) is not None
        return "unknown" if own or method else "other"
    literal = isinstance(value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
    return "other" if literal or (isinstance(value, cst.Name) and value.value == "None") else "unknown"


@provider(
    needs=(
        "arguments",
        "parsed_arguments",
        "parser_options",
        "existing_accelerator",
        "device_names",
        "device_names_elsewhere",
        "settings_devices",
    ),
    provides=(
        "gpu_index_names",
        "gpu_index_values",
        "gpu_index_functions",
        "gpu_index_method_calls",
        "gpu_index_names_elsewhere",
        "module_gpu_indices",
        "devices_taken",
        "devices_unfollowed",
    ),
    refines=("device_names",),
)
def device_values(a: Analysis) -> None:
    """Devices followed through values: what a call takes as its device (``model.to(gpu_id)``,
    ``source.to(self.gpu_id)``, ``device=cfg["device"]``) is followed back through parameters,
    attributes, returns and dictionaries to where the script chose it.

    * A file's function returning a device on every path (``def get_device(gpu): return
      torch.device(f"cuda:{gpu}")``) chooses one: ``device = get_device(args.gpu)`` is the device
      (``device_names``), selected again by the accelerator.
    * A GPU index (an integer bound to a name, ``device = 0``; an ``int`` command-line option,
      ``--gpu``; a choice between one and ``"cpu"``) or a device kept in a settings dictionary
      (``{"device": torch.device("cuda:0")}``) is the same GPU on every process: the calls
      taking it as their device get the accelerator's (``gpu_index_names``).
    * Such a GPU reaching the call from some origins and something that cannot be followed from
      others (a parameter also given a name bound elsewhere to ``"cpu"``) is left, and reported
      there (``devices_unfollowed``).
    * The values are followed into what holds them: a dictionary, list or tuple written right in
      a call (``Runner({"gpu": 0})``, ``train(model, {"device": "cuda:0"})``) or bound to a name
      (``gpus = [0, 1]``, ``gpu, lr = 0, 0.1``), an element of an ``int`` option
      (``args.gpu_ids[0]``), a field of a named tuple or dataclass built with one (``Settings(0,
      lr)``, ``Config(gpu=0)``), the parts of a part (``config["gpus"][0]`` of ``{"gpus": [0,
      1]}``), what a file's function returns on every path (``def pick_gpu(): return 0``: ``gpu =
      pick_gpu()``, and ``model.to(pick_gpu())``, ``gpu_index_functions``), and what a method of
      its classes returns (``self.device = self.pick_gpu()``, ``.to(machine.pick_gpu())``,
      ``gpu_index_method_calls``).
    * A name is read where it is bound: a function's (or class's) own, or the module's where the
      function binds none of that name; ``target = "cpu"`` in one function is no GPU for the
      ``target = pick_gpu()`` of another (``gpu_index_names_elsewhere``).
    * A parameter that a caller in another module of the program fills with a GPU index (seeded,
      ``gpu_index_parameters``) is one here too, and so is a name imported from a module binding
      one (``cfg["gpu"]`` of ``from config import cfg``, seeded, ``imported_gpu_indices``); the
      names holding one here are told to the program (``gpu_index_values``), for the parameters
      they fill elsewhere, and the module's own (``module_gpu_indices``), for its importers."""
    held = _HeldDevices.of(a)
    a.facts.gpu_index_functions.update(function for function in held.index_functions if function in a.r.defs)
    a.facts.gpu_index_method_calls.update(_index_method_calls(a, held))
    elsewhere = set()
    for function, name in _device_uses(a):
        origins = _origins(a, held, function, name)
        taken = {name} | {origin for _, origin in origins}
        a.facts.devices_taken |= {(function, each) for each in taken if not is_literal(each)}
        kinds = {held.kind(*origin) for origin in origins}
        if kinds == {"device"}:
            a.facts.device_names.add(name)
        elif "fixed" in kinds and "other" in kinds or "unfollowed" in kinds:
            a.facts.devices_unfollowed.add(name)
        elif "fixed" in kinds:
            a.facts.gpu_index_names.add(name)
        else:
            elsewhere.add((function, name))
    # ``target = "cpu"`` in ``fingerprint()`` beside ``main()``'s ``target = pick_gpu()``.
    a.facts.gpu_index_names_elsewhere = {(f, name) for f, name in elsewhere if name in a.facts.gpu_index_names}
    a.facts.gpu_index_values = held.index_values(a) | a.facts.gpu_index_names
    a.facts.module_gpu_indices = {name for where, name in held.fixed if where == MODULE and not is_literal(name)}


def _index_method_calls(a: Analysis, held: _HeldDevices) -> Iterator[tuple[str, str]]:
    """(function, call as written) of each call of a method of the file's classes returning a GPU
    index on every path (``self.pick_gpu()`` in a method of the class, ``picker.pick_gpu()``)."""
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Attribute) and held.called(call.node, call.scope) in held.index_functions:
            yield call.function, dotted(func) or ""


def _devices_returned(a: Analysis) -> set[str]:
    """``device = get_device(args.gpu)``: a name bound to what a file's function returns when
    every one of its ``return`` statements hands back a device. Those functions, by name."""
    returns: dict[str, list[cst.BaseExpression]] = {}
    for function, value in a.r.returns:
        returns.setdefault(function, []).append(value)
    choosing = {
        function
        for function, values in returns.items()
        if all(chooses_device(value, a.facts, (function,)) for value in values)
    }
    for assign in a.r.assigns:
        value = assign.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in choosing:
            a.facts.device_names.update(assign.targets)
    return choosing


def _device_uses(a: Analysis) -> list[tuple[str, str]]:
    """(function, name) for each name a call takes as its device: the first positional argument
    of ``.to(...)`` (and of ``.cuda(...)`` for a GPU index another module hands in),
    ``device=``/``map_location=`` keywords (of calls other than the file's own
    functions and classes)."""
    uses = []
    # ``images.cuda(gpu, non_blocking=True)`` where another module hands ``gpu`` in: a move too.
    handed_in = a.seeds.gpu_index_parameters if a.seeds is not None else frozenset()
    for call in a.r.calls:
        func = call.node.func
        moves = isinstance(func, cst.Attribute) and (
            func.attr.value == "to" or (func.attr.value == "cuda" and _first_argument(call.node) in handed_in)
        )
        # ``train(model, device=gpu)`` of the file's own function hands the value on: followed
        # into the parameter, where it is taken.
        own = isinstance(func, cst.Name) and (func.value in a.r.defs or func.value in a.r.classes)
        taken = [argument_for(call.node, 0, "device")] if moves else []
        taken += [] if own else [argument_for(call.node, None, keyword) for keyword in sorted(DEVICE_KEYWORDS)]
        for arg in {id(arg): arg for arg in taken if arg is not None}.values():
            name = held_name(arg.value, indexed=True) or element_name(arg.value)
            if name is not None:
                uses.append((call.function, name))
    return uses


def _first_argument(call: cst.Call) -> str | None:
    return dotted(call.args[0].value) if call.args and call.args[0].keyword is None else None


def _origins(a: Analysis, held: _HeldDevices, function: str, name: str) -> set[tuple[str, str]]:
    """Where the value ``name`` holds in ``function`` comes from, as (function, name): the names
    its callers pass, for a parameter or an attribute bound from one; where that is neither a
    device nor a GPU there, followed on (:func:`_followed`)."""
    return {
        origin
        for site in held.origin_sites(a, function, name)
        for origin in (_followed(a, held, *site, frozenset({site})) if held.kind(*site) == "other" else {site})
    }


def _followed(
    a: Analysis, held: _HeldDevices, function: str, name: str, seen: frozenset[tuple[str, str]]
) -> set[tuple[str, str]]:
    """A name that is not itself a device or a GPU index, followed to where its value is chosen:
    what ``function`` assigns it from (``gpu = config["gpu"]``, ``self.gpu = cfg["gpu"]``), or
    what the callers pass for a part of it (``self.args.gpu`` from the ``args`` given to
    ``__init__``, ``config["gpu"]`` from the module's ``CONFIG``); ``name`` itself where neither."""
    sources = _assigned_from(a, function, name)
    if not sources:
        for prefix, rest in ((part, name[len(part) :]) for part in written_parts(name)[1:]):
            passed = held.origin_sites(a, function, prefix)
            if passed != {(function, prefix)}:
                sources = [(caller, argument + rest) for caller, argument in passed]
                break
    found: set[tuple[str, str]] = set()
    for site in sources:
        for origin_site in held.origin_sites(a, *site):
            # Already followed (a cycle), or held as a device or an index: where the value is chosen.
            if origin_site in seen or held.kind(*origin_site) != "other":
                found.add(origin_site)
            else:
                found |= _followed(a, held, *origin_site, seen | {origin_site})
    return found or {(function, name)}


def _assigned_from(a: Analysis, function: str, name: str) -> list[tuple[str, str]]:
    """(function, held name) of each assignment of ``name`` in ``function``, when every one of
    them assigns a held name (``gpu = config["gpu"]``); none otherwise."""
    values = [assign.value for assign in a.r.assigns if assign.function == function and assign.targets == (name,)]
    sources = [held_name(value, indexed=True) for value in values]
    return [(function, source) for source in sources if source is not None] if None not in sources else []


class _HeldDevices:
    """What the names of the file hold, as far as devices go: the device (``device_names``), a
    fixed GPU (an index, a device kept in a dictionary, a list or a settings tuple), or something
    else. A value written right in a call (``Runner({"gpu": 0})``) is held under a name the owner
    gives it (:func:`is_literal`), so that it is followed like a name."""

    def __init__(self, a: Analysis, int_options: set[str]) -> None:
        self.facts = a.facts
        self.a = a
        self.int_options = int_options
        #: (function, name) of the names bound to a fixed GPU: a function's (or class's) own, or
        #: the module's (function ``MODULE``), seen in the functions binding no name of theirs so.
        self.fixed: set[tuple[str, str]] = set()
        #: Names holding a fixed GPU wherever they are read: the parameters a caller in another
        #: module fills with a GPU index (``Trainer(model, gpu_id=0)``), the names imported from a
        #: module binding one (``cfg["gpu"]`` of ``from config import cfg``), the values written
        #: in a call.
        self.everywhere: set[str] = (
            set(a.seeds.gpu_index_parameters) | set(a.seeds.imported_gpu_indices) if a.seeds is not None else set()
        )
        self.devices: set[str] = set()
        #: The file's functions returning a GPU index on every path (``def pick_gpu(): return 0``),
        #: and its classes' methods, as ``Trainer.pick_gpu``.
        self.index_functions: set[str] = set()
        #: Settings tuples and dataclasses of the file → their fields, with their defaults.
        self.fields = _settings_fields(a)
        #: Values written right in a call, by identity → the name they are held under.
        self.literals: dict[int, str] = {}
        bindings = list(_bindings(a))
        #: Function → the names it binds (a local ``x = "cpu"`` is not the module's ``x = 0``).
        self.bound: dict[str, set[str]] = {}
        for target, _, scope in bindings:
            self.bound.setdefault(_function_of(scope), set()).add(target)
        # Names bound to an index, then the functions returning one of them (``return GPU``),
        # then the names bound to what those return (``gpu = pick_gpu()``).
        for _ in range(2):
            self.fixed |= {
                (_function_of(scope), target) for target, value, scope in bindings if self.holds_index(value, scope)
            }
            self.index_functions = _functions_returning(a, self.holds_index)
        for target, value, scope in bindings:
            self._parts(target, value, scope)

    @classmethod
    def of(cls, a: Analysis) -> _HeldDevices:
        int_options = {
            option
            for call in a.r.calls
            if isinstance(call.node.func, cst.Attribute)
            and call.node.func.attr.value == "add_argument"
            and any(_declares_integer(arg, a.r.names, call.scope) for arg in call.node.args)
            for option in options_defined(call.node)
        }
        return cls(a, int_options)

    def holds_index(self, value: cst.BaseExpression, scope: ScopeKey = ()) -> bool:
        """``0``, ``args.gpu`` (an ``int`` option), a name bound to one, ``args.gpu if ok else
        "cpu"``, ``pick_gpu()`` or ``self.pick_gpu()`` (a function or method returning one), read
        in ``scope``: a GPU index (or the CPU, in a choice between them)."""
        if isinstance(value, cst.Integer):
            return True
        if isinstance(value, cst.IfExp):
            branches = (value.body, value.orelse)
            return any(self.holds_index(b, scope) for b in branches) and all(
                self.holds_index(b, scope) or _is_cpu(b) for b in branches
            )
        if isinstance(value, cst.Call):
            return self.called(value, scope) in self.index_functions
        name = held_name(value, indexed=True)
        return name is not None and self.is_index_name(_function_of(scope), name)

    def called(self, call: cst.Call, scope: ScopeKey) -> str | None:
        """The file's function (``pick_gpu``) or method (``Trainer.pick_gpu``, of ``self.pick_gpu()``
        in a method of ``Trainer`` or of ``trainer.pick_gpu()``) a call standing in ``scope`` runs."""
        func = call.func
        if isinstance(func, cst.Name):
            return func.value
        if not isinstance(func, cst.Attribute):
            return None
        owner = instance_class_at(self.a, scope, func.value)
        return f"{owner}.{func.attr.value}" if owner is not None else None

    def index_values(self, a: Analysis) -> set[str]:
        """Every name holding a GPU index: bound to one here, or an ``int`` option (``args.gpu``)."""
        options = {f"{root}.{option}" for root in self.facts.parsed_arguments for option in self.int_options}
        fixed = {name for _, name in self.fixed if not is_literal(name)}
        return (fixed - set(a.seeds.gpu_index_parameters if a.seeds is not None else ())) | options

    def is_index_name(self, function: str, name: str) -> bool:
        """A name read in ``function`` bound to a GPU index, or an ``int`` option of the command
        line (``args.gpu``, or one of its values, ``args.gpu_ids[0]``)."""
        root, _, option = name.partition(".")
        return name in self.visible(function) or (
            root in self.facts.parsed_arguments and _unindexed(option) in self.int_options
        )

    def visible(self, function: str) -> set[str]:
        """The names holding a fixed GPU where ``function`` reads them: its own, the module's that
        it does not bind itself, and those held so everywhere."""
        own = {name for where, name in self.fixed if where == function}
        module = {name for where, name in self.fixed if where == MODULE} - self.bound.get(function, set())
        return own | module | self.everywhere

    def origin_sites(
        self, a: Analysis, function: str, name: str, seen: frozenset = frozenset()
    ) -> set[tuple[str, str]]:
        """:meth:`Analysis.origin_sites`, with the values written right in the calls
        (``Runner({"gpu": 0})``) among the origins, under the names they are held under."""
        key = (function, name)
        values = a.argument_values.get(key, [])
        if key in seen or (key not in a.arguments and not values):
            return {key}
        found = {(caller, self.literal(value, caller)) for caller, value in values}
        for caller, argument in a.arguments.get(key, ()):
            found |= self.origin_sites(a, caller, argument, seen | {key})
        return found

    def literal(self, value: cst.BaseExpression, caller: str) -> str:
        """The name a value written right in a call (in ``caller``) is held under; what it holds
        is told the first time it is asked (a ``"cuda:0"`` or ``torch.device(...)`` there is a
        fixed GPU, and so is ``gpu`` of ``Settings(gpu, lr)`` where ``caller`` binds ``gpu = 0``)."""
        name = self.literals.get(id(value))
        if name is None:
            name = self.literals[id(value)] = f"{_LITERAL}{len(self.literals)}>"
            scope = () if caller == MODULE else (caller,)
            if self.holds_index(value, scope) or chooses_device(value, self.facts):
                self.everywhere.add(name)
            self._parts(name, value, scope)
        return name

    def _parts(self, target: str, value: cst.BaseExpression, scope: tuple[str, ...]) -> None:
        """``config = {"device": device}``, ``gpus = [0, 1]``, ``cfg = Settings(gpu=0)``:
        ``config["device"]`` holds the device (a fixed GPU when what it is given is not a name
        rebound to the accelerator's device), ``gpus[0]`` and ``cfg.gpu`` a fixed GPU."""
        for part, element in _elements(value, self.fields, self.facts, scope):
            entry = f"{target}{part}"
            if dotted(element) in self.facts.device_names:
                self.devices.add(entry)
            elif self.holds_index(element, scope) or chooses_device(element, self.facts, scope):
                self._fix(entry, scope, is_literal(target))
            else:
                # ``{"gpus": [0, 1]}``: the parts of a part (``config["gpus"][0]``).
                self._parts(entry, element, scope)

    def _fix(self, name: str, scope: ScopeKey, everywhere: bool) -> None:
        """``name``, bound in ``scope``, holds a fixed GPU: there, or ``everywhere`` (a part of a
        value written in a call, under a name of its own, read where the value goes)."""
        if everywhere:
            self.everywhere.add(name)
        else:
            self.fixed.add((_function_of(scope), name))

    def kind(self, function: str, name: str) -> str:
        """What ``name`` holds where ``function`` reads it: ``device``, ``fixed``, ``other``; or
        ``unfollowed``: an element, at an index not written out, of what holds fixed GPUs
        (``gpus[i]`` of ``gpus = [0, 1]``, ``args.gpu_ids[rank]``)."""
        if holds_device(name, self.facts, () if function == MODULE else (function,)) or name in self.devices:
            return "device"
        if name.endswith(UNFOLLOWED_INDEX):
            held = self.visible(function) | self.devices
            base = name.removesuffix(UNFOLLOWED_INDEX)
            elements = any(element.startswith(f"{base}[") for element in held)
            return "unfollowed" if elements or self.is_index_name(function, f"{base}[0]") else "other"
        return "fixed" if self.is_index_name(function, name) else "other"


#: How the names of values written right in a call begin: no name of the script's does.
_LITERAL = "<value "


def is_literal(name: str) -> bool:
    """Whether ``name`` is one the device owner gave a value written right in a call."""
    return name.startswith(_LITERAL)


def _function_of(scope: ScopeKey) -> str:
    """The module-level function or class a scope stands in (the analysis' "function")."""
    return scope[0] if scope else MODULE


def _unindexed(option: str) -> str:
    """``gpu_ids`` of ``gpu_ids[0]``: the option whose value (a list of them) is indexed."""
    return option.partition("[")[0]


def _bindings(a: Analysis) -> Iterator[tuple[str, cst.BaseExpression, tuple[str, ...]]]:
    """(name, value, scope) of each name the file binds to one value: ``gpu = 0``, and each of
    ``gpu, lr = 0, 0.1``."""
    for assign in a.r.assigns:
        if len(assign.targets) == 1:
            yield assign.targets[0], assign.value, assign.scope
        elif isinstance(assign.value, (cst.Tuple, cst.List)) and len(assign.value.elements) == len(assign.targets):
            if not any(isinstance(element, cst.StarredElement) for element in assign.value.elements):
                for target, element in zip(assign.targets, assign.value.elements):
                    yield target, element.value, assign.scope


def _functions_returning(a: Analysis, holds: Callable[[cst.BaseExpression, ScopeKey], bool]) -> set[str]:
    """The file's module-level functions and its classes' methods (as ``Trainer.pick_gpu``) every
    ``return`` of which hands back what ``holds`` (a GPU index), or the CPU where there is none
    (``if torch.cuda.is_available(): return 0``, then ``return "cpu"``)."""
    returns: dict[str, tuple[ScopeKey, list[cst.BaseExpression]]] = {}
    for function, value in a.r.returns:
        if function in a.r.defs:
            returns.setdefault(function, ((function,), []))[1].append(value)
    for scope, value in a.r.method_returns:
        returns.setdefault(".".join(scope), (scope, []))[1].append(value)
    return {
        function
        for function, (scope, values) in returns.items()
        if any(holds(value, scope) for value in values)
        and all(holds(value, scope) or _is_cpu(value) for value in values)
    }


def _elements(
    value: cst.BaseExpression,
    fields: dict[str, list[tuple[str, cst.BaseExpression | None]]],
    facts: FactsDraft,
    scope: ScopeKey,
) -> list[tuple[str, cst.BaseExpression]]:
    """The parts of a value and what each holds: ``["gpu"]`` of ``{"gpu": 0}`` or ``dict(gpu=0)``,
    ``[0]`` of ``[0, 1]`` or ``(0, 1)``, ``.gpu`` of ``Settings(0)`` (a settings tuple or dataclass
    of the file, its defaults included); of ``[0, 1] if ok else ["cpu"]``, the choice between the
    two branches' parts."""
    if isinstance(value, cst.IfExp):
        return _chosen_elements(value, fields, facts, scope)
    if isinstance(value, cst.Dict):
        return _dictionary_entries(value)
    if isinstance(value, (cst.List, cst.Tuple)):
        return _sequence_elements(value)
    if isinstance(value, cst.Call) and is_builtin(value.func, "dict", facts.names, scope):
        return [(f'["{arg.keyword.value}"]', arg.value) for arg in value.args if arg.keyword is not None]
    if isinstance(value, cst.Call) and dotted(value.func) in fields:
        return _field_values(value, fields[dotted(value.func) or ""])
    return []


def _chosen_elements(
    value: cst.IfExp,
    fields: dict[str, list[tuple[str, cst.BaseExpression | None]]],
    facts: FactsDraft,
    scope: ScopeKey,
) -> list[tuple[str, cst.BaseExpression]]:
    """``[0, 1] if ok else ["cpu"]``: ``[0]`` is ``0 if ok else "cpu"``, ``[1]`` is ``1``."""
    body = dict(_elements(value.body, fields, facts, scope))
    orelse = dict(_elements(value.orelse, fields, facts, scope))
    chosen: list[tuple[str, cst.BaseExpression]] = [
        (part, cst.IfExp(test=value.test, body=element, orelse=orelse[part]) if part in orelse else element)
        for part, element in body.items()
    ]
    return chosen + [(part, element) for part, element in orelse.items() if part not in body]


def _dictionary_entries(value: cst.Dict) -> list[tuple[str, cst.BaseExpression]]:
    """``["gpu"]`` → ``0`` of ``{"gpu": 0}``: the entries under string keys."""
    return [
        (f'["{key}"]', element.value)
        for element in value.elements
        if isinstance(element, cst.DictElement)
        and isinstance(element.key, cst.SimpleString)
        and isinstance(key := element.key.evaluated_value, str)
    ]


def _sequence_elements(value: cst.List | cst.Tuple) -> list[tuple[str, cst.BaseExpression]]:
    """``[0]`` → ``0`` of ``[0, 1]``: the elements before any starred one."""
    elements: list[tuple[str, cst.BaseExpression]] = []
    for index, element in enumerate(value.elements):
        if isinstance(element, cst.StarredElement):
            break
        elements.append((f"[{index}]", element.value))
    return elements


def _field_values(
    call: cst.Call, fields: list[tuple[str, cst.BaseExpression | None]]
) -> list[tuple[str, cst.BaseExpression]]:
    """``.gpu`` → ``0`` for ``Settings(0, lr)`` (or ``Settings(gpu=0)``, or its default)."""
    found = []
    for index, (field_name, default) in enumerate(fields):
        arg = argument_for(call, index, field_name)
        value = arg.value if arg is not None else default
        if value is not None:
            found.append((f".{field_name}", value))
    return found


def _settings_fields(a: Analysis) -> dict[str, list[tuple[str, cst.BaseExpression | None]]]:
    """Settings tuples and dataclasses of the file → their fields in order, with their defaults:
    ``Settings = namedtuple("Settings", ["gpu", "lr"])``, ``class Settings(NamedTuple)``, a
    ``@dataclass`` class (``gpu: int = 0``)."""
    found: dict[str, list[tuple[str, cst.BaseExpression | None]]] = {}
    for assign in a.r.assigns:
        value = assign.value
        if len(assign.targets) == 1 and isinstance(value, cst.Call) and len(value.args) >= 2:
            if a.r.names.qualified_name(value.func, assign.scope, strict=False) == "collections.namedtuple":
                names = _namedtuple_fields(value.args[1].value)
                if names:
                    found[assign.targets[0]] = [(name, None) for name in names]
    for owner, record in a.r.classes.items():
        node = record.node
        bases = {a.r.names.qualified_name(base.value, (), strict=False) for base in node.bases}
        decorators = {dotted(d.decorator) or dotted(getattr(d.decorator, "func", None)) for d in node.decorators}
        if "typing.NamedTuple" in bases or decorators & {"dataclass", "dataclasses.dataclass"}:
            found[owner] = [
                (line.body[0].target.value, line.body[0].value)
                for line in node.body.body
                if isinstance(line, cst.SimpleStatementLine)
                and isinstance(line.body[0], cst.AnnAssign)
                and isinstance(line.body[0].target, cst.Name)
            ]
    return found


def _namedtuple_fields(value: cst.BaseExpression) -> list[str]:
    """``["gpu", "lr"]``, ``("gpu", "lr")``, ``"gpu lr"``, ``"gpu, lr"``: a named tuple's fields."""
    if isinstance(value, cst.SimpleString) and isinstance(text := value.evaluated_value, str):
        return text.replace(",", " ").split()
    if isinstance(value, (cst.List, cst.Tuple)):
        names = [e.value.evaluated_value for e in value.elements if isinstance(e.value, cst.SimpleString)]
        return [name for name in names if isinstance(name, str)]
    return []


def _declares_integer(arg: cst.Arg, names: NameTable, scope: ScopeKey) -> bool:
    """``type=int`` or an integer ``default=`` of ``add_argument``."""
    if arg.keyword is None:
        return False
    if arg.keyword.value == "type":
        return is_builtin(arg.value, "int", names, scope)
    return arg.keyword.value == "default" and isinstance(arg.value, cst.Integer)


def _is_cpu(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.SimpleString) and value.evaluated_value == "cpu"
