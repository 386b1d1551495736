"""Process locality: values only one process has or that differ between processes (per-process
paths, sums of this process's batches deciding a ``break`` or a schedule), and downloads."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.facts import MODULE, callers_closure
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.random_draws import is_global_draw, seeds_generator_of
from accel_convert.codemods.engine.syntax import (
    dotted,
    names_in,
    nodes_in,
    parameter_filled,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    COLLECTING_METHODS,
    NETWORK_FETCHES,
    PATH_CONSTRUCTORS,
    PER_PROCESS_PATHS,
    RANDOM_SPLITS,
)
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
    AugAssignRecord,
    CallRecord,
)
from accel_convert.codemods.model.state import Analysis


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


def statement_downloads(statement: cst.BaseStatement, download_functions: AbstractSet[str]) -> bool:
    """A statement calling something with ``download=`` anything but ``False``, or a function of
    the script that fetches files over the network (``root = download_dataset()``): the main
    process must run it first (ACC115), so the accelerator is created above it (ACC101). A
    compound statement is not one: the downloads in its blocks are judged one by one."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    pending: list[cst.CSTNode] = list(statement.body)
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in download_functions:
            return True
        if isinstance(node, cst.Call) and any(
            arg.keyword is not None
            and arg.keyword.value == "download"
            and not (isinstance(arg.value, cst.Name) and arg.value.value == "False")
            for arg in node.args
        ):
            return True
        pending.extend(node.children)
    return False


@provider(needs=("call_graph", "home_kind", "main_function", "creating_function"), provides=("download_functions",))
def download_functions(a: Analysis) -> None:
    """Functions fetching files over the network, directly or through their calls (a hand-written
    dataset download), other than the home block's."""
    found = {call.function for call in a.r.calls if a.qualified(call) in NETWORK_FETCHES}
    found = callers_closure(found & set(a.r.defs), a.facts.call_graph, among=set(a.r.defs))
    a.facts.download_functions = found - {a.facts.home_function, a.facts.creating_function or ""}


