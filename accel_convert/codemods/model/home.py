"""The home block: where the training objects are built, so where the accelerator is created and
which functions reach it."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods.engine.devices import constructed, holds_device
from accel_convert.codemods.engine.facts import MODULE, ScriptFacts
from accel_convert.codemods.engine.imported_calls import builds_model_of_program_class
from accel_convert.codemods.engine.syntax import (
    dotted,
    parameters_filled,
)
from accel_convert.codemods.model.calls import nested_function
from accel_convert.codemods.model.classes import (
    class_prepare,
    classes_keeping_handles,
    classes_saving_handed_models,
    find_training_classes,
    library_training_classes,
    training_bases,
)
from accel_convert.codemods.model.loops import training_backwards
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
    CallRecord,
)
from accel_convert.codemods.model.roles import models_into_parameters
from accel_convert.codemods.model.state import Analysis

if TYPE_CHECKING:
    # Only a program of several modules has seeds: a script converted alone never loads them.
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds


@provider(
    needs=(
        "optimizer_home",
        "model_factories",
        "constructions",
        "backward_methods",
        "backward_trains",
        "backward_helpers",
        "loader_loops",
        "models",
        "optimizers",
        "train_loaders",
        "eval_loaders",
        "unprepared_loaders",
        "schedulers",
        "per_epoch_schedulers",
        "prepared",
        "device_names",
        "device_names_elsewhere",
        "train_loops",
        "call_graph",
        "arguments",
        "loader_classes",
        "loader_factories",
        "bundle_attributes",
        "classes_opening_handles",
    ),
    provides=(
        "home_kind",
        "main_function",
        "creating_function",
        "accessible_functions",
        "optional_accelerator_functions",
        "training_functions",
        "unprepared_received_models",
        "models_prepared_where_built",
        "model_classes",
        "self_training_models",
        "training_classes",
        "training_bases",
        "class_prepare",
        "method_prepare",
        "prepared_attributes",
    ),
    refines=("models",),
)
def home(a: Analysis) -> None:
    """Where the training objects are built, so where the accelerator is created (``home_kind``,
    ``main_function``, ``creating_function``) and the functions and classes it reaches. A module
    of a program imported by its entry script is a library: the accelerator comes in."""
    if a.seeds is not None and a.seeds.library:
        library_home(a, a.seeds)
        library_training_classes(a)
        _library_training_functions(a)
    else:
        _home_block(a)


def _home_block(a: Analysis) -> None:
    classes = find_training_classes(a)
    if classes:
        home, in_guard = _home_of_training_classes(a, classes)
    elif _trains_only_what_it_receives(a):
        # A module of training functions converted alone: its callers build and prepare the
        # model and optimizer, so no accelerator is created here (each function would create
        # its own, and train unprepared objects); what needs one is reported (ACC904).
        a.facts.home_kind = "library"
        a.facts.main_function = a.facts.creating_function = None
        a.facts.accessible_functions = set()
        return
    else:
        home, in_guard = _home_of_training_functions(a)
    if home is None:
        home = _home_by_what_it_binds(a)
    repeated = _module_calls_repeating(a, home)
    if repeated:
        # ``for seed in seeds: run(seed)`` in module code (``train(...)`` per example, a
        # tutorial's hand-written SGD): an accelerator created in ``run`` would be created at each
        # call, and the module's own code after it (its saves, its prints, the functions it calls)
        # could not reach it. Module code creates it; the function prepares what it builds.
        a.facts.training_functions |= {home}
        home, in_guard = MODULE, all(call.in_main_guard for call in repeated)
    _settle_home(a, *_block_that_can_hold_it(a, home, in_guard))
    a.facts.training_functions |= _nested_optimizer_builders(a)
    savers = classes_saving_handed_models(a) + classes_keeping_handles(a)
    a.facts.training_classes.update(savers)
    a.facts.accessible_functions |= a.reachable(set(savers))


def _home_of_training_classes(a: Analysis, classes: list[str]) -> tuple[str | None, bool]:
    """Training lives in classes: the accelerator is created where the first of them is
    constructed, and each reaches its methods as ``self.accelerator``. The home, and whether it
    is the ``__main__`` block."""
    a.facts.training_classes.update(classes)
    for name in classes:
        class_prepare(a, name)
    training_bases(a, classes)
    first = _first_construction(a, classes)
    home = first.function if first.function in a.r.defs else MODULE
    builder = a.optimizer_home
    if (builder in a.r.defs or builder == MODULE) and home != builder and home in a.reachable({builder}):
        # Built in ``main`` (or module code) and handed to a helper that constructs the class
        # (``evaluator = make_evaluator(model, loader)``): that block prepares them and creates
        # the accelerator (the helper receives it, ACC104).
        return builder, False
    return home, home == MODULE and first.in_main_guard


def _first_construction(a: Analysis, classes: list[str]) -> CallRecord:
    """The first construction of a training class outside the training classes' own methods
    (``Evaluator().evaluate(...)`` in ``Trainer.fit`` is built with the trainer's accelerator,
    where the trainer is built), or in a function only they call (``self.evaluator =
    make_evaluator(...)``); the first of all when every one is built in such a method."""
    inside = _called_only_from(a, set(classes))
    outside = (call for name in classes for call in a.constructions[name] if call.function not in inside)
    return min(outside, key=lambda call: call.order, default=a.constructions[classes[0]][0])


def _called_only_from(a: Analysis, blocks: set[str]) -> set[str]:
    """``blocks`` and the functions called only from them, directly or through each other."""
    callers: dict[str, set[str]] = {}
    for caller, callees in a.facts.call_graph.items():
        for callee in callees:
            callers.setdefault(callee, set()).add(caller)
    inside = set(blocks)
    grown = True
    while grown:
        added = {function for function, by in callers.items() if function not in inside and by <= inside}
        inside |= added
        grown = bool(added)
    return inside


def _home_of_training_functions(a: Analysis) -> tuple[str | None, bool]:
    """Where the first optimizer is built, unless the function building it trains models it
    receives (``train(model, loader, ...)``): then the code calling it, which builds the model
    and loaders, creates the accelerator and prepares them, and the functions building
    optimizers from what they receive prepare those there."""
    builder = a.optimizer_home
    caller = _caller_building_the_model(a, builder)
    if caller is None:
        if builder is not None and _trains_module_globals(a, builder):
            # ``train(epoch)`` building its optimizer each epoch from the script's ``net``:
            # module code builds the model and loaders, so it creates the accelerator and
            # prepares them; the function prepares the optimizer it builds.
            a.facts.training_functions = _functions_training_what_they_receive(a) | {builder}
            return MODULE, False
        return builder, False
    a.facts.training_functions = _functions_training_what_they_receive(a)
    _unprepared_received_models(a)
    return caller


def _trains_module_globals(a: Analysis, function: str) -> bool:
    """Whether ``function``, a module-level function that module code calls, builds its optimizer
    from models it neither receives nor binds: the module's own (``net`` built at the top level,
    read as a global), with no model bound inside it."""
    if function not in a.r.defs:
        return False
    params = set(a.r.defs[function])
    if a.facts.models & (params | _bound_anew(a, function)):
        return False
    module_models = {
        name for assign in a.r.assigns if assign.function == MODULE for name in assign.targets
    } & a.facts.models
    if not module_models:
        return False
    return any(
        call.function == MODULE and isinstance(call.node.func, cst.Name) and call.node.func.value == function
        for call in a.r.calls
    )


def _nested_optimizer_builders(a: Analysis) -> set[str]:
    """The functions nested in a module-level function that the accelerator reaches and that
    build an optimizer themselves (``def train(epoch): optimizer = optim.SGD(net.parameters(),
    lr=lr_for(epoch))`` in ``main()``, over the ``net`` it closes over), by their path
    (``main.train``): each prepares what it builds, where it builds it, as a module-level
    function building its optimizer from the script's ``net`` does; the block around it prepares
    what it builds and closes over. (A method's nested functions are its class's: see
    ``model.classes``.)"""
    found = set()
    for assign in a.r.assigns:
        nested = nested_function(a, assign.scope) if set(assign.targets) & a.facts.optimizers else None
        if nested is not None and assign.function in a.r.defs and assign.function in a.facts.accessible_functions:
            found.add(nested)
    return found


def _home_by_what_it_binds(a: Analysis) -> str:
    """No optimizer to go by: the block binding a loader, holding a training loop, binding the
    device (hand-written SGD over tensors: for a module-level script that is the module, so the
    accelerator lands after its argument parsing and the module's own prints can reach it, not in
    the function holding the backward), or running a backward; else the module."""
    facts = a.facts
    home = next((assign.function for assign in a.r.assigns if _binds_loaders_to_use(a, assign)), None)
    if home is None and facts.train_loops:
        home = facts.train_loops[0].function
    if home is None:
        home = next(
            (
                assign.function
                for assign in a.r.assigns
                if any(holds_device(target, facts, assign.scope) for target in assign.targets)
            ),
            None,
        )
    if home is None:
        home = next((call.function for call in training_backwards(a)), MODULE)
    return home


def _binds_loaders_to_use(a: Analysis, assign: AssignRecord) -> bool:
    """Whether ``assign`` binds loaders for its block to train or evaluate over: a loader's name
    or what a loader factory of the file returns (``loaders = get_loaders(...)``, a dict of them
    too), outside the loader factories themselves (``get_loaders()`` binds the loaders it
    returns to the block calling it, where training starts), or a training bundle holding them
    (``exp = Experiment()``, its attributes handed on: the plan prepares them there)."""
    factories = a.loader_factories.keys() | a.loader_dict_factories.keys()
    if assign.function in factories:
        return False
    value = assign.value
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in factories:
        return True
    return bool(set(assign.targets) & (a.facts.loaders | _bundles_holding(a, a.facts.loaders)))


def _bundles_holding(a: Analysis, names: AbstractSet[str]) -> set[str]:
    """The training bundles' instances (``exp``) holding one of ``names`` (``exp.train_loader``)."""
    return {instance for attribute, instance in a.bundle_attributes.items() if attribute in names}


