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
import re
from bisect import bisect_left
from dataclasses import fields, replace
from functools import cache, lru_cache
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.base import Change
from codemods.facts import ScriptFacts, Site
from codemods.names import NameTable, ScopeKey
from codemods.walk import TRIVIA, concrete_subclasses, own_hooks, walk

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


def _any_between(sorted_lines: list[int], first: int, last: int) -> bool:
    index = bisect_left(sorted_lines, first)
    return index < len(sorted_lines) and sorted_lines[index] <= last


def skips_statement(node: cst.CSTNode, sorted_lines: list[int] | None, origins: "OriginIndex | None") -> bool:
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

    def record(self, node: cst.CSTNode, site: Site) -> None:
        self._sites[id(node)] = (site, node)

    def site(self, node: cst.CSTNode) -> Site | None:
        if isinstance(node, cst.SimpleStatementLine) and node.body:
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


class TargetedTransformer(cst.CSTTransformer):
    """What every pass's transformer shares: it walks only the statements holding one of
    ``lines`` (original line numbers; None: all), never enters whitespace or tokens (libcst rebuilds
    every node a transformer enters, so the walk is what a pass costs), and carries the original
    position of each statement, call and the module to the node that replaces it (so that later
    passes still report in terms of the file the user wrote). Without ``origins`` (a pass run on
    its own, in unit tests) it walks everything and carries nothing."""

    def __init__(self, origins: OriginIndex | None, lines: Iterable[int] | None = None) -> None:
        super().__init__()
        self.origins = origins
        self.lines = sorted(set(lines)) if lines is not None else None
        self._hooks = _transformer_hooks(type(self))

    # libcst's on_visit/on_leave look ``visit_<Node>``/``leave_<Node>`` up by a built name for
    # every node, and find one of its thousand no-op stubs for most: the pass's own hooks are
    # looked up once per node type instead, and only they are called.
    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in TRIVIA:
            return False
        visit = self._hooks_of(type(node))[0]
        descend = visit is None or visit(self, node) is not False
        return descend and not skips_statement(node, self.lines, self.origins)

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        leave = self._hooks_of(type(original_node))[1]
        result = updated_node if leave is None else leave(self, original_node, updated_node)
        if self.origins is None or type(original_node) not in CARRIED_TYPES or result is original_node:
            return result
        if isinstance(result, cst.FlattenSentinel):
            for node in result.nodes:
                self.origins.carry(original_node, node)
        elif isinstance(result, cst.CSTNode):
            self.origins.carry(original_node, result)
        return result


    def _hooks_of(self, node_type: type) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
        hooks = self._hooks.get(node_type)
        if hooks is None:
            hooks = self._hooks[node_type] = (
                own_hooks(type(self)).get(f"visit_{node_type.__name__}"),  # type: ignore[arg-type]
                own_hooks(type(self)).get(f"leave_{node_type.__name__}"),  # type: ignore[arg-type]
            )
        return hooks

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass  # no pass has per-field hooks (``_transformer_hooks`` refuses them)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


#: Transformer class → node class → (its own visit hook, its own leave hook), None where only
#: libcst's no-op stub exists.
_HOOKS: dict[type, dict[type, tuple[Callable[..., Any] | None, Callable[..., Any] | None]]] = {}
_FIELD_HOOK = re.compile(r"(visit|leave)_[A-Z]\w*_[a-z]\w*$")


def _transformer_hooks(transformer_type: type) -> dict[type, tuple[Callable[..., Any] | None, Callable[..., Any] | None]]:
    hooks = _HOOKS.get(transformer_type)
    if hooks is None:
        field_hooks = sorted(name for name in own_hooks(transformer_type) if _FIELD_HOOK.match(name))
        if field_hooks:
            raise TypeError(f"{transformer_type.__name__} has per-field hooks ({', '.join(field_hooks)}), "
                            "which TargetedTransformer does not call")
        hooks = _HOOKS[transformer_type] = {}
    return hooks


