"""Classes: model classes, training classes (which receive the accelerator), what each prepares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.devices import constructed
from accel_convert.codemods.engine.facts import MODULE, callers_closure
from accel_convert.codemods.engine.imported_calls import builds_model_of_program_class, program_callee
from accel_convert.codemods.engine.names import builtins_at
from accel_convert.codemods.engine.syntax import (
    argument_for,
    dotted,
    is_plain_class,
    nodes_in,
    parameter_filled,
)
from accel_convert.codemods.engine.torch_names import CONSOLE_WRITES
from accel_convert.codemods.model.calls import step_calls
from accel_convert.codemods.model.plan import is_any_prepare
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import AssignRecord, CallRecord, ClassRecord
from accel_convert.codemods.model.state import Analysis


def find_training_classes(a: Analysis) -> list[str]:
    """Module-level classes whose methods hold the training code (a ``Trainer`` with
    ``_run_batch``/``train``, a ``Solver``) and can be given the accelerator: they have an
    ``__init__`` to receive it, every method that trains or loops over a loader has an instance
    to keep it on, and this module constructs them by name. In order of first construction."""
    found = []
    models = _model_classes(a)
    a.facts.model_classes = set(models)
    trains_through_a_base = _training_subclasses(a, models)
    # Neither a model nor a dataset keeps the accelerator only to print (see below).
    not_printers = set(models) | set(_derived_classes(a, _is_dataset_base))
    for name, owner in a.r.classes.items():
        methods = {method for owner_name, method in a.backward_methods if owner_name == name}
        if methods and name in models and models[name] & set(a.constructions):
            if not _wraps_a_model(a, name, owner, set(models)):
                a.facts.self_training_models.add(name)
                continue
            models.pop(name)  # a trainer holding the model it trains: a training class
        methods = _methods_needing_the_accelerator(a, name, methods, not_printers)
        if _takes_the_accelerator(a, name, owner, methods, inherited=name in trains_through_a_base):
            found.append(name)
    # A subclass with no ``__init__`` of its own (``class MSETrainer(BaseTrainer)`` defining
    # only ``compute_loss``) holds the accelerator its base's ``__init__`` keeps.
    found += [
        name
        for name, owner in a.r.classes.items()
        if owner.init_params is None and name in a.constructions and a.initialising_class(name) in found
    ]
    found += _classes_building_training_classes(a, found, set(models))
    return sorted(found, key=lambda name: a.constructions[name][0].order if name in a.constructions else 0)


def _wraps_a_model(a: Analysis, name: str, owner: ClassRecord, models: AbstractSet[str]) -> bool:
    """Whether the ``nn.Module`` class ``name``, whose own method runs a backward, is a trainer
    holding the model it trains rather than a model training itself: its ``__init__`` keeps, as
    an attribute, a model of the file handed in (``self.net = net``, every construction passing
    a new model: ``Trainer(Net(), lr)``) or built there (``self.net = Net()``), and builds no layer
    of its own (no ``torch.nn`` module but a loss). Its parameters are the held model's: preparing
    that model (in ``__init__``, as a training class does) synchronises the training, where
    wrapping the trainer would hide its methods behind DDP."""
    instance = owner.self_names.get("__init__")
    if instance is None or owner.init_params is None:
        return False
    held = False
    for assign in a.r.assigns:
        if assign.scope != (name, "__init__"):
            continue
        value = assign.value
        if isinstance(value, cst.Call):
            qualified = a.r.names.qualified_name(value.func, assign.scope, strict=False) or ""
            if qualified.startswith("torch.nn.") and not qualified.endswith("Loss"):
                return False  # a layer of its own
            held = held or (dotted(value.func) in models and any(t.startswith(f"{instance}.") for t in assign.targets))
        elif isinstance(value, cst.Name) and value.value in owner.init_params:
            held = held or _handed_a_new_model(a, name, owner.init_params.index(value.value), models)
    return held


def _handed_a_new_model(a: Analysis, name: str, position: int, models: AbstractSet[str]) -> bool:
    """Whether every construction of class ``name`` passes, at ``__init__``'s parameter at
    ``position``, a new model of the file built right in the call (``Trainer(Net(), lr)``)."""
    params = a.r.classes[name].init_params or ()
    calls = a.constructions.get(name, [])
    found = bool(calls)
    for call in calls:
        filled = [
            arg.value
            for index, arg in enumerate(call.node.args)
            if not arg.star and parameter_filled(arg, index, params) == params[position]
        ]
        found = found and len(filled) == 1 and isinstance(filled[0], cst.Call) and dotted(filled[0].func) in models
    return found


def _classes_building_training_classes(a: Analysis, found: Sequence[str], models: AbstractSet[str]) -> list[str]:
    """Classes whose methods build an instance of a training class (``class Experiment`` whose
    ``run()`` does ``trainer = Trainer(self.model, ...)`` then ``trainer.fit()``): training classes
    too, followed along the chain (an ``Experiment`` building a ``Stage`` building a ``Trainer``).
    They receive the accelerator in ``__init__`` and hand it to what they build, and prepare the
    objects they build themselves, as a trainer does."""
    training = set(found)
    added: list[str] = []
    elsewhere = _methods_building_training_classes_elsewhere(a)
    grown = True
    while grown:
        grown = False
        for name, owner in a.r.classes.items():
            if name in training or name in models:
                continue
            methods = elsewhere.get(name, set()) | {
                call.scope[1]
                for built in training
                for call in a.constructions.get(built, ())
                if call.function == name and len(call.scope) >= 2
            }
            if methods and _takes_the_accelerator(a, name, owner, methods, inherited=False):
                training.add(name)
                added.append(name)
                grown = True
    return added


def _methods_building_training_classes_elsewhere(a: Analysis) -> dict[str, set[str]]:
    """Class of this module → its methods building an instance of a training class of another
    module of the program (``Trainer(self.model, ...)`` after ``from trainer import Trainer``,
    matched by qualified name through the seeds)."""
    seeds = a.seeds
    if seeds is None or not seeds.training_classes_elsewhere:
        return {}
    found: dict[str, set[str]] = {}
    for call in a.r.calls:
        if (
            len(call.scope) >= 2
            and call.function in a.r.classes
            and program_callee(a.facts, call.node.func, call.scope) in seeds.training_classes_elsewhere
        ):
            found.setdefault(call.function, set()).add(call.scope[1])
    return found


def _methods_needing_the_accelerator(
    a: Analysis, name: str, training: set[str], not_printers: AbstractSet[str]
) -> set[str]:
    """The methods of class ``name`` that would use the accelerator: those running a backward
    (``training``) or looping over a loader; for a library's class the program hands the prepared
    model to (Bjarten's EarlyStopping), those that save (main process, unwrapped model); for a
    library's console logger the accelerator reaches (not one of ``not_printers``), those that
    print; for a library's class the accelerator reaches, the methods handing back a file the
    program opens on the main process only."""
    methods = training | {loop.method for loop, _ in a.loader_loops if loop.function == name and loop.method}
    methods |= _methods_handing_loaders_to_loops(a, name)
    if not methods and a.seeds is not None and a.seeds.library and name in a.seeds.classes_given_models:
        methods = _saving_methods(a, name)
    if a.seeds is not None and a.seeds.library and name in a.seeds.accelerator_reaches:
        # A method handing back a file it opens, which the program opens on the main process only
        # (the seeds' ``opened_on_main_process``: ``RunFolder.open_log``), reads the accelerator.
        methods |= {own.partition(".")[2] for own in a.seeds.opened_on_main_process if own.partition(".")[0] == name}
    if not methods and a.seeds is not None and a.seeds.library and name in a.seeds.accelerator_reaches:
        # Not a dataset, whose instance goes to the loader's worker processes, nor a model, which
        # prints on the main process by the rank test instead: neither keeps the accelerator.
        # Nor a class that also saves (a checkpoint callback): what it saves is the program's to
        # report (ACC914), not this rule's to rewrite on half-known objects.
        if name not in not_printers and not _saving_methods(a, name):
            methods = _printing_methods(a, name)
    return methods


def _methods_handing_loaders_to_loops(a: Analysis, name: str) -> set[str]:
    """The methods of class ``name`` handing a loader they hold as an attribute to a function of
    this module that loops over what it is handed (``evaluate(self.net, self.test_loader)``): they
    loop over it as surely as a loop of their own, so the class prepares the loader."""
    looping = callers_closure(
        {loop.function for loop, _ in a.loader_loops if loop.function in a.r.defs},
        a.facts.call_graph,
        among=set(a.r.defs),
    )
    loaders = {loader for loader in a.facts.train_loaders | a.facts.eval_loaders if "." in loader}
    return {
        call.scope[1]
        for call in a.r.calls
        if call.function == name
        and len(call.scope) >= 2
        and isinstance(call.node.func, cst.Name)
        and call.node.func.value in looping
        and any(dotted(arg.value) in loaders for arg in call.node.args)
    }


def _printing_methods(a: Analysis, name: str) -> set[str]:
    """The methods of class ``name`` writing to the console (``print``, ``sys.stdout.write``): a
    library's logger class built only where the accelerator is (``logger = Logger(...)`` in the
    training script, ``logger.log(losses)`` each batch) prints on the main process once it keeps
    the accelerator, as the script's own prints do."""
    return _methods_calling(
        a,
        name,
        lambda call: (
            a.r.names.builtin(call.node.func, call.scope) == "print"
            or a.r.names.qualified_name(call.node.func, call.scope) in CONSOLE_WRITES
        ),
    )


