"""Devices: the names that hold the device, settings classes choosing one, and the values a call
takes as its device followed back to where the script chose them."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import DEVICE_KEYWORDS, chooses_device, held_name
from accel_convert.codemods.engine.names import NameTable, ScopeKey, is_builtin
from accel_convert.codemods.engine.syntax import argument_for, dotted
from accel_convert.codemods.model.arguments import options_defined
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
    needs=(
        "arguments",
        "parsed_arguments",
        "parser_options",
        "existing_accelerator",
        "device_names",
        "settings_devices",
    ),
    provides=("gpu_index_names", "gpu_index_values", "devices_taken", "devices_unfollowed"),
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
    * A parameter that a caller in another module of the program fills with a GPU index (seeded,
      ``gpu_index_parameters``) is one here too; and the names holding one here are told to the
      program (``gpu_index_values``), for the parameters they fill elsewhere."""
    _devices_returned(a)
    held = _HeldDevices.of(a)
    for function, name in _device_uses(a):
        origins = _origins(a, held, function, name)
        a.facts.devices_taken |= {(function, taken) for taken in {name, *origins}}
        kinds = {held.kind(origin) for origin in origins}
        if kinds == {"device"}:
            a.facts.device_names.add(name)
        elif "fixed" in kinds and "other" in kinds:
            a.facts.devices_unfollowed.add(name)
        elif "fixed" in kinds:
            a.facts.gpu_index_names.add(name)
    a.facts.gpu_index_values = held.index_values(a) | a.facts.gpu_index_names


def _devices_returned(a: Analysis) -> None:
    """``device = get_device(args.gpu)``: a name bound to what a file's function returns when
    every one of its ``return`` statements hands back a device."""
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
            name = held_name(arg.value)
            if name is not None:
                uses.append((call.function, name))
    return uses


def _first_argument(call: cst.Call) -> str | None:
    return dotted(call.args[0].value) if call.args and call.args[0].keyword is None else None


def _origins(a: Analysis, held: _HeldDevices, function: str, name: str) -> set[str]:
    """Where the value ``name`` holds in ``function`` comes from: the names its callers pass, for
    a parameter or an attribute bound from one; where that is neither a device nor a GPU here,
    followed on (:func:`_followed`)."""
    return {
        origin
        for site in a.origin_sites(function, name)
        for origin in (_followed(a, held, *site, frozenset({site})) if held.kind(site[1]) == "other" else {site[1]})
    }


def _followed(a: Analysis, held: _HeldDevices, function: str, name: str, seen: frozenset[tuple[str, str]]) -> set[str]:
    """A name that is not itself a device or a GPU index, followed to where its value is chosen:
    what ``function`` assigns it from (``gpu = config["gpu"]``, ``self.gpu = cfg["gpu"]``), or
    what the callers pass for a part of it (``self.args.gpu`` from the ``args`` given to
    ``__init__``, ``config["gpu"]`` from the module's ``CONFIG``); ``name`` itself where neither."""
    sources = _assigned_from(a, function, name)
    if not sources:
        cuts = [cut for cut, char in enumerate(name) if char in ".[" and cut]
        for prefix, rest in ((name[:cut], name[cut:]) for cut in reversed(cuts)):
            passed = a.origin_sites(function, prefix)
            if passed != {(function, prefix)}:
                sources = [(caller, argument + rest) for caller, argument in passed]
                break
    found: set[str] = set()
    for site in sources:
        for origin_site in a.origin_sites(*site):
            # Already followed (a cycle), or held as a device or an index: where the value is chosen.
            if origin_site in seen or held.kind(origin_site[1]) != "other":
                found.add(origin_site[1])
            else:
                found |= _followed(a, held, *origin_site, seen | {origin_site})
    return found or {name}


def _assigned_from(a: Analysis, function: str, name: str) -> list[tuple[str, str]]:
    """(function, held name) of each assignment of ``name`` in ``function``, when every one of
    them assigns a held name (``gpu = config["gpu"]``); none otherwise."""
    values = [assign.value for assign in a.r.assigns if assign.function == function and assign.targets == (name,)]
    sources = [held_name(value) for value in values]
    return [(function, source) for source in sources if source is not None] if None not in sources else []


class _HeldDevices:
    """What the names of the file hold, as far as devices go: the device (``device_names``), a
    fixed GPU (an index, a device kept in a dictionary), or something else."""

    def __init__(self, a: Analysis, int_options: set[str]) -> None:
        self.facts = a.facts
        self.int_options = int_options
        # Parameters a caller in another module fills with a GPU index (``Trainer(model, gpu_id=0)``).
        self.fixed: set[str] = set(a.seeds.gpu_index_parameters) if a.seeds is not None else set()
        self.devices: set[str] = set()
        for assign in a.r.assigns:
            if len(assign.targets) == 1 and self.holds_index(assign.value):
                self.fixed.add(assign.targets[0])
        for assign in a.r.assigns:
            if len(assign.targets) == 1:
                self._entries(assign.targets[0], assign.value, assign.scope)

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

    def holds_index(self, value: cst.BaseExpression) -> bool:
        """``0``, ``args.gpu`` (an ``int`` option), a name bound to one, ``args.gpu if ok else
        "cpu"``: a GPU index (or the CPU, in a choice between them)."""
        if isinstance(value, cst.Integer):
            return True
        if isinstance(value, cst.IfExp):
            branches = (value.body, value.orelse)
            return any(self.holds_index(b) for b in branches) and all(
                self.holds_index(b) or _is_cpu(b) for b in branches
            )
        name = dotted(value)
        return name is not None and self.is_index_name(name)

    def index_values(self, a: Analysis) -> set[str]:
        """Every name holding a GPU index: bound to one here, or an ``int`` option (``args.gpu``)."""
        options = {f"{root}.{option}" for root in self.facts.parsed_arguments for option in self.int_options}
        return (self.fixed - set(a.seeds.gpu_index_parameters if a.seeds is not None else ())) | options

    def is_index_name(self, name: str) -> bool:
        """A name bound to a GPU index, or an ``int`` option of the command line (``args.gpu``)."""
        root, _, option = name.partition(".")
        return name in self.fixed or (root in self.facts.parsed_arguments and option in self.int_options)

    def _entries(self, target: str, value: cst.BaseExpression, scope: tuple[str, ...]) -> None:
        """``config = {"device": device}``: ``config["device"]`` holds the device (a fixed GPU when
        what it is given is not a name rebound to the accelerator's device)."""
        if not isinstance(value, cst.Dict):
            return
        for element in value.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                continue
            key = element.key.evaluated_value
            if not isinstance(key, str):
                continue
            entry = f'{target}["{key}"]'
            if dotted(element.value) in self.facts.device_names:
                self.devices.add(entry)
            elif self.holds_index(element.value) or chooses_device(element.value, self.facts, scope):
                self.fixed.add(entry)

    def kind(self, name: str) -> str:
        if name in self.facts.device_names or name in self.devices:
            return "device"
        return "fixed" if self.is_index_name(name) else "other"


def _declares_integer(arg: cst.Arg, names: NameTable, scope: ScopeKey) -> bool:
    """``type=int`` or an integer ``default=`` of ``add_argument``."""
    if arg.keyword is None:
        return False
    if arg.keyword.value == "type":
        return is_builtin(arg.value, "int", names, scope)
    return arg.keyword.value == "default" and isinstance(arg.value, cst.Integer)


def _is_cpu(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.SimpleString) and value.evaluated_value == "cpu"
