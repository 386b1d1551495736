"""Gradient accumulation, optimizer and scheduler stepping: batch-by-batch identical to Accelerate.

tests/scripts/runtime_trace.py records ``(sync_gradients, step, scheduler.last_epoch, lr)`` per
batch and the final parameters for several configurations (uneven tails that force a sync,
split_batches, step_scheduler_with_optimizer=False, a OneCycleLR whose total_steps caps the
extra steps). It runs under Accelerate (``ACCELERATE_USE_CPU=1``, Accelerate's way to get real
CPU ranks) and under runtime, on 1 and on 2 processes; the traces must be equal. The same runs
also compare collectives (gather/reduce/pad on nested structures, gather_for_metrics with tensor
and object data) between the two libraries.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.launching import REPO_ROOT, python, torchrun
from tests.reference_results import check_reference

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_trace.py"


@functools.cache
def run_trace(library: str, processes: int) -> list[dict]:
    """Per-rank results; runtime on one process runs right here (no launch needed). Accelerate is
    judged by the result file it wrote (it aborts at shutdown now and then, after writing it)."""
    if library == "runtime" and processes == 1:
        from tests.scripts import runtime_trace

        return [runtime_trace.all_traces()]
    env = {"ACCELERATE_USE_CPU": "1"} if library == "accelerate" else None
    result = Path(tempfile.mkdtemp(prefix=f"trace-{library}-{processes}-")) / "trace.json"
    if processes == 1:
        run = python(SCRIPT, library, str(result), env=env, timeout=240)
    else:
        run = torchrun(SCRIPT, library, str(result), nproc=processes, env=env, timeout=240)
    if library == "accelerate":
        check_reference(run, [result])
    else:
        run.check()
    per_rank = json.loads(result.read_text(encoding="utf-8"))
    shutil.rmtree(result.parent)
    assert len(per_rank) == processes
    return per_rank


# step_scheduler_with_optimizer=False steps the scheduler on non-sync batches: torch warns, as it
# does under Accelerate.
@pytest.mark.filterwarnings("ignore:Detected call of")
@pytest.mark.parametrize("processes", [1, 2])
def test_trace_matches_accelerate(processes: int) -> None:
    ours, theirs = run_trace("runtime", processes), run_trace("accelerate", processes)
    assert len(ours) == len(theirs) == processes
    for rank, (mine, reference) in enumerate(zip(ours, theirs)):
        assert mine.keys() == reference.keys()
        assert mine.pop("collectives") == reference.pop("collectives"), rank
        for name in reference:
            assert mine[name]["len"] == reference[name]["len"], (rank, name)
            assert mine[name]["rows"] == reference[name]["rows"], (rank, name)
            assert mine[name]["params"] == pytest.approx(reference[name]["params"], abs=2e-6), (rank, name)


def test_trace_has_the_documented_shape() -> None:
    """Guards the comparison itself: the 2-rank len-10 trace is the one the reference lists
    (§5.2: the last batch forces a sync and resets the step; the scheduler steps twice per sync)."""
    rows = run_trace("runtime", 2)[0]["len10_bs1_acc2"]["rows"][:5]
    assert [row[:3] for row in rows] == [[False, 1, 0], [True, 2, 2], [False, 3, 2], [True, 4, 4], [True, 0, 6]]