def _saving_methods(a: Analysis, name: str) -> set[str]:
    """The methods of class ``name`` calling ``torch.save``."""
    return _methods_calling(a, name, lambda call: a.r.names.qualified_name(call.node.func, call.scope) == "torch.save")


def _methods_calling(a: Analysis, name: str, test: Callable[[CallRecord], bool]) -> set[str]:
    """The methods of class ``name`` making a call that passes ``test``."""
    return {call.scope[1] for call in a.r.calls if call.function == name and len(call.scope) >= 2 and test(call)}


def classes_saving_handed_models(a: Analysis) -> list[str]:
    """The file's classes (not models, not training classes) that save when they are built and whose
    every construction hands them one of the file's models where the accelerator reaches
    (``Snapshot(model, "net.pt")`` in ``main()``, whose ``__init__``, or a method it calls, runs
    ``torch.save(model.state_dict(), path)``): they receive the accelerator as a training class
    does, so the save is the unwrapped model's, on the main process, as a save in ``main()``
    would be (left without it, every rank writes the file with DDP's ``module.`` keys). A
    library's classes the program hands a prepared model get it the same way, through the seeds
    (:func:`_methods_needing_the_accelerator`). After the home is settled: ``accessible_functions``
    says where the accelerator reaches."""
    facts = a.facts
    found = []
    for name, owner in a.r.classes.items():
        calls = a.constructions.get(name, [])
        if name in facts.training_classes or name in facts.model_classes or not calls:
            continue
        if not all(call.function in facts.accessible_functions and _hands_a_model(a, call) for call in calls):
            continue
        methods = _saving_methods(a, name)
        if (
            methods
            and _saved_at_construction(a, name, owner, methods)
            and _takes_the_accelerator(a, name, owner, methods, inherited=False)
        ):
            found.append(name)
    return found


