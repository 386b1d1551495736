"""File flow: which files one process writes and the others read later in the run.

A checkpoint goes through ``accelerator.save``, which writes on the main process only; a rank
that reads the same file afterwards (``torch.load`` further down the function, in a function
called later, or in a function the caller runs after the saving one: MorvanZhou's ``save()``
then ``restore_net()`` at the top level) must not get there before the main process has
written it. This provider pairs each such main-only write with the reads that may run after it
and open the same file. The rules decide where the barrier goes from it (after the write, on
every rank, where no barrier can go before the read).

A path is matched by what can be told from the code without running it: a string literal, an
f-string or ``os.path.join`` whose unknown parts match anything (``f"{out}/epoch_{n}.pt"``), a
name bound once to one of those in the function or at the top level. Anything else (a
parameter, an attribute) may be any file: such a read pairs with every earlier write, and such
a write with every later read. Two known paths that cannot be the same file
(``"net.pkl"``, ``"net_params.pkl"``) do not pair.

It also owns the files an evaluation writes once per batch, named by the batch's index
(:func:`per_batch_file_loaders`): their loader stays unprepared so every file of the original is
written, and :func:`per_batch_writes` tells the check (ACC936) where that cannot be done.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.facts import MODULE, FactQuestions
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.iteration import enumerate_index
from accel_convert.codemods.engine.names import NameTable, ScopeKey, builtins_at
from accel_convert.codemods.engine.syntax import (
    argument_for,
    assigns_at_top,
    bound_by,
    class_methods,
    dotted,
    names_in,
    nodes_in,
    parameter_filled,
    parameter_names,
)
from accel_convert.codemods.engine.torch_names import (
    CHECKPOINT_READS,
    CHECKPOINT_WRITES,
    FOLDER_FUNCTIONS,
    PATH_JOINS,
    WRITING_FUNCTIONS,
    WRITING_METHODS,
)
from accel_convert.codemods.engine.walk import child_nodes
from accel_convert.codemods.model.calls import instance_class, program_instance_class
from accel_convert.codemods.model.locality import collects, counter_step, names_rank, per_batch_values
from accel_convert.codemods.model.provider import provider, rule_provider
from accel_convert.codemods.model.recorder import AssignRecord, CallRecord, LoopRecord
from accel_convert.codemods.model.state import Analysis, PerRankLoop
from accel_convert.records import record

_EMPTY = cst.Module([])
#: The part of a path pattern that may be anything (a character no path holds).
ANY = "\x00"


@record(frozen=True, eq=False, repr=False)
class FileFlow:
    """(write line, read function, read line): a read that may open, later in the run, the file
    the write on that (original) line wrote."""

    pairs: frozenset[tuple[int, str, int]] = frozenset()
    #: Lines calling a function of another module of the program that writes the file its
    #: argument names (``save_checkpoint(model, "model.pt")``): writes of the main process, as an
    #: ``accelerator.save`` line is.
    writes_through_calls: frozenset[int] = frozenset()
    #: (function, line) of calls of another module's function that reads the file its argument
    #: names where no barrier may go before the read (``if os.path.isfile(path):`` there): the
    #: ranks wait after the write instead.
    reads_through_calls: frozenset[tuple[str, int]] = frozenset()

    def read_after(self, write_line: int) -> frozenset[tuple[str, int]]:
        """The reads (function, line) that may open what the write on ``write_line`` wrote."""
        return frozenset((function, line) for written, function, line in self.pairs if written == write_line)


@record(frozen=True, eq=False, repr=False)
class _Access:
    """A path a function opens, and on which line."""

    function: str
    line: int
    #: The path as a pattern (``ANY`` for what may be anything); None: unknown.
    path: str | None


@rule_provider(needs=("call_graph",))
def file_flow(a: Analysis) -> FileFlow:
    """Each main-only write paired with the reads of the same file that may run after it. A call
    of another module's function writing (or reading) the file at one of its parameters is such a
    write (or read) of the path it passes, at the call (the program's ``path_writers`` and
    ``path_readers``, from :func:`path_parameters` of that module)."""
    seeds = a.seeds
    writers = _by_callee(seeds.path_writers if seeds is not None else ())
    readers = _by_callee(seeds.path_readers if seeds is not None else ())
    written_by_calls, read_by_calls = _accesses_through_calls(a, writers), _accesses_through_calls(a, readers)
    writes = _accesses(a, CHECKPOINT_WRITES) + written_by_calls
    reads = _accesses(a, CHECKPOINT_READS) + read_by_calls
    if not writes or not reads:
        return FileFlow()
    order = _RunOrder(a)
    pairs = set()
    for write in writes:
        for read in reads:
            if _same_file(write.path, read.path) and order.runs_after(write.function, write.line, read):
                pairs.add((write.line, read.function, read.line))
    return FileFlow(
        frozenset(pairs),
        frozenset(write.line for write in written_by_calls),
        frozenset((read.function, read.line) for read in read_by_calls),
    )


def _accesses(a: Analysis, table: dict[str, tuple[str, int]]) -> list[_Access]:
    found = []
    for call in a.r.calls:
        where = table.get(a.qualified(call) or "")
        if where is not None:
            keyword, position = where
            found.append(_access(a, call, argument_for(call.node, position, keyword)))
    return found


def _access(a: Analysis, call: CallRecord, argument: cst.Arg | None) -> _Access:
    path = None if argument is None else _pattern(a, argument.value, call.function, depth=3)
    return _Access(call.function, a.site(call.node).line, path)


def _by_callee(entries: tuple[tuple[str, int, str], ...]) -> dict[str, tuple[str, int]]:
    """Qualified function → (parameter, position) of the path it writes or reads."""
    return {function: (param, position) for function, position, param in entries}


def _accesses_through_calls(a: Analysis, functions: dict[str, tuple[str, int]]) -> list[_Access]:
    """The calls of ``functions`` (of other modules of the program), as accesses of the path
    they pass."""
    found = []
    for call in a.r.calls if functions else ():
        where = functions.get(program_callee(a.facts, call.node.func, call.scope) or "")
        if where is not None:
            param, position = where
            found.append(_access(a, call, argument_for(call.node, position, param)))
    return found


@provider(provides=("path_parameter_writes", "path_parameter_reads"))
def path_parameters(a: Analysis) -> None:
    """The module-level functions writing a checkpoint to the path one of their parameters holds
    (``def save_checkpoint(model, path): torch.save(model.state_dict(), path)``), and those
    reading one there where no barrier may go before the read (under an ``if`` or in a loop: ``if
    os.path.isfile(path): model.load_state_dict(torch.load(path))``), as (function, position,
    parameter). Another module of the program calling one writes or reads the file it names
    (:func:`file_flow` there); a read straight in the function's body waits for the ranks where
    it stands, so it is left out."""
    a.facts.path_parameter_writes = _parameter_paths(a, CHECKPOINT_WRITES, conditional=False)
    a.facts.path_parameter_reads = _parameter_paths(a, CHECKPOINT_READS, conditional=True)


def _parameter_paths(a: Analysis, table: dict[str, tuple[str, int]], conditional: bool) -> set[tuple[str, int, str]]:
    found = set()
    for call in a.r.calls:
        where = table.get(a.qualified(call) or "")
        params = a.r.defs.get(call.function) if call.scope == (call.function,) else None
        if where is None or params is None or (conditional and not (call.ifs or call.loops)):
            continue
        argument = argument_for(call.node, where[1], where[0])
        if argument is not None and isinstance(argument.value, cst.Name) and argument.value.value in params:
            found.add((call.function, params.index(argument.value.value), argument.value.value))
    return found


def _pattern(a: Analysis, value: cst.BaseExpression, function: str, depth: int) -> str | None:
    """``value`` as a path pattern, None when nothing of it is known."""
    if isinstance(value, cst.SimpleString):
        evaluated = value.evaluated_value
        return evaluated if isinstance(evaluated, str) else None
    if isinstance(value, cst.FormattedString):
        return "".join(part.value if isinstance(part, cst.FormattedStringText) else ANY for part in value.parts)
    if isinstance(value, (cst.ConcatenatedString, cst.BinaryOperation)):
        if isinstance(value, cst.BinaryOperation) and not isinstance(value.operator, cst.Add):
            return None
        return (_pattern(a, value.left, function, depth) or ANY) + (_pattern(a, value.right, function, depth) or ANY)
    scope = () if function == MODULE else (function,)
    if isinstance(value, cst.Call) and a.r.names.qualified_name(value.func, scope, strict=False) in PATH_JOINS:
        parts = [_pattern(a, arg.value, function, depth) or ANY for arg in value.args if not arg.star]
        return "/".join(parts) if parts else None
    if isinstance(value, cst.Name) and depth > 0:
        return _bound(a, value.value, function, depth - 1)
    return None


def _bound(a: Analysis, name: str, function: str, depth: int) -> str | None:
    """The pattern of the one value ``name`` is bound to in ``function`` (or, bound nowhere
    there, at the top level); None when it is bound to several or to nothing known."""
    for scope in (function, MODULE):
        values = [assign.value for assign in a.r.assigns if assign.function == scope and name in assign.targets]
        if values:
            patterns = {_pattern(a, value, scope, depth) for value in values}
            return patterns.pop() if len(patterns) == 1 else None
    return None


def _same_file(first: str | None, second: str | None) -> bool:
    """Whether two path patterns may name the same file: the whole paths, and the file names
    (after the last ``/``), may match."""
    if first is None or second is None:
        return True
    return _may_match(first, second) and _may_match(first.rsplit("/", 1)[-1], second.rsplit("/", 1)[-1])


def _may_match(first: str, second: str) -> bool:
    if ANY not in first or ANY not in second:
        literal, pattern = (first, second) if ANY not in first else (second, first)
        return re.fullmatch(".*".join(re.escape(part) for part in pattern.split(ANY)), literal) is not None
    # Both have unknown parts: what comes before the first and after the last must agree.
    head = (first.split(ANY, 1)[0], second.split(ANY, 1)[0])
    tail = (first.rsplit(ANY, 1)[1], second.rsplit(ANY, 1)[1])
    return (head[0].startswith(head[1]) or head[1].startswith(head[0])) and (
        tail[0].endswith(tail[1]) or tail[1].endswith(tail[0])
    )


class _RunOrder:
    """Which code runs after a given call site: what follows it in its function (and what that
    calls), then what follows each call of that function in its callers, up to the top level."""

    def __init__(self, a: Analysis) -> None:
        self.a = a
        #: Function (or class, for its methods) → (line, callee) of its calls of the file's
        #: functions and classes.
        self.calls: dict[str, list[tuple[int, str]]] = {}
        self._reached: dict[str, set[str]] = {}
        for call in a.r.calls:
            callee = _callee(a, call)
            if callee is not None:
                self.calls.setdefault(call.function, []).append((a.site(call.node).line, callee))

    def runs_after(self, function: str, line: int, read: _Access) -> bool:
        pending, seen = [(function, line)], set()
        while pending:
            current, after = pending.pop()
            if (current, after) in seen:
                continue
            seen.add((current, after))
            if current == read.function and read.line > after:
                return True
            if any(read.function in self._reachable(callee) for _, callee in self._calls(current, after)):
                return True
            pending.extend(
                (caller, called)
                for caller, sites in self.calls.items()
                for called, callee in sites
                if callee == current
            )
        return False

    def _reachable(self, function: str) -> set[str]:
        """``function`` and every function and class it runs, transitively."""
        if function in self._reached:
            return self._reached[function]
        found, pending = {function}, [function]
        while pending:
            for _, callee in self.calls.get(pending.pop(), ()):
                if callee not in found:
                    found.add(callee)
                    pending.append(callee)
        self._reached[function] = found
        return found

    def _calls(self, function: str, after: int) -> Iterator[tuple[int, str]]:
        return ((line, callee) for line, callee in self.calls.get(function, ()) if line > after)


def _callee(a: Analysis, call: CallRecord) -> str | None:
    """The file's function or class (for a method) a call runs."""
    func = call.node.func
    if isinstance(func, cst.Name) and (func.value in a.r.defs or func.value in a.r.classes):
        return func.value
    if isinstance(func, cst.Attribute):
        return instance_class(a, call, func.value)
    return None


