"""Shared libcst helpers: original positions across passes, a transformer base, small builders.

Why positions need care: every codemod pass returns a new tree, so the ``PositionProvider`` of a
later pass would count lines in a file that earlier passes already changed, and computing it per
pass costs more than a parse. Instead the analysis records the original position of every statement
and call once (see :func:`original_sites`), and :class:`RuleTransformer` carries each record from
the node a pass received to the node it returned. A change is then reported at
``self.site(original_node)``: a position in the file the user wrote.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import fields
from functools import cache, lru_cache
from types import MappingProxyType
from typing import TypeVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.walk import TRIVIA, concrete_subclasses

#: The node kinds whose original positions are recorded.
POSITIONED = (cst.Call, cst.BaseSmallStatement, cst.BaseCompoundStatement)
#: The same as a set of exact types: a set lookup per node is several times cheaper than an
#: ``isinstance`` against libcst's abstract classes, and the passes ask it for every node.
POSITIONED_TYPES = concrete_subclasses(*POSITIONED)
#: What a pass carries positions over to the nodes it returns: those, and the module (whose
#: carried record tells ``codemods.convert_module`` that the pass carried them).
CARRIED_TYPES = POSITIONED_TYPES | {cst.Module}
STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
STATEMENT_TYPES = concrete_subclasses(*STATEMENTS)
_Statement = TypeVar("_Statement", bound=cst.CSTNode)


def _any_between(sorted_lines: list[int], first: int, last: int) -> bool:
    index = bisect_left(sorted_lines, first)
    return index < len(sorted_lines) and sorted_lines[index] <= last


def skips_statement(node: cst.CSTNode, sorted_lines: list[int] | None, origins: OriginIndex | None) -> bool:
    """Whether a pass that may change only ``sorted_lines`` (original lines; None: any) can leave
    ``node`` unwalked: a statement whose original lines hold none of them. The walk is what a pass
    costs (libcst rebuilds every node a transformer enters), so skipping is what keeps passes
    cheap. A statement an earlier pass inserted has no site: it is small, walk it."""
    if sorted_lines is None or origins is None or type(node) not in STATEMENT_TYPES:
        return False
    site = origins.site(node)
    return site is not None and not _any_between(sorted_lines, site.line, site.end_line)


class OriginIndex:
    """Node identity → original :class:`Site`, kept valid from pass to pass.

    The index holds a reference to every node it knows, so an identity is never reused by a new
    object while the conversion runs.
    """

    def __init__(self) -> None:
        self._sites: dict[int, tuple[Site, cst.CSTNode]] = {}

    def __len__(self) -> int:
        return len(self._sites)

    def record(self, node: cst.CSTNode, site: Site) -> None:
        self._sites[id(node)] = (site, node)

    def site(self, node: cst.CSTNode) -> Site | None:
        if type(node) is cst.SimpleStatementLine and node.body:
            node = node.body[0]
        entry = self._sites.get(id(node))
        return entry[0] if entry is not None and entry[1] is node else None

    def carried(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` itself (not a statement line's first statement) has a site."""
        entry = self._sites.get(id(node))
        return entry is not None and entry[1] is node

    def carry(self, original: cst.CSTNode, updated: cst.CSTNode) -> None:
        """The node a pass returned stands where ``original`` stood."""
        entry = self._sites.get(id(original))
        if entry is not None and entry[1] is original:
            self._sites[id(updated)] = (entry[0], updated)

    def relined(self, statement: _Statement, leading_lines: Sequence[cst.EmptyLine]) -> _Statement:
        """``statement`` with other blank or comment lines above it (the lines of a block a
        removal dissolved, or none where it went first in its block), still at its original
        site: a compound statement is a new node, and a later pass that finds it by its
        original line (the ``if``/``else`` binding the optimizer, where ``prepare`` goes
        after it) must still find it."""
        relined = statement.with_changes(leading_lines=leading_lines)
        self.carry(statement, relined)
        return relined


# -- original positions -----------------------------------------------------------------------


