"""The seed write-up, end to end: a BERT emotion classifier converted with ``--oom-retry``.

fixtures/cases/bert_emotion.py is a single-GPU script in the write-up's shape (collator padding
per batch, a head on ``last_hidden_state[:, 0]`` so BERT's pooler gets no gradient, tqdm, Adam,
macro-F1). ``accel-convert --oom-retry`` turns it into an Accelerator script whose training is
retried with a smaller batch after out-of-memory errors. We check what the write-up's reader
cares about, on CPU with a tiny offline BERT (dropout 0):

* two processes train without DDP's unused-parameter error, evaluate each of the 1000
  validation rows exactly once, and print every line once;
* when batches above a row limit raise CUDA's out-of-memory error (tests/e2e_support/
  sitecustomize.py), the batch size goes 2048 -> 1024 -> 512 on both ranks, and the run says so;
* the result is exact by construction: 2 ranks x 512 rows make the same global batches as one
  process with 1024 rows (seeded shuffle, seed set inside the retried function), so the macro-F1
  equals that of the original script run with batch 1024 and of the converted one run on one
  process (which itself retries 2048 -> 1024).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.launching import REPO_ROOT, Run, python, run_command, torchrun

SCRIPT = REPO_ROOT / "fixtures" / "cases" / "bert_emotion.py"
SUPPORT_DIR = REPO_ROOT / "fixtures" / "support"
E2E_SUPPORT = REPO_ROOT / "tests" / "e2e_support"
FORKRUN = E2E_SUPPORT / "forkrun.py"
VALIDATION_ROWS = 1000
SCORE_LINE = re.compile(r"^Epoch: 1\tevaluated: (?P<count>\d+)\tscore: (?P<score>\S+)$", re.MULTILINE)
RETRY_LINE = re.compile(r"out of memory at batch size (\d+)\b.*retrying with (\d+)")
REFUSED_LINE = re.compile(r"e2e-oom: rank (\d+) refused a batch of (\d+) rows")
BATCH_SIZE_LINE = re.compile(r"batch size\D*(\d+)", re.IGNORECASE)
UNUSED_PARAMETERS_ERROR = "Expected to have finished reduction in the prior iteration"


def env(max_rows: int) -> dict[str, str]:
    """Offline, the OOM simulation armed at ``max_rows`` rows per batch, fixture helpers importable."""
    return {
        "PYTHONPATH": os.pathsep.join(map(str, [E2E_SUPPORT, REPO_ROOT, SUPPORT_DIR])),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "E2E_OOM_MAX_ROWS": str(max_rows),
        # tqdm bars go to stderr; keep them from flooding the failure messages
        "TQDM_MININTERVAL": "30",
    }


def describe(run: Run) -> str:
    return f"exit code {run.returncode}\n--- stdout ---\n{run.stdout}\n--- stderr (tail) ---\n{run.stderr[-5000:]}"


def score(run: Run) -> tuple[int, str]:
    """(rows evaluated, macro-F1 as printed) from the one evaluation line; fails unless exactly one."""
    matches = SCORE_LINE.findall(run.stdout)
    assert len(matches) == 1, f"expected one score line:\n{run.stdout}"
    count, value = matches[0]
    return int(count), value


@dataclass
class SeedRuns:
    converted: Path
    model_dir: Path
    original: Run
    converted_one_process: Run


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory: pytest.TempPathFactory) -> SeedRuns:
    """Convert with the CLI, write the tiny BERT, and run the two one-process runs together."""
    root = tmp_path_factory.mktemp("seed-bert")
    converted = root / "train_with_accelerate.py"
    conversion = run_command(
        [sys.executable, "-m", "accel_convert.converter", str(SCRIPT), "--oom-retry", "-o", str(converted)],
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert conversion.returncode == 0, describe(conversion)

    model_dir = root / "tiny-bert"
    jobs = [
        # One process with the simulation at 1200 rows: the original at batch 1024 fits; the
        # converted script starts at 2048, is refused, and retries at 1024.
        {"script": str(SUPPORT_DIR / "emotion" / "synthetic.py"), "args": [str(model_dir)], "cwd": str(root)},
        {
            "script": str(SCRIPT),
            "args": ["--model_name", str(model_dir), "--batch_size", "1024"],
            "cwd": str(root),
            "after_previous": True,
            "timeout": 120,
        },
        {
            "script": str(converted),
            "args": ["--model_name", str(model_dir), "--batch_size", "2048"],
            "cwd": str(root),
            "timeout": 120,
        },
    ]
    for job in jobs:
        job["sys_path"] = [str(SUPPORT_DIR)]
    jobs_file = root / "jobs.json"
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    launch = python(FORKRUN, str(jobs_file), env=env(max_rows=1200), timeout=300).check()
    # forkrun reports each run as it ends, one JSON object per line, in any order.
    results = {result["index"]: result for result in map(json.loads, launch.stdout.splitlines())}
    written, original, converted_one = (
        Run(results[index]["returncode"], results[index]["stdout"], results[index]["stderr"]) for index in range(3)
    )
    assert written.returncode == 0, describe(written)
    return SeedRuns(converted, model_dir, original, converted_one)


def test_plain_script_trains_and_scores_every_validation_row(seed_runs: SeedRuns):
    assert seed_runs.original.returncode == 0, describe(seed_runs.original)
    count, value = score(seed_runs.original)
    assert count == VALIDATION_ROWS
    # The model learned something: better than always answering one of six labels (F1 ~0.05).
    assert float(value) > 0.1


def test_converted_script_on_one_process_retries_once_and_matches_the_original(seed_runs: SeedRuns):
    run = seed_runs.converted_one_process
    assert run.returncode == 0, describe(run)
    assert REFUSED_LINE.findall(run.stderr) == [("0", "2048")]
    assert [tuple(map(int, pair)) for pair in RETRY_LINE.findall(run.stderr)] == [(2048, 1024)]
    assert [int(size) for size in BATCH_SIZE_LINE.findall(run.stdout)] == [2048, 1024]
    # Same global batches as the original at 1024: the runtime is the identity on one process.
    epoch_lines = [line for line in run.stdout.splitlines() if line.startswith("Epoch:")]
    assert epoch_lines == [line for line in seed_runs.original.stdout.splitlines() if line.startswith("Epoch:")]


def test_two_processes_retry_2048_1024_512_and_score_like_one_process(seed_runs: SeedRuns, tmp_path: Path):
    assert seed_runs.original.returncode == 0, describe(seed_runs.original)
    run = torchrun(
        seed_runs.converted,
        "--model_name",
        str(seed_runs.model_dir),
        "--batch_size",
        "2048",
        nproc=2,
        env=env(max_rows=600),
        cwd=tmp_path,
        timeout=240,
    )
    assert UNUSED_PARAMETERS_ERROR not in run.stderr, "DDP's unused-parameter error (BERT's pooler)"
    assert run.returncode == 0, describe(run)

    # Both ranks really had 2048, then 1024 rows in their first batch, and both were refused.
    refused = sorted((int(rank), int(rows)) for rank, rows in REFUSED_LINE.findall(run.stderr))
    assert refused == [(0, 1024), (0, 2048), (1, 1024), (1, 2048)]
    # The run says what it does, once (main process only): two retries, then the working size.
    assert [tuple(map(int, pair)) for pair in RETRY_LINE.findall(run.stderr)] == [(2048, 1024), (1024, 512)]
    assert [int(size) for size in BATCH_SIZE_LINE.findall(run.stdout)] == [2048, 1024, 512]

    # Printed once, every validation row evaluated once, and the one-process macro-F1 exactly.
    assert len([line for line in run.stdout.splitlines() if line.startswith("Epoch:")]) == 2
    count, value = score(run)
    assert count == VALIDATION_ROWS
    assert value == score(seed_runs.original)[1]
