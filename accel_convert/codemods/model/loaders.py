"""Data loaders: functions that return them, loaders built inline as arguments, the batch size."""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.devices import constructed, construction
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.iteration import iterated
from accel_convert.codemods.engine.loader_values import holds_loaders
from accel_convert.codemods.engine.names import BuiltinOf, ScopeKey, builtins_at
from accel_convert.codemods.engine.syntax import (
    argument_for,
    class_methods,
    concatenated_rows,
    constant_item,
    dotted,
    nodes_in,
    parameter_filled,
    parameter_names,
)
from accel_convert.codemods.engine.torch_names import (
    DATA_LOADERS,
)
from accel_convert.codemods.engine.walk import variables_read
from accel_convert.codemods.model.calls import elements_held, instance_class_at, unpacked_targets
from accel_convert.codemods.model.plan import is_any_prepare
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
    LoopRecord,
)
from accel_convert.codemods.model.state import Analysis
from accel_convert.records import record


@provider(provides=("loader_classes",))
def loader_classes(a: Analysis) -> None:
    """The file's module-level classes deriving from a data loader: torch's ``DataLoader``, a
    loader class of another module of the program (the seeds), or another such class of the file,
    followed to a fixed point (``MnistDataLoader(BaseDataLoader)``, ``BaseDataLoader(DataLoader)``)."""
    facts = a.facts
    grown = True
    while grown:
        grown = False
        for name, owner in a.r.classes.items():
            if name not in facts.loader_classes and any(
                facts.builds_data_loader(base.value) for base in owner.node.bases
            ):
                facts.loader_classes.add(name)
                grown = True


@provider(needs=("loader_classes",), provides=("loader_factories", "loader_returning_functions", "loader_positions"))
def loader_factories(a: Analysis) -> None:
    """Module-level functions that return DataLoaders (``return train_loader, test_loader``
    or ``return DataLoader(...)``) → the positions of the loaders in the tuple they return
    (``return n_words, train_loader``: ``{1}``; None: what they return is one loader)."""
    built_in = {  # (function, name) for every ``name = DataLoader(...)``
        (assign.function, target)
        for assign in a.r.assigns
        if a.constructs_loader(constructed(assign.value), assign.scope)
        for target in assign.targets
    }
    built_in |= _loader_aliases(a, built_in)
    lists = _lists_of_loaders(a, built_in)
    # A method (``self.make_loader()``) is a factory the same way: scope (class, method).
    returns = [((function,), value) for function, value in a.r.returns] + list(a.r.method_returns)
    factories: dict[tuple[str, ...], set[int] | None] = {}
    for scope, value in returns:
        if isinstance(value, cst.Name) and (scope[0], value.value) in lists:
            factories[scope] = None  # ``return ds``: whatever the caller unpacks is a loader
        else:
            _add_returned_loaders(a, factories, scope, value, built_in)
    a.loader_factories = {scope[0]: positions for scope, positions in factories.items() if len(scope) == 1}
    a.loader_dict_factories = _dict_factories(a, built_in)
    a.loader_methods = {(scope[0], scope[1]): positions for scope, positions in factories.items() if len(scope) == 2}
    a.facts.loader_returning_functions = set(a.loader_factories)
    a.facts.loader_positions = {
        function: (
            None if positions is None else tuple(sorted(positions)),
            tuple(sorted(a.loader_groups.get((function,), ()))),
        )
        for function, positions in a.loader_factories.items()
    }


def _loader_aliases(a: Analysis, built_in: AbstractSet[tuple[str, str]]) -> set[tuple[str, str]]:
    """(function, name) for every plain ``name = other`` of a function where ``other`` holds a
    loader it builds (``data_loader = train_loader`` before Beta-VAE's ``return data_loader``),
    transitively: the name holds the same loader."""
    found: set[tuple[str, str]] = set()
    changed = True
    while changed:
        changed = False
        for assign in a.r.assigns:
            value = assign.value
            if not isinstance(value, cst.Name) or len(assign.targets) != 1:
                continue
            alias = (assign.function, assign.targets[0])
            if (assign.function, value.value) in built_in | found and alias not in built_in | found:
                found.add(alias)
                changed = True
    return found


def _add_returned_loaders(
    a: Analysis,
    factories: dict[tuple[str, ...], set[int] | None],
    scope: tuple[str, ...],
    value: cst.BaseExpression,
    built_in: set[tuple[str, str]],
) -> None:
    """Record in ``factories`` the positions at which the function or method ``scope`` returns a
    loader in ``value`` (one it builds there or bound to a name in ``built_in``)."""
    is_tuple = isinstance(value, (cst.Tuple, cst.List))
    elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]

    def is_loader(element: cst.BaseExpression) -> bool:
        return a.constructs_loader(element, scope) or (
            isinstance(element, cst.Name) and (scope[0], element.value) in built_in
        )

    for index, element in enumerate(elements):
        # A tuple of loaders inside the tuple returned (``return (DataLoader(a), DataLoader(b)),
        # n_classes``): a group of loaders at that position, unpacked by a nested target.
        group = (
            is_tuple
            and isinstance(element, (cst.Tuple, cst.List))
            and bool(element.elements)
            and all(not isinstance(inner, cst.StarredElement) and is_loader(inner.value) for inner in element.elements)
        )
        if is_loader(element) or group:
            positions = factories.get(scope, set()) if scope in factories else set()
            factories[scope] = None if not is_tuple or positions is None else positions | {index}
        if group:
            a.loader_groups.setdefault(scope, set()).add(index)


