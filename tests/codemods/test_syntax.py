"""The one reader of the names a statement binds (``engine/syntax.py``), in its two modes, and the
one reader of the Python numbers read off a tensor (``is_host_number``)."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.names import builtins_at, collect_names
from accel_convert.codemods.engine.syntax import (
    argument_for,
    assigned_in,
    branch_blocks,
    is_host_number,
    is_plain_class,
    names_bound,
    parameters_filled,
    python_value,
    rows_counted,
    with_blocks_edited,
)

CODE = """\
def run(x):
    a, *b = x
    self.net = x
    c: int = 1
    d += 1
    for e, f in x:
        pass
    with open(x) as g, open(x):
        import os as h
    try:
        pass
    except OSError as i:
        pass
    def helper():
        inner = 1
    class Local:
        field = 1
"""


def test_assigned_in_reads_assignments_loops_and_withs_with_attribute_paths() -> None:
    function = cst.parse_statement(CODE)
    assert isinstance(function, cst.FunctionDef)
    assert assigned_in(function.body) == {"a", "b", "self.net", "c", "e", "f", "g"}


def test_names_bound_reads_every_plain_binding_and_the_nested_definitions_names() -> None:
    function = cst.parse_statement(CODE)
    assert isinstance(function, cst.FunctionDef)
    statements = list(function.body.body)
    assert names_bound(statements) == {"a", "b", "c", "d", "e", "f", "g", "h", "i", "helper", "Local"}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("x.shape[0]", True),
        ("x.shape", True),
        ("batch[0].shape[-1]", True),
        ("x.size(0)", True),
        ("x.size()[1]", True),
        ("x.numel()", True),
        ("len(x)", True),
        ("loss.item()", True),
        ("y.tolist()", True),
        ("x.ndim", True),
        ("x", False),
        ("x[0]", False),
        ("batch['input']", False),
        ("x.data", False),
        ("x.float()", False),
        ("x.to(device)", False),
        ("torch.zeros(3)", False),
    ],
)
def test_is_host_number(code: str, expected: bool) -> None:
    assert is_host_number(cst.parse_expression(code), builtins_at(None)) is expected


@pytest.mark.parametrize(
    "text, counted",
    [
        ("x.size(0)", "x"),
        ("x.size()[0]", "x"),
        ("x.shape[0]", "x"),
        ("len(x)", "x"),
        ("x.size(1)", None),
        ("x.shape[1]", None),
        ("x.numel()", None),
        ("len(x.y)", None),
        ("x[0]", None),
    ],
)
def test_rows_counted_reads_a_count_of_rows(text: str, counted: str | None) -> None:
    assert rows_counted(cst.parse_expression(text), builtins_at(None)) == counted


#: ``len`` a parameter of ``count``, ``int`` a function of the module's own, ``list`` imported
#: from a library in a method: none is the builtin where it is shadowed, each is elsewhere.
SHADOWING = collect_names(
    cst.parse_module(
        "from records import list\n"
        "def int(value):\n    return value\n"
        "def count(x, len):\n    return len(x)\n"
        "class Model:\n    def forward(self, x):\n        from sizes import sorted\n        return sorted(x)\n"
    )
)


@pytest.mark.parametrize(
    ("code", "scope"),
    [("len(x)", ("count",)), ("int(x)", ()), ("int(x)", ("count",)), ("sorted(x)", ("Model", "forward"))],
)
def test_a_shadowed_builtin_counts_no_rows_and_makes_no_python_value(code: str, scope: tuple[str, ...]) -> None:
    """A name the script binds itself (a parameter ``len``, a ``def int``, ``from sizes import
    sorted``) is not the builtin of that name: no row count, no host number, no Python value."""
    expression = cst.parse_expression(code)
    shadowed = builtins_at(SHADOWING, scope)
    assert rows_counted(expression, shadowed) is None
    assert not is_host_number(expression, shadowed)
    assert not python_value(expression, shadowed)


def test_a_builtin_shadowed_elsewhere_is_the_builtin_here() -> None:
    """``len`` in the module (no parameter of that name there) is the builtin."""
    expression = cst.parse_expression("len(x)")
    assert rows_counted(expression, builtins_at(SHADOWING, ())) == "x"
    assert is_host_number(expression, builtins_at(SHADOWING, ("Model", "forward")))
    assert python_value(cst.parse_expression("sorted(x)"), builtins_at(SHADOWING, ()))


@pytest.mark.parametrize(
    ("call", "index", "expected"),
    [
        ("train(model, loader)", 1, "loader"),
        ("train(model, loader=eval_loader)", 1, "eval_loader"),
        ("train(model)", 1, None),
        ("train(*parts)", 1, None),
        ("train(*parts, loader=eval_loader)", 1, "eval_loader"),
        ("train(model, loader, **options)", 1, "loader"),
        ("train(model, **options)", 1, None),
        ("train(model, loader)", None, None),
    ],
)
def test_argument_for_a_parameter(call: str, index: int | None, expected: str | None) -> None:
    """The argument a call passes for ``loader`` (at ``index`` among the positional parameters;
    None: keyword-only): by keyword, else by position, unknown behind ``*args``."""
    node = cst.parse_expression(call)
    assert isinstance(node, cst.Call)
    found = argument_for(node, index, "loader")
    assert (cst.Module([]).code_for_node(found.value) if found is not None else None) == expected


@pytest.mark.parametrize(("source", "plain"), [("", True), ("from records import object\n", False)])
def test_a_plain_class_derives_from_the_builtin_object(source: str, plain: bool) -> None:
    """``class Evaluator(object)`` is plain where ``object`` is the builtin, not a script's import."""
    module = cst.parse_module(f"{source}class Evaluator(object):\n    def run(self):\n        pass\n")
    node = next(n for n in module.body if isinstance(n, cst.ClassDef))
    assert is_plain_class(node, builtins_at(collect_names(module))) is plain


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ("train(net, loader, 3)", [("model", "net"), ("loader", "loader")]),
        ("train(net, epochs=2, model=other)", [("model", "net"), ("epochs", "2"), ("model", "other")]),
        ("train(*parts, loader=valid, **options)", [("loader", "valid")]),
    ],
)
def test_parameters_filled_by_a_call(call: str, expected: list[tuple[str, str]]) -> None:
    """Each parameter of ``train(model, loader)`` a call fills, with its argument: by position up
    to the last parameter, by keyword (one the function does not name too), none behind ``*``."""
    node = cst.parse_expression(call)
    assert isinstance(node, cst.Call)
    found = [
        (param, cst.Module([]).code_for_node(arg.value)) for param, arg in parameters_filled(node, ("model", "loader"))
    ]
    assert found == expected