#: Why a kept file stays on every rank (``ScriptFacts.handles_left_on_every_rank``).
HANDLE_READ_BACK = "read back later in the run"
HANDLE_READ_THROUGH = "reading what the file held through the handle itself (an 'r+' or 'a+' mode)"


@provider(
    needs=("call_graph", "file_logger_classes", "handle_openers"),
    provides=(
        "handles_main_process_writes",
        "handles_left_on_every_rank",
        "classes_opening_handles",
        "main_process_openers_out",
    ),
)
def kept_handles(a: Analysis) -> None:
    """Each file opened for writing and bound to a name (a local, a module global, an instance's
    attribute) that the script writes through where every rank does (``log.write(...)``,
    ``print(..., file=log)``, ``csv.writer(log)``, in the binding function, in any function
    reading the global, in any method of the class): every rank would open the file and write
    its lines into it, one rank's over or after another's (deep-text-recognition's ``log =
    open(f"./saved_models/{name}/log_train.txt", "a")`` in ``train()``, a class's ``self.log =
    open(path, "a")`` in ``__init__``, a notebook's module-level ``log``). Where nothing may read
    the file later in the run (a read of the same path, see :class:`_RunOrder`), the main process
    alone writes it (``handles_main_process_writes``, by the (line, column) of the ``open`` call:
    the others open ``os.devnull`` in :func:`devnull_mode`), and the accelerator is created above
    the ``open`` (the conversion plan's ``created_before_lines``), or above each construction of
    the class whose ``__init__`` opens it (``classes_opening_handles``); elsewhere it stays on
    every rank, and the rule reports it (``handles_left_on_every_rank``: why). A handle written
    only under a test of a rank (``if rank == 0: log.write(...)``) is the script's own choice, and
    a logger class's (:func:`file_loggers`) is built on the main process only.

    A handle another module's function (or a method of its class) opens and hands back
    (``log = logs.open_log(folder, name)``, ``log = runs.open_log(name)``) is opened there: where
    it is kept for writing alone here, the call is one of ``handles_main_process_writes`` (the
    accelerator is created above it) and the program is told so (``main_process_openers_out``);
    where every module calling the opener agrees, the opener opens the file on the main process
    only (its own open, in ``handles_main_process_writes`` of that module: the seeds'
    ``opened_on_main_process``), and every rank calls it, so its own barriers are reached by all."""
    _returned_opens_on_main_process(a)
    handles = [
        (assign, call, handle)
        for assign, call in _handle_opens(a)
        if (handle := _handle_key(a, assign)) is not None and _written_on_every_rank(a, assign, handle)
    ]
    _openers_called_otherwise(a, {id(call.node) for _, call, _ in handles})
    if not handles:
        return
    reads = [*_accesses(a, CHECKPOINT_READS), *_file_reads(a)]
    order = _RunOrder(a)
    for assign, call, _ in handles:
        site = a.site(call.node)
        mode = _handle_mode(a, call) or ""
        # What another module's function opens may be any file (its path is its own business).
        opened_here = a.facts.opens_for_writing(call.node, assign.scope)
        written = _access(a, call, argument_for(call.node, 0, "file") if opened_here else None)
        if other_ranks_file(mode) is None:
            a.facts.handles_left_on_every_rank[(site.line, site.column)] = HANDLE_READ_THROUGH
        elif any(
            read.line != written.line
            and _same_file(written.path, read.path)
            and order.runs_after(written.function, written.line, read)
            for read in reads
        ):
            a.facts.handles_left_on_every_rank[(site.line, site.column)] = HANDLE_READ_BACK
        else:
            a.facts.handles_main_process_writes.add((site.line, site.column))
            if assign.scope[1:] == ("__init__",) and assign.scope[0] in a.r.classes:
                a.facts.classes_opening_handles.add(assign.scope[0])
        if not opened_here:
            _opener_verdict(a, call, (site.line, site.column) in a.facts.handles_main_process_writes)


