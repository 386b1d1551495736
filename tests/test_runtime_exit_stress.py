"""A finished run always exits: a short train-gather-save-exit script, run again and again on
two ranks while a busy-loop process competes for the CPU, never hangs at exit.

The hang this guards against needs a Gloo worker thread to be late (it frees a finished work item
and needs the GIL while the main thread, holding the GIL, destroys the group and joins it), so it
shows up under load and only now and then: hence many runs, each with a bound, and the load.
``EXIT_STRESS_LAUNCHES`` sets how many (10 here, to keep the suite's time down; 30 were run for
the change that fixed it).

The runs share one ``torchrun --nproc_per_node 2`` launch of rankrun (tests/e2e_support/): each
rank imports torch once, then forks that rank of every run, which joins its own process group,
trains, and leaves through the interpreter's whole shutdown (``interpreter_exit``: atexit
handlers, module teardown), as ``python script.py`` ends. What is left out is only the import of
torch before each run, which has nothing to do with the exit (15 s of a 16 s launch under load).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e_support.results import rankrun_jobs
from tests.launching import REPO_ROOT, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_exit_stress.py"
LAUNCHES = int(os.environ.get("EXIT_STRESS_LAUNCHES", "10"))
#: Seconds one run may take; a clean one takes 1-5 s on a loaded two-core machine. Past it, both
#: ranks write every thread's stack and the run fails: a hang.
RUN_BOUND_S = 60.0


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
    works = [tmp_path / f"launch{launch}" for launch in range(LAUNCHES)]
    for work in works:
        work.mkdir()
    jobs = [{"script": str(SCRIPT), "args": [str(work)], "cwd": str(work), "interpreter_exit": True} for work in works]
    runs = rankrun_jobs(jobs, tmp_path, {}, RUN_BOUND_S)
    assert len(runs) == LAUNCHES
    for work, run in zip(works, runs):
        assert run.returncode == 0, f"{work.name}:\n{run.stderr[-6000:]}"
        assert sorted(path.name for path in work.glob("done_rank*")) == ["done_rank0", "done_rank1"]


#: A script that made its own group before the Accelerator: the handler registered first runs
#: last, after the runtime's own, and reports whether the group was still there.
OWN_GROUP = """
import atexit
import torch.distributed as dist

# One string, one write: with several arguments, two ranks' words interleave on the shared pipe.
atexit.register(lambda: print(f"group alive at exit: {dist.is_initialized()}", flush=True))
dist.init_process_group("gloo")
from accel_convert.runtime import Accelerator

accelerator = Accelerator()
print(f"processes {accelerator.num_processes}", flush=True)
"""


def test_a_group_the_script_made_itself_is_ended_by_the_runtime_at_exit(tmp_path: Path) -> None:
    """Left to interpreter teardown, Gloo's threads can abort a rank that finished its work
    ("terminate called without an active exception", about 1 launch in 8 here)."""
    script = tmp_path / "own_group.py"
    script.write_text(OWN_GROUP)
    run = torchrun(script, nproc=2, env={"ACCEL_CONVERT_QUIET": "1"}, cwd=tmp_path, timeout=300).check()
    assert run.stdout.count("processes 2") == 2
    assert run.stdout.count("group alive at exit: False") == 2
