"""Saves run once, on the main process, from the unwrapped model: ``torch.save`` becomes
``accelerator.save`` after a barrier (saves in a row wait once), a saved dict's models are
unwrapped, and, where a later load can have no barrier before it, the ranks wait after the save
that load reads (:class:`WaitAfterSaves`)."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call, is_accelerator_method, unwrap_model
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.syntax import dotted, names_in
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import StatementFilter
from accel_convert.codemods.model.file_flow import file_flow
from accel_convert.codemods.model.locality import locality_of
from accel_convert.codemods.model.plan import PreparesAhead
from accel_convert.codemods.rewrites.checkpoint.codes import CHECKPOINT

#: A saved display whose elements may hold whole training objects.
_Display = cst.Dict | cst.List | cst.Tuple


class SavedValues(StatementFilter):
    """Names whose value a ``torch.save`` writes (``torch.save(state, filename)``), read off the
    statements on ``lines`` (those mentioning it)."""

    def __init__(self, facts: ScriptFacts, lines: set[int]) -> None:
        super().__init__()
        self.facts = facts
        self.lines = sorted(lines)
        self.found: set[str] = set()

    def enters_statement(self, node: cst.CSTNode) -> bool:
        return not skips_statement(node, self.lines, self.facts.origins)

    def visit_Call(self, node: cst.Call) -> None:
        if self.facts.callee_name(node.func) == "torch.save" and node.args and node.args[0].keyword is None:
            name = dotted(node.args[0].value)
            if name is not None and name not in self.facts.trained_objects:
                self.found.add(name)


class SavesOnMainProcess(RuleTransformer):
    """The checkpoint rewriter's saves (see the module)."""

    #: Names ``torch.save`` writes: a dict bound to one of them holds what is saved.
    saved_values: AbstractSet[str]
    #: ``torch.save`` calls rewritten in the statement line being walked.
    _saves_in_line: int
    #: Whether the script saves: then its loads wait for the save.
    saves: bool
    #: Per function frame: whether its ``prepare`` line is still ahead (nothing wrapped yet).
    _prepare_pending: list[PreparesAhead]

    def _in_class_handed_the_model(self) -> bool:
        """In a library class that the program hands the prepared model (Bjarten's EarlyStopping,
        whose ``save_checkpoint`` runs when this rank's validation loss improved): a barrier there
        could be reached by some ranks only. ``accelerator.save`` needs none (it writes on the
        main process, atomically); a load of the file elsewhere in the program waits first."""
        seeds = self.facts.program
        return seeds is not None and bool(self.scope) and self.scope[0] in seeds.classes_given_models

    def _inside_file_written(self) -> bool:
        """Inside ``with open(path, "wb") as f:``: the side-effects rule moves that whole block to
        the main process, so a barrier in it would be reached by the main process alone."""
        return any(
            isinstance(node, cst.With)
            and any(self.facts.opens_for_writing(item.item, self.scope) for item in node.items)
            for node in self._anchors
        )

    def _binds_saved_dict(self, node: cst.BaseSmallStatement) -> bool:
        """``state = {...}``, ``state`` a name ``torch.save`` writes further down."""
        return (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Dict)
            and any(dotted(target.target) in self.saved_values for target in node.targets)
        )

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        """``state = {'model': model, ...}`` saved further down: the model in it unwrapped."""
        if not self._binds_saved_dict(original_node) or not isinstance(updated_node.value, cst.Dict):
            return updated_node
        value = self._models_unwrapped_in(original_node, updated_node.value)
        return updated_node if value is updated_node.value else updated_node.with_changes(value=value)

    def _models_unwrapped_in(self, original: cst.CSTNode, saved: _Display) -> _Display:
        """The prepared models, optimizers and schedulers a saved dict holds as values (the whole
        object, as SSD's and the CIFAR trainers' checkpoints keep it), or a saved list or tuple
        holds (awd-lstm-lm's ``torch.save([model, criterion, optimizer], f)``), unwrapped: pickled
        with its wrapper, an object loads only where a process group (or accel-convert) is there."""
        if not self.accelerator_reachable():
            return saved
        where = "saved in a dict" if isinstance(saved, cst.Dict) else "saved in a sequence"
        elements: list[Any] = list(saved.elements)
        for index, element in enumerate(elements):
            if isinstance(element, (cst.DictElement, cst.Element)):
                unwrapped = self._unwrapped(original, element.value, where)
                elements[index] = element.with_changes(value=unwrapped)
        return saved.with_changes(elements=elements) if elements != list(saved.elements) else saved

    def _unwrapped(self, original: cst.CSTNode, saved: cst.BaseExpression, where: str) -> cst.BaseExpression:
        """What a whole-object save of ``saved`` writes: the object a prepared model, optimizer or
        scheduler wraps (``accelerator.unwrap_model(model)``, ``optimizer.optimizer``,
        ``scheduler.scheduler``: the attribute is the same on Accelerate's wrappers), so the file
        holds what the original's holds and loads without the converter's runtime. Each value of
        a choice (``net.module if use_cuda else net``) is one."""
        if isinstance(saved, cst.IfExp):
            body = self._unwrapped(original, saved.body, where)
            orelse = self._unwrapped(original, saved.orelse, where)
            if body is saved.body and orelse is saved.orelse:
                return saved
            return saved.with_changes(body=body, orelse=orelse)
        name = dotted(saved)
        if name is None:
            return saved
        if name in self.facts.models:
            self.report(original, CHECKPOINT, f"{name} {where} → accelerator.unwrap_model({name})", True)
            return unwrap_model(self.facts, saved)
        wrapped = _wrapped_attribute(self.facts, name)
        if wrapped is None or self._prepare_pending[-1].ahead(name):
            return saved
        self.report(original, CHECKPOINT, f"{name} {where} → {name}.{wrapped} (the object it wraps)", True)
        return cst.Attribute(value=saved, attr=cst.Name(wrapped))

    def _save_on_main_process(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        """``torch.save(...)`` → ``accelerator.save(...)`` of the unwrapped model (a barrier goes
        before the line); reported (ACC914) where no accelerator is reachable."""
        if names_in(original_node) & locality_of(self.facts).per_process_paths:
            return updated_node  # a file of this process alone (a tempfile folder): each rank writes its own
        if self.writes_per_rank_here():
            return updated_node  # the file of this process's batch, under the original's index
        if not self.accelerator_reachable():
            self.report(
                original_node,
                "ACC914",
                "torch.save where the accelerator is not reachable: every rank writes this file",
                False,
            )
            return updated_node
        args = list(updated_node.args)
        if (
            args
            and args[0].keyword is None
            and (dotted(args[0].value) is not None or isinstance(args[0].value, cst.IfExp))
        ):
            args[0] = args[0].with_changes(value=self._unwrapped(original_node, args[0].value, "saved whole"))
        elif args and args[0].keyword is None and isinstance(args[0].value, (cst.Dict, cst.List, cst.Tuple)):
            args[0] = args[0].with_changes(value=self._models_unwrapped_in(original_node, args[0].value))
        self._saves_in_line += 1
        self.saves = True
        self.report(original_node, CHECKPOINT, "torch.save → accelerator.save (main process only)", True)
        return accelerator_call(self.facts, "save", *args)


class BarrierPlacer(RuleTransformer):
    """Puts barriers among the statements of each block every rank runs where the accelerator is
    reachable, and among the module's statements after its creation: the one walk both the waits
    after saves and the waits before loads take (they differ only in where a barrier goes)."""

    def with_barriers(self, statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        """``statements`` with this pass's barriers; None when none goes there."""
        raise NotImplementedError

    def without_barriers(self, statements: Sequence[cst.BaseStatement]) -> None:
        """Statements where no barrier can go (no accelerator, or not every rank runs them)."""

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if not self.accelerator_reachable() or not self.every_rank_reaches_here():
            self.without_barriers(updated_node.body)
            return updated_node
        body = self.with_barriers(list(updated_node.body))
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        created = self.module_creation_index()
        if created is None:
            self.without_barriers(updated_node.body)
            return updated_node
        head, tail = list(updated_node.body[: created + 1]), list(updated_node.body[created + 1 :])
        body = self.with_barriers(tail)
        return updated_node if body is None else updated_node.with_changes(body=[*head, *body])


class WaitAfterSaves(BarrierPlacer):
    """In a script that also loads where no barrier can go before the load, every rank waits
    after each ``accelerator.save`` line every rank runs whose file such a load may read later
    (the program model's :func:`~codemods.model.file_flow.file_flow` pairs them): the other ranks
    then find the file the main process wrote (``test()`` reloading the best model under ``if
    os.path.isfile(path):``, MorvanZhou's ``restore_net()`` run after ``save()``)."""

    def __init__(self, facts: ScriptFacts, lines: set[int], loads: Sequence[tuple[str, int]]) -> None:
        super().__init__(facts, lines)
        self.unguarded = {line for _, line in loads}

    def _writes(self, statement: cst.BaseStatement) -> bool:
        """A line of ``accelerator.save`` calls, or a call of another module's function that
        saves to the path it is given (``save_checkpoint(model, "model.pt", accelerator)``)."""
        if only_saves(statement, self.facts):
            return True
        return (
            isinstance(statement, cst.SimpleStatementLine)
            and self.site(first_small(statement)).line in self.facts.of(file_flow).writes_through_calls
        )

    def _read_later(self, line: int) -> bool:
        """Whether a load with no barrier before it may read, later in the run, the file the
        save on ``line`` writes."""
        return any(read in self.unguarded for _, read in self.facts.of(file_flow).read_after(line))

    def with_barriers(self, statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        result: list[cst.BaseStatement] = []
        read_later: cst.BaseStatement | None = None  # the last save of this run read later
        for index, statement in enumerate(statements):
            result.append(statement)
            if not self._writes(statement):
                continue
            if self._read_later(self.site(first_small(statement)).line):
                read_later = statement
            following = statements[index + 1] if index + 1 < len(statements) else None
            # Saves in a row wait once, after the last of them.
            if read_later is None or (following is not None and self._writes(following)):
                continue
            if following is None or not is_barrier(following, self.facts):
                result.append(cst.SimpleStatementLine([cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))]))
                self.report(
                    read_later,
                    CHECKPOINT,
                    "every rank waits after the save: the file is read later where no barrier can go before the load",
                )
            read_later = None
        return result if len(result) != len(statements) else None


def _wrapped_attribute(facts: ScriptFacts, name: str) -> str | None:
    """The attribute a prepared optimizer or scheduler keeps the object it wraps in; None for
    anything else (a scheduler stepped per epoch is not prepared)."""
    if name in facts.optimizers:
        return "optimizer"
    if name in facts.schedulers and name not in facts.per_epoch_schedulers:
        return "scheduler"
    return None


def first_small(statement: cst.BaseStatement) -> cst.CSTNode:
    """What the positions record for a statement line: its first small statement."""
    return statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else statement


def one_barrier_before_saves(body: Sequence[cst.BaseStatement], facts: ScriptFacts) -> list[cst.BaseStatement] | None:
    """Saves in a row wait once: ``wait_for_everyone(); save(a); wait_for_everyone(); save(b)``
    keeps the first barrier only (nothing runs between the saves for a rank to finish); the
    dropped barrier's leading lines (the save's comments) stay with the save. None: no change."""
    kept: list[cst.BaseStatement] = []
    carried: Sequence[cst.EmptyLine] | None = None
    for index, line in enumerate(body):
        if carried is not None and isinstance(line, cst.SimpleStatementLine):
            line = line.with_changes(leading_lines=[*carried, *line.leading_lines])
        carried = None
        if (
            isinstance(line, cst.SimpleStatementLine)
            and is_barrier(line, facts)
            and _barrier_before_saves(kept, facts)
            # Between two saves; a barrier after the last save (files read later) stays.
            and index + 1 < len(body)
            and only_saves(body[index + 1], facts)
        ):
            carried = line.leading_lines
            continue
        kept.append(line)
    return None if len(kept) == len(body) else kept


def _barrier_before_saves(kept: Sequence[cst.BaseStatement], facts: ScriptFacts) -> bool:
    """Whether ``kept`` ends in one or more lines of saves right after a barrier."""
    index = len(kept) - 1
    while index >= 0 and only_saves(kept[index], facts):
        index -= 1
    return index < len(kept) - 1 and index >= 0 and is_barrier(kept[index], facts)


def only_saves(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    """A line of ``accelerator.save(...)`` calls only."""
    return isinstance(statement, cst.SimpleStatementLine) and all(
        is_accelerator_method(getattr(s, "value", None), facts, "save") for s in statement.body
    )


def is_barrier(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        is_accelerator_method(getattr(s, "value", None), facts, "wait_for_everyone") for s in statement.body
    )
