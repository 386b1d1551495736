"""The program within the file: which module-level function calls which, and what flows into each
parameter (of a function, a class's ``__init__`` or method, an attribute, a loop target)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods.engine.devices import constructed, held_name
from accel_convert.codemods.engine.facts import MODULE
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.name_flow import functions_used_only_as_values
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.codemods.engine.syntax import (
    class_methods,
    dotted,
    parameter_names,
    parameters_filled,
    takes_every_argument,
)
from accel_convert.codemods.engine.torch_names import (
    LOADER_PASS_THROUGH_METHODS,
    WORKER_CALLBACKS,
)
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
    CallRecord,
    ClassRecord,
)
from accel_convert.codemods.model.state import Analysis

if TYPE_CHECKING:
    from accel_convert.codemods.engine.names import ScopeKey


#: The constants a name can be written as: no object a role could flow from.
_CONSTANTS = frozenset({"None", "True", "False"})


def pairwise(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple[str, str]]:
    """The names a target binds, each with the name it gets from ``value`` (element by element
    for tuples of the same length): ``(split, loader)`` ← ``("val", val_loader)`` gives
    ``[("loader", "val_loader")]``."""
    if isinstance(target, (cst.Tuple, cst.List)):
        if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != len(target.elements):
            return []
        return [
            pair
            for inner, element in zip(target.elements, value.elements)
            if not isinstance(inner, cst.StarredElement) and not isinstance(element, cst.StarredElement)
            for pair in pairwise(inner.value, element.value)
        ]
    name, source = dotted(target), dotted(value)
    return [(name, source)] if name is not None and source is not None else []


def _keyword_argument(value: cst.BaseExpression, owner: ClassRecord, method: str) -> str | None:
    """``model`` for ``kwargs['model']`` in a method taking ``**kwargs``: the argument passed as
    ``model=...`` (sthalles/SimCLR's ``self.model = kwargs['model'].to(self.args.device)``)."""
    if not isinstance(value, cst.Subscript) or not isinstance(value.value, cst.Name) or len(value.slice) != 1:
        return None
    index = value.slice[0].slice
    if not isinstance(index, cst.Index) or not isinstance(index.value, cst.SimpleString):
        return None
    key = index.value.evaluated_value
    node = next(
        (
            line
            for line in (owner.node.body.body if isinstance(owner.node.body, cst.IndentedBlock) else ())
            if isinstance(line, cst.FunctionDef) and line.name.value == method
        ),
        None,
    )
    star = node.params.star_kwarg if node is not None else None
    if star is None or star.name.value != value.value.value or not isinstance(key, str) or not key.isidentifier():
        return None
    return key


def nested_function(a: Analysis, scope: ScopeKey) -> str | None:
    """The nested function that code in ``scope`` runs in, the innermost, by its path
    (``inner_training_loop.train``; ``main.run.train_epoch`` for code in a function nested in
    a nested one); None outside any."""
    for depth in range(len(scope), 1, -1):
        path = ".".join(scope[:depth])
        if path in a.r.nested_defs:
            return path
    return None


def nested_callee(a: Analysis, call: CallRecord) -> str | None:
    """``inner_training_loop.train`` for a call ``train(...)`` in ``inner_training_loop`` (or in
    a function nested beside or below ``train``) of the ``def train`` written in its body: the
    retried training loop of ``--oom-retry`` holds its own ``train`` and ``test``. The ``def``
    is the one the call's scope binds, at any depth (``main.run.train_epoch`` for
    ``train_epoch()`` in ``run``, nested in ``main``). None for any other call (a module-level
    function, a method)."""
    func = call.node.func
    return nested_def_named(a, func.value, call.scope) if isinstance(func, cst.Name) else None


def nested_def_named(a: Analysis, name: str, scope: ScopeKey) -> str | None:
    """The path of the nested ``def`` that ``name`` denotes in ``scope`` (``main.build`` for
    ``build`` in ``main``, or in a function nested beside it); None when it denotes no such
    function (a module-level function, a method, anything else)."""
    binding = a.r.names.binding_scope(name, scope) if scope else None
    if not binding:
        return None
    path = ".".join((*binding, name))
    return path if path in a.r.nested_defs else None


@provider(
    provides=("call_graph", "arguments", "constructions", "loop_calls", "nested_functions", "names_picked_by_locals")
)
def call_graph(a: Analysis) -> None:
    """Which module-level function calls which (``call_graph``, and the functions each loop
    calls), and what flows into each parameter: arguments of calls of the file's functions,
    classes and methods, attributes bound in a class, loop targets (``arguments``). A function
    nested in a module-level function's body is a function of the graph too, by its path
    (``inner_training_loop.train``), called by the function, or the nested function beside it,
    whose code calls it; its other calls count as its module-level function's."""
    a.facts.nested_functions.update(a.r.nested_defs)
    for call in a.r.calls:
        callee = call.node.func
        nested = nested_callee(a, call)
        if nested is not None:
            _into_nested_function(a, call, nested)
            _arguments_into_nested(a, call, a.r.nested_defs[nested])
        elif (in_method := _method_nested_callee(a, call)) is not None:
            _arguments_into_nested(a, call, a.r.method_nested_defs[in_method])
        elif isinstance(callee, cst.Name) and callee.value in a.r.defs:
            a.facts.call_graph.setdefault(call.function, set()).add(callee.value)
            params = a.r.defs[callee.value]
            limit = a.r.positional_limits.get(callee.value)
            if limit is not None and sum(arg.keyword is None for arg in call.node.args) > limit:
                # More positional arguments than the function takes: the call fails as it
                # stands, and what fills which parameter is anybody's guess.
                params = ()
            _arguments_into(a, call, callee.value, params)
            for loop in call.loops:
                loop.calls.add(callee.value)
        elif isinstance(callee, cst.Name) and callee.value in a.r.classes:
            _construction(a, call, a.r.classes[callee.value])
        elif isinstance(callee, cst.Attribute) and callee.attr.value in LOADER_PASS_THROUGH_METHODS:
            _into_pass_through_method(a, call, callee.attr.value)
        elif isinstance(callee, cst.Attribute):
            _into_method(a, call, callee)
    _value_edges(a)
    _attribute_aliases(a)
    _names_held_in_locals(a)
    _loop_aliases(a)


def _value_edges(a: Analysis) -> None:
    """A module-level function named as a value (``trainer.add_hook(save_checkpoint)``,
    ``callbacks=[log_metrics]``, ``Thread(target=save)``, ``{"train": train_epoch}[mode](...)``,
    ``functools.partial(save, path)``) is called out of sight by whatever receives it, from the
    code that hands it over: an edge from that code's function, as for a call, so the accelerator
    reaches it where it reaches that code (the pass-accelerator rewrite hands it over with
    ``functools.partial``). A local of the same name, a parameter's say, is no edge."""
    in_workers = handed_to_worker_processes(a)
    for name, scope in a.r.value_names:
        if name not in a.r.defs or a.r.names.binding_scope(name, scope) != () or (name, scope) in in_workers:
            continue
        caller = (nested_function(a, scope) or scope[0]) if scope else MODULE
        if caller != name:
            a.facts.call_graph.setdefault(caller, set()).add(name)
    _arguments_into_values(a, in_workers)


def _arguments_into_values(a: Analysis, in_workers: set[tuple[str, ScopeKey]]) -> None:
    """What a call out of sight passes (``callback(classifier)`` over ``callbacks = [save_ckpt]``,
    ``hook(self.model)`` over the hooks ``trainer.add_hook(save_ckpt)`` appended) flows into the
    parameters of the module-level functions the callable it calls can hold, as a call's arguments
    flow into its callee's: ``net`` of ``save_ckpt(net)`` is then the model, its save unwrapped.
    Position by position, past what a ``functools.partial`` binds first; only into a function
    whose parameters take the call's arguments."""
    handed = {
        name
        for name, scope in a.r.value_names
        if name in a.r.defs and a.r.names.binding_scope(name, scope) == () and (name, scope) not in in_workers
    }
    if not handed:
        return
    held = _functions_held(a, handed)
    skipped = _bound_by_partial(a)
    for call, holder in _calls_out_of_sight(a, held):
        for name in sorted(held.get(holder, ())):
            params = _parameters_left(a.r.defs[name], skipped.get(name, 0), a.r.positional_limits.get(name))
            if params is None or not takes_every_argument(call.node, params):
                continue
            for param, arg in parameters_filled(call.node, params):
                value = held_name(arg.value)
                if value is not None:
                    a.arguments.setdefault((name, param), set()).add((call.function, value))


#: Methods putting what they are given into the container they are called on.
_FILLING_METHODS = frozenset({"append", "extend", "insert", "add"})


def _functions_held(a: Analysis, handed: set[str]) -> dict[str, set[str]]:
    """Name → the functions handed over as values that it can hold: bound to a value naming them
    (``callbacks = [save_ckpt]``, ``actions = {"save": save_weights}``, ``saver =
    functools.partial(save, path)``), or filled with them (``self.hooks.append(hook)``, ``hook``
    the parameter ``trainer.add_hook(save_ckpt)`` fills)."""
    held: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        found = assign.names & handed
        for target in assign.targets if found else ():
            held.setdefault(target, set()).update(found)
    for call in a.r.calls:
        func = call.node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _FILLING_METHODS:
            continue
        holder = dotted(func.value)
        for arg in call.node.args if holder is not None else ():
            value = dotted(arg.value)
            origins = {value} | a.origins_of(call.function, value) if value is not None else set()
            if found := origins & handed:
                held.setdefault(holder or "", set()).update(found)
    return held


def _bound_by_partial(a: Analysis) -> dict[str, int]:
    """Function → the positional arguments ``functools.partial(function, ...)`` binds (-1 where
    two hand-overs bind different numbers: what fills which parameter is then unknown)."""
    found: dict[str, int] = {}
    for call in a.r.calls:
        args = call.node.args
        if (
            a.r.names.qualified_name(call.node.func, call.scope) != "functools.partial"
            or not args
            or not isinstance(args[0].value, cst.Name)
        ):
            continue
        bound = sum(arg.keyword is None and not arg.star for arg in args[1:])
        name = args[0].value.value
        found[name] = bound if found.get(name, bound) == bound else -1
    return found


def _parameters_left(params: tuple[str, ...], bound: int, limit: int | None) -> tuple[str, ...] | None:
    """The parameters a call of a function handed over fills, past the ``bound`` first ones."""
    if bound < 0 or (limit is not None and bound > limit):
        return None
    return params[bound:]


def _calls_out_of_sight(a: Analysis, held: dict[str, set[str]]) -> list[tuple[CallRecord, str]]:
    """Calls of a callable held as a value, with the name holding it: a name bound to one
    (``saver(model, epoch)``), a loop's target (``for hook in self.hooks: hook(...)``: the
    iterated ``self.hooks``), an entry of a table (``table["summary"](...)``: ``table``)."""
    found = []
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Subscript):
            holder = dotted(func.value)
        elif isinstance(func, cst.Name) and func.value in held:
            holder = func.value
        elif isinstance(func, cst.Name):
            holder = next((loop.iterated for loop in call.loops if func.value in loop.targets), None)
        else:
            holder = None
        if holder is not None and holder in held:
            found.append((call, holder))
    return found


