"""Passes walk only the statements that can hold what they rewrite (``ScriptFacts.word_lines`` and
``transformers.skips_statement``). That is a speed-up only: converting with every statement
walked must give the same output and the same reports, for every fixture and option set."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from accel_convert.codemods.engine import transformers
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites import amp
from accel_convert.converter.pipeline import convert_source
from tests.fixture_conversions import converted_fixture

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "fixtures" / "cases").glob("*.py")) + [ROOT / "benchmarks" / "data" / "typical_train.py"]
OPTION_SETS = {"runtime": Options(), "oom-retry": Options(oom_retry=True), "accelerate": Options(target="accelerate")}


def test_word_lines_give_the_first_line_of_the_statement_naming_each_identifier() -> None:
    source = (
        "import torch\n"  # 1
        "@torch.no_grad()\n"  # 2
        "def evaluate(model,\n"  # 3
        "             loader):\n"  # 4
        "    for batch in loader:\n"  # 5
        "        out = model(\n"  # 6
        "            batch,\n"  # 7
        "            scale=args.scale)\n"  # 8
        "    return out\n"  # 9
    )
    facts = analyse(cst.parse_module(source), source)
    assert facts.word_lines["torch"] == (1, 2)
    assert facts.word_lines["no_grad"] == (2,)
    assert facts.word_lines["evaluate"] == (2,)  # a decorated def starts at its decorator
    assert facts.word_lines["loader"] == (2, 5)  # a parameter belongs to the def
    assert facts.word_lines["batch"] == (5, 6)  # the loop header; the call starting on line 6
    assert facts.word_lines["scale"] == (6,)  # an attribute name, inside a multi-line call
    assert facts.word_lines["out"] == (6, 9)
    assert facts.lines_mentioning({"scale", "out"}) == {6, 9}
    assert facts.lines_mentioning({"nothing"}) == set()


@pytest.fixture
def every_statement_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    never = lambda node, lines, origins: False  # noqa: E731
    monkeypatch.setattr(transformers, "skips_statement", never)
    monkeypatch.setattr(amp, "skips_statement", never)


def _convert(script: Path, options: Options, *, shared: bool = False) -> tuple[bytes, list[tuple[object, ...]]]:
    """The conversion as the CLI makes it; ``shared``: the session's cached one (only ever for
    unpatched walks, which other test files ask for too)."""
    if shared:
        conversion = converted_fixture(script, options)
    else:
        conversion = convert_source(script.read_bytes(), options, path=str(script))
    return conversion.output, [
        (c.code, c.line, c.column, c.end_line, c.end_column, c.message, c.fixed) for c in conversion.changes
    ]


@pytest.mark.parametrize("options_name", sorted(OPTION_SETS))
def test_targeted_walks_convert_exactly_like_full_walks(options_name: str, request: pytest.FixtureRequest) -> None:
    options = OPTION_SETS[options_name]
    targeted = {script.name: _convert(script, options, shared=True) for script in SCRIPTS}
    request.getfixturevalue("every_statement_walked")
    assert transformers.skips_statement(cst.parse_statement("x = 1"), [], None) is False
    full = {script.name: _convert(script, options) for script in SCRIPTS}
    for name in targeted:
        assert targeted[name] == full[name], name
    # The comparison means something: the scripts were really rewritten and reported.
    assert (
        sum(
            output != (ROOT / "fixtures" / "cases" / name).read_bytes()
            for name, (output, _) in targeted.items()
            if name != "typical_train.py"
        )
        > 20
    )


def test_a_transformer_calls_its_own_hooks_and_refuses_per_field_hooks() -> None:
    class Renamer(transformers.TargetedTransformer):
        def __init__(self) -> None:
            super().__init__(None)
            self.visited: list[str] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.visited.append(node.name.value)
            return node.name.value != "skipped"  # its body is not entered

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
            return updated_node.with_changes(value="y") if updated_node.value == "x" else updated_node

    module = cst.parse_module("def kept():\n    x = 1\ndef skipped():\n    x = 2\nx = 3  # x\n")
    renamer = Renamer()
    assert module.visit(renamer).code == "def kept():\n    y = 1\ndef skipped():\n    x = 2\ny = 3  # x\n"
    assert renamer.visited == ["kept", "skipped"]

    class FieldHook(transformers.TargetedTransformer):
        def visit_If_test(self, node: cst.If) -> None:
            pass

    with pytest.raises(TypeError, match="per-field hooks"):
        FieldHook(None)


def test_a_transformer_rebuilds_only_the_nodes_whose_children_changed() -> None:
    class Renamer(transformers.TargetedTransformer):
        def __init__(self) -> None:
            super().__init__(None)
            self.left: list[tuple[str, bool]] = []

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
            return updated_node.with_changes(value="y") if updated_node.value == "x" else updated_node

        def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
            self.left.append((original_node.name.value, updated_node is original_node))
            return updated_node

    module = cst.parse_module("def untouched(a, b):\n    return a + b\n\n\ndef renamed():\n    x = 1\n")
    converted = module.visit(Renamer())
    assert converted.code == "def untouched(a, b):\n    return a + b\n\n\ndef renamed():\n    y = 1\n"
    assert converted.body[0] is module.body[0]  # kept as it was, not a rebuilt copy
    assert converted.body[1] is not module.body[1]
    renamer = Renamer()
    module.visit(renamer)
    assert renamer.left == [("untouched", True), ("renamed", False)]


def test_removals_and_flattening_are_applied_as_libcst_applies_them() -> None:
    class Editor(transformers.TargetedTransformer):
        def __init__(self) -> None:
            super().__init__(None)

        def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
        ):
            code = cst.Module(body=[original_node]).code
            if code == "x = 1\n":
                return cst.RemoveFromParent()
            if code == "y = 2\n":
                return cst.FlattenSentinel([updated_node, cst.parse_statement("z = 3")])
            return updated_node

        def leave_Else(self, original_node: cst.Else, updated_node: cst.Else):
            return cst.RemoveFromParent()  # an optional field: libcst sets it to None

        def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg):
            return (
                cst.RemoveFromParent()
                if cst.Module(body=[]).code_for_node(original_node.value) == "2"
                else updated_node
            )

    source = "if a:\n    x = 1\n    y = 2\nelse:\n    w = 0\nf(1, 2)\n"
    assert cst.parse_module(source).visit(Editor()).code == "if a:\n    y = 2\n    z = 3\nf(1, )\n"


def test_a_transformer_with_hooks_for_tokens_is_walked_by_libcst() -> None:
    class CommaCounter(transformers.TargetedTransformer):
        def __init__(self) -> None:
            super().__init__(None)
            self.commas = 0

        def leave_Comma(self, original_node: cst.Comma, updated_node: cst.Comma) -> cst.Comma:
            self.commas += 1
            return updated_node

    counter = CommaCounter()
    module = cst.parse_module("f(a, b, c)\n")
    assert module.visit(counter).code == "f(a, b, c)\n"
    assert counter.commas == 2