@lru_cache(maxsize=2)
def python_ast(source: str | bytes) -> ast.Module | None:
    """CPython's tree of ``source``; None where CPython cannot parse it. Cached: the pipeline
    checks that a converted script parses, then the analysis of the verification run reads
    positions from the same tree."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return None


#: Node types under which no statement or call can be: the search below does not enter them.
_AST_LEAVES = frozenset(
    {
        ast.Name,
        ast.Constant,
        ast.Load,
        ast.Store,
        ast.Del,
        *ast.operator.__subclasses__(),
        *ast.cmpop.__subclasses__(),
        *ast.unaryop.__subclasses__(),
        *ast.boolop.__subclasses__(),
    }
)


def _ast_sites(
    source: str | bytes, encoding: str = "utf-8"
) -> tuple[list[tuple[Site, ast.stmt]], list[tuple[Site, ast.Call]]] | None:
    """Statements and calls of ``source`` with positions, each list in source order."""
    tree = python_ast(source)
    if tree is None:
        return None
    statement_nodes: list[ast.stmt] = []
    call_nodes: list[ast.Call] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if type(node) is ast.Call:
            call_nodes.append(node)
        elif isinstance(node, ast.stmt):
            statement_nodes.append(node)
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                pending.extend(
                    child for child in value if isinstance(child, ast.AST) and type(child) not in _AST_LEAVES
                )
            elif isinstance(value, ast.AST) and type(value) not in _AST_LEAVES:
                pending.append(value)
    if source.isascii():
        # Byte and character columns agree: no line needs decoding.
        site_of = lambda node: Site(  # noqa: E731
            node.lineno,
            node.col_offset,
            node.end_lineno or node.lineno,
            node.end_col_offset or 0,
        )
    else:
        lines = _Lines(source, encoding)
        site_of = lambda node: _site_of(node, lines)  # noqa: E731
    order = lambda item: (item[0].line, item[0].column, -item[0].end_line, -item[0].end_column)  # noqa: E731
    statements = sorted(((site_of(node), node) for node in statement_nodes), key=order)
    calls = sorted(((site_of(node), node) for node in call_nodes), key=order)
    return statements, calls


@lru_cache(maxsize=2)
def python_statements(source: str | bytes, encoding: str = "utf-8") -> Mapping[tuple[int, int], ast.stmt]:
    """CPython's statements of ``source`` (:func:`python_ast`'s, at every depth) by where each
    starts, line and column counted as :class:`Site` counts them: what the site
    :func:`original_sites` recorded for a libcst statement (a small one, or a compound one) finds.
    Empty where CPython cannot parse ``source``. Cached: the plan asks it of several statements
    of one module."""
    found = _ast_sites(source, encoding)
    if found is None:
        return MappingProxyType({})
    return MappingProxyType({(site.line, site.column): node for site, node in found[0]})


def handler_sites(source: str | bytes, encoding: str, exception: str) -> list[Site]:
    """Where the ``except`` clauses that name ``exception`` (alone or in a tuple) start, in source
    order (the ``except`` keyword: libcst records no position for a handler)."""
    tree = python_ast(source)
    if tree is None:
        return []
    lines = _Lines(source, encoding)
    found = []
    # Handlers hang in statement lists only: follow those, not every expression.
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, name, None)
            if type(block) is list:
                pending.extend(block)
        if isinstance(node, ast.ExceptHandler) and _names(node.type, exception):
            start = _site_of(node, lines)
            found.append(Site(start.line, start.column, start.line, start.column + len("except")))
    return sorted(found, key=lambda site: (site.line, site.column))


def _names(expression: ast.expr | None, name: str) -> bool:
    if isinstance(expression, ast.Tuple):
        return any(_names(element, name) for element in expression.elts)
    return (isinstance(expression, ast.Name) and expression.id == name) or (
        isinstance(expression, ast.Attribute) and expression.attr == name
    )


class _Lines:
    """The source's lines as text, decoded only when asked for (non-ASCII columns are rare)."""

    def __init__(self, source: str | bytes, encoding: str) -> None:
        self.lines = source.splitlines()
        self.encoding = encoding

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, index: int) -> str:
        line = self.lines[index]
        return line.decode(self.encoding, errors="replace") if isinstance(line, bytes) else line


#: The ast nodes that carry positions (``lineno``, ``col_offset``...).
Positioned = ast.stmt | ast.expr | ast.excepthandler


def _site_of(node: Positioned, lines: _Lines) -> Site:
    """libcst counts columns in characters, ast in UTF-8 bytes: convert on non-ASCII lines."""
    line, end_line = node.lineno, node.end_lineno or node.lineno
    return Site(
        line,
        _char_column(lines, line, node.col_offset),
        end_line,
        _char_column(lines, end_line, node.end_col_offset or 0),
    )


def _char_column(lines: _Lines, line: int, byte_column: int) -> int:
    raw = lines.lines[line - 1] if 0 < line <= len(lines) else ""
    if raw.isascii():
        return byte_column
    text = lines[line - 1]
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


