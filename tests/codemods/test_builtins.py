"""The builtin resolver (``codemods.engine.names.builtin_named``): ``print``, ``len``, ``open``... are
matched by what they are, not by their text.

Checked against libcst's scope analysis (its QualifiedNameProvider names a builtin
``builtins.<name>``): on every fixture and on snippets that shadow ``print`` and ``open`` at module
level, in a function and in a class, every plain name is a builtin for the resolver exactly when it
is one for libcst. The facts answer the same question (``ScriptFacts.is_builtin``), and the rules
that ask it leave a shadowed ``open`` alone (fixtures ``shadowed_builtins_module``, ``_function``,
``_class`` convert and run those scripts).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, QualifiedNameProvider, QualifiedNameSource

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.names import ScopeKey, builtin_named, collect_names
from tests.launching import REPO_ROOT

FIXTURES = sorted((REPO_ROOT / "fixtures" / "cases").glob("shadowed_builtins_*.py")) + sorted(
    p for p in (REPO_ROOT / "fixtures" / "cases").glob("print*.py")
)

SHADOWING = {
    "module-level import": "from rich import print\nprint('x')\ndef f():\n    print('y')\n",
    "module-level def": "def open(name, mode='r'):\n    return name\nopen('a', 'w')\ndef f():\n    open('b')\n",
    "module-level assignment": "print = logger.info\nprint('x')\n",
    "function-local import": "def f():\n    from rich import print\n    print('x')\nprint('y')\n",
    "function-local def": "def f():\n    def open(name):\n        return name\n    open('a')\nopen('b')\n",
    "parameter": "def f(print, open):\n    print(open('a'))\nprint(open('b'))\n",
    "enclosing function": "def f():\n    open = records.open\n    def g():\n        open('a')\n",
    "class body not visible in methods": (
        "class A:\n    open = staticmethod(records.open)\n    x = open('a')\n    def m(self):\n        open('b', 'w')\n"
    ),
    "method-local import": "class A:\n    def m(self):\n        from rich import print\n        print('x')\n",
    "global": "def f():\n    global open\n    open = records.open\nopen('a')\n",
    "builtins module": "import builtins\nbuiltins.print('x')\nbuiltins.open('a')\n",
    "for target and with": "for print in []:\n    pass\nwith records() as open:\n    open('a')\n",
}


class _Names(cst.CSTVisitor):
    """Every name and ``builtins.<name>`` outside import statements, with its scope key and whether
    libcst takes it for a builtin (the only thing it names)."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.scope: ScopeKey = ()
        self.found: list[tuple[cst.BaseExpression, ScopeKey, str | None]] = []
        #: The names of ``def``/``class`` statements: they bind, they are not read.
        self.defined: set[int] = set()

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.defined.add(id(node.name))
        self.scope = (*self.scope, node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope = self.scope[:-1]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.defined.add(id(node.name))
        self.scope = (*self.scope, node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scope = self.scope[:-1]

    def visit_Global(self, node: cst.Global) -> bool:
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        # ``builtins.print`` whole; otherwise only what the attribute is read from (``records`` of
        # ``records.open``: an attribute's name is no name of a scope).
        if isinstance(node.value, cst.Name) and node.value.value == "builtins":
            self._record(node)
        else:
            node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # a keyword (``type=int``) names a parameter, not a value
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self.defined:
            self._record(node)

    def _record(self, node: cst.BaseExpression) -> None:
        names = self.get_metadata(QualifiedNameProvider, node, set())
        answer = None
        if len(names) == 1:
            (only,) = names
            if only.source is QualifiedNameSource.BUILTIN or only.name.startswith("builtins."):
                answer = only.name.removeprefix("builtins.")
        self.found.append((node, self.scope, answer))


def disagreements(source: str) -> tuple[list[str], int]:
    """Where the resolver and libcst differ, and how many builtins both found."""
    module = cst.parse_module(source)
    table = collect_names(module)
    walker = _Names()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(walker)
    wrong = []
    for node, scope, expected in walker.found:
        ours = builtin_named(node, table, scope)
        if ours != expected:
            wrong.append(f"{module.code_for_node(node)} in {scope or 'module'}: ours {ours}, libcst {expected}")
    return wrong, sum(1 for _, _, expected in walker.found if expected is not None)


@pytest.mark.parametrize("source", SHADOWING.values(), ids=SHADOWING.keys())
def test_resolver_agrees_with_libcst_where_a_builtin_is_shadowed(source: str) -> None:
    assert disagreements(source)[0] == []


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_resolver_agrees_with_libcst_on_fixtures(fixture: Path) -> None:
    wrong, builtins_found = disagreements(fixture.read_text(encoding="utf-8"))
    assert wrong == []
    assert builtins_found > 0, "no builtin was compared"


@pytest.mark.parametrize(
    ("source", "scope", "expression", "expected"),
    [
        ("from rich import print\n", (), "print", None),
        ("def print(*values):\n    pass\n", (), "print", None),
        ("def main():\n    from rich import print\n", ("main",), "print", None),
        ("def main():\n    from rich import print\n", (), "print", "print"),
        ("class Logger:\n    def print(self):\n        pass\n", ("Logger", "print"), "print", "print"),
        ("class A:\n    open = None\n", ("A",), "open", None),
        ("class A:\n    open = None\n    def m(self):\n        pass\n", ("A", "m"), "open", "open"),
        ("import builtins\n", (), "builtins.open", "open"),
        ("import builtins as b\n", (), "b.len", "len"),
        ("", (), "self.open", None),
        ("", (), "tqdm", None),
        ("", (), "exit", "exit"),
    ],
)
def test_resolver_answers(source: str, scope: ScopeKey, expression: str, expected: str | None) -> None:
    table = collect_names(cst.parse_module(source))
    assert builtin_named(cst.parse_expression(expression), table, scope) == expected


def test_without_a_name_table_a_builtins_name_is_taken_as_written() -> None:
    """Syntax-only questions (no table): a builtin's plain name, nothing else."""
    assert builtin_named(cst.parse_expression("len"), None) == "len"
    assert builtin_named(cst.parse_expression("builtins.len"), None) is None
    assert builtin_named(cst.parse_expression("length"), None) is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\nwith open('log.txt', 'w') as f:\n    pass\n", True),
        ("import torch\nfrom gzip import open\nwith open('log.gz', 'wt') as f:\n    pass\n", False),
        ("import torch\ndef open(name, mode='r'):\n    return name\nwith open('log', 'w') as f:\n    pass\n", False),
        ("import torch\nopen = records.open\nwith open('log', 'w') as f:\n    pass\n", False),
    ],
    ids=["builtin", "imported", "module-level def", "module-level assignment"],
)
def test_the_facts_take_only_the_builtin_open_for_a_file_opened_for_writing(source: str, expected: bool) -> None:
    module = cst.parse_module(source)
    facts = analyse(module)
    with_statement = next(node for node in module.body if isinstance(node, cst.With))
    assert facts.opens_for_writing(with_statement.items[0].item) is expected


def test_an_open_bound_in_a_function_is_the_builtin_only_outside_it() -> None:
    source = "import torch\ndef main():\n    open = records.open\n    open('a', 'w')\nopen('b', 'w')\n"
    facts = analyse(cst.parse_module(source))
    call = cst.parse_expression("open('a', 'w')")
    assert not facts.opens_for_writing(call, ("main",))
    assert facts.opens_for_writing(call, ())
    assert facts.is_builtin(cst.parse_expression("open"), "open")
    assert facts.builtin(cst.parse_expression("open"), ("main",)) is None
