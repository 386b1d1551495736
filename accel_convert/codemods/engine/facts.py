"""What the analysis learns about a script, once, before any rewrite runs.

:mod:`codemods.engine.analysis` draws a :class:`ScriptFacts` in one read-only pass over the parsed
module; every codemod reads it. Facts are *names* (``"model"``, ``"args.batch_size"``, ``"main"``) and
qualified names (``"torch.nn.utils.clip_grad_norm_"``), never libcst nodes: each pass works on a
new tree, so node identities do not survive from one pass to the next.

Names are file-wide sets: ``model`` in ``main()`` and the ``model`` parameter of ``train(...)``
denote the same object in the scripts this tool converts (see
``shared/reference/conversion-cases.md``), and a name that is a model in one function and
something else in another is reported rather than guessed.

The facts hold what several rules (or the model's providers) read; a fact one rule alone reads
lives with that rule and is read with :meth:`ScriptFacts.of` (see :mod:`codemods.model.provider`).

Read-only once drawn: the providers fill a :class:`FactsDraft` (the same fields, holding the sets,
lists and dicts they fill), and the analysis ends with :meth:`FactsDraft.finish`, which hands the
rules a frozen :class:`ScriptFacts`. Its fields are typed read-only (``AbstractSet``, ``Sequence``,
``Mapping``), so a rule changing a fact (``facts.models.add(...)``, ``facts.main_function = ...``)
is a type error; at run time no field can be assigned and every set, list and dict a field holds
is a frozenset, a tuple or a read-only mapping. The questions both ask (``loaders``,
``home_function``, ``callee_name``, ...) are :class:`FactQuestions`. The one thing that changes
while the rules run is the :class:`RunContext` the facts hand on (``facts.context``): original
positions carried from tree to tree and the lines earlier rules changed, which the conversion loop
writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.names import BuiltinOf, builtin_named, builtins_at
from accel_convert.codemods.engine.positions import OriginIndex
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.torch_names import DATA_LOADERS
from accel_convert.records import record

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from collections.abc import Set as AbstractSet

    import libcst as cst

    from accel_convert.codemods.engine.names import NameTable
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds

Result = TypeVar("Result")
Result_co = TypeVar("Result_co", covariant=True)


class RuleResultKey(Protocol[Result_co]):
    """What :meth:`ScriptFacts.of` reads one rule's own facts by: a rule provider
    (:class:`codemods.model.provider.RuleProvider`), whose result the analysis keeps under its
    ``name``. Declared here, by what the facts read of it, so the facts need not know the model."""

    @property
    def name(self) -> str: ...

    @property
    def compute(self) -> Callable[[Any], Result_co]: ...


#: How the call graph and the facts name module-level code (it calls, but is never called).
MODULE = "<module>"


def callers_closure(
    functions: AbstractSet[str],
    call_graph: Mapping[str, AbstractSet[str]],
    *,
    reaching: AbstractSet[str] = frozenset(),
    among: AbstractSet[str] | None = None,
) -> set[str]:
    """``functions`` and every function that calls one of them or one of ``reaching``, directly
    or through its own calls (``train`` calls ``train_one_epoch``, which runs the backward).
    Module-level code is not a function and is never added; ``among``: only these may be."""
    callers: dict[str, set[str]] = {}
    for caller, callees in call_graph.items():
        if caller != MODULE and (among is None or caller in among):
            for callee in callees:
                callers.setdefault(callee, set()).add(caller)
    found = set(functions)
    pending = [*found, *reaching]
    while pending:
        for caller in callers.get(pending.pop(), ()):
            if caller not in found:
                found.add(caller)
                pending.append(caller)
    return found


@record(eq=False, repr=False)
class RunContext:
    """The only state that changes while the rules run, one per conversion: original positions
    carried from tree to tree, and the original lines earlier rules changed (a later rule that
    looks for what they wrote walks only those statements)."""

    origins: OriginIndex = field(default_factory=OriginIndex)
    changed_lines: set[int] = field(default_factory=set)
    #: What the rules' walks learned of a module's or function's statement list (by the node's
    #: identity, with the node, so that an identity is never reused): every pass enters the same
    #: unchanged nodes, and reads them once.
    block_layouts: dict[int, tuple[object, object]] = field(default_factory=dict)


@record(frozen=True, eq=False, repr=False)
class LoopFacts:
    """A ``for`` loop over a data loader."""

    #: Enclosing function name (``"train"``), or ``"<module>"`` for module-level code.
    function: str
    #: The loader expression iterated, as code: ``"train_loader"``, ``"self.loader"``.
    loader: str
    #: Names bound by the loop target: ``("batch_idx", "data", "target")`` or ``("batch",)``.
    targets: tuple[str, ...]
    kind: Literal["train", "eval"]
    site: Site
    #: The function nested in ``function``'s body holding the loop, by its path
    #: (``main.run.train_epoch``); None for the function's own code.
    nested: str | None = None


class FactQuestions:
    """Questions about the facts that the providers ask while they draw them and the rules ask
    afterwards: both :class:`FactsDraft` and :class:`ScriptFacts` answer them."""

    # The fields the questions (and the functions taking either) read, as both classes declare
    # them (read-only here).
    imports: Mapping[str, str]
    names: NameTable | None
    program: ProgramSeeds | None
    existing_accelerator: str | None
    accelerator_name: str
    parsed_arguments: AbstractSet[str]
    parser_options: AbstractSet[str]
    word_lines: Mapping[str, Sequence[int]]
    home_kind: Literal["function", "main_guard", "module", "library"]
    main_function: str | None
    models: AbstractSet[str]
    optimizers: AbstractSet[str]
    schedulers: AbstractSet[str]
    per_epoch_schedulers: AbstractSet[str]
    train_loaders: AbstractSet[str]
    eval_loaders: AbstractSet[str]
    train_loops: Sequence[LoopFacts]
    eval_loops: Sequence[LoopFacts]
    backward_functions: AbstractSet[str]
    call_graph: Mapping[str, AbstractSet[str]]
    nested_functions: AbstractSet[str]
    call_sites: Mapping[str, Sequence[Site]]
    training_method_lines: AbstractSet[int]
    unprepared_loaders: AbstractSet[str]
    loss_names: AbstractSet[str]
    accessible_functions: AbstractSet[str]
    file_logger_classes: AbstractSet[str]
    loader_classes: AbstractSet[str]
    device_names: AbstractSet[str]
    device_names_elsewhere: AbstractSet[tuple[tuple[str, ...], str]]
    loader_tuples: Mapping[str, int]
    loader_tuple_bindings: Mapping[str, Mapping[int, int]]

    def loader_tuple_length(self, name: str) -> int | None:
        """How many loaders the tuple ``name`` holds: always (``loader_tuples``), or on the paths
        binding it to one (``loader_tuple_bindings``, every such binding as long); None when it
        holds no loader tuple."""
        if name in self.loader_tuples:
            return self.loader_tuples[name]
        lengths = set(self.loader_tuple_bindings.get(name, {}).values())
        return lengths.pop() if len(lengths) == 1 else None

    def builds_data_loader(self, func: cst.BaseExpression, scope: tuple[str, ...] = (), *, strict: bool = True) -> bool:
        """Whether a call of ``func`` (used in ``scope``) builds a data loader: torch's
        ``DataLoader`` however imported, or a class deriving from it, one of this file's
        (``class MyLoader(DataLoader)``) or of another module of the program. The one answer every
        role, rewrite and check asks; what reads a loader's own arguments (its batch size, its
        ``collate_fn``) asks for torch's signature alone (:data:`~torch_names.DATA_LOADERS`).
        ``strict``: as :meth:`NameTable.qualified_name`."""
        if self.names is not None:
            qualified = self.names.qualified_name(func, scope, strict=strict)
        else:
            qualified = self.qualified_name(func, scope)
        if qualified in DATA_LOADERS:
            return True
        written = dotted(func)
        if (
            written is not None
            and written in self.loader_classes
            and (self.names is None or self.names.binding_scope(written, scope) == ())
        ):
            return True
        seeds = self.program
        return (
            seeds is not None
            and bool(seeds.loader_classes)
            and self.program_callee(func, scope) in seeds.loader_classes
        )

    def program_callee(self, func: cst.BaseExpression, scope: tuple[str, ...] = ()) -> str | None:
        """The absolute qualified name of a call's function when it is imported (``engine.train``
        for ``train`` after ``from engine import train``, or for ``engine.train`` after ``import
        engine``; relative imports through the seeds); None otherwise."""
        seeds = self.program
        found = self.names.qualified_name(func, scope, strict=True) if self.names is not None else None
        if found is None and seeds is not None:
            head, _, rest = (dotted(func) or "").partition(".")
            resolved = dict(seeds.relative_imports).get(head)
            if resolved is None and self.names is not None and not self.names.is_bound(head, scope):
                # Only where nothing in the module binds the name after the star import did.
                resolved = dict(seeds.star_imports).get(head)
            if resolved is not None:
                found = f"{resolved}.{rest}" if rest else resolved
        if found is None or seeds is None or not seeds.aliases:
            return found
        return dict(seeds.aliases).get(found, found)

    def qualified_name(self, node: cst.BaseExpression, scope: tuple[str, ...] = ()) -> str | None:
        """Qualified name of a Name/Attribute chain used in ``scope`` (see
        :mod:`codemods.engine.names`); None for anything not rooted in an import."""
        if self.names is not None:
            return self.names.qualified_name(node, scope)
        # Facts built by hand (rule unit tests) have only the module's imports.
        head, _, rest = (dotted(node) or "").partition(".")
        resolved = self.imports.get(head)
        return None if resolved is None else f"{resolved}.{rest}" if rest else resolved

    def builtin(self, node: cst.BaseExpression, scope: tuple[str, ...] = ()) -> str | None:
        """The builtin ``node`` denotes in ``scope`` (``"print"``), None where the script binds
        that name itself (``from rich import print``); see :func:`codemods.engine.names.builtin_named`."""
        return builtin_named(node, self.names, scope)

    def builtins_at(self, scope: tuple[str, ...] = ()) -> BuiltinOf:
        """:meth:`builtin` asked for ``scope``: for a helper that reads expressions used there."""
        return builtins_at(self.names, scope)

    def is_builtin(self, node: cst.BaseExpression, name: str, scope: tuple[str, ...] = ()) -> bool:
        """Whether ``node`` is the builtin ``name`` (``len``, ``open``) where it is used."""
        return builtin_named(node, self.names, scope) == name

    def opens_for_writing(self, node: cst.BaseExpression, scope: tuple[str, ...] = ()) -> bool:
        """``open(path, "w")`` (or ``"a"``, ``"x"``, ``"r+"``, any binary variant), the builtin
        ``open`` where ``node`` stands (``scope``), not one the script binds itself."""
        mode = self.open_mode(node, scope)
        return mode is not None and any(m in mode for m in "wax+")

    def open_mode(self, node: cst.BaseExpression, scope: tuple[str, ...] = ()) -> str | None:
        """The mode a call of the builtin ``open`` gives as a string literal (``"r"`` where it
        gives none); None for any other call, or a mode written otherwise."""
        import libcst as cst

        if not isinstance(node, cst.Call) or not self.is_builtin(node.func, "open", scope):
            return None
        mode: cst.BaseExpression | None = None
        if len(node.args) > 1 and node.args[1].keyword is None:
            mode = node.args[1].value
        for arg in node.args:
            if arg.keyword and arg.keyword.value == "mode":
                mode = arg.value
        if mode is None:
            return "r"
        evaluated = mode.evaluated_value if isinstance(mode, cst.SimpleString) else None
        return evaluated if isinstance(evaluated, str) else None

    def callee_name(self, node: cst.BaseExpression, scope: tuple[str, ...] = ()) -> str | None:
        """What a call's function is, for matching against tables of names: its qualified name
        when rooted in an import (``torch.save``), else the name as written (``open``,
        ``writer.add_scalar``)."""
        return self.qualified_name(node, scope) or dotted(node)

    def lines_mentioning(self, words: Iterable[str]) -> set[int]:
        """Original lines of the statements that mention any of ``words``."""
        return {line for word in words for line in self.word_lines.get(word, ())}

    @property
    def home_function(self) -> str:
        """The function building the training objects, ``"<module>"`` for code outside any."""
        return self.main_function if self.home_kind == "function" and self.main_function else "<module>"

    @property
    def trained_objects(self) -> AbstractSet[str]:
        return self.models | self.optimizers | self.loaders | self.schedulers

    @property
    def has_accelerator(self) -> bool:
        """Whether the converted script has an accelerator: it had one, or it trains something
        (ACC101 creates one). A module that only defines models or helpers gets none, and no
        pass may then write ``accelerator.`` into it. A library of a program has the entry
        script's, in the functions it reaches."""
        if self.home_kind == "library" and self.accessible_functions:
            return True  # a module of a program whose functions the entry's accelerator reaches
        return self.existing_accelerator is not None or bool(self.trained_objects or self.loss_names)

    def preparation_groups(self) -> list[AbstractSet[str]]:
        """What ``prepare`` takes, by role, in Accelerate's customary order: models, optimizers,
        train loaders, eval loaders, schedulers stepped per batch (one stepped per epoch is not
        prepared: the prepared scheduler would step once per process)."""
        return [
            self.models,
            self.optimizers,
            self.train_loaders,
            self.eval_loaders - self.unprepared_loaders,
            self.schedulers - self.per_epoch_schedulers,
        ]

    @property
    def loaders(self) -> AbstractSet[str]:
        return self.train_loaders | self.eval_loaders

    def training_lines(self, block: str | None = None) -> list[int]:
        """Lines of the home block's loops over loaders, and of every call of a function that
        (directly or through its own calls) loops over one or runs a backward (training on
        tensors sliced by hand, with no loader), in this module or in another of the program
        (``fit(train_loader, model, ...)`` after ``from trainer import fit``). ``block``: another
        function's, instead."""
        loops = [*self.train_loops, *self.eval_loops]
        home = self.home_function if block is None else block
        trains = self.backward_functions & self.call_graph.get(home, set())
        seeds = self.program
        # Another module's function looping over a loader or running a backward (by its
        # qualified name, as the call graph files the calls of imported program functions).
        elsewhere = seeds.looping_functions | seeds.backward_functions if seeds is not None else frozenset()
        # A loop in a function nested in the home function's body runs where that function is
        # called: its call is where training starts, never the loop inside the ``def``.
        looping = callers_closure(
            {loop.nested or loop.function for loop in loops} | (trains - {home}) | elsewhere, self.call_graph
        )
        # A nested function's own block (``main.train``) holds the loops nested nowhere deeper.
        lines = [loop.site.line for loop in loops if (loop.nested or loop.function) == home]
        # A function nested in another's body is called there: its calls are where training
        # starts in this block only when this block's code makes them.
        called = self.call_graph.get(home, set())
        # Another module's function starts the training where this block calls it, when no other
        # function of this module calls it (its calls are filed by name, not by caller): a call
        # in one of them starts the training where that function is called.
        elsewhere_here = {
            name
            for name in elsewhere & called
            if not any(name in callees for caller, callees in self.call_graph.items() if caller not in (home, MODULE))
        }
        lines += [
            site.line
            for name in looping - (elsewhere - elsewhere_here)
            if name in called or name not in self.nested_functions
            for site in self.call_sites.get(name, ())
        ]
        lines += self.training_method_lines
        return lines