def _block_that_can_hold_it(a: Analysis, home: str, in_guard: bool) -> tuple[str, bool]:
    """``home``, unless it is a class that cannot be given the accelerator (no ``__init__``, never
    constructed here): then the block using the class (and whether that is the ``__main__``
    block: a training bundle built there, ``exp = Experiment()``), and the methods' calls are
    reported (ACC904) rather than rewritten."""
    if home == MODULE or home in a.r.defs:
        return home, in_guard
    call = next(
        (
            call
            for call in a.r.calls
            if isinstance(call.node.func, cst.Name)
            and call.node.func.value == home
            and (call.function in a.r.defs or call.function == MODULE)
        ),
        None,
    )
    if call is None:
        return MODULE, in_guard
    return call.function, in_guard or (call.function == MODULE and call.in_main_guard)


def _settle_home(a: Analysis, home: str, constructed_in_guard: bool) -> None:
    """``home_kind``, ``main_function``, ``creating_function`` and ``accessible_functions`` for
    the block ``home``."""
    facts = a.facts
    if home != MODULE:
        facts.main_function = home
        facts.home_kind = "function"
        facts.creating_function = _creating_function(a, home)
        home = facts.creating_function
    else:
        facts.main_function = None
        trained = facts.models | facts.optimizers | facts.loaders
        trained |= _bundles_holding(a, trained)
        in_guard = constructed_in_guard or bool(trained & a.r.main_guard_assigns)
        facts.home_kind = "main_guard" if in_guard else "module"
    facts.accessible_functions = a.reachable({home} | facts.training_classes)
    if facts.home_kind == "main_guard":
        # Defined inside the __main__ block (an LBFGS closure): they read the global accelerator.
        facts.accessible_functions |= a.reachable(a.r.guard_defs)


