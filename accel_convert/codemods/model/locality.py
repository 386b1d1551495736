"""Process locality, the one owner: which values differ between processes and which statements
only some processes reach.

Every rule and check asks this module instead of deciding locality itself:

* :class:`Locality`, the typed answer for a module (``facts.of(locality)``): per-process values
  (paths only this process has, sums of this process's batches grown in training), the ``if``
  statements guarded by a rank (``if accelerator.is_main_process:``, ``if rank == 0:``), the
  ``break`` statements and ``scheduler.step(value)`` calls such values decide, draws each process
  makes for itself, and the losses that average over this process's batch; the sums by the
  function binding them (:attr:`Locality.per_rank_sums`, :meth:`Locality.summed_per_rank`), which
  :class:`RankReach` reads too, and the per-batch means of a loop (:meth:`Locality.per_batch_means`);
* :class:`RankReach`, asked by the rule transformer (``every_rank_reaches_here``) while it walks:
  whether every process runs the statement being visited the same number of times, so a
  collective may go there (an ``if`` on a value :func:`per_rank_bindings` cannot show to be the
  same on every rank counts as taken by some ranks only);
* the syntax questions both ask: :func:`names_rank` (a test reading a rank), :func:`mentions_rank`
  (the printing rule's looser reading), :func:`tests_main_process` (the accelerator's
  main-process guard), :func:`batch_mean_reduced` (a loss averaged over the batch),
  :func:`is_batch_mean_loss`, :func:`sums_per_rank`, :func:`adds_up` (a running sum, ``+=``),
  :func:`counted_by_one`, :func:`collects` and :func:`collected_into` (what a list or meter of
  batch values grows from);
* downloads: what the main process must run first (:func:`statement_downloads`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.devices import constructed, construction
from accel_convert.codemods.engine.facts import MODULE, FactsDraft, ScriptFacts, callers_closure
from accel_convert.codemods.engine.imported_calls import builds_model_of_program_class, program_callee
from accel_convert.codemods.engine.iteration import enumerate_index, iterated_name
from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.names import BuiltinOf, ScopeKey
from accel_convert.codemods.engine.positions import POSITIONED_TYPES
from accel_convert.codemods.engine.random_draws import is_global_draw, seeds_generator_of
from accel_convert.codemods.engine.syntax import (
    calls_in,
    class_methods,
    dotted,
    names_in,
    nodes_in,
    parameter_filled,
    parameter_names,
    rows_counted,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    CHECKPOINT_READS,
    CHECKPOINT_WRITES,
    COLLECTING_METHODS,
    COLLECTIVE_ACCELERATOR_METHODS,
    DECIDED_PER_PROCESS,
    ENDLESS_COUNTERS,
    FOLDER_FUNCTIONS,
    LIBRARY_OS_ERRORS,
    LIST_GROWING_METHODS,
    MEAN_LOSSES,
    NETWORK_FETCHES,
    PATH_CONSTRUCTORS,
    PER_PROCESS_PATHS,
    PROGRESS_BARS,
    RANDOM_SPLITS,
    STATE_LOADING_METHODS,
    TRACKER_CONSTRUCTORS,
    WRITING_FUNCTIONS,
    initialises_at_random,
    is_loss_function,
    is_loss_module,
)
from accel_convert.codemods.engine.walk import child_nodes
from accel_convert.codemods.model.calls import constructor_method, instance_class, program_instance_class
from accel_convert.codemods.model.provider import provider, rule_provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
    AugAssignRecord,
    CallRecord,
    IfRecord,
    LoopRecord,
)
from accel_convert.codemods.model.state import Analysis, PerRankLoop
from accel_convert.records import record


def _agreeable_break(node: cst.Break, branch: cst.If) -> bool:
    """``if loss < 1e-3: ...; break``: a plain ``if`` (no ``elif``/``else``) whose test is one
    comparison and whose own body (not a nested block) ends in the ``break``. Its ranks can be
    made to agree without changing what one process does: the test raises a trigger, and the body
    runs under ``check_trigger()``, which is the test's own answer on one process."""
    test = branch.test
    if branch.orelse is not None or not isinstance(test, cst.Comparison):
        return False
    body = branch.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    last = body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(small is node for small in last.body)


@provider(provides=("per_process_paths",))
def per_process_paths(a: Analysis) -> None:
    """Names bound to a folder or file only this process has (``tempfile.mkdtemp()``), and
    names built from them (``os.path.join(workdir, "last.pt")``)."""
    found = a.facts.per_process_paths
    # ``with tempfile.TemporaryDirectory() as workdir:`` first: paths are built from it.
    for item in a.r.with_items:
        call = item.item
        if isinstance(call, cst.Call) and a.r.names.qualified_name(call.func) in PER_PROCESS_PATHS:
            if item.asname is not None:
                found.update(target_names(item.asname.name))
    # What each assignment builds does not change from round to round: asked once.
    judged: list[tuple[AssignRecord, bool, bool]] = []
    for assign in a.r.assigns:
        value = assign.value
        builds_path = isinstance(value, (cst.BinaryOperation, cst.FormattedString)) or (
            isinstance(value, cst.Call) and a.r.names.qualified_name(value.func, assign.scope) in PATH_CONSTRUCTORS
        )
        # ``tempfile.mkdtemp()`` itself, or a path built around one
        # (``os.path.join(tempfile.mkdtemp(), "vocab.json")``).
        creates = any(
            type(node) is cst.Call and a.r.names.qualified_name(node.func, assign.scope) in PER_PROCESS_PATHS
            for node in ([value] if not builds_path else nodes_in(value))
        )
        if creates or builds_path:
            judged.append((assign, builds_path, creates))
    for _ in range(3):  # a path built from a path built from the folder, or handed on
        for assign, builds_path, creates in judged:
            if creates or (builds_path and assign.names & found):
                found.update(assign.targets)
        found.update(_parameters_given(a, found))


#: Calls a path goes into: a file opened, a folder made, a checkpoint saved or loaded, a file
#: written, a tracker's log folder.
_PATH_USES = (
    FOLDER_FUNCTIONS | WRITING_FUNCTIONS | TRACKER_CONSTRUCTORS | set(CHECKPOINT_WRITES) | set(CHECKPOINT_READS)
)


def paths_decided_per_process(a: Analysis) -> Mapping[int, tuple[str, ...]]:
    """Statements binding what each process decides for itself from which the program builds a
    path it uses (opens, makes, saves to, loads from, or returns as a path):

    * an assignment of a :data:`DECIDED_PER_PROCESS` call: ``stamp = datetime.now().strftime(...)``
      then ``run_dir = os.path.join("runs", stamp)`` and ``torch.save(..., os.path.join(run_dir,
      "best.pt"))``; ``self.runs = sorted(glob.glob("run/experiment_*"))``, numbered from, while
      the main process makes the next folder;
    * a ``while`` counting past the folders there (``while os.path.exists(f"runs/exp{n}"): n +=
      1``, YOLO's ``increment_path``), another process counting one further once the main process
      made the folder.

    Each process would name a folder of its own, and one then reads a file only another wrote, in
    a folder of its own name. The processes take rank 0's value right after such a statement
    (ACC128): the statements' first lines → the names to agree. Locals follow within their
    function, module-level names and attributes (``self.experiment_dir``) anywhere in the module. Not in a dataset's methods (run in loader
    workers, as often as each process's batches ask) nor in a file logger's, which the conversion
    builds on the main process alone: no collective can go there."""
    sources = _decision_sources(a)
    if not sources:
        return MappingProxyType({})
    used = _names_in_path_uses(a)
    used_anywhere = {name for name, _ in used}
    # What each assignment and return reads, asked once for every source.
    reads = [(assign, _dotted_reads(assign.value)) for assign in a.r.assigns]
    returns = [(function, _dotted_reads(value)) for function, value in a.r.returns if _builds_path(value, a)]
    found: dict[int, tuple[str, ...]] = {}
    for node, function, targets in sources:
        # A module-level name is a global every function may read.
        everywhere = function == MODULE
        derived = _derived_names(set(targets), reads, function, everywhere)
        returned = any(
            returning == function and _reads_derived(read, derived, same_function=True) for returning, read in returns
        )
        if returned or any(
            (name, function) in used or (("." in name or everywhere) and name in used_anywhere) for name in derived
        ):
            found[a.site(node).line] = tuple(dict.fromkeys(targets))
    return MappingProxyType(found)


def _decision_sources(a: Analysis) -> list[tuple[cst.CSTNode, str, tuple[str, ...]]]:
    """The statements deciding a value per process (see :func:`paths_decided_per_process`), each
    with its function and the names it binds."""
    apart = a.facts.dataset_classes | a.facts.file_logger_classes
    sources: list[tuple[cst.CSTNode, str, tuple[str, ...]]] = [
        (assign.node, assign.function, assign.targets)
        for assign in a.r.assigns
        if not (assign.scope and assign.scope[0] in apart)
        and any(
            a.r.names.qualified_name(call.func, assign.scope) in DECIDED_PER_PROCESS for call in calls_in(assign.value)
        )
    ]
    return sources + [source for source in _counted_past_folders(a) if source[1] not in apart]


def _derived_names(
    names: set[str], reads: Sequence[tuple[AssignRecord, frozenset[str]]], function: str, everywhere: bool
) -> set[str]:
    """``names`` and the names assigned from them, transitively (a name built from a name built
    from the stamp), within ``function`` unless ``everywhere``; attribute paths anywhere."""
    for _ in range(4):
        names |= {
            target
            for assign, read in reads
            if _reads_derived(read, names, same_function=everywhere or assign.function == function)
            for target in assign.targets
        }
    return names


#: Tests of whether a path is there: a loop counting while they hold counts past the folders.
_PATH_TESTS = frozenset({"os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.lexists"})


def _counted_past_folders(a: Analysis) -> list[tuple[cst.CSTNode, str, tuple[str, ...]]]:
    """``while os.path.exists(f"{path}{n}"): n += 1``: each such loop, its function (keyed as
    :attr:`AssignRecord.function`) and the names its body counts or binds."""
    words = a.facts.word_lines
    if a.module is None or not any(test.rpartition(".")[2] in words for test in _PATH_TESTS):
        return []  # no such test written: no walk of the module
    found: list[tuple[cst.CSTNode, str, tuple[str, ...]]] = []
    for statement in a.module.body:
        function = MODULE
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            function = statement.name.value
        for node in nodes_in(statement):
            if type(node) is not cst.While:
                continue
            scope = (function,) if function != MODULE else ()
            tests = calls_in(node.test)
            if not any(a.r.names.qualified_name(call.func, scope, strict=False) in _PATH_TESTS for call in tests):
                continue
            counted = tuple(
                name
                for inner in nodes_in(node.body)
                if isinstance(inner, cst.AugAssign | cst.Assign)
                for target in (
                    [inner.target] if isinstance(inner, cst.AugAssign) else [t.target for t in inner.targets]
                )
                for name in target_names(target)
            )
            if counted:
                found.append((node, function, counted))
    return found


def _builds_path(value: cst.BaseExpression, a: Analysis) -> bool:
    """A path built in place: an f-string, ``+`` or ``%`` of parts, or a path constructor's call."""
    if isinstance(value, cst.FormattedString | cst.BinaryOperation):
        return True
    return isinstance(value, cst.Call) and a.r.names.qualified_name(value.func, strict=False) in PATH_CONSTRUCTORS


def _dotted_reads(value: cst.BaseExpression) -> frozenset[str]:
    """The names and attribute paths (``self.run_dir``, ``self``) an expression reads."""
    return frozenset(
        read
        for node in nodes_in(value)
        if type(node) in (cst.Name, cst.Attribute) and (read := dotted(node)) is not None
    )


def _reads_derived(reads: AbstractSet[str], names: AbstractSet[str], *, same_function: bool) -> bool:
    """Whether ``reads`` (:func:`_dotted_reads`) hold one of ``names``: a local only in its own
    function (``same_function``), an attribute path anywhere."""
    return any(read in names and (same_function or "." in read) for read in reads)


def _names_in_path_uses(a: Analysis) -> set[tuple[str, str]]:
    """(name, function) of every name or attribute path read in the arguments of a call a path
    goes into (:data:`_PATH_USES`, the builtin ``open``)."""
    used: set[tuple[str, str]] = set()
    for call in a.r.calls:
        func = call.node.func
        if a.qualified(call) not in _PATH_USES and a.r.names.builtin(func, call.scope) != "open":
            continue
        for arg in call.node.args:
            used.update((read, call.function) for read in _dotted_reads(arg.value))
    return used


def _parameters_given(a: Analysis, paths: set[str]) -> set[str]:
    """Parameters of module-level functions that every call of the function fills with one
    of ``paths`` (``build_vocab(texts, workdir)`` with ``workdir = tempfile.mkdtemp()``): in
    the function they name this process's folder too."""
    calls: dict[str, list[CallRecord]] = {}
    for call in a.r.calls:
        func = call.node.func
        if type(func) is cst.Name and func.value in a.r.defs:
            calls.setdefault(func.value, []).append(call)
    given: set[str] = set()
    for function, sites in calls.items():
        params = a.r.defs[function]
        for param in params:
            filled = [
                arg.value
                for call in sites
                for index, arg in enumerate(call.node.args)
                if not arg.star and parameter_filled(arg, index, params) == param
            ]
            if len(filled) == len(sites) and all(dotted(value) in paths for value in filled):
                given.add(param)
    return given