def _dict_factories(a: Analysis, built_in: set[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """Module-level functions every ``return`` of which is a dict literal of loaders keyed by
    strings (``return {"train": train_loader, "test": DataLoader(...)}``) → its keys."""
    returned: dict[str, set[tuple[str, ...] | None]] = {}
    for function, value in a.r.returns:
        keys: tuple[str, ...] | None = None
        if isinstance(value, cst.Dict) and value.elements:
            elements = [e for e in value.elements if isinstance(e, cst.DictElement)]
            found = tuple(e.key.evaluated_value for e in elements if isinstance(e.key, cst.SimpleString))
            loaders = all(
                a.constructs_loader(e.value, (function,))
                or (isinstance(e.value, cst.Name) and (function, e.value.value) in built_in)
                for e in elements
            )
            if len(elements) == len(value.elements) == len(found) and loaders:
                keys = tuple(str(key) for key in found)
        returned.setdefault(function, set()).add(keys)
    return {function: keys for function, (keys, *others) in returned.items() if not others and keys}


def _lists_of_loaders(a: Analysis, built_in: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """(function, name) of the lists a function fills with the loaders it builds and nothing
    else (``ds = []``, ``ds.append(train_loader)``, ``ds.append(test_loader)``, then ``return
    ds``: pytorch-playground's ``dataset.get``)."""
    filled: dict[tuple[str, str], bool] = {}
    for call in a.r.calls:
        func = call.node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "append" or not isinstance(func.value, cst.Name):
            continue
        key = (call.function, func.value.value)
        item = call.node.args[0].value if len(call.node.args) == 1 else None
        loader = isinstance(item, cst.Name) and (call.function, item.value) in built_in
        filled[key] = filled.get(key, True) and loader
    return {key for key, only_loaders in filled.items() if only_loaders}


def loader_targets(
    assign: AssignRecord, positions: set[int] | None, groups: AbstractSet[int] = frozenset()
) -> set[str]:
    """The names ``n_words, train_loader = get_data()`` binds to loaders: those at the
    positions the factory returns loaders at (every name when unpacking differs). At a position
    of ``groups`` (a tuple of loaders returned inside the tuple), the names of a target unpacking
    it (``(train_loader, test_loader), n = get_data()``), and none for a name holding it whole. A
    trainer's attributes unpack the same way (``self.train_loader, self.nclass =
    make_data_loader(args)``: ``self.nclass`` is no loader)."""
    targets = assign.node.targets
    target = targets[0].target if len(targets) == 1 else None
    if positions is None or not isinstance(target, (cst.Tuple, cst.List)):
        return set(assign.targets)
    found: set[str] = set()
    for index, element in enumerate(target.elements):
        part = element.value
        if index in groups and isinstance(part, (cst.Tuple, cst.List)):
            inner = [dotted(item.value) for item in part.elements]
            if any(name is None for name in inner):
                return set(assign.targets)
            found |= {name for name in inner if name is not None}
            continue
        name = dotted(part)
        if name is None:
            return set(assign.targets)
        if index in positions and index not in groups:
            found.add(name)
    return found


@provider(
    needs=("loader_factories", "loader_classes", "arguments", "prepared"),
    provides=(
        "loader_tuples",
        "loader_tuple_parts",
        "loader_tuple_bindings",
        "loader_tuple_factories",
        "loader_dict_names",
        "loaders_unpacked_from_parameters",
    ),
    refines=("train_loaders", "arguments"),
)
def loader_tuples(a: Analysis) -> None:
    """Loaders travelling as one tuple: a name bound only to a tuple of loaders of known length
    (``loaders = get_loaders(...)``, a factory of the file returning ``train_loader,
    test_loader``; ``loaders = (train_loader, test_loader)``) holds that many loaders
    (``loader_tuples``; a loader, so it is prepared, by its elements). A name unpacking one
    (``train_loader, test_loader = loaders``, here or in the function it is handed to, or into a
    trainer's attributes) is the loader at its position: recorded like an argument flowing into a
    parameter, so it takes the loader's role and its loops are training or evaluation over a
    prepared loader. Unpacked from a parameter, it is no object of that function's own to
    prepare: its caller prepared the tuple (``loaders_unpacked_from_parameters``). A tuple written
    of the script's loader names holds loaders that are prepared by their own names: it is bound
    again to them once they are (``loader_tuple_parts``), so each loader is prepared once. A
    name holding such a tuple on some paths and one loader on the others (``dloader`` of
    ``get_train_valid_loader(...)`` when training, of ``get_test_loader(...)`` otherwise) is a
    loader whose parts are loaders too, each binding prepared by its shape
    (``loader_tuple_bindings``). A name taking a loader tuple's element (``self.train_loader =
    data_loader[0]``) is the loader at that position, as one unpacking it."""
    facts = a.facts
    factory_lengths = _tuple_factory_lengths(a)
    facts.loader_tuple_factories.update(factory_lengths)
    for name, (found, parts, tuple_lines) in _binding_shapes(a, factory_lengths).items():
        if len(found) == 2 and 1 in found and None not in found:
            # A tuple of loaders on some paths, one loader on the others.
            facts.loader_tuple_bindings[name] = tuple_lines
            facts.train_loaders.add(name)  # sorted into train/eval by the loops
            continue
        (length,) = found if len(found) == 1 else (None,)
        if length is not None and length > 1:
            _record_tuple(a, name, length, parts)
    _loader_dict_names(a)
    _dict_loaders_passed(a)
    for assign in a.r.assigns:
        _unpacked_loaders(a, assign)
        _loader_taken_by_index(a, assign)
    for loop in a.r.loops:
        _indexed_loader(a, loop)


_Shapes = tuple[set[int | None], set[tuple[str, ...] | None], dict[int, int]]


def _binding_shapes(a: Analysis, factory_lengths: dict[str, int]) -> dict[str, _Shapes]:
    """Name → how many loaders each of its bindings holds (1: one loader, None: anything but
    loaders), the loader names each tuple binding writes, and the original line of each tuple
    binding → its length."""
    shapes: dict[str, _Shapes] = {}
    for assign in a.r.assigns:
        if _prepares_own_elements(assign):
            continue  # ``loaders = accelerator.prepare(*loaders)``: the same loaders, prepared
        length = _loader_tuple_length(a, assign, factory_lengths)
        if length is None and _binds_one_loader(a, assign):
            length = 1
        for target in assign.targets:
            lengths, parts, lines = shapes.setdefault(target, (set(), set(), {}))
            lengths.add(length)
            parts.add(_loader_names_written(a, assign) if length is not None else None)
            if length is not None and length > 1:
                lines[a.site(assign.node).line] = length
    return shapes


def _record_tuple(a: Analysis, name: str, length: int, parts: set[tuple[str, ...] | None]) -> None:
    """``name`` holds a tuple of ``length`` loaders on every path (see :func:`loader_tuples`)."""
    facts = a.facts
    facts.loader_tuples[name] = length
    facts.train_loaders.add(name)  # sorted into train/eval by the loops
    (written,) = parts if len(parts) == 1 else (None,)
    if written is not None:
        facts.loader_tuple_parts[name] = written
        if facts.prepared.issuperset(written):
            facts.prepared.add(name)  # bound again to the loaders the script prepared


def _loader_dict_names(a: Analysis) -> None:
    """Names every binding of which is a call of a dict factory of the file (``loaders =
    get_loaders(...)``), or bound once to a dict of loaders written there (``dataloaders = {x:
    DataLoader(...) for x in ["train", "val"]}``; bound twice, which one trains is a guess): a
    dict of loaders, prepared by its values (``loader_dict_names``). Its
    prepared form (``loaders = {key: accelerator.prepare(loader) for key, loader in
    loaders.items()}``) binds the same loaders, prepared."""
    facts = a.facts
    found: dict[str, set[bool]] = {}
    bindings: dict[str, int] = {}
    for assign in a.r.assigns:
        for target in assign.targets:
            bindings[target] = bindings.get(target, 0) + 1
    for assign in a.r.assigns:
        if len(assign.targets) != 1 or _prepares_own_values(assign):
            continue
        value = assign.value
        local = a.r.names.scopes.get(assign.scope) if assign.scope else None
        called = (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Name)
            and value.func.value in a.loader_dict_factories
            and not (local is not None and local.binds(value.func.value))
        ) or (holds_loaders(value, facts) and bindings[assign.targets[0]] == 1)
        found.setdefault(assign.targets[0], set()).add(called)
    for name, calls in found.items():
        if calls == {True}:
            facts.loader_dict_names.add(name)
            facts.train_loaders.add(name)  # sorted into train/eval by the loops
            if any(_prepares_own_values(assign) and assign.targets == (name,) for assign in a.r.assigns):
                facts.prepared.add(name)


def _dict_loaders_passed(a: Analysis) -> None:
    """``test(model, dataloaders["val"])`` with ``dataloaders`` a dict of loaders: the parameter
    receives one of its loaders, prepared with it, so it takes the dict's role (as a loop over
    ``dataloaders["val"]`` does, :func:`_indexed_loader`): an evaluation helper's loop over it is
    one over a prepared loader, whose outputs are gathered."""
    dicts = a.facts.loader_dict_names
    for key, received in a.arguments.items():
        for caller, name in list(received):
            held, bracket, _ = name.partition('["')
            if bracket and held in dicts:
                a.arguments[key].add((caller, held))


def _prepares_own_values(assign: AssignRecord) -> bool:
    """``loaders = {key: accelerator.prepare(loader) for key, loader in loaders.items()}``: what a
    converted script writes for a dict of loaders."""
    value = assign.value
    if len(assign.targets) != 1 or not isinstance(value, cst.DictComp) or not is_any_prepare(value.value):
        return False
    source = value.for_in.iter
    return (
        isinstance(source, cst.Call)
        and isinstance(source.func, cst.Attribute)
        and source.func.attr.value == "items"
        and dotted(source.func.value) == assign.targets[0]
    )


def _tuple_factory_lengths(a: Analysis) -> dict[str, int]:
    """Module-level loader factory → the length of the tuple it returns, where every ``return``
    of it is a tuple of that many loaders (at least two; ``return train_loader, test_loader``), or
    a list of them (``return [train_loader, test_loader]``: held, unpacked and indexed alike)."""
    returned: dict[str, set[int | None]] = {}
    for function, value in a.r.returns:
        positions = a.loader_factories.get(function)
        elements = value.elements if isinstance(value, (cst.Tuple, cst.List)) else ()
        whole = (
            positions is not None
            and len(elements) >= 2
            and positions == set(range(len(elements)))
            and not any(isinstance(element, cst.StarredElement) for element in elements)
        )
        returned.setdefault(function, set()).add(len(elements) if whole else None)
    return {function: length for function, (length, *others) in returned.items() if not others and length}


def _prepares_own_elements(assign: AssignRecord) -> bool:
    """``loaders = accelerator.prepare(*loaders)``: what a converted script writes for a loader
    tuple (whatever the accelerator is called: the analysis reads the script before it knows)."""
    value = assign.value
    if len(assign.targets) != 1 or not is_any_prepare(value):
        return False
    assert isinstance(value, cst.Call)
    return len(value.args) == 1 and value.args[0].star == "*" and dotted(value.args[0].value) == assign.targets[0]


def _loader_tuple_length(a: Analysis, assign: AssignRecord, factory_lengths: dict[str, int]) -> int | None:
    """How many loaders ``name = get_loaders(...)`` or ``name = (train_loader, test_loader)``
    binds its one name to; None for any other assignment."""
    if len(assign.node.targets) != 1 or not isinstance(assign.node.targets[0].target, cst.Name):
        return None
    value = assign.value
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        local = a.r.names.scopes.get(assign.scope) if assign.scope else None
        if local is not None and local.binds(value.func.value):
            return None  # a local of the same name
        if value.func.value in factory_lengths:
            return factory_lengths[value.func.value]
    if isinstance(value, cst.Call) and a.seeds is not None:
        # A factory of another module of the program (``from data import get_loaders``).
        return dict(a.seeds.loader_tuple_factories).get(program_callee(a.facts, value.func, assign.scope) or "")
    if not isinstance(value, cst.Tuple) or len(value.elements) < 2:
        return None
    if any(isinstance(element, cst.StarredElement) for element in value.elements):
        return None
    loaders = a.facts.train_loaders
    return len(value.elements) if all(dotted(e.value) in loaders for e in value.elements) else None


def _binds_one_loader(a: Analysis, assign: AssignRecord) -> bool:
    """Whether ``assign`` binds its one name to one loader: built there (``DataLoader(...)``), or
    returned by a factory of the file or of another module of the program returning one."""
    if len(assign.targets) != 1:
        return False
    value = assign.value
    if a.constructs_loader(constructed(value), assign.scope):
        return True
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Name) and value.func.value in a.loader_factories:
        local = a.r.names.scopes.get(assign.scope) if assign.scope else None
        return a.loader_factories[value.func.value] is None and not (
            local is not None and local.binds(value.func.value)
        )
    if a.seeds is None:
        return False
    callee = program_callee(a.facts, value.func, assign.scope)
    return callee in a.seeds.loader_factories and callee not in dict(a.seeds.loader_tuple_factories)


def _loader_names_written(a: Analysis, assign: AssignRecord) -> tuple[str, ...] | None:
    """The loader names ``loaders = (train_loader, test_loader)`` writes its tuple of (each a
    plain name of a loader); None for a tuple of anything else, or a factory's call."""
    value = assign.value
    if not isinstance(value, cst.Tuple):
        return None
    names = tuple(e.value.value for e in value.elements if isinstance(e.value, cst.Name))
    if len(names) != len(value.elements) or not all(name in a.facts.train_loaders for name in names):
        return None
    return names


def _unpacked_loaders(a: Analysis, assign: AssignRecord) -> None:
    """``train_loader, test_loader = loaders`` with ``loaders`` a loader tuple as long (bound in
    the function, or handed to it as a parameter): each name is the loader at its position (see
    :func:`loader_tuples`)."""
    held = dotted(assign.value)
    targets = unpacked_targets(assign)
    if held is None or targets is None:
        return
    holders = {
        site
        for site in a.origin_sites(assign.function, held) | {(assign.function, held)}
        if a.facts.loader_tuple_length(site[1]) == len(targets)
    }
    received = held in _parameters_of(a, assign)
    for index, target in enumerate(targets):
        if target is None:
            continue
        elements = {
            site
            for site in elements_held(a, assign.function, held, index, len(targets), frozenset())
            if site[1] in a.facts.train_loaders or site[1] == f"{held}[{index}]"  # a part other modules fill
        }
        sites = (elements | holders) - {(assign.function, target)}
        if not sites:
            continue
        a.arguments.setdefault((assign.function, target), set()).update(sites)
        if received:
            a.facts.loaders_unpacked_from_parameters.add((assign.function, target))


def _indexed_loader(a: Analysis, loop: LoopRecord) -> None:
    """``for inputs, labels in loaders[0]``, with ``loaders`` a loader tuple (bound in the
    function, or handed to it): the loop iterates the loader at that position, recorded like an
    argument flowing into a parameter (as :func:`_unpacked_loaders` records a name unpacking it),
    so the loop trains or evaluates over a prepared loader of that role."""
    item = constant_item(iterated(loop.node.iter, a.r.names, loop.scope))
    if item is None or loop.iterated is None:
        return
    held, index = item
    if not isinstance(index, int):
        # ``loaders["train"]`` of a dict of loaders: one of its loaders, all prepared with it.
        origins = a.origin_sites(loop.function, held) | {(loop.function, held)}
        dicts = {site for site in origins if site[1] in a.facts.loader_dict_names}
        if dicts:
            a.arguments.setdefault((loop.function, loop.iterated), set()).update(dicts)
        return
    _record_element(a, loop.function, loop.iterated, held, index)


def _loader_taken_by_index(a: Analysis, assign: AssignRecord) -> None:
    """``train_loader = loaders[0]``, ``self.valid_loader = data_loader[1]``, with the held name a
    loader tuple (bound in the function, or handed to it): the name is the loader at that
    position, as one unpacking the tuple (:func:`_unpacked_loaders`)."""
    item = constant_item(assign.value) if len(assign.targets) == 1 else None
    if item is None or not isinstance(item[1], int):
        return
    _record_element(a, assign.function, assign.targets[0], item[0], item[1])


def _record_element(a: Analysis, function: str, name: str, held: str, index: int) -> None:
    """Record ``name`` in ``function`` as holding element ``index`` of the loader tuple ``held``
    (like an argument flowing into a parameter), where ``held`` is one of known length."""
    held_lengths = {
        site: length
        for site in a.origin_sites(function, held) | {(function, held)}
        if (length := a.facts.loader_tuple_length(site[1])) is not None
    }
    holders = set(held_lengths)
    lengths: set[int | None] = set(held_lengths.values()) or {_seeded_parts(a, held)}
    if len(lengths) != 1:
        return
    (length,) = lengths
    if length is None or not -length <= index < length:
        return
    index %= length
    elements = {
        site
        for site in elements_held(a, function, held, index, length, frozenset())
        if site[1] in a.facts.train_loaders or site[1] == f"{held}[{index}]"
    }
    a.arguments.setdefault((function, name), set()).update(elements | holders)


def _seeded_parts(a: Analysis, held: str) -> int | None:
    """How many parts (``data_loader[0]``, ``data_loader[1]``) of the parameter ``held`` callers in
    other modules fill with loaders (the seeds' roles); None where they fill none."""
    if a.seeds is None:
        return None
    parts = {name for _, names in a.seeds.parameter_roles for name in names if name.startswith(f"{held}[")}
    return len(parts) or None


def _parameters_of(a: Analysis, assign: AssignRecord) -> tuple[str, ...]:
    """The parameters of the module-level function or method the assignment is in."""
    if len(assign.scope) == 1 and assign.scope[0] in a.r.defs:
        return tuple(a.r.defs[assign.scope[0]])
    owner = a.r.classes.get(assign.function)
    if owner is None or len(assign.scope) < 2:
        return ()
    method = next((m for m in class_methods(owner.node) if m.name.value == assign.scope[1]), None)
    return tuple(parameter_names(method)) if method is not None else ()


@provider(needs=("loader_factories", "loader_classes"), provides=("inline_loaders", "train_loaders"))
def inline_loaders(a: Analysis) -> None:
    """``train(model, DataLoader(train_set, shuffle=True), optimizer)``: a loader built as the
    argument of a call of one of the file's functions (or a factory of the file returning
    one loader), or of the construction of one of its classes (``InfiniteDataLoader(DataLoader(
    train_set, shuffle=True))``, a wrapper that re-iterates it forever), has no name to prepare;
    the parameter receiving it is a loader, and the construction is prepared where it stands
    (the wrapper then iterates the prepared loader)."""
    # Functions of other modules of the program that loop over what they are given: the
    # program seeds the parameter's role there (see ``program_calls.INLINE_LOADER``).
    looping = a.seeds.looping_functions if a.seeds is not None else frozenset()
    factories = a.loader_factories
    for call in a.r.calls:
        callee = call.node.func
        if looping and program_callee(a.facts, callee, call.scope) in looping:
            for arg in call.node.args:
                value = arg.value
                if not arg.star and isinstance(value, cst.Call) and a.constructs_loader(value, call.scope):
                    a.facts.inline_loaders.append(a.site(value))
            continue
        params = callee_parameters(a, callee)
        if params is None:
            continue
        for index, arg in enumerate(call.node.args):
            value = arg.value
            if arg.star or not isinstance(value, cst.Call):
                continue
            builds = a.constructs_loader(value, call.scope) or (
                isinstance(value.func, cst.Name)
                and value.func.value in factories
                and factories[value.func.value] is None
            )
            param = parameter_filled(arg, index, params)
            if builds and param is not None:
                a.facts.train_loaders.add(param)  # sorted into train/eval by the loops
                a.facts.inline_loaders.append(a.site(value))


def callee_parameters(a: Analysis, callee: cst.BaseExpression) -> tuple[str, ...] | None:
    """The parameters the arguments of a call of ``callee`` fill: a module-level function of the
    file, or a class of the file (its ``__init__``'s, after the instance); None for any other."""
    if not isinstance(callee, cst.Name):
        return None
    if callee.value in a.r.defs:
        return tuple(a.r.defs[callee.value])
    owner = a.r.classes.get(callee.value)
    return owner.init_params if owner is not None else None


@provider(needs=("loader_factories", "loader_classes"), provides=("batch_size_expr",))
def batch_size(a: Analysis) -> None:
    """The batch size the loaders are built with: of the first loader built by assignment (a
    later one bound to a ``train`` name wins), else of the loader a loader factory returns."""
    for assign in a.r.assigns:
        value = constructed(assign.value)
        if not isinstance(value, cst.Call) or (
            isinstance(value.func, cst.Name) and value.func.value in a.loader_factories
        ):
            continue
        if a.r.names.qualified_name(value.func, assign.scope, strict=False) in DATA_LOADERS:
            _batch_size(a, value, assign)
    if a.facts.batch_size_expr is None:
        _factory_batch_size(a)


def _batch_size(a: Analysis, call: cst.Call, assign: AssignRecord) -> None:
    if a.facts.batch_size_expr is not None and not any("train" in t for t in assign.targets):
        return
    found = _batch_size_argument(a, call)
    if found is not None:
        a.facts.batch_size_expr = found


def _batch_size_argument(a: Analysis, call: cst.Call) -> str | None:
    """The ``batch_size`` a DataLoader call passes (by keyword, second positional argument, or
    in a ``**kwargs`` dict the script builds)."""
    passed = argument_for(call, 1, "batch_size")
    if passed is not None:
        return cst.Module([]).code_for_node(passed.value)
    for arg in call.args:
        if arg.star == "**" and isinstance(arg.value, cst.Name):
            found = _dict_entry(a, arg.value.value, "batch_size")
            if found is not None:
                return found
    return None


def _factory_batch_size(a: Analysis) -> None:
    """No loader built by assignment gave a batch size: the one a loader factory builds its
    loader with (``return DataLoader(dataset, batch_size=batch_size)``), which is one of its
    parameters the training code passes its batch size for."""
    for function, value in a.r.returns:
        elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
        for element in elements:
            if isinstance(element, cst.Call) and a.constructs_loader(element, (function,)):
                found = _batch_size_argument(a, element)
                if found is not None:
                    a.facts.batch_size_expr = found
                    return


def _dict_entry(a: Analysis, name: str, key: str) -> str | None:
    for assign in a.r.assigns:
        if assign.targets == (name,) and isinstance(assign.value, cst.Dict):
            for element in assign.value.elements:
                if (
                    isinstance(element, cst.DictElement)
                    and isinstance(element.key, cst.SimpleString)
                    and element.key.evaluated_value == key
                ):
                    return cst.Module([]).code_for_node(element.value)
    return None


@provider(
    needs=(
        "loader_factories",
        "loader_classes",
        "loader_loops",
        "train_loaders",
        "eval_loaders",
        "eval_loops",
        "unsharded_loaders",
    ),
    provides=("joined_rows_factories", "joined_rows_loops", "unsharded_loops"),
    refines=("unsharded_loaders", "eval_loaders", "loaders_left_unsharded"),
)
def joined_rows_loaders(a: Analysis) -> None:
    """Loaders whose ``collate_fn`` joins the samples' own rows into one tensor (YOLO's
    ``ListDataset.collate_fn``: ``torch.cat(bb_targets, 0)``, every image's boxes with a column for
    the image's index in the batch; ``syntax.concatenated_rows``): a function or a class's method of
    the file, or of another module of the program (the seeds' ``row_collates``), or what a
    factory returning such a loader returns (``joined_rows_factories``, told to the program).

    A row is not a sample, so such an evaluation cannot be gathered batch by batch: the gather
    would drop the last batch's padding by counting rows, and join indices that point at another
    process's images. An evaluation loader of this module that no training loop iterates stays
    unprepared instead (``unsharded_loaders``, no longer an evaluation loader to prepare, and
    ``loaders_left_unsharded`` for the functions of other modules it is handed to): every process
    evaluates every batch, as the original does, and computes the whole set's metrics
    (``unsharded_loops``: nothing gathered there). The price is the evaluation's speed-up. An evaluation over one that stays prepared (a training loop
    iterates it too, or another module hands it in prepared) is reported (``joined_rows_loops``)."""
    joined = _joined_rows_built(a)
    handed = a.seeds.unsharded_parameters if a.seeds is not None else frozenset()
    if not joined and not handed:
        return
    facts = a.facts
    facts.joined_rows_factories = {
        assign.function: positions
        for assign in a.r.assigns
        if assign.function in a.loader_factories
        for target in assign.targets
        if (positions := joined.get(target))
    }
    # Only evaluated, never trained on: every process evaluates every batch.
    kept = (joined.keys() & facts.eval_loaders) - facts.train_loaders
    a.unsharded_loaders |= kept
    facts.eval_loaders = set(facts.eval_loaders) - kept
    facts.loaders_left_unsharded |= kept
    evaluating = {loop.site.line for loop in facts.eval_loops}
    for loop, origins in a.loader_loops:
        line = a.site(loop.node).line
        rows = origins & joined.keys()
        if line not in evaluating or not (rows or origins & handed):
            continue
        if rows <= a.unsharded_loaders:
            facts.unsharded_loops.add(line)
        else:
            facts.joined_rows_loops[line] = frozenset(position for origin in rows for position in joined[origin])


def _joined_rows_built(a: Analysis) -> dict[str, frozenset[int]]:
    """The loaders this module builds or gets from a factory whose collate function joins the
    samples' rows → the positions of those values in a batch."""
    joined: dict[str, frozenset[int]] = {}
    factories: dict[str, frozenset[int]] = dict(a.seeds.joined_rows_factories if a.seeds is not None else ())
    for _ in range(2):  # a factory of the file is known once the loader it builds is
        for assign in a.r.assigns:
            built = constructed(assign.value)
            if not isinstance(built, cst.Call):
                continue
            positions: frozenset[int] = frozenset()
            if a.constructs_loader(built, assign.scope):
                collate = argument_for(built, None, "collate_fn")
                positions = _collated_rows(a, collate.value, assign) if collate is not None else frozenset()
            else:
                callee = dotted(built.func) if isinstance(built.func, cst.Name) else None
                positions = factories.get(callee or "") or factories.get(
                    program_callee(a.facts, built.func, assign.scope) or "", frozenset()
                )
            for target in assign.targets if positions else ():
                joined[target] = positions
        for assign in a.r.assigns:
            if assign.function in a.loader_factories and set(assign.targets) & joined.keys():
                factories[assign.function] = frozenset().union(*(joined[t] for t in assign.targets if t in joined))
    return joined


def _collated_rows(a: Analysis, collate: cst.BaseExpression, assign: AssignRecord) -> frozenset[int]:
    """The positions of the joined rows in what the collate function ``collate`` returns (empty:
    it joins none, or it cannot be followed): a function of the file, a method of a class of the
    file or of another module (``dataset.collate_fn`` of ``dataset = ListDataset(...)``,
    ``self.valid_set.collate_fn``), or an imported function."""
    imported = dict(a.seeds.row_collates) if a.seeds is not None else {}
    if isinstance(collate, cst.Name) and collate.value in a.r.defs:
        definition = _module_function(a, collate.value)
        return _rows_returned(a, definition, (collate.value,)) if definition is not None else frozenset()
    if isinstance(collate, cst.Attribute):
        own, qualified = _class_of(a, assign, collate.value)
        if own is not None:
            method = next((m for m in class_methods(a.r.classes[own].node) if m.name.value == collate.attr.value), None)
            return _rows_returned(a, method, (own, collate.attr.value)) if method is not None else frozenset()
        return imported.get(f"{qualified}.{collate.attr.value}", frozenset())
    return imported.get(program_callee(a.facts, collate, assign.scope) or "", frozenset())


def _rows_returned(a: Analysis, function: cst.FunctionDef, scope: ScopeKey) -> frozenset[int]:
    return concatenated_rows(function, lambda node: a.facts.qualified_name(node, scope))


def _module_function(a: Analysis, name: str) -> cst.FunctionDef | None:
    body = a.module.body if a.module is not None else ()
    return next((node for node in body if isinstance(node, cst.FunctionDef) and node.name.value == name), None)


def _class_of(a: Analysis, assign: AssignRecord, owner: cst.BaseExpression) -> tuple[str | None, str | None]:
    """The class ``owner`` is, or that the function holding ``assign`` binds ``owner`` to an
    instance of (``dataset = ListDataset(...)``, ``self.valid_set = ListDataset(...)``): a class of
    the file by name, or another module's by qualified name (None, None: not known)."""
    own = instance_class_at(a, assign.scope, owner)
    name = dotted(owner)
    if own is None and name in a.r.classes:
        own = name
    if own is not None:
        return own, None
    for other in a.r.assigns:
        built = construction(other.value)
        if other.function == assign.function and name in other.targets and built is not None:
            written = dotted(built.func)
            if written in a.r.classes:
                return written, None
            return None, program_callee(a.facts, built.func, other.scope)
    return None, program_callee(a.facts, owner, assign.scope)


#: Calls a batch count may be computed with: pure arithmetic, nothing that runs twice differently;
#: builtins by what they are (a script's own ``round`` is none), library functions by qualified name.
COUNTING_BUILTINS = frozenset({"len", "int", "float", "round", "min", "max"})
COUNTING_FUNCTIONS = frozenset({"math.ceil", "math.floor"})


def counts_loader_batches(
    value: cst.BaseExpression,
    loaders: Collection[str],
    counts: Collection[str],
    builtin: BuiltinOf,
    qualified: BuiltinOf,
) -> bool:
    """Whether ``value`` counts a loader's batches: plain arithmetic (:data:`COUNTING_BUILTINS`,
    :data:`COUNTING_FUNCTIONS`) on ``len(loader)`` of one of ``loaders`` (``total_steps = epochs *
    len(train_loader)``) or on a count already found (``counts``). A prepared loader has 1/N of
    the batches on each process: ACC122 counts such a value again after the ``prepare``. With
    :func:`counts_dataset_batches`, the one answer to "this value counts batches".
    ``qualified``: the qualified name of a called expression where ``value`` stands."""
    calls = [node for node in nodes_in(value) if isinstance(node, cst.Call)]
    if any(
        builtin(call.func) not in COUNTING_BUILTINS and qualified(call.func) not in COUNTING_FUNCTIONS for call in calls
    ):
        return False
    reads_length = any(
        builtin(call.func) == "len" and len(call.args) == 1 and dotted(call.args[0].value) in loaders for call in calls
    )
    return reads_length or bool(variables_read(value) & set(counts))


@record(frozen=True)
class DatasetSizes:
    """What a batch count computed from a data set's size reads (``epoch_size = len(dataset) //
    args.batch_size``, ssd.pytorch; ``round(dataset_sizes["train"] / opt.batchsize)``, re-ID's
    warm-up): the data sets the loaders are built over, the names bound to their sizes, and the
    batch sizes the loaders are built with, all as the script writes them (dotted)."""

    #: The data sets loaders are built over (``image_datasets`` of ``DataLoader(image_datasets[x])``).
    datasets: frozenset[str] = frozenset()
    #: Names bound to a data set's size (``n_train = len(train_set)``).
    sizes: frozenset[str] = frozenset()
    #: Dicts of such sizes (``dataset_sizes = {x: len(image_datasets[x]) for x in ["train", "val"]}``).
    size_dicts: frozenset[str] = frozenset()
    #: The batch sizes the loaders are built with (``args.batch_size``, ``opt.batchsize``).
    batch_sizes: frozenset[str] = frozenset()


def dataset_sizes(a: Analysis) -> DatasetSizes:
    """The :class:`DatasetSizes` of the file: from every data loader it builds (its first two
    arguments) and every assignment of a data set's size, or of a dict of them."""
    datasets: set[str] = set()
    batch_sizes: set[str] = set()
    for call in a.r.calls:
        if not a.facts.builds_data_loader(call.node.func, call.scope, strict=False):
            continue
        dataset = argument_for(call.node, 0, "dataset")
        if dataset is not None and (name := _held_in(dataset.value)) is not None:
            datasets.add(name)
        batch = argument_for(call.node, 1, "batch_size")
        if batch is not None and (name := dotted(batch.value)) is not None:
            batch_sizes.add(name)
    sizes: set[str] = set()
    size_dicts: set[str] = set()
    for assign in a.r.assigns:
        builtin = builtins_at(a.r.names, assign.scope)
        value = assign.value
        if _dataset_length(value, datasets, builtin):
            sizes.update(assign.targets)
        elif isinstance(value, cst.DictComp) and _dataset_length(value.value, datasets, builtin):
            size_dicts.update(assign.targets)
        elif (
            isinstance(value, cst.Dict)
            and value.elements
            and all(
                isinstance(element, cst.DictElement) and _dataset_length(element.value, datasets, builtin)
                for element in value.elements
            )
        ):
            size_dicts.update(assign.targets)
    return DatasetSizes(frozenset(datasets), frozenset(sizes), frozenset(size_dicts), frozenset(batch_sizes))


def _held_in(value: cst.BaseExpression) -> str | None:
    """The dotted name of a data set, or of the dict or list holding it (``image_datasets`` of
    ``image_datasets[x]``)."""
    return dotted(value.value) if isinstance(value, cst.Subscript) else dotted(value)


def _dataset_length(value: cst.BaseExpression, datasets: Collection[str], builtin: BuiltinOf) -> bool:
    """Whether ``value`` is ``len(dataset)`` of one of ``datasets`` (or of an element of one)."""
    return (
        isinstance(value, cst.Call)
        and builtin(value.func) == "len"
        and len(value.args) == 1
        and _held_in(value.args[0].value) in datasets
    )


def counts_dataset_batches(
    division: cst.BinaryOperation, sizes: DatasetSizes, loaders: Collection[str], builtin: BuiltinOf
) -> bool:
    """Whether ``division`` counts batches from a data set's size: ``len(dataset) / batch_size``
    (``//`` too), the data set one a loader is built over (or ``len(loader.dataset)``, or a name or
    dict bound to such a size: ``dataset_sizes["train"]``), divided by the batch size a loader is
    built with. After ``prepare`` each process runs 1/N of those batches, so a warm-up or an epoch
    boundary measured in them lasts N times longer (ACC967). ``loaders``: the file's loaders."""
    if not isinstance(division.operator, (cst.Divide, cst.FloorDivide)):
        return False
    if dotted(division.right) not in sizes.batch_sizes:
        return False
    size = division.left
    if isinstance(size, cst.Subscript):
        return dotted(size.value) in sizes.size_dicts
    if dotted(size) in sizes.sizes:
        return True
    if not (isinstance(size, cst.Call) and builtin(size.func) == "len" and len(size.args) == 1):
        return False
    counted = size.args[0].value
    if isinstance(counted, cst.Attribute) and counted.attr.value == "dataset":
        return dotted(counted.value) in loaders
    return _dataset_length(size, sizes.datasets, builtin)