def _calls_from_elsewhere(a: Analysis, function: str) -> list[CallRecord]:
    """The calls of the module-level ``function`` by its name from other code than its own."""
    return [
        call
        for call in a.r.calls
        if isinstance(call.node.func, cst.Name) and call.node.func.value == function and call.function != function
    ]


def _module_calls_repeating(a: Analysis, home: str | None) -> list[CallRecord]:
    """The calls of ``home``, a module-level function, when module code alone calls it (its top
    level or its ``__main__`` block), more than once or in a loop; else none."""
    if home is None or home not in a.r.defs:
        return []
    calls = _calls_from_elsewhere(a, home)
    if not calls or any(call.function != MODULE for call in calls):
        return []
    return calls if len(calls) > 1 or any(call.loops for call in calls) else []


def _creating_function(a: Analysis, home: str) -> str:
    """Where the accelerator is created: the home function, unless another function calls it
    more than once or in a loop (one trial per width, one run per seed), then that caller
    (and so on up): an accelerator must be created once per process."""
    seen = {home}
    while True:
        calls = _calls_from_elsewhere(a, home)
        callers = {call.function for call in calls}
        repeated = len(calls) > 1 or any(call.loops for call in calls)
        if len(callers) != 1 or not repeated:
            return home
        caller = callers.pop()
        if caller not in a.r.defs or caller in seen:
            return home
        seen.add(caller)
        home = caller