def handed_to_worker_processes(a: Analysis) -> set[tuple[str, ScopeKey]]:
    """Names handed to code that runs in other processes (``DataLoader(collate_fn=collate)``,
    ``worker_init_fn=seed_worker``): called in a worker, never where the accelerator is, so no edge
    (a ``partial`` holding the accelerator would have to be pickled into a spawned worker)."""
    handed: set[tuple[str, ScopeKey]] = set()
    for call in a.r.calls:
        qualified = a.r.names.qualified_name(call.node.func, call.scope, strict=False)
        keywords = WORKER_CALLBACKS.get(qualified or "", frozenset())
        for arg in call.node.args:
            handed_name = dotted(arg.value) if arg.keyword is not None and arg.keyword.value in keywords else None
            if handed_name is not None:
                handed.add((handed_name, call.scope))
    return handed


def _into_nested_function(a: Analysis, call: CallRecord, nested: str) -> None:
    """A call of the function nested at path ``nested``: from the function (or the nested one
    beside it) whose code makes it, and from the loops around it."""
    caller = nested_function(a, call.scope) or call.function
    a.facts.call_graph.setdefault(caller, set()).add(nested)
    for loop in call.loops:
        loop.calls.add(nested)


def _method_nested_callee(a: Analysis, call: CallRecord) -> str | None:
    """``Trainer.fit.evaluate`` for a call ``evaluate(...)`` in ``Trainer.fit`` (or in a function
    nested in it) of the ``def evaluate`` written in the method's body; None for any other call."""
    func = call.node.func
    if not isinstance(func, cst.Name) or len(call.scope) < 2:
        return None
    binding = a.r.names.binding_scope(func.value, call.scope)
    path = ".".join((*binding, func.value)) if binding else None
    return path if path in a.r.method_nested_defs else None