def _opener_verdict(a: Analysis, call: CallRecord, main_only: bool) -> None:
    """Tell the program whether this call of another module's handle opener keeps its file for
    writing alone (``main_only``), joined with the module's other calls of it."""
    opener = _opener_called(a, call)
    if opener is not None:
        a.facts.main_process_openers_out[opener] = a.facts.main_process_openers_out.get(opener, True) and main_only


def _openers_called_otherwise(a: Analysis, kept: set[int]) -> None:
    """Any call of a handle opener but those of ``kept`` handles (``with logs.open_log(...) as
    f:``, a handle written under a test of a rank) keeps the opener as written: the file may be
    used otherwise there."""
    for call in a.r.calls if a.seeds is not None and a.seeds.handle_openers else ():
        if id(call.node) not in kept:
            _opener_verdict(a, call, False)


def _returned_opens_on_main_process(a: Analysis) -> None:
    """The ``open`` calls of this module's handle openers that every module calling them keeps
    for writing alone (the seeds' ``opened_on_main_process``): the main process alone writes them."""
    own = a.seeds.opened_on_main_process if a.seeds is not None else frozenset()
    for key, _, value in _returned_opens(a) if own else ():
        if key in own:
            site = a.site(value)
            a.facts.handles_main_process_writes.add((site.line, site.column))


def _returned_opens(a: Analysis) -> Iterator[tuple[str, ScopeKey, cst.Call]]:
    """(key, scope, ``open`` call) of each module-level function or method of a module-level
    class returning a file it opens for writing: ``return open(path, "w")``, or ``return f`` of
    the one ``f = open(path, "w")`` it binds; keyed by the function's name, or
    ``Class.method``."""
    returned: list[tuple[str, ScopeKey, cst.BaseExpression]] = [
        (function, (function,), value) for function, value in a.r.returns if function in a.r.defs
    ]
    returned += [
        (".".join(scope), scope, value)
        for scope, value in a.r.method_returns
        if value is not None and len(scope) == 2 and scope[0] in a.r.classes
    ]
    for key, scope, value in returned:
        if isinstance(value, cst.Name):
            bound = [assign.value for assign in a.r.assigns if assign.scope == scope and value.value in assign.targets]
            value = bound[0] if len(bound) == 1 else value
        if isinstance(value, cst.Call) and a.facts.opens_for_writing(value, scope):
            yield key, scope, value


def _opener_called(a: Analysis, call: CallRecord) -> str | None:
    """The handle opener of another module of the program (qualified) a call runs: a function
    (``logs.open_log(...)``), or a method of an instance of its class (``runs.open_log(...)``
    after ``runs = logs.RunFolder(...)``: ``logs.RunFolder.open_log``); None for any other call."""
    seeds = a.seeds
    openers = dict(seeds.handle_openers) if seeds is not None else {}
    direct = program_callee(a.facts, call.node.func, call.scope)
    if direct in openers:
        return direct
    func = call.node.func
    if not isinstance(func, cst.Attribute) or direct is not None:
        return None
    owner = _program_target(a, call)
    method = None if owner is None else f"{owner}.{func.attr.value}"
    return method if method in openers else None


def opened_handle_mode(facts: FactQuestions, node: cst.BaseExpression, scope: ScopeKey) -> str | None:
    """The mode of the file a call opens for writing and hands back: the builtin ``open``'s
    (``open(path, "w")``), or that of a function of another module of the program returning one
    (``utils.open_log(path)``, the program's ``handle_openers``); None for anything else."""
    if facts.opens_for_writing(node, scope):
        return facts.open_mode(node, scope)
    seeds = facts.program
    if seeds is None or not seeds.handle_openers or not isinstance(node, cst.Call):
        return None
    return dict(seeds.handle_openers).get(program_callee(facts, node.func, scope) or "")