def holds_work_of_every_rank(node: cst.CSTNode, facts: ScriptFacts) -> bool:
    """Whether ``node`` holds code the processes run together, so that it cannot run on the main
    process alone (the others would wait for it at their next collective, or it for them): a loop
    over a loader (prepared, each process reads its share), a model's forward (a prepared one
    synchronises; a training step has one), a collective method of the accelerator (``gather_for_metrics``,
    ``wait_for_everyone``), a call of a function of the script that loops over a loader or runs a
    backward, or a call (not of a builtin) handed a model or a loader (another module's
    ``validation(model, criterion, valid_loader)``)."""
    accelerator = facts.existing_accelerator or facts.accelerator_name
    working = locality_of(facts).working_functions
    handed = facts.models | facts.loaders
    for inner in nodes_in(node):
        if type(inner) is cst.For and iterated_name(inner.iter, through_any_call=True) in facts.loaders:
            return True
        if type(inner) is not cst.Call:
            continue
        func = inner.func
        if dotted(func) in facts.models or (isinstance(func, cst.Name) and func.value in working):
            return True
        if isinstance(func, cst.Attribute) and (dotted(func.value) or "").rpartition(".")[2] == accelerator:
            if func.attr.value in COLLECTIVE_ACCELERATOR_METHODS:
                return True
            continue
        if facts.builtin(func) is None and any(dotted(arg.value) in handed for arg in inner.args):
            return True  # ``validation(model, criterion, valid_loader)`` of another module
    return False


def _working_functions(facts: FactsDraft | ScriptFacts) -> frozenset[str]:
    """See :attr:`Locality.working_functions`."""
    looping = {loop.function for loop in (*facts.train_loops, *facts.eval_loops)} | set(facts.backward_functions)
    return frozenset(callers_closure(looping - {MODULE}, facts.call_graph))


def statement_downloads(statement: cst.BaseStatement, facts: ScriptFacts, accelerator: str | None = None) -> bool:
    """A statement calling something with ``download=`` anything but ``False``, or a function of
    the script that fetches files over the network (``root = download_dataset()``): the main
    process must run it first (ACC115), so the accelerator is created above it (ACC101). A
    compound statement is not one (the downloads in its blocks are judged one by one), except a
    ``try`` whose body downloads and that holds nothing else the processes must run together
    (:func:`_try_downloads_alone`): the whole ``try`` runs on the main process first, its handlers
    included, so an error each process meets is handled on each as the original handles it (the
    body alone under the barrier would send a failing main process past it into the handler)."""
    if isinstance(statement, cst.Try):
        return _try_downloads_alone(statement, facts, accelerator)
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    pending: list[cst.CSTNode] = list(statement.body)
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Call) and callee_spelling(node.func) in facts.download_calls:
            return True
        if _download_call(node):
            return True
        if not isinstance(node, cst.Lambda):  # a lambda downloads where it is called, not here
            pending.extend(node.children)
    return False


def _download_call(node: cst.CSTNode) -> bool:
    """A call with ``download=`` anything but ``False`` (``datasets.MNIST(root, download=True)``)."""
    return isinstance(node, cst.Call) and any(
        arg.keyword is not None
        and arg.keyword.value == "download"
        and not (isinstance(arg.value, cst.Name) and arg.value.value == "False")
        for arg in node.args
    )


def _try_downloads_alone(node: cst.Try, facts: ScriptFacts, accelerator: str | None) -> bool:
    """Whether a ``try`` downloads in its body (``try: ds = MNIST(root, download=True)`` /
    ``except OSError: ...``) and may run on one process while the others wait: none of its
    blocks loops, defines something, or calls a function of the script's other than its
    downloads, a class it trains with (either may train, or wait for the others), a model (a
    prepared one's forward synchronises its buffers) or a method of the accelerator
    (``accelerator``: its name where the walk is) other than ``print``."""
    suite = node.body
    body: Sequence[cst.BaseStatement] = ()
    if isinstance(suite, cst.IndentedBlock):
        body = suite.body
    elif isinstance(suite, cst.SimpleStatementSuite):
        body = [cst.SimpleStatementLine(suite.body)]
    if not any(statement_downloads(inner, facts, accelerator) for inner in body):
        return False
    called = {callee for callees in facts.call_graph.values() for callee in callees}
    others = (called | set(facts.call_graph) | set(facts.training_classes) | set(facts.models)) - set(
        facts.download_functions
    )
    for inner in nodes_in(node):
        if isinstance(inner, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if not isinstance(inner, cst.Call):
            continue
        if isinstance(inner.func, cst.Name) and inner.func.value in others:
            return False
        func = inner.func
        if (
            accelerator is not None
            and isinstance(func, cst.Attribute)
            and func.attr.value != "print"
            and accelerator in {dotted(func.value), (dotted(func.value) or "").rpartition(".")[2]}
        ):
            return False
    return True


@provider(
    needs=("call_graph", "home_kind", "main_function", "creating_function", "training_classes"),
    provides=("download_functions", "downloading_methods", "download_calls"),
)
def download_functions(a: Analysis) -> None:
    """What downloads a data set when called, where no barrier can go inside: a function fetching
    files over the network (a hand-written download) or calling a lambda that downloads
    (``{"mnist": lambda: MNIST(root, download=True)}[name]()``); a method of a class that does
    not train (the accelerator does not go there) that downloads, itself or through its other
    methods; a class whose ``__init__`` is one (a dataset wrapping ``MNIST(root,
    download=True)``); what calls one of them, here or in another module of the program; and,
    as written at their calls, the program's others (``download_calls``). The statement calling
    one runs on the main process first (ACC115)."""
    defs = set(a.r.defs)
    imported = a.seeds.download_callables if a.seeds is not None else frozenset()
    body = a.module.body if a.module is not None else ()
    lambdas = {node.name.value for node in body if isinstance(node, cst.FunctionDef) and _lambda_downloads(node)}
    known = _Downloaders(imported)
    while True:
        calling = [call for call in a.r.calls if known.downloads(a, call)]
        methods = _downloading_methods(a, calling)
        classes = {method.partition(".")[0] for method in methods if method.endswith(".__init__")}
        # A function's own ``download=True`` goes under the barrier where it stands (the
        # downloads rule, where the accelerator reaches it): that alone makes no download function.
        starts = {call.function for call in calling if not _download_call(call.node)} | lambdas
        functions = callers_closure(starts & defs, a.facts.call_graph, among=defs)
        # The home block's function runs the download under the barrier itself.
        functions -= {a.facts.home_function, a.facts.creating_function or ""}
        if (functions, classes, methods) == (known.functions, known.classes, known.methods):
            break
        known.functions, known.classes, known.methods = functions, classes, methods
    a.facts.download_functions = functions | classes
    a.facts.downloading_methods = methods
    spelled = {callee_spelling(call.node.func) for call in calling if known.called(a, call)}
    a.facts.download_calls = {name for name in spelled if name is not None} | a.facts.download_functions


def callee_spelling(func: cst.BaseExpression) -> str | None:
    """How a call's callee is written, as ``download_calls`` holds it: ``get_dataset``,
    ``data.Wrapped``, ``source.get``, ``Source().get`` for a method of a fresh instance."""
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
        built = dotted(func.value.func)
        return None if built is None else f"{built}().{func.attr.value}"
    return dotted(func)


@dataclass
class _Downloaders:
    """What is known to download so far (``download_functions`` grows it to a fixed point)."""

    imported: AbstractSet[str]
    functions: set[str] = field(default_factory=set)
    classes: set[str] = field(default_factory=set)
    methods: set[str] = field(default_factory=set)

    def downloads(self, a: Analysis, call: CallRecord) -> bool:
        """Whether ``call`` downloads: ``download=True``, a fetch over the network, or a call of
        a function, class or method known to download."""
        return _download_call(call.node) or a.qualified(call) in NETWORK_FETCHES or self.called(a, call)

    def called(self, a: Analysis, call: CallRecord) -> bool:
        """Whether ``call`` runs a function, class or method known to download."""
        callee = _callee(a, call)
        if callee is not None and callee in self.functions | self.classes | self.imported:
            return True
        func = call.node.func
        if not isinstance(func, cst.Attribute):
            return False
        own = instance_class(a, call, func.value)
        if own is not None:
            return f"{own}.{func.attr.value}" in self.methods
        built = program_instance_class(a, call, func.value)
        return built is not None and f"{built}.{func.attr.value}" in self.imported


def _lambda_downloads(function: cst.FunctionDef) -> bool:
    """Whether a lambda in ``function`` downloads (when the function calls it)."""
    return any(
        isinstance(node, cst.Lambda) and any(_download_call(inner) for inner in nodes_in(node))
        for node in nodes_in(function.body)
    )


def _downloading_methods(a: Analysis, calling: Sequence[CallRecord]) -> set[str]:
    """Methods (``Class.method``) of classes that do not train making one of the ``calling``
    calls, or calling such a method on their instance (``self.download()``)."""
    found = {
        f"{call.function}.{call.scope[1]}"
        for call in calling
        if len(call.scope) >= 2 and call.function in a.r.classes and call.function not in a.facts.training_classes
    }
    grown = True
    while grown:
        grown = False
        for name, held in a.r.classes.items():
            for method, called in held.method_calls.items():
                key = f"{name}.{method}"
                if key not in found and any(f"{name}.{other}" in found for other in called):
                    found.add(key)
                    grown = True
    return found


@provider(
    needs=(
        "loss_names",
        "batch_names",
        "models",
        "frozen_models",
        "eval_loops",
        "schedulers",
        "accessible_functions",
        "backward_functions",
        "loop_backward",
        "loop_calls",
        "existing_accelerator",
        "unsharded_loops",
    ),
    provides=("rank_dependent_breaks", "agreeable_breaks", "rank_dependent_schedule_steps", "per_process_sums"),
)
def breaks(a: Analysis) -> None:
    """``break`` statements (and ``scheduler.step(value)`` calls) decided by values that differ
    between processes: the batch loss, what is computed from it, this process's sums."""
    facts = a.facts
    tainted = set(facts.loss_names) | facts.batch_names
    model_calls = facts.models
    changed = True
    while changed:
        changed = False
        for assign in a.r.assigns:
            if set(assign.targets) <= tainted:
                continue
            if assign.names & tainted or assign.mentions.calls & model_calls:
                tainted.update(assign.targets)
                changed = True
    a.per_process_sums = _per_process_sums(a, tainted)
    sums: set[str] = set().union(*a.per_process_sums.values())
    tainted |= sums
    _schedule_steps_on(a, sums | facts.loss_names)
    for node, loops, ifs, function in a.r.breaks:
        if not loops or function not in facts.accessible_functions:
            continue
        innermost = loops[-1]
        if not (innermost.has_backward or innermost.calls & a.facts.backward_functions):
            # The loop it leaves holds no gradient all-reduce (an episode of an RL loop): a
            # rank leaving it early only waits at the next one, where all ranks meet.
            continue
        conditions = [branch for branch in ifs if branch.loop is innermost]
        deciding = [branch for branch in conditions if branch.test.names & tainted or ".item" in branch.test.calls]
        if not deciding:
            continue
        if deciding == conditions[-1:] and _agreeable_break(node, deciding[0].node):
            facts.agreeable_breaks.append(a.site(deciding[0].node))
        else:
            facts.rank_dependent_breaks.append(a.site(node))


def _schedule_steps_on(a: Analysis, sums: set[str]) -> None:
    """``scheduler.step(train_loss)`` with one of this process's sums (or ``scheduler.step(loss)``
    with its batch loss): each process would cut its learning rate at its own epoch
    (ReduceLROnPlateau), and DDP keeps only the gradients in step, so the weights drift apart."""
    if not sums:
        return
    for call in a.r.calls:
        func = call.node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "step" and call.node.args):
            continue
        if dotted(func.value) in a.facts.schedulers and any(names_in(arg.value) & sums for arg in call.node.args):
            a.facts.rank_dependent_schedule_steps.append(a.site(call.node))


def _per_process_sums(a: Analysis, tainted: set[str]) -> dict[str, set[str]]:
    """Names that hold this process's share of the training: a sum grown in a loop that runs
    the backward (``train_loss += loss.item() * n``), what is computed from it (``train_loss /=
    len(dataset)``, returned by the function that trains an epoch), and what is decided by it
    (``bad_epochs += 1`` under ``if train_loss >= best``), including an object fed it
    (``stopper(train_loss)``, then ``if stopper.early_stop: break``). Early stopping on such a
    value leaves the loop on one process first; the others wait in their next all-reduce.
    Evaluation sums are not among them: their gathered outputs agree on every process; unless
    nothing gathers them (:func:`_sums_grown_ungathered`: faster-rcnn's ``eval()``, whose model
    runs inside its ``predict``, returns this process's mAP, and ``if eval_result['map'] >
    best_map:`` is taken on some ranks only). By the function binding them (an evaluation's
    ``total`` is no training function's ``total``)."""
    sums = _sums_grown_in_training(a, tainted)
    for function, names in _sums_grown_ungathered(a).items():
        sums.setdefault(function, set()).update(names)
    if sums:
        _spread_from(a, sums)
    return sums