def _arguments_into_nested(a: Analysis, call: CallRecord, params: tuple[str, ...]) -> None:
    """What a call of a function nested in a function's or a method's body passes flows into its
    parameters, as for a module-level function's. They are names of the module-level function or
    class it is written in (the analysis' "function" for all its code): ``evaluate(test_loader)``
    makes its ``loader`` the test loader, so its loop is an evaluation over it."""
    for param, arg in parameters_filled(call.node, params):
        name = dotted(arg.value)
        if name is not None and param != name:
            a.arguments.setdefault((call.function, param), set()).add((call.function, name))


@provider(provides=("functions_called_out_of_sight",))
def functions_called_out_of_sight(a: Analysis) -> None:
    """The module's functions it only uses as values (``hooks = [log_epoch]``), decided on CPython's
    tree of the source (already parsed: the pipeline judged the file with it), and only when some
    function's name appears more often than its definition and its calls by name."""
    called = Counter(call.node.func.value for call in a.r.calls if isinstance(call.node.func, cst.Name))
    defined = set(a.r.defs) | a.r.guard_defs
    # Every name node counts (an attribute's name too): a function none of whose mentions is
    # left over is called by name wherever it is named.
    if not any(len(a.r.words.get(name, ())) > called[name] + 1 for name in defined):
        return
    source, module = a.source, a.module

    @cache
    def found() -> frozenset[str]:
        text = source if source is not None or module is None else module.code
        tree = python_ast(text) if text is not None else None
        return frozenset(functions_used_only_as_values(tree)) if tree is not None else frozenset()

    a.facts.functions_called_out_of_sight = found


