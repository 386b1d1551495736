"""The conversion plan: where the accelerator is created, what is prepared where, and where
training starts, decided once from the original program.

The ``home`` provider finds the block that builds the training objects and the functions and
classes the accelerator reaches; the role providers name the models, optimizers, loaders and
schedulers. :func:`conversion_plan` joins those answers into one frozen
:class:`ConversionPlan` (``facts.plan``, read with :func:`plan_of`), so the rules that create the
accelerator, prepare the objects or work around the ``prepare`` call ask one object instead of
each re-deriving the answer (or reading back what an earlier rewrite wrote).

For example, for::

    def train(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader: ...

    def main():
        model = Net()
        loader = DataLoader(dataset)
        train(model, loader)

the plan says: the accelerator is created in ``main`` (``creating_scope``), ``main`` prepares
``model`` and ``loader`` and ``train`` prepares ``optimizer`` (``preparations``), and training
starts at the line calling ``train`` (``training_start_line``). It also answers where a ``prepare``
reaches beyond the statements of its block, from the original program: objects built above the
``__main__`` block (``built_above_guard``, prepared where the block creates the accelerator:
``prepared_where_created``), models the home function is only handed (``received_models``), loaders
wrapped in another class (``loader_wrappings``, each prepared before its first wrap:
``prepared_before_wrapping``) or built again in the training (``rebuilt_loaders``), objects handed
to a function that trains them after training began (``handed_for_training``,
``prepared_before_handing``), the statement after which each block's ``prepare`` goes
(``built_before_training``: ``prepare_after`` and ``first_built``), and the models built again (or
first) after training that must be moved (``rebuilt_models_to_move``), the loaders an evaluation
helper called during or after training builds and prepares (``evaluation_preparations``), and the
models no ``prepare`` of the plan takes (``models_left_unprepared``, reported); the prepare rule
only applies those answers, finding each original line in the tree it is given.

Where a rewrite must find a statement in the tree it is given (which earlier rewrites changed),
it asks this module's recognisers: :func:`creation_index` (the statement creating the
accelerator) and :func:`prepare_call` / :func:`prepared_by` / :func:`prepares_here` (an
``accelerator.prepare(...)`` call): one recogniser each, never a text match of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypeVar

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name, is_accelerator_method
from accel_convert.codemods.engine.chosen_names import next_read
from accel_convert.codemods.engine.devices import constructed, data_parallel_wrapped, is_move, peel_moves
from accel_convert.codemods.engine.facts import MODULE, FactsDraft, ScriptFacts
from accel_convert.codemods.engine.imported_calls import builds_model_of_program_class
from accel_convert.codemods.engine.iteration import iterated
from accel_convert.codemods.engine.loader_values import holds_loaders
from accel_convert.codemods.engine.positions import python_statements
from accel_convert.codemods.engine.syntax import (
    assigned_in,
    body_statements,
    branch_blocks,
    class_methods,
    constant_item,
    defines_method,
    dotted,
    is_main_guard,
    item_code,
    nodes_in,
    parameter_names,
    parameters_filled,
    target_names,
)
from accel_convert.codemods.engine.torch_names import ACCELERATORS, DATA_LOADERS, is_model_constructor
from accel_convert.codemods.engine.walk import child_nodes
from accel_convert.codemods.model.calls import nested_function, pairwise
from accel_convert.codemods.model.provider import provider
from accel_convert.records import record

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from accel_convert.codemods.model.state import Analysis

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")

HomeKind = Literal["function", "main_guard", "module", "library"]

#: The methods of an accelerator that prepare objects (a script written for Accelerate may
#: prepare one kind at a time).
PREPARE_METHODS = frozenset(
    {"prepare", "prepare_model", "prepare_optimizer", "prepare_data_loader", "prepare_scheduler"}
)


@record(frozen=True, eq=False, repr=False)
class ConversionPlan:
    """Where the accelerator is created, what is prepared where, and where training starts."""

    #: Where the training objects are built: a function (``home``), the ``__main__`` block, plain
    #: module code, or "library" (the accelerator comes in from the entry script, or nothing
    #: reaches one).
    home_kind: HomeKind
    #: The module-level function building the training objects; None: module-level code.
    home_function: str | None
    #: The function creating the accelerator when not ``home_function`` (a function calling it
    #: repeatedly creates it once and hands it down).
    creating_function: str | None
    #: The name the converted code gives the accelerator.
    accelerator: str
    #: Where the accelerator is created in its block: after argument parsing, above the first
    #: statement binding one of these names (the device, a "use CUDA" flag, a training object)...
    created_before_binding: AbstractSet[str]
    #: ... or holding one of these original lines, which read it: a backward, the construction
    #: of a training class (handed it), a random draw the processes must agree on, a file kept
    #: open for writing that the main process alone writes (its ``open``, or the construction of
    #: the class whose ``__init__`` opens it: ``codemods.model.file_flow.kept_handles``), and in
    #: module-level code a call of a function it reaches (not one that only parses arguments).
    created_before_lines: tuple[int, ...]
    #: Every object to pass through ``prepare``, in Accelerate's order: models, optimizers, train
    #: loaders, eval loaders, schedulers stepped per batch (each group by name). A name that code
    #: of the module binds (or the home function is handed and trains): not a parameter a
    #: training class or a loader wrapper keeps (``self.loader = loader``).
    to_prepare: tuple[str, ...]
    #: Block (``"<module>"`` or a module-level function) → the objects of ``to_prepare`` it
    #: prepares: the home block what it builds and hands down, a training function what it
    #: builds itself from what it is handed.
    preparations: Mapping[str, tuple[str, ...]]
    #: Functions other than the home block that prepare what they build (``train(model, ...)``
    #: building its optimizer; in a library, its model too).
    preparing_functions: AbstractSet[str]
    #: Training class → the attributes its ``__init__`` builds and prepares.
    class_preparations: Mapping[str, tuple[str, ...]]
    #: Training class → method (not ``__init__``) → the loaders and optimizers it builds
    #: (``train_loader = DataLoader(...)`` in ``Trainer.run``), each prepared right where it is
    #: built.
    method_preparations: Mapping[str, Mapping[str, tuple[str, ...]]]
    #: Models prepared right where they are built (a distilled student, built after training
    #: began), not in the home block's one ``prepare``.
    prepared_where_built: AbstractSet[str]
    #: Names the original script already passed through ``prepare``.
    already_prepared: AbstractSet[str]
    #: Original lines of the home block where training starts: its loops over loaders and its
    #: calls reaching one (or a backward). ``prepare`` goes before the first.
    training_lines: tuple[int, ...]
    #: Original lines of the backward calls that train, wherever they are: a statement of the
    #: home block holding one (``for step in range(n): ... loss.backward()``, no loader) is where
    #: its training starts too.
    backward_lines: tuple[int, ...] = ()
    #: Preparing function → its original lines where its own training starts (its loops over
    #: loaders, its calls reaching one): what it prepares goes before the first.
    function_training_lines: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Preparing function nested in another (``main.train``, by its path) → the original line of
    #: its ``def``: where the prepare rule finds it.
    nested_preparing_lines: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: Whether this module creates the accelerator (``Accelerator.applies``): it trains something
    #: and has none yet, and is no library (which gets the entry script's).
    creates_accelerator: bool = False
    #: Whether the prepare rule has work here (``Prepare.applies``): the module has an
    #: accelerator, and objects to prepare, a received model no block prepares (reported) or a
    #: model to move (``rebuilt_models_to_move``, in a training class's method too).
    prepares: bool = False
    #: Objects of ``to_prepare`` that plain module-level statements above the ``__main__`` block
    #: build (d2l's ``net = nn.Sequential(...)`` at the top, handed to ``train_ch6(net, ...)`` in
    #: the block): the block's one ``prepare`` takes them too, where it creates the accelerator.
    built_above_guard: AbstractSet[str] = frozenset()
    #: Home function → its parameters that are models it trains, bound nowhere in the file but
    #: as its parameters (an ensemble's ``for m in models: train(m, loader)``): what its callers
    #: hand it is prepared by nobody else, so its one ``prepare`` takes them too.
    received_models: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Original line of a home-block statement (in its branches too) handing a loader to a class
    #: that stands for it from then on (``train_dl = DeviceDataLoader(train_dl, device)``), or
    #: taking an iterator from it (``it = iter(loader)``, ``DGloader_iter =
    #: enumerate(dataloaders['DG'])`` of a dict's entry: :func:`iterator_taken`) → (loader,
    #: wrapper) pairs: ``prepare`` passes such a wrapper through, and the iterator reads the
    #: loader it was given, so the loader is prepared right before.
    loader_wrappings: Mapping[int, tuple[tuple[str, str], ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Home block (its function, or ``"<module>"``) → the loaders of ``to_prepare`` it binds before
    #: its training starts where its one ``prepare`` cannot take them: only under a flag (``if
    #: config.is_train: train_loader = ...``: a ``prepare`` after the ``if`` could meet an unbound
    #: name), or to a loader tuple on some paths and one loader on the others
    #: (``loader_tuple_bindings``: no one ``prepare`` fits both). Each binding is prepared right
    #: after it, by its shape (``dloader = accelerator.prepare(*dloader)`` for the tuple).
    prepared_where_bound: Mapping[str, AbstractSet[str]] = field(default_factory=lambda: MappingProxyType({}))
    #: Home block (its function, or ``"<module>"``) → the loaders of ``to_prepare`` it builds again
    #: once its training started (a batch size growing per epoch): each is prepared where it is
    #: built, or its batches would stay whole and on the CPU.
    rebuilt_loaders: Mapping[str, AbstractSet[str]] = field(default_factory=lambda: MappingProxyType({}))
    #: Module-level function (not the home function) that trains what it is handed (runs a
    #: backward, builds no optimizer of its own) → its parameters: objects built after training
    #: began and handed to its model or optimizer parameters are prepared right before that call
    #: (the transfer-learning tutorial's second ``train_model(model_conv, ..., optimizer_conv)``).
    #: Another module's function this one calls that runs a backward (``trainer.fit`` after
    #: ``from trainer import fit``), by its qualified name → no parameters: what a call hands it
    #: that is a model or an optimizer here is what it trains (the program seeds its parameters
    #: with those roles from these very arguments).
    handed_for_training: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Preparing block (a home block, by its function or ``"<module>"``, or a preparing function)
    #: → object of ``to_prepare`` → the original lines (first, last) of the statements binding it
    #: before the block's training starts, each on every path through it (a model chosen in an
    #: ``if`` whose ``else`` exits counts; one built only under a flag does not): what the block's
    #: ``prepare`` can take, and where it goes (after the last of them).
    built_before_training: Mapping[str, Mapping[str, tuple[int, int]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: Home block → original line of a statement building a model again after training began
    #: (the CIFAR-10 tutorial's ``net = Net()`` before ``net.load_state_dict(...)``) whose later
    #: statements read a loader the block prepares, or first building there a model it only
    #: evaluates (``best = Net()``, put in evaluation mode, called where a loader is read) → that
    #: model: its batches are on the accelerator's device, so the model is moved there after that
    #: line. Likewise for a function of ``evaluation_preparations``, a model it builds and calls,
    #: and (under ``"Class.method"``) for a training class's method, a model it builds and calls
    #: where it reads a loader the class prepares (moved to ``self.accelerator.device``).
    rebuilt_models_to_move: Mapping[str, Mapping[int, str]] = field(default_factory=lambda: MappingProxyType({}))
    #: Home block → original line of a statement from where its training starts handing objects
    #: to a function of ``handed_for_training`` (``train_model(model_conv, ..., optimizer_conv)``)
    #: → those of them bound since training started and not prepared since (by an earlier such
    #: prepare, where they are built, or by the original script): prepared right before it, models
    #: first. A plain statement binding a name again makes it unprepared (the tutorial's second
    #: ``opt = optim.SGD(...)``); one only moving it (``model = model.to(device)``) does not.
    prepared_before_handing: Mapping[str, Mapping[int, tuple[str, ...]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: Home block → original line of a statement from where its training starts binding a model
    #: first built there (a student built once the teacher's training is over), or its optimizer or
    #: per-batch scheduler, the last such binding before a statement of the block that trains the
    #: model inline (a loop over the loader running its backward) → the model and those of its
    #: objects that statement reads: prepared right after that line, as the block's first model is
    #: after its own. The loader stays as the block's first ``prepare`` left it; a model the block
    #: built before its training and builds again (``rebuilt_models_to_move``) is not one of these.
    prepared_after_binding: Mapping[str, Mapping[int, tuple[str, ...]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: Home block → original line of a statement before its training starts that hands a loader
    #: the block prepares to a class standing for it from then on, or takes an iterator from it
    #: before the block's ``prepare`` (``loader_wrappings``; in a branch too) → the (loader,
    #: wrapper) pairs wrapped there first: ``prepare`` passes such a wrapper through unchanged,
    #: and the iterator would read the loader as built, so each loader is prepared right before
    #: that statement, once (an entry of a dict of loaders, ``dataloaders['DG']``, too: the
    #: dict's own ``prepare`` passes it through).
    prepared_before_wrapping: Mapping[str, Mapping[int, tuple[tuple[str, str], ...]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: The models of ``to_prepare`` no ``prepare`` of the plan takes (bound only where none can
    #: follow them: under a flag, inside a ``try``) and that are not received models already
    #: reported (``unprepared_received_models``): each trains on its process alone, reported
    #: where it is first bound (ACC926).
    models_left_unprepared: tuple[str, ...] = ()
    #: Module-level function that trains nothing, called only where the accelerator exists: by
    #: the home block from its first training statement on (``test(path)`` after the training
    #: loop, ``validate(model)`` in the epoch loop), or by a training class's methods → the
    #: loaders of ``to_prepare`` it builds: each is prepared where it is built (at each call), so
    #: its evaluation is sharded and gathered as the home block's is, not read whole by every
    #: process. In a library of a program, a function the accelerator reaches (every call of it
    #: made where the accelerator exists, in any module) looping over a loader it builds:
    #: ``evaluation.evaluate_on_val`` called in the entry's epoch loop or for a baseline.
    evaluation_preparations: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Module-level function, or ``"Class.method"`` of a class that does not train → the models
    #: it names that no ``prepare`` can have wrapped (an inference path building its own model,
    #: reached by the accelerator or not): nothing to unwrap, and their moves stay (see
    #: ``own_models``).
    models_never_prepared: Mapping[str, AbstractSet[str]] = field(default_factory=lambda: MappingProxyType({}))
    #: The attributes of a training bundle that the block building it hands on from outside its
    #: class (``exp.model`` after ``exp = Experiment()`` in ``main()``, handed to ``train(exp.model,
    #: exp.train_loader, exp.optimizer)``) → the instance (``exp``): the block prepares them right
    #: after the instance is bound (``exp.model, exp.optimizer, ... = accelerator.prepare(exp.model,
    #: exp.optimizer, ...)``; objects of ``to_prepare``, unless the script prepares them already),
    #: as a training class prepares its own attributes in its ``__init__``.
    bundled: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(
        cls,
        facts: FactsDraft | ScriptFacts,
        bound: Mapping[str, AbstractSet[str]] | None = None,
        methods: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
        parsing: AbstractSet[str] = frozenset(),
        above_guard: AbstractSet[str] = frozenset(),
        received: Mapping[str, tuple[str, ...]] | None = None,
        wrappings: Mapping[int, tuple[tuple[str, str], ...]] | None = None,
        placement: Placement | None = None,
        aliases: AbstractSet[str] = frozenset(),
        bundled: Mapping[str, str] = MappingProxyType({}),
    ) -> ConversionPlan:
        """The plan the facts decide (the analysis' draft, or facts built by hand). The analysis'
        working facts, which facts built by hand lack: ``bound``, module-level function → the
        names it binds (without, the home block prepares everything); ``methods``, training
        class → method → what it builds and prepares; ``parsing``, the functions that only parse
        the command line; ``above_guard``, the names plain statements above the ``__main__``
        block bind; ``received``, home function → the models it is handed and trains, bound
        nowhere else; ``wrappings``, the home block's statements wrapping a loader;
        ``placement``, where in the original statements each block prepares; ``aliases``, the
        names bound only to a prepared attribute (``model = self.model``); ``bundled``, a bundle's
        attributes handed on outside its class → the instance."""
        to_prepare = _objects_to_prepare(facts, None if bound is None else received or {}, aliases, bundled)
        creating = None if facts.home_kind == "library" else facts.creating_function or facts.home_function
        preparing = _preparing_functions(facts)
        placement = placement or Placement()
        prepared_in = _preparations(facts, to_prepare, creating, preparing, bound or {}, methods or {})
        return cls(
            home_kind=facts.home_kind,
            home_function=facts.main_function,
            creating_function=facts.creating_function,
            accelerator=facts.existing_accelerator or facts.accelerator_name,
            created_before_binding=frozenset(facts.device_names | facts.cuda_flags | facts.trained_objects),
            created_before_lines=_lines_reading_the_accelerator(facts, parsing),
            to_prepare=to_prepare,
            preparations=prepared_in,
            preparing_functions=preparing,
            class_preparations=MappingProxyType(dict(facts.class_prepare)),
            method_preparations=_frozen(methods or {}),
            prepared_where_built=frozenset(facts.models_prepared_where_built),
            already_prepared=frozenset(facts.prepared),
            training_lines=tuple(sorted(set(facts.training_lines()))),
            backward_lines=_backward_lines(facts),
            function_training_lines=MappingProxyType(
                {name: tuple(facts.training_lines(name)) for name in sorted(preparing)}
            ),
            nested_preparing_lines=MappingProxyType(dict(placement.nested_definitions)),
            creates_accelerator=(
                facts.existing_accelerator is None and facts.has_accelerator and facts.home_kind != "library"
            ),
            prepares=facts.has_accelerator
            and bool(to_prepare or facts.unprepared_received_models or placement.rebuilt_models_to_move),
            built_above_guard=frozenset(above_guard & set(to_prepare)),
            received_models=MappingProxyType(dict(received or {})),
            loader_wrappings=MappingProxyType(dict(wrappings or {})),
            prepared_where_bound=MappingProxyType(dict(placement.where_bound)),
            rebuilt_loaders=MappingProxyType(dict(placement.rebuilt_loaders)),
            handed_for_training=MappingProxyType(dict(placement.handed_for_training)),
            built_before_training=_frozen(placement.built_before_training),
            rebuilt_models_to_move=_frozen(placement.rebuilt_models_to_move),
            prepared_before_handing=_frozen(placement.prepared_before_handing),
            prepared_after_binding=_frozen(placement.prepared_after_binding),
            prepared_before_wrapping=_frozen(placement.prepared_before_wrapping),
            evaluation_preparations=MappingProxyType(dict(placement.evaluation_preparations)),
            models_never_prepared=MappingProxyType(dict(placement.models_never_prepared)),
            models_left_unprepared=_models_left_unprepared(
                facts, to_prepare, prepared_in, above_guard & set(to_prepare), received or {}, placement, methods or {}
            ),
            bundled=MappingProxyType(dict(bundled)),
        )

    @property
    def home(self) -> str:
        """The block building the training objects: its function, or ``"<module>"``."""
        return self.home_function if self.home_kind == "function" and self.home_function else MODULE

    @property
    def creating_scope(self) -> str | None:
        """The block creating the accelerator: a module-level function, or ``"<module>"`` (the
        module's code or its ``__main__`` block); None when this module creates none (a library:
        it comes in from the entry script)."""
        return None if self.home_kind == "library" else self.creating_function or self.home

    @property
    def home_blocks(self) -> frozenset[str | None]:
        """The functions preparing what the home block builds: the home function and the
        function creating the accelerator (which builds what it hands down, loaders for every
        trial); None stands for module-level code."""
        return frozenset({self.home_function, self.creating_function})

    def training_lines_of(self, block: str | None = None) -> tuple[int, ...]:
        """The original lines where training starts in ``block``: the home block's (None) loops,
        calls reaching one and backwards, or a preparing function's loops and calls."""
        if block is None:
            return (*self.training_lines, *self.backward_lines)
        return self.function_training_lines.get(block, ())

    def prepare_after(self, block: str) -> Mapping[str, int]:
        """Object → the original line of the last statement of ``block`` (a home block, by its
        function or ``"<module>"``, or a preparing function) binding it before the block's
        training starts: the block's ``prepare`` takes the objects it prepares that are here, and
        goes after the last of those lines."""
        return {name: last for name, (_, last) in self.built_before_training.get(block, {}).items()}

    def first_built(self, block: str) -> Mapping[str, int]:
        """Object → the original line of the first statement of ``block`` binding it before the
        block's training starts: ``prepare`` lists each group's objects in that order."""
        return {name: first for name, (first, _) in self.built_before_training.get(block, {}).items()}

    def prepared_where_created(self, block: str) -> tuple[str, ...]:
        """The objects ``block`` (the ``__main__`` block, or the function creating the accelerator
        in such a script) prepares right where it creates the accelerator: those plain statements
        above the ``__main__`` block build (``built_above_guard``) and the block itself does not
        build before its training. The block runs at module level, so preparing them there rebinds
        the globals every function reads."""
        if self.home_kind != "main_guard":
            return ()
        built = self.built_before_training.get(block, {})
        return tuple(name for name in self.to_prepare if name in self.built_above_guard and name not in built)

    @property
    def training_start_line(self) -> int | None:
        """The first original line of the home block where training starts."""
        return self.training_lines[0] if self.training_lines else None

    def built_and_prepared_by(self, function: str, owner: str | None = None) -> tuple[str, ...]:
        """The loaders (and, for a method, optimizers) ``function`` builds and prepares right where
        it builds them: a module-level evaluation helper's (``evaluation_preparations``), or, with
        ``owner`` its training class, a method's (``method_preparations``)."""
        if owner is None:
            return self.evaluation_preparations.get(function, ())
        return self.method_preparations.get(owner, {}).get(function, ())

    def own_models(self, scope: tuple[str, ...]) -> AbstractSet[str]:
        """The models the function or method ``scope`` (``("predict",)``, ``("Predictor",
        "__init__")``) builds for itself, which no ``prepare`` wraps or places on the device,
        whatever other block prepares a model of the same name (``models_never_prepared``)."""
        if len(scope) not in (1, 2):
            return frozenset()
        return self.models_never_prepared.get(".".join(scope), frozenset())

    def prepared_in(self, name: str) -> str | None:
        """The block that prepares ``name``: a module-level function, ``"<module>"``, a training
        class (its ``__init__``) or ``"Class.method"``; None when none does."""
        for block, names in (*self.preparations.items(), *self.class_preparations.items()):
            if name in names:
                return block
        return next(
            (
                f"{owner}.{method}"
                for owner, methods in self.method_preparations.items()
                for method, names in methods.items()
                if name in names
            ),
            None,
        )


@record(frozen=True, eq=False, repr=False)
class Placement:
    """The plan's answers read off the original statements (the analysis has them; facts built by
    hand do not): see the ``ConversionPlan`` fields of the same names."""

    rebuilt_loaders: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    where_bound: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    handed_for_training: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    built_before_training: Mapping[str, Mapping[str, tuple[int, int]]] = field(default_factory=dict)
    rebuilt_models_to_move: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    prepared_before_handing: Mapping[str, Mapping[int, tuple[str, ...]]] = field(default_factory=dict)
    prepared_after_binding: Mapping[str, Mapping[int, tuple[str, ...]]] = field(default_factory=dict)
    prepared_before_wrapping: Mapping[str, Mapping[int, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    #: Home block → the models of ``prepared_where_built`` that one of its statements binds (in
    #: loops, branches and ``with`` blocks too): each is prepared after that statement.
    where_built: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    evaluation_preparations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    models_never_prepared: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    nested_definitions: Mapping[str, int] = field(default_factory=dict)


def _edited_home_blocks(facts: FactsDraft | ScriptFacts) -> frozenset[str]:
    """The home blocks whose statements the prepare rule edits: the home and the creating
    function, or ``"<module>"`` (the module's code or its ``__main__`` block); none in a library."""
    if facts.home_kind == "library":
        return frozenset()
    if facts.home_kind == "function":
        return frozenset(name for name in (facts.main_function, facts.creating_function) if name)
    return frozenset({MODULE})


def _models_left_unprepared(
    facts: FactsDraft | ScriptFacts,
    to_prepare: tuple[str, ...],
    prepared_in: Mapping[str, tuple[str, ...]],
    above_guard: AbstractSet[str],
    received: Mapping[str, tuple[str, ...]],
    placement: Placement,
    methods: Mapping[str, Mapping[str, tuple[str, ...]]],
) -> tuple[str, ...]:
    """See ``ConversionPlan.models_left_unprepared``: the models of ``to_prepare`` that none of
    the plan's ``prepare`` calls takes."""
    built = placement.built_before_training
    taken: set[str] = set()
    for block in _edited_home_blocks(facts):
        taken |= {*built.get(block, {}), *received.get(block, ()), *placement.where_built.get(block, ())}
        for lines in (placement.prepared_before_handing, placement.prepared_after_binding):
            taken |= {name for names in lines.get(block, {}).values() for name in names}
    if facts.home_kind == "main_guard" and (facts.creating_function or MODULE) == MODULE:
        taken |= above_guard  # prepared where the ``__main__`` block creates the accelerator
    for function in _preparing_functions(facts):
        taken |= set(prepared_in.get(function, ())) & set(built.get(function, {}))
    # What a training class's method prepares where it builds it (``model = Net()`` in ``fit()``).
    taken |= {name for found in methods.values() for names in found.values() for name in names}
    reported = {name for name, _, _ in facts.unprepared_received_models}
    return tuple(
        name
        for name in to_prepare
        if name in facts.models and name not in taken | reported and facts.assign_sites.get(name)
    )


def _objects_to_prepare(
    facts: FactsDraft | ScriptFacts,
    received: Mapping[str, tuple[str, ...]] | None = None,
    aliases: AbstractSet[str] = frozenset(),
    bundled: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """See ``ConversionPlan.to_prepare``. With the analysis' ``received`` (home function → the
    models it is handed and trains): a name no code binds but as a parameter (a training class's
    ``__init__(self, model)`` handed ``Trainer(nn.Linear(8, 1))``, a loader wrapper's
    ``__init__(self, loader)``) is no object of this module to prepare, unless the home function
    is handed it and trains it. A bundle's attribute handed on outside its class (``bundled``:
    ``exp.model``) is one, prepared where its instance is bound."""
    bundled = bundled or {}
    kept = None if received is None else {*facts.assign_sites, *(name for names in received.values() for name in names)}
    if kept is not None:
        kept = (kept - aliases) | set(bundled)
    return tuple(
        name
        for group in facts.preparation_groups()
        for name in sorted(group)
        if name not in facts.prepared and (name.isidentifier() or name in bundled) and (kept is None or name in kept)
    )


def _frozen(nested: Mapping[str, Mapping[_Key, _Value]]) -> Mapping[str, Mapping[_Key, _Value]]:
    """``nested``, read-only at both levels."""
    return MappingProxyType({key: MappingProxyType(dict(inner)) for key, inner in nested.items()})


def _preparing_functions(facts: FactsDraft | ScriptFacts) -> frozenset[str]:
    """See ``ConversionPlan.preparing_functions``."""
    return frozenset(facts.training_functions - {facts.main_function, facts.creating_function})


def _backward_lines(facts: FactsDraft | ScriptFacts) -> tuple[int, ...]:
    """See ``ConversionPlan.backward_lines``."""
    return tuple(sorted({site.line for site in facts.training_backward_sites}))


def _home_training_lines(facts: FactsDraft | ScriptFacts) -> tuple[int, ...]:
    """``ConversionPlan.training_lines_of(None)``, from the facts."""
    return (*sorted(set(facts.training_lines())), *_backward_lines(facts))


def _lines_reading_the_accelerator(facts: FactsDraft | ScriptFacts, parsing: AbstractSet[str]) -> tuple[int, ...]:
    """See ``ConversionPlan.created_before_lines``."""
    lines = [site.line for site in facts.call_sites.get(".backward", ())]
    lines += [site.line for name in facts.training_classes for site in facts.call_sites.get(name, ())]
    lines += facts.shared_draw_lines
    # A file kept open for writing that the main process alone writes (``log = open(path, "a")``
    # above the training objects): opened where the accelerator tells the main process.
    lines += [line for line, _ in facts.handles_main_process_writes]
    if facts.home_kind != "function":
        # So is one a class's ``__init__`` opens, where the accelerator is a global its methods
        # read (a function's own accelerator reaches no class but a training class, handed it).
        lines += [site.line for name in facts.classes_opening_handles for site in facts.call_sites.get(name, ())]
        # Module-level code: a call of one of the file's functions (``root = download()``) may
        # reach code the other rules give the accelerator (a guarded write, a print).
        called = (facts.accessible_functions - parsing) & set(facts.call_graph.get(MODULE, ()))
        lines += [site.line for name in called for site in facts.call_sites.get(name, ())]
    return tuple(lines)


def _preparations(
    facts: FactsDraft | ScriptFacts,
    to_prepare: tuple[str, ...],
    creating: str | None,
    preparing: frozenset[str],
    bound: Mapping[str, AbstractSet[str]],
    methods: Mapping[str, Mapping[str, tuple[str, ...]]],
) -> Mapping[str, tuple[str, ...]]:
    """Block → what it prepares (see ``ConversionPlan.preparations``): a preparing function what
    it binds itself (in a script, not a model the home block builds: it prepares the models it
    hands over),
    the home block the rest, but what only a training class's method builds."""
    library = facts.home_kind == "library"
    found: dict[str, tuple[str, ...]] = {}
    here = bound.get(creating or MODULE, frozenset())
    # A name two functions bind is prepared by each (each builds its own object). A model the
    # home block builds is prepared there (it hands it over); one only a training function
    # builds (``train(train_loader)`` handed its loaders), there.
    for function in sorted(preparing):
        names = tuple(
            name
            for name in to_prepare
            if name in bound.get(function, ()) and (library or name not in facts.models or name not in here)
        )
        if names:
            found[function] = names
    # The home block prepares everything else: what it builds, and what it builds and hands down.
    taken = {name for names in found.values() for name in names}
    taken |= {name for found_there in methods.values() for names in found_there.values() for name in names}
    rest = tuple(name for name in to_prepare if name not in taken or name in here)
    if creating is not None and rest:
        found[creating] = rest
    return MappingProxyType(found)


@provider(
    needs=(
        "home_kind",
        "main_function",
        "loader_tuple_bindings",
        "loader_dict_names",
        "creating_function",
        "training_functions",
        "class_prepare",
        "prepared_attributes",
        "models_prepared_where_built",
        "prepared",
        "models",
        "optimizers",
        "train_loaders",
        "eval_loaders",
        "unprepared_loaders",
        "training_backward_sites",
        "schedulers",
        "per_epoch_schedulers",
        "existing_accelerator",
        "train_loops",
        "eval_loops",
        "backward_functions",
        "call_graph",
        "call_sites",
        "nested_functions",
        "training_method_lines",
        "method_prepare",
        "device_names",
        "cuda_flags",
        "training_classes",
        "shared_draw_lines",
        "handles_main_process_writes",
        "classes_opening_handles",
        "accessible_functions",
        "argument_parsing_functions",
        "unprepared_received_models",
        "loss_names",
        "assign_sites",
        "model_classes",
        "model_factories",
        "frozen_models",
        "unsharded_loaders",
        "arguments",
        "loader_classes",
        "loaders_unpacked_from_parameters",
        "bundle_attributes",
    ),
    provides=("plan",),
    refines=("prepared_attributes",),
)
def conversion_plan(a: Analysis) -> None:
    """The one conversion plan (see the module docstring), from the facts drawn before it."""
    if a.seeds is None or not a.seeds.library:
        # A bundle's attributes handed on outside its class are prepared where its instance is
        # bound (the plan's ``bundled``): held prepared from there on, as a training class's
        # (what the plan itself asks of them, :func:`_held_prepared`, and the rules after it).
        a.facts.prepared_attributes |= set(a.bundle_attributes)
    bound = _bound_by_block(a)
    a.facts.plan = ConversionPlan.of(
        a.facts,
        bound,
        a.method_prepare,
        frozenset(a.argument_parsing_functions),
        _bound_above_main_guard(a),
        _received_models(a),
        _loader_wrappings(a),
        _placement(a, bound),
        _attribute_aliases(a),
        a.bundle_attributes,
    )


def _bound_by_block(a: Analysis) -> dict[str, set[str]]:
    """Module-level function (or nested function, by its path; ``<module>``) → the names it binds
    to objects of its own: not a loader it unpacks from the tuple it is handed (prepared with the
    tuple), nor a model a training function builds, prepares and returns to it (``model =
    train(loaders)``: that function prepares it)."""
    bound: dict[str, set[str]] = {}
    unpacked = a.facts.loaders_unpacked_from_parameters
    preparing = _preparing_functions(a.facts)
    trains_from = _home_training_starts(a)
    for assign in a.r.assigns:
        # A function nested in another binds its own names (``main.train``'s optimizer).
        block = nested_function(a, assign.scope) or assign.function
        returned = isinstance(assign.value, cst.Call) and dotted(assign.value.func) in preparing
        # A model a home block builds once its training has started (ENet's ``model = ENet(n)``
        # for ``--mode test``, after ``model = train(...)``) is none it hands over to train.
        late = block in trains_from and a.site(assign.node).line >= trains_from[block]
        bound.setdefault(block, set()).update(
            target
            for target in assign.targets
            if (assign.function, target) not in unpacked and not ((returned or late) and target in a.facts.models)
        )
    return bound


def _home_training_starts(a: Analysis) -> dict[str, int]:
    """Home block → the original line of its statement where training starts, or that calls a
    training function (none: not there)."""
    if a.module is None or a.facts.home_kind == "library":
        return {}
    calls = [site.line for name in _preparing_functions(a.facts) for site in a.facts.call_sites.get(name, ())]
    lines = [*_home_training_lines(a.facts), *calls]
    found: dict[str, int] = {}
    for block, statements in _home_blocks(a.module, a.facts).items():
        start = _training_start(statements, lines, a)
        if start < len(statements):
            found[block] = a.site(statements[start]).line
    return found


def _attribute_aliases(a: Analysis) -> frozenset[str]:
    """Names every binding of which takes a prepared attribute of a training class (``model =
    self.model``, ``model, config = self.model, self.config`` in its ``run()``) or unpacks a loader
    tuple a function is handed (``train_loader, test_loader = loaders``): they stand for the
    object the class holds prepared (built inline, ``Trainer(config, Regressor(), loader)``, and
    prepared in its ``__init__``) or the caller prepared, no object of their own to prepare. So are
    the names a training class's method binds and then only stores into an attribute the class
    prepares (deeplab's ``model = DeepLab(...)``, then ``self.model, self.optimizer = model,
    optimizer`` in ``__init__``): the object is prepared as that attribute."""
    aliasing: set[str] = set()
    others: set[str] = set()
    for assign in a.r.assigns:
        sources = dict(pair for target in assign.node.targets for pair in pairwise(target.target, assign.node.value))
        for target in assign.targets:
            source = sources.get(target)
            held = (source is not None and _held_prepared(a, assign.function, source)) or (
                assign.function,
                target,
            ) in a.facts.loaders_unpacked_from_parameters
            (aliasing if held else others).add(target)
    stored = _stored_into_prepared_attributes(a)
    kept = {target for assign in a.r.assigns for target in assign.targets if target not in stored.get(assign.scope, ())}
    stored_only = {name for names in stored.values() for name in names} - kept
    return frozenset((aliasing - others) | stored_only)


def _stored_into_prepared_attributes(a: Analysis) -> dict[tuple[str, ...], set[str]]:
    """Scope → the plain names it stores into an attribute its training class prepares
    (``self.model, self.optimizer = model, optimizer`` in ``Trainer.__init__``): the object is
    prepared as that attribute; the name itself stays the script's module, never a wrapper."""
    stored: dict[tuple[str, ...], set[str]] = {}
    for assign in a.r.assigns:
        for target, source in (
            pair for each in assign.node.targets for pair in pairwise(each.target, assign.node.value)
        ):
            if source.isidentifier() and not target.isidentifier() and _held_prepared(a, assign.function, target):
                stored.setdefault(assign.scope, set()).add(source)
    return stored


def _held_prepared(a: Analysis, owner: str, attribute: str) -> bool:
    """Whether the training class ``owner``'s ``attribute`` holds a prepared object: one it
    prepares itself, or (in a script) one its caller prepares. In a library the caller is another
    module: only what arrives prepared (a model its caller built inline in the call does not)."""
    facts = a.facts
    if attribute in facts.class_prepare.get(owner, ()) or any(
        attribute in names for names in a.method_prepare.get(owner, {}).values()
    ):
        return True
    if attribute not in facts.prepared_attributes:
        return False
    if facts.home_kind != "library":
        return True
    origins = a.origins_of(owner, attribute)
    return bool(origins) and origins <= facts.prepared


def _placement(a: Analysis, bound: Mapping[str, AbstractSet[str]]) -> Placement:
    """Where each block prepares, from the original statements (see ``Placement``); ``bound``:
    :func:`_bound_by_block`'s answer."""
    handed = _handed_for_training(a)
    if a.module is None:
        return Placement(handed_for_training=handed)
    wanted = set(_objects_to_prepare(a.facts, bundled=a.bundle_attributes))
    homes = _home_blocks(a.module, a.facts) if a.facts.home_kind != "library" else {}
    home_lines = _home_training_lines(a.facts)
    built: dict[str, dict[str, tuple[int, int]]] = {}
    where_bound: dict[str, frozenset[str]] = {}
    for block, statements in homes.items():
        built[block] = _built_before_training(statements, home_lines, wanted, a)
        where_bound[block] = _loaders_where_bound(block, statements, home_lines, wanted, built[block], a)
        for name in where_bound[block]:
            built[block].pop(name, None)
    preparing = _preparing_function_nodes(a.module, _preparing_functions(a.facts))
    for name, function in preparing.items():
        body = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
        built[name] = _built_before_training(body, a.facts.training_lines(name), wanted, a)
    rebuilt = _rebuilt_loaders(a, homes, home_lines, wanted)
    wrapping, where_built = _wraps_and_bindings(a, homes, home_lines, built)
    handing = _Handing(a, handed, wanted, _received_models(a), home_lines, wrapping)
    before: dict[str, dict[int, tuple[str, ...]]] = {}
    after: dict[str, dict[int, tuple[str, ...]]] = {}
    for block, statements in homes.items():
        rest = statements[_training_start(statements, home_lines, a) :]
        before[block], after[block] = handing.prepares(block, rest, built, rebuilt)
    moves = _rebuilt_models_to_move(a, homes, home_lines, built)
    reached = _called_where_the_accelerator_exists(a, homes, home_lines) | _library_evaluations(a)
    evaluations = _evaluation_preparations(a, reached, bound)
    moves.update(_models_evaluated_in(a, reached, evaluations))
    moves.update(_models_evaluated_in_methods(a))
    return Placement(
        nested_definitions={name: a.site(node).line for name, node in preparing.items() if "." in name},
        evaluation_preparations=evaluations,
        models_never_prepared=_models_never_prepared(a),
        prepared_before_wrapping=wrapping,
        where_built=where_built,
        rebuilt_loaders=rebuilt,
        where_bound={block: found for block, found in where_bound.items() if found},
        handed_for_training=handed,
        built_before_training=built,
        rebuilt_models_to_move={
            block: kept
            for block, found in moves.items()
            if (kept := {line: name for line, name in found.items() if (line, name) not in handing.covered})
        },
        prepared_before_handing={block: found for block, found in before.items() if found},
        prepared_after_binding={block: found for block, found in after.items() if found},
    )


def _preparing_function_nodes(module: cst.Module, names: AbstractSet[str]) -> dict[str, cst.FunctionDef]:
    """The ``def`` of each of ``names``: a module-level function, or one nested in functions by its
    path (``main.train``), found in the blocks of the functions around it."""
    found: dict[str, cst.FunctionDef] = {}
    pending: list[tuple[str, cst.CSTNode]] = [("", module)]
    while pending:
        prefix, node = pending.pop()
        for child in child_nodes(node):
            if isinstance(child, cst.FunctionDef):
                path = prefix + child.name.value
                if path in names:
                    found[path] = child
                if any(name.startswith(path + ".") for name in names):
                    pending.append((path + ".", child.body))
            elif not isinstance(child, (cst.ClassDef, cst.Lambda)):
                pending.append((prefix, child))  # a block holding it: an ``if``, a ``with``
    return found


def _models_never_prepared(a: Analysis) -> dict[str, frozenset[str]]:
    """See ``ConversionPlan.models_never_prepared``. A prepared model reaches only code the
    accelerator reaches (the functions its home block calls, transitively) or what a function
    of the file returns to its caller (``model = main()``). So a model that a function outside
    that reach builds itself (``model = Translator(...).to(DEVICE)``, ``torch.load(path)``:
    every binding there a construction or a move of itself, no call of the file's functions), or
    is handed only by such functions, is the script's own module, never a wrapper. So is a model
    that a function inside the reach, or a method of a class that does not train, builds and
    neither prepares nor returns (a ``predict()`` the home block calls, a ``Predictor``'s
    ``__init__``, building its own ``model`` of the name the home block prepares): only the home
    block, the function creating the accelerator and the training functions and classes
    prepare. So is a model a training class's method builds and stores into an attribute its
    class prepares (``self.model, self.optimizer = model, optimizer``): the attribute is
    prepared, the name stays the module. Module-level code and callers that cannot be followed
    keep it unknown."""
    if a.facts.home_kind == "library":
        return {}
    preparing = a.facts.training_functions | {a.facts.main_function, a.facts.creating_function}
    returning = {function for function, value in a.r.returns if _names_a_model(value, a)} | {
        ".".join(scope) for scope, value in a.r.method_returns if _names_a_model(value, a)
    }
    outside = set(a.r.defs) - (a.facts.accessible_functions & (preparing | returning))
    built, other = _model_bindings(a)
    found: dict[str, frozenset[str]] = {}
    for function in sorted(outside):
        never = frozenset(
            name
            for name in a.facts.models
            if all(
                caller in outside and origin in built.get(caller, ()) and origin not in other.get(caller, ())
                for caller, origin in a.origin_sites(function, name)
            )
        )
        if never:
            found[function] = never
    for method in sorted(built.keys() - returning):
        owner = method.partition(".")[0]
        fresh = built[method] - other.get(method, set())
        if owner in a.r.classes and owner not in a.facts.training_classes and fresh:
            found[method] = frozenset(fresh)
    # A training class's method storing the model it builds into an attribute its class prepares.
    for scope, names in _stored_into_prepared_attributes(a).items():
        if len(scope) == 2 and (models := names & a.facts.models):
            method = ".".join(scope)
            found[method] = found.get(method, frozenset()) | models
    return found


def _names_a_model(value: cst.BaseExpression, a: Analysis) -> bool:
    """Whether a returned ``value`` is a model (``return model``, ``return model.to(device)``,
    ``return model, optimizer``), not something computed from one (``return model(x)``)."""
    parts = [element.value for element in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
    return any(isinstance(root := constructed(part), cst.Name) and root.value in a.facts.models for part in parts)


def _model_bindings(a: Analysis) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module-level function or ``"Class.method"`` → the model names it binds to a fresh object
    (a construction or a load, not a call of the file's functions nor a ``prepare``), and → those
    it binds any other way. A move, a mode switch or a ``DataParallel`` wrap of the model itself
    (``model = model.to(device)``, ``model = model.eval()``, ``model = nn.DataParallel(model)``) is
    neither."""
    built: dict[str, set[str]] = {}
    other: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        models = set(assign.targets) & a.facts.models
        if not models or len(assign.scope) not in (1, 2):
            continue
        built_value = data_parallel_wrapped(constructed(assign.value), a.facts)
        if len(assign.targets) == 1 and isinstance(built_value, cst.Name) and built_value.value == assign.targets[0]:
            continue
        fresh = (
            isinstance(built_value, cst.Call)
            and not (isinstance(built_value.func, cst.Name) and built_value.func.value in a.r.defs)
            and not is_any_prepare(built_value)
            and len(assign.targets) == 1
        )
        (built if fresh else other).setdefault(".".join(assign.scope), set()).update(models)
    return built, other


@record(eq=False)
class _Reading:
    """What :class:`_Handing` knows while it reads one home block's statements in order."""

    #: What the block's one prepare takes (before its training starts), and the models it hands on.
    here: AbstractSet[str]
    #: What the block prepares where it is built, each time (a rebinding leaves it prepared).
    again: AbstractSet[str]
    #: The objects prepared at this point of the block.
    prepared: set[str]
    #: Name → the original lines binding it since it was last prepared (or training started).
    bound: dict[str, list[int]] = field(default_factory=dict)
    #: ``prepared_before_handing`` and ``prepared_after_binding`` of the block, found so far
    #: (shared by the branches of a statement read one by one).
    found: dict[int, tuple[str, ...]] = field(default_factory=dict)
    after: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def fork(self) -> _Reading:
        """The state a branch starts from: this one's, its findings shared."""
        bound = {name: list(lines) for name, lines in self.bound.items()}
        return _Reading(self.here, self.again, set(self.prepared), bound, self.found, self.after)

    def join(self, branches: Sequence[_Reading]) -> None:
        """The state after a statement whose ``branches`` were read one by one: what any of them
        prepared is prepared (each prepares its own), and a name is bound at the lines of each."""
        self.prepared = set().union(*(branch.prepared for branch in branches))
        names = {name for branch in branches for name in branch.bound}
        self.bound = {
            name: sorted({line for branch in branches for line in branch.bound.get(name, ())}) for name in names
        }


class _Handing:
    """``ConversionPlan.prepared_before_handing`` and ``prepared_after_binding``: one home block's
    statements from where its training starts, read in order."""

    def __init__(
        self,
        a: Analysis,
        handed: Mapping[str, tuple[str, ...]],
        wanted: AbstractSet[str],
        received: Mapping[str, tuple[str, ...]],
        training_lines: Sequence[int] = (),
        wrapping: Mapping[str, Mapping[int, tuple[tuple[str, str], ...]]] | None = None,
    ) -> None:
        self.a = a
        self.received = received
        self.handed = handed
        self.wanted = wanted
        self.training_lines = training_lines
        #: ``Placement.prepared_before_wrapping``: per home block, the loaders it prepares before a wrap.
        self.wrapping = wrapping or {}
        #: (original line, model) of each binding a ``prepared_after_binding`` prepare follows:
        #: such a model is prepared, not moved as one built again.
        self.covered: set[tuple[int, str]] = set()
        #: Module-level function → the module's names it reads (``_globals_read_by``).
        self._global_reads: dict[str, frozenset[str]] = {}
        #: Block → what it builds before its training (set by :meth:`prepares`).
        self.built: Mapping[str, Mapping[str, tuple[int, int]]] = {}
        self.preparing = _preparing_functions(a.facts)
        #: The scope of the block being read (set by :meth:`prepares`): where its calls' names resolve.
        self.scope: tuple[str, ...] = ()

    def prepares(
        self,
        block: str,
        statements: Sequence[cst.BaseStatement],
        built: Mapping[str, Mapping[str, tuple[int, int]]],
        rebuilt: Mapping[str, AbstractSet[str]],
    ) -> tuple[dict[int, tuple[str, ...]], dict[int, tuple[str, ...]]]:
        """What is prepared before a statement handing it to a training function, and what is
        prepared after a statement binding it (the last before the statement training it)."""
        facts = self.a.facts
        self.built = built
        self.scope = () if block == MODULE else tuple(block.split("."))
        # What the block prepares where it is built (each time), and the loaders it prepares
        # before a wrap; not what its one prepare takes, which a rebinding in a loop makes new.
        here = set(built.get(block, {})) | set(self.received.get(block, ()))
        again = (self.wanted & facts.models_prepared_where_built) - here | set(rebuilt.get(block, ()))
        wrapped = {loader for wraps in self.wrapping.get(block, {}).values() for loader, _ in wraps}
        reading = _Reading(frozenset(here), frozenset(again), prepared=set(again) | (wrapped & here))
        self._read(statements, reading)
        return reading.found, reading.after

    def _read(self, statements: Sequence[cst.BaseStatement], reading: _Reading) -> None:
        """Read ``statements`` in order into ``reading``. A branching statement whose blocks bind
        a model and train it (``if args.train:`` building and training the model; both branches of
        ``if args.big: model = Big() ... else: model = Small() ...``, each training its own) is
        read block by block as the block's own statements: each such block's prepare goes inside
        it, after its binding, as in the block itself; each branch is read from the state before
        the statement, and what any of them prepared counts as prepared after it."""
        for index, node in enumerate(statements):
            bodies = self._binding_and_training_bodies(node)
            if len(bodies) == 1:
                self._read(bodies[0], reading)
            elif bodies:
                branches = [reading.fork() for _ in bodies]
                for body, branch in zip(bodies, branches, strict=True):
                    self._read(body, branch)
                reading.join(branches)
            else:
                self._read_statement(node, reading, statements[index + 1 :])

    def _read_statement(
        self, node: cst.BaseStatement, reading: _Reading, later: Sequence[cst.BaseStatement] = ()
    ) -> None:
        """Read one statement (no block of which is read on its own) into ``reading``; ``later``:
        the statements after it in its block."""
        facts = self.a.facts
        bound, prepared = reading.bound, reading.prepared
        handed = (self._handed(node) & set(bound)) - prepared
        if handed:
            reading.found[self.a.site(node).line] = tuple(
                sorted(handed, key=lambda name: (name in facts.optimizers, name))
            )
            prepared |= handed
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) or _moves_itself(node):
            return
        assigned = assigned_in(node)
        # A model the block built before its training and builds again is not one of these
        # (``rebuilt_models_to_move``); an optimizer built again for a new model is.
        fresh = {name for name in bound if name not in reading.here or name not in facts.models}
        trained = self._trained_inline(node, fresh - prepared - assigned)
        if trained:
            line = max(bound[name][-1] for name in trained)
            reading.after[line] = self._in_order(set(reading.after.get(line, ())) | trained)
            self.covered |= {(where, name) for name in trained for where in bound[name]}
            prepared |= trained
        if _prepares_already(node) or self._returned_prepared(node, assigned):
            for name in assigned:
                bound.pop(name, None)  # prepared by the original script (converted already)
            prepared |= assigned
        else:
            for name in assigned:
                bound.setdefault(name, []).append(self.a.site(node).line)
            if isinstance(node, cst.SimpleStatementLine):
                prepared -= assigned - reading.again
            else:
                # Bound anew whichever way it goes (``if args.resume: net = torch.load(...)``
                # / ``else: net = Net()``): a prepare made before holds the old object.
                anew = {name for name in assigned & prepared if _bound_on_every_path(node, name, self.a, later)}
                prepared -= anew - reading.again

    def _returned_prepared(self, node: cst.BaseStatement, assigned: AbstractSet[str]) -> bool:
        """Whether ``node`` binds models only to what a training function returns (``model =
        train(loaders)``) that builds them itself: it prepares them, and hands them back prepared."""
        if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
            return False
        small = node.body[0]
        if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Call):
            return False
        callee = dotted(small.value.func)
        if callee not in self.preparing:
            return False
        models = assigned & self.a.facts.models
        return bool(models) and models <= set(self.built.get(callee or "", {}))

    def _binding_and_training_bodies(self, node: cst.BaseStatement) -> list[Sequence[cst.BaseStatement]]:
        """The blocks of ``node`` (each branch of an ``if`` chain, a ``with`` block, a ``try``'s
        body, handlers, ``else`` and ``finally``: :func:`branch_blocks`) that bind a model to
        prepare and hold a line where training starts; none for any other statement."""
        return [block.body for block in branch_blocks(node) if block.body and self._binds_and_trains(block.body)]

    def _binds_and_trains(self, statements: Sequence[cst.BaseStatement]) -> bool:
        """Whether ``statements`` bind a model to prepare and hold a line where training starts."""
        first, last = self.a.site(statements[0]).line, self.a.site(statements[-1]).end_line
        models = self.wanted & self.a.facts.models
        binds = any(first <= where.line <= last for name in models for where in self.a.facts.assign_sites.get(name, ()))
        return binds and any(first <= line <= last for line in self.training_lines)

    def _in_order(self, names: AbstractSet[str]) -> tuple[str, ...]:
        """``names`` for one ``prepare``: models first, then optimizers, then the rest."""
        facts = self.a.facts
        return tuple(sorted(names, key=lambda name: (name not in facts.models, name in facts.schedulers, name)))

    def _trained_inline(self, node: cst.BaseStatement, unprepared: AbstractSet[str]) -> set[str]:
        """The objects of ``unprepared`` (models, optimizers, per-batch schedulers) that ``node``
        reads, when it is a statement where the block trains (holding a loop over a loader or a
        backward) and one of them is a model; nothing otherwise."""
        site = self.a.site(node)
        if not any(site.line <= line <= site.end_line for line in self.training_lines):
            return set()
        facts = self.a.facts
        read = {inner.value for inner in nodes_in(node) if isinstance(inner, cst.Name)}
        read |= {name for function in read & set(self.a.r.defs) for name in self._globals_read_by(function)}
        trained = {name for name in unprepared & read & self.wanted if name not in facts.loaders}
        return trained if trained & facts.models else set()

    def _globals_read_by(self, function: str) -> frozenset[str]:
        """The module's names that the module-level ``function`` reads (``train(epoch)`` stepping
        the script's ``net``): where it is called, the block trains them."""
        if function in self._global_reads:
            return self._global_reads[function]
        self._global_reads[function] = frozenset()  # a recursive call reads nothing more
        r = self.a.r
        used = [
            *r.value_names,
            *((call.node.func.value, call.scope) for call in r.calls if isinstance(call.node.func, cst.Name)),
        ]
        read = {name for name, scope in used if scope[:1] == (function,) and r.names.binding_scope(name, scope) == ()}
        # What the module's functions it calls read, the same way (``train`` calling ``step``).
        for callee in read & set(self.a.r.defs):
            read |= self._globals_read_by(callee)
        self._global_reads[function] = frozenset(read)
        return self._global_reads[function]

    def _handed(self, node: cst.BaseStatement) -> set[str]:
        """Names a statement (or a line inside a loop or branch) hands to a function of
        ``handed_for_training``, for parameters that are models or optimizers there."""
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return set()
        found: set[str] = set()
        for line in nodes_in(node):
            if not isinstance(line, cst.SimpleStatementLine):
                continue
            for small in line.body:
                value = small.value if isinstance(small, (cst.Assign, cst.Expr)) else None
                if not isinstance(value, cst.Call):
                    continue
                if isinstance(value.func, cst.Name) and value.func.value in self.a.r.defs:
                    found |= self._handed_by(value, self.handed.get(value.func.value))
                elif self.handed.get(self.a.facts.program_callee(value.func, self.scope) or "") == ():
                    found |= self._handed_by(value, ())
        return found

    def _handed_by(self, call: cst.Call, params: tuple[str, ...] | None) -> set[str]:
        """What ``call`` hands to the model and optimizer parameters ``params`` name; ``()``: a
        function of another module, handed the models and optimizers among its arguments."""
        roles = self.a.facts.models | self.a.facts.optimizers
        found: set[str] = set()
        if params is None:
            return set()
        if not params:
            return {
                arg.value.value for arg in call.args if isinstance(arg.value, cst.Name) and arg.value.value in roles
            }
        for param, arg in parameters_filled(call, params):
            if isinstance(arg.value, cst.Name) and param in roles:
                found.add(arg.value.value)
        return found


def _moves_itself(node: cst.BaseStatement) -> bool:
    """``model = model.to(device)``: the same object, moved (the conversion takes the line out)."""
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return False
    assign = node.body[0]
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and is_move(assign.value)):
        return False
    target = dotted(assign.targets[0].target)
    return target is not None and dotted(peel_moves(assign.value)) == target


def _prepares_already(node: cst.BaseStatement) -> bool:
    """A line of the original calling ``<accelerator>.prepare(...)`` (a converted script)."""
    return isinstance(node, cst.SimpleStatementLine) and any(
        is_any_prepare(getattr(small, "value", None)) for small in node.body
    )


def _training_start(statements: Sequence[cst.BaseStatement], lines: Sequence[int], a: Analysis) -> int:
    """Index of the first of ``statements`` (definitions aside: the calls inside one run when it
    is called) holding one of the original ``lines`` where training starts; ``len`` if none."""
    for index, node in enumerate(statements):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        site = a.site(node)
        if any(site.line <= line <= site.end_line for line in lines):
            return index
    return len(statements)


def _built_before_training(
    statements: Sequence[cst.BaseStatement], lines: Sequence[int], wanted: AbstractSet[str], a: Analysis
) -> dict[str, tuple[int, int]]:
    """See ``ConversionPlan.built_before_training``: for one block's statements."""
    head = statements[: _training_start(statements, lines, a)]
    found: dict[str, tuple[int, int]] = {}
    for index, node in enumerate(head):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue  # names a def binds inside are its own locals, not this block's
        site = a.site(node)
        for name in sorted(wanted):
            # A bundle's attribute (``exp.model``) is bound where its instance is (``exp = Experiment()``).
            bound = a.bundle_attributes.get(name, name)
            if not any(site.line <= where.line <= site.end_line for where in a.facts.assign_sites.get(bound, ())):
                continue
            if name not in found and not _bound_on_every_path(node, bound, a, statements[index + 1 :]):
                continue  # first bound only under a flag: a prepare after it could meet an unbound name
            found[name] = (found[name][0] if name in found else site.line, site.line)
    return found


def _loaders_where_bound(
    block: str,
    statements: Sequence[cst.BaseStatement],
    lines: Sequence[int],
    wanted: AbstractSet[str],
    built: Mapping[str, tuple[int, int]],
    a: Analysis,
) -> frozenset[str]:
    """See ``ConversionPlan.prepared_where_bound``: for one home block's statements."""
    head = [
        node
        for node in statements[: _training_start(statements, lines, a)]
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef))
    ]
    facts = a.facts
    bound = _bound_in(_spans(head, a), a) & facts.loaders & wanted
    return frozenset(
        name
        for name in bound - facts.prepared
        if name in facts.loader_tuple_bindings or (name not in built and not _taken_apart(a, block, name))
    )


def _taken_apart(a: Analysis, block: str, name: str) -> bool:
    """Whether ``block`` takes the loader tuple ``name`` apart into loaders of their own
    (``train_loader, valid_loader = loaders``): those are prepared by their names, not the tuple."""
    return any(
        (block, name) in sites
        for (function, target), sites in a.arguments.items()
        if function == block and target in a.facts.loaders
    )


def _rebuilt_models_to_move(
    a: Analysis,
    homes: Mapping[str, Sequence[cst.BaseStatement]],
    lines: Sequence[int],
    built: Mapping[str, Mapping[str, tuple[int, int]]],
) -> dict[str, dict[int, str]]:
    """See ``ConversionPlan.rebuilt_models_to_move``: in the home blocks preparing a loader, the
    statements from the first where training starts building a model again (not one prepared
    where it is built) followed by a statement reading a loader. One that only meets data the
    script holds itself (the quickstart's ``model(test_data[0][0])``, on the CPU) stays where the
    original builds it."""
    loaders = a.facts.loaders
    found: dict[str, dict[int, str]] = {}
    for block, statements in homes.items():
        if not set(built.get(block, {})) & loaders:
            continue
        start = _training_start(statements, lines, a)
        moves = {
            a.site(node).line: name
            for index, node in enumerate(statements)
            if (name := _model_built(node, a.facts)) is not None
            and (index >= start or _only_evaluated(name, a.facts))
            and _meets_loader(name, statements[index + 1 :], a.facts)
        }
        if moves:
            found[block] = moves
    return found


def _only_evaluated(model: str, facts: FactsDraft) -> bool:
    """Whether ``model`` is one the script only evaluates (a test script's ``net = Net()`` given
    saved weights) in a module where no loader trains: nothing prepares it, so it meets the
    prepared batches, on the accelerator's device, from where it is built (before, it stayed on
    the CPU where the original ran without a GPU, and the batches came on the GPU)."""
    return model in facts.frozen_models and model not in facts.models and not facts.train_loaders


def _meets_loader(model: str, statements: Sequence[cst.BaseStatement], facts: FactsDraft) -> bool:
    """Whether ``model`` meets a loader's batches in ``statements``: one of the script's models
    where any of them reads a loader; a model first built there (evaluated only, never trained)
    where one statement both calls it (``best(x)``) or hands it on and reads a loader."""
    for later in statements:
        names = {inner.value for inner in nodes_in(later) if isinstance(inner, cst.Name)}
        if names & facts.loaders and (model in facts.models or model in names):
            return True
    return False


def _model_built(node: cst.BaseStatement, facts: FactsDraft) -> str | None:
    """The model ``node`` builds, when it is ``model = Net()`` (a model class of the file, or a
    ``torch.nn`` module, not moved; a trained model, or one the script puts in evaluation mode)
    and the model is not prepared where it is built: not
    ``model = train_model(model, ...)``, which hands back the model it trained."""
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return None
    assign = node.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    # A model to be tested (put in evaluation mode) counts too: one first built after training.
    if not (isinstance(target, cst.Name) and target.value in facts.models | facts.frozen_models):
        return None
    if target.value in facts.models_prepared_where_built:
        return None
    return target.value if _constructs_model(assign.value, facts) else None


def _attribute_model_built(node: cst.BaseStatement, facts: FactsDraft) -> str | None:
    """``self.net`` where ``node`` is ``self.net = Net()`` (as :func:`_model_built`) and ``net``
    is a model the script only evaluates (:func:`_only_evaluated`)."""
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return None
    assign = node.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = dotted(assign.targets[0].target) or ""
    owner, _, attribute = target.partition(".")
    if owner != "self" or "." in attribute or not _only_evaluated(target, facts):
        return None
    return target if _constructs_model(assign.value, facts) else None


def _constructs_model(value: cst.BaseExpression, facts: FactsDraft) -> bool:
    """Whether ``value`` builds a model, not moved: a model class of the program, a model
    constructor, or a ``torch.nn`` module."""
    if not isinstance(value, cst.Call) or is_move(value):
        return False  # the original moves it itself (to its device, which the conversion keeps)
    qualified = facts.callee_name(value.func) or ""
    return bool(
        builds_model_of_program_class(facts, value.func)
        or is_model_constructor(qualified)
        or (qualified.startswith("torch.nn.") and qualified.rpartition(".")[2][:1].isupper())
    )


def _bound_on_every_path(
    node: cst.BaseStatement, name: str, a: Analysis, later: Sequence[cst.BaseStatement] = ()
) -> bool:
    """Whether ``name`` is bound after ``node`` runs, whichever way it goes: always for a plain
    statement; for an ``if``, when every branch binds it or leaves the block (``else: raise
    ValueError(args.net)``), down to a final ``else``. A chain choosing among several values with
    no ``else``, or with one that neither binds nor leaves (``if args.opt == "adam": ...`` /
    ``elif args.opt == "sgd": ...`` / ``else: print("Unknown optimizer")``), counts only where
    the original fails too when no branch binds it: where the next read of the name in ``later``
    (the block's statements after it), at whatever depth, waits for no test of the value the
    chain chose by (:func:`~accel_convert.codemods.engine.chosen_names.next_read`:
    ``scheduler = CosineAnnealingLR(optimizer, ...)``, or ``optimizer.step()`` in the training
    loop). Read only under a test of that value (``if args.sched != "none": scheduler.step()``),
    the name may be unbound on purpose, and a ``prepare`` reading it would fail."""
    if isinstance(node, cst.If):
        branches: list[cst.BaseSuite] = []
        current: cst.If | cst.Else | None = node
        while isinstance(current, cst.If):
            branches.append(current.body)
            current = current.orelse
        if not all(_binds_or_leaves(branch, name, a.facts) for branch in branches):
            return False
        if current is not None and _binds_or_leaves(current.body, name, a.facts):
            return True
        return len(branches) > 1 and _read_next(node, later, name, a)
    return not isinstance(node, (cst.Try, cst.For, cst.While, cst.With)) or isinstance(node, cst.With)


def _read_next(chain: cst.If, statements: Sequence[cst.BaseStatement], name: str, a: Analysis) -> bool:
    """Whether the next read of ``name`` among ``statements`` (after ``chain``) fails, in the
    original, wherever no branch of ``chain`` bound it (asked of CPython's tree of the module, the
    one the pipeline parsed: :func:`~accel_convert.codemods.engine.positions.python_statements`)."""
    text = a.source if a.source is not None or a.module is None else a.module.code
    if text is None:
        return False
    at = python_statements(text, a.module.encoding if a.module is not None else "utf-8")
    first = _python_statements([chain], at, a)
    later = _python_statements(statements, at, a)
    return len(first) == 1 and isinstance(first[0], ast.If) and next_read(first[0], later, name) is not None


def _python_statements(
    statements: Sequence[cst.BaseStatement], at: Mapping[tuple[int, int], ast.stmt], a: Analysis
) -> list[ast.stmt]:
    """CPython's statements for ``statements`` (one per small statement of a line), found by their
    original sites; one without a site (added, not the original's) is left out."""
    found: list[ast.stmt] = []
    for statement in statements:
        for part in statement.body if isinstance(statement, cst.SimpleStatementLine) else (statement,):
            site = a.origins.site(part)
            python = at.get((site.line, site.column)) if site is not None else None
            if python is not None:
                found.append(python)
    return found


#: Calls that end the program where they stand: a branch ending in one never falls through.
_EXITS = frozenset({"sys.exit", "os._exit"})
_EXIT_BUILTINS = frozenset({"exit", "quit"})


def _binds_or_leaves(body: cst.BaseSuite, name: str, facts: FactsDraft | ScriptFacts) -> bool:
    """Whether a branch binds ``name`` or never reaches the statement after its ``if``."""
    if name in assigned_in(body):
        return True
    # The branch's last small statement: ``else: raise ...`` on the ``else`` line or below it.
    small: Sequence[cst.BaseSmallStatement] = ()
    if isinstance(body, cst.SimpleStatementSuite):
        small = body.body
    elif body.body and isinstance(body.body[-1], cst.SimpleStatementLine):
        small = body.body[-1].body
    final = small[-1] if small else None
    if isinstance(final, cst.Raise):
        return True
    call = final.value if isinstance(final, cst.Expr) else None
    return isinstance(call, cst.Call) and (
        facts.builtin(call.func) in _EXIT_BUILTINS or facts.qualified_name(call.func) in _EXITS
    )


def _handed_for_training(a: Analysis) -> dict[str, tuple[str, ...]]:
    """See ``ConversionPlan.handed_for_training``: the module-level functions receiving training
    objects (or a device), by their parameter names, that run a backward and build no optimizer."""
    facts = a.facts
    roles = facts.trained_objects | facts.device_names
    found = {
        function: params
        for function, params in a.r.defs.items()
        if function != facts.main_function
        and set(params) & roles
        and function in facts.backward_functions
        and function not in facts.training_functions
    }
    elsewhere = a.seeds.backward_functions if a.seeds is not None else frozenset()
    called = {callee for callees in facts.call_graph.values() for callee in callees}
    found.update(dict.fromkeys(sorted(elsewhere & called), ()))
    return found


def _home_blocks(module: cst.Module, facts: FactsDraft) -> dict[str, list[cst.BaseStatement]]:
    """The statements of each home block (the home and the creating function's bodies, by name;
    the ``__main__`` block's or the module's, as ``"<module>"``), as the original has them."""
    if facts.home_kind == "module":
        return {MODULE: list(module.body)}
    found: dict[str, list[cst.BaseStatement]] = {}
    homes = {facts.main_function, facts.creating_function}
    for top in module.body:
        if facts.home_kind == "main_guard" and is_main_guard(top) and isinstance(top.body, cst.IndentedBlock):
            found.setdefault(MODULE, []).extend(top.body.body)
        elif isinstance(top, cst.FunctionDef) and top.name.value in homes and isinstance(top.body, cst.IndentedBlock):
            found[top.name.value] = list(top.body.body)
    return found


def _home_statements(module: cst.Module, facts: FactsDraft) -> list[cst.BaseStatement]:
    """The statements of the home blocks, all together."""
    return [node for statements in _home_blocks(module, facts).values() for node in statements]


def _rebuilt_loaders(
    a: Analysis, homes: Mapping[str, Sequence[cst.BaseStatement]], lines: Sequence[int], wanted: AbstractSet[str]
) -> dict[str, frozenset[str]]:
    """See ``ConversionPlan.rebuilt_loaders``: the loaders bound by a statement of the block from
    the first one where training starts (definitions aside: what they bind is their own)."""
    loaders = a.facts.loaders & wanted
    found: dict[str, frozenset[str]] = {}
    for block, statements in homes.items():
        plain = [node for node in statements if not isinstance(node, (cst.FunctionDef, cst.ClassDef))]
        spans = _spans(plain, a)
        start = next((i for i, (first, last) in enumerate(spans) if any(first <= n <= last for n in lines)), len(spans))
        built = _bound_in(spans[start:], a) & loaders
        if built:
            found[block] = built
    return found


def _called_where_the_accelerator_exists(
    a: Analysis, homes: Mapping[str, Sequence[cst.BaseStatement]], lines: Sequence[int]
) -> frozenset[str]:
    """Module-level functions that train nothing, every call of which is where the accelerator
    exists: in a home block from its first training statement on (it is created before that),
    or in a training class's method (``self.accelerator``)."""
    facts = a.facts
    others = {facts.main_function, facts.creating_function} | facts.training_functions | facts.backward_functions
    candidates = (set(a.r.defs) & facts.accessible_functions) - others
    # Home block statements from the one where training starts, by line span: the accelerator
    # exists there (created before the first of them), during training as after it.
    spans: list[tuple[int, int]] = []
    for statements in homes.values():
        plain = [node for node in statements if not isinstance(node, (cst.FunctionDef, cst.ClassDef))]
        spans += _spans(plain[_training_start(plain, lines, a) :], a)
    spans += [
        span for name in facts.training_classes if name in a.r.classes for span in _spans([a.r.classes[name].node], a)
    ]
    return frozenset(
        function
        for function in candidates
        if (sites := facts.call_sites.get(function, ()))
        and all(any(first <= site.line <= last for first, last in spans) for site in sites)
    )


def _library_evaluations(a: Analysis) -> frozenset[str]:
    """For a library of a program: its functions the accelerator reaches (every call of them, from
    another module or this one, is made where the accelerator exists) that loop over a loader they
    build themselves (``evaluation.evaluate_on_val`` called in the entry's epoch loop, building
    ``DataLoader(val_set)``): as for a helper of the home module, the loader is prepared where it
    is built. Not a function training, nor one building loaders it only returns (a factory)."""
    facts = a.facts
    if facts.home_kind != "library":
        return frozenset()
    candidates = (set(a.r.defs) & facts.accessible_functions) - facts.training_functions - facts.backward_functions
    looped = {(loop.function, loop.iterated) for loop in a.r.loops}
    built = {(assign.function, target) for assign in a.r.assigns for target in assign.targets}
    return frozenset(function for function, name in built & looped if function in candidates and name in facts.loaders)


def _evaluation_preparations(
    a: Analysis, reached: AbstractSet[str], bound: Mapping[str, AbstractSet[str]]
) -> dict[str, tuple[str, ...]]:
    """See ``ConversionPlan.evaluation_preparations``: of the functions ``reached`` where the
    accelerator exists, those building a loader to prepare (``bound``: what each block binds,
    :func:`_bound_by_block`). Not a loader a function returns (a factory's, ``return
    train_loader, val_loader, num_class`` called in a trainer's ``__init__``): the caller binds it
    and prepares it there, once."""
    facts = a.facts
    loaders = (
        set(_objects_to_prepare(facts, _received_models(a), _attribute_aliases(a), a.bundle_attributes)) & facts.loaders
    )
    loaders -= a.unsharded_loaders | facts.prepared
    returned = _returned_names(a)
    found: dict[str, tuple[str, ...]] = {}
    for function in sorted(reached):
        built = tuple(sorted((bound.get(function, set()) - returned.get(function, set())) & loaders))
        if built:
            found[function] = built
    return found


def _returned_names(a: Analysis) -> dict[str, set[str]]:
    """Module-level function → the names its ``return`` statements hand back, alone or in a
    tuple (``return train_loader, val_loader, num_class``)."""
    found: dict[str, set[str]] = {}
    for function, value in a.r.returns:
        elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
        found.setdefault(function, set()).update(name for e in elements if (name := dotted(e)) is not None)
    return found


def _models_evaluated_in(
    a: Analysis, reached: AbstractSet[str], evaluations: Mapping[str, tuple[str, ...]]
) -> dict[str, dict[int, str]]:
    """``ConversionPlan.rebuilt_models_to_move`` for the functions ``reached`` where the
    accelerator exists: a model one builds (``best = Net()``, not moved) and calls in a later
    statement meets the batches of a prepared loader, on the accelerator's device: the loader it
    prepares (a function of ``evaluations``), or one it is handed (``test_saved(path,
    test_loader)``), read in that statement."""
    found: dict[str, dict[int, str]] = {}
    for top in a.module.body if a.module is not None else ():
        if not (isinstance(top, cst.FunctionDef) and top.name.value in reached):
            continue
        body = list(top.body.body) if isinstance(top.body, cst.IndentedBlock) else []
        prepares = top.name.value in evaluations
        moves = {
            a.site(node).line: name
            for index, node in enumerate(body)
            if (name := _model_built(node, a.facts)) is not None
            and (
                _called_in(name, body[index + 1 :]) if prepares else _evaluated_over_loader(name, body[index + 1 :], a)
            )
        }
        if moves:
            found[top.name.value] = moves
    return found


def _evaluated_over_loader(name: str, statements: Sequence[cst.BaseStatement], a: Analysis) -> bool:
    """Whether one of ``statements`` calls ``name`` and reads a loader, and none moves it."""
    loaders = a.facts.loaders
    return not _moved_in(name, statements, a.facts) and any(
        _called_in(name, [node])
        and any(isinstance(inner, cst.Name) and inner.value in loaders for inner in nodes_in(node))
        for node in statements
    )


def _models_evaluated_in_methods(a: Analysis) -> dict[str, dict[int, str]]:
    """``ConversionPlan.rebuilt_models_to_move`` for the methods of the training classes (by
    ``"Class.method"``): a model one builds (``best = Net()``, not moved) and calls in a later
    statement reading a loader the class prepares (``for x, y in self.test_loader: best(x)``)
    meets its batches on the accelerator's device."""
    found: dict[str, dict[int, str]] = {}
    prepared = a.facts.prepared_attributes
    for name in sorted(a.facts.training_classes & set(a.r.classes)):
        bodies = {
            method.name.value: list(method.body.body) if isinstance(method.body, cst.IndentedBlock) else []
            for method in class_methods(a.r.classes[name].node)
        }
        everywhere = [node for body in bodies.values() for node in body]
        for method, body in bodies.items():
            # A model the method prepares where it builds it (``method_prepare``) is placed there.
            own = set(a.method_prepare.get(name, {}).get(method, ()))
            moves = {
                a.site(node).line: model
                for index, node in enumerate(body)
                if (model := _model_built(node, a.facts)) is not None
                and model not in own
                and _called_over_prepared(model, body[index + 1 :], prepared)
                and not _moved_in(model, body[index + 1 :], a.facts)
            }
            # A model the class only evaluates, kept in an attribute (``self.net = Net()`` in
            # ``__init__``, called over ``self.loader`` in ``run()``).
            moves |= {
                a.site(node).line: model
                for node in body
                if (model := _attribute_model_built(node, a.facts)) is not None
                and _called_over_prepared(model, everywhere, prepared)
                and not _moved_in(model, everywhere, a.facts)
            }
            if moves:
                found[f"{name}.{method}"] = moves
    return found


def _called_over_prepared(name: str, statements: Sequence[cst.BaseStatement], prepared: AbstractSet[str]) -> bool:
    """Whether one of ``statements`` calls ``name`` and reads one of the ``prepared`` attributes
    (``self.test_loader``)."""
    return any(
        _called_in(name, [node]) and any(dotted(inner) in prepared for inner in nodes_in(node)) for node in statements
    )


def _moved_in(name: str, statements: Sequence[cst.BaseStatement], facts: FactsDraft | ScriptFacts) -> bool:
    """Whether one of ``statements`` moves ``name`` itself (``best.to(device)``: the original's
    own move, or the one a conversion wrote; ``nn.DataParallel(best).to(device)`` moves the
    module it wraps), or prepares it (``model = accelerator.prepare(model)`` in a method
    building it: prepare moves it)."""
    return any(
        isinstance(inner, cst.Call)
        and (
            (is_move(inner) and dotted(data_parallel_wrapped(peel_moves(inner), facts)) == name)
            or (is_any_prepare(inner) and name in prepared_arguments(inner))
        )
        for node in statements
        for inner in nodes_in(node)
    )


def _called_in(name: str, statements: Sequence[cst.BaseStatement]) -> bool:
    """Whether one of ``statements`` calls ``name`` (``best(x)``)."""
    return any(
        isinstance(inner, cst.Call) and dotted(inner.func) == name for node in statements for inner in nodes_in(node)
    )


def _wraps_and_bindings(
    a: Analysis,
    homes: Mapping[str, Sequence[cst.BaseStatement]],
    lines: Sequence[int],
    built: Mapping[str, Mapping[str, tuple[int, int]]],
) -> tuple[dict[str, dict[int, tuple[tuple[str, str], ...]]], dict[str, frozenset[str]]]:
    """``Placement.prepared_before_wrapping`` and ``Placement.where_built``, per home block."""
    to_prepare = set(_objects_to_prepare(a.facts, _received_models(a), _attribute_aliases(a), a.bundle_attributes))
    where_built = to_prepare & a.facts.models_prepared_where_built
    wrapping: dict[str, dict[int, tuple[tuple[str, str], ...]]] = {}
    binding: dict[str, frozenset[str]] = {}
    for block, statements in homes.items():
        if found := _prepared_before_wrapping(a, block, statements, lines, built[block], to_prepare):
            wrapping[block] = found
        if bound := _binding(statements, where_built, a):
            binding[block] = bound
    return wrapping, binding


def _prepared_before_wrapping(
    a: Analysis,
    block: str,
    statements: Sequence[cst.BaseStatement],
    lines: Sequence[int],
    built: Mapping[str, tuple[int, int]],
    to_prepare: AbstractSet[str],
) -> dict[int, tuple[tuple[str, str], ...]]:
    """See ``ConversionPlan.prepared_before_wrapping``: for one home block's statements, the
    first wrap of each loader the block's ``prepare`` takes (of ``built``, what it binds before
    its training; an entry of a dict of loaders it takes, ``loaders['DG']``) before the block's
    training starts, in its branches too (``if opt.DG: ... DGloader_iter =
    enumerate(dataloaders['DG'])``); an iterator only where it is taken before that ``prepare``
    (after it, it reads the prepared loader). The accelerator is created above the first
    statement binding a loader (``created_before_binding``), so above any wrap."""
    prepared = set(built) & to_prepare
    reading = _WrapReading(
        a,
        () if block == MODULE else (block,),
        prepared,
        max((built[name][1] for name in prepared), default=0),
        _loader_wrappings(a),
    )
    found: dict[int, tuple[tuple[str, str], ...]] = {}
    reading.read(statements[: _training_start(statements, lines, a)], found, set())
    return found


@record(frozen=True, eq=False, repr=False)
class _WrapReading:
    """What :func:`_prepared_before_wrapping` reads one home block's statements with."""

    a: Analysis
    scope: tuple[str, ...]
    #: The loaders (or dicts of loaders) the block's ``prepare`` takes.
    prepared: AbstractSet[str]
    #: The original line after which the block's ``prepare`` goes.
    prepare_after: int
    #: ``ConversionPlan.loader_wrappings``.
    wrappings: Mapping[int, tuple[tuple[str, str], ...]]

    def read(
        self, statements: Sequence[cst.BaseStatement], found: dict[int, tuple[tuple[str, str], ...]], seen: set[str]
    ) -> None:
        """The first wraps among ``statements`` into ``found``, ``seen`` the loaders wrapped
        above: each branch of an ``if`` (a ``with``, a ``try``) reads on from what was seen before it."""
        for node in statements:
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                continue
            if blocks := branch_blocks(node):
                branches = [set(seen) for _ in blocks]
                for inner, branch in zip(blocks, branches):
                    self.read(inner.body, found, branch)
                seen.update(*branches)
                continue
            line = self.a.site(node).line
            late = line > self.prepare_after and iterator_taken(node, self.a.facts, self.scope) is not None
            wraps = [
                (loader, wrapper)
                for loader, wrapper in self.wrappings.get(line, ())
                if loader not in seen and held_loader(loader) in self.prepared and not late
            ]
            seen |= {loader for loader, _ in wraps}
            if wraps:
                found[line] = tuple(wraps)


def _binding(statements: Sequence[cst.BaseStatement], names: AbstractSet[str], a: Analysis) -> frozenset[str]:
    """The ``names`` a plain statement among ``statements`` binds, also inside loops, ``with``
    blocks and ``if`` branches (to a final ``else``): where a ``prepare`` can follow it."""
    found: set[str] = set()
    for node in statements:
        if isinstance(node, cst.SimpleStatementLine):
            found |= _bound_in(_spans([node], a), a) & names
        elif isinstance(node, (cst.For, cst.While, cst.With, cst.If)) and isinstance(node.body, cst.IndentedBlock):
            found |= _binding(node.body.body, names, a)
            orelse = getattr(node, "orelse", None)
            if isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock):
                found |= _binding(orelse.body.body, names, a)
    return frozenset(found)


