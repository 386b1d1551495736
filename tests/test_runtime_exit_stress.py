"""A finished run always exits: a short train-gather-save-exit script, launched again and again on
two ranks while a busy-loop process competes for the CPU, never hangs at exit.

The hang this guards against needs a Gloo worker thread to be late (it frees a finished work item
and needs the GIL while the main thread, holding the GIL, destroys the group and joins it), so it
shows up under load and only now and then: hence many launches, each with a bound, and the load.
``EXIT_STRESS_LAUNCHES`` sets how many (10 here, to keep the suite's time down; 30 were run for
the change that fixed it).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launching import REPO_ROOT, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_exit_stress.py"
LAUNCHES = int(os.environ.get("EXIT_STRESS_LAUNCHES", "10"))
#: Seconds one launch may take; a clean one takes 5-15 s on a loaded two-core machine.
LAUNCH_BOUND_S = 90.0


def _spin() -> None:
    while True:
        pass


@pytest.fixture
def busy_cpu() -> Iterator[None]:
    spinner = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
    spinner.start()
    try:
        yield
    finally:
        spinner.kill()
        spinner.join(timeout=10)


def test_train_save_exit_never_hangs_under_load(busy_cpu: None, tmp_path: Path) -> None:
    durations = []
    for launch in range(LAUNCHES):
        work = tmp_path / f"launch{launch}"
        work.mkdir()
        started = time.monotonic()
        # torchrun() kills the launch and fails the test if it runs past the bound: a hang.
        torchrun(SCRIPT, str(work), nproc=2, timeout=LAUNCH_BOUND_S).check()
        durations.append(time.monotonic() - started)
        assert sorted(path.name for path in work.glob("done_rank*")) == ["done_rank0", "done_rank1"]
    assert len(durations) == LAUNCHES