def _into_method(a: Analysis, call: CallRecord, callee: cst.Attribute) -> None:
    """``trainer.fit(train_loader, val_loader)``, ``Trainer(...).fit(...)`` or, in a method,
    ``self.evaluate(val_loader)``: the arguments flow into the parameters of that method of
    the file's class (keyed by the class name, as for ``__init__``), so its loop over
    ``loader`` is a loop over the (prepared) validation loader."""
    owner = instance_class(a, call, callee.value)
    if owner is None:
        return
    definition = next((m for m in class_methods(a.r.classes[owner].node) if m.name.value == callee.attr.value), None)
    if definition is None or a.r.classes[owner].self_names.get(callee.attr.value) is None:
        return
    _arguments_into(a, call, owner, parameter_names(definition)[1:], held_name, named_only=True)


#: What building an instance runs of its class's code, in this order of preference: its
#: ``__init__``, or (a dataclass's generated ``__init__`` calls it) its ``__post_init__``.
CONSTRUCTOR_METHODS = ("__init__", "__post_init__")


def constructor_method(a: Analysis, name: str) -> str | None:
    """The method of the file's classes that building an instance of the file's class ``name``
    runs (``Helper(root)``), keyed ``Class.method`` as a method call's callee is:
    ``Helper.__init__``, a ``@dataclass``'s ``Helper.__post_init__``, or, for a class defining
    neither, that of its first base of the file defining one (``Base.__init__``); None where the
    class and its bases of the file define neither (``object.__init__``, or another module's)."""
    pending, seen = [name], set()
    while pending:
        owner = pending.pop(0)
        record = a.r.classes.get(owner)
        if record is None or owner in seen:
            continue
        seen.add(owner)
        methods = {method.name.value for method in class_methods(record.node)}
        special = next((method for method in CONSTRUCTOR_METHODS if method in methods), None)
        if special is not None:
            return f"{owner}.{special}"
        pending.extend(base for written in record.node.bases if (base := dotted(written.value)) is not None)
    return None