BRANCHING = {
    "if": ("if a:\n    x = 1\nelif b:\n    x = 2\nelif c: x = 3\nelse:\n    x = 4\n", ["1", "2", "4"]),
    "with": ("with a:\n    x = 1\n", ["1"]),
    "try": ("try:\n    x = 1\nexcept E:\n    x = 2\nelse:\n    x = 3\nfinally:\n    x = 4\n", ["1", "2", "3", "4"]),
    "for": ("for i in a:\n    x = 1\n", []),
}


@pytest.mark.parametrize("kind", sorted(BRANCHING))
def test_branch_blocks_are_the_blocks_run_once(kind: str) -> None:
    """Each branch of an ``if`` chain (a one-line block left out), a ``with`` block, each block of a
    ``try``; none of a loop, whose body runs again."""
    source, values = BRANCHING[kind]
    statement = cst.parse_module(source).body[0]
    found = []
    for block in branch_blocks(statement):
        line = block.body[0]
        assert isinstance(line, cst.SimpleStatementLine) and isinstance(line.body[0], cst.Assign)
        value = line.body[0].value
        assert isinstance(value, cst.Integer)
        found.append(value.value)
    assert found == values


@pytest.mark.parametrize("kind", sorted(BRANCHING))
def test_with_blocks_edited_edits_every_indented_block(kind: str) -> None:
    """The edit reaches every indented block, an ``elif``'s and a loop's too; nothing else changes."""
    source, _ = BRANCHING[kind]
    module = cst.parse_module(source)
    marker = cst.parse_statement("mark()\n")

    def edited(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return [*statements, marker]

    statement = with_blocks_edited(module.body[0], edited)
    code = module.with_changes(body=[statement]).code
    indented = source.count(":\n")
    assert code.count("mark()") == indented
    assert code.replace("    mark()\n", "") == source
