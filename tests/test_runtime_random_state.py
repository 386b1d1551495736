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


PARTIAL_THEN_CPU = REPO_ROOT / "tests" / "scripts" / "partial_state_then_cpu_accelerator.py"


def test_cpu_accelerator_after_a_partial_state_on_import_computes_on_gloo(tmp_path: Path) -> None:
    """``PartialState()`` on import (where ACC124 agrees a draw at module level) on a machine with
    GPUs joins the group over NCCL; the script's ``Accelerator(cpu=not args.cuda)`` then trains on
    the CPU: the group is made again with Gloo, and both state objects say so (before, the
    Accelerator reported the CPU over NCCL and its first gather went to a GPU)."""
    torchrun(PARTIAL_THEN_CPU, str(tmp_path), nproc=2, timeout=240).check()
    for rank in (0, 1):
        result = json.loads((tmp_path / f"result_rank{rank}.json").read_text())
        assert result["on_import"] == ["cuda", "nccl"]
        assert result["asked"] == ["nccl", "gloo"]
        assert result["accelerator"] == ["cpu", "gloo", "DistributedType.MULTI_CPU"]
        assert result["partial_state"] == ["cpu", "gloo"]
        assert result["gathered"] == [0, 1]
