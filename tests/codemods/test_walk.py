"""codemods.engine.walk.walk must call a visitor exactly as libcst's ``node.visit`` does (same nodes, same
order, same per-field hooks, same pruning), only without rebuilding the tree and without entering
whitespace and token nodes (``walk.TRIVIA``) unless the visitor asks for one of their types."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import accel_convert.codemods.engine.walk as walk_module
from accel_convert.codemods.engine.walk import StatementFilter, walk

CASES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "cases").glob("*.py"))

SNIPPET = """
@decorator(arg)
def f(x: int = g(), *, y=lambda: h()) -> "T":
    if x > 1 and k(x):
        return [m(i) for i in range(x) if n(i)]
    elif x:
        print(f"{x}", f"{x!r:>{width()}}")
    else:
        with open(p) as fh, lock():
            pass
    return a if b(c) else d(e)
class C(Base, metaclass=M):
    async def run(self):
        async for item in stream():
            await item
from . import (x as y, z)
match cmd:
    case Point(x=0, y=yy) if yy > q():
        pass
"""


class _Log(cst.CSTVisitor):
    """Logs every callback; prunes below every ``Lambda`` and every ``if`` test to check that
    returning False from a visit method is honoured."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.log.append(("visit", type(node).__name__, id(node)))
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.log.append(("leave", type(original_node).__name__, id(original_node)))
        super().on_leave(original_node)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_If_test(self, node: cst.If) -> None:
        self.log.append(("visit_If_test", "If", id(node)))

    def leave_If_test(self, node: cst.If) -> None:
        self.log.append(("leave_If_test", "If", id(node)))

    def visit_Call_args(self, node: cst.Call) -> None:
        self.log.append(("visit_Call_args", "Call", id(node)))