def instance_class(a: Analysis, call: CallRecord | AssignRecord, receiver: cst.BaseExpression) -> str | None:
    """The file's class ``receiver`` is an instance of: ``self`` in one of its methods, a
    construction (``Trainer(...)``), or a name the same function binds to one."""
    return instance_class_at(a, call.scope, receiver)


def program_instance_class(a: Analysis, call: CallRecord, receiver: cst.BaseExpression) -> str | None:
    """The other module's class (qualified) ``receiver`` is an instance of: a construction
    (``Trainer(...).fit``), or a name the function of ``call`` binds to one construction of it
    (``trainer = Trainer(...)``, ``dataset = ContrastiveLearningDataset(root)``)."""
    if isinstance(receiver, cst.Call):
        return program_callee(a.facts, receiver.func, call.scope)
    if not isinstance(receiver, cst.Name):
        return None
    built = {
        program_callee(a.facts, assign.value.func, assign.scope)
        for assign in a.r.assigns
        if assign.function == call.function and receiver.value in assign.targets and isinstance(assign.value, cst.Call)
    }
    return built.pop() if len(built) == 1 else None


def instance_class_at(a: Analysis, scope: ScopeKey, receiver: cst.BaseExpression) -> str | None:
    """:func:`instance_class` of a receiver standing in ``scope``."""
    if isinstance(receiver, cst.Call):
        built = dotted(receiver.func)
        return built if built in a.r.classes else None
    if not isinstance(receiver, cst.Name):
        return None
    function = scope[0] if scope else MODULE
    if len(scope) >= 2 and scope[0] in a.r.classes and a.r.classes[scope[0]].self_names.get(scope[1]) == receiver.value:
        return scope[0]
    if a.instances is None:
        a.instances = {}
        for assign in a.r.assigns:
            value = assign.value
            if isinstance(value, cst.Call) and dotted(value.func) in a.r.classes:
                for target in assign.targets:
                    a.instances.setdefault((assign.function, target), set()).add(dotted(value.func) or "")
    found = a.instances.get((function, receiver.value), set())
    return next(iter(found)) if len(found) == 1 else None


def _into_pass_through_method(a: Analysis, call: CallRecord, method: str) -> None:
    """``metric_logger.log_every(data_loader, ...)`` with the file's own ``MetricLogger``:
    the loader flows into the method's first parameter (keyed by the class name, as for
    ``__init__``), so the method's loop over it is a loop over the (prepared) loader."""
    if not call.node.args or call.node.args[0].keyword is not None or call.node.args[0].star:
        return
    value = dotted(call.node.args[0].value)
    if value is None:
        return
    for name, owner in a.r.classes.items():
        definition = next((m for m in class_methods(owner.node) if m.name.value == method), None)
        if definition is None or owner.self_names.get(method) is None:
            continue
        params = parameter_names(definition)
        if len(params) >= 2:
            a.arguments.setdefault((name, params[1]), set()).add((call.function, value))


def _construction(a: Analysis, call: CallRecord, owner: ClassRecord) -> None:
    """``Trainer(model, train_data, ...)``: each argument flows into ``__init__``'s parameter
    (keyed by the class name, which is the analysis' "function" for all its methods)."""
    name = owner.node.name.value
    local = a.r.names.scopes.get(call.scope) if call.scope else None
    if local is not None and local.binds(name):
        return  # a local of the same name
    a.constructions.setdefault(name, []).append(call)
    initialiser = a.initialising_class(name)
    if initialiser != name:
        # ``MSETrainer(model, loader)`` with no ``__init__`` of its own runs its base's: the
        # base is constructed there too, and the arguments fill the base's parameters.
        a.constructions.setdefault(initialiser, []).append(call)
        name, owner = initialiser, a.r.classes[initialiser]
    _arguments_into(a, call, name, owner.init_params or ())