def classes_keeping_handles(a: Analysis) -> list[str]:
    """The file's classes (not models, not training classes) whose ``__init__`` keeps a file the
    main process alone writes (the file-flow owner's ``classes_opening_handles``: a ``History``
    recording each epoch into ``self.file = open(path, "w")``), every construction of which is
    where the accelerator reaches (``history = History(...)`` in ``main()``): they receive the
    accelerator as a training class does, so that ``__init__`` opens the file on the main process
    only (``os.devnull`` on the others). Before, the accelerator, a local of ``main()``, did not
    reach ``__init__``: the file stayed on every rank, reported (ACC916). Built by module-level
    code, the class reads the module's accelerator already. After the home is settled."""
    facts = a.facts
    found = []
    for name in sorted(facts.classes_opening_handles):
        owner, calls = a.r.classes.get(name), a.constructions.get(name, [])
        if owner is None or name in facts.training_classes or name in facts.model_classes or not calls:
            continue
        if all(call.function == MODULE for call in calls):
            continue  # module-level code: ``__init__`` reads the module's accelerator
        if all(call.function in facts.accessible_functions for call in calls) and _takes_the_accelerator(
            a, name, owner, {"__init__"}, inherited=False
        ):
            found.append(name)
    return found


#: The roles a training bundle's attributes can hold (``ScriptFacts`` fields): what a ``prepare`` takes.
BUNDLED_ROLES = ("models", "optimizers", "train_loaders", "schedulers")


@provider(
    needs=("models", "optimizers", "train_loaders", "schedulers", "constructions"),
    provides=("bundle_attributes", "bundle_classes"),
    refines=("models", "optimizers", "train_loaders", "schedulers"),
)
def bundle_attributes(a: Analysis) -> None:
    """Training bundles: a class (of the file, or of another module of the program: the seeds'
    ``bundle_classes``) that is no model and whose building (``__init__`` and the methods it
    calls) binds models, optimizers, loaders or schedulers to attributes of its instance that its
    other methods leave alone (``facts.bundle_classes``), built by a block (``exp = Experiment()``
    in ``main()`` or at module level) that hands those attributes on from outside the class
    (``train(exp.model, exp.train_loader, exp.optimizer)``). The instance's attributes
    (``exp.model``) take the roles of the class's (``self.model``), and the plan prepares them in
    that block right after the instance is bound (``a.bundle_attributes``: ``exp.model`` →
    ``exp``); before, nothing was prepared and every process trained on every batch."""
    facts = a.facts
    models = model_classes(a)
    for name, owner in a.r.classes.items():
        held = {} if name in models else _bundled_roles(a, name, owner)
        if "models" in held.values():  # a class holding only loaders is a data object, not a bundle
            facts.bundle_classes[name] = tuple(sorted(held.items()))
    elsewhere = dict(a.seeds.bundle_classes) if a.seeds is not None else {}
    for assign in a.r.assigns:
        value = assign.value
        if len(assign.scope) > 1 or len(assign.targets) != 1 or "." in assign.targets[0]:
            continue
        if not isinstance(value, cst.Call):
            continue
        local = dotted(value.func)
        held_pairs = (
            facts.bundle_classes.get(local)
            if local in a.r.classes
            else elsewhere.get(program_callee(facts, value.func, assign.scope) or "")
        )
        if not held_pairs:
            continue
        instance = assign.targets[0]
        outside = {f"{instance}.{attribute}": role for attribute, role in held_pairs}
        if not _handed_on(a, assign.function, set(outside)):
            continue
        for attribute, role in outside.items():
            getattr(facts, role).add(attribute)
            a.bundle_attributes[attribute] = instance


def _bundled_roles(a: Analysis, name: str, owner: ClassRecord) -> dict[str, str]:
    """Attribute (``model``) → the role (a ``ScriptFacts`` field) of the object building class
    ``name`` binds to it (``self.model = Net()`` in ``__init__``), when no other method of the
    class loops or reads one of them (a class training what it holds prepares it itself, as a
    training class)."""
    instance = owner.self_names.get("__init__")
    if instance is None or any(loop.function == name for loop in a.r.loops):
        return {}
    building = _run_when_built(owner)
    held = _roles_bound_when_built(a, name, instance, building)
    return {} if _read_by_other_methods(a, name, owner, building, set(held)) else held