@record(frozen=True, eq=False, repr=False)
class ScriptFacts(FactQuestions):
    """What the analysis drew (see the module docstring); read-only: ``FactsDraft.finish`` makes
    them, and facts built by hand (rule unit tests) take any sets, sequences and mappings."""

    #: Local name → qualified name for everything imported (``{"nn": "torch.nn",
    #: "clip": "torch.nn.utils.clip_grad_norm_"}``), so codemods match calls by qualified name.
    imports: Mapping[str, str] = field(default_factory=dict)
    #: The file imports torch at all (files that don't are returned untouched, unless
    #: ``keeps_files_for_writing`` in a program).
    uses_torch: bool = False
    #: The file binds a file it opens for writing to a name or attribute, to write through it
    #: later (a CSV logger class's ``self.csv_file = open(filename, "w")``): every rank runs it.
    keeps_files_for_writing: bool = False
    #: The file creates a folder (``os.makedirs``): every rank would, racing (a library without
    #: torch is converted for it in a program).
    creates_folders: bool = False
    #: Module-level classes of the file that keep a file open for writing (``self.file =
    #: open(path, "w")`` in a method): a logger whose instance writes its rows on every rank.
    file_logger_classes: AbstractSet[str] = frozenset()
    #: Names bound to an instance of such a class, of this module or another of the program
    #: (``log = CSVLogger("epochs.csv", ...)``): created on the main process only, like a tracker
    #: (they are trackers too), and reported in their class only where that cannot be done.
    file_loggers: AbstractSet[str] = frozenset()
    #: Where (line, column) such a logger is built right in a call of the module's own function or
    #: class (``train(model, CSVLogger("log.csv"))``): built on the main process only, None on
    #: the others, as the parameter it fills is a tracker.
    loggers_built_in_calls: AbstractSet[tuple[int, int]] = frozenset()
    #: Files opened for writing into a name kept to write through on every rank (``log = open(path,
    #: "a")``, a class's ``self.log`` in ``__init__``) and read back by no one, by the (line,
    #: column) of their ``open`` call: the main process alone writes them, the others open
    #: ``os.devnull`` (``codemods.model.file_flow.kept_handles``).
    handles_main_process_writes: AbstractSet[tuple[int, int]] = frozenset()
    #: Such files that every rank writes through but the main process alone cannot write (read
    #: back later, read through the handle itself): (line, column) of the ``open`` → why.
    handles_left_on_every_rank: Mapping[tuple[int, int], str] = field(default_factory=dict)
    #: Classes whose ``__init__`` opens one of ``handles_main_process_writes``: each construction
    #: reads the accelerator.
    classes_opening_handles: AbstractSet[str] = frozenset()
    #: Module-level functions returning a file they open for writing (``def open_log(path): return
    #: open(path, "w")``) → its mode: another module of the program calling one opens that file.
    handle_openers: Mapping[str, str] = field(default_factory=dict)
    #: Handle openers of other program modules this module calls (absolute qualified names, a
    #: method as ``module.Class.method``) → whether every handle such a call opens here is kept for
    #: writing alone (read back by no one, no ``+`` mode): the program joins them, and the opener
    #: opens its file on the main process only (``ProgramSeeds.opened_on_main_process``).
    main_process_openers_out: Mapping[str, bool] = field(default_factory=dict)

    #: The script already creates an Accelerator (from accelerate or runtime); its variable name.
    existing_accelerator: str | None = None
    #: Name the codemods use for the accelerator object.
    accelerator_name: str = "accelerator"

    #: Names (or dotted attribute paths, ``"self.model"``) bound to objects of each role.
    models: AbstractSet[str] = frozenset()
    optimizers: AbstractSet[str] = frozenset()
    schedulers: AbstractSet[str] = frozenset()
    #: Schedulers stepped once per epoch (outside the batch loop): not prepared (see ACC1xx prepare).
    per_epoch_schedulers: AbstractSet[str] = frozenset()
    #: Names whose object has its ``.step()`` called (an optimizer's, a scheduler's), here or, by the
    #: seeds, in another module of the program, with the parameters and attributes (file-wide)
    #: that receive one of them: ``trainable``'s optimizer stepped as ``self.optimizer`` of the
    #: trainer it is handed to. Built from a model's parameters, such an object is an optimizer.
    stepped_objects: AbstractSet[str] = frozenset()
    train_loaders: AbstractSet[str] = frozenset()
    eval_loaders: AbstractSet[str] = frozenset()
    #: Evaluation loaders kept unprepared: a script with no model that only reads them (dataset
    #: statistics) reads each one whole on every rank, as the original does.
    unprepared_loaders: AbstractSet[str] = frozenset()
    #: Names holding a tuple of loaders of known length (``loaders = get_loaders(...)``, a
    #: factory returning ``train_loader, test_loader``; ``loaders = (train_loader, test_loader)``)
    #: → that length (at least 2): prepared by their elements, ``loaders =
    #: accelerator.prepare(*loaders)`` (which returns a tuple as long, in order), never as one
    #: object (passed through unchanged: nothing sharded).
    loader_tuples: Mapping[str, int] = field(default_factory=dict)
    #: The loader tuples of ``loader_tuples`` written of the script's own loader names
    #: (``loaders = (train_loader, test_loader)``) → those names: where they are prepared, the
    #: tuple is bound again to the prepared loaders (``loaders = (train_loader, test_loader)``),
    #: not prepared by its elements a second time.
    loader_tuple_parts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Names bound to a loader tuple by some statements and to one loader by the others
    #: (``dloader = get_train_valid_loader(...)`` when training, ``dloader = get_test_loader(...)``
    #: otherwise) → the original line of each statement binding a tuple → its length: no one
    #: ``prepare`` fits both shapes, so each binding is prepared where it is made, by its shape.
    loader_tuple_bindings: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    #: Names holding the dict of loaders a loader factory of the file returns (``loaders =
    #: get_loaders(...)``, the factory returning ``{"train": train_loader, "test": test_loader}``):
    #: prepared by their values, ``loaders = {key: accelerator.prepare(loader) for key, loader in
    #: loaders.items()}``; a loop over ``loaders["train"]`` iterates one of its prepared loaders.
    loader_dict_names: AbstractSet[str] = frozenset()
    #: Module-level loader factories of the module returning a tuple of loaders of known length
    #: (``return train_loader, test_loader``) → that length; other modules of the program learn
    #: them through the seeds (``ProgramSeeds.loader_tuple_factories``).
    loader_tuple_factories: Mapping[str, int] = field(default_factory=dict)
    #: Module-level loader factory → the positions of the loaders in the tuple it returns (None:
    #: what it returns is one loader) and, of those, the positions holding a tuple of loaders
    #: (``return (DataLoader(a), DataLoader(b)), 3``): the other modules unpack its calls by them
    #: (``ProgramSeeds.loader_positions``).
    loader_positions: Mapping[str, tuple[tuple[int, ...] | None, tuple[int, ...]]] = field(default_factory=dict)
    #: (function, name) of the names a function binds by unpacking a loader tuple it is handed
    #: (``def fit(model, loaders): train_loader, test_loader = loaders``): loaders, each taking
    #: its element's role, that the caller prepared with the tuple (no object of the function's
    #: own to prepare).
    loaders_unpacked_from_parameters: AbstractSet[tuple[str, str]] = frozenset()
    #: (scope, local) → the names a local a loop iterates picks, where every binding of it in
    #: that function or method (scope ``("Solver", "test")``) binds another name (``loader = val_loader`` / ``loader = train_loader`` under ``if``/``else``,
    #: StarGAN's ``data_loader = self.celeba_loader``): the loop iterates what they hold.
    names_picked_by_locals: Mapping[tuple[tuple[str, ...], str], AbstractSet[str]] = field(default_factory=dict)
    #: Names holding the device (``device``, ``args.device``, ``dev``) and flags meaning "use CUDA"
    #: (``args.cuda``, ``use_cuda``).
    device_names: AbstractSet[str] = frozenset()
    cuda_flags: AbstractSet[str] = frozenset()
    #: Names a call takes as its device (``.to(gpu_id)``, ``device=self.gpu_id``,
    #: ``.to(cfg["device"])``) that hold the same GPU on every process, followed to where the
    #: script fixed it (``device = 0``, ``--gpu`` of type ``int``, a settings dictionary's
    #: device): the accelerator's device at that call (``codemods/model/devices.py``).
    gpu_index_names: AbstractSet[str] = frozenset()
    #: (module-level function or class, name) of the names among ``gpu_index_names`` that a call
    #: there takes as its device holding no fixed GPU there: a name of the same spelling bound
    #: elsewhere (``target = "cpu"`` in ``fingerprint()``, ``target = pick_gpu()`` in ``main()``).
    gpu_index_names_elsewhere: AbstractSet[tuple[str, str]] = frozenset()
    #: (scope, name) of the names among ``device_names`` that the binding in that scope (a
    #: function's own ``dev``, the module's ``device``, a class's ``self.device``: see
    #: :func:`codemods.engine.devices.binding_scope`) makes something else: no device at all
    #: (``dev = errors.std().item()``), or the CPU kept on purpose where the script chooses a GPU
    #: in another scope (a module's ``device = torch.device("cpu")`` for its metrics, beside
    #: ``main()``'s own ``device``). Read through :func:`codemods.engine.devices.holds_device`.
    device_names_elsewhere: AbstractSet[tuple[tuple[str, ...], str]] = frozenset()
    #: Names holding a GPU index here, whether or not a call here takes them as its device
    #: (``device = 0``, ``args.gpu`` of an ``int`` option): passed to a function of another module
    #: of the program, they make its parameter a GPU index there.
    gpu_index_values: AbstractSet[str] = frozenset()
    #: The module's own names holding a fixed GPU as its code binds them, module-wide
    #: (``cfg["gpu"]`` of ``cfg = {"gpu": 0, ...}``): other modules of the program importing
    #: them read the same GPU (``ProgramSeeds.imported_gpu_indices``).
    module_gpu_indices: AbstractSet[str] = frozenset()
    #: The file's functions returning a GPU index on every path (``def pick_gpu(): return 0``):
    #: a call of one given as a device (``model.to(pick_gpu())``) is the same GPU on every process.
    gpu_index_functions: AbstractSet[str] = frozenset()
    #: (module-level function or class, call as written) of each call of a method of the file's
    #: classes returning a GPU index on every path (``def pick_gpu(self): return 0``):
    #: ``("Trainer", "self.pick_gpu")``; given as a device, the same GPU on every process.
    gpu_index_method_calls: AbstractSet[tuple[str, str]] = frozenset()
    #: (module-level function or class, name) for each name a call there takes as its device, and
    #: the names of that function or class it comes from (``("Trainer", "gpu_id")`` for
    #: ``x.to(self.gpu_id)`` with ``self.gpu_id = gpu_id`` in ``__init__``).
    devices_taken: AbstractSet[tuple[str, str]] = frozenset()
    #: Module-level functions writing a checkpoint to a path among their parameters (``def
    #: save_checkpoint(model, path): torch.save(..., path)``): (function, position, parameter).
    #: Their callers in other modules of the program write that file (``codemods/model/file_flow.py``).
    path_parameter_writes: AbstractSet[tuple[str, int, str]] = frozenset()
    #: The same for reads (``torch.load(path)``) no barrier may go before: under an ``if`` or in a
    #: loop of the function (``if os.path.isfile(path):``), where the ranks wait after the write instead.
    path_parameter_reads: AbstractSet[tuple[str, int, str]] = frozenset()
    #: Module-level functions whose evaluation loop over a loader among their parameters writes a
    #: file per batch named by the batch's index (UNet's ``save_predictions_as_imgs(loader,
    #: model, folder)``): (function, position, parameter). A caller in another module keeps the
    #: loader it passes unprepared, as a script keeps its own (``codemods/model/file_flow.py``).
    per_batch_file_parameters: AbstractSet[tuple[str, int, str]] = frozenset()
    #: Loaders this module builds and keeps unprepared for such an evaluation: the parameters
    #: they fill in other modules' functions receive every batch, on every process.
    loaders_left_unsharded: AbstractSet[str] = frozenset()
    #: Module-level functions returning a loader whose ``collate_fn`` joins the samples' own rows
    #: (``model/loaders.joined_rows_loaders``): a caller in another module evaluating over what
    #: one returns keeps it unsharded, as this module keeps its own.
    joined_rows_factories: Mapping[str, frozenset[int]] = field(default_factory=dict)
    #: Evaluation loops (original line) over such a loader that stays prepared (a training loop
    #: iterates it too, or another module hands it in) → the positions of the joined values in
    #: its batch (-1: the batch is one): nothing gathered there, reported (ACC965).
    joined_rows_loops: Mapping[int, frozenset[int]] = field(default_factory=dict)
    #: Evaluation loops (original line) over such a loader that stays unprepared: every process
    #: runs every batch, and nothing is gathered there.
    unsharded_loops: AbstractSet[int] = frozenset()
    #: Loops (original line) over a loader left unsharded (any of the above, or a per-batch
    #: file writer's) that call a model and move none of their batches: the original's batches
    #: met its model where the loader put them, on the CPU, while the converted model is on the
    #: accelerator's device; the loop moves its batch there first (ACC127).
    unsharded_batches_moved: AbstractSet[int] = frozenset()
    #: Names a call takes as its device that hold such a GPU from some of their origins and a
    #: value that cannot be followed from others: reported at the call.
    devices_unfollowed: AbstractSet[str] = frozenset()

    #: The batch-size expression the loaders are built with, as code (``"args.batch_size"``), if one.
    batch_size_expr: str | None = None
    #: Function that builds the model/optimizer/loaders (``"main"``); None for module-level scripts.
    main_function: str | None = None

    train_loops: Sequence[LoopFacts] = ()
    #: Comprehensions over a loader outside training functions (an evaluation written as
    #: ``[step(batch) for batch in valid_dl]``): the loader and where.
    loader_comprehensions: Sequence[tuple[str, Site]] = ()
    #: DataLoaders built in the arguments of a call of one of the file's functions
    #: (``train(model, DataLoader(train_set, shuffle=True), optimizer)``): the function's
    #: parameter is a loader (in ``train_loaders``/``eval_loaders`` by how it is looped over) and
    #: each construction is prepared where it stands (ACC120). Sites of the constructions.
    inline_loaders: Sequence[Site] = ()
    eval_loops: Sequence[LoopFacts] = ()

    #: Things already present that change what may be done: "DataParallel", "DistributedDataParallel",
    #: "mp.spawn", "DistributedSampler", "GradScaler", "autocast", "manual_accumulation".
    existing_features: AbstractSet[str] = frozenset()

    #: Where the accelerator is created, when not in ``main_function`` (which another function
    #: calls repeatedly): it creates it once and passes it down (ACC104).
    creating_function: str | None = None
    #: Module-level functions that receive the model from the home block and build its optimizer
    #: themselves (``train(model, loader, epochs)``): the home block prepares the model and
    #: loaders, each of these prepares what it builds (the optimizer, its scheduler, loaders).
    training_functions: AbstractSet[str] = frozenset()
    #: Models handed to one of ``training_functions`` under a name the analysis does not know as
    #: a model (``train(nn_light, ...)``, ``nn_light`` built after the training began): they are
    #: not prepared, so their training is not distributed (ACC926): (name, function, call site).
    unprepared_received_models: Sequence[tuple[str, str, Site]] = ()
    #: Models handed to those functions that the block handing them builds once, with a model
    #: constructor (``student = LightNN().to(device)``): prepared right after that line.
    models_prepared_where_built: AbstractSet[str] = frozenset()
    #: Where the training objects are built: in ``main_function``, in the ``if __name__ ==
    #: "__main__":`` block, or in plain module-level code; "library": a module of a program that
    #: its entry script imports (nothing built here; the accelerator comes in as a parameter), or a
    #: module of training functions converted without the script calling them (nothing reaches one).
    home_kind: Literal["function", "main_guard", "module", "library"] = "module"
    #: Module-level functions from which the accelerator is reachable once converted: the home
    #: function and everything it calls (transitively, by plain name); "<module>" for module code.
    accessible_functions: AbstractSet[str] = frozenset()
    #: A library's functions among them that code holding no accelerator also calls (its own
    #: ``__main__`` block, directly or through its other functions): they take the accelerator as
    #: an optional parameter and create their own when called without one.
    optional_accelerator_functions: AbstractSet[str] = frozenset()
    #: Names of folders and files only one process has (``workdir = tempfile.mkdtemp()`` and
    #: paths built from it): writes there are not moved to the main process.
    per_process_paths: AbstractSet[str] = frozenset()
    #: Names bound to an experiment tracker (``writer = SummaryWriter(...)``, ``run =
    #: wandb.init(...)``, and the parameters they are passed to): its calls log from one process.
    trackers: AbstractSet[str] = frozenset()
    #: Module-level ``torch.nn.Module`` subclasses that train themselves: one of their own methods
    #: runs a backward (``Layer.train`` stepping the layer's own optimizer, a ``fit`` method). DDP
    #: averages gradients only for what runs through the prepared wrapper's forward, so a script
    #: training this way is only reported (ACC925), never rewritten.
    self_training_models: AbstractSet[str] = frozenset()
    #: Module-level classes deriving from a ``torch.nn`` module, directly or through the file's.
    model_classes: AbstractSet[str] = frozenset()
    #: Module-level classes deriving from a dataset (``torch.utils.data.Dataset``, torchvision's,
    #: another module's ``BaseDataset``), directly or through the file's.
    dataset_classes: AbstractSet[str] = frozenset()
    #: Module-level classes that are training bundles (see ``model.classes.bundle_attributes``:
    #: their building binds models, optimizers, loaders or schedulers to attributes their other
    #: methods leave alone) → (attribute, role: a ScriptFacts role field) pairs: ``Experiment`` →
    #: ``(("model", "models"), ("optimizer", "optimizers"), ...)``. Told to the program's other
    #: modules, which prepare an instance's attributes where they build it.
    bundle_classes: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    #: The file's module-level functions and static or class methods (``"Net.create"``) that
    #: return a new model of the program's classes: a call of one builds a model as a
    #: construction does (see :func:`codemods.engine.imported_calls.builds_model_of_program_class`).
    model_factories: AbstractSet[str] = frozenset()
    #: Methods of the file's classes (``"Detector.get_optimizer"``) that return a new optimizer
    #: (a model's ``configure_optimizers``): a call of one builds an optimizer over its receiver,
    #: here and, through the seeds' ``optimizer_methods``, in the program's other modules.
    optimizer_methods: AbstractSet[str] = frozenset()
    #: Parts of the file's model classes their ``forward`` runs (``"FasterRCNN.extractor"`` for
    #: ``h = self.extractor(x)``: an attribute called on the instance that is no method of the
    #: class): a call of one from outside (``model.extractor(imgs)``) runs part of the model
    #: outside its forward, here and, through the seeds' ``model_parts``, in the other modules.
    model_parts: AbstractSet[str] = frozenset()
    #: Methods of the file's model classes that evaluate (``"FasterRCNN.predict"``): they switch
    #: their instance to eval mode (``self.eval()``) or run it under ``no_grad`` only. A loop over
    #: a loader calling one on a model evaluates, here and, through the seeds'
    #: ``evaluating_methods``, in the other modules.
    evaluating_methods: AbstractSet[str] = frozenset()
    #: Module-level classes deriving from a ``DataLoader`` (torch's, another of the file's, or a
    #: loader class of another module of the program): see :meth:`FactQuestions.builds_data_loader`.
    loader_classes: AbstractSet[str] = frozenset()
    #: Module-level classes holding the training code (a ``Trainer``, a ``Solver``): they receive
    #: the accelerator in ``__init__`` and their methods use it as ``self.accelerator`` (ACC108).
    #: Their names count as functions in ``accessible_functions`` and ``batch_names_by_function``.
    training_classes: AbstractSet[str] = frozenset()
    #: The training classes above that are bases of other training classes (``BaseTrainer`` of
    #: ``Trainer(BaseTrainer)``, here or in another module of the program), never constructed
    #: themselves: their methods run on an instance of a subclass, which keeps ``self.accelerator``
    #: before calling ``super().__init__``, so their ``__init__`` is not given it.
    training_bases: AbstractSet[str] = frozenset()
    #: Attributes of training classes holding prepared objects: those the class prepares and
    #: those holding what the caller prepared and passed in (``self.model = model``).
    prepared_attributes: AbstractSet[str] = frozenset()
    #: Training class → the attributes it builds itself (``self.model``, ``self.train_loader``),
    #: prepared at the end of its ``__init__``, in Accelerate's customary order.
    class_prepare: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Module-level function → module-level functions it calls by plain name; a function nested
    #: in a module-level function's body is one too, by its path (``inner_training_loop.train``).
    call_graph: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    #: Functions nested in a module-level function's body (at any depth), by their path.
    nested_functions: AbstractSet[str] = frozenset()
    #: Module-level functions returning data loaders (what the program's other modules unpack
    #: from their calls is a loader).
    loader_returning_functions: AbstractSet[str] = frozenset()
    #: Lines calling a training method on an instance of a training class the module builds
    #: (``lr_finder.range_test(...)``): training starts there too.
    training_method_lines: AbstractSet[int] = frozenset()
    #: The module's own functions it never calls by name but uses as values (a list of hooks,
    #: ``Thread(target=...)``): called out of sight. Computed on first ask (only a check reads it).
    functions_called_out_of_sight: Callable[[], frozenset[str]] = lambda: frozenset()
    #: Names already passed through ``accelerator.prepare(...)``.
    prepared: AbstractSet[str] = frozenset()
    #: Models that are moved to the device but not trained (no optimizer gets their parameters).
    frozen_models: AbstractSet[str] = frozenset()
    #: Optimizers over tensors the script makes, not a model's parameters (``SGD([delta])``): they
    #: optimise an input of a model it evaluates, so they train nothing and are not prepared.
    input_optimizers: AbstractSet[str] = frozenset()
    #: Names of tensors ``.backward()`` is called on (``loss``, ``errD_real``).
    loss_names: AbstractSet[str] = frozenset()
    #: Names bound by the loop targets of loops over loaders, plus names derived from them by
    #: subscripting (``batch["input_ids"]``): the data ``prepare`` already puts on the device.
    batch_names: AbstractSet[str] = frozenset()
    #: The same, per module-level function (``"<module>"`` for module-level code).
    batch_names_by_function: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    #: ``break`` sites whose condition depends on per-rank values (``if loss < 1e-3: break``).
    rank_dependent_breaks: Sequence[Site] = ()
    #: The ``if`` statements of such breaks that can be made to agree across processes (one
    #: comparison, no ``else``, the ``break`` ending its body: ``if loss < 1e-3: break``); their
    #: breaks are not in ``rank_dependent_breaks``.
    agreeable_breaks: Sequence[Site] = ()
    #: ``scheduler.step(train_loss)`` sites whose argument is this process's share of the training
    #: (a loss summed over its own batches): ``ReduceLROnPlateau`` would decide per process.
    rank_dependent_schedule_steps: Sequence[Site] = ()
    #: Attribute names the argument parser defines (``no_cuda`` for ``--no-cuda``, a ``dest=``).
    parser_options: AbstractSet[str] = frozenset()
    #: Names bound to what ``parse_args()`` / ``parse_known_args()`` return (``args``), directly
    #: or through a function of the file that returns it (``args = get_args()``).
    parsed_arguments: AbstractSet[str] = frozenset()
    #: Module-level functions and classes whose call downloads a data set (see
    #: ``model.locality.download_functions``): a hand-written download, a lambda that downloads
    #: called inside, a dataset wrapping ``MNIST(root, download=True)``, and their callers.
    download_functions: AbstractSet[str] = frozenset()
    #: Methods (``Class.method``) of classes that do not train whose call downloads (a lambda
    #: there that downloads, or a download where the accelerator does not go).
    downloading_methods: AbstractSet[str] = frozenset()
    #: Callees as written (``get_dataset``, ``data.Wrapped``, ``source.get``) whose call
    #: downloads, this module's and the program's: the statement calling one runs on the main
    #: process first (ACC115).
    download_calls: AbstractSet[str] = frozenset()
    #: Draws from a global generator (torch's, NumPy's, Python's ``random``) that no seeding
    #: call above them makes the same on every process, and that decide what the processes
    #: share (a learning rate, a split, a target, a file name): outside the loops that train, and
    #: outside methods other than ``__init__`` (a dataset's ``__getitem__`` augments per sample).
    shared_draws: Sequence[Site] = ()
    #: Original lines of those draws, and of the calls (outside the loops that train) of the
    #: functions and classes that make one: the accelerator is created above the first.
    shared_draw_lines: AbstractSet[int] = frozenset()
    #: Module-level functions and classes (through ``__init__``) making one, directly or
    #: through their calls.
    drawing_functions: AbstractSet[str] = frozenset()
    #: Module-level functions (and nested ones, by their path) that run a backward, directly or
    #: through their calls.
    backward_functions: AbstractSet[str] = frozenset()
    #: Functions of other program modules this module calls (absolute qualified names) → whether
    #: every such call is made evaluating (under ``no_grad``/``set_grad_enabled(False)`` or after
    #: the caller's ``model.eval()``): the program joins them into the callee's seeds.
    evaluating_calls_out: Mapping[str, bool] = field(default_factory=dict)
    #: Functions of other program modules this module calls (absolute qualified names) → whether
    #: every such call is made where each process does its own work (a dataset's ``__getitem__``,
    #: a loop that trains): the program joins them into the callee's seeds, and a draw such a
    #: function makes is per process on purpose (an augmentation), not shared.
    per_process_calls_out: Mapping[str, bool] = field(default_factory=dict)
    #: Functions and methods of the program's other modules (qualified) this module calls inside
    #: loops over a loader → whether every such call is in a loop that trains: told to the
    #: callee's module as the seeds' ``fed_from_elsewhere``.
    training_calls_out: Mapping[str, bool] = field(default_factory=dict)
    #: Every function and method of this module running a backward is a training step another
    #: module's training loop over a loader calls (``trainer.train_step(x, y)``): the batches come
    #: from that (prepared) loader.
    backward_fed_elsewhere: bool = False
    #: Where ``.backward()`` is called (a site, for the no-DataLoader report).
    backward_site: Site | None = None
    #: Whether the module's ``.backward()`` calls train something: False when nothing steps an
    #: optimizer or updates parameters (an adversarial attack, a saliency map: gradients for an
    #: input), so they stay plain backward calls and the loops running them evaluate.
    backward_trains: bool = True
    #: Whether the module trains on its own: it builds or receives an optimizer, builds a trained
    #: model, steps something (not an optimizer over an input) or updates parameters by hand;
    #: unlike ``backward_trains``, not because it is a library of a program (see
    #: ``ProgramSeeds.program_trains``).
    trains_here: bool = True
    #: Names of objects whose ``.backward(...)`` is a method of the file's own class, not a loss's
    #: (an L2 penalty adding to the gradients by hand, a ``torch.autograd.Function``): the class
    #: names and the names bound to their instances.
    backward_helpers: AbstractSet[str] = frozenset()
    #: Where the backward calls that train are (a loss's, in a module that steps something; not a
    #: helper object's own ``backward`` nor gradients for an input), as the loops owner decides.
    training_backward_sites: AbstractSet[Site] = frozenset()
    #: Qualified names of every call to something imported (``torch.nn.utils.clip_grad_norm_``),
    #: and the callee of every call written as a plain name (``print``): passes skip cheaply.
    called: AbstractSet[str] = frozenset()
    #: Where calls are, by callee: its qualified name (``torch.nn.utils.clip_grad_norm_``), its
    #: plain name (``print``, ``train``) or ``.method`` (``.backward``, ``.to``): passes use the
    #: lines to skip statements that hold nothing for them.
    call_sites: Mapping[str, Sequence[Site]] = field(default_factory=dict)
    #: Where each name (or dotted path) is assigned.
    assign_sites: Mapping[str, Sequence[Site]] = field(default_factory=dict)
    #: Every identifier (``scaler``, ``autocast``, the ``save`` of ``torch.save``) and every dotted
    #: path (``model.state_dict``, ``torch.save``) → original lines of statements that mention it
    #: (the first line of a multi-line statement): a pass that reacts only to some names walks only
    #: the statements holding them (``lines_mentioning``).
    word_lines: Mapping[str, Sequence[int]] = field(default_factory=dict)
    #: Name table of the module (qualified-name lookups per scope).
    names: NameTable | None = None
    #: What the other modules of a program tell this one (None: a script converted alone).
    program: ProgramSeeds | None = None
    #: The conversion plan (``codemods.model.plan.ConversionPlan``: where the accelerator is
    #: created, what is prepared where, where training starts), read with ``plan_of(facts)``;
    #: None in facts built by hand. Typed ``object`` here: the facts sit below the model.
    plan: object = None
    #: What changes while the rules run (kept up to date by ``codemods.convert_module``).
    context: RunContext = field(default_factory=RunContext)
    #: The facts one rule alone reads, by the provider the rule declares: read with :meth:`of`.
    rule_results: Mapping[str, object] = field(default_factory=dict)

    def of(self, provider: RuleResultKey[Result]) -> Result:
        """What ``provider`` (one of a rule's ``providers``) found in this script."""
        if provider.name not in self.rule_results:
            raise ValueError(f"these facts have no {provider.name}: build them with the analysis")
        return cast("Result", self.rule_results[provider.name])

    @property
    def origins(self) -> OriginIndex:
        return self.context.origins

    @property
    def changed_lines(self) -> AbstractSet[int]:
        """Original lines the rules run so far changed (the conversion loop adds to
        ``context.changed_lines`` after each rule)."""
        return self.context.changed_lines

    @property
    def name_table(self) -> NameTable:
        """The scoped name table: the analysis always builds one (facts built by hand may not)."""
        if self.names is None:
            raise ValueError("these facts have no name table: build them with the analysis")
        return self.names

    def original_site(self, node: cst.CSTNode) -> Site | None:
        """Original position of a statement or call of the tree a pass received (None for nodes
        an earlier pass created). Passes keep it valid by subclassing
        ``codemods.engine.transformers.RuleTransformer`` (or calling ``origins.carry``)."""
        return self.origins.site(node)

    @property
    def library_converted_alone(self) -> bool:
        """A module of training functions converted without the script that calls them: its
        callers build and prepare what it trains, so nothing here can hold the accelerator."""
        return self.home_kind == "library" and self.program is None

    def is_prepared(self, name: str) -> bool:
        """Whether the converted script holds ``name`` prepared: it was prepared already, or is a
        training class's attribute (prepared in the class or by its caller)."""
        return name in self.prepared or name in self.prepared_attributes

    def is_model(self, name: str) -> bool:
        return name in self.models


