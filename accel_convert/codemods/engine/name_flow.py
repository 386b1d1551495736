"""The converted program's name flow: does it read a name before binding it, or call a function
without an argument the conversion added to it?

This is the check that runs on every conversion before anything is written (the design's first
contract: a converted program never fails where the original ran). It reads CPython's trees of
the original and the converted module and compares them:

- **Reads before binding.** Each scope is walked in execution order: module statements in order
  (notebook cells are module statements), a function's body from its parameters, a class body
  when the class is defined. A read of a name that may still be unbound there is *possibly
  unbound*. A function's reads of module-level names are judged where it is called from module
  level (``train()`` on line 40 reads what lines 1–39 bound), and a function nothing at module
  level calls, against everything the module binds anywhere; ``self.X`` read in ``__init__``
  before ``__init__`` sets it, or never set by any class of its family, counts too.
- **Calls without a new argument.** A function or class whose converted signature has a required
  parameter its original lacked must get it at every call: positionally, by keyword, or through
  ``*args``/``**kwargs``.

The analysis is deliberately simple (a loop body is taken to run; a branch that returns, raises,
breaks or continues binds nothing after it), so it is applied *differentially*: only reads the
conversion added are findings — a scope and name with more possibly unbound reads in the
converted module than in the original. What the script already did is the script's business:
a read that comes, on every path, after the original's own possibly unbound read of the name (in
a later statement of the same block) is not the conversion's either, when the conversion removed
that read (``c_trg = c_trg.to(device)`` after an ``if``/``elif`` binding ``c_trg``): the original
stops there first, with the same error.

Only the standard library's :mod:`ast` is used: the check reads printed code, the one thing every
rewrite agrees on, and CPython's parser reads it in a twentieth of libcst's time.
"""

from __future__ import annotations

import ast
import builtins
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import field
from functools import partial
from operator import attrgetter
from typing import Any

from accel_convert.codemods.engine.chosen_names import next_reads_after_chains, statements_in_order
from accel_convert.records import record

#: Names every module can read without binding them.
ALWAYS_BOUND = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__builtins__"}
#: Names IPython binds in a notebook's namespace (``display``, ``get_ipython``).
NOTEBOOK_NAMES = frozenset({"display", "get_ipython", "In", "Out", "_", "__", "___"})


