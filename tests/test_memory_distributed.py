"""find_executable_batch_size on 2 ranks (torchrun, Gloo): every rank retries with the same size.

One launch of tests/scripts/memory_oom_retry.py plays every scenario in a row (see its docstring);
the per-rank JSON lines are checked here. The launch runs under a harness timeout, so a hang fails
the test instead of blocking it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launching import load_slack, torchrun

SCRIPT = Path(__file__).parent / "scripts" / "memory_oom_retry.py"
RETRYING_SCENARIOS = ["forward", "backward", "both", "accelerator", "held"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, dict]]:
    out_dir = tmp_path_factory.mktemp("oom")
    scenarios = RETRYING_SCENARIOS + ["error"]
    # A short collective bound keeps the test quick (the default, 300 s, is for real jobs); a few
    # seconds on a quiet machine, stretched for a loaded one (ranks reach a collective apart).
    bound = f"{3 * load_slack():.0f}"
    run = torchrun(
        SCRIPT, str(out_dir), *scenarios, env={"ACCEL_CONVERT_OOM_COLLECTIVE_TIMEOUT": bound}, timeout=150
    ).check()
    found: dict[str, dict[int, dict]] = {}
    for rank in (0, 1):
        for line in (out_dir / f"rank{rank}.jsonl").read_text(encoding="utf-8").splitlines():
            report = json.loads(line)
            found.setdefault(report["scenario"], {})[rank] = report
    found["_stderr"] = {0: {"text": run.stderr}}
    return found


@pytest.mark.parametrize("scenario", RETRYING_SCENARIOS)
def test_every_rank_retries_at_the_same_size_and_completes(reports, scenario: str) -> None:
    ranks = reports[scenario]
    assert sorted(ranks) == [0, 1]
    for rank, report in ranks.items():
        assert "error" not in report, (rank, report)
        assert [a["batch_size"] for a in report["attempts"]] == [32, 16], (rank, report)
        assert report["final_batch_size"] == 16
        # 256 samples over 2 ranks at 16 per step: the whole epoch ran at the reduced size.
        assert report["attempts"][-1]["steps"] == 8
    # DDP kept the ranks in step on the rebuilt group: the trained parameters agree.
    assert ranks[0]["parameter_sum"] == pytest.approx(ranks[1]["parameter_sum"], abs=1e-6)


def test_backward_failure_happened_while_the_peer_waited_in_the_all_reduce(reports) -> None:
    rank0 = reports["backward"][0]
    rank1 = reports["backward"][1]
    # First attempt: rank 0 started the step-3 all-reduce, which broke (rank 1 failed in its
    # backward pass and never joined); rank 1 never started one for step 3. Then 8 clean steps.
    assert rank0["allreduce_started_steps"] == [0, 1, 2, 3] + list(range(8))
    assert rank0["allreduce_finished_steps"] == [0, 1, 2] + list(range(8))
    assert rank0["allreduce_failed_steps"] == [3]
    assert rank1["allreduce_started_steps"] == [0, 1, 2] + list(range(8))
    assert rank1["allreduce_failed_steps"] == []


def test_main_process_logs_each_retry_once(reports) -> None:
    stderr = reports["_stderr"][0]["text"]
    assert (
        stderr.count("find_executable_batch_size: out of memory at batch size 32 on rank 1; retrying with 16") == 4
    )  # forward, backward, accelerator, held
    assert (
        stderr.count("find_executable_batch_size: out of memory at batch size 32 on ranks 0, 1; retrying with 16") == 1
    )


def test_an_error_that_is_not_memory_stops_every_rank(reports) -> None:
    ranks = reports["error"]
    assert ranks[1]["error_type"] == "ValueError"
    assert ranks[1]["error"] == "a bug that is not about memory"
    assert ranks[0]["error_type"] == "RuntimeError"
    assert "rank 1: ValueError: a bug that is not about memory" in ranks[0]["error"]
    assert [a["batch_size"] for a in ranks[0]["attempts"]] == [32]  # no retry after a real bug
