"""One table of library names, one owner: ``codemods/engine/torch_names.py``.

Copies of a table drift (``torch.cpu.amp.GradScaler`` was once known to the AMP rule but not to
the analysis that decides whether the rule runs); so no other module under ``codemods/`` may
define, at module level, a set, frozenset, dict, list or tuple whose strings are qualified names
of torch, tqdm, accelerate or our runtime.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launching import REPO_ROOT

CODEMODS = REPO_ROOT / "accel_convert" / "codemods"
OWNER = CODEMODS / "engine" / "torch_names.py"
LIBRARIES = ("torch.", "tqdm.", "accelerate.", "accel_convert.runtime.")
MODULES = sorted(path for path in CODEMODS.rglob("*.py") if path != OWNER)


def qualified_names(node: ast.AST) -> list[str]:
    """The strings in a table literal (``{...}``, ``frozenset({...})``, ``[...]``, dict keys and
    values) that name something in one of the libraries."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"set", "frozenset"}:
        return [name for arg in node.args for name in qualified_names(arg)]
    if isinstance(node, ast.Dict):
        elements: list[ast.expr | None] = [*node.keys, *node.values]
    elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        elements = list(node.elts)
    else:
        return []
    return [
        element.value
        for element in elements
        if isinstance(element, ast.Constant) and isinstance(element.value, str) and element.value.startswith(LIBRARIES)
    ]


def module_level_tables(tree: ast.Module) -> Iterator[tuple[int, list[str]]]:
    """(line, qualified names) of every module-level assignment of a table literal."""
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            names = qualified_names(statement.value)
            if names:
                yield statement.lineno, names


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(CODEMODS)))
def test_no_module_but_torch_names_defines_a_table_of_library_names(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = list(module_level_tables(tree))
    assert not found, f"{path.relative_to(REPO_ROOT)}: move these tables to {OWNER.relative_to(REPO_ROOT)}: {found}"


def test_the_owner_is_seen_by_the_check() -> None:
    """The check finds the tables where they are meant to be: it would find a copy elsewhere."""
    tree = ast.parse(OWNER.read_text(encoding="utf-8"))
    found = [name for _, names in module_level_tables(tree) for name in names]
    assert "torch.cpu.amp.GradScaler" in found and "torch.utils.data.DataLoader" in found


def test_a_copied_table_is_found() -> None:
    copied = ast.parse('SCALERS = frozenset({"torch.cuda.amp.GradScaler"})\nOTHER = {"x": "tqdm.tqdm"}\n')
    assert list(module_level_tables(copied)) == [(1, ["torch.cuda.amp.GradScaler"]), (2, ["tqdm.tqdm"])]


def _method_tables(path: Path) -> Iterator[tuple[str, frozenset[str]]]:
    """Module-level tables of two or more method or builtin names (strings without a dot):
    ``WRITING_METHODS = frozenset({"savefig", ...})``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in {"set", "frozenset"}:
            value = value.args[0] if value.args else value
        if not isinstance(target, ast.Name) or not isinstance(value, (ast.Set, ast.List, ast.Tuple)):
            continue
        names = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(names) == len(value.elts) >= 2 and not any("." in name for name in names):
            yield f"{path.relative_to(CODEMODS)}:{target.id}", frozenset(names)


def test_a_table_of_method_names_is_defined_once() -> None:
    """Copies of a table of method names drift too (the writing methods were two tables of different
    contents): no two modules under ``codemods/`` hold the same one."""
    owners: dict[frozenset[str], list[str]] = {}
    for path in sorted(CODEMODS.rglob("*.py")):
        for where, names in _method_tables(path):
            owners.setdefault(names, []).append(where)
    assert {names: where for names, where in owners.items() if len(where) > 1} == {}


def test_the_mean_losses_are_torch_losses() -> None:
    from accel_convert.codemods.engine.torch_names import MEAN_LOSSES, is_loss_function, is_loss_module

    assert all(is_loss_module(name) or is_loss_function(name) for name in MEAN_LOSSES)
    assert is_loss_function("torch.nn.functional.kl_div") and not is_loss_function("torch.nn.functional.relu")
    assert is_loss_module("torch.nn.KLDivLoss") and not is_loss_module("torch.nn.Linear")