def _roles_bound_when_built(a: Analysis, name: str, instance: str, building: AbstractSet[str]) -> dict[str, str]:
    """Attribute → role of the training objects the methods ``building`` class ``name`` bind to
    its ``instance`` (built there, not kept from a parameter)."""
    built_here = _attributes_built_here(a, name)
    held: dict[str, str] = {}
    for assign in a.r.assigns:
        if assign.function != name or len(assign.scope) != 2 or assign.scope[1] not in building:
            continue
        for target in assign.targets:
            role = next((role for role in BUNDLED_ROLES if target in getattr(a.facts, role)), None)
            if role is not None and target in built_here and _is_attribute_of(target, instance):
                held[target.split(".", 1)[1]] = role
    return held


def _read_by_other_methods(
    a: Analysis, name: str, owner: ClassRecord, building: AbstractSet[str], held: AbstractSet[str]
) -> bool:
    """Whether a call in a method of class ``name`` other than ``building`` reads one of the
    attributes ``held`` of its instance."""
    selves = {own for method, own in owner.self_names.items() if method not in building and own}
    wanted = {f"{own}.{attribute}" for own in selves for attribute in held}
    for call in a.r.calls:
        if call.function != name or len(call.scope) < 2 or call.scope[1] in building:
            continue
        if wanted & {dotted(node) for node in nodes_in(call.node) if isinstance(node, cst.Attribute)}:
            return True
    return False


def _handed_on(a: Analysis, function: str, attributes: AbstractSet[str]) -> bool:
    """Whether a call of ``function`` hands one of ``attributes`` (``exp.model``) on."""
    return any(
        call.function == function and any(dotted(arg.value) in attributes for arg in call.node.args)
        for call in a.r.calls
    )


def _run_when_built(owner: ClassRecord) -> set[str]:
    """``__init__`` and the methods it calls on its instance (``self.build_model()``), and so on:
    what building an instance of the class runs."""
    reached, pending = {"__init__"}, ["__init__"]
    while pending:
        for callee in owner.method_calls.get(pending.pop(), ()):
            if callee not in reached:
                reached.add(callee)
                pending.append(callee)
    return reached


def _saved_at_construction(a: Analysis, name: str, owner: ClassRecord, methods: set[str]) -> bool:
    """Whether every saving method of class ``name`` runs when it is built: ``__init__`` or a method
    it calls on its instance (``self.write(model)``), and none is called again from outside the
    class. A save a later call makes (``stopper(val_loss)`` saving when this rank's loss improves)
    may run on some ranks only, and the class keeps no barrier there: left, and reported (ACC914)."""
    reached = _run_when_built(owner)
    called_outside = {
        call.node.func.attr.value
        for call in a.r.calls
        if call.function != name and isinstance(call.node.func, cst.Attribute)
    }
    # ``__init__`` runs at the constructions, which are checked; ``super().__init__()`` elsewhere is another's.
    return methods <= reached and not (methods - {"__init__"}) & called_outside


def _hands_a_model(a: Analysis, call: CallRecord) -> bool:
    """Whether ``call`` passes one of the file's models (by name) as an argument."""
    return any(not arg.star and dotted(arg.value) in a.facts.models for arg in call.node.args)


def _takes_the_accelerator(a: Analysis, name: str, owner: ClassRecord, methods: set[str], inherited: bool) -> bool:
    """Whether class ``name`` can be given the accelerator for ``methods`` (or the training code it
    ``inherited``): it has an ``__init__`` to receive it, each of those methods an instance to keep
    it on, and code that holds the accelerator constructs it."""
    seeds = a.seeds
    if owner.init_params is None and seeds is not None and name in seeds.inherited_accelerator:
        # No ``__init__`` here: the base's in another module receives the accelerator.
        return True
    # Constructed here, or a library's class constructed by code of the program that holds the
    # accelerator.
    built = name in a.constructions or (seeds is not None and seeds.library and name in seeds.accelerator_reaches)
    if (
        not (methods or inherited)
        or (owner.init_params is None and not is_plain_class(owner.node, builtins_at(a.r.names)))
        or not built
    ):
        return False
    return all(owner.self_names.get(method) is not None for method in methods)


def _local_parents(a: Analysis) -> dict[str, set[str]]:
    """Module-level class → the module-level classes of this file it names as its bases."""
    return {
        name: {written for base in owner.node.bases if (written := dotted(base.value)) in a.r.classes}
        for name, owner in a.r.classes.items()
    }


def _training_subclasses(a: Analysis, models: dict[str, set[str]]) -> set[str]:
    """Classes whose training code is inherited: they derive, here or through a class of
    another module of the program (the seeds), from a class whose methods run a backward or
    loop over a loader (a ``BaseTrainer`` holding the epoch loop, subclassed by a
    ``RegressionTrainer`` that only defines the step)."""
    training = {owner for owner, _ in a.backward_methods}
    training |= {loop.function for loop, _ in a.loader_loops if loop.method}
    found = set(a.seeds.training_base_subclasses) if a.seeds is not None else set()
    parents = _local_parents(a)
    changed = True
    while changed:
        grown = {name for name, bases in parents.items() if bases & (training | found)} - found
        found |= grown
        changed = bool(grown)
    return found - set(models)