@provider(
    needs=(
        "loss_names",
        "batch_names",
        "models",
        "schedulers",
        "accessible_functions",
        "backward_functions",
        "loop_backward",
        "loop_calls",
        "existing_accelerator",
    ),
    provides=("rank_dependent_breaks", "agreeable_breaks", "rank_dependent_schedule_steps"),
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
    sums = _per_process_sums(a, tainted)
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


def _per_process_sums(a: Analysis, tainted: set[str]) -> set[str]:
    """Names that hold this process's share of the training: a sum grown in a loop that runs
    the backward (``train_loss += loss.item() * n``), what is computed from it (``train_loss /=
    len(dataset)``, returned by the function that trains an epoch), and what is decided by it
    (``bad_epochs += 1`` under ``if train_loss >= best``), including an object fed it
    (``stopper(train_loss)``, then ``if stopper.early_stop: break``). Early stopping on such a
    value leaves the loop on one process first; the others wait in their next all-reduce.
    Evaluation sums are not among them: their gathered outputs agree on every process."""
    sums = _sums_grown_in_training(a, tainted)
    if sums:
        _spread_from(a, sums)
    return sums


def _sums_grown_in_training(a: Analysis, tainted: set[str]) -> set[str]:
    """What a loop running the backward grows from per-rank values: ``total += loss.item()``,
    ``losses.append(loss.item())`` (then ``np.mean(losses)``), ``meter.update(loss.item(), n)``:
    a sum, list or meter of this process's batch losses."""
    sums: set[str] = set()
    for aug in a.r.aug_assigns:
        if aug.loops and aug.loops[-1].has_backward and aug.mentions.names & tainted:
            sums.update(aug.targets)
    for call in a.r.calls:
        func = call.node.func
        if (
            call.loops
            and call.loops[-1].has_backward
            and isinstance(func, cst.Attribute)
            and func.attr.value in COLLECTING_METHODS
            and (owner := dotted(func.value)) is not None
            and any(names_in(arg.value) & tainted for arg in call.node.args)
        ):
            sums.add(owner)
    return sums


def _spread_from(a: Analysis, sums: set[str]) -> None:
    """Add to ``sums`` what is computed from them, returned with them, decided by them, or an
    object fed them, until nothing changes."""
    # Read once: the fixed point below only intersects these with the growing ``sums``.
    returns = [(function, names_in(value)) for function, value in a.r.returns]
    feeds = [
        (fed, set().union(*(names_in(arg.value) for arg in call.node.args)))
        for call in a.r.calls
        if call.node.args and (fed := _object_fed(a, call.node)) is not None
    ]
    records: list[AssignRecord | AugAssignRecord] = [*a.r.assigns, *a.r.aug_assigns]
    changed = True
    while changed:
        changed = False
        returning = {function for function, names in returns if names & sums}
        for record in records:
            if not set(record.targets) <= sums and _follows_from(record, sums, returning):
                sums.update(record.targets)
                changed = True
        for fed, names in feeds:
            if fed not in sums and names & sums:
                sums.add(fed)
                changed = True


def _follows_from(record: AssignRecord | AugAssignRecord, sums: set[str], returning: set[str]) -> bool:
    """Whether an assignment reads one of ``sums``, calls a function returning one, or runs under
    an ``if`` testing one."""
    decided = any(branch.test.names & sums for branch in record.ifs)
    # What it reads: its mentions include its own targets (``best, bad = inf, 0``).
    read = record.mentions.names - set(record.targets)
    return bool(read & sums or record.mentions.calls & returning or decided)


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
    needs=("call_graph", "loop_backward", "models"),
    provides=("shared_draws", "shared_draw_lines", "drawing_functions"),
)
def shared_draws(a: Analysis) -> None:
    """Draws from a global generator that no seeding call before them makes agree, and that decide
    what the processes share: ``lr = random.uniform(1e-4, 1e-2)`` in ``main()``, a split drawn
    at module level, a target drawn in a class's ``__init__`` or a config helper of another
    module. Each process draws its own, so each trains with other hyperparameters, on another
    split, or names its checkpoint after its own draw. A draw in a loop that trains (a batch of
    synthetic data) or handed straight to a dataset or a model (samples), in a method that is no
    ``__init__`` (a dataset's ``__getitem__``), in a DataLoader's ``worker_init_fn`` (the
    per-worker diversity the script asks for) or in a function only such code calls is per
    process on purpose. Whether a seed comes first is decided in run order (:data:`RunPath`), for
    the generator each seed seeds. Also the functions and classes making one, and the lines of
    their calls: the accelerator is created above the first, and agrees the generators there."""
    workers = _worker_init_functions(a)
    calls = [(call, _callee(a, call)) for call in a.r.calls if not _per_process_draw(a, call, workers)]
    paths = _run_paths(a, calls)
    seeds = [
        (paths[call.function] + (a.site(call.node).line,), a.facts.callee_name(call.node.func, call.scope) or "")
        for call, _ in calls
        if call.function in paths and _is_seeding(a, call)
    ]
    imported = a.seeds.drawing_functions if a.seeds is not None else frozenset()
    data = _drawn_data(a)
    for call, callee in calls:
        # An imported function that draws: what it draws from is not known here (any seed but
        # torch's alone seeds it).
        drawn = "random" if callee in imported else a.qualified(call) or ""
        if call.function not in paths or id(call.node) in data:
            continue
        if not (callee in imported or _draws_globally(call, drawn)):
            continue
        path = paths[call.function] + (a.site(call.node).line,)
        if any(seed < path and seeds_generator_of(name, drawn) for seed, name in seeds):
            continue
        a.facts.shared_draws.append(a.site(call.node))
        a.facts.shared_draw_lines.add(path[-1])
        if call.function != MODULE:
            a.facts.drawing_functions.add(call.function)
    _callers_of_drawing_functions(a, calls)


def _drawn_data(a: Analysis) -> set[int]:
    """Draws handed straight to a dataset, a loader or a model (``TensorDataset(torch.randn(64,
    8))``, ``model.decode(torch.randn(4, 2))``): samples, per process like a shard of data (ids
    of the calls)."""
    models = a.facts.models
    return {
        id(arg.value)
        for call in a.r.calls
        if (a.qualified(call) or "").startswith("torch.utils.data.")
        or (dotted(call.node.func) or "").partition(".")[0] in models
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
    of a program that its entry imports runs its functions when the entry calls them: each
    starts with no path of its own there."""
    paths: dict[str, RunPath] = {MODULE: ()}
    if a.seeds is not None and a.seeds.library:
        paths.update(dict.fromkeys([*a.r.defs, *a.r.classes], ()))
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