def _sums_grown_in_training(a: Analysis, tainted: set[str]) -> dict[str, set[str]]:
    """What a loop running the backward grows from per-rank values: ``total += loss.item()``,
    ``losses.append(loss.item())`` (then ``np.mean(losses)``), ``meter.update(loss.item(), n)``:
    a sum, list or meter of this process's batch losses, by function."""
    sums: dict[str, set[str]] = {}
    for aug in a.r.aug_assigns:
        if aug.loops and aug.loops[-1].has_backward and aug.mentions.names & tainted:
            sums.setdefault(aug.function, set()).update(aug.targets)
    for call in a.r.calls:
        if (
            call.loops
            and call.loops[-1].has_backward
            and (receiver := collected_into(call.node, tainted)) is not None
            and (owner := dotted(receiver)) is not None
        ):
            sums.setdefault(call.function, set()).add(owner)
    return sums


def _sums_grown_ungathered(a: Analysis) -> dict[str, set[str]]:
    """What an evaluation loop over a loader grows (``total += ...``, ``preds.append(...)``,
    ``pred_bboxes += pred_bboxes_``) where no known model is called in it (``model(x)``) and
    nothing gathers (``accelerator.gather_for_metrics``, in a script converted already): its
    forward runs out of sight (``faster_rcnn.predict(imgs, sizes)``, a model handed to a helper,
    models from a list), so nothing gathers what it counts (the metrics rule reports it:
    ACC944, ACC945) and each process holds its own shard's. By function. A loop over every batch
    on every process (``unsharded_loops``, :func:`deciding_evaluations`) grows the same on all."""
    unsharded = a.facts.unsharded_loops
    return _grown_in(a, [loop for loop in _ungathered_loops(a) if a.site(loop.node).line not in unsharded])


def _ungathered_loops(a: Analysis) -> list[LoopRecord]:
    """The evaluation loops over a loader in which no known model is called and nothing gathers
    (see :func:`_sums_grown_ungathered`)."""
    facts = a.facts
    evaluations = {record.site for record in facts.eval_loops}
    models = facts.models | facts.frozen_models
    # A loop calling a known model (the metrics rule gathers its outputs), or gathering already.
    gathered = {
        id(loop)
        for call in a.r.calls
        if dotted(call.node.func) in models
        or (isinstance(call.node.func, cst.Attribute) and call.node.func.attr.value in AGREEING_CALLS)
        for loop in call.loops
    }
    return [loop for loop in a.r.loops if a.site(loop.node) in evaluations and id(loop) not in gathered]


def _grown_in(a: Analysis, loops: Sequence[LoopRecord]) -> dict[str, set[str]]:
    """What ``loops`` grow (a sum, a list), by function."""
    ids = {id(loop) for loop in loops}
    sums: dict[str, set[str]] = {}
    if not ids:
        return sums
    for aug in a.r.aug_assigns:
        if any(id(loop) in ids for loop in aug.loops):
            sums.setdefault(aug.function, set()).update(aug.targets)
    for call in a.r.calls:
        func = call.node.func
        if (
            any(id(loop) in ids for loop in call.loops)
            and isinstance(func, cst.Attribute)
            and func.attr.value in LIST_GROWING_METHODS
            and (owner := dotted(func.value)) is not None
        ):
            sums.setdefault(call.function, set()).add(owner)
    return sums


@provider(
    needs=(
        "eval_loops",
        "eval_loaders",
        "train_loaders",
        "loader_loops",
        "loader_factories",
        "loader_classes",
        "arguments",
        "models",
        "frozen_models",
        "existing_accelerator",
        "unsharded_loops",
    ),
    refines=("unsharded_loaders", "eval_loaders", "loaders_left_unsharded", "unsharded_loops"),
)
def deciding_evaluations(a: Analysis) -> None:
    """An evaluation whose outputs cannot be gathered (:func:`_ungathered_loops`: faster-rcnn's
    ``eval()``, its model running inside ``faster_rcnn.predict``, variable-size detections per
    image scored once at the end) and whose result decides work the processes share runs over
    every batch on every process: its loader, built in this module and iterated by no training
    loop, stays unprepared (``unsharded_loaders``, no longer an evaluation loader to prepare;
    ``loaders_left_unsharded`` for the functions of other modules it is handed to), and the loop
    is one of the ``unsharded_loops`` (nothing gathered, nothing reported there). Every process
    then computes the whole set's result, the one the original computes, and takes the same
    branches with it.

    Its result decides shared work where what the loop grows, or anything computed from it or
    decided by it (:func:`_spread_from`: ``eval_result = eval(...)``, ``best_map``, the path
    ``trainer.save(best_map=best_map)`` returns), is read by the test of an ``if`` whose body
    calls anything but ``print`` (``if eval_result['map'] > best_map: best_path =
    trainer.save(...)``: a save on the main process, a collective, a path the others read), or
    names a file a process reads (``torch.load(best_path)``, ``open(path)``). Sharded, each
    process would take that branch on its own shard's result, or name a file only it computed:
    rank 0 saves ``fasterrcnn_TIME_0.714`` and rank 1 loads ``fasterrcnn_TIME_0.702``, which
    does not exist. An evaluation whose result is only printed stays sharded and reported
    (ACC944). The price is the evaluation's speed-up, for that loop only."""
    facts = a.facts
    # By the function binding them: ``eval(dataloader, ...)``'s parameter is not ``train()``'s
    # ``dataloader`` (simple-faster-rcnn-pytorch names both so).
    built = a.loader_bindings()
    over_loaders = {id(loop) for loop, _ in a.loader_loops}
    kept: set[str] = set()
    for loop in _ungathered_loops(a):
        if id(loop) not in over_loaders or loop.iterated is None:
            continue
        own = {name for function, name in a.origin_sites(loop.function, loop.iterated) if (function, name) in built}
        if own & facts.eval_loaders and not own & facts.train_loaders and _decides_shared_work(a, _grown_in(a, [loop])):
            kept |= own
            facts.unsharded_loops.add(a.site(loop.node).line)
    if not kept:
        return
    a.unsharded_loaders |= kept
    facts.eval_loaders = set(facts.eval_loaders) - kept
    facts.loaders_left_unsharded |= kept


def _decides_shared_work(a: Analysis, grown: dict[str, set[str]]) -> bool:
    """Whether what an evaluation grows (by function), or what follows from it, decides an
    ``if`` whose body calls anything but ``print``, or names a file read (see
    :func:`deciding_evaluations`)."""
    if not grown:
        return False
    _spread_from(a, grown)
    for call in a.r.calls:
        values = grown.get(call.function, set())
        if not values:
            continue
        builtin = a.r.names.builtin(call.node.func, call.scope)
        decided = builtin != "print" and any(branch.test.names & values for branch in call.ifs)
        reads = builtin == "open" or a.qualified(call) in CHECKPOINT_READS
        if decided or (reads and any(names_in(arg.value) & values for arg in call.node.args)):
            return True
    return False


def collected_into(call: cst.Call, values: AbstractSet[str]) -> cst.BaseExpression | None:
    """What a call collects one of ``values`` into (``losses`` of ``losses.append(loss.item())``,
    ``meter`` of ``meter.update(loss.item(), n)``): a list or meter of this process's batches
    when the values are; None for any other call. ACC919 asks it of the loop that trains too."""
    if collects(call) and any(names_in(arg.value) & values for arg in call.args):
        return cast(cst.Attribute, call.func).value
    return None


def adds_up(node: cst.CSTNode) -> cst.AugAssign | None:
    """``total += value``: a running sum, which in a loop over this process's shard adds up its
    batches only (and after a gather, every process's); None for anything else. The one reading
    of a running sum: the metrics, loader-dict and ACC919 rules ask it. Written out (``total =
    total + value``, deep-text-recognition's ``length_of_data = length_of_data + batch_size``)
    it is read as the ``+=`` it means."""
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
        return node
    return written_out_sum(node)


def written_out_sum(node: cst.CSTNode) -> cst.AugAssign | None:
    """``total = total + value`` (or ``value + total``) as ``total += value``; None for anything
    else."""
    if not (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.value, cst.BinaryOperation)
        and isinstance(node.value.operator, cst.Add)
    ):
        return None
    target = node.targets[0].target
    name = dotted(target)
    left, right = node.value.left, node.value.right
    if name is None:
        return None
    if dotted(left) == name:
        value = right
    elif dotted(right) == name:
        value = left
    else:
        return None
    return cst.AugAssign(target=target, operator=cst.AddAssign(), value=value)


def rows_added(node: cst.CSTNode, builtin: BuiltinOf) -> str | None:
    """The tensor whose rows ``total += x.size(0)`` (``len(x)``, ``x.shape[0]``) adds up: per batch
    of a loop over this process's shard, a count of its samples only; None for anything else. The
    metrics rule moves such a count below its gather; ACC919 reports it in a loop that trains."""
    summed = adds_up(node)
    return rows_counted(summed.value, builtin) if summed is not None else None


def grown_in(body: cst.CSTNode) -> list[cst.AugAssign]:
    """The augmented assignments in a loop's ``body`` (``total += ...``, ``n -= 1``, and ``total =
    total + ...`` as ``+=``): what it grows batch by batch, which in a loop over this process's
    shard is this process's share."""
    return [
        grown for node in nodes_in(body) if (grown := node if type(node) is cst.AugAssign else written_out_sum(node))
    ]


def lists_grown_in(body: cst.CSTNode) -> dict[str, list[cst.Call]]:
    """The names ``body`` (a loop's) grows as lists, each with its growing calls
    (``references.append(caption)``, ``hypotheses.extend(preds)``: per batch, or per sample in a
    loop over the batch's rows): in a loop over this process's shard, its samples only. The one
    reading of a loop's lists: the metrics rule gathers them after an evaluation loop."""
    found: dict[str, list[cst.Call]] = {}
    pending: list[cst.CSTNode] = [body]
    while pending:  # in source order: the lists in the order the loop first grows them
        node = pending.pop()
        pending.extend(reversed(child_nodes(node)))
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value in LIST_GROWING_METHODS
            and type(node.func.value) is cst.Name
            and len(node.args) == 1
            and node.args[0].keyword is None
            and not node.args[0].star
        ):
            found.setdefault(node.func.value.value, []).append(node)
    return found


def counted_by_one(node: cst.CSTNode) -> cst.BaseAssignTargetExpression | None:
    """The target of ``n += 1`` (a counter of loop iterations, this process's in a loop over its
    shard); None for anything else."""
    summed = adds_up(node)
    if summed is not None and isinstance(summed.value, cst.Integer) and summed.value.value == "1":
        return summed.target
    return None


@record(frozen=True, eq=False, repr=False)
class PerBatchValues:
    """What a loop over a loader's batches counts and keeps once per batch (see
    :func:`per_batch_values`): over this process's shard, its batches only."""

    #: The loop's ``enumerate`` index and the names (or attributes) its body adds a whole number to
    #: once per batch (``steps += 1``, ``self.count += 1``): counts of batches.
    counters: frozenset[str] = frozenset()
    #: Lists its body appends to once per batch, on a line of their own (``losses.append(loss.item())``):
    #: one entry per batch.
    lists: frozenset[str] = frozenset()


def per_batch_values(loop: cst.For, builtin: BuiltinOf) -> PerBatchValues:
    """The one reading of what a loop over batches computes once per batch (its counters and its
    lists of per-batch values), from the statements each batch runs exactly once: inside ``with``,
    ``if`` and ``try`` blocks, not in a nested loop (a ``for`` over the samples of the batch) nor a
    nested function. The metrics rule divides by them (a mean over batches) and the file flow
    names files by them (a file per batch); :meth:`Locality.per_batch_means` adds the losses.
    ``builtin`` answers where the loop stands (its index is the builtin ``enumerate``'s)."""
    index = enumerate_index(loop, builtin)
    counters: set[str] = {index} if index is not None else set()
    lists: set[str] = set()
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    for line in run_once_per_batch(body):
        for small in line.body:
            step = counter_step(small)
            if step is not None:
                counters.add(step[0])  # ``steps += 1``, ``self.count += 1``, ``steps = steps + 1``
            appended = _appended_to(small)
            if appended is not None:
                lists.add(appended)
    return PerBatchValues(frozenset(counters), frozenset(lists))


def counter_step(small: cst.BaseSmallStatement) -> tuple[str, str] | None:
    """(the counter, the whole number it grows by) of ``n += 1``, ``self.count += 1``, ``n = n +
    1`` or ``n = 1 + n``; None for anything else."""
    summed = adds_up(small)
    steps: tuple[cst.BaseExpression, ...]
    if summed is not None:
        counter, steps = dotted(summed.target), (summed.value,)
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.BinaryOperation):
        value = small.value
        counter = dotted(small.targets[0].target)
        sides = (value.left, value.right)
        if not isinstance(value.operator, cst.Add) or not any(dotted(side) == counter for side in sides):
            return None
        steps = sides
    else:
        return None
    step = next((side for side in steps if isinstance(side, cst.Integer)), None)
    return None if counter is None or step is None else (counter, step.value)