@provider(provides=("model_factories",))
def model_factories(a: Analysis) -> None:
    """The file's module-level functions and static or class methods returning a new model of the
    program's classes (``facts.model_factories``): ``build_model`` for ``def build_model(n):
    return Net(n)``, also through a local name (``model = Net(n)``, moved or not, then ``return
    model``), through another such function of the file or of another module (the seeds), and
    ``Net.create`` for a class method returning ``cls(...)`` of a model class or a static method
    returning ``Net(...)``. Every value the function returns must be one. A call of one builds a
    model as the construction would (:func:`~codemods.engine.imported_calls.builds_model_of_program_class`
    asks), in this module and, through the seeds' ``model_factories``, in the others."""
    classes = model_classes(a)
    returns: dict[str, tuple[tuple[str, ...], list[cst.BaseExpression]]] = {}
    for function, value in a.r.returns:
        if function in a.r.defs:
            returns.setdefault(function, ((function,), []))[1].append(value)
    class_level = {
        (name, method): cls
        for name, owner in a.r.classes.items()
        for method, cls in _class_level_methods(a, owner).items()
    }
    for scope, value in a.r.method_returns:
        if (scope[0], scope[1]) in class_level:
            returns.setdefault(f"{scope[0]}.{scope[1]}", (scope, []))[1].append(value)
    # A function that trains what it builds (``def train_model(args): model = Net(); ...;
    # optimizer.step(); ...; return model``) hands back a model it prepared itself: no factory.
    training = [call.scope for call, _ in step_calls(a)]
    returns = {
        name: (scope, values)
        for name, (scope, values) in returns.items()
        if not any(inner[: len(scope)] == scope for inner in training)
    }
    found = a.facts.model_factories  # grows while it is asked: a factory calling another
    grown = True
    while grown:
        grown = False
        for name, (scope, values) in returns.items():
            own_class = class_level.get((scope[0], scope[1])) if len(scope) == 2 and scope[0] in classes else None
            if name not in found and all(_returns_new_model(a, scope, value, classes, own_class) for value in values):
                found.add(name)
                grown = True


def _class_level_methods(a: Analysis, owner: ClassRecord) -> dict[str, str | None]:
    """The static and class methods of a class → the class parameter of a class method (``cls``;
    None for a static method)."""
    builtin = builtins_at(a.r.names)
    found: dict[str, str | None] = {}
    for line in owner.node.body.body if isinstance(owner.node.body, cst.IndentedBlock) else ():
        if not isinstance(line, cst.FunctionDef):
            continue
        kinds = {builtin(decorator.decorator) for decorator in line.decorators}
        if "staticmethod" in kinds:
            found[line.name.value] = None
        elif "classmethod" in kinds:
            params = [*line.params.posonly_params, *line.params.params]
            found[line.name.value] = params[0].name.value if params else None
    return found


def _returns_new_model(
    a: Analysis, scope: tuple[str, ...], value: cst.BaseExpression, classes: AbstractSet[str], own_class: str | None
) -> bool:
    """Whether a function (or method) ``scope`` returning ``value`` hands back a new model: a
    construction of a model class (``Net(n)``, ``cls(n)`` in a class method of one: ``own_class``
    is its class parameter), or a local name every binding of which is one (or a move of the name
    itself, ``model = model.to(device)``)."""
    built = constructed(value)
    if isinstance(built, cst.Call):
        return (own_class is not None and dotted(built.func) == own_class) or builds_model_of_program_class(
            a.facts, built.func, scope, classes
        )
    if not isinstance(built, cst.Name):
        return False
    bindings = [assign for assign in a.r.assigns if assign.scope == scope and assign.targets == (built.value,)]
    built_here = [constructed(assign.value) for assign in bindings]
    return any(isinstance(inner, cst.Call) for inner in built_here) and all(
        (isinstance(inner, cst.Name) and inner.value == built.value)
        or (isinstance(inner, cst.Call) and _returns_new_model(a, scope, inner, classes, own_class))
        for inner in built_here
    )


def model_classes(a: Analysis) -> set[str]:
    """The module-level classes deriving from a ``torch.nn`` module, here or through another of
    the file's classes (``facts.model_classes``, for the providers that run before it is set)."""
    return set(_model_classes(a))


def _model_classes(a: Analysis) -> dict[str, set[str]]:
    """Module-level classes deriving from a ``torch.nn`` module (``nn.Module``, ``nn.Linear``)
    or from another such class of the file, each with itself and the file's classes deriving
    from it (constructing any of them builds its methods)."""
    return _derived_classes(a, lambda qualified: qualified.startswith("torch.nn."))


