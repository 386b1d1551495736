"""The statement that creates the accelerator: giving it an argument (``mixed_precision=...``,
``gradient_accumulation_steps=...``) that a rule carries over from the script's own set-up, and
moving it up. Finding it is the conversion plan's (:mod:`codemods.model.plan`: one recogniser).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.names import NameTable, collect_names
from accel_convert.codemods.engine.syntax import as_statement, binds_name, dotted
from accel_convert.codemods.engine.torch_names import ACCELERATORS
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import concrete_subclasses, variables_read
from accel_convert.codemods.model.plan import AcceleratorCreation, accelerator_call_of


def unseen_accelerators(facts: ScriptFacts) -> frozenset[str]:
    """Qualified names of an ``Accelerator`` the script imports or calls from a module the
    converter cannot see (``from mylib.accel import Accelerator``, ``utils.Accelerator()``).

    Why: whether it is Accelerate's (re-exported) or another class of that name cannot be told,
    so an accelerator of its own beside it would be a second one, and the import of the target's
    ``Accelerator`` would shadow the script's or be shadowed by it. Such a script is only
    reported on (ACC956), never rewritten.
    """
    seen = {*facts.imports.values(), *facts.called}
    return frozenset(name for name in seen if name.rpartition(".")[2] == "Accelerator" and name not in ACCELERATORS)


def expression_available(expression: cst.BaseExpression, creation: AcceleratorCreation) -> bool:
    """Whether every name the expression reads is bound before the accelerator is created
    (a parameter, an earlier statement of the same body, or module-level code/imports)."""
    for name in variables_read(expression):
        if name in creation.parameters or name in ("True", "False", "None"):
            continue
        if binds_name(creation.statements_before, name) or _module_binds(creation.module_statements, name):
            continue
        return False
    return True


def available_spelling(expression: cst.BaseExpression, creation: AcceleratorCreation) -> cst.BaseExpression | None:
    """``expression`` when it can be read where the accelerator is created; for a name bound once,
    after the creation, by a plain assignment of the same body (``accum = args.accum_steps``), that
    value when it can be read there; else None."""
    if expression_available(expression, creation):
        return expression
    if not isinstance(expression, cst.Name):
        return None
    values = [
        small.value
        for statement in creation.statements_after
        if isinstance(statement, cst.SimpleStatementLine)
        for small in statement.body
        if isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and small.targets[0].target.value == expression.value
    ]
    if len(values) != 1 or binds_name(creation.statements_before, expression.value):
        return None
    return values[0] if expression_available(values[0], creation) else None


def _module_binds(statements: Sequence[cst.CSTNode], name: str) -> bool:
    for statement in statements:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name:
            return True
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        bound = dotted(alias.asname.name if alias.asname else alias.name)
                        if bound and bound.split(".")[0] == name:
                            return True
    return binds_name(statements, name)


def set_accelerator_argument(
    module: cst.Module, facts: ScriptFacts, keyword: str, value: cst.BaseExpression
) -> cst.Module:
    """Give the ``Accelerator(...)`` call ``keyword=value`` unless it already has that keyword."""
    # The call is where the script wrote one, or where the accelerator pass put it (a changed line).
    words = {"Accelerator", accelerator_name(facts)}
    words |= {local for local, qualified in facts.imports.items() if qualified in ACCELERATORS}
    lines = facts.lines_mentioning(words) | facts.changed_lines
    return module.visit(_AcceleratorArgument(facts, keyword, value, lines))


#: What :class:`_AcceleratorArgument` does not enter, by type: a set lookup where ``isinstance``
#: against libcst's abstract ``BaseExpression`` searched its subclasses for each new node type
#: (about 1.5 ms of a file's first conversion).
_NOT_ENTERED = concrete_subclasses(cst.SimpleStatementLine, cst.BaseExpression)


class _AcceleratorArgument(RuleTransformer):
    """Adds the keyword; an RuleTransformer so that the positions of the statements it walks
    are carried (without, every later pass lost them, or the pipeline re-derived them by
    walking the whole tree again)."""

    def __init__(self, facts: ScriptFacts, keyword: str, value: cst.BaseExpression, lines: set[int]) -> None:
        super().__init__(facts, lines)
        self.keyword, self.value = keyword, value
        self.done = False

    def entering_node(self, node: cst.CSTNode) -> bool:
        # The call is a whole statement's value: no need to enter statement lines or expressions.
        if self.done or type(node) in _NOT_ENTERED:
            return False
        return super().entering_node(node)

    def leave_SimpleStatementLine(self, original_node, updated_node):
        call = accelerator_call_of(updated_node, self.facts)
        if call is None or self.done:
            return updated_node
        self.done = True
        if any(a.keyword and a.keyword.value == self.keyword for a in call.args):
            return updated_node
        args = list(call.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(
            cst.Arg(
                self.value,
                keyword=cst.Name(self.keyword),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                ),
            )
        )
        assign = updated_node.body[0].with_changes(value=call.with_changes(args=args))
        return updated_node.with_changes(body=[assign])


def move_creation_before(module: cst.Module, name: str, line: int) -> cst.Module | None:
    """``module`` with ``name = Accelerator(...)`` moved up to just before the statement of its
    own block that holds ``line`` (1-based, in ``module``'s printed code): the repair for a
    rewrite that reads the accelerator above where it was created (a download put under
    ``main_process_first()`` above the creation). None where the creation is not a statement of
    a block holding that line above it."""
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    mover = _MoveCreation(name, line, positions, collect_names(module))
    moved = module.visit(mover)
    return moved if mover.moved else None


class _MoveCreation(cst.CSTTransformer):
    def __init__(self, name: str, line: int, positions: Mapping[cst.CSTNode, CodeRange], names: NameTable) -> None:
        super().__init__()
        self.name = name
        self.line = line
        self.positions = positions
        # The converted module's names: its import of the class included, whatever its spelling.
        self.names = names
        self.scope: tuple[str, ...] = ()
        self.moved = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope = (*self.scope, node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self.scope = self.scope[:-1]
        return updated_node

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scope = (*self.scope, node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.scope = self.scope[:-1]
        return updated_node

    def _creates(self, statement: cst.CSTNode) -> bool:
        """``name = Accelerator(...)`` on a line of its own, the class known by its qualified name."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        assign = statement.body[0]
        return (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and dotted(assign.targets[0].target) == self.name
            and isinstance(assign.value, cst.Call)
            and self.names.qualified_name(assign.value.func, self.scope) in ACCELERATORS
        )

    def _move(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        creation = next((i for i, s in enumerate(body) if self._creates(s)), None)
        if creation is None:
            return None
        reader = next(
            (
                i
                for i, s in enumerate(body[:creation])
                if s in self.positions and self.positions[s].start.line <= self.line <= self.positions[s].end.line
            ),
            None,
        )
        if reader is None:
            return None
        self.moved = True
        created = body[creation]
        rest = [s for i, s in enumerate(body) if i != creation]
        # The blank lines above the statement read from go above the creation; its comments
        # stay with it (they describe it).
        first = as_statement(rest[reader])
        blank = 0
        while blank < len(first.leading_lines) and first.leading_lines[blank].comment is None:
            blank += 1
        if isinstance(created, cst.SimpleStatementLine):
            created = created.with_changes(leading_lines=first.leading_lines[:blank])
            rest[reader] = first.with_changes(leading_lines=first.leading_lines[blank:])
        return [*rest[:reader], created, *rest[reader:]]

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        moved = None if self.moved else self._move(list(original_node.body))
        return updated_node.with_changes(body=moved) if moved is not None else updated_node

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        moved = None if self.moved else self._move(list(original_node.body))
        return updated_node.with_changes(body=moved) if moved is not None else updated_node