def run_once_per_batch(statements: Sequence[cst.BaseStatement]) -> list[cst.SimpleStatementLine]:
    """The simple statements that running ``statements`` (a loop's body, or the part of it before
    the forward) runs at most once per batch, in source order: theirs and those of the
    ``if``/``elif``/``else``, ``with`` and ``try`` (body, ``else``, ``finally``) blocks among them.
    Not those of a nested loop (a ``for`` over the samples of the batch), a nested function or
    class, nor an ``except`` block (it runs only when the batch failed). :func:`per_batch_values`
    reads its counters and lists from them; the metrics rule the names a batch is unpacked into
    before its forward (``rewrites/metrics/batch_values.unpacked_from``)."""
    found: list[cst.SimpleStatementLine] = []
    pending: list[cst.CSTNode] = list(reversed(statements))
    while pending:
        node = pending.pop()
        if isinstance(node, cst.SimpleStatementLine):
            found.append(node)
        elif isinstance(node, cst.IndentedBlock):
            pending.extend(reversed(node.body))
        elif isinstance(node, (cst.With, cst.Else, cst.Finally)):
            pending.append(node.body)
        elif isinstance(node, (cst.If, cst.Try)):
            blocks = (node.body, node.orelse) if isinstance(node, cst.If) else (node.body, node.orelse, node.finalbody)
            pending.extend(block for block in reversed(blocks) if block is not None)
    return found


def _appended_to(small: cst.BaseSmallStatement) -> str | None:
    """``losses`` for ``losses.append(...)`` on a line of its own; None for anything else."""
    call = small.value if isinstance(small, cst.Expr) else None
    if (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "append"
        and isinstance(call.func.value, cst.Name)
    ):
        return call.func.value.value
    return None


def collects(node: cst.CSTNode) -> bool:
    """``meter.update(...)``, ``values.append(...)``, ``values.extend(...)`` with arguments: a
    value kept per batch, which in a loop over this process's shard holds its batches only."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in COLLECTING_METHODS
        and bool(node.args)
    )


def _spread_from(a: Analysis, sums: dict[str, set[str]]) -> None:
    """Add to ``sums`` (by function) what is computed from them, returned with them, decided by
    them, or an object fed them, until nothing changes."""
    # Read once: the fixed point below only intersects these with the growing ``sums``.
    returns = [(function, names_in(value)) for function, value in a.r.returns]
    # A method returning a sum (``Trainer.train_epoch``), called on the instance in its class.
    method_returns = [(scope, names_in(value)) for scope, value in a.r.method_returns]
    feeds = [
        (call.function, fed, set().union(*(names_in(arg.value) for arg in call.node.args)))
        for call in a.r.calls
        if call.node.args and (fed := _object_fed(a, call.node)) is not None
    ]
    records: list[AssignRecord | AugAssignRecord] = [*a.r.assigns, *a.r.aug_assigns]
    changed = True
    while changed:
        changed = False
        returning = {function for function, names in returns if names & sums.get(function, set())}
        methods = {scope for scope, names in method_returns if names & sums.get(scope[0], set())}
        for assign in records:
            own = sums.setdefault(assign.function, set())
            if not set(assign.targets) <= own and _follows_from(assign, own, returning, methods):
                own.update(assign.targets)
                changed = True
        for function, fed, names in feeds:
            own = sums.setdefault(function, set())
            if fed not in own and names & own:
                own.add(fed)
                changed = True


def _follows_from(
    record: AssignRecord | AugAssignRecord, sums: set[str], returning: set[str], methods: set[ScopeKey]
) -> bool:
    """Whether an assignment reads one of ``sums``, calls a function (or a method of its class,
    ``methods``: (class, method)) returning one, or runs under an ``if`` testing one."""
    decided = any(branch.test.names & sums for branch in record.ifs)
    # What it reads: its mentions include its own targets (``best, bad = inf, 0``).
    read = record.mentions.names - set(record.targets)
    return bool(read & sums or record.mentions.calls & returning or decided or _calls_method(record, methods))


def _calls_method(record: AssignRecord | AugAssignRecord, methods: set[ScopeKey]) -> bool:
    """Whether a record in a class's method calls one of ``methods`` of that class on its
    instance (``self.train_epoch()``)."""
    return any(
        (record.function, callee.rpartition(".")[2]) in methods
        for callee in record.mentions.calls
        if callee.count(".") == 1
    )


def _object_fed(a: Analysis, node: cst.Call) -> str | None:
    """The object a call hands its arguments to: ``stopper`` for ``stopper(value)`` (a name
    the script binds) and for ``stopper.step(value)``; None for functions and modules."""
    func = node.func
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
        name = func.value.value
    elif isinstance(func, cst.Name):
        name = func.value
    else:
        return None
    accelerators = {a.facts.existing_accelerator, a.facts.accelerator_name}
    return name if name in a.assigned and name not in accelerators else None


#: Where a call runs, in the order the program runs it: the lines of the calls leading from
#: module-level code to its function, then its own line (a draw at line 40 of a model's
#: ``__init__`` constructed at line 121 of ``main()``, called at line 150, runs at (150, 121, 40)).
RunPath = tuple[int, ...]


@provider(
    needs=(
        "call_graph",
        "loop_backward",
        "models",
        "model_classes",
        "model_factories",
        "prepared",
        "prepared_attributes",
    ),
    provides=("shared_draws", "shared_draw_lines", "drawing_functions", "per_process_calls_out"),
)
def shared_draws(a: Analysis) -> None:
    """Draws from a global generator that no seeding call before them makes agree, and that decide
    what the processes share: ``lr = random.uniform(1e-4, 1e-2)`` in ``main()``, a split drawn
    at module level, a target drawn in a class's ``__init__`` or a config helper of another
    module. Each process draws its own, so each trains with other hyperparameters, on another
    split, or names its checkpoint after its own draw. A draw in a loop that trains (a batch of
    synthetic data) or handed straight to a model (its inputs), in a method that is no
    ``__init__`` (a dataset's ``__getitem__``), in a DataLoader's ``worker_init_fn`` (the
    per-worker diversity the script asks for) or in a function only such code calls is per
    process on purpose. Whether a seed comes first is decided in run order (:data:`RunPath`), for
    the generator each seed seeds. Also the functions and classes making one, and the lines of
    their calls: the accelerator is created above the first, and agrees the generators there.
    In a module of a program, also how it calls the other modules' functions
    (``per_process_calls_out``): a helper of ``utils.py`` that only a dataset's ``__getitem__``
    calls (an augmentation shuffling its transforms) draws per process there too."""
    workers = _worker_init_functions(a)
    every = [(call, _callee(a, call), _per_process_draw(a, call, workers)) for call in a.r.calls]
    calls = [(call, callee) for call, callee, per_process in every if not per_process]
    paths = _run_paths(a, calls)
    if a.seeds is not None:
        a.facts.per_process_calls_out = _per_process_calls_out(a, every, paths)
    seeds = [
        (paths[call.function] + (a.site(call.node).line,), a.facts.callee_name(call.node.func, call.scope) or "")
        for call, _ in calls
        if call.function in paths and _is_seeding(a, call)
    ]
    imported = a.seeds.drawing_functions if a.seeds is not None else frozenset()
    data = _drawn_data(a)
    built = _unprepared_random_modules(a)
    for call, callee in calls:
        drawn = _generator_drawn(a, call, callee, built, imported)
        if drawn is None or call.function not in paths or id(call.node) in data:
            continue
        path = paths[call.function] + (a.site(call.node).line,)
        if any(seed < path and seeds_generator_of(name, drawn) for seed, name in seeds):
            continue
        a.facts.shared_draws.append(a.site(call.node))
        a.facts.shared_draw_lines.add(path[-1])
        if call.function != MODULE:
            a.facts.drawing_functions.add(call.function)
    _callers_of_drawing_functions(a, calls)


def _per_process_calls_out(
    a: Analysis, every: list[tuple[CallRecord, str | None, bool]], paths: Mapping[str, RunPath]
) -> dict[str, bool]:
    """Each function of another program module this module calls (qualified) → whether every
    call of it here is made per process (:func:`_per_process_draw`), or from code only such calls
    reach (not in ``paths``)."""
    out: dict[str, bool] = {}
    for call, callee, per_process in every:
        if callee is not None and callee not in a.r.defs and callee not in a.r.classes:
            alone = per_process or call.function not in paths
            out[callee] = out.get(callee, True) and alone
    return out


def _generator_drawn(
    a: Analysis, call: CallRecord, callee: str | None, built: AbstractSet[int], imported: AbstractSet[str]
) -> str | None:
    """The global generator a call draws from (its qualified name stands for it), or None where it
    draws from none. An imported function that draws: what it draws from is not known here (any
    seed but torch's alone seeds it). A module left unprepared draws its weights from torch's."""
    if id(call.node) in built:
        return "torch.nn"
    if callee in imported:
        return "random"
    drawn = a.qualified(call) or ""
    return drawn if _draws_globally(call, drawn) else None


def _unprepared_random_modules(a: Analysis) -> set[int]:
    """Constructions of a module drawing its initial weights whose result is never prepared (ids
    of the calls): a frozen, randomly initialised teacher or target network (``teacher = Net();
    teacher.requires_grad_(False)``), a random projection (``proj = nn.Linear(512, 64)``). The
    prepared model is made the same on every process by ``prepare`` (DDP broadcasts rank 0's
    weights); such a module is not, so each process computes other targets or features. A module
    of the program's model classes, or ``torch.nn`` layers drawing their weights (alone or inside
    a container: ``nn.Sequential(nn.Linear(8, 4))``); not one whose weights a checkpoint
    replaces (``best.load_state_dict(torch.load(path))``: the file decides them), nor a layer a
    model class builds for itself (``self.fc = nn.Linear(8, 4)``: where that model is built
    decides)."""
    facts = a.facts
    loaded = _loaded_from_checkpoint(a)
    drawing = _drawing_model_classes(a)
    found = set()
    for assign in a.r.assigns:
        if assign.scope and assign.scope[0] in facts.model_classes:
            continue
        value = construction(assign.value)
        if value is None or not assign.targets or not _builds_random_module(a, value, assign.scope, drawing):
            continue
        kept = {_held_name(target) for target in assign.targets}
        if kept & (set(facts.models) | facts.prepared | loaded):
            continue
        found.add(id(value))
    return found


def _held_name(target: str) -> str:
    """``self.teacher`` → ``teacher``: the name an attribute of ``self`` is kept under in the
    facts' roles; a plain name as it is."""
    return target.partition(".")[2] if target.startswith("self.") else target


def _builds_random_module(a: Analysis, call: cst.Call, scope: ScopeKey, drawing: AbstractSet[str]) -> bool:
    """Whether ``call`` builds a module drawing its weights: one of the file's model classes that
    draws (:func:`_drawing_model_classes`), a model class of another module of the program (its
    body is not seen here), or a ``torch.nn`` module holding a layer that draws its weights
    (itself, or one among its arguments)."""
    func = call.func
    if isinstance(func, cst.Name) and func.value in a.facts.model_classes:
        return func.value in drawing
    if builds_model_of_program_class(a.facts, func, scope):
        return True
    qualified = a.r.names.qualified_name(func, scope, strict=False) or ""
    if not qualified.startswith("torch.nn."):
        return False
    return any(_draws_weights(a, inner, scope, drawing) for inner in calls_in(call))


def _draws_weights(a: Analysis, call: cst.Call, scope: ScopeKey, drawing: AbstractSet[str]) -> bool:
    """A call building a ``torch.nn`` layer that draws its weights, or one of ``drawing`` (the
    file's model classes that draw), or drawing from torch's global generator itself
    (``nn.Parameter(torch.randn(4, 4))``)."""
    func = call.func
    if isinstance(func, cst.Name) and func.value in drawing:
        return True
    qualified = a.r.names.qualified_name(func, scope, strict=False) or ""
    return initialises_at_random(qualified) or (qualified.startswith("torch.") and is_global_draw(qualified))


def _drawing_model_classes(a: Analysis) -> set[str]:
    """The file's model classes whose construction draws from torch's global generator: their
    methods build a layer that draws its weights (``self.fc = nn.Linear(8, 4)``), draw themselves
    (``nn.Parameter(torch.randn(4))``) or build such a class; or they derive from one, or from a
    ``torch.nn`` layer that draws. Not a fixed transform (a mel filterbank of ``torch.linspace``
    buffers)."""
    classes = a.facts.model_classes
    # Each class's calls, found once: the rounds below ask them again as ``drawing`` grows.
    calls_of: dict[str, list[CallRecord]] = {}
    for call in a.r.calls:
        if call.scope and call.scope[0] in classes:
            calls_of.setdefault(call.scope[0], []).append(call)
    drawing: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name in classes - drawing:
            record = a.r.classes.get(name)
            bases = [] if record is None else [base.value for base in record.node.bases]
            if any(
                (isinstance(base, cst.Name) and base.value in drawing)
                or initialises_at_random(a.r.names.qualified_name(base, (), strict=False) or "")
                for base in bases
            ) or any(_draws_weights(a, call.node, call.scope, drawing) for call in calls_of.get(name, ())):
                drawing.add(name)
                changed = True
    return drawing


def _loaded_from_checkpoint(a: Analysis) -> set[str]:
    """Names (attributes of ``self`` by their own name) whose weights a checkpoint replaces: given
    to ``load_state_dict`` a checkpoint read (:data:`CHECKPOINT_READS`, by qualified name:
    ``best.load_state_dict(torch.load(path))``) or what a name bound from one holds
    (``net.load_state_dict(checkpoint["net"])`` after ``checkpoint = torch.load(path)`` in the same
    function). Not a copy of another module's (``target.load_state_dict(policy.state_dict())``: as
    random as that module)."""
    reads = {id(call.node) for call in a.r.calls if a.qualified(call) in CHECKPOINT_READS}
    if not reads:
        return set()
    holding = {
        (assign.function, target)
        for assign in a.r.assigns
        if any(id(inner) in reads for inner in calls_in(assign.value))
        for target in assign.targets
    }
    loaded = set()
    for call in a.r.calls:
        func = call.node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in STATE_LOADING_METHODS and call.node.args):
            continue
        given = nodes_in(call.node.args[0].value)
        receiver = dotted(func.value)
        if receiver is not None and any(
            id(node) in reads or (call.function, dotted(node)) in holding for node in given
        ):
            loaded.add(_held_name(receiver))
    return loaded