@provider(provides=("model_parts",))
def model_parts(a: Analysis) -> None:
    """Parts of the file's model classes their ``forward`` runs (``facts.model_parts``, as
    ``"Class.attribute"``): the attributes it calls on the instance, itself or through the methods
    it calls, that are no method of the class (``FasterRCNN.forward``'s ``self.extractor(x)``,
    ``self.rpn(h)``, ``self.head(h)``, submodules it was handed in ``__init__``). Called on the
    model from outside (``model.extractor(imgs)``), one runs that part outside the model's
    forward, where DDP does not see it."""
    for name in model_classes(a):
        owner = a.r.classes[name]
        methods = set(owner.self_names)
        reached = {"forward"} & methods
        pending = list(reached)
        while pending:
            for callee in owner.method_calls.get(pending.pop(), set()) & methods - reached:
                reached.add(callee)
                pending.append(callee)
        for call in a.r.calls:
            if len(call.scope) != 2 or call.scope[0] != name or call.scope[1] not in reached:
                continue
            head, _, attribute = (dotted(call.node.func) or "").partition(".")
            if head == owner.self_names.get(call.scope[1]) and attribute.isidentifier() and attribute not in methods:
                a.facts.model_parts.add(f"{name}.{attribute}")


@provider(provides=("dataset_classes",))
def dataset_classes(a: Analysis) -> None:
    """Module-level classes deriving from a dataset: ``torch.utils.data.Dataset`` and its kind
    (``TensorDataset``, ``IterableDataset``, torchvision's ``VisionDataset``, ``datasets.MNIST``),
    another module's ``BaseDataset``, or such a class of the file. What their methods write
    (a download's files, processed tensors cached with ``torch.save``) is written when a dataset
    is built, which the downloads rule puts under ``main_process_first``: the side-effects and
    checkpoint rules leave it alone."""
    a.facts.dataset_classes = set(_derived_classes(a, _is_dataset_base))


def _is_dataset_base(qualified: str) -> bool:
    """A dataset class by its qualified name (``torch.utils.data.Dataset``, ``datasets.MNIST``)."""
    return qualified.split(".")[-1].endswith("Dataset") or qualified.startswith("torchvision.datasets.")


def _derived_classes(a: Analysis, is_root: Callable[[str], bool]) -> dict[str, set[str]]:
    """Module-level classes with a base whose qualified name ``is_root`` takes, or deriving from
    another such class of the file, each with itself and the file's classes deriving from it."""
    children: dict[str, set[str]] = {}
    roots = []
    for name, owner in a.r.classes.items():
        for base in owner.node.bases:
            qualified = a.r.names.qualified_name(base.value, (), strict=False) or dotted(base.value) or ""
            children.setdefault(qualified, set()).add(name)
            if is_root(qualified):
                roots.append(name)

    def family(name: str) -> set[str]:
        found, pending = {name}, [name]
        while pending:
            for child in children.get(pending.pop(), ()):
                if child not in found:
                    found.add(child)
                    pending.append(child)
        return found

    models = set().union(*(family(root) for root in roots))
    return {name: family(name) for name in models}


def class_prepare(a: Analysis, name: str) -> None:
    """The training objects a class builds itself (``self.model = Net()``, ``self.loader =
    DataLoader(...)``): prepared in its ``__init__``. Attributes holding an object the caller
    passed in are prepared where the caller built it."""
    facts = a.facts
    instance = a.r.classes[name].self_names.get("__init__")
    roles = facts.models | facts.optimizers | facts.loaders | (facts.schedulers - facts.per_epoch_schedulers)
    # Bound in any method, not only ``__init__``: a trainer's ``setup()`` that builds
    # ``self.model`` before training (a class without ``__init__`` too) holds it as prepared
    # everywhere in the class, its saves unwrapped.
    instances = {held for held in a.r.classes[name].self_names.values() if held is not None}
    held_prepared = {role for role in roles for held in instances if _is_attribute_of(role, held)}
    facts.prepared_attributes |= held_prepared
    _held_by_instances(a, name, held_prepared & _attributes_bound_in(a, name))
    built_here = _attributes_built_here(a, name)
    method_prepared = _method_prepare(a, name)
    attributes: list[str] = []
    for group in facts.preparation_groups():
        for attribute in sorted(group):
            if (
                attribute not in method_prepared
                and _is_attribute_of(attribute, instance)
                and attribute in built_here
                and attribute not in facts.prepared
                # ``self.optimizer = None`` in ``__init__`` only makes room for it.
                and a.origins_of(name, attribute) - {"None"} <= built_here
                and attribute not in attributes
            ):
                attributes.append(attribute)
    if attributes:
        facts.class_prepare[name] = tuple(attributes)


def _attributes_bound_in(a: Analysis, name: str) -> set[str]:
    """The attributes of its instance the methods of class ``name`` bind (``self.model``)."""
    return {target for assign in a.r.assigns if assign.function == name for target in assign.targets}