def _arguments_into(
    a: Analysis,
    call: CallRecord,
    callee: str,
    params: tuple[str, ...],
    name_of: Callable[[cst.BaseExpression], str | None] = held_name,
    *,
    named_only: bool = False,
) -> None:
    """What each argument of a call of the file's function, class or method ``callee`` (a
    method's keyed by its class) fills: the name it is held under (``arguments``; ``name_of``
    names it: a dotted name or a settings entry, ``config["device"]``, for a function's or a
    class's; a dotted name for a method's), or the value itself where it is no name
    (``argument_values``: ``Runner({"gpu": 0})``). With ``named_only``, a keyword none of
    ``params`` names is passed over (a method's; a class's ``**kwargs`` entry is read back as
    ``kwargs['model']``)."""
    for param, arg in parameters_filled(call.node, params):
        if named_only and param not in params:
            continue
        name = name_of(arg.value)
        if name is not None:
            a.arguments.setdefault((callee, param), set()).add((call.function, name))
        else:
            a.argument_values.setdefault((callee, param), []).append((call.function, arg.value))


def _attribute_aliases(a: Analysis) -> None:
    """``self.model = model.to(device)`` in a class: the attribute is what the name holds
    (recorded like an argument flowing into a parameter, so roles and origins follow it)."""
    for assign in a.r.assigns:
        owner = a.r.classes.get(assign.function)
        if owner is None or len(assign.scope) < 2:
            continue
        instance = owner.self_names.get(assign.scope[1])
        values: list[cst.BaseExpression] = [assign.value]
        if len(assign.targets) != 1:
            # ``self.model, self.loader = model, loader``: pairwise.
            value = assign.value
            if not isinstance(value, (cst.Tuple, cst.List)):
                _unpacked_aliases(a, assign, instance)
                continue
            if len(value.elements) != len(assign.targets):
                continue
            if any(isinstance(element, cst.StarredElement) for element in value.elements):
                continue
            values = [element.value for element in value.elements]
        for target, value in zip(assign.targets, values):
            peeled = constructed(value)
            if isinstance(peeled, cst.Name) and peeled.value in _CONSTANTS:
                continue  # ``self.model = None`` until a method builds it: no object flows in
            source = dotted(peeled) or _keyword_argument(peeled, owner, assign.scope[1])
            if instance is None or not target.startswith(instance + ".") or source is None or source == target:
                continue
            a.arguments.setdefault((assign.function, target), set()).add((assign.function, source))


def _names_held_in_locals(a: Analysis) -> None:
    """``loader = val_loader`` under ``if``/``else`` in a function or at the top level, and
    ``data_loader = self.celeba_loader`` in a method (StarGAN's ``test()``), the local then looped
    over: it holds what the other name holds, each binding one more origin (recorded like an
    argument, so roles and origins follow it: the loop over ``loader`` iterates the loaders it
    picks from). Only names a loop of the same function iterates: what else a local stands for
    (``model = self.model``) is the plan's (``plan._attribute_aliases``). A local no binding of
    which builds a value of its own in its scope is ``names_picked_by_locals``."""
    looped = {(loop.function, loop.iterated) for loop in a.r.loops if loop.iterated is not None}
    picked: dict[tuple[ScopeKey, str], set[str]] = {}
    builds: set[tuple[ScopeKey, str]] = set()
    for assign in a.r.assigns:
        for target in assign.targets:
            if (assign.function, target) in looped:
                source = _picked_name(a, assign) if len(assign.targets) == 1 else None
                if source is None:
                    builds.add((assign.scope, target))
                else:
                    picked.setdefault((assign.scope, target), set()).add(source)
                    a.arguments.setdefault((assign.function, target), set()).add((assign.function, source))
    for key, sources in picked.items():
        if key not in builds:
            a.facts.names_picked_by_locals[key] = sources


def _picked_name(a: Analysis, assign: AssignRecord) -> str | None:
    """The other name ``assign`` binds its one target to (``val_loader``; ``self.celeba_loader``
    in a method, through the method's own instance), None where it builds a value."""
    target, source = assign.targets[0], dotted(assign.value)
    if source is None or source == target:
        return None
    owner = a.r.classes.get(assign.function)
    if owner is not None:
        instance = owner.self_names.get(assign.scope[1]) if len(assign.scope) > 1 else None
        return source if instance is not None and source.startswith(instance + ".") else None
    return None if "." in source else source


