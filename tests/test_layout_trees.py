"""The layout's check that its lines are the same program (``layout.same_tree``) says what
comparing ``ast.dump`` of the two trees said, on every fixture and golden output: each against a
re-parse of itself, against itself with one constant changed (``1`` → ``1.0``, ``"a"`` → a tuple),
and against the next file; and the layout keeps no file's tokens or trees once it is done."""

from __future__ import annotations

import ast
import copy

import pytest

from accel_convert.converter import layout
from tests.launching import REPO_ROOT

SCRIPTS = sorted((REPO_ROOT / "fixtures" / "cases").glob("*.py")) + sorted(
    (REPO_ROOT / "fixtures" / "expected").glob("*.py")
)


def _trees() -> list[ast.Module]:
    return [ast.parse(path.read_text(encoding="utf-8")) for path in SCRIPTS]


def _one_constant_changed(tree: ast.Module) -> ast.Module | None:
    changed = copy.deepcopy(tree)
    for node in ast.walk(changed):
        if isinstance(node, ast.Constant) and node.value is not None:
            # A value no parse gives (a tuple) still has a repr: the check compares those.
            changed_value: object = float(node.value) if type(node.value) is int else (node.value,)
            node.value = changed_value  # type: ignore[assignment]
            return changed
    return None


@pytest.mark.parametrize("shape", ["reparsed", "one constant changed", "another file"])
def test_same_tree_agrees_with_comparing_dumps(shape: str) -> None:
    trees = _trees()
    assert len(trees) > 100
    disagreements = []
    for index, tree in enumerate(trees):
        if shape == "reparsed":
            other: ast.Module | None = ast.parse(ast.unparse(tree))
        elif shape == "one constant changed":
            other = _one_constant_changed(tree)
        else:
            other = trees[(index + 1) % len(trees)]
        if other is None:
            continue
        if layout.same_tree(tree, other) != (ast.dump(tree) == ast.dump(other)):
            disagreements.append(SCRIPTS[index].name)
    assert disagreements == []


def test_the_layout_keeps_nothing_of_a_file_once_done() -> None:
    original = "import torch\n\nmodel.load_state_dict(torch.load(path, map_location=location))\n"
    output = (
        "import torch\nfrom accel_convert.runtime import Accelerator\naccelerator = Accelerator()\n"
        "accelerator.unwrap_model(model).load_state_dict(torch.load(path, map_location=location))\n"
    )
    laid_out = layout.formatter_layout(original, output, 88)
    assert laid_out != output  # the long line was split: every step ran
    assert layout._tokens_of.cache_info().currsize == 0
    assert layout._parsed.cache_info().currsize == 0