def _receives_its_models(a: Analysis, function: str) -> bool:
    """Whether ``function`` builds an optimizer from models it receives as parameters and never
    binds itself (``train(model, loader)`` with ``optimizer = SGD(model.parameters())``; moving
    one, ``model = model.to(gpu)``, keeps the object it received)."""
    params = set(a.r.defs.get(function) or ())
    bound = _bound_anew(a, function)
    received = (params & a.facts.models) - bound
    return bool(received) and not (a.facts.models & bound)


def _receives_its_loaders(a: Analysis, function: str) -> bool:
    """Whether ``function`` builds its model and iterates loaders it receives as parameters and
    never binds itself (``train(train_loader, test_loader)`` building its model and optimizer)."""
    params = set(a.r.defs.get(function) or ())
    bound = _bound_anew(a, function)
    return bool((params & a.facts.loaders) - bound) and bool(a.facts.models & bound)


def _bound_anew(a: Analysis, function: str) -> set[str]:
    """The names ``function`` binds to another object: not ``model = model.to(gpu)`` (nor
    ``.train()``, ``.float()``), which binds the object it moves."""
    return {
        name
        for assign in a.r.assigns
        if assign.function == function
        for name in assign.targets
        if not (assign.targets == (name,) and dotted(constructed(assign.value)) == name)
    }


def _caller_building_the_model(a: Analysis, function: str | None) -> tuple[str, bool] | None:
    """The block calling ``function`` (module code, the ``__main__`` block, or another
    function), when ``function`` trains models or iterates loaders it receives and that block
    builds them: that block is where the accelerator belongs (a loader it builds is prepared
    there, or nothing would prepare it). None when ``function`` builds its model and loaders
    itself, or its calls come from several places."""
    if function is None or function not in a.r.defs:
        return None
    handed = _handed_objects(a, function)
    calls = _calls_from_one_block(a, function)
    if not handed or not calls:
        return None
    origins = {name for param in handed for name in a.origins_of(function, param)}
    seen = {function}
    while True:
        caller = calls[0].function
        if caller != MODULE and caller not in a.r.defs:
            return None  # a method of a class: the class would have to receive the accelerator
        if origins & {name for assign in a.r.assigns if assign.function == caller for name in assign.targets}:
            return caller, caller == MODULE and all(call.in_main_guard for call in calls)
        # A function only passing them on (``run(loaders)`` calling ``train(loaders)``): its caller.
        if caller == MODULE or caller in seen:
            return None
        seen.add(caller)
        calls = _calls_from_one_block(a, caller)
        if not calls:
            return None