def _drawn_data(a: Analysis) -> set[int]:
    """Draws handed straight to a model (``model.decode(torch.randn(4, 2))``): inputs each
    process samples for itself, as it computes on its own batch (ids of the calls). Not those
    handed to a dataset (``TensorDataset(torch.randn(64, 8))``, ``Subset(ds, torch.randperm(200))``):
    the loader shards the dataset across the processes, so each must hold the same one, or each
    trains and evaluates on a share of its own data, not on a share of the one dataset."""
    models = a.facts.models
    return {
        id(arg.value)
        for call in a.r.calls
        if (dotted(call.node.func) or "").partition(".")[0] in models
        for arg in call.node.args
        if isinstance(arg.value, cst.Call)
    }


def _callee(a: Analysis, call: CallRecord) -> str | None:
    """The file's function or class a call runs (its name), or an imported program function (its
    qualified name); None for anything else."""
    func = call.node.func
    if isinstance(func, cst.Name) and (func.value in a.r.defs or func.value in a.r.classes):
        return func.value
    return program_callee(a.facts, func, call.scope)


def _run_paths(a: Analysis, calls: list[tuple[CallRecord, str | None]]) -> dict[str, RunPath]:
    """Module-level code, and each function and class (its ``__init__``) it reaches through
    calls outside the loops that train, with the earliest :data:`RunPath` of its start. A module
    of a program that its entry imports runs its functions when the entry calls them: each that
    other code may start (:func:`_library_entries`) starts with no path of its own there."""
    paths: dict[str, RunPath] = {MODULE: ()}
    if a.seeds is not None and a.seeds.library:
        paths.update(dict.fromkeys(_library_entries(a), ()))
    changed = True
    while changed:
        changed = False
        for call, callee in calls:
            if callee is None or call.function not in paths:
                continue
            path = paths[call.function] + (a.site(call.node).line,)
            if callee not in paths or path < paths[callee]:
                paths[callee] = path
                changed = True
    return paths


def _library_entries(a: Analysis) -> list[str]:
    """The functions and classes of a module of a program that code outside it may start: those
    another module calls where every process goes (:attr:`ProgramSeeds.called_from_elsewhere`),
    and those no other module calls and nothing here calls either (a hook, a callable handed
    over out of sight). Not one only this module's own code calls (it starts where that code
    reaches it), nor one the other modules call only per process (``transform(image)`` in a
    dataset's ``__getitem__``)."""
    assert a.seeds is not None
    elsewhere = dict(a.seeds.called_from_elsewhere)
    called_here = {callee for call in a.r.calls if (callee := _callee(a, call)) is not None and callee != call.function}
    return [
        name
        for name in [*a.r.defs, *a.r.classes]
        if (name in elsewhere and not elsewhere[name]) or (name not in elsewhere and name not in called_here)
    ]


def _draws_globally(call: CallRecord, drawn: str) -> bool:
    """A call drawing from a global generator: a draw not given its own ``generator=``, or a
    random split not given its own seed (``random_split(ds, [400, 200])`` draws from torch's)."""
    keyword = RANDOM_SPLITS.get(drawn, "generator")
    if any(arg.keyword is not None and arg.keyword.value == keyword for arg in call.node.args):
        return False
    return is_global_draw(drawn) or drawn in RANDOM_SPLITS


def _per_process_draw(a: Analysis, call: CallRecord, workers: set[str]) -> bool:
    """A draw each process makes for itself on purpose: per batch in a loop that trains, in a
    method other than ``__init__``, or in a worker's initialiser."""
    if call.function in workers or any(loop.has_backward for loop in call.loops):
        return True
    scope = call.scope
    return len(scope) >= 2 and scope[0] in a.r.classes and scope[1] != "__init__"


def _is_seeding(a: Analysis, call: CallRecord) -> bool:
    """``torch.manual_seed(0)``, accelerate's ``set_seed``, the script's own ``set_seed(42)``;
    not a generator's own ``g.manual_seed(1)`` (see :func:`engine.random_draws.is_seeding_call`)."""
    func = call.node.func
    name = a.qualified(call) if not isinstance(func, cst.Name) else func.value
    return "seed" in (name or "").rpartition(".")[2]


def _worker_init_functions(a: Analysis) -> set[str]:
    """The script's functions a DataLoader runs in each worker (``worker_init_fn=seed_worker``)."""
    return {
        arg.value.value
        for call in a.r.calls
        for arg in call.node.args
        if arg.keyword is not None and arg.keyword.value == "worker_init_fn" and isinstance(arg.value, cst.Name)
    }


def _callers_of_drawing_functions(a: Analysis, calls: list[tuple[CallRecord, str | None]]) -> None:
    """Functions and classes calling (or constructing) one that draws, outside the loops that
    train, until none is added; the lines of those calls."""
    drawing = a.facts.drawing_functions
    changed = True
    while changed:
        changed = False
        for call, callee in calls:
            if callee not in drawing:
                continue
            a.facts.shared_draw_lines.add(a.site(call.node).line)
            if call.function != MODULE and call.function not in drawing:
                drawing.add(call.function)
                changed = True


#: Names whose value differs from process to process.
RANK_NAMES = frozenset(
    {
        "rank",
        "local_rank",
        "process_index",
        "local_process_index",
        "is_main_process",
        "is_local_main_process",
        "is_last_process",
    }
)


