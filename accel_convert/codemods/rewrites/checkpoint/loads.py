"""Loads read what the main process saved: in a script that saves, every ``torch.load`` line
first waits for the other ranks (:class:`WaitBeforeLoads`), and loads map tensors saved from GPU 0
to this process's own device."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import as_statement
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.rewrites.checkpoint.codes import CHECKPOINT
from accel_convert.codemods.rewrites.checkpoint.saves import BarrierPlacer, first_small, is_barrier


class LoadsOnOwnDevice(RuleTransformer):
    """The checkpoint rewriter's loads (see the module)."""

    def _load_on_own_device(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``torch.load(path)`` puts each tensor back on the device it was saved from: the main
        process saved from ``cuda:0``, so without a ``map_location`` every process would load the
        whole checkpoint onto GPU 0 (and open a CUDA context there), as the DDP tutorial warns.
        Tensors saved on GPU 0 are mapped to this process's device; tensors saved on the CPU stay
        there, as in the original."""
        has_location = len([arg for arg in call.args if arg.keyword is None]) >= 2 or any(
            arg.keyword is not None and arg.keyword.value == "map_location" for arg in call.args
        )
        if has_location or any(arg.star for arg in call.args) or not self.accelerator_reachable():
            return call
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        device = cst.Call(cst.Name("str"), [cst.Arg(cst.Attribute(accelerator, cst.Name("device")))])
        # In the quotes the script's own path string uses (``torch.load('best.pt')``).
        path = call.args[0].value if call.args else None
        quote = "'" if isinstance(path, cst.SimpleString) and path.quote == "'" else '"'
        location = cst.Dict([cst.DictElement(cst.SimpleString(f"{quote}cuda:0{quote}"), device)])
        self.report(
            original,
            CHECKPOINT,
            "torch.load: tensors saved from GPU 0 load on this process's device (map_location), not all onto GPU 0",
            True,
        )
        argument = cst.Arg(
            location,
            keyword=cst.Name("map_location"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        return call.with_changes(
            args=[
                *call.args[:-1],
                call.args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                argument,
            ]
            if call.args
            else [argument]
        )


class WaitBeforeLoads(BarrierPlacer):
    """In a script that saves, every ``torch.load`` line first waits for the other ranks: the
    main process may just have written the file. ``report``: each wait is reported (the save is
    in another module of the program, so no report of this module announces it). ``place``:
    False only collects :attr:`unguarded` (the loads no barrier can precede), changing nothing.
    """

    def __init__(self, facts: ScriptFacts, lines: set[int], report: bool = False, place: bool = True) -> None:
        super().__init__(facts, lines)
        self.report_waits = report
        self.place = place
        #: The ``torch.load`` lines left without a barrier before them (a block not every rank
        #: runs alike, or where the accelerator is not reachable): (function, original line).
        self.unguarded: list[tuple[str, int]] = []

    def without_barriers(self, statements: Sequence[cst.BaseStatement]) -> None:
        """Note the statement lines of ``statements`` (not of blocks nested in them) that load."""
        for statement in statements:
            if isinstance(statement, cst.SimpleStatementLine) and contains_call(statement, self.facts, "torch.load"):
                self.unguarded.append((self.function, self.site(first_small(statement)).line))

    def with_barriers(self, statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        if not self.place:
            return None
        result: list[cst.BaseStatement] = []
        after_load = False  # the statement before loads too: one barrier serves loads in a row
        for statement in statements:
            loads = isinstance(statement, cst.SimpleStatementLine) and contains_call(
                statement, self.facts, "torch.load"
            )
            opened = self._reading_from_opened_file(statement)
            if opened is not None:
                # ``with open(path, "rb") as f: model = torch.load(f)``: the file is opened before
                # the load, so the ranks wait before the ``with`` (the barrier in it came too late).
                statement, loads = opened, True
            waits = after_load or (bool(result) and is_barrier(result[-1], self.facts))
            after_load = loads
            if loads and not waits:
                result.append(
                    cst.SimpleStatementLine(
                        [cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))],
                        leading_lines=as_statement(statement).leading_lines,
                    )
                )
                statement = statement.with_changes(leading_lines=())
                if self.report_waits:
                    self.report(
                        statement,
                        CHECKPOINT,
                        "every rank waits before torch.load: another module of the program saves the checkpoints",
                    )
            result.append(statement)
        return result if len(result) != len(statements) else None

    def _reading_from_opened_file(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """A ``with open(...) as f:`` whose body loads with ``torch.load``, without the barrier
        put in front of that load; None for anything else."""
        if not isinstance(statement, cst.With) or not isinstance(statement.body, cst.IndentedBlock):
            return None
        if not any(
            isinstance(item.item, cst.Call) and self.builtin(item.item.func) == "open" for item in statement.items
        ):
            return None
        inner = list(statement.body.body)
        kept: list[cst.BaseStatement] = []
        found = False
        for index, line in enumerate(inner):
            following = inner[index + 1] if index + 1 < len(inner) else None
            if (
                is_barrier(line, self.facts)
                and following is not None
                and contains_call(following, self.facts, "torch.load")
            ):
                found = True
                continue
            kept.append(line)
        if not found and not any(contains_call(line, self.facts, "torch.load") for line in inner):
            return None
        return statement.with_changes(body=statement.body.with_changes(body=kept))


def contains_call(node: cst.CSTNode, facts: ScriptFacts, qualified: str) -> bool:
    finder = _CallFinder(lambda call: facts.callee_name(call.func) == qualified)
    walk(node, finder)
    return finder.found


class _CallFinder(cst.CSTVisitor):
    """Whether a call matching ``predicate`` is in one statement. Local: it reads statements of
    a block this rule is rewriting, in the tree its first rewrite returned."""

    def __init__(self, predicate) -> None:
        self.predicate = predicate
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if self.predicate(node):
            self.found = True
        return not self.found
