"""Converted code passes the user's own checks: the fixtures, formatted with black and sorted by
ruff first (a project with ``[tool.black]`` and ``[tool.ruff]``), are converted in a real
subprocess; ``black --check`` then passes on every output, and ``ruff check --select I,F841``
finds nothing the original did not have."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.launching import REPO_ROOT, base_env

CASES = REPO_ROOT / "fixtures" / "cases"
PYPROJECT = "[tool.black]\nline-length = 88\n\n[tool.ruff]\nline-length = 88\n"


def tool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *map(str, args)], cwd=cwd, env=base_env(), capture_output=True, text=True, timeout=600
    )


def ruff_findings(folder: str, cwd: Path) -> set[tuple[str, str]]:
    result = tool("ruff", "check", "--select", "I,F841", "--output-format", "json", "--exit-zero", folder, cwd=cwd)
    return {(Path(f["filename"]).name, f["code"]) for f in json.loads(result.stdout)}


def test_black_and_ruff_pass_on_the_output_where_they_passed_on_the_original(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    original = tmp_path / "in"
    original.mkdir()
    for script in CASES.glob("*.py"):
        shutil.copy(script, original / script.name)
    assert tool("black", "-q", "in", cwd=tmp_path).returncode in (0, 123)  # a file black refuses stays
    tool("ruff", "check", "--select", "I", "--fix", "-q", "in", cwd=tmp_path)
    tool("black", "-q", "in", cwd=tmp_path)
    black_clean = tool("black", "--check", "in", cwd=tmp_path)
    before = ruff_findings("in", tmp_path)

    converted = tool("accel_convert.converter", "in", "-o", "out/", "-q", cwd=tmp_path)
    assert converted.returncode in (0, 123), converted.stderr

    checked = tool("black", "--check", "out", cwd=tmp_path)
    assert checked.returncode == 0 or black_clean.returncode != 0, checked.stderr
    new = ruff_findings("out", tmp_path) - before
    # The conversion's own import goes where isort puts it (I001), and a device assignment it
    # leaves unread is removed (F841): nothing new.
    assert new == set(), sorted(new)
