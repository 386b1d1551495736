"""Shared libcst helpers: original positions across passes, a transformer base, small builders.

Why positions need care: every codemod pass returns a new tree, so the ``PositionProvider`` of a
later pass would count lines in a file that earlier passes already changed, and computing it per
pass costs more than a parse. Instead the analysis records the original position of every statement
and call once (see :func:`original_sites`), and :class:`CodemodTransformer` carries each record from
the node a pass received to the node it returned. A change is then reported at
``self.site(original_node)``: a position in the file the user wrote.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.base import Change
from codemods.facts import Site
from codemods.names import NameTable, ScopeKey

#: The node kinds whose original positions are recorded.
POSITIONED = (cst.Call, cst.BaseSmallStatement, cst.BaseCompoundStatement)


class OriginIndex:
    """Node identity → original :class:`Site`, kept valid from pass to pass.

    The index holds a reference to every node it knows, so an identity is never reused by a new
    object while the conversion runs.
    """

    def __init__(self) -> None:
        self._sites: dict[int, tuple[Site, cst.CSTNode]] = {}

    def record(self, node: cst.CSTNode, site: Site) -> None:
        self._sites[id(node)] = (site, node)

    def site(self, node: cst.CSTNode) -> Site | None:
        entry = self._sites.get(id(node))
        return entry[0] if entry is not None and entry[1] is node else None

    def carry(self, original: cst.CSTNode, updated: cst.CSTNode) -> None:
        """The node a pass returned stands where ``original`` stood."""
        entry = self._sites.get(id(original))
        if entry is not None and entry[1] is original:
            self._sites[id(updated)] = (entry[0], updated)


class CodemodTransformer(cst.CSTTransformer):
    """Base of the codemods' transformers: knows the enclosing scope (as the name table keys it),
    carries original positions forward, and collects :class:`Change` records."""

    def __init__(self, names: NameTable, origins: OriginIndex, accelerator: str = "accelerator") -> None:
        super().__init__()
        self.names = names
        self.origins = origins
        self.accelerator = accelerator
        self.scope: ScopeKey = ()
        self.changes: list[Change] = []

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        result = super().on_leave(original_node, updated_node)
        if isinstance(result, cst.CSTNode):
            if result is not original_node:
                self.origins.carry(original_node, result)
        elif isinstance(result, cst.FlattenSentinel):
            for node in result.nodes:
                self.origins.carry(original_node, node)
        return result

    # Scope bookkeeping, matching codemods.names.NameCollector.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        self.scope = (*self.scope, node.name.value)
        return None

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):  # type: ignore[no-untyped-def]
        self.scope = self.scope[:-1]
        return updated_node

    def visit_ClassDef(self, node: cst.ClassDef) -> bool | None:
        self.scope = (*self.scope, node.name.value)
        return None

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef):  # type: ignore[no-untyped-def]
        self.scope = self.scope[:-1]
        return updated_node

    @property
    def function(self) -> str:
        """The enclosing module-level function's name, ``"<module>"`` outside any function."""
        return self.scope[0] if self.scope else "<module>"

    def qualified_name(self, node: cst.BaseExpression) -> str | None:
        return self.names.qualified_name(node, self.scope)

    def site(self, node: cst.CSTNode) -> Site:
        """The original position of ``node`` (a node of the tree this pass received)."""
        return self.origins.site(node) or Site(1, 0, 1, 0)

    def report(self, code: str, message: str, node: cst.CSTNode, *, fixed: bool = True) -> None:
        site = self.site(node)
        self.changes.append(
            Change(code, message, site.line, site.column, site.end_line, site.end_column, fixed)
        )


# -- original positions -----------------------------------------------------------------------