def _calls_from_one_block(a: Analysis, function: str) -> list[CallRecord]:
    """The calls of ``function`` from other code, when they all come from one block; and, for a
    function building its model, when that block calls it once (called per trial, that block
    creates the accelerator and prepares the loaders anyway, see ``_creating_function``)."""
    calls = _calls_from_elsewhere(a, function)
    if len({call.function for call in calls}) != 1:
        return []
    if not _receives_its_models(a, function) and (len(calls) > 1 or any(call.loops for call in calls)):
        return []
    return calls


def _handed_objects(a: Analysis, function: str) -> set[str]:
    """The parameters of ``function`` that decide whether its caller is the home: the models it
    trains, when it builds none; else, when it builds its model, the loaders it iterates, as it
    received them (an ensemble's ``train(m, loader)`` over a list's members stays the home)."""
    params = set(a.r.defs.get(function) or ())
    if _receives_its_models(a, function):
        return params & a.facts.models - _bound_anew(a, function)
    if _receives_its_loaders(a, function):
        return params & a.facts.loaders - _bound_anew(a, function)
    return set()


def _functions_training_what_they_receive(a: Analysis) -> set[str]:
    """Module-level functions building an optimizer from models they receive, or over loaders
    they receive: each prepares what it builds itself (the optimizer, its scheduler, loaders,
    a model its caller does not build), where it builds them."""
    builders = {
        assign.function
        for assign in a.r.assigns
        if set(assign.targets) & a.facts.optimizers and assign.function in a.r.defs
    }
    return {function for function in builders if _handed_objects(a, function)}


def _unprepared_received_models(a: Analysis) -> None:
    """What the training functions are given at each call that is not known as a model
    (``train(nn_light, ...)`` where the optimizer is built from the parameter ``model``):
    nothing prepares it (ACC926)."""
    facts = a.facts
    handed: list[tuple[str, str, CallRecord]] = []
    for call in a.r.calls:
        function = call.node.func.value if isinstance(call.node.func, cst.Name) else None
        if function not in facts.training_functions:
            continue
        params = a.r.defs.get(function) or ()
        for param, arg in parameters_filled(call.node, params):
            name = dotted(arg.value)
            if param in facts.models and name is not None and name not in facts.models:
                handed.append((name, function, call))
    # Built once, by a model constructor, in the block handing it over (knowledge
    # distillation's teacher, trained first, and student, built after the teacher's training
    # began): prepared right where it is built.
    where_built = {name for name, _, call in handed if _built_once_as_model(a, name, call)}
    where_built -= {name for name, _, call in handed if not _built_once_as_model(a, name, call)}
    facts.models |= where_built
    facts.models_prepared_where_built |= where_built
    models_into_parameters(a, where_built)
    facts.unprepared_received_models.extend(
        (name, function, a.site(call.node)) for name, function, call in handed if name not in where_built
    )


def _built_once_as_model(a: Analysis, name: str, call: CallRecord) -> bool:
    """Whether the block holding ``call`` binds ``name`` once, to a new model (``Net()``, a
    model class of the file or a ``torch.nn`` layer, moved or not), before the call."""
    if not name.isidentifier():
        return False
    assigns = [assign for assign in a.r.assigns if name in assign.targets and assign.function == call.function]
    if len(assigns) != 1 or assigns[0].targets != (name,) or assigns[0].scope != call.scope:
        return False
    built = constructed(assigns[0].value)
    if not isinstance(built, cst.Call):
        return False
    qualified = a.r.names.qualified_name(built.func, assigns[0].scope, strict=False) or ""
    constructs = builds_model_of_program_class(a.facts, built.func, assigns[0].scope) or (
        qualified.startswith("torch.nn.") and qualified.rpartition(".")[2][:1].isupper()
    )
    return constructs and a.site(assigns[0].node).line < a.site(call.node).line