def _handle_mode(a: Analysis, call: CallRecord) -> str | None:
    """:func:`opened_handle_mode`, a method of another module's class handing back a file it opens
    (:func:`_opener_called`) included."""
    mode = opened_handle_mode(a.facts, call.node, call.scope)
    if mode is not None or a.seeds is None:
        return mode
    opener = _opener_called(a, call)
    return None if opener is None else dict(a.seeds.handle_openers).get(opener)


#: What the processes but the main one open where the main process alone writes a file
#: (:func:`other_ranks_file`): ``os.devnull``, or a scratch file of their own.
DEVNULL = "devnull"
SCRATCH = "scratch"


def other_ranks_file(mode: str) -> str | None:
    """What the processes but the main one open where the main process alone opens a file for
    writing in ``mode``: ``os.devnull`` (:data:`DEVNULL`, in :func:`devnull_mode`) where nothing
    is read back through the handle; where a ``"+"`` mode reads back through it what was written
    into a file it empties or creates (``"w+"``, ``"x+"``), a scratch file of their own
    (:data:`SCRATCH`: ``tempfile.TemporaryFile`` in :func:`devnull_mode`), so that each reads back
    what it wrote, as on one process (``os.devnull`` reads back nothing); None where it reads
    what the file held before (``"r+"``, ``"a+"``): only the real file holds it, so the file stays
    on every rank."""
    if "+" not in mode:
        return DEVNULL
    return SCRATCH if "w" in mode or "x" in mode else None


def devnull_mode(mode: str) -> str:
    """The mode the processes but the main one open ``os.devnull`` in where the main process
    alone opens a file for writing in ``mode``: the same, but an exclusive creation (``"x"``:
    ``os.devnull`` exists, every other process would fail with ``FileExistsError``) becomes a
    plain write (``"w"``), its ``"b"``, ``"t"`` and ``"+"`` kept (``"xb"`` → ``"wb"``)."""
    return mode.replace("x", "w")


def _handle_opens(a: Analysis) -> Iterator[tuple[AssignRecord, CallRecord]]:
    """``name = open(path, "w")`` (one target) and its ``open`` call (or that of another module's
    function returning such a file: :func:`opened_handle_mode`), outside logger classes."""
    calls = {id(call.node): call for call in a.r.calls}
    for assign in a.r.assigns:
        call = calls.get(id(assign.value))
        if call is None or len(assign.targets) != 1 or _handle_mode(a, call) is None:
            continue
        if assign.scope and assign.scope[0] in a.facts.file_logger_classes:
            continue
        yield assign, call


def _handle_key(a: Analysis, assign: AssignRecord) -> tuple[str, str] | None:
    """Where a handle lives: (function, name) for a local or a global (``"<module>"``), (class,
    attribute) for an instance's attribute (``self.log`` in one of its methods); None for
    anything else (another object's attribute, a name in a nested function)."""
    target = assign.targets[0]
    if "." not in target:
        return (assign.function, target) if len(assign.scope) <= 1 or assign.scope[0] in a.r.classes else None
    head, _, attribute = target.partition(".")
    owner = a.r.classes.get(assign.scope[0]) if len(assign.scope) == 2 else None
    if owner is None or "." in attribute or owner.self_names.get(assign.scope[1]) != head:
        return None
    return (assign.scope[0], f".{attribute}")


def _written_on_every_rank(a: Analysis, assign: AssignRecord, handle: tuple[str, str]) -> bool:
    """Whether some call hands the handle on or calls a method of it (``close`` aside) outside
    any ``if`` testing a rank: every rank would write through it."""
    for call in a.r.calls:
        if any(names_rank(record.node.test) for record in call.ifs):
            continue
        func = call.node.func
        used = {dotted(arg.value) for arg in call.node.args}
        if isinstance(func, cst.Attribute) and func.attr.value != "close":
            used.add(dotted(func.value))
        spelled = _names_handle(a, call, handle, assign)
        if spelled is not None and spelled in used:
            return True
    return False


def _names_handle(a: Analysis, call: CallRecord, handle: tuple[str, str], assign: AssignRecord) -> str | None:
    """How code where ``call`` stands spells the handle; None where it cannot read it."""
    owner, name = handle
    if name.startswith("."):
        in_class = len(call.scope) == 2 and call.scope[0] == owner
        instance = a.r.classes[owner].self_names.get(call.scope[1]) if in_class else None
        return None if instance is None else f"{instance}{name}"
    if call.scope == assign.scope:
        return name
    # A global: read where the name denotes the module's binding (no local of that name).
    return name if owner == MODULE and a.r.names.binding_scope(name, call.scope) == () else None


def _file_reads(a: Analysis) -> list[_Access]:
    """Calls of the builtin ``open`` that read (``open(path)``, ``open(path, "rb")``)."""
    return [
        _access(a, call, argument_for(call.node, 0, "file"))
        for call in a.r.calls
        if a.facts.open_mode(call.node, call.scope) is not None and not a.facts.opens_for_writing(call.node, call.scope)
    ]


# --------------------------------------------------------------------------------------------
# Evaluation loops writing a file per batch: run unsharded
# --------------------------------------------------------------------------------------------


@provider(needs=("imports",), provides=("keeps_files_for_writing", "creates_folders", "handle_openers"))
def kept_files(a: Analysis) -> None:
    """Whether the module opens a file for writing and binds it to write through later (the
    Cutout repository's ``util/misc.py``: ``class CSVLogger`` with ``self.csv_file = open(filename,
    'w')``). Such a module of a program is converted even when it never imports torch: every rank
    constructs the logger and writes its rows into the same file, and the side-effects rule
    reports it there (ACC916). A ``with open(...) as f:`` block is a write the rule sees by
    itself; a module that only reads files stays as it is."""
    a.facts.keeps_files_for_writing = any(
        a.facts.opens_for_writing(assign.value, assign.scope) for assign in a.r.assigns
    )
    # A module making folders (fast-neural-style's ``check_paths``) is converted for the same
    # reason: every rank would make them, racing.
    a.facts.creates_folders = any(
        a.r.names.qualified_name(call.node.func, call.scope) in FOLDER_FUNCTIONS for call in a.r.calls
    )
    # A module-level function (or a method of a module-level class) handing back a file it opens
    # for writing (``def open_log(path): return open(path, "w")``, or the name it binds it to): a
    # call of it from another module of the program opens the file there (:func:`kept_handles`).
    for key, scope, value in _returned_opens(a):
        a.facts.handle_openers[key] = a.facts.open_mode(value, scope) or "w"


