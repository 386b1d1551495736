"""A barrier that not every rank reaches fails within its bound, and says who is missing and where.

One launch of tests/scripts/runtime_barrier_hang.py (rank 0 calls ``wait_for_everyone`` alone; rank
1 sits in a collective of its own further down), with the barrier bound set to 5 s.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.launching import REPO_ROOT, load_slack, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_barrier_hang.py"
BARRIER_TIMEOUT_S = 5.0
#: The missing rank's answer (its watcher wakes on the request) and the job's teardown take at most
#: this long on a quiet machine (stretched for a loaded one: tests.launching.load_slack).
ANSWER_AND_TEARDOWN_S = 3.0


def line_of(marker: str) -> str:
    number = next(index for index, line in enumerate(SCRIPT.read_text().splitlines(), 1) if marker in line)
    return f"{SCRIPT}:{number}"


def test_a_barrier_only_rank_0_reaches_names_rank_1_and_both_lines(tmp_path: Path) -> None:
    run = torchrun(
        SCRIPT, str(tmp_path), nproc=2, timeout=120, env={"ACCEL_CONVERT_BARRIER_TIMEOUT": str(BARRIER_TIMEOUT_S)}
    )
    elapsed = time.time() - float((tmp_path / "start").read_text())
    end_bound = BARRIER_TIMEOUT_S + ANSWER_AND_TEARDOWN_S * load_slack()
    text = run.stdout + run.stderr
    assert run.returncode != 0 and "passed" not in run.stdout, text
    assert elapsed < end_bound, f"ended {elapsed:.1f}s after the ranks parted\n{text}"
    rank0_line, rank1_line = line_of("# RANK0_BARRIER"), line_of("# RANK1_COLLECTIVE")
    # Rank 0 (waiting) names the missing rank and both places...
    assert (
        f"[rank 0] wait_for_everyone at {rank0_line} waited 5s: rank(s) 1 never arrived; "
        f"rank 0 waits in wait_for_everyone at {rank0_line}; rank 1 is at {rank1_line}"
    ) in text, text
    # ...and rank 1 (missing) says who waits for it, where, and where it is itself.
    assert (
        f"[rank 1] rank(s) 0 wait for this rank in wait_for_everyone at {rank0_line}; this rank is at {rank1_line}"
    ) in text, text
    assert "BarrierTimeoutError" in text, text
    # A rank in the barrier does not answer for itself.
    assert "[rank 0] rank(s) 0 wait for this rank" not in text, text
