"""The import rules of DESIGN.md, enforced on the source (static) and at run time (dynamic).

- converter/ and codemods/ never import torch: `accel-convert --check` must start fast on CI
  machines that have no torch.
- runtime/ imports only torch and the standard library: a cluster that runs converted scripts
  needs nothing else.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.launching import REPO_ROOT, base_env

STDLIB = set(sys.stdlib_module_names)


def imported_top_levels(package: str) -> dict[str, list[str]]:
    """Map each absolute top-level module imported anywhere in ``package`` to where it is imported;
    the project's own parts count by their folder (``accel_convert.runtime.x`` as ``runtime``)."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "accel_convert" / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "accel_convert":
                names = [f"accel_convert.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                top = parts[1] if parts[0] == "accel_convert" and len(parts) > 1 else parts[0]
                found.setdefault(top, []).append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


@pytest.mark.parametrize("package", ["converter", "codemods"])
def test_converter_side_never_imports_torch(package: str) -> None:
    imports = imported_top_levels(package)
    assert imports, f"{package}/ has no imports at all: is the package there?"
    assert "torch" not in imports, f"{package}/ imports torch at {imports.get('torch')}"
    # tomli: Python 3.10 only; nbformat: notebooks only (imported when one is converted);
    # pathspec: gitignore matching in folder searches; black: only where installed, for a project
    # that formats with it (converter/formatting.py); __version__: accel_convert's own version
    # (accel_convert/__init__.py, which imports nothing), read by the --check cache; records:
    # accel_convert/records.py, the package's record classes, which import the standard library only.
    allowed = STDLIB | {"libcst", "click", "rich", "tomli", "nbformat", "pathspec", "black", "converter", "codemods"}
    allowed |= {"__version__", "records"}
    assert set(imports) <= allowed, {name: imports[name] for name in set(imports) - allowed}


def test_records_import_the_standard_library_only() -> None:
    """What records.py imports when it runs (a type checker's import under ``TYPE_CHECKING`` aside)."""
    tree = ast.parse((REPO_ROOT / "accel_convert" / "records.py").read_text(encoding="utf-8"))
    checking = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for statement in node.body
        for inner in ast.walk(statement)
    }
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else node.names[0].name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and id(node) not in checking
        and getattr(node, "level", 0) == 0
    }
    assert imported and imported <= STDLIB, imported - STDLIB


def test_runtime_imports_only_torch_and_stdlib() -> None:
    imports = imported_top_levels("runtime")
    assert "torch" in imports
    allowed = STDLIB | {"torch", "runtime"}
    assert set(imports) <= allowed, {name: imports[name] for name in set(imports) - allowed}


def test_cli_start_loads_no_torch() -> None:
    """Dynamic check: running the CLI module does not pull torch in through any side door."""
    code = (
        "import sys, accel_convert.converter.cli, accel_convert.codemods\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'accelerate') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