@provider(
    needs=("imports", "trackers"),
    provides=("file_logger_classes", "file_loggers", "loggers_built_in_calls"),
    refines=("trackers",),
)
def file_loggers(a: Analysis) -> None:
    """Loggers writing a file (yunjey's tensorboard ``Logger`` whose ``__init__`` runs ``self.f =
    open(os.path.join(log_dir, "log.txt"), "w")``, a ``CSVLogger`` of ``utils/logger.py``, a
    ``Log`` whose ``write`` reopens its path with ``"a"`` on every call): the module's classes
    that do (``file_logger_classes``), and the names bound to an instance of one, of this module or
    of another module of the program (``file_loggers``). Every rank would write its rows into the
    file, one rank's over (or after) another's: such an instance is a tracker (created on the main
    process only, None on the others, and its method calls run there), so it joins ``trackers``.
    So does the parameter an instance built right in a call fills (``train(model,
    CSVLogger("log.csv"))``: ``log`` of ``def train(model, log)``, or of a class's ``__init__``)."""
    kept = _kept_on_every_rank(a)
    for assign in a.r.assigns:
        if len(assign.scope) > 1 and assign.scope[0] in a.r.classes and a.facts.opens_for_writing(assign.value):
            if assign.scope[0] not in kept:
                a.facts.file_logger_classes.add(assign.scope[0])
    a.facts.file_logger_classes |= _reopening_loggers(a, kept)
    for assign in a.r.assigns:
        value = assign.value
        if isinstance(value, cst.Call) and file_logger_class(a.facts, value.func, assign.scope) is not None:
            a.facts.file_loggers.update(assign.targets)
    a.facts.trackers.update(a.facts.file_loggers)
    a.facts.trackers.update(_parameters_given_loggers(a))
    if a.seeds is not None:
        # Filled by another module of the program with a logger it builds on the main process only.
        a.facts.trackers.update(a.seeds.logger_parameters)


def _kept_on_every_rank(a: Analysis) -> set[str]:
    """The module's classes whose instances every rank needs whatever files they write: one with
    a method returning a value (deep-text-recognition's ``Batch_Balanced_Dataset`` logs its
    datasets to a file in ``__init__`` and hands out batches from ``get_batch()``: None on the
    other ranks, they would fail at the first batch), or one that steps an optimizer or calls
    ``backward`` (a training class's own log file)."""
    returning = {scope[0] for scope, value in a.r.method_returns if not _is_none(value)}
    training = {
        call.scope[0]
        for call in a.r.calls
        if call.scope and isinstance(call.node.func, cst.Attribute) and call.node.func.attr.value in _TRAINING_METHODS
    }
    return returning | training


def _reopening_loggers(a: Analysis, kept: set[str]) -> set[str]:
    """Classes deriving from nothing but ``object`` whose methods open a file for writing each
    time they run (``with open(self.path, "a") as f: f.write(row)``) and do nothing else worth
    keeping on every rank (none of ``kept``, see :func:`_kept_on_every_rank`)."""
    opening = {
        call.scope[0]
        for call in a.r.calls
        if len(call.scope) > 1 and call.scope[0] in a.r.classes and a.facts.opens_for_writing(call.node, call.scope)
    }
    if not opening:
        return set()
    builtin = builtins_at(a.r.names, ())
    return {
        name
        for name in opening - kept
        if all(builtin(base.value) == "object" and base.keyword is None for base in a.r.classes[name].node.bases)
    }


#: Methods only a training class calls (on its optimizer, its loss).
_TRAINING_METHODS = frozenset({"backward", "step", "zero_grad"})


def _is_none(value: cst.BaseExpression | None) -> bool:
    return value is None or (isinstance(value, cst.Name) and value.value == "None")


def _parameters_given_loggers(a: Analysis) -> set[str]:
    """Parameters filled by a logger built right in the call (``train(model, CSVLogger(...))``):
    of the module's functions, of its classes' ``__init__`` and of their methods
    (``trainer.fit(loader, CSVLogger(...))``). A logger built right in a call of another module's
    function, class or instance's method that the program says takes one there (the seeds'
    ``logger_callees``, ``engine.train``, ``trainer.Trainer``) is built on the main process only
    too; that module's parameter is the tracker (its ``logger_parameters``)."""
    found: set[str] = set()
    elsewhere = a.seeds.logger_callees if a.seeds is not None else frozenset()
    for call in a.r.calls:
        params = _callee_parameters(a, call)
        outside = params is None and bool(elsewhere) and _program_target(a, call) in elsewhere
        for index, arg in enumerate(call.node.args if params is not None or outside else ()):
            value = arg.value
            if (
                arg.star
                or not isinstance(value, cst.Call)
                or file_logger_class(a.facts, value.func, call.scope) is None
            ):
                continue
            param = None if params is None else parameter_filled(arg, index, params)
            if param is None and not outside:
                continue
            if param is not None:
                found.add(param)
            site = a.site(value)
            a.facts.loggers_built_in_calls.add((site.line, site.column))
    return found


def _callee_parameters(a: Analysis, call: CallRecord) -> tuple[str, ...] | None:
    """The parameters of the module's function, class (its ``__init__``) or method of an instance
    of its class (``trainer.fit``, ``self.fit``) that the call runs; None for any other call."""
    func = call.node.func
    callee = dotted(func)
    if callee in a.r.defs:
        return a.r.defs[callee]
    if callee in a.r.classes:
        return a.r.classes[callee].init_params
    if not isinstance(func, cst.Attribute):
        return None
    owner = instance_class(a, call, func.value)
    if owner is None or a.r.classes[owner].self_names.get(func.attr.value) is None:
        return None  # not an instance of the module's class, or a static or class method
    method = next((m for m in class_methods(a.r.classes[owner].node) if m.name.value == func.attr.value), None)
    return None if method is None else parameter_names(method)[1:]


def _program_target(a: Analysis, call: CallRecord) -> str | None:
    """The other module's function or class (qualified) a call runs: called or built by its name
    (``train(...)``, ``engine.Trainer(...)``), or, for a method, the class of the instance it is
    called on (``trainer.fit(...)`` after ``trainer = Trainer(...)`` in the same function,
    ``Trainer(...).fit(...)``)."""
    func = call.node.func
    direct = program_callee(a.facts, func, call.scope)
    if direct is not None or not isinstance(func, cst.Attribute):
        return direct
    return program_instance_class(a, call, func.value)


def file_logger_class(facts: FactQuestions, func: cst.BaseExpression, scope: ScopeKey) -> str | None:
    """The logger class (see :func:`file_loggers`) a call constructs: this module's by its name,
    another module's by its qualified name; None for any other call."""
    if isinstance(func, cst.Name) and func.value in facts.file_logger_classes:
        bound = facts.names.qualified_name(func, scope, strict=True) if facts.names is not None else None
        return func.value if bound is None else None
    seeds = facts.program
    callee = program_callee(facts, func, scope)
    return callee if seeds is not None and callee in seeds.file_logger_classes else None