class CodemodTransformer(TargetedTransformer):
    """Base of the ACC10x passes' transformers: knows the enclosing scope (as the name table keys
    it) and collects :class:`Change` records; ``lines`` are the sites it may change."""

    def __init__(
        self,
        names: NameTable,
        origins: OriginIndex,
        accelerator: str = "accelerator",
        lines: Iterable[Site] | None = None,
    ) -> None:
        super().__init__(origins, {site.line for site in lines} if lines is not None else None)
        self.names = names
        self.accelerator = accelerator
        self.scope: ScopeKey = ()
        self.changes: list[Change] = []

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
        """Record a change at ``node``'s original position; a compound statement (a ``def``, a
        loop) is reported at its first line only, not over its whole body."""
        site = self.site(node)
        end_line, end_column = site.end_line, site.end_column
        if isinstance(node, cst.BaseCompoundStatement) and end_line != site.line:
            end_line, end_column = site.line, site.column
        self.changes.append(Change(code, message, site.line, site.column, end_line, end_column, fixed))


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
_AST_LEAVES = frozenset({
    ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del,
    *ast.operator.__subclasses__(), *ast.cmpop.__subclasses__(),
    *ast.unaryop.__subclasses__(), *ast.boolop.__subclasses__(),
})


def _ast_sites(
    source: str | bytes, encoding: str = "utf-8"
) -> tuple[list[tuple[Site, ast.AST]], list[tuple[Site, ast.AST]]] | None:
    """Statements and calls of ``source`` with positions, each list in source order."""
    tree = python_ast(source)
    if tree is None:
        return None
    statement_nodes: list[ast.AST] = []
    call_nodes: list[ast.AST] = []
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
                pending.extend(child for child in value if isinstance(child, ast.AST) and type(child) not in _AST_LEAVES)
            elif isinstance(value, ast.AST) and type(value) not in _AST_LEAVES:
                pending.append(value)
    if source.isascii():
        # Byte and character columns agree: no line needs decoding.
        site_of = lambda node: Site(node.lineno, node.col_offset, node.end_lineno or node.lineno,  # noqa: E731
                                    node.end_col_offset or 0)
    else:
        lines = _Lines(source, encoding)
        site_of = lambda node: _site_of(node, lines)  # noqa: E731
    order = lambda item: (item[0].line, item[0].column, -item[0].end_line, -item[0].end_column)  # noqa: E731
    statements = sorted(((site_of(node), node) for node in statement_nodes), key=order)
    calls = sorted(((site_of(node), node) for node in call_nodes), key=order)
    return statements, calls


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


def _site_of(node: ast.AST, lines: "_Lines") -> Site:
    """libcst counts columns in characters, ast in UTF-8 bytes: convert on non-ASCII lines."""
    line, end_line = node.lineno, node.end_lineno or node.lineno
    return Site(line, _char_column(lines, line, node.col_offset), end_line,
                _char_column(lines, end_line, node.end_col_offset or 0))


def _char_column(lines: "_Lines", line: int, byte_column: int) -> int:
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
    walk(node, collector)
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

    The fallback for a pass that is not a :class:`CodemodTransformer`. Children are paired field
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
                pairs = (
                    zip(old_value, new_value)
                    if len(old_value) == len(new_value)
                    else _align(old_value, new_value)
                )
                stack.extend((a, b) for a, b in pairs if type(a) is type(b) and isinstance(a, cst.CSTNode))


#: Nodes without statements or calls inside: nothing below them has a recorded position.
_NO_POSITIONS_INSIDE = TRIVIA | concrete_subclasses(cst.Name, cst.BaseNumber, cst.SimpleString)


@cache
def _child_fields(node_type: type) -> tuple[str, ...]:
    """The dataclass fields of a node type (children live in fields, in source order)."""
    return tuple(field.name for field in fields(node_type))


def _align(
    old: Sequence[cst.CSTNode], new: Sequence[cst.CSTNode]
) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    from difflib import SequenceMatcher

    printer = cst.Module([])
    keys_old = [_alignment_key(node, printer) for node in old]
    keys_new = [_alignment_key(node, printer) for node in new]
    pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    previous_old = previous_new = 0
    for block in SequenceMatcher(None, keys_old, keys_new, autojunk=False).get_matching_blocks():
        gap_old, gap_new = block.a - previous_old, block.b - previous_new
        if gap_old == gap_new:
            pairs.extend(zip(old[previous_old:block.a], new[previous_new:block.b]))
        pairs.extend(zip(old[block.a:block.a + block.size], new[block.b:block.b + block.size]))
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