def original_sites(
    module: cst.Module,
    in_order: Sequence[cst.CSTNode],
    origins: OriginIndex,
    source: str | bytes | None = None,
) -> None:
    """Record the original position of every statement and call of ``module``.

    ``in_order`` holds the module's statements and calls in pre-order, as the analysis visits them.
    ``source`` is the text or bytes the module was parsed from, when the caller has it (saves
    generating the code again).
    Positions come from CPython's ``ast`` (a C parser: far cheaper than libcst's PositionProvider),
    matched by order; if the two trees disagree anywhere, PositionProvider decides instead.
    """
    found = _ast_sites(source if source is not None else module.code, module.encoding)
    if found is not None and _match_by_order(in_order, *found, origins):
        return
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    for node in in_order:
        where = positions[node]
        origins.record(node, Site(where.start.line, where.start.column, where.end.line, where.end.column))


def _match_by_order(
    in_order: Sequence[cst.CSTNode],
    statements: list[tuple[Site, ast.stmt]],
    calls: list[tuple[Site, ast.Call]],
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
    for statement, (site, _) in zip(cst_statements, statements):
        origins.record(statement, site)
    return True


# -- small builders and readers -----------------------------------------------------------------


# -- passes that do not carry positions ---------------------------------------------------------


def reanchor(old: cst.CSTNode, new: cst.CSTNode, origins: OriginIndex) -> None:
    """Carry original positions from ``old`` to ``new`` by walking both trees side by side.

    The fallback for a pass that is not a :class:`RuleTransformer`. Children are paired field
    by field (read straight off the dataclass: ``CSTNode.children`` runs a visitor per node, which
    made this walk cost three parses); where a list of children changed length (statements
    inserted or removed) they are aligned by a cheap key, and unmatched stretches of equal length
    pair up in order. Leaves that can hold no statement or call are not entered.
    """
    stack = [(old, new)]
    while stack:
        before, after = stack.pop()
        if before is after or type(before) in _NO_POSITIONS_INSIDE:
            continue
        if origins.carried(after):
            # The pass carried this statement or call itself, and with it everything it walked.
            continue
        origins.carry(before, after)
        for name in _child_fields(type(before)):
            old_value, new_value = getattr(before, name), getattr(after, name)
            if isinstance(old_value, cst.CSTNode):
                if type(old_value) is type(new_value):
                    stack.append((old_value, new_value))
            elif isinstance(old_value, Sequence) and not isinstance(old_value, str):
                if not isinstance(new_value, Sequence) or isinstance(new_value, str):
                    continue
                pairs = zip(old_value, new_value) if len(old_value) == len(new_value) else _align(old_value, new_value)
                stack.extend((a, b) for a, b in pairs if type(a) is type(b) and isinstance(a, cst.CSTNode))


#: Nodes without statements or calls inside: nothing below them has a recorded position.
_NO_POSITIONS_INSIDE = TRIVIA | concrete_subclasses(cst.Name, cst.BaseNumber, cst.SimpleString)


@cache
def _child_fields(node_type: type) -> tuple[str, ...]:
    """The dataclass fields of a node type (children live in fields, in source order)."""
    return tuple(field.name for field in fields(node_type))


def _align(old: Sequence[cst.CSTNode], new: Sequence[cst.CSTNode]) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    from difflib import SequenceMatcher

    printer = cst.Module([])
    keys_old = [_alignment_key(node, printer) for node in old]
    keys_new = [_alignment_key(node, printer) for node in new]
    pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    previous_old = previous_new = 0
    for block in SequenceMatcher(None, keys_old, keys_new, autojunk=False).get_matching_blocks():
        gap_old, gap_new = block.a - previous_old, block.b - previous_new
        if gap_old == gap_new:
            pairs.extend(zip(old[previous_old : block.a], new[previous_new : block.b]))
        pairs.extend(zip(old[block.a : block.a + block.size], new[block.b : block.b + block.size]))
        previous_old, previous_new = block.a + block.size, block.b + block.size
    return pairs


def _alignment_key(node: cst.CSTNode, printer: cst.Module) -> tuple[str, str]:
    """What identifies a child in its list: small nodes by their code; a compound statement by
    its header (its name, test or iterable), so that printing a whole function body is never
    needed and a body the pass edited still lines up with the one it came from."""
    header: cst.CSTNode | None = None
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return type(node).__name__, node.name.value
    if isinstance(node, (cst.If, cst.While)):
        header = node.test
    elif isinstance(node, cst.For):
        header = node.iter
    elif isinstance(node, cst.With):
        header = node.items[0] if node.items else None
    elif isinstance(node, cst.Match):
        header = node.subject
    elif isinstance(node, cst.BaseCompoundStatement):
        return type(node).__name__, ""
    else:
        return type(node).__name__, printer.code_for_node(node)
    return type(node).__name__, printer.code_for_node(header) if header is not None else ""


# -- the home block: where the training objects are built ---------------------------------------