#: Methods that write their receiver to a path, PIL's ``image.save(path)`` among them (a name
#: too common for the side-effects rule to move to the main process alone).
_FILE_WRITING_METHODS = WRITING_METHODS | {"save"}


@provider(
    needs=("eval_loops", "loader_loops", "loader_factories", "loader_classes", "train_loaders", "models"),
    provides=("unsharded_loaders", "per_batch_file_parameters", "loaders_left_unsharded", "per_rank_loops"),
    refines=("eval_loaders",),
)
def per_batch_file_loaders(a: Analysis) -> None:
    """An evaluation loop that writes a file per batch named by the batch's index (StarGAN's test
    mode: ``save_image(x_concat, os.path.join(result_dir, '{}-images.jpg'.format(i + 1)))``) keeps
    its loader unprepared: every rank runs the whole loop over the original loader, unsharded,
    and the main process writes every file the original writes, under its name, with its
    contents (the side-effects rule guards the write).

    Why not each rank writing its own batches under the original's index: the loop's values are
    gathered for the metrics and the index of a rank's batch in the original order depends on the
    sharding (and on the padding of the last batches), so the file's name and contents would
    both have to be rebuilt. Why every rank and not the main process alone: the loop's sums (a
    test loss, a best score) stay the same on every rank for whatever reads them after the loop,
    and no collective (a prepared model's forward with gradients on, a gather) runs on one rank
    only. The price is the evaluation's speed-up, for that loop only.

    A loader some training loop iterates too stays prepared (StarGAN's ``test()`` iterates the
    loader ``train()`` trains on). There each process writes the files of its own batches under
    the index the original gives them (``per_rank_loops``, :func:`_writes_its_own_batches`): the
    runtime and Accelerate deal a loader's batches round-robin, so the k-th batch of process p is
    the original's batch ``k * num_processes + p``, and with uneven batches allowed in that loop
    (``join_uneven_inputs(..., even_batches=False)``) no batch is padded or repeated. A counter
    of the loop's own naming the files (``n += 1`` per batch) follows the original's the same way
    where nothing reads it after the loop (:func:`_counters_followed`). That holds where the loop
    keeps nothing else across batches (nothing to gather: no sum, no list grown from batch to
    batch, no counter read after it) and calls a prepared model (Join's joinable), and only where
    processes get whole batches (not with ``--split-batches`` or ``--fsdp``, whose forwards every
    process must run alike). Elsewhere the write is reported (ACC936).

    Across modules (UNet's ``utils.save_predictions_as_imgs(val_loader, model, folder)``): the
    function's loader parameter is told to the program (``per_batch_file_parameters``), the
    module building the loader keeps it unprepared where it passes it to such a function
    (``loaders_left_unsharded``), and the parameters it fills, there and in its other calls
    (``check_accuracy(val_loader, ...)``), receive every batch (the seeds'
    ``unsharded_parameters``): not gathered. A loader another module hands in without saying so
    is prepared there: left as it is (gathered, and the write reported)."""
    kept: set[str] = set()
    built = a.loaders_built_here()
    writing = list(_per_batch_writing_loops(a))
    for loop, origins, _ in writing:
        if origins & built and not origins & a.facts.train_loaders:
            kept |= origins
        a.facts.per_batch_file_parameters |= _loader_parameters(a, loop.function, origins)
    kept |= _passed_to_per_batch_writers(a, built)
    a.facts.loaders_left_unsharded = kept & built
    if a.seeds is not None:
        kept |= a.seeds.unsharded_parameters
    a.unsharded_loaders = kept
    if kept:
        a.facts.eval_loaders = set(a.facts.eval_loaders) - kept
    for loop, origins, _ in writing if a.whole_batches else ():
        if origins & kept or not origins & (a.facts.train_loaders | a.facts.eval_loaders):
            continue
        own = _writes_its_own_batches(a, loop)
        if own is not None:
            a.per_rank_loops[a.site(loop.node).line] = own


def _writes_its_own_batches(a: Analysis, loop: LoopRecord) -> PerRankLoop | None:
    """How a loop writing a file per batch that each process can run over its own batches counts
    them, naming them by the original's index: with ``enumerate``, with counters of its own that
    can follow the original's (:func:`_counters_followed`), or both; it keeps nothing else from
    one batch to the next (a sum, a list or meter bound before the loop: those would need a
    gather), and calls a prepared model. None for any other loop."""
    builtin = builtins_at(a.r.names, loop.scope)
    index = enumerate_index(loop.node, builtin)
    counters = _counters_followed(a, loop, per_batch_values(loop.node, builtin).counters - {index})
    if counters is None or (index is None and not counters):
        return None
    if _keeps_across_batches(loop.node, counters):
        return None
    models = sorted(
        {
            name
            for call in a.r.calls
            if loop in call.loops and (name := dotted(call.node.func)) is not None and name in a.facts.models
        }
    )
    return PerRankLoop(index, counters, tuple(models)) if models else None


def _keeps_across_batches(loop: cst.For, counters: tuple[str, ...]) -> bool:
    """Whether ``loop`` grows something from one batch to the next (a sum, a list or meter bound
    before it) but the ``counters`` followed."""
    # Bound afresh each batch (``x_fake_list = [x_real]``); ``total += ...`` grows, it binds nothing new.
    bound_per_batch = {name for node in nodes_in(loop) if type(node) is not cst.AugAssign for name in bound_by(node)}
    for node in nodes_in(loop.body):
        grown: cst.BaseExpression | None = node.target if isinstance(node, cst.AugAssign) else None
        if grown is None and collects(node):
            grown = cast(cst.Attribute, cast(cst.Call, node).func).value
        root = None if grown is None else (dotted(grown) or "").split(".")[0]
        if grown is not None and root not in bound_per_batch and dotted(grown) not in counters:
            return True
    return False


def _counters_followed(a: Analysis, loop: LoopRecord, counters: AbstractSet[str]) -> tuple[str, ...] | None:
    """``counters`` (a loop's own, ``n += 1`` per batch, besides its ``enumerate`` index) in order,
    where each process's can take the values the original's takes for that process's batches:
    each is bound before the loop (on the way to it, inside whatever loop holds it: every time the
    loop starts it starts from that value), grown by one at the top level of the loop's body
    (``n += 1``, ``n = n + 1``: no ``if``, ``continue`` or ``break`` before it skips it) and
    bound nowhere else in the loop, and read nowhere outside the loop's body (a total printed
    after it would be one process's count). None where one of them is not so."""
    if not counters:
        return ()
    body = loop.node.body
    if not isinstance(body, cst.IndentedBlock):
        return None
    for counter in counters:
        if not (
            _grown_once_per_batch(body.body, counter)
            and _bound_before(loop.enclosing, counter)
            and not _read_outside(a.r.names, loop, counter)
        ):
            return None
    return tuple(sorted(counters))