def _trains_only_what_it_receives(a: Analysis) -> bool:
    """Whether the file is a library of training functions converted on its own: every
    ``backward()`` is in a module-level function with parameters (what it trains comes from
    its caller), the file constructs no optimizer and no DataLoader, and no module-level code
    calls its functions (run as a script, it would train nothing)."""
    if a.seeds is not None or a.optimizer_home is not None:
        return False
    backward_functions = {call.function for call in training_backwards(a)}
    if not backward_functions or any(not a.r.defs.get(function) for function in backward_functions):
        return False
    for call in a.r.calls:
        if a.facts.builds_data_loader(call.node.func, call.scope, strict=False):
            return False
        func = call.node.func
        if call.function == MODULE and isinstance(func, cst.Name) and func.value in a.r.defs:
            return False
    return True


def _library_training_functions(a: Analysis) -> None:
    """A library's functions that the accelerator reaches and that build an optimizer (``fit(args,
    train_loader, val_loader)`` building its model and optimizer, handed the prepared loaders):
    each prepares what it builds, its model included, where it builds it; no other module
    holds those names."""
    facts = a.facts
    builders = {
        assign.function
        for assign in a.r.assigns
        if set(assign.targets) & facts.optimizers and assign.function in a.r.defs
    }
    facts.training_functions |= builders & facts.accessible_functions


def reached_library(facts: ScriptFacts) -> bool:
    """A module of a program, not its home, some of whose functions the accelerator reaches: it
    is converted even when it never imports torch, as a whole (a plotting module's ``savefig``
    helper writes its figure on the main process, a ``log`` helper prints there)."""
    return facts.home_kind == "library" and bool(facts.accessible_functions)


def library_home(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """A library builds nothing it trains and creates no accelerator: its functions that the
    accelerator reaches (called only from code holding it) and what they call get it.

    A class constructed there is not one of them: its methods have no parameter to receive the
    accelerator (a ``MetricLogger`` whose ``log_every`` prints), so it reaches them only as
    ``self.accelerator`` when the class turns out to be a training class (which then receives
    it in ``__init__``, see ``model.classes.library_training_classes``).

    Nor is a function the library's code calls at import: no accelerator exists there, so that
    call could not pass one; the function stays as written and what it does on every rank is
    reported. One its ``__main__`` block calls (the module is also a script of its own:
    ``generate.py`` sampling from a saved model, YOLO's ``test.py`` evaluating a weights file),
    directly or through functions the accelerator does not reach, takes the accelerator as an
    optional parameter and creates its own where it is called without one
    (``optional_accelerator_functions``): the program's callers hand it theirs, the script run
    alone makes one for its single process."""
    facts = conclusions.facts
    facts.home_kind = "library"
    facts.main_function = None
    facts.creating_function = None
    reached = conclusions.reachable(set(seeds.accelerator_reaches) - set(conclusions.r.classes))
    r = conclusions.r
    on_import = {
        call.node.func.value
        for call in r.calls
        if call.function == MODULE
        and not call.in_main_guard
        and isinstance(call.node.func, cst.Name)
        and call.node.func.value in r.defs
    }
    accessible = reached - conclusions.reachable(on_import)
    facts.accessible_functions = accessible
    callers: dict[str, set[str]] = {}
    for caller, callees in facts.call_graph.items():
        for callee in callees:
            callers.setdefault(callee, set()).add(caller)
    facts.optional_accelerator_functions = {
        function for function in accessible if callers.get(function, set()) - accessible
    }
