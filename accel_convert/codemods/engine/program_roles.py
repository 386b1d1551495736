"""What one round of a program's analysis carries from module to module (:mod:`codemods.engine.program`):
the roles (model, optimizer, loaders...) and the preparedness that arguments give the parameters
they fill (:class:`Received`), and everything learnt, turned into each module's next seeds
(:class:`Learnt`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import field, replace

from accel_convert.codemods.engine.devices import written_parts
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.program_calls import (
    INLINE_FILE_LOGGER,
    INLINE_GPU_INDEX,
    INLINE_LOADER,
    INLINE_MODEL,
    CrossCall,
    InstanceCalls,
)
from accel_convert.codemods.engine.program_seeds import ROLES, ProgramSeeds
from accel_convert.codemods.engine.program_shapes import ModuleShape, function_at
from accel_convert.records import record


def imported_gpu_indices(facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
    """Module → the names it imports that another module's code binds to a fixed GPU at module
    level, as the importing module reads them: ``cfg["gpu"]`` (``from config import cfg``) or
    ``config.cfg["gpu"]`` (``import config``) where ``config.py`` binds ``cfg = {"gpu": 0, ...}``."""
    found: dict[str, set[str]] = {}
    for name, module_facts in facts.items():
        for local, qualified in module_facts.imports.items():
            for owner, owner_facts in facts.items():
                if owner == name:
                    continue
                for held in owner_facts.module_gpu_indices:
                    variable = written_parts(held)[-1]
                    if qualified == f"{owner}.{variable}":
                        found.setdefault(name, set()).add(local + held[len(variable) :])
                    elif qualified == owner:
                        found.setdefault(name, set()).add(f"{local}.{held}")
    return found


def prepared_by_entry(facts: ScriptFacts, shape: ModuleShape) -> set[str]:
    """Names the entry script's ``prepare`` calls will cover: the trained objects its home block
    binds (a per-epoch scheduler is not prepared), those a function training the model it
    receives builds (``train_model(model, ...)`` building its loaders and optimizer prepares them
    there), and those it already prepares. Counting only the home block, a loader prepared in
    such a function was known as prepared only once the ``prepare`` was written: the second
    conversion then dropped ``device=`` from its batches in another module, the first had not."""
    wanted = facts.models | facts.optimizers | facts.loaders | (facts.schedulers - facts.per_epoch_schedulers)
    wanted -= facts.loaders_left_unsharded
    home = facts.creating_function or facts.main_function if facts.home_kind == "function" else None
    prepared = set(facts.prepared)
    for name in wanted:
        for site in facts.assign_sites.get(name, ()):
            inside = function_at(shape, site.line)
            if (
                (home is not None and inside in {home, facts.main_function})
                or (home is None and inside == "<module>")
                or inside in facts.training_functions
            ):
                prepared.add(name)
    return prepared


#: A role an argument holds in the caller's module → the role its parameter gets in the callee's:
#: an evaluation loader handed over is a loader there, where the callee's own loops decide its use.
_ROLES_PASSED: tuple[tuple[str, str], ...] = (*((role, role) for role in ROLES), ("eval_loaders", "train_loaders"))


@record()
class Received:
    """What modules receive from the rest of the program in one round: module → role → names
    of parameters and attributes, and module → the names that arrive prepared."""

    roles: dict[str, dict[str, set[str]]]
    prepared: dict[str, set[str]]
    #: Module → its parameters filled with a GPU index (see ``ProgramSeeds.gpu_index_parameters``).
    gpu_indices: dict[str, set[str]] = field(default_factory=dict)
    #: Program functions and classes (qualified) one of whose parameters is filled with a GPU index
    #: that a call there takes as its device.
    index_callees: set[str] = field(default_factory=set)
    #: Module → its parameters filled with a loader the caller keeps unprepared (see
    #: ``ProgramSeeds.unsharded_parameters``).
    unsharded: dict[str, set[str]] = field(default_factory=dict)
    #: Module → (function or class, parameter) → whether every call from another module fills it
    #: with a model built in the call (see ``ProgramSeeds.built_in_every_call``).
    built_inline: dict[str, dict[tuple[str, str], bool]] = field(default_factory=dict)
    #: Module → its parameters filled with a file logger (see ``ProgramSeeds.logger_parameters``).
    loggers: dict[str, set[str]] = field(default_factory=dict)
    #: Program functions and classes (qualified) a call hands a file logger built in the call.
    logger_callees: set[str] = field(default_factory=set)

    def add_role(self, module: str, role: str, name: str) -> None:
        self.roles[module].setdefault(role, set()).add(name)

    def through_calls(
        self, calls: Iterable[CrossCall], facts: dict[str, ScriptFacts], prepared_in: dict[str, set[str]]
    ) -> None:
        """A parameter filled with an object of a role (or with an object holding one, as
        ``loaders`` holding ``loaders.train``) has that role in the callee; one filled with a
        prepared object, or with a loader built in the call, arrives prepared."""
        for call in calls:
            caller = facts[call.caller_module]
            for param, argument in call.arguments:
                for role, rest in _roles_of_argument(caller, argument):
                    self.add_role(call.callee_module, role, param + rest)
                inline = self.built_inline.setdefault(call.callee_module, {})
                inline[(call.callee, param)] = inline.get((call.callee, param), True) and argument == INLINE_MODEL
                if argument in prepared_in[call.caller_module] or argument == INLINE_LOADER:
                    self.prepared[call.callee_module].add(param)
                if argument in caller.loaders_left_unsharded:
                    # Still a loader there (no longer an evaluation loader here): its loops are
                    # evaluations over every batch.
                    self.add_role(call.callee_module, "train_loaders", param)
                    self.unsharded.setdefault(call.callee_module, set()).add(param)
                if argument == INLINE_LOADER:
                    self.add_role(call.callee_module, "train_loaders", param)
                if argument == INLINE_FILE_LOGGER or argument in caller.file_loggers:
                    # Built on the main process only where it is built: None on the others.
                    self.loggers.setdefault(call.callee_module, set()).add(param)
                if argument == INLINE_FILE_LOGGER:
                    self.logger_callees.add(f"{call.callee_module}.{call.callee}")
                if argument == INLINE_GPU_INDEX or argument in caller.gpu_index_values:
                    self.gpu_indices.setdefault(call.callee_module, set()).add(param)
                    if (call.callee, param) in facts[call.callee_module].devices_taken:  # a device there
                        self.index_callees.add(f"{call.callee_module}.{call.callee}")

    def through_instances(
        self, instances: dict[str, InstanceCalls], facts: dict[str, ScriptFacts], prepared_in: dict[str, set[str]]
    ) -> None:
        """``early_stopping(val_loss, model)``: ``model`` of ``EarlyStopping.__call__`` is a
        (prepared) model there, as a function's parameter is; ``evaluator.accuracy(model,
        test_loader)``: ``data_loader`` of ``Evaluator.accuracy`` is a loader there, whose loops
        decide its use (an evaluation loader is handed over as a function's argument is)."""
        for name, found in instances.items():
            for callee_module, param, value in found.filled:
                for role, rest in _roles_of_argument(facts[name], value):
                    self.add_role(callee_module, role, param + rest)
                if value in prepared_in[name]:
                    self.prepared[callee_module].add(param)
            self._held_by_instances(name, found, facts)

    def _held_by_instances(self, name: str, found: InstanceCalls, facts: dict[str, ScriptFacts]) -> None:
        """``trainer = Trainer(model, ...)`` with ``Trainer`` of another module holding a prepared
        model (``self.model``): ``trainer.model`` is that prepared model in module ``name`` too,
        so a save of ``trainer.model.state_dict()`` there writes it unwrapped."""
        for instance, (callee_module, _) in found.instances.items():
            held = _attributes_of_self(facts[callee_module].prepared_attributes)
            for attribute in held & facts[callee_module].models:
                outside = f"{instance}.{attribute.split('.', 1)[1]}"
                self.add_role(name, "models", outside)
                self.prepared[name].add(outside)

    def through_base_classes(
        self, parents: dict[tuple[str, str], set[tuple[str, str]]], facts: dict[str, ScriptFacts]
    ) -> None:
        """A subclass's instance holds what its base class's ``__init__`` binds (``self.model``):
        roles of those attributes reach the subclass's module (pytorch-template's ``Trainer``
        evaluating ``self.model``, which ``BaseTrainer.__init__`` binds), prepared where the base's
        ``__init__`` received them prepared (the entry prepared them)."""
        for (name, _), found in parents.items():
            for owner, _ in found:
                if owner == name:
                    continue
                for held_role, role in _ROLES_PASSED:
                    for held in _attributes_of_self(getattr(facts[owner], held_role)):
                        self.add_role(name, role, held)
                self.prepared[name] |= _attributes_of_self(facts[owner].prepared_attributes)


@record(frozen=True)
class Learnt:
    """What one round of analysis learnt about each module from the others (see :class:`ProgramSeeds`)."""

    received: Received
    #: Module → names it passes to a parameter another module trains as a model.
    handed_over: dict[str, set[str]]
    #: Library module → its functions every caller of which holds the accelerator.
    reaches: dict[str, set[str]]
    #: Module → its classes whose instances other modules hand a prepared model.
    given_models: dict[str, set[str]]
    #: Qualified names, program-wide.
    loader_factories: set[str]
    looping: set[str]
    backward: set[str]
    #: Classes (qualified) whose methods run a backward or loop over a loader.
    training_classes: set[str]
    #: Functions and classes drawing from a global generator before any seed.
    drawing: set[str]
    #: Functions, classes and methods whose call downloads a data set.
    downloading: set[str]
    #: Module → its classes of each kind.
    training_bases: dict[str, set[str]]
    training_base_subclasses: dict[str, set[str]]
    inherited_accelerator: dict[str, set[str]]
    #: Module → names it passes to be stepped as a scheduler once per epoch.
    per_epoch: dict[str, set[str]]
    #: Module → names another module steps (see ``ProgramSeeds.stepped_elsewhere``).
    stepped: dict[str, set[str]]
    #: Modules that save a checkpoint.
    saving: set[str]
    #: Functions (qualified) writing / reading a checkpoint at a parameter's path (position, name).
    path_writers: tuple[tuple[str, int, str], ...]
    path_readers: tuple[tuple[str, int, str], ...]
    #: Functions (qualified) writing a file per batch of the loader a parameter holds (position, name).
    per_batch_file_writers: tuple[tuple[str, int, str], ...]
    #: Program functions (qualified) called from another module → whether every such call evaluates.
    evaluating_calls: dict[str, bool]
    #: Program functions (qualified) called from another module → whether every such call is
    #: made per process (a dataset's ``__getitem__``) and none is handed over as a value.
    per_process_calls: dict[str, bool] = field(default_factory=dict)
    #: Program functions and methods (qualified) called from another module's loops → whether
    #: every such call is in a loop that trains over a loader.
    training_calls: dict[str, bool] = field(default_factory=dict)
    #: Program functions and methods (qualified) another module calls where some rank may not go.
    called_on_some_ranks: set[str] = field(default_factory=set)
    #: Module → the names it imports that another module binds to a fixed GPU, as it reads them.
    imported_gpu_indices: dict[str, set[str]] = field(default_factory=dict)
    #: Loader factories (qualified) returning a tuple of loaders of known length → that length.
    loader_tuple_factories: dict[str, int] = field(default_factory=dict)
    #: Loader factories (qualified) returning a tuple with loaders at some positions → those.
    loader_factory_positions: dict[str, frozenset[int]] = field(default_factory=dict)
    #: Functions and static or class methods (qualified) returning a new model, program-wide.
    model_factories: set[str] = field(default_factory=set)
    #: Functions (qualified) returning a file they open for writing → its mode.
    handle_openers: tuple[tuple[str, str], ...] = ()
    #: Handle openers (qualified) called from another module → whether every such call keeps the
    #: file for writing alone.
    main_process_openers: dict[str, bool] = field(default_factory=dict)
    #: Methods (qualified) returning a new optimizer, program-wide.
    optimizer_methods: set[str] = field(default_factory=set)
    #: Parts of model classes (qualified) their ``forward`` runs, program-wide.
    model_parts: set[str] = field(default_factory=set)
    #: Methods of model classes (qualified) that evaluate, program-wide.
    evaluating_methods: set[str] = field(default_factory=set)
    #: Functions (qualified) returning a loader whose collate function joins the samples' rows.
    joined_rows_factories: dict[str, frozenset[int]] = field(default_factory=dict)

    def seeds(self, name: str, old: ProgramSeeds, shape: ModuleShape) -> ProgramSeeds:
        """Module ``name``'s seeds for the next round (functions of its own are not imported)."""
        own = {f"{name}.{function}" for function in shape.params}
        return replace(
            old,
            parameter_roles=tuple(
                sorted((role, frozenset(names)) for role, names in self.received.roles[name].items())
            ),
            prepared=frozenset(self.received.prepared[name]),
            models_handed_over=frozenset(self.handed_over.get(name, set())),
            accelerator_reaches=frozenset(self.reaches.get(name, set())),
            classes_given_models=frozenset(self.given_models.get(name, set())),
            loader_factories=frozenset(self.loader_factories),
            loader_tuple_factories=tuple(sorted(self.loader_tuple_factories.items())),
            loader_factory_positions=tuple(
                sorted((name, frozenset(positions)) for name, positions in self.loader_factory_positions.items())
            ),
            model_factories=frozenset(self.model_factories),
            optimizer_methods=frozenset(self.optimizer_methods),
            model_parts=frozenset(self.model_parts),
            evaluating_methods=frozenset(self.evaluating_methods),
            joined_rows_factories=tuple(sorted(self.joined_rows_factories.items(), key=lambda entry: entry[0])),
            looping_functions=frozenset(self.looping - own),
            backward_functions=frozenset(self.backward - own),
            training_classes_elsewhere=frozenset(self.training_classes - own),
            drawing_functions=frozenset(self.drawing - own),
            download_callables=frozenset(self.downloading - own),
            training_bases=frozenset(self.training_bases.get(name, set())),
            training_base_subclasses=frozenset(self.training_base_subclasses.get(name, set())),
            inherited_accelerator=frozenset(self.inherited_accelerator.get(name, set())),
            per_epoch_schedulers=frozenset(self.per_epoch.get(name, set())),
            stepped_elsewhere=frozenset(self.stepped.get(name, set())),
            saved_elsewhere=bool(self.saving - {name}),
            path_writers=tuple(entry for entry in self.path_writers if entry[0] not in own),
            path_readers=tuple(entry for entry in self.path_readers if entry[0] not in own),
            handle_openers=tuple(entry for entry in self.handle_openers if entry[0] not in own),
            opened_on_main_process=_own_callees_held(self.main_process_openers, name, shape),
            per_batch_file_writers=tuple(entry for entry in self.per_batch_file_writers if entry[0] not in own),
            unsharded_parameters=frozenset(self.received.unsharded.get(name, set())),
            built_in_every_call=frozenset(
                key for key, inline in self.received.built_inline.get(name, {}).items() if inline
            ),
            gpu_index_parameters=frozenset(self.received.gpu_indices.get(name, set())),
            gpu_index_callees=frozenset(self.received.index_callees),
            called_on_some_ranks=frozenset(
                function
                for qualified in self.called_on_some_ranks
                if (function := _own_function_or_method(qualified, name, shape)) is not None
            ),
            imported_gpu_indices=frozenset(self.imported_gpu_indices.get(name, set())),
            logger_parameters=frozenset(self.received.loggers.get(name, set())),
            logger_callees=frozenset(self.received.logger_callees),
            called_from_elsewhere=_own_verdicts(self.per_process_calls, name, shape),
            fed_from_elsewhere=_own_callees_held(self.training_calls, name, shape),
            evaluated_from_elsewhere=_own_verdicts(self.evaluating_calls, name, shape),
        )


def _own_verdicts(verdicts: dict[str, bool], name: str, shape: ModuleShape) -> tuple[tuple[str, bool], ...]:
    """The program's verdicts on calls of functions (qualified) that are module ``name``'s own,
    keyed as :func:`_own_callee` names them."""
    return tuple(
        sorted(
            (function, verdict)
            for qualified, verdict in verdicts.items()
            if (function := _own_callee(qualified, name, shape)) is not None
        )
    )


def _own_callees_held(verdicts: dict[str, bool], name: str, shape: ModuleShape) -> frozenset[str]:
    """Module ``name``'s own callees (keyed as :func:`_own_callee` names them) whose verdict holds."""
    return frozenset(function for function, verdict in _own_verdicts(verdicts, name, shape) if verdict)


def _own_callee(qualified: str, name: str, shape: ModuleShape) -> str | None:
    """What of module ``name`` a qualified callee is: a function (``accuracy`` for
    ``helper.accuracy``), a method of one of its classes (``Evaluator.accuracy`` for
    ``pkg.evalu.Evaluator.accuracy``); None for another module's."""
    module, _, function = qualified.rpartition(".")
    if module == name:
        return function
    module, _, owner = module.rpartition(".")
    return f"{owner}.{function}" if module == name and owner in shape.classes else None


def _own_function_or_method(qualified: str, name: str, shape: ModuleShape) -> str | None:
    """:func:`_own_callee`, a method of any module-level class of module ``name`` included (one
    without an ``__init__`` of its own: ``Folders.make`` for ``snapshot_dirs.Folders.make``)."""
    module, _, method = qualified.rpartition(".")
    holder, _, owner = module.rpartition(".")
    if holder == name and method in shape.methods.get(owner, {}):
        return f"{owner}.{method}"
    return _own_callee(qualified, name, shape)


def _roles_of_argument(facts: ScriptFacts, argument: str) -> Iterator[tuple[str, str]]:
    """(role the parameter gets, attribute path after it) for each object of a role that the
    argument is (``model``: ("models", "")) or holds (``loaders`` holding ``loaders.train``:
    ("train_loaders", ".train"))."""
    for held_role, role in _ROLES_PASSED:
        for name in getattr(facts, held_role):
            if name == argument:
                yield role, ""
            elif name.startswith(argument + "."):
                yield role, name[len(argument) :]


def _attributes_of_self(names: Iterable[str]) -> set[str]:
    return {name for name in names if name.startswith("self.")}


def models_handed_over(calls: Iterable[CrossCall], facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
    """``Trainer(model, ...)``: a parameter the callee trains as a model makes the argument a
    model where it is built (the callee's module prepares none of what it is handed). Only a
    callee that trains: a helper a model is handed to (``save_network(network, ...)``, called
    with the model and with an ``AveragedModel`` of it, the re-ID baseline's) holds a model only
    because a caller handed it one, which makes nothing else it is handed a model."""
    handed_over: dict[str, set[str]] = {}
    for call in calls:
        callee_facts = facts[call.callee_module]
        if not _trains(call.callee, callee_facts):
            continue
        for param, argument in call.arguments:
            if param in callee_facts.models and param not in callee_facts.frozen_models and argument != INLINE_MODEL:
                handed_over.setdefault(call.caller_module, set()).add(argument)
    return handed_over


def _trains(callee: str, facts: ScriptFacts) -> bool:
    """Whether the module-level function or class ``callee`` trains what it is handed: a class
    of the module's training classes or models, or a function running a training loop (its own
    or one it calls) or building an optimizer for what it receives."""
    if callee in facts.training_functions or callee in facts.training_classes or callee in facts.model_classes:
        return True
    reached = {callee, *facts.call_graph.get(callee, ())}
    return any(loop.function in reached for loop in facts.train_loops)


def classes_given_models(
    instances: dict[str, InstanceCalls], facts: dict[str, ScriptFacts], prepared_in: dict[str, set[str]]
) -> dict[str, set[str]]:
    """Module → its classes whose instances (or constructors) another module hands a prepared model."""
    given: dict[str, set[str]] = {}
    for name, found in instances.items():
        for (callee_module, cls), passed in found.passed.items():
            if any(value in facts[name].models and value in prepared_in[name] for _, value in passed):
                given.setdefault(callee_module, set()).add(cls)
    return given


def per_epoch_arguments(calls: Iterable[CrossCall], facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
    """Module → names it passes to a parameter another module steps as a scheduler once per epoch."""
    per_epoch: dict[str, set[str]] = {}
    for call in calls:
        stepped = facts[call.callee_module].per_epoch_schedulers
        per_epoch.setdefault(call.caller_module, set()).update(
            argument for param, argument in call.arguments if param in stepped
        )
    return per_epoch


def stepped_elsewhere(
    calls: Iterable[CrossCall], parents: dict[tuple[str, str], set[tuple[str, str]]], facts: dict[str, ScriptFacts]
) -> dict[str, set[str]]:
    """Module → names another module steps: what it passes to a parameter stepped there
    (``Trainer(model, optimizer, ...)`` running ``self.optimizer.step()``), and the attributes of
    its classes that a subclass in another module steps (pytorch-template's ``BaseTrainer`` binds
    ``self.optimizer``, its ``Trainer`` steps it)."""
    stepped: dict[str, set[str]] = {}
    for call in calls:
        there = facts[call.callee_module].stepped_objects
        stepped.setdefault(call.caller_module, set()).update(
            argument for param, argument in call.arguments if param in there
        )
    for (name, _), found in parents.items():
        for owner, _ in found:
            if owner != name:
                stepped.setdefault(owner, set()).update(_attributes_of_self(facts[name].stepped_objects))
    return stepped


def by_module(classes: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """(module, class) pairs grouped: module → its classes."""
    found: dict[str, set[str]] = {}
    for module, cls in classes:
        found.setdefault(module, set()).add(cls)
    return found