def _loader_wrappings(a: Analysis) -> dict[int, tuple[tuple[str, str], ...]]:
    """See ``ConversionPlan.loader_wrappings``: the home blocks' statements, in their branches
    too, wrapping a loader."""
    if a.module is None or a.facts.home_kind == "library":
        return {}
    iterable = {
        top.name.value for top in a.module.body if isinstance(top, cst.ClassDef) and defines_method(top, "__iter__")
    }
    found: dict[int, tuple[tuple[str, str], ...]] = {}
    for block, statements in _home_blocks(a.module, a.facts).items():
        scope = () if block == MODULE else (block,)
        for node in _with_branches(statements):
            wraps = _wrapped_loaders(node, a.facts, iterable, scope)
            if wraps:
                found[a.site(node).line] = wraps
    return found


def _with_branches(statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``statements`` and those of their branches (:func:`branch_blocks`), in order."""
    found: list[cst.BaseStatement] = []
    for node in statements:
        found.append(node)
        for block in branch_blocks(node):
            found += _with_branches(block.body)
    return found


def _wrapped_loaders(
    node: cst.BaseStatement, facts: FactsDraft, iterable: AbstractSet[str], scope: tuple[str, ...] = ()
) -> tuple[tuple[str, str], ...]:
    """(loader, wrapper) for each loader ``node`` hands to something that stands for it from then
    on: ``X = Wrapper(X, ...)`` (a class name, capitalised, not a DataLoader), ``Y = Wrapper(X,
    ...)`` with a ``Wrapper`` of this file that defines ``__iter__``, or an iterator taken from a
    loader or from an entry of a dict of loaders (``it = iter(loader)``, ``DGloader_iter =
    enumerate(dataloaders['DG'])``: :func:`iterated`'s wrappers, read later). A
    ``Trainer(model, optimizer, loader)`` only keeps the loader it is given."""
    if (taken := iterator_taken(node, facts, scope)) is not None:
        return (taken,)
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return ()
    assign = node.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call) or len(assign.targets) != 1:
        return ()
    call = assign.value
    wrapper = dotted(call.func)
    if wrapper is None or not wrapper.rpartition(".")[2][:1].isupper():
        return ()
    if facts.callee_name(call.func) in DATA_LOADERS or facts.builds_data_loader(call.func):
        return ()
    target = dotted(assign.targets[0].target)
    loaders = facts.loaders
    return tuple(
        (arg.value.value, wrapper)
        for arg in call.args
        if isinstance(arg.value, cst.Name)
        and arg.value.value in loaders
        and (arg.value.value == target or wrapper in iterable)
    )


def iterator_taken(
    node: cst.CSTNode, facts: FactsDraft | ScriptFacts, scope: tuple[str, ...] = ()
) -> tuple[str, str] | None:
    """(loader, wrapper) where the statement ``node`` binds an iterator taken from a loader
    (``it = iter(loader)``, ``batches = enumerate(tqdm(loader))``: :func:`iterated`'s wrappers)
    or from an entry of a dict of loaders (``DGloader_iter = enumerate(dataloaders['DG'])``, the
    entry named as :func:`item_code` writes it): the iterator reads that loader from then on, so
    the loader must be prepared before. None for any other statement."""
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return None
    assign = node.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call) or len(assign.targets) != 1:
        return None
    call = assign.value
    under = iterated(call, facts.names, scope)
    wrapper = dotted(call.func)
    if under is call or wrapper is None:
        return None
    if (name := dotted(under)) is not None:
        return (name, wrapper) if name in facts.loaders else None
    item = constant_item(under)
    if item is None or item[0] not in facts.loader_dict_names:
        return None
    return item_code(*item), wrapper


def held_loader(loader: str) -> str:
    """``loaders`` for an entry ``loaders['DG']`` (:func:`iterator_taken`), the loader's own name otherwise."""
    return loader.partition("[")[0]


def _spans(statements: Sequence[cst.BaseStatement], a: Analysis) -> list[tuple[int, int]]:
    """The original lines (first, last) of each statement."""
    return [(site.line, site.end_line) for site in map(a.site, statements)]


def _bound_in(spans: Sequence[tuple[int, int]], a: Analysis) -> frozenset[str]:
    """The names an assignment within one of ``spans`` binds (the analysis' assignment lines)."""
    return frozenset(
        name
        for name, sites in a.facts.assign_sites.items()
        if any(first <= where.line <= last for first, last in spans for where in sites)
    )


def _received_models(a: Analysis) -> dict[str, tuple[str, ...]]:
    """See ``ConversionPlan.received_models``: the home function's and the creating function's
    model parameters that no statement of its body (but a definition) and no other code binds,
    but a method of a class that does not receive the accelerator (``model = Net()`` in an
    ``Experiment``'s ``run()``, handed to ``fit(model, loaders)``): no prepare can go there, so
    the function it is handed to prepares it (before, it trained unprepared: ACC926)."""
    if a.facts.home_kind != "function" or a.module is None:
        return {}
    homes = {a.facts.main_function, a.facts.creating_function}
    in_methods = {
        a.site(assign.node).line
        for assign in a.r.assigns
        if len(assign.scope) == 2 and assign.scope[0] in a.r.classes and assign.scope[0] not in a.facts.training_classes
    }
    found: dict[str, tuple[str, ...]] = {}
    for top in a.module.body:
        if not (isinstance(top, cst.FunctionDef) and top.name.value in homes):
            continue
        where = a.site(top)
        body = top.body.body if isinstance(top.body, cst.IndentedBlock) else ()
        bound = _bound_in(_spans([s for s in body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))], a), a)
        found[top.name.value] = tuple(
            name
            for name in parameter_names(top)
            if name in a.facts.models
            and name not in bound
            and all(
                where.line <= site.line <= where.end_line or site.line in in_methods
                for site in a.facts.assign_sites.get(name, ())
            )
        )
    return found


def _bound_above_main_guard(a: Analysis) -> frozenset[str]:
    """The names the module's plain statements above its ``if __name__ == "__main__":`` block bind
    (by the analysis' assignment lines), when that block builds the training objects."""
    if a.facts.home_kind != "main_guard" or a.module is None:
        return frozenset()
    above: list[cst.BaseStatement] = []
    for top in a.module.body:
        if is_main_guard(top):
            break
        if isinstance(top, cst.SimpleStatementLine):
            above.append(top)
    return _bound_in(_spans(above, a), a)


def plan_of(facts: ScriptFacts) -> ConversionPlan:
    """The script's conversion plan: the analysis' (``facts.plan``), or, for facts built by hand
    (rule unit tests), the plan those facts decide."""
    plan = facts.plan
    return plan if isinstance(plan, ConversionPlan) else ConversionPlan.of(facts)


# The recognisers: one statement of the tree a rewrite is given.


@record(eq=False, repr=False)
class AcceleratorCreation:
    """Where ``accelerator = Accelerator(...)`` is: the statements that run before it in its body,
    and the parameters of the function holding it."""

    statements_before: list[cst.BaseStatement]
    parameters: set[str]
    module_statements: list[cst.BaseStatement]
    statements_after: list[cst.BaseStatement]


def find_creation(module: cst.Module, facts: ScriptFacts) -> AcceleratorCreation | None:
    """The statement creating the accelerator, searched at module level, in the
    ``if __name__ == "__main__":`` block and in module-level functions."""
    for index, statement in enumerate(module.body):
        if creates_accelerator(statement, facts):
            return AcceleratorCreation(list(module.body[:index]), set(), [], list(module.body[index + 1 :]))
        if is_main_guard(statement) and isinstance(statement.body, cst.IndentedBlock):
            # The block runs at module level: what the module bound before it is readable too.
            body = list(statement.body.body)
            for inner_index, inner in enumerate(body):
                if creates_accelerator(inner, facts):
                    return AcceleratorCreation(
                        body[:inner_index], set(), list(module.body[:index]), body[inner_index + 1 :]
                    )
        if isinstance(statement, cst.FunctionDef) and isinstance(statement.body, cst.IndentedBlock):
            body = list(statement.body.body)
            for inner_index, inner in enumerate(body):
                if creates_accelerator(inner, facts, (statement.name.value,)):
                    names = set(parameter_names(statement))
                    return AcceleratorCreation(
                        body[:inner_index], names, list(module.body[:index]), body[inner_index + 1 :]
                    )
    return None


def creates_accelerator(statement: cst.CSTNode, facts: ScriptFacts, scope: tuple[str, ...] = ()) -> bool:
    """``accelerator = Accelerator(...)`` on a line of its own (in ``scope``, the function holding it)."""
    return accelerator_call_of(statement, facts, scope) is not None


def is_accelerator_class(func: cst.BaseExpression, facts: ScriptFacts, scope: tuple[str, ...] = ()) -> bool:
    """Whether ``func`` is Accelerate's or the runtime's ``Accelerator``, by qualified name
    (``from accelerate import Accelerator as A``, ``accelerate.Accelerator``), or the plain
    ``Accelerator`` the accelerator pass imports where the script binds no such name itself (the
    facts describe the script as written, before that import). A class of the script's own
    named ``Accelerator`` is not it."""
    if facts.qualified_name(func, scope) in ACCELERATORS:
        return True
    if not (isinstance(func, cst.Name) and func.value == "Accelerator"):
        return False
    if facts.names is None:  # facts built by hand know the module's imports only
        return "Accelerator" not in facts.imports
    return not facts.names.is_bound("Accelerator", scope)


def accelerator_call_of(statement: cst.CSTNode, facts: ScriptFacts, scope: tuple[str, ...] = ()) -> cst.Call | None:
    """The ``Accelerator(...)`` call of ``accelerator = Accelerator(...)`` on a line of its own."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
        return None
    if dotted(assign.targets[0].target) != accelerator_name(facts):
        return None
    return assign.value if is_accelerator_class(assign.value.func, facts, scope) else None


def creation_index(
    statements: Sequence[cst.BaseStatement], facts: ScriptFacts, scope: tuple[str, ...] = ()
) -> int | None:
    """The index of the statement creating the accelerator (``accelerator = Accelerator()``)
    among ``statements`` (of the function ``scope`` names), None when none does."""
    return next((i for i, s in enumerate(statements) if creates_accelerator(s, facts, scope)), None)


def prepare_call(node: cst.CSTNode | None, facts: ScriptFacts) -> cst.Call | None:
    """``node`` when it is a call ``accelerator.prepare(...)`` (``self.accelerator.prepare`` in a
    training class), else None."""
    return node if is_accelerator_method(node, facts, "prepare") else None  # type: ignore[return-value]


def prepared_loader_dicts(assignments: Sequence[cst.Assign], facts: ScriptFacts) -> list[str]:
    """The names of a converted tree bound to a dict of DataLoaders (a comprehension or a literal,
    ``dataloaders = {x: DataLoader(...) for x in ...}``) that the tree binds again to its loaders
    prepared (the loader-dict rule's ``dataloaders = {x: accelerator.prepare(loader) for x, loader
    in dataloaders.items()}``), in file order: ``dataloaders["train"]`` there is a prepared loader."""
    held = [
        assign.targets[0].target.value
        for assign in assignments
        if holds_loaders(assign.value, facts)
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
    ]
    prepared = {
        assign.targets[0].target.value
        for assign in assignments
        if isinstance(assign.value, cst.DictComp)
        and prepare_call(assign.value.value, facts) is not None
        and isinstance(assign.targets[0].target, cst.Name)
    }
    return [name for name in held if name in prepared]


def prepared_arguments(call: cst.Call) -> tuple[str, ...]:
    """The (dotted) names a ``prepare`` call is given, in order."""
    return tuple(name for arg in call.args if (name := dotted(arg.value)) is not None)


def prepares_here(statement: cst.CSTNode, facts: ScriptFacts) -> bool:
    """Whether a statement line calls ``accelerator.prepare`` as one of its small statements
    (``a, b = accelerator.prepare(a, b)``, a bare call)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return any(prepare_call(getattr(small, "value", None), facts) is not None for small in statement.body)