def _grown_once_per_batch(body: Sequence[cst.BaseStatement], counter: str) -> bool:
    """Whether ``counter`` grows by one on a line of its own at the top level of a loop's ``body``,
    no ``continue`` or ``break`` of the loop before it, and nothing else in the loop binds it but
    the conversion's own step over the other processes' batches (a script converted again)."""
    steps = [index for index, line in enumerate(body) if _adds_one(line, counter)]
    if len(steps) != 1 or any(_leaves_iteration(line) for line in body[: steps[0]]):
        return False
    allowed = {id(body[steps[0]])}
    # The step stands first, or after the index the conversion rebinds.
    allowed.update(
        id(line) for line in body[: min(steps[0], 2)] if _counts_other_processes(line, counter, "num_processes")
    )
    return not any(counter in bound_by(node) for line in body if id(line) not in allowed for node in nodes_in(line))


def _adds_one(line: cst.BaseStatement, counter: str) -> bool:
    """``counter += 1`` or ``counter = counter + 1``, alone on its line."""
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
    return small is not None and counter_step(small) == (counter, "1")


def _counts_other_processes(line: cst.CSTNode, counter: str, attribute: str) -> bool:
    """Whether ``line`` is the conversion's own ``counter += ...`` reading the accelerator's
    ``attribute`` (``num_processes``, ``process_index``): a script converted again."""
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else line
    return (
        isinstance(small, cst.AugAssign)
        and dotted(small.target) == counter
        and any(isinstance(node, cst.Attribute) and node.attr.value == attribute for node in nodes_in(small.value))
    )


def _leaves_iteration(line: cst.CSTNode) -> bool:
    """Whether ``line`` holds a ``continue`` or ``break`` of the loop it stands in (not of a loop
    or function inside it)."""
    pending = [line]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Continue, cst.Break)):
            return True
        if not isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)) or node is line:
            pending.extend(child_nodes(node))
    return False


def _bound_before(chain: Sequence[cst.CSTNode], counter: str) -> bool:
    """Whether a line before the loop at the end of ``chain`` (its record's ``enclosing``) binds
    ``counter`` (``n = 0``, ``self.count = 0``) on the way to it from its function (or the module),
    inside every loop holding it."""
    start = max(index for index, node in enumerate(chain) if isinstance(node, (cst.Module, cst.FunctionDef)))
    bound = False
    for parent, child in zip(chain[start:], chain[start + 1 :]):
        if isinstance(parent, (cst.For, cst.While, cst.ClassDef, cst.Lambda)):
            bound = False  # bound outside a loop holding this one: the next round starts from what it left
        elif isinstance(parent, (cst.Module, cst.IndentedBlock)):
            before = parent.body[: next(index for index, line in enumerate(parent.body) if line is child)]
            bound = bound or assigns_at_top(before, counter)
    return bound


def _read_outside(names: NameTable, loop: LoopRecord, counter: str) -> bool:
    """Whether ``counter`` may be read anywhere but in ``loop``'s body: in its function (a local),
    or anywhere in the module (a global, which a function may read, or an attribute, which another
    method may; a local another function declares ``global`` too). Its own plain assignments are
    no reads, nor a method of that name called, nor the conversion's own step to this process's
    first batch (a script converted again); a function binding a local of the same name reads its
    own (the name table says which functions bind one)."""
    chain, body = loop.enclosing, loop.node.body
    functions = [index for index, node in enumerate(chain) if isinstance(node, cst.FunctionDef)]
    plain = "." not in counter
    where: cst.CSTNode = chain[0]
    where_scope: ScopeKey = ()
    if plain and functions:
        where = chain[functions[-1]]
        where_scope = loop.scope[: sum(isinstance(node, _SCOPES) for node in chain[: functions[-1] + 1])]
        if names.binding_scope(counter, where_scope) != where_scope:
            return True  # ``global n``: another function may read it
    not_reads: set[int] = set()
    pending: list[tuple[cst.CSTNode, ScopeKey]] = [(where, where_scope)]
    while pending:
        node, node_scope = pending.pop()
        inner = node_scope
        if node is not where and isinstance(node, _SCOPES):
            inner = (*node_scope, node.name.value)
        if node is body or _counts_other_processes(node, counter, "process_index"):
            continue  # the loop's body, the conversion's own step before the loop
        if plain and node is not where and isinstance(node, cst.FunctionDef):
            if names.binding_scope(counter, inner) == inner:
                continue  # a function with a local of that name
        not_reads.update(_no_reads_under(node, counter))
        if id(node) not in not_reads and _names_counter(node, counter):
            return True
        pending.extend((child, inner) for child in child_nodes(node))
    return False


#: The statements opening a scope of the name table.
_SCOPES = (cst.FunctionDef, cst.ClassDef)


def _no_reads_under(node: cst.CSTNode, counter: str) -> list[int]:
    """The nodes under ``node`` naming ``counter`` (or a name of that spelling) without reading it: a
    plain assignment's target, an attribute's name, a keyword, a method called."""
    if isinstance(node, cst.Assign):
        return [id(target.target) for target in node.targets if dotted(target.target) == counter]
    if isinstance(node, cst.AnnAssign) and dotted(node.target) == counter:
        return [id(node.target)]
    if isinstance(node, cst.Attribute) and "." not in counter:
        return [id(node.attr)]
    if isinstance(node, cst.Arg) and node.keyword is not None:
        return [id(node.keyword)]
    if isinstance(node, cst.Call):
        return [id(node.func)]  # a method called (``text.count("a")``), not the counter read
    return []


def _names_counter(node: cst.CSTNode, counter: str) -> bool:
    """``n`` for the counter ``n``; any ``x.count`` for ``self.count`` (another object's too)."""
    if "." not in counter:
        return isinstance(node, cst.Name) and node.value == counter
    return isinstance(node, cst.Attribute) and node.attr.value == counter.rsplit(".", 1)[-1]


def _loader_parameters(a: Analysis, function: str, origins: set[str]) -> set[tuple[str, int, str]]:
    """(function, position, parameter) of the module-level ``function``'s parameters among a
    loop's loader ``origins``."""
    params = a.r.defs.get(function) if function != MODULE else None
    return {(function, index, param) for index, param in enumerate(params or ()) if param in origins}


