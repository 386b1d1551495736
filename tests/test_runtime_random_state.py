"""``Accelerator.agree_random_state()``: every process takes rank 0's state of Python's, NumPy's
and torch's global generators (what ACC124 agreed-random writes where a script draws before it
seeds); on one process nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.launching import REPO_ROOT, python, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "random_state_checks.py"


def test_two_processes_draw_alike_once_they_agree(tmp_path: Path) -> None:
    torchrun(SCRIPT, str(tmp_path), nproc=2, timeout=240).check()
    first, second = (json.loads((tmp_path / f"result_rank{rank}.json").read_text()) for rank in (0, 1))
    assert first["processes"] == second["processes"] == 2
    # Seeded by each process on its own: Python's, NumPy's and torch's draws all differ.
    assert all(a != b for a, b in zip(first["before"], second["before"]))
    assert first["after"] == second["after"]
    assert first["unchanged"], "rank 0 keeps its own state"


def test_one_process_keeps_its_state(tmp_path: Path) -> None:
    python(SCRIPT, str(tmp_path), timeout=240).check()
    result = json.loads((tmp_path / "result_rank0.json").read_text())
    assert result["processes"] == 1
    assert result["unchanged"]