@record(frozen=True, eq=False, repr=False)
class Locality:
    """What differs between the processes of one module, and where: the one answer rules read
    (``facts.of(locality)``)."""

    #: Names bound to a folder or file only this process has (``tempfile.mkdtemp()``), and paths
    #: built from them.
    per_process_paths: frozenset[str] = frozenset()
    #: Names holding this process's share of the training: a sum, list or meter of its batch
    #: losses grown in a loop that runs the backward, and what is computed from or decided by it.
    per_process_sums: frozenset[str] = frozenset()
    #: ``if`` statements whose test reads a rank (``if accelerator.is_main_process:``, ``if rank
    #: == 0:``): only some processes run their body.
    rank_guarded: tuple[Site, ...] = ()
    #: ``break`` statements decided by a per-process value that cannot be made to agree simply,
    #: and those that can (``if loss < 1e-3: ...; break``).
    rank_dependent_breaks: tuple[Site, ...] = ()
    agreeable_breaks: tuple[Site, ...] = ()
    #: ``scheduler.step(value)`` with a per-process value.
    rank_dependent_schedule_steps: tuple[Site, ...] = ()
    #: Draws from a global generator before any seed that decide what the processes share.
    shared_draws: tuple[Site, ...] = ()
    #: Assignments binding what each process decides for itself (a time stamp, its process id, a
    #: fresh id, a folder listing: :data:`DECIDED_PER_PROCESS`) from which the program builds a
    #: path it uses, by the statement's first line → the names to agree there: see
    #: :func:`paths_decided_per_process`.
    decided_per_process: Mapping[int, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Per function (``"<module>"``, a class's name for its methods): the names bound to a
    #: ``torch.nn`` loss module averaging over this process's batch (``criterion = nn.MSELoss()``).
    batch_mean_losses: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    #: Per function (keyed as :attr:`batch_mean_losses`): the :attr:`per_process_sums` it binds
    #: (``train_loss = train_epoch(...)`` in ``main()``, ``total += loss.item()`` in the loop).
    per_rank_sums: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    #: Module-level functions of the file, and methods of its classes (``"Trainer.make_dir"``),
    #: some rank may not call where another does: a call of theirs (``mkdir_p(d)``,
    #: ``self.make_dir(d)``, ``trainer.make_dir(d)``) stands where not every rank goes (``if not
    #: os.path.isdir(d): mkdir_p(d)``, under ``if rank == 0:``), another module of the program
    #: calls them so (:attr:`ProgramSeeds.called_on_some_ranks`), or they are called by such a
    #: function. Nothing inside them is reached by every rank (:class:`RankReach`), so no barrier
    #: goes there.
    called_on_some_ranks: frozenset[str] = frozenset()
    #: Functions and methods (keyed as :attr:`called_on_some_ranks`) called in the body of a ``try``
    #: whose handler catches an ``OSError`` and goes on (:meth:`RankReach.error_caught_here`), or
    #: called by such a function: a folder made there may fail on purpose (``FileExistsError``)
    #: for its handler to run.
    called_in_try: frozenset[str] = frozenset()
    #: Functions and methods (keyed as :attr:`called_on_some_ranks`) called in the body of a ``try``
    #: whose handler catches the ``OSError`` of a network fetch and goes on (``except
    #: requests.RequestException:``; :meth:`RankReach.error_caught_here` ``fetching``), or called
    #: by such a function: a download there may fail on purpose for its handler to run.
    called_where_fetch_caught: frozenset[str] = frozenset()
    #: What this module calls from its imports (absolute qualified names) where some rank may not
    #: go, in a module of a program: the program tells the module of each of its own functions and
    #: methods among them (:attr:`ProgramSeeds.called_on_some_ranks`).
    program_calls_on_some_ranks: frozenset[str] = frozenset()
    #: Original line of each evaluation loop over a prepared loader in which every process runs
    #: its own batches, unevenly, and writes their files under the original's index → how it
    #: counts its batches and the prepared models it calls: see
    #: ``file_flow.per_batch_file_loaders``. No barrier goes inside one, and its writes stay on
    #: every process.
    per_rank_loops: Mapping[int, PerRankLoop] = field(default_factory=lambda: MappingProxyType({}))
    #: The script's functions that loop over a loader (training or evaluation) or run a training
    #: backward, and every function calling one, directly or through its own calls: a call of one
    #: holds work every process does (:func:`holds_work_of_every_rank`).
    working_functions: frozenset[str] = frozenset()

    @property
    def per_process_values(self) -> frozenset[str]:
        """Every name whose value differs between processes: per-process paths and sums."""
        return self.per_process_paths | self.per_process_sums

    def averages_batch(self, call: cst.Call, function: str, facts: ScriptFacts) -> bool:
        """Whether ``call``, in ``function`` (keyed as :attr:`batch_mean_losses`), is a loss
        averaging over this process's batch: one of the function's or the module's
        :attr:`batch_mean_losses`, or a ``torch.nn.functional`` loss without ``reduction="sum"``."""
        criteria = self.batch_mean_losses.get(function, frozenset()) | self.batch_mean_losses.get(MODULE, frozenset())
        return is_batch_mean_loss(call, criteria, facts)

    def per_batch_means(self, body: cst.CSTNode, function: str, facts: ScriptFacts) -> frozenset[str]:
        """Per-batch values of a loop's ``body`` (in ``function``): the names it binds, alone, to a
        loss averaging over the batch (``loss = criterion(outputs, targets)``), one mean of this
        process's rows per batch. Added up per batch they sum means, not samples."""
        return frozenset(
            node.targets[0].target.value
            for node in nodes_in(body)
            if isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and any(self.averages_batch(call, function, facts) for call in calls_in(node.value))
        )

    def summed_per_rank(self, function: str, converted: cst.FunctionDef | None) -> frozenset[str]:
        """The names holding a sum each rank grew on its own share where ``function`` (its key in
        :attr:`per_rank_sums`) runs: its :attr:`per_rank_sums`, and what ``converted`` (the function
        as the rules converted it so far; None at module level) adds up in a loop that gathers and
        reduces nothing (:func:`sums_per_rank`: an evaluation sum no rule gathered)."""
        own = self.per_rank_sums.get(function, frozenset())
        return own if converted is None else own | sums_per_rank(converted)

    def rank_guarded_at(self, line: int) -> bool:
        """Whether the original ``line`` lies in an ``if`` guarded by a rank (only some
        processes run it)."""
        return any(site.line <= line <= site.end_line for site in self.rank_guarded)


@rule_provider(
    needs=(
        "call_graph",
        "train_loaders",
        "eval_loaders",
        "unsharded_loaders",
        "per_process_paths",
        "per_process_sums",
        "rank_dependent_breaks",
        "agreeable_breaks",
        "rank_dependent_schedule_steps",
        "shared_draws",
        "per_rank_loops",
        "dataset_classes",
        "file_logger_classes",
        "word_lines",
        "train_loops",
        "eval_loops",
        "backward_functions",
    )
)
def locality(a: Analysis) -> Locality:
    """The module's :class:`Locality`, from the providers above and the one walk's records."""
    facts = a.facts
    reach = _calls_on_some_ranks(a)
    return Locality(
        per_process_paths=frozenset(facts.per_process_paths),
        per_process_sums=frozenset().union(*a.per_process_sums.values()),
        rank_guarded=tuple(
            a.site(record.node)
            for record in a.r.assigns_and_ifs
            if isinstance(record, IfRecord) and names_rank(record.node.test)
        ),
        rank_dependent_breaks=tuple(facts.rank_dependent_breaks),
        agreeable_breaks=tuple(facts.agreeable_breaks),
        rank_dependent_schedule_steps=tuple(facts.rank_dependent_schedule_steps),
        shared_draws=tuple(facts.shared_draws),
        decided_per_process=paths_decided_per_process(a),
        batch_mean_losses=_batch_mean_losses(a),
        per_rank_sums=_per_rank_sums(a),
        called_on_some_ranks=reach.called_on_some_ranks,
        called_in_try=reach.called_in_try,
        called_where_fetch_caught=reach.called_where_fetch_caught,
        program_calls_on_some_ranks=reach.program_calls_on_some_ranks,
        per_rank_loops=MappingProxyType(dict(a.per_rank_loops)),
        working_functions=_working_functions(facts),
    )


@record(frozen=True, eq=False, repr=False)
class _CallReach:
    """What the walk of :class:`_CallsWhereRanksDiffer` found (see :class:`Locality`)."""

    called_on_some_ranks: frozenset[str] = frozenset()
    called_in_try: frozenset[str] = frozenset()
    called_where_fetch_caught: frozenset[str] = frozenset()
    program_calls_on_some_ranks: frozenset[str] = frozenset()


def _calls_on_some_ranks(a: Analysis) -> _CallReach:
    """See :attr:`Locality.called_on_some_ranks`: the module-level functions and the methods of
    the file's classes with a call that :class:`RankReach` says not every rank makes where it
    stands (or that another module of the program calls so), and, through the calls they make,
    every function and method they call. A function whose callers are out of sight (a hook's
    caller) keeps the answer its own body gives. Also :attr:`Locality.called_in_try`,
    :attr:`Locality.called_where_fetch_caught` and :attr:`Locality.program_calls_on_some_ranks`."""
    own = {id(call.node): key for call in a.r.calls if (key := _own_callee(a, call)) is not None}
    built = _imported_instances(a) if a.seeds is not None else {}
    elsewhere = (
        {
            id(call.node): callee
            for call in a.r.calls
            if id(call.node) not in own and (callee := _imported_callee(a, call, built)) is not None
        }
        if a.seeds is not None
        else {}
    )
    # Another module building one of this module's classes there (``snapshots.SnapshotDir(d)``)
    # calls what its construction runs (``SnapshotDir.__init__``).
    seeded = frozenset(
        (constructor_method(a, name) or name) if name in a.r.classes else name
        for name in (a.seeds.called_on_some_ranks if a.seeds is not None else ())
    )
    module = a.module
    if (not own and not elsewhere and not seeded) or module is None:
        return _CallReach()
    walk = _CallsWhereRanksDiffer(a, own | elsewhere)
    walk.walk_tree(module)
    callees = _callees_by_caller(a, {**own, **elsewhere})
    skipped = _with_callees(a, (walk.skipped & set(own.values())) | seeded, callees)
    # What a function some rank may not call calls in another module: some rank may not call it either.
    elsewhere_names = set(elsewhere.values())
    reached_elsewhere = {callee for key in skipped for callee in callees.get(key, ()) if callee in elsewhere_names}
    return _CallReach(
        called_on_some_ranks=skipped,
        called_in_try=_with_callees(a, walk.caught & set(own.values()), callees),
        called_where_fetch_caught=_with_callees(a, walk.fetch_caught & set(own.values()), callees),
        program_calls_on_some_ranks=frozenset((walk.skipped & elsewhere_names) | reached_elsewhere),
    )


def _own_callee(a: Analysis, call: CallRecord) -> str | None:
    """The key of the file's function or method a call runs: ``mkdir_p`` for ``mkdir_p(d)`` (a
    module-level function, by a name no inner scope rebinds), ``Trainer.make_dir`` for
    ``self.make_dir(d)`` in a method of ``Trainer`` or ``trainer.make_dir(d)`` on an instance the
    same function builds (:func:`calls.instance_class`), ``SnapshotDir.__init__`` for building
    the file's class, ``SnapshotDir(d)`` (:func:`calls.constructor_method`); None for anything
    else."""
    func = call.node.func
    if isinstance(func, cst.Name):
        if a.r.names.binding_scope(func.value, call.scope) != ():
            return None
        if func.value in a.r.defs:
            return func.value
        return constructor_method(a, func.value) if func.value in a.r.classes else None
    if not isinstance(func, cst.Attribute):
        return None
    owner = instance_class(a, call, func.value)
    if owner is None or not any(m.name.value == func.attr.value for m in class_methods(a.r.classes[owner].node)):
        return None
    return f"{owner}.{func.attr.value}"


def _imported_callee(a: Analysis, call: CallRecord, built: Mapping[tuple[str, str], set[str | None]]) -> str | None:
    """The qualified name of what a call runs from the module's imports: an imported function
    (``snapshot_dirs.make_snapshot_dir``), or a method of an imported class on an instance the
    same function builds (``folders.make(d)`` after ``folders = Folders()``:
    ``snapshot_dirs.Folders.make``; ``built``: :func:`_imported_instances`); None for anything else."""
    func = call.node.func
    found = program_callee(a.facts, func, call.scope)
    if found is not None or not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
        return found
    classes = built.get((call.function, func.value.value), set())
    return f"{next(iter(classes))}.{func.attr.value}" if len(classes) == 1 and None not in classes else None


def _imported_instances(a: Analysis) -> dict[tuple[str, str], set[str | None]]:
    """(function, name) → the qualified names of the imported callables whose call the function
    binds the name to (None for a call of nothing imported)."""
    built: dict[tuple[str, str], set[str | None]] = {}
    for assign in a.r.assigns:
        # Moved or switched to a mode, it is the instance built: ``Trainer(model).to(device)``.
        value = constructed(assign.value)
        if isinstance(value, cst.Call):
            callee = program_callee(a.facts, value.func, assign.scope)
            for target in assign.targets:
                built.setdefault((assign.function, target), set()).add(callee)
    return built


def _caller_key(a: Analysis, scope: ScopeKey) -> str | None:
    """The key (as :func:`_own_callee` gives it) of the function or method holding code at
    ``scope``: its module-level function, or the method of a module-level class."""
    if not scope:
        return None
    if scope[0] in a.r.classes:
        return f"{scope[0]}.{scope[1]}" if len(scope) >= 2 else None
    return scope[0]


def _callees_by_caller(a: Analysis, keys: Mapping[int, str]) -> dict[str, set[str]]:
    """Function or method key → what it calls (``keys``, by call node: the keys of the file's
    functions and methods, the qualified names of what it calls from its imports); a module-level
    function also reaches what the call graph says it calls (a hook it hands over, a nested
    function's calls)."""
    callees: dict[str, set[str]] = {}
    for call in a.r.calls:
        caller = _caller_key(a, call.scope)
        key = keys.get(id(call.node))
        if caller is not None and key is not None:
            callees.setdefault(caller, set()).add(key)
    for caller, called in a.facts.call_graph.items():
        if caller in a.r.defs:
            callees.setdefault(caller, set()).update(called & set(a.r.defs))
    return callees


def _with_callees(a: Analysis, found: AbstractSet[str], callees: Mapping[str, AbstractSet[str]]) -> frozenset[str]:
    """``found`` and every function and method of the file they call, directly or not."""
    reached = set(found)
    pending = list(reached)
    own = set(a.r.defs) | {
        f"{name}.{m.name.value}" for name, cls in a.r.classes.items() for m in class_methods(cls.node)
    }
    while pending:
        for callee in callees.get(pending.pop(), ()):
            if callee in own and callee not in reached:
                reached.add(callee)
                pending.append(callee)
    return frozenset(reached)


class _CallsWhereRanksDiffer:
    """Walks the module keeping the statements around each node, as the rule transformer does,
    and asks :class:`RankReach` of each call in ``calls`` (by node identity: the key of the file's
    function or method it runs, or another module's function's qualified name) whether every rank
    makes it: ``skipped`` collects those some rank may not call there, ``caught`` those called
    where a handler catches an ``OSError`` and goes on (:meth:`RankReach.error_caught_here`),
    ``fetch_caught`` those where one catches a network fetch's. The
    tree is only read: the walk goes from child to child itself (:func:`child_nodes`, no
    whitespace or tokens), without libcst's ``visit``, which rebuilds every node it walks (a third
    of a conversion when this walk went through it)."""

    def __init__(self, a: Analysis, calls: Mapping[int, str]) -> None:
        self._calls = calls
        self._records = {id(call.node): call for call in a.r.calls if id(call.node) in calls}
        self._anchors: list[cst.CSTNode] = []
        self._scope: ScopeKey = ()
        facts = a.facts
        locality = Locality(per_rank_sums=_per_rank_sums(a))
        # A loader left unsharded (a file written per batch) gives every rank all its batches.
        self._reach = RankReach(
            facts.loaders | a.unsharded_loaders,
            lambda node: facts.qualified_name(node, self._scope),
            lambda node: facts.builtin(node, self._scope),
            locality,
            # ``if epoch == last or acc > best: checkpoint(acc, epoch)`` in ``test(epoch)``, with
            # ``acc`` from sums the metrics rule gathers: every rank makes the call.
            original=True,
        )
        self.skipped: set[str] = set()
        self.caught: set[str] = set()
        self.fetch_caught: set[str] = set()

    def walk_tree(self, node: cst.CSTNode) -> None:
        """Visit ``node`` and what is below it, in libcst's order."""
        anchored = type(node) in POSITIONED_TYPES
        if anchored:
            self._anchors.append(node)
        scoped = type(node) is cst.FunctionDef or type(node) is cst.ClassDef
        if scoped:
            self._scope = (*self._scope, node.name.value)  # type: ignore[attr-defined]
        key = self._calls.get(id(node))
        if key is not None:
            anchors = self._anchors[:-1]
            if not self._reach.every_rank_reaches(anchors, self._records[id(node)].function):
                self.skipped.add(key)
            if self._reach.error_caught_here(anchors):
                self.caught.add(key)
            if self._reach.error_caught_here(anchors, fetching=True):
                self.fetch_caught.add(key)
        for child in child_nodes(node):
            self.walk_tree(child)
        if scoped:
            self._scope = self._scope[:-1]
        if anchored:
            self._anchors.pop()


def _per_rank_sums(a: Analysis) -> Mapping[str, frozenset[str]]:
    """See :attr:`Locality.per_rank_sums`."""
    return MappingProxyType({function: frozenset(names) for function, names in a.per_process_sums.items() if names})


def _batch_mean_losses(a: Analysis) -> Mapping[str, frozenset[str]]:
    """See :attr:`Locality.batch_mean_losses`."""
    found: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        value = assign.value
        if not isinstance(value, cst.Call) or len(assign.node.targets) != 1 or len(assign.targets) != 1:
            continue
        qualified = a.r.names.qualified_name(value.func, assign.scope) or ""
        if is_loss_module(qualified) and batch_mean_reduced(value):
            found.setdefault(assign.function, set()).update(assign.targets)
    return MappingProxyType({function: frozenset(names) for function, names in found.items()})


def mean_over_rows(qualified: str | None, call: cst.Call) -> bool:
    """A loss (``qualified``: what ``call`` calls or constructs) that is the plain mean of its
    per-row losses (one of :data:`MEAN_LOSSES`) given, beyond a functional loss's input and target,
    nothing but ``reduction="mean"``: times the rows, it is the rows' sum, so it can be recomputed
    on gathered rows. Stricter than :func:`is_batch_mean_loss` (a weight or ``ignore_index`` makes a
    weighted mean); the loader-dict rule asks it of the loss it recomputes."""
    if qualified not in MEAN_LOSSES:
        return False
    inputs = 2 if is_loss_function(qualified) else 0
    return only_batch_mean_reduced(call.with_changes(args=call.args[inputs:]))


def only_batch_mean_reduced(call: cst.Call) -> bool:
    """A loss call or constructor given nothing but, at most, ``reduction="mean"``."""
    return all(arg.keyword is not None and arg.keyword.value == "reduction" for arg in call.args) and (
        batch_mean_reduced(call)
    )


def batch_mean_reduced(call: cst.Call) -> bool:
    """A loss call or constructor without ``reduction=`` (the mean), or with ``reduction="mean"``:
    its value averages over this process's batch. PyTorch's legacy arguments decide over
    ``reduction``: ``size_average=False`` sums the rows (the old MNIST example's and the spatial
    transformer tutorial's ``F.nll_loss(output, target, size_average=False)``), ``reduce=False``
    keeps one loss per row."""
    legacy = {
        arg.keyword.value
        for arg in call.args
        if arg.keyword is not None
        and arg.keyword.value in ("size_average", "reduce")
        and isinstance(arg.value, cst.Name)
        and arg.value.value == "False"
    }
    if legacy:
        return False
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "reduction":
            return isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "mean"
    return True


def is_batch_mean_loss(call: cst.Call, criteria: AbstractSet[str], facts: ScriptFacts) -> bool:
    """A call of one of ``criteria`` (:attr:`Locality.batch_mean_losses` of its function), or a
    ``torch.nn.functional`` loss averaging over the batch."""
    if dotted(call.func) in criteria:
        return True
    return is_loss_function(facts.callee_name(call.func) or "") and batch_mean_reduced(call)


def names_rank(test: cst.BaseExpression) -> bool:
    """Whether an expression reads a rank (``rank``, ``accelerator.is_main_process``,
    ``state.process_index``): its value differs from process to process."""
    return any(
        (isinstance(node, cst.Name) and node.value in RANK_NAMES)
        or (isinstance(node, cst.Attribute) and node.attr.value in RANK_NAMES)
        for node in nodes_in(test)
    )


def mentions_rank(test: cst.BaseExpression) -> bool:
    """An ``if`` test that picks processes as its code reads: it mentions ``RANK``/``LOCAL_RANK``
    (``os.environ["RANK"]``, ``args.local_rank``, ``dist.get_rank()``) or a main-process flag.
    Looser than :func:`names_rank`: the printing rule leaves a print under such a test as the
    script guarded it, so a false hit only keeps a print unchanged."""
    code = cst.Module([]).code_for_node(test)
    return any(word in code for word in ("RANK", "rank", "main_process"))


def tests_main_process(test: cst.BaseExpression, accelerator: str) -> bool:
    """``accelerator.is_main_process`` (or ``is_local_main_process``), also through an instance
    (``self.accelerator.is_main_process``, a training class's guard): the test of a region only
    the main process runs."""
    name = dotted(test) or ""
    return any(
        name == guard or name.endswith(f".{guard}")
        for guard in (f"{accelerator}.is_main_process", f"{accelerator}.is_local_main_process")
    )


def sums_per_rank(function: cst.FunctionDef) -> frozenset[str]:
    """The names the function adds up in a ``for`` loop that gathers and reduces nothing
    (``val_loss += criterion(model(x), y).item()`` over this rank's shard): each rank has its
    own value. Asked of the tree being converted, after the gathers earlier rules added."""
    found: set[str] = set()
    for loop in (node for node in nodes_in(function) if type(node) is cst.For):
        summed = {name for node in grown_in(loop.body) if (name := dotted(node.target)) is not None}
        if summed - found and not any(
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value in ("gather_for_metrics", "gather", "reduce", "all_reduce")
            for call in calls_in(loop.body)
        ):
            found |= summed
    return frozenset(found)


class RankReach:
    """Whether every process runs a statement being walked the same number of times, as far as
    the structure of the enclosing function shows: a collective (a barrier) may only be inserted
    where this holds. Not inside ``try`` (an exception on one rank skips the rest), ``while``
    (but ``while True:``), an ``if`` whose test calls something (``os.path.isdir``), names a rank,
    reads a value summed per rank or one not known to be the same on every rank
    (:func:`per_rank_bindings`: the last batch's loss, a number read from a file) or tests a
    parameter, or a ``for`` over anything but
    ``range``/``enumerate``/``itertools.count``/a loader. Up to the enclosing function, and
    beyond it through the function's calls: nowhere in a module-level function or a method some
    rank may not call (:attr:`Locality.called_on_some_ranks`: ``if not os.path.isdir(d):
    mkdir_p(d)``, ``self.make_dir(d)``, another module's ``utils.mkdir_p(d)``). Where an error
    raised inside may be caught by a handler that goes on, :meth:`error_caught_here` says so. The
    rule transformer asks it (``every_rank_reaches_here``) with the statements enclosing the one
    it visits."""

    def __init__(
        self,
        loaders: AbstractSet[str],
        qualified_name: Callable[[cst.BaseExpression], str | None],
        builtin: Callable[[cst.BaseExpression], str | None],
        locality: Locality,
        *,
        original: bool = False,
    ) -> None:
        self._loaders = loaders
        #: Asked of the original tree (where the calls of the script's functions stand), not of
        #: the tree as the rules converted it so far: an evaluation's sums and batch values are
        #: not taken as per rank there (the metrics rule gathers them), nor is a test of a
        #: parameter (a guess, there, rather than what the code shows); the sums training grows
        #: on each rank (:attr:`Locality.per_rank_sums`) are.
        self._original = original
        #: The module's :class:`Locality`: what is summed per rank (:meth:`Locality.summed_per_rank`).
        self._locality = locality
        self._qualified_name = qualified_name
        #: The builtin a name denotes where the walk is (None where the script binds it).
        self._builtin = builtin
        #: Per function (by identity, None for the module): :meth:`Locality.summed_per_rank`, asked once.
        self._sums: dict[int, frozenset[str]] = {}
        #: Per scope (by identity): :func:`per_rank_bindings`, asked once.
        self._per_rank: dict[int, frozenset[str]] = {}

    def every_rank_reaches(self, anchors: Sequence[cst.CSTNode], function: str = MODULE) -> bool:
        """Whether every rank runs what is inside the innermost of ``anchors`` (the module, then
        each enclosing statement, outermost first) alike, up to the enclosing function
        (``function``: its key in :attr:`Locality.per_rank_sums`)."""
        enclosing = next((node for node in reversed(anchors) if isinstance(node, cst.FunctionDef)), None)
        scope = enclosing if enclosing is not None else next(iter(anchors), None)
        for depth in range(len(anchors) - 1, -1, -1):
            node = anchors[depth]
            if isinstance(node, cst.ClassDef):
                return True
            if isinstance(node, cst.FunctionDef):
                # Inside a function, where every rank that calls it goes: every rank, unless some
                # rank may not call it (``if not os.path.isdir(d): mkdir_p(d)``).
                return _called_as(anchors, function) not in self._locality.called_on_some_ranks
            # ``try: main()\nexcept KeyboardInterrupt:``: every rank starts the ``try``'s body; that
            # another rank raised first ends the run, it does not make one rank skip a call.
            if self._original and isinstance(node, cst.Try) and _opens_body(node, anchors[depth + 1 :]):
                continue
            if not self._runs_alike_inside(node, enclosing, function):
                return False
            if isinstance(node, cst.If) and not self._original and self._reads_per_rank_value(node.test, scope):
                return False
        return True

    def called_on_some_ranks(self, anchors: Sequence[cst.CSTNode], function: str) -> bool:
        """Whether what is inside the innermost of ``anchors`` lies in a function (``function``:
        its key) that some rank may not call (:attr:`Locality.called_on_some_ranks`)."""
        in_function = any(isinstance(node, cst.FunctionDef) for node in anchors)
        return in_function and _called_as(anchors, function) in self._locality.called_on_some_ranks

    def error_caught_here(
        self, anchors: Sequence[cst.CSTNode], function: str | None = None, *, fetching: bool = False
    ) -> bool:
        """Whether an ``OSError`` raised inside the innermost of ``anchors`` may be caught by a
        handler that goes on: it stands in the body of a ``try`` of its function (or of the
        module's code) with such a handler (:meth:`_catches_and_goes_on`), or, given its
        ``function``'s key, in a function called there (:attr:`Locality.called_in_try`). The
        error of a folder made or removed; ``fetching``, that of a network fetch, which ``except
        requests.RequestException`` or ``except urllib.error.URLError`` catches too
        (:attr:`Locality.called_where_fetch_caught`).

        Why it matters: a folder made or removed there may fail on purpose (``try: mkdir_p(d)``
        / ``except FileExistsError: resume = True``). Made on the main process only before a
        barrier, the main process would raise past the barrier into the handler while the
        others wait at it (a hang); made with ``exist_ok=True`` the error the handler waits for
        never comes, and on one process the converted script would skip what the original's
        handler does (contract: one process computes what the original computed). Neither is
        right, so such a folder is left to every rank, each raising and handling as the
        original does on one process, and reported. Other writes are not asked: their errors
        (a full disk) are failures, not the script's flow. A handler that ends the run
        (``raise``, ``sys.exit(1)``) or catches no ``OSError`` (``except KeyboardInterrupt:``)
        changes nothing: the error ends the run as it would uncaught.

        A write that fetches over the network (``f.write(requests.get(url).text)``) is asked
        ``fetching``: made on the main process only, a failed fetch would send it past the
        barrier into the handler while the others wait there, or, with no barrier, the others
        would go on as if the file had come; it is left to every rank, each fetching and handling
        its error as the original does on one process, and reported."""
        called = self._locality.called_where_fetch_caught if fetching else self._locality.called_in_try
        if function is not None and _called_as(anchors, function) in called:
            if any(isinstance(node, cst.FunctionDef) for node in anchors):
                return True
        for depth in range(len(anchors) - 1, -1, -1):
            node = anchors[depth]
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                return False
            inner = anchors[depth + 1] if depth + 1 < len(anchors) else None
            # ``inner`` None: the statements of the ``try``'s blocks are asked (the rule
            # transformer's anchors end at the ``try``); taken as its body's, which at worst
            # reports a folder of a handler's block that is left to every rank anyway.
            if (
                isinstance(node, cst.Try)
                and (inner is None or _in_body(node, inner))
                and self._catches_and_goes_on(node, fetching=fetching)
            ):
                return True
        return False

    def _catches_and_goes_on(self, node: cst.Try, *, fetching: bool = False) -> bool:
        """Whether one of ``node``'s handlers catches an ``OSError`` (bare ``except:``,
        ``except Exception``, ``except OSError``, ``except (IOError, ValueError)``,
        ``except os.error``, another library's class deriving from it, ``except
        requests.RequestException``; an exception class of the script's own, or another
        library's that is no ``OSError``, is taken to catch none) and goes on: its body does not
        end in a ``raise`` or a ``sys.exit(...)`` (nor ``exit``/``quit``/``os._exit``). The
        ``OSError`` of a folder made or removed (:data:`CATCHING_OS_ERRORS`: ``except
        requests.RequestException`` catches no ``FileExistsError``), or, ``fetching``, that of a
        network fetch (:data:`CATCHING_FETCH_ERRORS`)."""
        caught_kinds = CATCHING_FETCH_ERRORS if fetching else CATCHING_OS_ERRORS
        for handler in node.handlers:
            caught = handler.type
            kinds = (
                [caught] if caught is None or not isinstance(caught, cst.Tuple) else [e.value for e in caught.elements]
            )
            if any(kind is None or self._names_os_error(kind, caught_kinds) for kind in kinds) and not self._ends_run(
                handler
            ):
                return True
        return False

    def _names_os_error(self, kind: cst.BaseExpression, caught: AbstractSet[str]) -> bool:
        """Whether the class an ``except`` names is one of ``caught`` (:data:`CATCHING_OS_ERRORS`
        or :data:`CATCHING_FETCH_ERRORS`): a builtin by what the name is where it stands (not a
        class of the script's own of that name), anything else by its qualified name
        (``os.error``, ``requests.RequestException``, ``from urllib.error import URLError``)."""
        if isinstance(kind, cst.Name):
            builtin = self._builtin(kind)
            if builtin is not None:
                return builtin in caught
        qualified = self._qualified_name(kind)
        return qualified is not None and "." in qualified and qualified in caught

    def _ends_run(self, handler: cst.ExceptHandler) -> bool:
        """Whether an ``except`` block's last statement re-raises, raises or exits."""
        body = handler.body
        last: cst.CSTNode | None = body if isinstance(body, cst.SimpleStatementSuite) else None
        if isinstance(body, cst.IndentedBlock) and body.body:
            last = body.body[-1]
        if not isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) or not last.body:
            return False
        small = last.body[-1]
        if isinstance(small, cst.Raise):
            return True
        call = small.value if isinstance(small, cst.Expr) else None
        if not isinstance(call, cst.Call):
            return False
        name = self._builtin(call.func) if isinstance(call.func, cst.Name) else self._qualified_name(call.func)
        return name in RUN_ENDING_CALLS

    def _reads_per_rank_value(self, test: cst.BaseExpression, scope: cst.CSTNode | None) -> bool:
        """Whether ``test`` reads a name that ``scope`` (the enclosing function, or the module)
        binds to a value not known to be the same on every rank (:func:`per_rank_bindings`)."""
        if scope is None:
            return False
        per_rank = self._per_rank.get(id(scope))
        if per_rank is None:
            per_rank = self._per_rank[id(scope)] = per_rank_bindings(
                scope, self._loaders, self._builtin, self._qualified_name
            )
        return any(isinstance(node, cst.Name) and node.value in per_rank for node in nodes_in(test))

    def _runs_alike_inside(self, node: cst.CSTNode, enclosing: cst.FunctionDef | None, function: str) -> bool:
        """Whether every rank that reaches the enclosing statement ``node`` runs what is inside it
        the same number of times (``enclosing``: the function holding it, ``function`` its key)."""
        if isinstance(node, cst.While):
            return _endless(node)  # ``while True:``: the same on every rank until a break (made to agree)
        if isinstance(node, (cst.Try, cst.TryStar, cst.Match)):
            return False
        if isinstance(node, cst.If):
            return self._taken_alike(node.test, enclosing, function)
        if isinstance(node, cst.For):
            return self._same_length_everywhere(node.iter)
        return True

    def _taken_alike(self, test: cst.BaseExpression, enclosing: cst.FunctionDef | None, function: str) -> bool:
        """Whether every rank takes the same branch of an ``if`` on ``test``: not when it calls
        something or names a rank, reads a value summed per rank or tests a parameter."""
        if any(isinstance(node, cst.Call) and not self._computes_alike(node) for node in nodes_in(test)):
            return False
        if names_rank(test):
            return False
        # ``if train_loss < best:`` with what ``train_epoch()`` summed on this rank, at module level too.
        summed = self._sums.get(id(enclosing))
        if summed is None:
            converted = None if self._original else enclosing
            summed = self._sums[id(enclosing)] = self._locality.summed_per_rank(function, converted)
        if any(isinstance(node, cst.Name) and node.value in summed for node in nodes_in(test)):
            return False
        return enclosing is None or self._original or not _tests_parameter(test, enclosing)

    def _computes_alike(self, call: cst.Call) -> bool:
        """``len(args.onnx_export)``: a builtin that only computes from its arguments (no file, no
        clock, no draw), so it gives every rank the same answer where they hold the same values
        (what the test reads is asked apart: sums per rank, parameters, per-rank bindings)."""
        return isinstance(call.func, cst.Name) and self._builtin(call.func) in PURE_BUILTINS

    def _same_length_everywhere(self, iterable: cst.BaseExpression) -> bool:
        if isinstance(iterable, cst.Call) and self._qualified_name(iterable.func) in ENDLESS_COUNTERS:
            return True  # endless on every rank: it ends at a break, which the rules make agree
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name):
            builtin = self._builtin(iterable.func)
            if builtin == "range":
                return True
            passes_through = builtin in ("enumerate", "zip") or self._qualified_name(iterable.func) in PROGRESS_BARS
            if passes_through and iterable.args:
                return all(self._same_length_everywhere(arg.value) for arg in iterable.args)
            return False
        name = dotted(iterable)
        return name is not None and name in self._loaders