def _ast_sites(source: str) -> tuple[list[tuple[Site, ast.AST]], list[tuple[Site, ast.AST]]] | None:
    """Statements and calls of ``source`` with positions, each list in source order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines()
    statements: list[tuple[Site, ast.AST]] = []
    calls: list[tuple[Site, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            statements.append((_site_of(node, lines), node))
        elif isinstance(node, ast.Call):
            calls.append((_site_of(node, lines), node))
    order = lambda item: (item[0].line, item[0].column, -item[0].end_line, -item[0].end_column)  # noqa: E731
    statements.sort(key=order)
    calls.sort(key=order)
    return statements, calls


def _site_of(node: ast.AST, lines: list[str]) -> Site:
    """libcst counts columns in characters, ast in UTF-8 bytes: convert on non-ASCII lines."""
    line, end_line = node.lineno, node.end_lineno or node.lineno
    return Site(line, _char_column(lines, line, node.col_offset), end_line,
                _char_column(lines, end_line, node.end_col_offset or 0))


def _char_column(lines: list[str], line: int, byte_column: int) -> int:
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return byte_column
    return len(text.encode("utf-8")[:byte_column].decode("utf-8", errors="ignore"))


def _same_callee(cst_call: cst.Call, ast_call: ast.AST) -> bool:
    """A cheap check that two calls matched by order are the same call."""
    func = cst_call.func
    target = getattr(ast_call, "func", None)
    if isinstance(func, cst.Name):
        return isinstance(target, ast.Name) and target.id == func.value
    if isinstance(func, cst.Attribute):
        return isinstance(target, ast.Attribute) and target.attr == func.attr.value
    return not isinstance(target, (ast.Name, ast.Attribute))


def original_sites(module: cst.Module, in_order: Sequence[cst.CSTNode], origins: OriginIndex) -> None:
    """Record the original position of every statement and call of ``module``.

    ``in_order`` holds the module's statements and calls in pre-order, as the analysis visits them.
    Positions come from CPython's ``ast`` (a C parser: far cheaper than libcst's PositionProvider),
    matched by order; if the two trees disagree anywhere, PositionProvider decides instead.
    """
    found = _ast_sites(module.code)
    if found is not None and _match_by_order(in_order, *found, origins):
        return
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    for node in in_order:
        where = positions[node]
        origins.record(node, Site(where.start.line, where.start.column, where.end.line, where.end.column))


def _match_by_order(
    in_order: Sequence[cst.CSTNode],
    statements: list[tuple[Site, ast.AST]],
    calls: list[tuple[Site, ast.AST]],
    origins: OriginIndex,
) -> bool:
    cst_calls = [node for node in in_order if isinstance(node, cst.Call)]
    cst_statements = [node for node in in_order if not isinstance(node, cst.Call)]
    if len(cst_calls) != len(calls) or len(cst_statements) != len(statements):
        return False
    if not all(_same_callee(node, ast_node) for node, (_, ast_node) in zip(cst_calls, calls)):
        return False
    for node, (site, _) in zip(cst_calls, calls):
        origins.record(node, site)
    for node, (site, _) in zip(cst_statements, statements):
        origins.record(node, site)
    return True


# -- small builders and readers -----------------------------------------------------------------


def dotted(node: cst.CSTNode | None) -> str | None:
    """``self.model`` for Name/Attribute chains, None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base is not None else None
    return None


def root_name(node: cst.BaseExpression) -> str | None:
    """The Name at the root of an attribute/subscript/call chain: ``batch`` for ``batch["x"].to(d)``."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Attribute):
            node = node.value
        elif isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            return None


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def method_call(node: cst.CSTNode, *names: str) -> bool:
    """``node`` is a call ``<something>.<one of names>(...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in names
    )


def names_in(node: cst.CSTNode) -> set[str]:
    """Every Name value inside ``node`` (a small subtree: used on conditions and arguments)."""
    collector = _NameGatherer()
    node.visit(collector)
    return collector.found


class _NameGatherer(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        path = dotted(node)
        if path is not None:
            self.found.add(path)


def target_names(target: cst.BaseExpression) -> tuple[str, ...]:
    """Names bound by an assignment or loop target, in order."""
    if isinstance(target, cst.Name):
        return (target.value,)
    if isinstance(target, (cst.Tuple, cst.List)):
        return tuple(name for element in target.elements for name in target_names(element.value))
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    path = dotted(target)
    return (path,) if path is not None else ()


def is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


# -- passes that do not carry positions ---------------------------------------------------------


def reanchor(old: cst.CSTNode, new: cst.CSTNode, origins: OriginIndex) -> None:
    """Carry original positions from ``old`` to ``new`` by walking both trees side by side.

    The fallback for a pass that is not a :class:`CodemodTransformer`: where a child list changed
    length (statements inserted or removed), children are aligned by their code, and unmatched
    stretches of equal length pair up in order.
    """
    stack = [(old, new)]
    while stack:
        before, after = stack.pop()
        if before is after:
            continue
        origins.carry(before, after)
        old_children, new_children = before.children, after.children
        pairs = (
            zip(old_children, new_children)
            if len(old_children) == len(new_children)
            else _align(old_children, new_children)
        )
        stack.extend((a, b) for a, b in pairs if type(a) is type(b))


def _align(
    old: Sequence[cst.CSTNode], new: Sequence[cst.CSTNode]
) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    from difflib import SequenceMatcher

    module = cst.Module([])
    codes_old = [module.code_for_node(node) for node in old]
    codes_new = [module.code_for_node(node) for node in new]
    pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    previous_old = previous_new = 0
    for block in SequenceMatcher(None, codes_old, codes_new, autojunk=False).get_matching_blocks():
        gap_old, gap_new = block.a - previous_old, block.b - previous_new
        if gap_old == gap_new:
            pairs.extend(zip(old[previous_old:block.a], new[previous_new:block.b]))
        pairs.extend(zip(old[block.a:block.a + block.size], new[block.b:block.b + block.size]))
        previous_old, previous_new = block.a + block.size, block.b + block.size
    return pairs
