"""Blocks the removals left empty or alike.

``if args.cuda: model.cuda()`` disappears as a whole; ``if cuda: <nothing> else: x`` becomes
``if not cuda: x``; a loop or function left empty gets ``pass``; an if/elif/else whose branches
all became ``device = accelerator.device`` becomes that one statement; a block whose first
statement went does not start with a blank line.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.syntax import as_operand, dotted
from accel_convert.codemods.rewrites.device.state import DeviceWalkState


class EmptiedBlocks(DeviceWalkState):
    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine):
        if not updated_node.body:
            return cst.RemoveFromParent()
        return updated_node

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        """A block whose first statement was removed must not start with a blank line."""
        body = updated_node.body
        if not body or len(body) >= len(original_node.body) or not hasattr(body[0], "leading_lines"):
            return updated_node
        first = body[0]
        if first.leading_lines and not any(line.comment for line in first.leading_lines):
            removed_first = self.origins.site(original_node.body[0]) != self.origins.site(first)
            if removed_first:
                return updated_node.with_changes(body=[self.origins.relined(first, ()), *body[1:]])
        return updated_node

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def leave_If(self, original_node: cst.If, updated_node: cst.If):
        if id(original_node) in self._elifs:
            # An ``elif`` stands where only an ``If`` may stand: the ``if`` that owns it decides
            # (``_same_branches`` reads the whole chain); an emptied branch gets ``pass``.
            if has_statements(updated_node.body):
                return updated_node
            return updated_node.with_changes(body=with_pass(updated_node.body))
        same = _same_branches(updated_node)
        if same is not None:
            # ``if available: device = A else: device = B`` now reads ``device = accelerator.device``
            # in both branches: one statement says it.
            first = same[0].with_changes(leading_lines=updated_node.leading_lines)
            return cst.FlattenSentinel([first, *same[1:]])
        if has_statements(updated_node.body):
            if isinstance(updated_node.orelse, cst.Else) and not has_statements(updated_node.orelse.body):
                return updated_node.with_changes(orelse=None)
            return updated_node
        orelse = updated_node.orelse
        if orelse is None:
            return cst.RemoveFromParent()
        if isinstance(orelse, cst.Else) and has_statements(orelse.body):
            # ``if cuda: <nothing> else: x`` → ``if not cuda: x``
            return updated_node.with_changes(
                test=cst.UnaryOperation(cst.Not(), as_operand(updated_node.test)),
                body=orelse.body,
                orelse=None,
            )
        return updated_node.with_changes(body=with_pass(updated_node.body))

    def leave_For(self, original_node: cst.For, updated_node: cst.For):
        return (
            updated_node
            if has_statements(updated_node.body)
            else updated_node.with_changes(body=with_pass(updated_node.body))
        )

    def leave_While(self, original_node: cst.While, updated_node: cst.While):
        return (
            updated_node
            if has_statements(updated_node.body)
            else updated_node.with_changes(body=with_pass(updated_node.body))
        )

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        updated = updated_node
        return updated if has_statements(updated.body) else updated.with_changes(body=with_pass(updated.body))


def _same_branches(node: cst.If) -> list[cst.BaseStatement] | None:
    """The statements of an if/elif/else whose branches are now all the same code (None
    otherwise): ``if cuda: device = A elif mps: device = B else: device = C`` after each became
    ``device = accelerator.device``."""
    blocks: list[cst.BaseSuite] = [node.body]
    orelse = node.orelse
    while isinstance(orelse, cst.If):
        blocks.append(orelse.body)
        orelse = orelse.orelse
    if not isinstance(orelse, cst.Else):
        return None
    blocks.append(orelse.body)
    if not all(isinstance(block, cst.IndentedBlock) and block.body for block in blocks):
        return None
    assert isinstance(node.body, cst.IndentedBlock)
    code = cst.Module([]).code_for_node
    body = [code(statement) for statement in node.body.body]
    if any(body != [code(statement) for statement in block.body] for block in blocks[1:]):
        return None
    if not all(dotted(_assigned_value(statement)) is not None for statement in node.body.body):
        return None  # only assignments of a name: never collapse branches doing work
    return list(node.body.body)


def _assigned_value(statement: cst.BaseStatement) -> cst.BaseExpression | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign):
            return small.value
    return None


def has_statements(block: cst.BaseSuite) -> bool:
    if isinstance(block, cst.IndentedBlock):
        return bool(block.body)
    return bool(block.body)  # SimpleStatementSuite


def with_pass(block: cst.BaseSuite) -> cst.BaseSuite:
    if isinstance(block, cst.IndentedBlock):
        return block.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
    return block.with_changes(body=[cst.Pass()])