#: Per node class: the fields that may hold child nodes, in ``ast.iter_child_nodes``'s order,
#: without ``ctx`` (a ``Load``/``Store`` marker, which no question here reads as a child) and the
#: fields the grammar gives a plain name, number or string (``Name.id``, ``alias.name``).
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}
_NEVER_NODES = frozenset({"ctx", "id", "attr", "name", "arg", "module", "level", "kind", "type_comment", "asname"})


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` but the ``ctx`` markers, as a list: the walks here visit
    every node of two trees per conversion, and the generator pair of ``iter_child_nodes`` and
    ``iter_fields`` was a third of their time. The fields are read by one ``attrgetter`` call per
    node (a tree CPython's parser made has every field; one built by hand may lack some)."""
    kind = type(node)
    read = _CHILD_READERS.get(kind)
    if read is None:
        read = _CHILD_READERS[kind] = _fields_reader(_child_field_names(kind))
    try:
        values = read(node)
    except AttributeError:
        values = tuple(getattr(node, name, None) for name in _child_field_names(kind))
    found: list[ast.AST] = []
    for value in values:
        if isinstance(value, ast.AST):
            found.append(value)
        elif type(value) is list:
            found.extend([item for item in value if isinstance(item, ast.AST)])
    return found


def _child_field_names(kind: type[ast.AST]) -> tuple[str, ...]:
    names = _CHILD_FIELDS.get(kind)
    if names is None:
        names = _CHILD_FIELDS[kind] = tuple(name for name in kind._fields if name not in _NEVER_NODES)
    return names


#: Per node class: a function giving the values of its :data:`_CHILD_FIELDS` as a tuple.
_CHILD_READERS: dict[type, Callable[[ast.AST], tuple[Any, ...]]] = {}


def _fields_reader(names: tuple[str, ...]) -> Callable[[ast.AST], tuple[Any, ...]]:
    if not names:
        return lambda node: ()
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda node: (get(node),)
    return attrgetter(*names)


def _walk_ast(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk(node)`` (breadth first, the same order) without the nodes :func:`_children`
    leaves out."""
    pending = deque([node])
    while pending:
        current = pending.popleft()
        pending.extend(_children(current))
        yield current


def _walk_statements(tree: ast.AST) -> Iterator[ast.AST]:
    """The statements of ``tree`` (and the ``except`` and ``case`` clauses holding some), in
    :func:`_walk_ast`'s order: a statement's parent is a statement or such a clause, so this walk
    is that one's with the expressions left out (a tenth of the nodes), for the questions about
    statements only (imports, assignments)."""
    pending = deque([tree])
    while pending:
        current = pending.popleft()
        pending.extend(child for child in _children(current) if isinstance(child, _STATEMENT_HOLDERS))
        yield current


_STATEMENT_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


@record(frozen=True, eq=False, repr=False)
class NameFlowProblem:
    """One read the converted program may make before the name is bound, or one call that does
    not pass a parameter the conversion added. ``line``/``column`` are in the converted module
    (1-based line, 0-based column, as CPython counts)."""

    scope: str
    name: str
    line: int
    column: int
    #: "unbound" (a read before binding), "argument" (a call without the new argument) or
    #: "escapes" (a function that gained a parameter is used as a value: called out of sight).
    kind: str = "unbound"
    #: The line of the module-level statement whose call makes the read (the read's own line
    #: when the read is not in a function called from module level).
    trigger_line: int = 0

    @property
    def statement_line(self) -> int:
        return self.trigger_line or self.line

    @property
    def message(self) -> str:
        """What would go wrong, said of the program the conversion would write."""
        if self.kind == "argument":
            return f"a call of {self.scope} would not pass its new parameter {self.name!r}"
        if self.kind == "escapes":
            return f"{self.scope} is used as a value (called elsewhere), so no call could pass its new parameter {self.name!r}"
        where = "at module level" if self.scope == "<module>" else f"in {self.scope}"
        return f"{self.name!r} would be read {where} before it is bound"


def name_flow_problems(original: ast.Module, converted: ast.Module) -> list[NameFlowProblem]:
    """The reads and calls of ``converted`` that may fail where ``original``'s did not, in
    order of position."""
    flow = _ModuleFlow(converted)
    after = flow.run()
    problems: list[NameFlowProblem] = []
    # Where the converted program has no read that may come before its binding (most
    # conversions), there is nothing to compare: the original's flow is not walked.
    before = _ModuleFlow(original).run() if after else {}
    added = _AddedRebindings(original, converted)
    first_failures = _OriginalFailsFirst(original, converted)
    for key, reads in after.items():
        scope, name = key
        # The first read is where the program would stop.
        line, column = min(reads)
        original_reads = before.get(key) or _reads_of_moved_code(original, before, scope, name)
        rebinding = added.rebinds(name, line)
        # The added statement's own reads are judged by where it stands (the original's next read
        # of the name), not counted: a prepare binding the name's attributes again (``exp.model,
        # ... = accelerator.prepare(exp.model, ...)``) leaves the name itself as it was.
        counted = [read for read in reads if not (rebinding and added.within(read[0], line))]
        if (
            len(counted) > len(original_reads)
            or (rebinding and not added.read_unconditionally(scope, name, original_reads))
        ) and not first_failures.covers(scope, reads, original_reads):
            problems.append(NameFlowProblem(scope, name, line, column, trigger_line=flow.triggers.get(key, 0)))
    problems += _calls_missing_new_arguments({"": original}, {"": converted}).get("", [])
    return sorted(problems, key=lambda problem: (problem.line, problem.column, problem.name))


class _AddedRebindings:
    """Whether the first possibly unbound read of a name is a statement the conversion added that
    reads the name and binds it again (``optimizer, scheduler = accelerator.prepare(optimizer,
    scheduler)`` after a chain that binds ``scheduler`` only under a flag): counting reads alone
    misses it, since the new binding makes the original's later read (``scheduler.step()`` under
    the same flag) a safe one, so the converted program has no more such reads than the original
    although it fails where the original did not. Statements are compared as CPython prints them;
    the original's are only printed when a candidate turns up."""

    def __init__(self, original: ast.Module, converted: ast.Module) -> None:
        self.original = original
        self.converted = converted
        self._original_statements: set[str] | None = None
        self._assignments: list[ast.Assign] | None = None

    def _assignment_at(self, line: int) -> ast.Assign | None:
        if self._assignments is None:
            self._assignments = [node for node in _walk_statements(self.converted) if isinstance(node, ast.Assign)]
        return next(
            (node for node in reversed(self._assignments) if node.lineno <= line <= (node.end_lineno or node.lineno)),
            None,
        )

    def within(self, read_line: int, line: int) -> bool:
        """Whether ``read_line`` is a line of the assignment at ``line``."""
        statement = self._assignment_at(line)
        return statement is not None and statement.lineno <= read_line <= (statement.end_lineno or statement.lineno)

    def rebinds(self, name: str, line: int) -> bool:
        """Whether the assignment at ``line`` is one the conversion added that binds ``name`` again,
        or attributes of it (a training bundle's, ``exp.model, exp.optimizer = accelerator.prepare(
        exp.model, exp.optimizer)``)."""
        statement = self._assignment_at(line)
        if statement is None or not any(
            name in names or name in owners for names, owners in map(_target_bindings, statement.targets)
        ):
            return False
        if self._original_statements is None:
            self._original_statements = {
                ast.unparse(node) for node in _walk_statements(self.original) if isinstance(node, ast.Assign)
            }
        return ast.unparse(statement) not in self._original_statements

    def read_unconditionally(self, scope: str, name: str, reads: Iterable[Position]) -> bool:
        """Whether one of the original's reads is a statement of the scope's own body, outside
        any ``if`` or loop (``scheduler = CosineAnnealingLR(optimizer, ...)`` after the chain
        choosing ``optimizer``), or the next read after an ``if`` chain of the body binding the
        name that waits for no test of what the chain chose by (``optimizer.step()`` in the
        training loop after ``if cfg == "adam": optimizer = ...``:
        :func:`~accel_convert.codemods.engine.chosen_names.next_read`): the original fails there
        when the name is unbound, so a new statement reading it first fails no more often.
        Unknown scopes count as read."""
        body = _scope_body(self.original, scope)
        if body is None:
            return True
        plain = [node for node in body if not isinstance(node, (*_COMPOUND, *_DEFINITIONS))]
        spans = [(node.lineno, node.end_lineno or node.lineno) for node in plain]
        spans += [(read.lineno, read.end_lineno or read.lineno) for read in next_reads_after_chains(body, name)]
        return any(first <= line <= last for line, _ in reads for first, last in spans)


class _OriginalFailsFirst:
    """Whether every possibly unbound read a converted scope makes of a name comes, on every path,
    after one of the original's own possibly unbound reads of it: StarGAN's ``c_trg =
    c_trg.to(self.device)`` after an ``if``/``elif`` binding ``c_trg``, which the conversion
    removes, and ``self.G(x_real, c_trg)`` below it in the same block. Where the name is unbound
    there, the original stops at its own read before it gets that far, with the same error, so
    the converted program fails no more often.

    A converted read is placed in the original by the nearest statement at or before it that
    the original holds as it is (printed the same): the read's own, else an earlier one of its
    block, else its enclosing statement's, and so on out; every original statement printed so
    must come after (or be) one holding an original read, in the same block or one around it."""

    def __init__(self, original: ast.Module, converted: ast.Module) -> None:
        self.original = original
        self.converted = converted
        #: Scope → its statements in both trees, built on the first question about it.
        self._scopes: dict[str, _ScopeStatements | None] = {}

    def covers(self, scope: str, reads: Iterable[Position], original_reads: Iterable[Position]) -> bool:
        if not original_reads:
            return False
        statements = self._statements(scope)
        if statements is None:
            return False
        first_reads = [found[1] for found in map(partial(_innermost, statements.original), original_reads) if found]
        for position in reads:
            found = _innermost(statements.converted, position)
            same = None if found is None else statements.placed_in_original(found[1])
            if not same or not all(
                any(first == chain or _goes_before(first, chain) for first in first_reads) for chain in same
            ):
                return False
        return True

    def _statements(self, scope: str) -> _ScopeStatements | None:
        """The scope's statements in both trees (None where either lacks the scope), made once."""
        if scope not in self._scopes:
            original_body = _scope_body(self.original, scope)
            converted_body = _scope_body(self.converted, scope)
            found = None
            if original_body is not None and converted_body is not None:
                found = _ScopeStatements(_statement_chains(original_body), _statement_chains(converted_body))
            self._scopes[scope] = found
        return self._scopes[scope]


class _ScopeStatements:
    """A scope's statements in the original and the converted tree, each with where it stands
    (:func:`_statement_chains`), and the original's by how CPython prints them: what
    :class:`_OriginalFailsFirst` asks of a scope for every read, built once per scope."""

    def __init__(self, original: list[tuple[ast.stmt, Chain]], converted: list[tuple[ast.stmt, Chain]]) -> None:
        self.original = original
        self.converted = converted
        self.at_chain = {chain: statement for statement, chain in converted}
        self.by_text: dict[str, list[Chain]] = {}
        for statement, chain in original:
            self.by_text.setdefault(ast.unparse(statement), []).append(chain)
        self._printed: dict[Chain, str] = {}

    def placed_in_original(self, chain: Chain) -> list[Chain]:
        """Where the original holds, printed the same, the statement at ``chain`` of the converted
        scope, or the nearest one before it in its block, or around it (and so on out); empty
        when none is found."""
        while chain:
            *outer, (block, index) = chain
            for earlier in range(index, -1, -1):
                printed = self._printed_at((*outer, (block, earlier)))
                same = self.by_text.get(printed) if printed is not None else None
                if same:
                    return same
            chain = tuple(outer)
        return []

    def _printed_at(self, chain: Chain) -> str | None:
        """How CPython prints the converted statement at ``chain``; None where there is none."""
        if chain not in self._printed:
            statement = self.at_chain.get(chain)
            if statement is None:
                return None
            self._printed[chain] = ast.unparse(statement)
        return self._printed[chain]


#: Where a statement stands: (the block holding it, its index there) from the scope's body in.
Chain = tuple[tuple[int, int], ...]


def _statement_chains(body: list[ast.stmt]) -> list[tuple[ast.stmt, Chain]]:
    """Every statement of a scope's body and of the blocks nested in it (not in the functions and
    classes it defines), with where it stands; blocks are told apart by identity."""
    return [
        (path[-1].statement, tuple((id(block), index) for _, block, index in path))
        for path in statements_in_order(body)
    ]


def _innermost(statements: list[tuple[ast.stmt, Chain]], position: Position) -> tuple[ast.stmt, Chain] | None:
    """The innermost statement holding the read at ``position`` (the deepest of those whose span
    holds it)."""
    holding = [
        (statement, chain)
        for statement, chain in statements
        if (statement.lineno, statement.col_offset)
        <= position
        <= (statement.end_lineno or statement.lineno, statement.end_col_offset or 0)
    ]
    return max(holding, key=lambda item: len(item[1]), default=None)


def _goes_before(first: Chain, later: Chain) -> bool:
    """Whether every path reaching the statement at ``later`` passes the one at ``first``: that
    one stands in a block holding ``later`` (or a statement around it) further down."""
    *_, (block, index) = first
    return any(held == block and at > index for held, at in later)


def _reads_of_moved_code(
    original: ast.Module, before: Mapping[Key, set[Position]], scope: str, name: str
) -> set[Position]:
    """The original's possibly unbound reads of ``name`` that a converted scope holds: a
    function the original does not have (the retried training loop, a notebook's training
    function) holds code the conversion moved into it from the module and from the classes and
    functions defined there, so it compares with the original's reads of the name anywhere."""
    if scope == "<module>" or _scope_body(original, scope) is not None:
        return set()
    return {position for (_, read), positions in before.items() if read == name for position in positions}


def _scope_body(module: ast.Module, scope: str) -> list[ast.stmt] | None:
    """The statements of the module (``"<module>"``) or of the function ``scope`` names
    (``main``, ``Trainer.fit``); None when no such function is found."""
    if scope == "<module>":
        return module.body
    body: list[ast.stmt] = module.body
    for part in scope.split("."):
        found = next(
            (node for node in body if isinstance(node, _DEFINITIONS) and node.name == part),
            None,
        )
        if found is None:
            return None
        body = found.body
    return body


def possibly_unbound_reads(module: ast.Module) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """(scope, name) → the positions of the module's reads of ``name`` in ``scope`` that may
    come before it is bound (what :func:`name_flow_problems` compares)."""
    return {key: list(reads) for key, reads in _ModuleFlow(module).run().items()}


def program_argument_problems(
    originals: Mapping[str, ast.Module], converted: Mapping[str, ast.Module], packages: frozenset[str] = frozenset()
) -> dict[str, list[NameFlowProblem]]:
    """Across the modules of one program (by dotted module name): every call, in any module, of a
    function or class of the program whose converted signature gained a required parameter must
    pass it. Calls reach their function through ``from pkg.mod import f``, relative imports,
    ``import pkg.mod as m`` and re-exports (a package ``__init__`` importing ``f``).
    ``packages``: the module names that are packages (their relative imports start at themselves)."""
    return _calls_missing_new_arguments(originals, converted, packages)


# --- reads before binding ------------------------------------------------------------------------

Key = tuple[str, str]
Position = tuple[int, int]


class _Bindings:
    """One walk of the module: the names each scope binds (module, function, lambda, class body),
    the names each function declares ``global``/``nonlocal``, and the names each compound
    statement binds in its blocks. Every later question about bindings is a lookup here."""

    def __init__(self, module: ast.Module) -> None:
        self.in_scope: dict[int, set[str]] = {id(module): set()}
        self.declared: dict[int, set[str]] = {}
        #: The part of ``declared`` that is ``global`` (a ``nonlocal`` name is the enclosing
        #: function's: still that function's local).
        self.declared_global: dict[int, set[str]] = {}
        self.in_statement: dict[int, set[str]] = {}
        self.star_import = False
        #: Names called anywhere (``Trainer(...)``: the module constructs that class).
        self.called: set[str] = set()
        #: Whether the module has an assignment expression (``:=``) anywhere: most have none, and
        #: the flow then never looks for the names one binds.
        self.has_walrus = False
        self._visit_body(module.body, id(module), [])

    def bound_as_globals(self) -> set[str]:
        """Module names that functions bind through ``global`` (the retried training loop's
        ``global Tensor`` ... ``Tensor = ...``): bound in the module once that function ran."""
        found: set[str] = set()
        for scope, names in self.declared_global.items():
            found |= names & self.in_scope.get(scope, set())
        return found

    def _visit_body(self, body: Iterable[ast.AST], scope: int, open_statements: list[int]) -> None:
        for node in body:
            self._visit(node, scope, open_statements)

    def _bind(self, name: str, scope: int, open_statements: list[int]) -> None:
        self.in_scope[scope].add(name)
        for statement in open_statements:
            self.in_statement[statement].add(name)

    def _visit(self, node: ast.AST, scope: int, open_statements: list[int]) -> None:
        visit = _BINDING_VISITS.get(type(node))
        if visit is not None:
            visit(self, node, scope, open_statements)
            return
        # Most nodes (constants, attributes, operators...): nothing below but their children.
        for child in _children(node):
            self._visit(child, scope, open_statements)

    def _visit_children(self, node: ast.AST, scope: int, open_statements: list[int]) -> None:
        for child in _children(node):
            self._visit(child, scope, open_statements)

    def _visit_walrus(self, node: ast.NamedExpr, scope: int, open_statements: list[int]) -> None:
        self.has_walrus = True
        self._visit_children(node, scope, open_statements)

    def _visit_name(self, node: ast.Name, scope: int, open_statements: list[int]) -> None:
        if not isinstance(node.ctx, ast.Load):
            self._bind(node.id, scope, open_statements)

    def _visit_definition(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda,
        scope: int,
        open_statements: list[int],
    ) -> None:
        """A function, lambda or class: what runs where it is defined belongs to the enclosing
        scope; its body is a scope of its own (with its parameters bound)."""
        self._visit_body(_run_at_definition(node), scope, open_statements)
        if not isinstance(node, ast.Lambda):
            self._bind(node.name, scope, open_statements)
        self.in_scope[id(node)] = set(() if isinstance(node, ast.ClassDef) else _parameter_names(node.args))
        self.declared[id(node)] = set()
        self._visit_body(node.body if isinstance(node.body, list) else [node.body], id(node), [])

    def _visit_comprehension(
        self,
        node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp,
        scope: int,
        open_statements: list[int],
    ) -> None:
        # The targets are the comprehension's own; a walrus inside binds the enclosing scope.
        for generator in node.generators:
            self._visit(generator.iter, scope, open_statements)
            for condition in generator.ifs:
                self._visit(condition, scope, open_statements)
        for element in [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]:
            self._visit(element, scope, open_statements)

    def _visit_import(self, node: ast.Import | ast.ImportFrom, scope: int, open_statements: list[int]) -> None:
        if isinstance(node, ast.ImportFrom) and _is_star(node):
            self.star_import = True
        for name in _import_names(node):
            self._bind(name, scope, open_statements)

    def _visit_declaration(self, node: ast.Global | ast.Nonlocal, scope: int, open_statements: list[int]) -> None:
        self.declared.setdefault(scope, set()).update(node.names)
        if isinstance(node, ast.Global):
            self.declared_global.setdefault(scope, set()).update(node.names)

    def _visit_call(self, node: ast.Call, scope: int, open_statements: list[int]) -> None:
        if isinstance(node.func, ast.Name):
            self.called.add(node.func.id)
        self._visit_children(node, scope, open_statements)

    def _visit_capture(
        self, node: ast.ExceptHandler | ast.MatchAs | ast.MatchStar, scope: int, open_statements: list[int]
    ) -> None:
        """``except E as name``, ``case [*rest]``, ``case Point() as name``."""
        if node.name:
            self._bind(node.name, scope, open_statements)
        self._visit_children(node, scope, open_statements)

    def _visit_mapping_pattern(self, node: ast.MatchMapping, scope: int, open_statements: list[int]) -> None:
        """``case {"key": value, **rest}``."""
        if node.rest:
            self._bind(node.rest, scope, open_statements)
        self._visit_children(node, scope, open_statements)

    def _visit_compound(self, node: ast.stmt, scope: int, open_statements: list[int]) -> None:
        """A compound statement: what its blocks bind is also recorded as its own."""
        self.in_statement[id(node)] = set()
        self._visit_children(node, scope, [*open_statements, id(node)])

    def locals_of(self, scope: ast.AST) -> set[str]:
        """The names a function (or lambda) binds itself, its parameters included."""
        return self.in_scope.get(id(scope), set()) - self.declared.get(id(scope), set())


_TRY: tuple[type[ast.Try], ...] = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: The node classes :meth:`_Bindings._visit` does more with than visit their children.
_BINDING_VISITS: dict[type[ast.AST], Callable[[_Bindings, Any, int, list[int]], None]] = {
    ast.Name: _Bindings._visit_name,
    **dict.fromkeys((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda), _Bindings._visit_definition),
    **dict.fromkeys((ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp), _Bindings._visit_comprehension),
    **dict.fromkeys((ast.Import, ast.ImportFrom), _Bindings._visit_import),
    **dict.fromkeys((ast.Global, ast.Nonlocal), _Bindings._visit_declaration),
    ast.Call: _Bindings._visit_call,
    **dict.fromkeys((ast.ExceptHandler, ast.MatchAs, ast.MatchStar), _Bindings._visit_capture),
    ast.MatchMapping: _Bindings._visit_mapping_pattern,
    ast.NamedExpr: _Bindings._visit_walrus,
    **dict.fromkeys(_COMPOUND, _Bindings._visit_compound),
}


def _run_at_definition(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda) -> list[ast.AST]:
    """What runs where a function, lambda or class is defined: decorators, then a class's bases
    and keywords, or a function's defaults and annotations."""
    found: list[ast.AST] = list(getattr(node, "decorator_list", ()))
    if isinstance(node, ast.ClassDef):
        return [*found, *node.bases, *node.keywords]
    return [
        *found,
        *_defaults(node.args),
        *(a.annotation for a in _all_arguments(node.args) if a.annotation is not None),
    ]


@record(eq=False, repr=False)
class _Function:
    """A function of the module and what its body reads of the module's names when it runs."""

    qualified: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    #: Module-level names its body (nested functions included) reads: name → positions.
    global_reads: dict[str, set[Position]] = field(default_factory=dict)
    #: Module-level functions and classes its body calls by name, and methods (``C.m``) by ``self.m()``.
    calls: set[str] = field(default_factory=set)
    #: Callee → the names it declares ``global`` that are bound at every call of it (the retried
    #: training loop binds ``FloatTensor`` and then calls ``to_categorical``, which reads it).
    globals_bound_at_calls: dict[str, set[str]] = field(default_factory=dict)


class _ModuleFlow:
    """Walks the module in execution order, collecting possibly unbound reads."""

    def __init__(self, module: ast.Module) -> None:
        self.module = module
        #: (scope, name) → the positions of its reads that may come before any binding.
        self.found: dict[Key, set[Position]] = {}
        #: (scope, name) → the first module-level line whose call makes such a read.
        self.triggers: dict[Key, int] = {}
        self.bindings = _Bindings(module)
        self.star_import = self.bindings.star_import
        self.module_bindings = self.bindings.in_scope[id(module)]
        self.functions: dict[str, _Function] = {}
        #: Class name → the module-level function name of its ``__init__`` (``Net.__init__``).
        self.classes: dict[str, ast.ClassDef] = {}
        self._collect(module.body, "")
        self.checked_calls: set[tuple[str, frozenset[str]]] = set()
        self.reached: set[str] = set()

    def _collect(self, body: Sequence[ast.stmt], prefix: str) -> None:
        for node in _statements_in_blocks(body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualified = f"{prefix}{node.name}"
                function = _Function(qualified, node)
                _read_function(node, function, self.bindings, prefix)
                self._keep_unbound_reads_of_own_globals(function)
                self.functions[qualified] = function
            elif isinstance(node, ast.ClassDef):
                if not prefix:
                    self.classes[node.name] = node
                self._collect(node.body, f"{prefix}{node.name}.")

    def _keep_unbound_reads_of_own_globals(self, function: _Function) -> None:
        """A function that declares a name ``global`` and binds it (the retried training loop,
        ``global n`` … ``mse, n = evaluate()`` … ``print(n)``) reads its own binding where that
        comes first on every path: those reads need nothing of the module. Only the others stay
        module-level reads, judged where the function is called. The functions it calls after
        such a binding find the name bound too (:attr:`_Function.globals_bound_at_calls`)."""
        node = function.node
        own = self.bindings.declared.get(id(node), set()) & self.bindings.in_scope.get(id(node), set())
        if not own:
            return
        marker = f"<own globals of {function.qualified}>"
        block = _Block(self, marker, module_level=False, local_names=own, nested_read_at_definition=True)
        block.statements(node.body, set(_parameter_names(node.args)))
        unbound = {name: self.found.pop((marker, name), set()) for name in own}
        function.globals_bound_at_calls = block.bound_at_calls
        nested = _nested_definitions(node)
        for name in own & set(function.global_reads):
            in_flow = _own_flow_reads(node, name)
            in_flow |= {(r.lineno, r.col_offset) for d in nested for r in _nested_reads(d, {name})}
            kept = {p for p in function.global_reads[name] if p not in in_flow or p in unbound[name]}
            if kept:
                function.global_reads[name] = kept
            else:
                del function.global_reads[name]

    def run(self) -> dict[Key, set[Position]]:
        """The possibly unbound reads, by (scope, name)."""
        bound = set(ALWAYS_BOUND | NOTEBOOK_NAMES)
        if self.star_import:
            return self.found  # any name may come from the star: nothing can be judged
        _Block(self, "<module>", module_level=True).statements(self.module.body, bound)
        # Functions no module-level statement calls run later (called from another module, as
        # a callback, from a method): what the module binds anywhere is what they can read.
        everything = self.module_bindings | self.bindings.bound_as_globals() | ALWAYS_BOUND | NOTEBOOK_NAMES
        for qualified, function in self.functions.items():
            if qualified not in self.reached:
                self._judge_globals(function, everything)
            _Block(self, qualified, module_level=False).function(function.node)
        _SelfAttributes(self).run()
        return self.found

    def bound_in(self, node: ast.stmt) -> set[str]:
        """The names a compound statement binds in any of its blocks."""
        return self.bindings.in_statement.get(id(node), set())

    def called_at_module_level(self, callee: str, bound: set[str], line: int) -> None:
        """A module-level statement calls ``callee`` (a function or a class of the module) with
        ``bound`` bound: what it and the functions it calls read of the module must be bound."""
        pending = [(callee, frozenset(bound))]
        seen: set[tuple[str, frozenset[str]]] = set()
        while pending:
            name, bound_here = pending.pop()
            if (name, bound_here) in seen:
                continue
            seen.add((name, bound_here))
            targets = [name]
            if name in self.classes:
                targets = [f"{name}.__init__"]
            for target in targets:
                function = self.functions.get(target)
                if function is None:
                    continue
                self.reached.add(target)
                key = (target, bound_here)
                if key not in self.checked_calls:
                    self.checked_calls.add(key)
                    self._judge_globals(function, bound_here, line)
                pending.extend(
                    (callee, bound_here | function.globals_bound_at_calls.get(callee, set()))
                    for callee in function.calls
                )

    def _judge_globals(self, function: _Function, bound: set[str] | frozenset[str], line: int = 0) -> None:
        for name, positions in function.global_reads.items():
            if name not in bound:
                key = (function.qualified, name)
                self.found.setdefault(key, set()).update(positions)
                if line:
                    self.triggers[key] = min(self.triggers.get(key, line), line)

    def possibly_unbound(self, scope: str, name: str, position: Position) -> None:
        self.found.setdefault((scope, name), set()).add(position)


class _Block:
    """One scope's statements in execution order, with the names bound on every path so far."""

    def __init__(
        self,
        flow: _ModuleFlow,
        scope: str,
        *,
        module_level: bool,
        local_names: set[str] | None = None,
        nested_read_at_definition: bool = False,
    ):
        self.flow = flow
        self.scope = scope
        self.module_level = module_level
        #: The names this scope binds (a function's locals); None: every name (module level).
        self.local_names = local_names
        #: Whether a nested function's reads of :attr:`local_names` are judged where it is
        #: defined: it can only run after that, so what is bound there on every path is bound.
        self.nested_read_at_definition = nested_read_at_definition
        #: With it, the callee → the :attr:`local_names` bound at every call of it (calls in
        #: nested functions count where those are defined).
        self.bound_at_calls: dict[str, set[str]] = {}

    def walrus_targets(self, expression: ast.AST | None) -> set[str]:
        """The names the assignment expressions in ``expression`` bind."""
        return _walrus_targets(expression) if self.flow.bindings.has_walrus else set()

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        local_names = self.flow.bindings.locals_of(node)
        block = _Block(self.flow, self.scope, module_level=False, local_names=local_names)
        block.statements(node.body, set(_parameter_names(node.args)))

    # Statements: each returns the names bound after it, or None when it never completes
    # (return, raise, break, continue): a branch that leaves binds nothing after the branch.
    def statements(self, body: Sequence[ast.stmt], bound: set[str]) -> set[str] | None:
        current: set[str] | None = set(bound)
        for statement in body:
            if current is None:
                return None
            current = self.statement(statement, current)
        return current

    def statement(self, node: ast.stmt, bound: set[str]) -> set[str] | None:
        flow = _STATEMENT_FLOWS.get(type(node), _Block._evaluate)
        return flow(self, node, bound)

    def _define_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, bound: set[str]) -> set[str] | None:
        self.reads([*node.decorator_list, *_defaults(node.args)], bound)
        if self.nested_read_at_definition and self.local_names:
            for read in _nested_reads(node, self.local_names):
                self.name_read(read.id, read, bound)
            for statement in node.body:
                self._note_calls(statement, bound)
        return bound | {node.name}

    def _note_calls(self, node: ast.AST, bound: set[str]) -> None:
        local = bound & (self.local_names or set())
        for callee in _called_names(node):
            known = self.bound_at_calls.get(callee)
            self.bound_at_calls[callee] = set(local) if known is None else known & local

    def _define_class(self, node: ast.ClassDef, bound: set[str]) -> set[str] | None:
        self.reads([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)], bound)
        # The class body runs now, reading what is bound so far; its methods run later.
        inner = _Block(self.flow, node.name, module_level=False)
        inner.statements(
            [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))], set(bound)
        )
        return bound | {node.name}

    def _leave(self, node: ast.Return | ast.Raise, bound: set[str]) -> set[str] | None:
        self.reads(_expressions_of(node), bound)
        return None

    def _jump(self, node: ast.Break | ast.Continue, bound: set[str]) -> set[str] | None:
        return None

    def _if(self, node: ast.If, bound: set[str]) -> set[str] | None:
        self.reads([node.test], bound)
        body = self.statements(node.body, bound | self.walrus_targets(node.test))
        orelse = self.statements(node.orelse, bound | self.walrus_targets(node.test))
        return _join(body, orelse)

    def _for(self, node: ast.For | ast.AsyncFor, bound: set[str]) -> set[str] | None:
        self.reads([node.iter], bound)
        inside = bound | _target_names(node.target)
        after_body = self.statements(node.body, inside)
        # The loop body is taken to run (scripts read what their epoch loop bound).
        after = bound | self.flow.bound_in(node) | _target_names(node.target)
        if after_body is not None:
            after |= after_body
        return self._after_loop(node.orelse, after)

    def _while(self, node: ast.While, bound: set[str]) -> set[str] | None:
        self.reads([node.test], bound)
        self.statements(node.body, bound | self.walrus_targets(node.test))
        return self._after_loop(node.orelse, bound | self.flow.bound_in(node))

    def _after_loop(self, orelse: Sequence[ast.stmt], after: set[str]) -> set[str]:
        """After a loop that binds ``after``: its ``else`` block runs when the loop does not break."""
        after_else = self.statements(orelse, after)
        return after if after_else is None else after_else

    def _with(self, node: ast.With | ast.AsyncWith, bound: set[str]) -> set[str] | None:
        current = set(bound)
        for item in node.items:
            self.reads([item.context_expr], current)
            if item.optional_vars is not None:
                current |= _target_names(item.optional_vars)
        return self.statements(node.body, current)

    def _try(self, node: ast.Try, bound: set[str]) -> set[str] | None:
        body = self.statements(node.body, bound)
        outcomes = [self.statements(node.orelse, body) if body is not None else None]
        for handler in node.handlers:
            if handler.type is not None:
                self.reads([handler.type], bound)
            outcomes.append(self.statements(handler.body, bound | ({handler.name} if handler.name else set())))
        joined: set[str] | None = None
        for outcome in outcomes:
            joined = _join(joined, outcome)
        if node.finalbody:
            final = self.statements(node.finalbody, bound)
            if joined is not None and final is not None:
                joined |= final
        return joined

    def _match(self, node: ast.Match, bound: set[str]) -> set[str] | None:
        self.reads([node.subject], bound)
        for case in node.cases:
            captured = _pattern_captures(case.pattern)
            if case.guard is not None:
                self.reads([case.guard], bound | captured)
            self.statements(case.body, bound | captured)
        return bound | self.flow.bound_in(node)

    def _import(self, node: ast.Import | ast.ImportFrom, bound: set[str]) -> set[str] | None:
        return bound | _import_names(node)

    def _delete(self, node: ast.Delete, bound: set[str]) -> set[str] | None:
        self.reads([target for target in node.targets if not isinstance(target, ast.Name)], bound)
        return bound - {target.id for target in node.targets if isinstance(target, ast.Name)}

    def _augmented_assign(self, node: ast.AugAssign, bound: set[str]) -> set[str] | None:
        self.reads([node.value], bound)
        if isinstance(node.target, ast.Name):
            self.name_read(node.target.id, node.target, bound)
        else:
            self.reads([node.target], bound)
        return bound | _target_names(node.target)

    def _assign(self, node: ast.Assign | ast.AnnAssign, bound: set[str]) -> set[str] | None:
        value = node.value
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if value is not None:
            self.reads([value], bound)
        # Subscripts and attributes assigned read their object (``d[k] = v`` reads d and k).
        self.reads([part for target in targets for part in _target_reads(target)], bound)
        if isinstance(node, ast.AnnAssign) and value is None:
            return bound
        return bound | {name for target in targets for name in _target_names(target)} | self.walrus_targets(value)

    def _declare(self, node: ast.Global | ast.Nonlocal | ast.Pass, bound: set[str]) -> set[str] | None:
        return bound

    def _evaluate(self, node: ast.stmt, bound: set[str]) -> set[str] | None:
        """Expression statements, assert, type aliases...: they read their expressions."""
        expressions = _expressions_of(node)
        self.reads(expressions, bound)
        return bound | set().union(*(self.walrus_targets(e) for e in expressions)) if expressions else bound

    # Expressions.
    def reads(self, expressions: Iterable[ast.expr], bound: set[str]) -> None:
        for expression in expressions:
            for name, node, extra in _names_read(expression):
                self.name_read(name, node, bound | extra)
            if self.nested_read_at_definition:
                self._note_calls(expression, bound)
            if self.module_level:
                for callee in _called_names(expression):
                    self.flow.called_at_module_level(callee, bound, expression.lineno)

    def name_read(self, name: str, node: ast.expr, bound: set[str]) -> None:
        if name in bound:
            return
        if self.local_names is not None and name not in self.local_names:
            return  # a module-level name read in a function: judged where the function is called
        self.flow.possibly_unbound(self.scope, name, (node.lineno, node.col_offset))


#: Statement class → how :meth:`_Block.statement` follows it (others: :meth:`_Block._evaluate`).
_STATEMENT_FLOWS: dict[type[ast.stmt], Callable[[_Block, Any, set[str]], set[str] | None]] = {
    **dict.fromkeys((ast.FunctionDef, ast.AsyncFunctionDef), _Block._define_function),
    ast.ClassDef: _Block._define_class,
    **dict.fromkeys((ast.Return, ast.Raise), _Block._leave),
    **dict.fromkeys((ast.Break, ast.Continue), _Block._jump),
    ast.If: _Block._if,
    **dict.fromkeys((ast.For, ast.AsyncFor), _Block._for),
    ast.While: _Block._while,
    **dict.fromkeys((ast.With, ast.AsyncWith), _Block._with),
    **dict.fromkeys(_TRY, _Block._try),
    ast.Match: _Block._match,
    **dict.fromkeys((ast.Import, ast.ImportFrom), _Block._import),
    ast.Delete: _Block._delete,
    ast.AugAssign: _Block._augmented_assign,
    **dict.fromkeys((ast.Assign, ast.AnnAssign), _Block._assign),
    **dict.fromkeys((ast.Global, ast.Nonlocal, ast.Pass), _Block._declare),
}


def _expressions_of(node: ast.stmt) -> list[ast.expr]:
    """The expressions directly under a simple statement (what it evaluates)."""
    return [child for child in _children(node) if isinstance(child, ast.expr)]


def _pattern_captures(pattern: ast.pattern) -> set[str]:
    """The names a ``case`` pattern binds (``case Point(x=px) as p``, ``case [first, *rest]``,
    ``case {**others}``)."""
    captured = {n.name for n in _walk_ast(pattern) if isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name}
    return captured | {n.rest for n in _walk_ast(pattern) if isinstance(n, ast.MatchMapping) and n.rest}


@record(eq=False, repr=False)
class _Method:
    """What one method does with ``self``'s attributes."""

    sets: set[str] = field(default_factory=set)
    reads: list[tuple[str, Position]] = field(default_factory=list)
    calls: set[str] = field(default_factory=set)
    #: ``setattr(...)`` or ``self.__dict__``: it may set any attribute.
    dynamic: bool = False


def _method_attributes(node: ast.AST) -> _Method:
    method = _Method()
    for child in _walk_ast(node):
        if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) and child.value.id == "self":
            if isinstance(child.ctx, ast.Load):
                method.reads.append((child.attr, (child.lineno, child.col_offset)))
                method.dynamic |= child.attr == "__dict__"
            else:
                method.sets.add(child.attr)
        elif isinstance(child, ast.Call):
            if isinstance(child.func, ast.Name) and child.func.id == "setattr":
                method.dynamic = True
            elif isinstance(child.func, ast.Attribute) and isinstance(child.func.value, ast.Name):
                if child.func.value.id == "self":
                    method.calls.add(child.func.attr)
    return method


class _SelfAttributes:
    """``self.X``: read by a method of a class the module constructs while no class of its
    hierarchy ever sets it, or read in ``__init__`` (directly or through a ``self.method()`` it
    calls) before ``__init__`` sets it."""

    def __init__(self, flow: _ModuleFlow) -> None:
        self.flow = flow
        self.classes = flow.classes
        self.methods = {
            name: {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for name, node in self.classes.items()
        }
        self.attributes = {
            name: {method_name: _method_attributes(method) for method_name, method in methods.items()}
            for name, methods in self.methods.items()
        }

    def run(self) -> None:
        for name in self.classes:
            if name in self.flow.bindings.called:
                self._never_set(name)
            init = self.methods[name].get("__init__")
            if init is not None:
                self._init_order(name, init)

    def _never_set(self, name: str) -> None:
        hierarchy = _hierarchy(name, self.classes)
        if hierarchy is None:
            return  # a base from elsewhere may set anything
        members = [method for cls in hierarchy for method in self.attributes[cls].values()]
        if any(method.dynamic for method in members):
            return
        known = {attribute for method in members for attribute in method.sets}
        known |= {member for cls in hierarchy for member in _class_members(self.classes[cls])}
        for cls in hierarchy:
            for method_name, method in self.attributes[cls].items():
                for attribute, position in method.reads:
                    if attribute not in known:
                        self.flow.possibly_unbound(f"{cls}.{method_name}", f"self.{attribute}", position)

    def _init_order(self, name: str, init: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        attributes = self.attributes[name]
        set_by_init = self._sets_through(attributes["__init__"], attributes)
        set_so_far: set[str] = set()
        for statement in init.body:
            done = _method_attributes(statement)
            for attribute, position in done.reads:
                if attribute in set_by_init and attribute not in set_so_far and attribute not in done.sets:
                    self.flow.possibly_unbound(f"{name}.__init__", f"self.{attribute}", position)
            for called in sorted(done.calls):
                method = attributes.get(called)
                if method is None or called == "__init__":
                    continue
                for attribute, _ in method.reads:
                    if attribute in set_by_init and attribute not in set_so_far and attribute not in method.sets:
                        position = (statement.lineno, statement.col_offset)
                        self.flow.possibly_unbound(f"{name}.__init__", f"self.{attribute}", position)
                set_so_far |= self._sets_through(method, attributes)
            set_so_far |= done.sets

    @staticmethod
    def _sets_through(method: _Method, attributes: Mapping[str, _Method]) -> set[str]:
        """What ``method`` sets itself and through the ``self.other()`` methods it calls."""
        found = set(method.sets)
        pending, seen = list(method.calls), set()
        while pending:
            called = pending.pop()
            if called in seen or called not in attributes:
                continue
            seen.add(called)
            found |= attributes[called].sets
            pending.extend(attributes[called].calls)
        return found


def _hierarchy(name: str, classes: Mapping[str, ast.ClassDef]) -> list[str] | None:
    """The class and its bases defined in the module; None when a base comes from elsewhere
    (other than ``object`` and ``nn.Module``, which set nothing a script reads as its own)."""
    found = [name]
    pending = [name]
    while pending:
        for base in classes[pending.pop()].bases:
            dotted = _dotted(base)
            if dotted is not None and dotted in classes:
                if dotted not in found:
                    found.append(dotted)
                    pending.append(dotted)
            elif dotted not in ("object", "nn.Module", "torch.nn.Module", "Module"):
                return None
    return found


def _class_members(node: ast.ClassDef) -> set[str]:
    """Names the class body binds: methods, properties, class attributes."""
    found: set[str] = set()
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(statement.name)
        elif isinstance(statement, ast.Assign):
            found |= {name for target in statement.targets for name in _target_names(target)}
        elif isinstance(statement, ast.AnnAssign):
            found |= _target_names(statement.target)
    return found


# --- calls without a new argument -----------------------------------------------------------------


@record(frozen=True, eq=False, repr=False)
class _Signature:
    """A function's parameters as its calls must pass them."""

    positional: tuple[str, ...]
    required: frozenset[str]
    keyword_only: frozenset[str]
    is_method: bool


def _calls_missing_new_arguments(
    originals: Mapping[str, ast.Module], converted: Mapping[str, ast.Module], packages: frozenset[str] = frozenset()
) -> dict[str, list[NameFlowProblem]]:
    """Module name → its calls that do not pass a parameter added by the conversion."""
    added: dict[tuple[str, str], tuple[_Signature, frozenset[str]]] = {}
    for module_name, tree in converted.items():
        before = _signatures(originals.get(module_name))
        plain = _classes_without_init(originals.get(module_name))
        for qualified, signature in _signatures(tree).items():
            # A class given an ``__init__`` it lacked was constructed with no argument.
            old = before.get(qualified) or (_NO_ARGUMENTS if qualified.split(".")[0] in plain else None)
            if old is None:
                continue
            new = signature.required - old.required - set(old.positional) - old.keyword_only
            if new:
                added[(module_name, qualified)] = (signature, frozenset(new))
    problems: dict[str, list[NameFlowProblem]] = {}
    if not added:
        return problems
    exports = {name: _defined_names(name, tree) for name, tree in converted.items()}
    for module_name, tree in converted.items():
        names = _callable_names(module_name, tree, converted, exports, packages)
        bound = _partially_bound(tree)
        for use, enclosing_class in _uses_with_class(tree):
            called = isinstance(use, ast.Call)
            target = _callee_target(use.func if isinstance(use, ast.Call) else use, names, module_name, enclosing_class)
            if target is None or target not in added:
                continue
            if not called and (target[0], f"{target[1]}.__init__") in added:
                continue  # a class named as a base, in isinstance() or an annotation: not a call
            signature, new = added[target]
            for parameter in sorted(new - bound.get(id(use), frozenset())):
                # A function used as a value (a callback, a table of handlers, ``Thread(target=f)``)
                # is called where no rewrite can add the argument: as unsound as a call without it
                # (unless the value binds it: ``functools.partial(f, accelerator=accelerator)``).
                if not (isinstance(use, ast.Call) and _passes(use, signature, parameter)):
                    kind = "argument" if called else "escapes"
                    problems.setdefault(module_name, []).append(
                        NameFlowProblem(target[1], parameter, use.lineno, use.col_offset, kind=kind)
                    )
    return problems


#: ``object.__init__``'s signature, seen from a call: no argument.
_NO_ARGUMENTS = _Signature((), frozenset(), frozenset(), is_method=True)


def _classes_without_init(tree: ast.Module | None) -> set[str]:
    """The module-level classes of ``tree`` that define no ``__init__`` and name no base but
    ``object``: their construction takes no argument."""
    if tree is None:
        return set()
    return {
        node.name
        for node in _statements_in_blocks(tree.body)
        if isinstance(node, ast.ClassDef)
        and all(isinstance(base, ast.Name) and base.id == "object" for base in node.bases)
        and not node.keywords
        and not any(isinstance(m, ast.FunctionDef) and m.name == "__init__" for m in node.body)
    }


def _signatures(tree: ast.Module | None) -> dict[str, _Signature]:
    """Qualified name (``train``, ``Trainer.__init__``, ``Trainer`` for its constructor) → signature."""
    return {
        name: _signature(node, is_method=is_method) for names, node, is_method in _definitions(tree) for name in names
    }


def definition_spans(tree: ast.Module | None, qualified_names: set[str]) -> list[tuple[int, int]]:
    """The first and last lines of the module's functions and methods named in
    ``qualified_names`` (named as :class:`NameFlowProblem`'s ``scope`` names them: ``train``,
    ``Trainer.__init__``, ``Trainer`` for its constructor); every definition of a name defined twice."""
    return [
        (node.lineno, node.end_lineno or node.lineno)
        for names, node, _ in _definitions(tree)
        if qualified_names.intersection(names)
    ]


def _definitions(
    tree: ast.Module | None,
) -> Iterator[tuple[tuple[str, ...], ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Each module-level function and method (``def`` under ``if``/``try`` included) with its
    qualified names (``train``; ``Trainer.__init__`` and ``Trainer``, the call that runs it) and
    whether it is called with a receiver (a method but a static one)."""
    if tree is None:
        return
    for node in _statements_in_blocks(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield (node.name,), node, False
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    is_static = any(_dotted(d) == "staticmethod" for d in member.decorator_list)
                    qualified = f"{node.name}.{member.name}"
                    names = (qualified, node.name) if member.name == "__init__" else (qualified,)
                    yield names, member, not is_static


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef, *, is_method: bool) -> _Signature:
    arguments = node.args
    positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
    with_default = set(positional[len(positional) - len(arguments.defaults) :]) if arguments.defaults else set()
    required = {name for name in positional if name not in with_default}
    required |= {a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is None}
    if is_method and positional:
        required.discard(positional[0])
    return _Signature(tuple(positional), frozenset(required), frozenset(a.arg for a in arguments.kwonlyargs), is_method)


def _partially_bound(tree: ast.Module) -> dict[int, frozenset[str]]:
    """The function values ``functools.partial`` binds keywords to (``partial(f, accelerator=a)``,
    ``functools`` imported as a module or ``partial`` from it): id of the value → the keywords.
    One walk: the imports and the calls that may be partial's are gathered together, since an
    import may come after the call in the walk's order (a function's body, a later statement)."""
    modules: set[str] = set()
    functions: set[str] = set()
    calls: list[ast.Call] = []
    for node in _walk_ast(tree):
        if isinstance(node, ast.Call):
            if node.args:
                calls.append(node)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "functools"}
        elif isinstance(node, ast.ImportFrom) and node.module == "functools":
            functions |= {alias.asname or alias.name for alias in node.names if alias.name == "partial"}
    if not modules and not functions:
        return {}
    return {
        id(call.args[0]): frozenset(keyword.arg for keyword in call.keywords if keyword.arg)
        for call in calls
        if _names_partial(call.func, modules, functions)
    }


def _names_partial(func: ast.expr, modules: set[str], functions: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in functions
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "partial"
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )


def _passes(call: ast.Call, signature: _Signature, parameter: str) -> bool:
    if any(isinstance(argument, ast.Starred) for argument in call.args):
        return True
    if any(keyword.arg is None or keyword.arg == parameter for keyword in call.keywords):
        return True
    if parameter not in signature.positional:
        return False
    index = signature.positional.index(parameter)
    if signature.is_method:
        index -= 1  # ``self`` is the call's receiver (or the object a class call makes)
    return len(call.args) > index


def _defined_names(module_name: str, tree: ast.Module) -> dict[str, tuple[str, str]]:
    """The functions and classes a module defines: name → (module, qualified name)."""
    found: dict[str, tuple[str, str]] = {}
    for node in _statements_in_blocks(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = (module_name, node.name)
    return found


def _callable_names(
    module_name: str,
    tree: ast.Module,
    trees: Mapping[str, ast.Module],
    exports: Mapping[str, Mapping[str, tuple[str, str]]],
    packages: frozenset[str],
) -> dict[str, tuple[str, str]]:
    """Names this module can call → (defining module, qualified name); modules imported as
    names map to ("module:", dotted name)."""
    names: dict[str, tuple[str, str]] = dict(exports.get(module_name, {}))
    for node in _walk_statements(tree):
        if isinstance(node, ast.ImportFrom) and not _is_star(node):
            source = _absolute_module(module_name, node, packages)
            for alias in node.names:
                local = alias.asname or alias.name
                found = _resolve_export(source, alias.name, trees, exports, packages)
                if found is not None:
                    names[local] = found
                elif f"{source}.{alias.name}" in exports:
                    names[local] = ("module:", f"{source}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in exports:
                    names[alias.asname or alias.name] = ("module:", alias.name)
    return names


def _resolve_export(
    source: str,
    name: str,
    trees: Mapping[str, ast.Module],
    exports: Mapping[str, Mapping[str, tuple[str, str]]],
    packages: frozenset[str],
    depth: int = 0,
) -> tuple[str, str] | None:
    """``name`` as ``source`` offers it: defined there, or re-exported from another module of the
    program (``from .utils import evaluate`` in a package ``__init__``)."""
    if source in exports and name in exports[source]:
        return exports[source][name]
    if depth > 8 or source not in trees:
        return None
    for node in _walk_statements(trees[source]):
        if isinstance(node, ast.ImportFrom) and not _is_star(node):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _resolve_export(
                        _absolute_module(source, node, packages), alias.name, trees, exports, packages, depth + 1
                    )
    return None


def _absolute_module(module_name: str, node: ast.ImportFrom, packages: frozenset[str]) -> str:
    if not node.level:
        return node.module or ""
    parts = module_name.split(".")
    base = parts if module_name in packages else parts[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


Use = ast.Call | ast.Name | ast.Attribute


def functions_used_only_as_values(tree: ast.Module) -> set[str]:
    """The module's own functions the module never calls by name but uses as values (in a list
    of hooks, a table of handlers, ``Thread(target=f)``): they are called out of sight, where no
    rewrite can pass them an argument."""
    defined = {
        node.name
        for node in _statements_in_blocks(tree.body)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    called: set[str] = set()
    as_values: set[str] = set()
    for use, _ in _uses_with_class(tree):
        name = use.func if isinstance(use, ast.Call) else use
        if isinstance(name, ast.Name) and name.id in defined:
            (called if isinstance(use, ast.Call) else as_values).add(name.id)
    return as_values - called


def _uses_with_class(tree: ast.Module) -> list[tuple[Use, str | None]]:
    """Every call of the module, and every name or attribute read as a value rather than called
    (a name only where no enclosing function binds it: ``def f(train): g(train=train)`` reads a
    parameter), with the class whose method holds it (None outside classes), in the order of a
    depth-first walk. A list, filled by a recursive walk: a generator of generators passed each
    use up through every level of nesting, which was most of the walk's time."""
    found: list[tuple[Use, str | None]] = []
    callees: set[int] = set()

    def visit(node: ast.AST, enclosing: str | None, local: frozenset[str]) -> None:
        for child in _children(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name, local)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, enclosing, local | _bound_in_function(child))
                continue
            if isinstance(child, ast.Call):
                callees.add(id(child.func))
                found.append((child, enclosing))
            elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Load) and id(child) not in callees:
                found.append((child, enclosing))
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and id(child) not in callees:
                if child.id not in local:
                    found.append((child, enclosing))
            visit(child, enclosing, local)

    visit(tree, None, frozenset())
    return found


def _bound_in_function(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> frozenset[str]:
    """The parameters of a function and the names its body assigns."""
    bound = {argument.arg for argument in _all_arguments(node.args)}
    body = node.body if isinstance(node.body, list) else [node.body]
    for statement in body:
        for inner in _walk_ast(statement):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                bound.add(inner.id)
    return frozenset(bound)


def _callee_target(
    func: ast.expr, names: Mapping[str, tuple[str, str]], module_name: str, enclosing_class: str | None
) -> tuple[str, str] | None:
    """The program's function or class that ``func`` (a call's callee, or a value) names."""
    if isinstance(func, ast.Name):
        found = names.get(func.id)
        return found if found is not None and found[0] != "module:" else None
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id == "self" and enclosing_class is not None:
            return (module_name, f"{enclosing_class}.{func.attr}")
        owner = _dotted(func.value)
        if owner is not None and owner in names and names[owner][0] == "module:":
            return (names[owner][1], func.attr)
    return None


# --- small readers of CPython's tree -----------------------------------------------------------------


def _statements_in_blocks(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a module or class body and of the if/try/with blocks in it (not of
    functions): a ``def`` under ``if TYPE_CHECKING:`` or ``try:`` is still module-level."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With, ast.AsyncWith, ast.For, ast.While)):
            yield from _statements_in_blocks([*node.body, *getattr(node, "orelse", [])])
        elif isinstance(node, ast.Try):
            yield from _statements_in_blocks([*node.body, *node.orelse, *node.finalbody])
            for handler in node.handlers:
                yield from _statements_in_blocks(handler.body)


def _is_star(node: ast.ImportFrom) -> bool:
    return any(alias.name == "*" for alias in node.names)


def _import_names(node: ast.Import | ast.ImportFrom) -> set[str]:
    names = set()
    for alias in node.names:
        if alias.name == "*":
            continue
        names.add(alias.asname or alias.name.split(".")[0])
    return names


def _target_names(target: ast.AST) -> set[str]:
    """The names an assignment target binds."""
    return _target_bindings(target)[0]


def _target_bindings(target: ast.AST) -> tuple[set[str], set[str]]:
    """The names an assignment target binds, and those whose attributes it binds (``exp`` of
    ``exp.model``)."""
    names: set[str] = set()
    owners: set[str] = set()
    pending = [target]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owners.add(node.value.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            pending.extend(node.elts)
        elif isinstance(node, ast.Starred):
            pending.append(node.value)
    return names, owners


def _target_reads(target: ast.AST) -> list[ast.expr]:
    if isinstance(target, (ast.Attribute, ast.Subscript)):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [part for element in target.elts for part in _target_reads(element)]
    if isinstance(target, ast.Starred):
        return _target_reads(target.value)
    return []


def _walrus_targets(expression: ast.AST | None) -> set[str]:
    if expression is None:
        return set()
    return {
        node.target.id
        for node in _walk_ast(expression)
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name)
    }


def _all_arguments(arguments: ast.arguments) -> list[ast.arg]:
    return [
        *arguments.posonlyargs,
        *arguments.args,
        *([arguments.vararg] if arguments.vararg else []),
        *arguments.kwonlyargs,
        *([arguments.kwarg] if arguments.kwarg else []),
    ]


def _parameter_names(arguments: ast.arguments) -> list[str]:
    return [argument.arg for argument in _all_arguments(arguments)]


def _defaults(arguments: ast.arguments) -> list[ast.expr]:
    return [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]


def _join(first: set[str] | None, second: set[str] | None) -> set[str] | None:
    """Names bound after two branches: on both, or on the one that completes."""
    if first is None:
        return second
    if second is None:
        return first
    return first & second


def _names_read(expression: ast.expr) -> Iterator[tuple[str, ast.Name, set[str]]]:
    """(name, node, names bound only there) for every name the expression reads when it runs:
    not inside a lambda's body (it runs later), with a comprehension's own targets bound."""
    pending: list[tuple[ast.AST, frozenset[str]]] = [(expression, frozenset())]
    while pending:
        node, extra = pending.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            yield node.id, node, set(extra)
            continue
        if isinstance(node, ast.Lambda):
            pending.extend((default, extra) for default in _defaults(node.args))
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            targets = frozenset().union(*(_target_names(g.target) for g in node.generators))
            first, *rest = node.generators
            pending.append((first.iter, extra))
            inner = extra | targets
            for generator in rest:
                pending.append((generator.iter, inner))
            for generator in node.generators:
                pending.extend((condition, inner) for condition in generator.ifs)
            elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            pending.extend((element, inner) for element in elements)
            continue
        pending.extend((child, extra) for child in _children(node))


def _called_names(expression: ast.AST) -> Iterator[str]:
    """Functions and classes the expression calls by a plain name, now (not in a lambda)."""
    pending: list[ast.AST] = [expression]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield node.func.id
        pending.extend(_children(node))


def _read_function(
    node: ast.FunctionDef | ast.AsyncFunctionDef, function: _Function, bindings: _Bindings, class_prefix: str
) -> None:
    """What the function's body (and the functions nested in it) read of the module's names, and
    whom it calls: module functions and classes by name, and, in a method of class ``C``
    (``class_prefix`` "C."), the methods ``self.m()`` calls, as ``C.m``."""

    reads = _FunctionReads(function, bindings, class_prefix)
    visible = frozenset(bindings.locals_of(node))
    for statement in node.body:
        reads.collect(statement, visible)


class _FunctionReads:
    """The walk of :func:`_read_function`: ``visible`` holds the names local where the walk is
    (the function's, then those of the functions and comprehensions nested in it)."""

    def __init__(self, function: _Function, bindings: _Bindings, class_prefix: str) -> None:
        self.function = function
        self.bindings = bindings
        self.class_prefix = class_prefix

    def collect(self, child: ast.AST, visible: frozenset[str]) -> None:
        if isinstance(child, ast.Name):
            if isinstance(child.ctx, ast.Load) and child.id not in visible:
                self.function.global_reads.setdefault(child.id, set()).add((child.lineno, child.col_offset))
            return
        if isinstance(child, ast.Call):
            self._call(child, visible)
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self._nested_function(child, visible)
        elif isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            self._comprehension(child, visible)
        else:
            for grandchild in _children(child):
                self.collect(grandchild, visible)

    def _call(self, call: ast.Call, visible: frozenset[str]) -> None:
        """A module function called by name, or ``self.m()`` in a method."""
        func = call.func
        if isinstance(func, ast.Name) and func.id not in visible:
            self.function.calls.add(func.id)
        elif self.class_prefix and isinstance(func, ast.Attribute) and _dotted(func.value) == "self":
            self.function.calls.add(f"{self.class_prefix}{func.attr}")

    def _nested_function(
        self, child: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, visible: frozenset[str]
    ) -> None:
        """Its decorators and defaults read where it is defined; its body, with its own locals."""
        for outer in [*getattr(child, "decorator_list", ()), *_defaults(child.args)]:
            self.collect(outer, visible)
        own, declared = self.bindings.locals_of(child), self.bindings.declared_global.get(id(child), set())
        inner = frozenset((visible | own) - declared)
        for statement in child.body if isinstance(child.body, list) else [child.body]:
            self.collect(statement, inner)

    def _comprehension(
        self, child: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp, visible: frozenset[str]
    ) -> None:
        """The first iterable reads outside; the rest, the conditions and the elements see the targets."""
        targets = frozenset().union(*(_target_names(g.target) for g in child.generators))
        self.collect(child.generators[0].iter, visible)
        inner = visible | targets
        for generator in child.generators:
            if generator is not child.generators[0]:
                self.collect(generator.iter, inner)
            for condition in generator.ifs:
                self.collect(condition, inner)
        for element in [child.key, child.value] if isinstance(child, ast.DictComp) else [child.elt]:
            self.collect(element, inner)


def _nested_definitions(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions defined among ``function``'s own statements (in its blocks, not in other
    nested functions or classes)."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(node)
        elif isinstance(node, ast.stmt) and not isinstance(node, ast.ClassDef):
            pending.extend(child for child in _children(node) if isinstance(child, ast.stmt))
    return found


def _nested_reads(function: ast.FunctionDef | ast.AsyncFunctionDef, names: AbstractSet[str]) -> list[ast.Name]:
    """The reads of ``names`` in a nested function's body that are not its own variables: they
    read the enclosing scope (here, its ``global`` names)."""
    own = _bound_in_function(function)
    return [
        node
        for statement in function.body
        for node in _walk_ast(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names and node.id not in own
    ]


def _own_flow_reads(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> set[Position]:
    """Where the function's own statements read ``name`` as they run: not in the bodies of the
    functions, lambdas and classes it defines (their decorators and defaults run with it)."""
    found: set[Position] = set()
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Name):
            if node.id == name and isinstance(node.ctx, ast.Load):
                found.add((node.lineno, node.col_offset))
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend([*getattr(node, "decorator_list", ()), *_defaults(node.args)])
            continue
        if isinstance(node, ast.ClassDef):
            continue
        pending.extend(_children(node))
    return found


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return f"{owner}.{node.attr}" if owner is not None else None
    return None