@pytest.mark.parametrize(
    "source",
    [SNIPPET, *(path.read_text(encoding="utf-8") for path in CASES)],
    ids=["snippet", *(path.stem for path in CASES)],
)
def test_walk_calls_the_visitor_like_libcst(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fresh caches: what the walk learns from one file must not hide a mistake on another.
    monkeypatch.setattr(walk_module, "_plans", {})
    monkeypatch.setattr(walk_module, "_child_field_order", {})
    module = cst.parse_module(source)
    by_libcst, by_walk = _Log(), _Log()
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.log == _without_trivia(module, by_libcst.log)
    assert len(by_walk.log) < len(by_libcst.log)  # the trivia were really skipped
    if source is SNIPPET:  # the snippet exercises the field hooks and the pruning
        kinds = {entry[0] for entry in by_walk.log}
        assert {"visit_If_test", "leave_If_test", "visit_Call_args"} <= kinds
        inside_lambda = module.body[0].params.kwonly_params[0].default.body  # h()
        assert isinstance(inside_lambda, cst.Call)
        assert ("visit", "Call", id(inside_lambda)) not in by_walk.log


def _without_trivia(module: cst.Module, log: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """libcst's log less every callback on a trivia node or on anything below one."""
    below_trivia: set[int] = set()

    class Mark(cst.CSTVisitor):
        depth = 0

        def on_visit(self, node: cst.CSTNode) -> bool:
            if self.depth or type(node) in walk_module.TRIVIA:
                below_trivia.add(id(node))
                self.depth += 1
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            if id(original_node) in below_trivia:
                self.depth -= 1

    module.visit(Mark())
    return [entry for entry in log if entry[0] not in ("visit", "leave") or entry[2] not in below_trivia]


class _Comments(cst.CSTVisitor):
    """Asks for one trivia type: the walk must then enter trivia for it."""

    def __init__(self) -> None:
        super().__init__()
        self.comments: list[str] = []

    def visit_Comment(self, node: cst.Comment) -> None:
        self.comments.append(node.value)


def test_a_visitor_with_a_method_for_a_trivia_type_gets_those_nodes() -> None:
    module = cst.parse_module("x = f(1,  # one\n      2)  # two\n# three\ny = 1\n")
    by_libcst, by_walk = _Comments(), _Comments()
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.comments == by_libcst.comments == ["# one", "# two", "# three"]


class _Statements(cst.CSTVisitor):
    collected_types = frozenset({cst.SimpleStatementLine, cst.Call})

    def __init__(self) -> None:
        super().__init__()
        self.collected: list[cst.CSTNode] = []


def test_collected_types_are_appended_in_visiting_order() -> None:
    module = cst.parse_module(SNIPPET)
    expected: list[cst.CSTNode] = []

    class Everything(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if type(node) in _Statements.collected_types:
                expected.append(node)
            return True

    module.visit(Everything())
    collector = _Statements()
    walk(module, collector)
    assert [id(node) for node in collector.collected] == [id(node) for node in expected]
    assert len(expected) > 10


class _Hooks(cst.CSTVisitor):
    """A visitor with only per-type methods (the walk calls them directly, not via on_visit)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int]] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.log.append(("visit_Call", id(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.log.append(("leave_Call", id(original_node)))

    def visit_Name(self, node: cst.Name) -> None:
        self.log.append(("visit_Name", id(node)))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.log.append(("visit_FunctionDef", id(node)))
        return node.name.value != "f"  # prune f's body

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.log.append(("leave_FunctionDef", id(original_node)))


def test_walk_calls_per_type_methods_like_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk_module, "_plans", {})
    module = cst.parse_module(SNIPPET)
    by_libcst, by_walk = _Hooks(), _Hooks()
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.log == by_libcst.log
    assert ("leave_FunctionDef", id(module.body[0])) in by_walk.log
    assert ("visit_Name", id(module.body[0].name)) not in by_walk.log  # pruned with f


def test_a_visitor_that_overrides_the_attribute_hooks_is_refused() -> None:
    class Custom(cst.CSTVisitor):
        def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
            pass

    with pytest.raises(TypeError, match="attribute hooks"):
        walk(cst.parse_module("x = 1\n"), Custom())


def test_a_statement_filter_enters_only_the_statements_it_accepts() -> None:
    class NamesOutsideLoops(StatementFilter):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def enters_statement(self, node: cst.CSTNode) -> bool:
            return not isinstance(node, (cst.For, cst.While))

        def visit_Name(self, node: cst.Name) -> None:
            self.names.append(node.value)

    module = cst.parse_module("a = 1\nfor b in c:\n    d = 2\nif e:\n    while f:\n        g()\n    h = 3\n")
    finder = NamesOutsideLoops()
    walk(module, finder)
    assert finder.names == ["a", "e", "h"]


def _every_tree() -> list[cst.Module]:
    """The fixtures' trees and what the conversion makes of them (nodes the rules built)."""
    from accel_convert import codemods
    from accel_convert.codemods.engine.model import Options

    trees = [cst.parse_module(SNIPPET)]
    for path in CASES:
        source = path.read_bytes()
        parsed = cst.parse_module(source)
        trees += [parsed, codemods.convert_module(parsed, Options(), source).module]
    return trees


def test_every_child_is_of_a_type_its_field_declares() -> None:
    """The walks skip a subtree when no node a visitor hooks can stand in it, reading that off the
    types libcst declares for each field: every node of every fixture, parsed and converted,
    must be one its parent's fields declare."""
    undeclared = set()
    for module in _every_tree():
        pending: list[cst.CSTNode] = [module]
        while pending:
            node = pending.pop()
            children = walk_module.child_nodes(node)
            declared = walk_module.child_types(type(node))
            undeclared |= {
                (type(node).__name__, type(child).__name__) for child in children if type(child) not in declared
            }
            pending.extend(children)
    assert not undeclared


class _DefinitionHooks(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[int] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.log.append(id(node))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.log.append(id(original_node))


def test_a_walk_for_statements_enters_no_expression(monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[type] = []
    real_walk = walk_module._walk

    def counting(node: cst.CSTNode, *args: object) -> None:
        entered.append(type(node))
        real_walk(node, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(walk_module, "_walk", counting)
    module = cst.parse_module(SNIPPET)
    by_libcst, by_walk = _DefinitionHooks(), _DefinitionHooks()
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.log == by_libcst.log and by_walk.log
    assert cst.FunctionDef in entered
    assert not [kind for kind in entered if issubclass(kind, (cst.BaseExpression, cst.SimpleStatementLine))]


def test_types_leading_to_a_statement_leave_out_expressions() -> None:
    leading = walk_module.types_leading_to({cst.FunctionDef})
    assert {cst.Module, cst.ClassDef, cst.IndentedBlock, cst.If, cst.FunctionDef} <= leading
    assert not leading & {cst.Call, cst.Lambda, cst.SimpleStatementLine, cst.Name}
    # A call can stand under a lambda's body, a decorator, a default value: all lead to it.
    assert {cst.Lambda, cst.Decorator, cst.Param, cst.SimpleStatementLine} <= walk_module.types_leading_to({cst.Call})


def test_types_leading_to_several_types_are_those_leading_to_each() -> None:
    """Asked of several types at once, the types leading to any of them (each type's are found
    once per run and kept)."""
    each = walk_module.types_leading_to({cst.FunctionDef}) | walk_module.types_leading_to({cst.Comma})
    assert walk_module.types_leading_to({cst.FunctionDef, cst.Comma}) == each  # trivia leads nowhere
    both = walk_module.types_leading_to({cst.FunctionDef}) | walk_module.types_leading_to({cst.Call})
    assert walk_module.types_leading_to({cst.FunctionDef, cst.Call}) == both
    assert walk_module.types_leading_to(set()) == frozenset()


class _FieldHookOnATrivia(cst.CSTVisitor):
    def visit_Comma_whitespace_after(self, node: cst.Comma) -> None:
        pass


def test_only_a_method_named_for_a_trivia_type_wants_trivia() -> None:
    """The walk and the transformers ask one question (``walk.wants_trivia``): a ``visit_``/
    ``leave_`` method named for a whitespace or token type, not a field hook on one."""
    assert walk_module.wants_trivia(_Comments)
    assert not walk_module.wants_trivia(_Statements)
    assert not walk_module.wants_trivia(_FieldHookOnATrivia)
