"""The installed ``accel-convert`` console script, run as users and pre-commit run it.

Two real processes (each costs an interpreter start): a conversion from stdin to stdout, then a
``--check`` over the converted result and the original together.
"""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

from tests.launching import REPO_ROOT, base_env

SCRIPT = b"""import torch


def train(model, loader, optimizer):
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
"""


def console_script() -> str:
    path = Path(sysconfig.get_path("scripts")) / "accel-convert"
    assert path.is_file(), f"{path} missing: install the project (pip install -e .)"
    return str(path)


def accel_convert(*args: str, stdin: bytes | None = None, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([console_script(), *args], input=stdin, capture_output=True, cwd=cwd,
                          env=base_env(), timeout=120, check=False)


def test_console_script_converts_stdin_then_checks_both_files(tmp_path: Path) -> None:
    source = SCRIPT
    converted = accel_convert("-", "--stdin-filename", "train.py", stdin=source, cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr.decode()
    assert b"accelerator.backward(loss)" in converted.stdout
    assert b"train.py:" in converted.stderr and b"ACC1" in converted.stderr
    (tmp_path / "original.py").write_bytes(source)
    (tmp_path / "converted.py").write_bytes(converted.stdout)

    check = accel_convert("--check", "original.py", "converted.py", cwd=tmp_path)
    assert check.returncode == 1, check.stderr.decode()
    stderr = check.stderr.decode()
    pending = [line for line in stderr.splitlines() if ": ACC1" in line]
    assert pending and all(line.startswith("original.py:") for line in pending), stderr
    assert stderr.splitlines()[-1].startswith("1 would be converted, 1 unchanged, 0 failed")


def test_pre_commit_hook_definition_runs_the_check() -> None:
    text = (REPO_ROOT / ".pre-commit-hooks.yaml").read_text()
    lines = {line.strip(" -") for line in text.splitlines() if not line.lstrip().startswith("#")}
    assert {"id: accel-convert-check", "entry: accel-convert --check", "language: python",
            "types: [python]"} <= lines