def _called_as(anchors: Sequence[cst.CSTNode], function: str) -> str:
    """The key (as :attr:`Locality.called_on_some_ranks` has it) of the function or method that
    what is inside ``anchors`` runs in: ``Class.method`` in a method of a module-level class,
    else ``function`` (the module-level function's name)."""
    defs = [node for node in anchors if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    if len(defs) >= 2 and isinstance(defs[0], cst.ClassDef) and isinstance(defs[1], cst.FunctionDef):
        return f"{defs[0].name.value}.{defs[1].name.value}"
    return function


def _in_body(node: cst.Try, inner: cst.CSTNode) -> bool:
    """Whether ``inner`` (a compound statement, or a small statement) stands in ``node``'s body,
    not in a handler, its ``else`` or its ``finally``."""
    return any(
        statement is inner
        or (isinstance(statement, cst.SimpleStatementLine) and any(s is inner for s in statement.body))
        for statement in node.body.body
    )


def _opens_body(node: cst.Try, inner: Sequence[cst.CSTNode]) -> bool:
    """Whether the statement ``inner`` starts with is the first of ``node``'s body (a
    compound statement, or a small statement on the first line)."""
    if not inner:
        return False
    first = node.body.body[0]
    child = inner[0]
    return first is child or (isinstance(first, cst.SimpleStatementLine) and first.body[0] is child)


#: What an ``except`` names that catches the ``OSError`` a folder made or removed raises (a
#: ``FileExistsError`` of ``os.makedirs``): the builtins (``IOError`` and ``EnvironmentError`` are
#: ``OSError``), and ``os.error``.
CATCHING_OS_ERRORS = frozenset(
    {
        "BaseException",
        "Exception",
        "OSError",
        "IOError",
        "EnvironmentError",
        "FileExistsError",
        "FileNotFoundError",
        "IsADirectoryError",
        "NotADirectoryError",
        "PermissionError",
        "os.error",
    }
)
#: What an ``except`` names that catches the ``OSError`` a network fetch raises (a download that
#: fails): ``OSError`` and what it is caught as, the builtin connection and timeout errors, and
#: other libraries' classes deriving from ``OSError`` (``requests.RequestException``,
#: ``urllib.error.URLError``: :data:`LIBRARY_OS_ERRORS`).
CATCHING_FETCH_ERRORS = frozenset(
    {
        "BaseException",
        "Exception",
        "OSError",
        "IOError",
        "EnvironmentError",
        "os.error",
        "TimeoutError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        *LIBRARY_OS_ERRORS,
    }
)
#: Calls ending the run (an ``except`` block ending in one ends it as an uncaught error would).
RUN_ENDING_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
#: Builtins whose result depends only on their arguments.
PURE_BUILTINS = frozenset({"len", "int", "float", "str", "bool", "abs", "min", "max", "round", "isinstance"})
#: Calls whose result is what this process read from a file (its own copy, or one it wrote
#: itself): nothing shows it is the same on every rank. Attributes called on anything
#: (``f.read()``, ``Path(p).read_text()``, ``Image.open(p)``, ``np.loadtxt(p)``) ...
FILE_READING_METHODS = frozenset({"open", "read", "readline", "readlines", "read_text", "loadtxt", "read_csv"})
#: ... and, called by a plain name, the builtin ``open`` (not a ``def open`` of the script) or a
#: library's reading function by qualified name (``from numpy import loadtxt``).
FILE_READING_FUNCTIONS = frozenset({"numpy.loadtxt", "pandas.read_csv"})
#: Methods whose result every rank shares (the accelerator's collectives).
AGREEING_CALLS = frozenset(
    {"gather_for_metrics", "gather", "reduce", "all_reduce", "broadcast", "pad_across_processes"}
)


#: The qualified name of an import an expression denotes where the scope being read uses it.
QualifiedNameOf = Callable[[cst.BaseExpression], "str | None"]


def per_rank_bindings(
    scope: cst.CSTNode, loaders: AbstractSet[str], builtin: BuiltinOf, qualified_name: QualifiedNameOf
) -> frozenset[str]:
    """The names ``scope`` (a function, or the module without its definitions) holds, after its
    last binding in source order, a value not known to be the same on every rank: each rank's
    batches (a loop over a loader), what it read from a file (``float(f.read())``, the builtin
    ``open``, not one the script defines), and what is computed from them (``last =
    loss.item()``, the last batch's loss) unless a collective made it agree (``output, y =
    accelerator.gather_for_metrics((output, y))``). ``builtin`` and ``qualified_name`` answer
    for names used in ``scope``."""
    per_rank: set[str] = set()
    reads_a_file = _file_read_question(builtin, qualified_name)
    for node in _bindings_in_order(scope):
        if isinstance(node, cst.For):
            local = _reads_any(node.iter, per_rank) or _iterates_a_loader(node.iter, loaders, builtin)
            index = _batch_index(node, builtin) if local else ()
            _mark(per_rank, [name for name in target_names(node.target, plain=True) if name not in index], local)
            _mark(per_rank, index, False)
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            _mark(
                per_rank,
                target_names(cast(cst.BaseExpression, node.asname.name), plain=True),
                _per_rank_value(node.item, per_rank, reads_a_file),
            )
        elif isinstance(node, cst.Assign):
            names = [name for target in node.targets for name in target_names(target.target, plain=True)]
            _mark(per_rank, names, _per_rank_value(node.value, per_rank, reads_a_file))
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            names = list(target_names(node.target, plain=True))
            grown = isinstance(node, cst.AugAssign) and bool(per_rank.intersection(names))
            _mark(per_rank, names, grown or _per_rank_value(node.value, per_rank, reads_a_file))
    return frozenset(per_rank)


def _file_read_question(builtin: BuiltinOf, qualified_name: QualifiedNameOf) -> Callable[[cst.Call], bool]:
    """Whether a call reads a file: the builtin ``open``, a reading method
    (:data:`FILE_READING_METHODS`) or a library's reading function (:data:`FILE_READING_FUNCTIONS`)."""

    def reads_a_file(call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in FILE_READING_METHODS:
            return True
        return builtin(func) == "open" or qualified_name(func) in FILE_READING_FUNCTIONS

    return reads_a_file


def _iterates_a_loader(iterated: cst.BaseExpression, loaders: AbstractSet[str], builtin: BuiltinOf) -> bool:
    """Whether a loop takes its items from a loader (``loader``, ``enumerate(loader)``), not from
    its length (``range(len(loader))``: a prepared loader has as many batches on every rank)."""
    lengths = {id(n) for call in calls_in(iterated) if builtin(call.func) == "len" for n in nodes_in(call)}
    return any(
        isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) in loaders and id(n) not in lengths
        for n in nodes_in(iterated)
    )


def _batch_index(loop: cst.For, builtin: BuiltinOf) -> tuple[str, ...]:
    """``i`` of ``for i, batch in enumerate(loader)`` (the builtin ``enumerate``): every rank counts
    the same batches (a prepared loader gives each the same number), so the index agrees where the
    batch does not."""
    iterated, target = loop.iter, loop.target
    if not (isinstance(iterated, cst.Call) and builtin(iterated.func) == "enumerate"):
        return ()
    if not isinstance(target, (cst.Tuple, cst.List)) or not target.elements:
        return ()
    return tuple(target_names(target.elements[0].value, plain=True))


def _bindings_in_order(scope: cst.CSTNode) -> list[cst.CSTNode]:
    """The loops, ``with`` items and assignments of ``scope`` in source order, not inside the
    functions and classes it defines."""
    found: list[cst.CSTNode] = []
    pending: list[cst.CSTNode] = list(reversed(child_nodes(scope)))
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, (cst.For, cst.WithItem, cst.Assign, cst.AugAssign, cst.AnnAssign)):
            found.append(node)
        pending.extend(reversed(child_nodes(node)))
    return found