def _held_by_instances(a: Analysis, name: str, held: AbstractSet[str]) -> None:
    """The prepared objects ``held`` (``self.model``) under the names of the instances of class
    ``name`` the file binds (``trainer = Trainer(model, ...)`` makes ``trainer.model``, also
    ``self.trainer.model`` for ``self.trainer = Trainer(...)`` in another class): code outside
    the class reads the same prepared object there (``torch.save(trainer.model.state_dict(),
    path)`` after ``trainer.fit()`` saves it unwrapped, as ``fit()`` itself would)."""
    facts = a.facts
    for assign in a.r.assigns:
        built = constructed(assign.value)
        if len(assign.targets) != 1 or not isinstance(built, cst.Call) or dotted(built.func) != name:
            continue
        instance = assign.targets[0]
        for attribute in held:
            outside = f"{instance}.{attribute.split('.', 1)[1]}"
            facts.prepared_attributes.add(outside)
            if attribute in facts.models:
                facts.models.add(outside)


def _is_attribute_of(name: str, instance: str | None) -> bool:
    """``self.model`` for instance ``self`` (one level: not ``self.model.fc``)."""
    return name.startswith(f"{instance}.") and name.count(".") == 1


def _attributes_built_here(a: Analysis, name: str) -> set[str]:
    """What the methods of class ``name`` assign, less what holds an object the caller passed in:
    ``self.model = model`` (a parameter of ``__init__``), then ``self.model =
    self.model.to(device)`` is what the caller built, and the caller prepares it."""
    owner = a.r.classes[name]
    assigned = [assign for assign in a.r.assigns if assign.function == name]
    built_in_the_call = _parameters_built_in_every_call(a, name)
    params = set(owner.init_params or ()) - built_in_the_call
    sources = [(target, dotted(constructed(assign.value))) for assign in assigned for target in assign.targets]
    # ``self.net = self.net.to(device)`` moves what ``self.net`` held: received only where no
    # method builds it (``self.net = nn.Linear(8, 3)`` before the move is built here).
    built_otherwise = {target for target, source in sources if source not in params and source != target}
    received = {
        target for target, source in sources if source in params or (source == target and target not in built_otherwise)
    }
    # A parameter built in every call counts as built here: what ``self.model = model`` keeps.
    return ({target for assign in assigned for target in assign.targets} - received) | built_in_the_call


def _parameters_built_in_every_call(a: Analysis, name: str) -> set[str]:
    """The ``__init__`` parameters of class ``name`` that every construction fills with an object
    built in the call (``Trainer(nn.Linear(8, 1))``, here or, by the seeds, in the program's other
    modules): no caller holds it by a name to prepare, so the attribute keeping it is prepared in
    ``__init__``, as one built there."""
    params = a.r.classes[name].init_params or ()
    calls = a.constructions.get(name, [])
    elsewhere = {param for owner, param in a.seeds.built_in_every_call if owner == name} if a.seeds else set()
    found: set[str] = set()
    for index, param in enumerate(params):
        arguments = [argument_for(call.node, index, param) for call in calls]
        built_here = all(arg is not None and isinstance(arg.value, cst.Call) for arg in arguments)
        if built_here and (arguments or param in elsewhere):
            found.add(param)
    return found


def _method_prepare(a: Analysis, name: str) -> set[str]:
    """``a.method_prepare`` (the training-class rule's) for one training class; the names it covers."""
    facts = a.facts
    owner = a.r.classes[name]
    # ``__init__`` and the methods it calls (``self.build_model()``) build what is prepared
    # at the end of ``__init__``.
    from_init = _run_when_built(owner)
    covered: set[str] = set()
    # A model a method builds outside ``__init__`` and trains there (``fit()`` building its own
    # ``model`` or ``self.model`` and its optimizer; in a class without ``__init__``, whatever
    # ``setup()`` builds) is prepared in that method, where it is built, as its optimizer is:
    # ``__init__`` never holds it. A model a method builds only to evaluate (``test()`` loading
    # weights into a ``model`` of the same name) is moved there instead, not wrapped.
    training = _methods_training(a, name)
    roles = facts.loaders | facts.optimizers
    for assign in a.r.assigns:
        if assign.function != name or len(assign.scope) < 2 or assign.scope[1] in from_init:
            continue
        if not _in_functions(a, assign.scope):
            continue
        # A function nested in the method (``def train(epoch)`` in ``fit``, building its optimizer
        # each epoch) prepares what it builds there too: ``fit.train``, its path in the class.
        method = ".".join(assign.scope[1:])
        trains = "__init__" not in owner.self_names or assign.scope[1] in training
        held = roles | facts.models if trains else roles
        built = _built_unprepared(a, assign, owner.self_names.get(assign.scope[1]), held)
        if not built:
            continue
        if set(assign.targets) & _returned_by(a, name, method) and (name, assign.scope[1]) not in a.backward_methods:
            # A builder's (``return model, optimizer``): its caller prepares what it unpacks. A
            # method that trains what it builds and returns it (``fit()`` ending ``return model``)
            # prepares it, as a training function does.
            continue
        found = a.method_prepare.setdefault(name, {}).setdefault(method, ())
        a.method_prepare[name][method] = (*found, *(t for t in built if t not in found))
        covered.update(built)
    return covered


def _methods_training(a: Analysis, name: str) -> set[str]:
    """The methods of class ``name`` that train: run a backward or build an optimizer (in their
    own body or a function nested in it)."""
    found = {method for owner, method in a.backward_methods if owner == name}
    return found | {
        assign.scope[1]
        for assign in a.r.assigns
        if assign.function == name and len(assign.scope) >= 2 and set(assign.targets) & a.facts.optimizers
    }