def prepared_by(statement: cst.CSTNode, facts: ScriptFacts) -> tuple[str, ...] | None:
    """The names ``a, b = accelerator.prepare(a, b)`` (a line of that one assignment) prepares;
    None for any other statement."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    assign = statement.body[0]
    call = prepare_call(assign.value, facts) if isinstance(assign, cst.Assign) else None
    return None if call is None else prepared_arguments(call)


class PreparesAhead:
    """The names a block's ``accelerator.prepare`` lines are still to wrap, as a walk over the
    block passes them: before its own line a model is the script's module (nothing to unwrap),
    although another model's line may already be behind."""

    def __init__(self, statements: Sequence[cst.CSTNode], facts: ScriptFacts) -> None:
        self._facts = facts
        self._names: set[str] = set()
        #: A prepare line whose names are not plain (``accelerator.prepare(*objects)``) still ahead.
        self._unnamed = False
        for statement in _with_guarded(statements):
            if prepares_here(statement, facts):
                names = prepared_by(statement, facts)
                self._unnamed |= names is None
                self._names.update(names or ())

    def passed(self, statement: cst.CSTNode) -> None:
        """The walk is past ``statement``: what it prepares is wrapped from here on."""
        if not prepares_here(statement, self._facts):
            return
        names = prepared_by(statement, self._facts)
        if names is None:
            self._unnamed = False
            self._names.clear()
        else:
            self._names.difference_update(names)

    def ahead(self, name: str | None) -> bool:
        """Whether ``name`` is prepared below the walk's place (any name, for None)."""
        if self._unnamed:
            return True
        return bool(self._names) if name is None else name in self._names