def _passed_to_per_batch_writers(a: Analysis, built: set[str]) -> set[str]:
    """Loaders built here (no training loop iterates them) that a call hands to another module's
    function writing a file per batch of the loader at that parameter."""
    writers = _by_callee(a.seeds.per_batch_file_writers if a.seeds is not None else ())
    found = set()
    for call in a.r.calls if writers else ():
        where = writers.get(program_callee(a.facts, call.node.func, call.scope) or "")
        argument = None if where is None else argument_for(call.node, where[1], where[0])
        name = None if argument is None else dotted(argument.value)
        if name in built and name not in a.facts.train_loaders:
            found.add(name)
    return found


@provider(
    needs=(
        "loader_loops",
        "loader_factories",
        "loader_classes",
        "backward_trains",
        "models",
        "frozen_models",
        "train_loaders",
    ),
    provides=("unprepared_loaders",),
    refines=("unsharded_loaders",),
)
def statistics_loaders(a: Analysis) -> None:
    """A script with no model that only reads its loaders (dataset statistics: the mean and
    standard deviation of the images for a ``Normalize``, summed batch by batch) keeps them
    unprepared: every rank reads the whole dataset and computes what the original computes,
    where a prepared loader would give each rank its share and print one rank's statistics (a
    loader is only sharded for a model to train or evaluate on). They stay evaluation loaders,
    so the accelerator is still created and the prints run once. A loader another module of the
    program hands in is prepared there; a module that another one trains with (a library, a
    parameter seeded as a model) is left as it is."""
    facts = a.facts
    seeds = a.seeds
    if facts.backward_trains or facts.models or facts.frozen_models or facts.train_loaders:
        return
    if seeds is not None and (seeds.library or any(names for _, names in seeds.parameter_roles)):
        return
    built = a.loaders_built_here()
    read = {name for _, origins in a.loader_loops if origins & built for name in origins}
    a.unsharded_loaders |= read
    facts.unprepared_loaders = read


@rule_provider(
    needs=("eval_loops", "eval_loaders", "loader_loops", "train_loaders", "unsharded_loaders", "per_rank_loops")
)
def per_batch_writes(a: Analysis) -> frozenset[tuple[int, int, str]]:
    """Where (original line, column, and the code of its argument naming the batch) an evaluation
    over a loader that stays prepared (a training loop iterates it too, or another module of the
    program hands it in) writes a file per batch
    named by the batch's index: reported (ACC936)."""
    return frozenset(
        (site.line, site.column, path)
        for loop, origins, calls in _per_batch_writing_loops(a)
        if not origins & a.unsharded_loaders
        and origins & (a.facts.train_loaders | a.facts.eval_loaders)
        and a.site(loop.node).line not in a.per_rank_loops
        for call, path in calls
        for site in (a.site(call.node),)
    )


def _per_batch_writing_loops(a: Analysis) -> Iterator[tuple[LoopRecord, set[str], list[tuple[CallRecord, str]]]]:
    """The evaluation loops over loaders writing a file per batch named by the batch's index, with
    the names of their loader and the calls writing (with the code of the argument naming the
    batch)."""
    writing = _functions_writing_parameters(a)
    evaluations = {(loop.site.line, loop.site.column) for loop in a.facts.eval_loops}
    for loop, origins in a.loader_loops:
        site = a.site(loop.node)
        if loop.has_backward or (site.line, site.column) not in evaluations:
            continue
        # What counts the batches is the locality owner's (the index, ``n += 1``).
        counters = set(per_batch_values(loop.node, builtins_at(a.r.names, loop.scope)).counters)
        calls = _per_batch_writes(a, loop, counters, writing) if counters else []
        if calls:
            yield loop, origins, calls


def _per_batch_writes(
    a: Analysis, loop: LoopRecord, counters: set[str], writing: dict[str, set[int]]
) -> list[tuple[CallRecord, str]]:
    """The calls in ``loop`` writing a file whose path reads a batch counter (directly, through a
    name the loop's function binds to such a path, or through a function of the script writing
    to one of its parameters), with the code of the argument naming the batch."""
    paths = {
        target
        for assign in a.r.assigns
        if assign.function == loop.function and _path_reads(assign.value, counters)
        for target in assign.targets
    }
    found = []
    for call in a.r.calls:
        if loop not in call.loops:
            continue
        named = [_path_reads(arg.value, counters) or dotted(arg.value) in paths for arg in call.node.args]
        func = call.node.func
        helper = writing.get(func.value, ()) if isinstance(func, cst.Name) else ()
        named_at = [i for i in helper if i < len(named) and named[i]]
        if _writes_file(a, call) and any(named):
            named_at.append(named.index(True))
        if named_at:
            found.append((call, _EMPTY.code_for_node(call.node.args[named_at[0]].value)))
    return found


def _functions_writing_parameters(a: Analysis) -> dict[str, set[int]]:
    """The script's module-level functions that write a file to a path among their parameters →
    the positions of those parameters (``def save_image(pixels, path): with open(path, "wb")``)."""
    found: dict[str, set[int]] = {}
    for call in a.r.calls:
        params = a.r.defs.get(call.function)
        if params is None or len(call.scope) != 1 or not _writes_file(a, call):
            continue
        read = set().union(*(names_in(arg.value) for arg in call.node.args))
        positions = {index for index, param in enumerate(params) if param in read}
        if positions:
            found.setdefault(call.function, set()).update(positions)
    return found


def _writes_file(a: Analysis, call: CallRecord) -> bool:
    """Whether ``call`` writes a file to a path among its arguments (``torch.save``, a writing
    function, ``open`` for writing, a writing method such as ``image.save(path)``)."""
    name = a.qualified(call) or dotted(call.node.func)
    if name in WRITING_FUNCTIONS or name == "torch.save":
        return True
    if a.r.names.builtin(call.node.func, call.scope) == "open" or name == "io.open":
        mode = argument_for(call.node, 1, "mode")
        return (
            mode is not None
            and isinstance(mode.value, cst.SimpleString)
            and any(flag in str(mode.value.evaluated_value) for flag in "wax")
        )
    return isinstance(call.node.func, cst.Attribute) and call.node.func.attr.value in _FILE_WRITING_METHODS


def _path_reads(value: cst.BaseExpression, counters: set[str]) -> bool:
    """Whether ``value`` is built from text and one of ``counters`` (``f"out_{i}.pt"``,
    ``"{}-images.jpg".format(i + 1)``): a path named by the batch."""
    nodes = nodes_in(value)
    has_text = any(isinstance(node, (cst.SimpleString, cst.FormattedString)) for node in nodes)
    return has_text and bool(names_in(value) & counters)