def _in_functions(a: Analysis, scope: tuple[str, ...]) -> bool:
    """Whether ``scope`` (a class's, then a method's) is a method or a function nested in one,
    at any depth, not a class defined in it."""
    return all(a.r.names.scopes[scope[:depth]].kind == "function" for depth in range(2, len(scope) + 1))


def _returned_by(a: Analysis, name: str, method: str) -> set[str]:
    """The names (and attributes) the method ``method`` of class ``name`` returns, alone or in a
    tuple (``return model, optimizer``)."""
    found: set[str] = set()
    for scope, value in a.r.method_returns:
        if scope == (name, method):
            parts = [element.value for element in value.elements] if isinstance(value, cst.Tuple) else [value]
            found.update(path for part in parts if (path := dotted(part)) is not None)
    return found


def _built_unprepared(
    a: Analysis, assign: AssignRecord, instance: str | None, roles: AbstractSet[str]
) -> tuple[str, ...]:
    """What a method's assignment builds (a call, not a prepare) for its method to prepare: its
    targets, where each is an object of ``roles`` nothing prepared yet, a local or an attribute of
    the method's instance (one level); or, from a loader factory returning loaders beside other
    values (``(train_loader, test_loader), n_classes = self.make_data()``), the targets of
    ``roles`` alone. None otherwise."""
    value = constructed(assign.value)
    if instance is None or not isinstance(value, cst.Call) or is_any_prepare(value) or not assign.targets:
        return ()
    prepared = a.facts.prepared

    def fresh(target: str) -> bool:
        own = "." not in target or target.startswith(f"{instance}.") and target.count(".") == 1
        return target in roles and target not in prepared and own

    if all(fresh(target) for target in assign.targets):
        return assign.targets
    factory = dotted(value.func) in a.loader_factories or (
        isinstance(value.func, cst.Attribute)
        and dotted(value.func.value) == instance
        and (assign.scope[0], value.func.attr.value) in a.loader_methods
    )
    return tuple(target for target in assign.targets if fresh(target)) if factory else ()


def training_bases(a: Analysis, classes: Sequence[str]) -> set[str]:
    """The classes of this module that training classes derive from (``Trainer(BaseTrainer)``,
    with ``BaseTrainer`` here or, in a program, named by the seeds), joined to the training
    classes as :attr:`ScriptFacts.training_bases`: their methods (pytorch-template's
    ``BaseTrainer.train`` printing and saving checkpoints) run on a subclass's instance, which
    holds ``self.accelerator``. Only bases never constructed here whose every subclass here is
    a training class or such a base: an instance without the accelerator would fail there."""
    facts = a.facts
    parents = _local_parents(a)
    found = set(a.seeds.training_bases) & set(a.r.classes) if a.seeds is not None else set()
    pending = [*classes, *found]
    while pending:
        for parent in parents.get(pending.pop(), ()):
            if parent not in found and parent not in classes:
                found.add(parent)
                pending.append(parent)
    found -= set(a.constructions) | facts.model_classes
    unsafe: set[str] = {""}
    while unsafe:
        unsafe = {
            base
            for base in found
            if any(base in bases and child not in found and child not in classes for child, bases in parents.items())
        }
        found -= unsafe
    facts.training_bases |= found
    facts.training_classes |= found
    for name in found:
        # What it builds in ``__init__`` (an optimizer over ``self.model``) is prepared there:
        # its subclass keeps the accelerator before calling ``super().__init__``.
        class_prepare(a, name)
    return found


def library_training_classes(a: Analysis) -> None:
    """A library's training classes (constructed by the entry script, which passes the
    accelerator to their ``__init__``): their methods reach it as ``self.accelerator``."""
    facts = a.facts
    classes = find_training_classes(a)
    facts.training_classes.update(classes)
    for name in classes:
        class_prepare(a, name)
    bases = training_bases(a, classes)
    facts.accessible_functions |= a.reachable(set(classes) | bases)


@provider(
    needs=("training_classes", "backward_methods"),
    provides=("training_method_lines",),
)
def training_method_lines(a: Analysis) -> None:
    """Lines calling a method that trains on an instance of a training class the module builds
    (``lr_finder = LRFinder(model, optimizer, criterion, device)`` then
    ``lr_finder.range_test(train_iterator, ...)``): training starts there, so ``prepare`` goes
    above it, and moves of the models it trains stay needed until then."""
    facts = a.facts
    instances: dict[str, str] = {}
    for assign in a.r.assigns:
        built = assign.value
        if (
            isinstance(built, cst.Call)
            and isinstance(built.func, cst.Name)
            and built.func.value in facts.training_classes
        ):
            for target in assign.targets:
                instances[target] = built.func.value
    if not instances:
        return
    training = {(owner, method) for owner, method in a.backward_methods if method != "__init__"}
    for call in a.r.calls:
        func = call.node.func
        if not isinstance(func, cst.Attribute):
            continue
        owner = instances.get(dotted(func.value) or "")
        if owner is not None and (owner, func.attr.value) in training:
            facts.training_method_lines.add(a.site(call.node).line)