def _with_guarded(statements: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """The statements, with those of a ``__main__`` block among them: the block is no frame of
    its own, and the module's prepare line is often in it."""
    flat: list[cst.CSTNode] = []
    for statement in statements:
        flat.append(statement)
        if is_main_guard(statement) and isinstance(statement, cst.If):
            flat.extend(body_statements(statement))
    return flat


def prepare_assignments(node: cst.CSTNode, facts: ScriptFacts) -> list[tuple[cst.Assign, cst.Call]]:
    """Every ``targets = accelerator.prepare(...)`` under ``node``, with its call."""
    return [
        (inner, call)
        for inner in nodes_in(node)
        if isinstance(inner, cst.Assign) and (call := prepare_call(inner.value, facts)) is not None
    ]


def names_prepared_under(node: cst.CSTNode, facts: ScriptFacts) -> set[str]:
    """The names bound to what an ``accelerator.prepare`` under ``node`` returns."""
    return {
        name
        for assign, _ in prepare_assignments(node, facts)
        for t in assign.targets
        for name in target_names(t.target)
    }


def is_any_prepare(value: cst.BaseExpression | None) -> bool:
    """``<anything>.prepare(...)`` or one of its one-kind variants (``prepare_model``): what an
    original script already prepared, whatever it calls its accelerator (the analysis reads the
    script as written, before it knows which name is the accelerator)."""
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in PREPARE_METHODS
    )