@record(eq=False, repr=False)
class FactsDraft(FactQuestions):
    """The facts while the analysis draws them (``Analysis.facts``): the fields of
    :class:`ScriptFacts`, in its order and documented there, with the sets, lists and dicts the
    providers fill (generated from ScriptFacts' declarations). :meth:`finish` ends the analysis."""

    # Generated from the fields of ScriptFacts, each made mutable (AbstractSet → set, Sequence → list,
    # Mapping → dict): a new fact is declared there only, then `python -m tests.codemods.test_facts`
    # writes it here (tests/codemods/test_facts.py checks these lines are up to date).
    imports: dict[str, str] = field(default_factory=dict)
    uses_torch: bool = False
    keeps_files_for_writing: bool = False
    creates_folders: bool = False
    file_logger_classes: set[str] = field(default_factory=set)
    file_loggers: set[str] = field(default_factory=set)
    loggers_built_in_calls: set[tuple[int, int]] = field(default_factory=set)
    handles_main_process_writes: set[tuple[int, int]] = field(default_factory=set)
    handles_left_on_every_rank: dict[tuple[int, int], str] = field(default_factory=dict)
    classes_opening_handles: set[str] = field(default_factory=set)
    handle_openers: dict[str, str] = field(default_factory=dict)
    main_process_openers_out: dict[str, bool] = field(default_factory=dict)
    existing_accelerator: str | None = None
    accelerator_name: str = "accelerator"
    models: set[str] = field(default_factory=set)
    optimizers: set[str] = field(default_factory=set)
    schedulers: set[str] = field(default_factory=set)
    per_epoch_schedulers: set[str] = field(default_factory=set)
    stepped_objects: set[str] = field(default_factory=set)
    train_loaders: set[str] = field(default_factory=set)
    eval_loaders: set[str] = field(default_factory=set)
    unprepared_loaders: set[str] = field(default_factory=set)
    loader_tuples: dict[str, int] = field(default_factory=dict)
    loader_tuple_parts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    loader_tuple_bindings: dict[str, dict[int, int]] = field(default_factory=dict)
    loader_dict_names: set[str] = field(default_factory=set)
    loader_tuple_factories: dict[str, int] = field(default_factory=dict)
    loader_positions: dict[str, tuple[tuple[int, ...] | None, tuple[int, ...]]] = field(default_factory=dict)
    loaders_unpacked_from_parameters: set[tuple[str, str]] = field(default_factory=set)
    names_picked_by_locals: dict[tuple[tuple[str, ...], str], set[str]] = field(default_factory=dict)
    device_names: set[str] = field(default_factory=set)
    cuda_flags: set[str] = field(default_factory=set)
    gpu_index_names: set[str] = field(default_factory=set)
    gpu_index_names_elsewhere: set[tuple[str, str]] = field(default_factory=set)
    device_names_elsewhere: set[tuple[tuple[str, ...], str]] = field(default_factory=set)
    gpu_index_values: set[str] = field(default_factory=set)
    module_gpu_indices: set[str] = field(default_factory=set)
    gpu_index_functions: set[str] = field(default_factory=set)
    gpu_index_method_calls: set[tuple[str, str]] = field(default_factory=set)
    devices_taken: set[tuple[str, str]] = field(default_factory=set)
    path_parameter_writes: set[tuple[str, int, str]] = field(default_factory=set)
    path_parameter_reads: set[tuple[str, int, str]] = field(default_factory=set)
    per_batch_file_parameters: set[tuple[str, int, str]] = field(default_factory=set)
    loaders_left_unsharded: set[str] = field(default_factory=set)
    joined_rows_factories: dict[str, frozenset[int]] = field(default_factory=dict)
    joined_rows_loops: dict[int, frozenset[int]] = field(default_factory=dict)
    unsharded_loops: set[int] = field(default_factory=set)
    unsharded_batches_moved: set[int] = field(default_factory=set)
    devices_unfollowed: set[str] = field(default_factory=set)
    batch_size_expr: str | None = None
    main_function: str | None = None
    train_loops: list[LoopFacts] = field(default_factory=list)
    loader_comprehensions: list[tuple[str, Site]] = field(default_factory=list)
    inline_loaders: list[Site] = field(default_factory=list)
    eval_loops: list[LoopFacts] = field(default_factory=list)
    existing_features: set[str] = field(default_factory=set)
    creating_function: str | None = None
    training_functions: set[str] = field(default_factory=set)
    unprepared_received_models: list[tuple[str, str, Site]] = field(default_factory=list)
    models_prepared_where_built: set[str] = field(default_factory=set)
    home_kind: Literal["function", "main_guard", "module", "library"] = "module"
    accessible_functions: set[str] = field(default_factory=set)
    optional_accelerator_functions: set[str] = field(default_factory=set)
    per_process_paths: set[str] = field(default_factory=set)
    trackers: set[str] = field(default_factory=set)
    self_training_models: set[str] = field(default_factory=set)
    model_classes: set[str] = field(default_factory=set)
    dataset_classes: set[str] = field(default_factory=set)
    bundle_classes: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    model_factories: set[str] = field(default_factory=set)
    optimizer_methods: set[str] = field(default_factory=set)
    model_parts: set[str] = field(default_factory=set)
    evaluating_methods: set[str] = field(default_factory=set)
    loader_classes: set[str] = field(default_factory=set)
    training_classes: set[str] = field(default_factory=set)
    training_bases: set[str] = field(default_factory=set)
    prepared_attributes: set[str] = field(default_factory=set)
    class_prepare: dict[str, tuple[str, ...]] = field(default_factory=dict)
    call_graph: dict[str, set[str]] = field(default_factory=dict)
    nested_functions: set[str] = field(default_factory=set)
    loader_returning_functions: set[str] = field(default_factory=set)
    training_method_lines: set[int] = field(default_factory=set)
    functions_called_out_of_sight: Callable[[], frozenset[str]] = lambda: frozenset()
    prepared: set[str] = field(default_factory=set)
    frozen_models: set[str] = field(default_factory=set)
    input_optimizers: set[str] = field(default_factory=set)
    loss_names: set[str] = field(default_factory=set)
    batch_names: set[str] = field(default_factory=set)
    batch_names_by_function: dict[str, set[str]] = field(default_factory=dict)
    rank_dependent_breaks: list[Site] = field(default_factory=list)
    agreeable_breaks: list[Site] = field(default_factory=list)
    rank_dependent_schedule_steps: list[Site] = field(default_factory=list)
    parser_options: set[str] = field(default_factory=set)
    parsed_arguments: set[str] = field(default_factory=set)
    download_functions: set[str] = field(default_factory=set)
    downloading_methods: set[str] = field(default_factory=set)
    download_calls: set[str] = field(default_factory=set)
    shared_draws: list[Site] = field(default_factory=list)
    shared_draw_lines: set[int] = field(default_factory=set)
    drawing_functions: set[str] = field(default_factory=set)
    backward_functions: set[str] = field(default_factory=set)
    evaluating_calls_out: dict[str, bool] = field(default_factory=dict)
    per_process_calls_out: dict[str, bool] = field(default_factory=dict)
    training_calls_out: dict[str, bool] = field(default_factory=dict)
    backward_fed_elsewhere: bool = False
    backward_site: Site | None = None
    backward_trains: bool = True
    trains_here: bool = True
    backward_helpers: set[str] = field(default_factory=set)
    training_backward_sites: set[Site] = field(default_factory=set)
    called: set[str] = field(default_factory=set)
    call_sites: dict[str, list[Site]] = field(default_factory=dict)
    assign_sites: dict[str, list[Site]] = field(default_factory=dict)
    word_lines: dict[str, list[int]] = field(default_factory=dict)
    names: NameTable | None = None
    program: ProgramSeeds | None = None
    plan: object = None
    context: RunContext = field(default_factory=RunContext)
    rule_results: dict[str, object] = field(default_factory=dict)
    # End of the generated fields.

    def finish(self) -> ScriptFacts:
        """The end of the analysis: the facts drawn, read-only. Every set, list and dict a field
        holds (and holds in turn) becomes a frozenset, a tuple or a read-only mapping; the run
        context, which the conversion loop writes while the rules run, is handed on as it is."""
        drawn: dict[str, Any] = {name: _frozen(getattr(self, name)) for name in _FIELDS}
        return ScriptFacts(**drawn)


#: The fields, in order: the draft's are the facts' (``tests/codemods/test_facts.py`` checks).
_FIELDS = tuple(each.name for each in fields(FactsDraft))


def _frozen(value: object) -> object:
    """``value`` made immutable: a set, a list, a dict (and the dicts, sets and lists it maps to).
    The lists of facts hold immutable things (sites, names, frozen loop facts)."""
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    return value