class HomeBlockTransformer(CodemodTransformer):
    """Calls :meth:`edit_home` with the statements of the block that builds the training objects:
    the body of ``facts.main_function``, of the ``if __name__ == "__main__":`` block, or the module."""

    def __init__(self, facts: ScriptFacts, **kwargs: object) -> None:
        # Only the home block's own statement list is edited: nothing below needs a walk.
        kwargs.setdefault("lines", ())
        super().__init__(facts.names, facts.origins, **kwargs)  # type: ignore[arg-type]
        self.facts = facts

    def edit_home(self, body: list[cst.BaseStatement], anchor: cst.CSTNode) -> list[cst.BaseStatement]:
        """Return the new statements; ``anchor`` is the original node owning them (for reports)."""
        raise NotImplementedError

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):  # type: ignore[no-untyped-def]
        updated = super().leave_FunctionDef(original_node, updated_node)
        if (
            self.facts.home_kind == "function"
            and not self.scope
            and original_node.name.value == self.facts.main_function
            and isinstance(updated.body, cst.IndentedBlock)
        ):
            body = self.edit_home(list(updated.body.body), original_node)
            return updated.with_changes(body=updated.body.with_changes(body=body))
        return updated

    def leave_If(self, original_node: cst.If, updated_node: cst.If):  # type: ignore[no-untyped-def]
        if (
            self.facts.home_kind == "main_guard"
            and not self.scope
            and is_main_guard(original_node)
            and isinstance(updated_node.body, cst.IndentedBlock)
        ):
            body = self.edit_home(list(updated_node.body.body), original_node)
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        return updated_node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module):  # type: ignore[no-untyped-def]
        if self.facts.home_kind == "module":
            return updated_node.with_changes(body=self.edit_home(list(updated_node.body), original_node))
        return updated_node



def is_main_guard(node: cst.CSTNode) -> bool:
    """``if __name__ == "__main__":``."""
    if not isinstance(node, cst.If) or not isinstance(node.test, cst.Comparison):
        return False
    test = node.test
    return (
        isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].comparator, cst.SimpleString)
        and test.comparisons[0].comparator.evaluated_value == "__main__"
    )


def assigned_in(statement: cst.CSTNode) -> set[str]:
    """Names a statement binds by assignment, at any depth except inside nested defs/classes."""
    finder = _Assigned()
    walk(statement, finder)
    return finder.names


class _Assigned(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.names.update(target_names(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.names.update(target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.names.update(target_names(node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.names.update(target_names(node.asname.name))


def first_statement_index(body: Sequence[cst.BaseStatement]) -> int:
    """Index after a leading docstring and ``from __future__`` imports."""
    index = 0
    while index < len(body) and (is_docstring(body[index]) if index == 0 else False):
        index += 1
    while index < len(body) and _is_future_import(body[index]):
        index += 1
    return index


def _is_future_import(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.ImportFrom)
        and dotted(statement.body[0].module) == "__future__"
    )


def parses_arguments(statement: cst.BaseStatement) -> bool:
    """``args = parser.parse_args()`` / ``args, _ = parse_known_args()`` / ``opt = parse_args()``."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call):
            name = dotted(small.value.func) or ""
            if name.rsplit(".", 1)[-1] in {"parse_args", "parse_known_args", "parse_args_into_dataclasses"}:
                return True
    return False


def move_to_original(change: Change, received: cst.Module, original_lines: list[str]) -> Change:
    """Translate a change positioned in ``received`` (a later tree) to the original file, by
    matching lines: a line that survived unchanged keeps its column; a rewritten one maps to the
    start of the original lines it replaced."""
    mapping = _line_mapping(original_lines, received.code.splitlines())
    line = mapping.get(change.line, change.line)
    end_line = max(line, mapping.get(change.end_line, change.end_line))
    return replace(change, line=line, end_line=end_line)


def _line_mapping(original: list[str], current: list[str]) -> dict[int, int]:
    from difflib import SequenceMatcher

    mapping: dict[int, int] = {}
    matcher = SequenceMatcher(None, original, current, autojunk=False)
    for tag, first, last, start, stop in matcher.get_opcodes():
        for offset, line in enumerate(range(start, stop)):
            target = first + offset if tag == "equal" else min(first + offset, max(first, last - 1))
            mapping[line + 1] = min(target, max(len(original) - 1, 0)) + 1
    return mapping