def _mark(per_rank: set[str], names: Sequence[str], local: bool) -> None:
    if local:
        per_rank.update(names)
    else:
        per_rank.difference_update(names)


def _per_rank_value(
    value: cst.BaseExpression, per_rank: AbstractSet[str], reads_a_file: Callable[[cst.Call], bool]
) -> bool:
    calls = calls_in(value)
    if any(isinstance(call.func, cst.Attribute) and call.func.attr.value in AGREEING_CALLS for call in calls):
        return False
    if any(reads_a_file(call) for call in calls):
        return True
    return _reads_any(value, per_rank)


def _reads_any(value: cst.BaseExpression, names: AbstractSet[str]) -> bool:
    return any(isinstance(node, cst.Name) and node.value in names for node in nodes_in(value))


def _tests_parameter(test: cst.BaseExpression, function: cst.FunctionDef) -> bool:
    """Whether the test reads a parameter of the function as a plain value (``if save_best:``,
    ``if is_best and epoch > 5:``): a flag its callers compute, often from a metric each rank
    has for its own shard (pytorch-template's ``_save_checkpoint(epoch, save_best=best)``), so
    not known to be the same on every rank. An attribute of one (``args.save_model``) is an
    option, read alike everywhere."""
    params = set(parameter_names(function))
    pending: list[cst.CSTNode] = [test]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Name) and node.value in params:
            return True
        if isinstance(node, cst.Attribute):
            continue  # ``args.save_model``, ``self.best``: not the parameter itself
        pending.extend(child_nodes(node))
    return False


def _endless(loop: cst.While) -> bool:
    """``while True:`` (or ``while 1:``)."""
    test = loop.test
    return (isinstance(test, cst.Name) and test.value == "True") or (
        isinstance(test, cst.Integer) and test.value == "1"
    )


def locality_of(facts: ScriptFacts) -> Locality:
    """The module's :class:`Locality` (a rule asking it lists :data:`locality` in its
    ``providers``). Facts built by hand in rule tests carry no provider results: their answer is
    drawn from the fields they were given."""
    if locality.name in facts.rule_results:
        return facts.of(locality)
    return Locality(
        per_process_paths=frozenset(facts.per_process_paths),
        rank_dependent_breaks=tuple(facts.rank_dependent_breaks),
        agreeable_breaks=tuple(facts.agreeable_breaks),
        rank_dependent_schedule_steps=tuple(facts.rank_dependent_schedule_steps),
        shared_draws=tuple(facts.shared_draws),
        working_functions=_working_functions(facts),
    )
