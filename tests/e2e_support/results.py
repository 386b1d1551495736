"""Shared launches of many runs, and reading their outcomes.

forkrun (tests/e2e_support/forkrun.py) prints one JSON object per finished job,
``{"index", "returncode", "stdout", "stderr", "seconds", "timed_out"}``, as each job ends;
rankrun (tests/e2e_support/rankrun.py) writes ``RESULTS/<index>.rank<r>.json`` per job and rank.
:func:`forkrun_jobs` and :func:`rankrun_jobs` start one launch for a list of jobs and return
each job's outcome as a :class:`~tests.launching.Run`, never raising: a job that failed, hung or
was never reached is that job's outcome, so it fails only the test that reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.launching import REPO_ROOT, Run, python, torchrun

FORKRUN = REPO_ROOT / "tests" / "e2e_support" / "forkrun.py"
RANKRUN = REPO_ROOT / "tests" / "e2e_support" / "rankrun.py"
#: What a shared launch may take besides its runs: starting, importing torch and the scripts'
#: libraries, torchrun's rendezvous (a few seconds quiet; far more on a loaded machine).
LAUNCH_OVERHEAD = 180.0
#: What rank_results puts in a rank's stderr header when that rank's run ran past its timeout.
RAN_PAST_TIMEOUT = "(ran past its timeout)"


def describe(run: Run) -> str:
    return f"exit code {run.returncode}\n--- stdout ---\n{run.stdout}\n--- stderr (tail) ---\n{run.stderr[-4000:]}"


def forkrun_results(stdout: str, timeout_s: float) -> dict[int, Run]:
    """Job index → its run. Lines that are not results are ignored (a preloaded module may
    print); a job that ran past ``timeout_s`` says so at the end of its stderr."""
    results: dict[int, Run] = {}
    for line in stdout.splitlines():
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and "index" in result:
            note = f"\n(ran past its {timeout_s:.0f} s timeout)" if result["timed_out"] else ""
            results[result["index"]] = Run(result["returncode"], result["stdout"], result["stderr"] + note)
    return results


def rank_results(results: Path, index: int, launch: Run) -> Run:
    """One run's outcome on both ranks as one Run: the first failing rank's exit code, rank 0's
    output then rank 1's (a line printed by both ranks shows up twice, as under torchrun)."""
    ranks = []
    for rank in range(2):
        path = results / f"{index}.rank{rank}.json"
        if not path.is_file():
            return Run(-1, "", f"the shared launch ended before rank {rank} finished this run:\n{describe(launch)}")
        ranks.append(json.loads(path.read_text(encoding="utf-8")))
    failing = [result["returncode"] for result in ranks if result["returncode"] != 0]
    stderr = "".join(
        f"--- rank {rank} stderr{' ' + RAN_PAST_TIMEOUT if result['timed_out'] else ''} ---\n{result['stderr']}"
        for rank, result in enumerate(ranks)
    )
    return Run(failing[0] if failing else 0, "".join(result["stdout"] for result in ranks), stderr)


def forkrun_jobs(jobs: list[dict], root: Path, env: dict[str, str], run_timeout: float) -> tuple[list[Run | None], Run]:
    """Every job (forkrun's job format; each one's ``timeout`` is ``run_timeout`` unless it has
    its own) in one forkrun launch: (each job's run, None for a job forkrun never finished; the
    launch itself)."""
    jobs = [{"timeout": run_timeout, **job} for job in jobs]
    jobs_file = root / "forkrun-jobs.json"
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    # forkrun enforces each run's own timeout; this limit only catches forkrun itself stuck, and
    # is never reached first: every run at its full timeout, two at a time, plus start-up.
    backstop = LAUNCH_OVERHEAD + sum(job["timeout"] + 10.0 for job in jobs) / 2
    launch = python(FORKRUN, str(jobs_file), env=env, timeout=backstop, raise_on_timeout=False)
    results = forkrun_results(launch.stdout, run_timeout)
    return [results.get(index) for index in range(len(jobs))], launch


def rankrun_jobs(jobs: list[dict], root: Path, env: dict[str, str], run_timeout: float) -> list[Run]:
    """Every job on two ranks in one ``torchrun --nproc_per_node 2`` launch of rankrun, one job
    after another, each with its own timeout (``run_timeout``): each job's run, both ranks' output
    in one (rank 0's, then rank 1's). A run past its timeout has every rank's stack in its stderr
    (each rank's own faulthandler watchdog) and :data:`RAN_PAST_TIMEOUT` in that rank's header."""
    results_dir = root / "rankrun-results"
    results_dir.mkdir()
    jobs = [{**job, "timeout": run_timeout} for job in jobs]
    jobs_file = root / "rankrun-jobs.json"
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    # Each run's timeout is enforced on both ranks by rankrun; this limit only catches the
    # launch itself stuck, and is never reached first.
    backstop = LAUNCH_OVERHEAD + len(jobs) * (run_timeout + 10.0)
    launch = torchrun(
        RANKRUN, str(jobs_file), str(results_dir), nproc=2, env=env, timeout=backstop, raise_on_timeout=False
    )
    return [rank_results(results_dir, index, launch) for index in range(len(jobs))]


@contextmanager
def launches_side_by_side(
    request: pytest.FixtureRequest, starts: dict[str, Callable[[Path], Any]], folder: Callable[[str], Path]
) -> Iterator[dict[str, Future]]:
    """Start the test module's launches (a one-process forkrun launch and a two-process rankrun
    launch) two at a time: each fills the other's waiting (start-up, each two-process run's
    rendezvous). ``starts``: fixture name -> what starts that launch in a folder. Only the
    launches some selected test of the module asks for (by fixture name) start; each run keeps
    its own timeout."""
    needed = {
        name
        for item in request.session.items
        if item.module is request.module
        for name in starts
        if name in getattr(item, "fixturenames", ())
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(start, folder(name)) for name, start in starts.items() if name in needed}