def _unpacked_aliases(a: Analysis, assign: AssignRecord, instance: str | None) -> None:
    """``self.train_loader, self.test_loader = loaders`` in a class, ``loaders`` a parameter
    handed ``(train_loader, test_loader)`` (or a name bound to that tuple where it is handed
    over): each attribute is what the tuple holds at its position (recorded like an argument, so
    roles and origins follow it: the evaluation over ``self.test_loader`` is over the test
    loader its caller prepares)."""
    held = dotted(assign.value)
    targets = unpacked_targets(assign)
    if held is None or instance is None or targets is None:
        return
    for index, target in enumerate(targets):
        if target is None or not target.startswith(instance + "."):
            continue
        for site in elements_held(a, assign.function, held, index, len(targets), frozenset()):
            if site != (assign.function, target):
                a.arguments.setdefault((assign.function, target), set()).add(site)


def unpacked_targets(assign: AssignRecord) -> list[str | None] | None:
    """The dotted names ``a, self.b = value`` binds, by position (None for a nested or starred
    one); None when the assignment does not unpack one tuple."""
    if len(assign.node.targets) != 1:
        return None
    target = assign.node.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    if any(isinstance(element, cst.StarredElement) for element in target.elements):
        return None
    return [dotted(element.value) for element in target.elements]


def elements_held(
    a: Analysis, function: str, name: str, index: int, length: int, seen: frozenset[tuple[str, str]]
) -> set[tuple[str, str]]:
    """(function, name) of what the tuple held by ``name`` in ``function`` has at ``index``: a
    tuple of ``length`` names bound to it there, handed to it as a parameter, or bound to the
    name handed over (followed through the callers); or the part of the parameter a caller in
    another module fills (``loaders[1]``: the seeds' ``parameter_roles``)."""
    key = (function, name)
    if key in seen:
        return set()
    seen = seen | {key}
    found: set[tuple[str, str]] = set()
    for caller, value in a.argument_values.get(key, ()):
        found |= _element_of(caller, value, index, length)
    for caller, argument in a.arguments.get(key, ()):
        found |= elements_held(a, caller, argument, index, length, seen)
    for assign in a.r.assigns:
        if assign.function == function and assign.targets == (name,):
            found |= _element_of(function, assign.value, index, length)
    part = f"{name}[{index}]"
    if not found and a.seeds is not None and any(part in names for _, names in a.seeds.parameter_roles):
        # Handed the tuple by a caller in another module: its element there is a role here.
        found.add(key[:1] + (part,))
    return found


def _element_of(function: str, value: cst.BaseExpression, index: int, length: int) -> set[tuple[str, str]]:
    """``{(function, "test_loader")}`` for element ``index`` of ``(train_loader, test_loader)``
    (a tuple or list of ``length`` elements, none starred); nothing for any other value."""
    if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != length:
        return set()
    if any(isinstance(element, cst.StarredElement) for element in value.elements):
        return set()
    element = dotted(value.elements[index].value)
    return {(function, element)} if element is not None else set()


def _loop_aliases(a: Analysis) -> None:
    """``for split, loader in [("val", val_loader), ("test", test_loader)]:``: the loop's
    target holds each element in turn (recorded like an argument flowing into a parameter, so
    what it is handed to sees where it comes from)."""
    for loop in a.r.loops:
        elements = loop.node.iter
        if not isinstance(elements, (cst.List, cst.Tuple)):
            continue
        for element in elements.elements:
            if isinstance(element, cst.StarredElement):
                break
            pairs = pairwise(
                loop.node.target.target if isinstance(loop.node.target, cst.AssignTarget) else loop.node.target,
                element.value,
            )
            for target, source in pairs:
                if target != source:
                    a.arguments.setdefault((loop.function, target), set()).add((loop.function, source))


def step_calls(a: Analysis) -> Iterator[tuple[CallRecord, str]]:
    """Each ``.step()`` call of the script with its receiver's name: an optimizer's
    (``optimizer.step()``, ``self.optimizer.step()``), also a scheduler's or an environment's."""
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "step":
            receiver = dotted(func.value)
            if receiver is not None:
                yield call, receiver


def stepped(a: Analysis) -> set[str]:
    """Names whose ``.step()`` the script calls (see :func:`step_calls`)."""
    return {receiver for _, receiver in step_calls(a)}
