"""A clean run prints only what the script prints: nothing of torch's, and of the runtime's only
its one start-up line on the main process (``accel_convert: 2 processes on 1 node, gloo, cpu``,
kept off by ``ACCEL_CONVERT_QUIET=1``).

The failure watcher (runtime/job_failure.py) used to wake every second with a store wait that
timed out, and torch's TCPStore client logs every such timeout: two ``socket.cpp ...
waitForInput ... timed out after 1000ms`` lines per rank per second of training, in the user's
stderr (measured: 24 lines on a 6 s two-rank run; plain torchrun prints none).
"""

from __future__ import annotations

import re

import pytest

from tests.launching import REPO_ROOT, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_quiet.py"
#: How long the ranks idle with the watcher running: three of the old watcher's wake-ups.
IDLE_SECONDS = 3.0
#: Torch's C++ warnings and errors (``[rank0]:[W1202 16:10:30.70 socket.cpp:469] ...``), its
#: socket layer's words, and the runtime's own ``[rank N] ...`` lines.
NOISE = re.compile(r"\[rank\d+\]:\[[WE]|socket\.cpp|waitForInput|timed out|TCPStore|^\[rank \d+\] ")


#: The one line the runtime says, once, on the main process, when the group comes up (state.announce).
ANNOUNCED = "accel_convert: 2 processes on 1 node, gloo, cpu"


def test_a_clean_two_rank_run_prints_only_what_the_script_prints() -> None:
    # Torch's own default log level, not the quieter one the test harness sets for other runs.
    run = torchrun(
        SCRIPT,
        str(IDLE_SECONDS),
        nproc=2,
        timeout=120,
        env={"TORCH_CPP_LOG_LEVEL": "WARNING", "ACCEL_CONVERT_QUIET": ""},
    ).check()
    ours = [line for line in run.stderr.splitlines() if line.startswith("accel_convert:")]
    assert ours == [ANNOUNCED], run.stderr  # how it runs, said once (not per rank)
    noise = [line for line in run.stderr.splitlines() if NOISE.search(line)]
    assert noise == [], f"{len(noise)} line(s) of noise on stderr:\n" + "\n".join(noise)
    assert run.stdout.splitlines() == ["done"], run.stdout


def test_the_start_line_is_kept_off_stderr_by_accel_convert_quiet() -> None:
    run = torchrun(SCRIPT, "0", nproc=2, timeout=120, env={"ACCEL_CONVERT_QUIET": "1"}).check()
    assert "accel_convert:" not in run.stderr, run.stderr
    assert run.stdout.splitlines() == ["done"], run.stdout


def test_the_start_line_counts_nodes_and_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from accel_convert.runtime import state

    def process(rank: int, world: int, precision: str = "no") -> state.ProcessState:
        kind = state.DistributedType.MULTI_GPU if world > 1 else state.DistributedType.NO
        return state.ProcessState(kind, world, rank, rank % 4, torch.device("cuda", rank % 4), "nccl", precision)

    def said(process_state: state.ProcessState, local_world: int) -> str:
        state._announced = False
        environment = state.TorchrunEnvironment(
            process_state.process_index, process_state.num_processes, 0, local_world
        )
        state.announce(process_state, environment)
        return capsys.readouterr().err

    previous = state._announced
    try:
        assert (
            said(process(0, 8, "bf16"), 4)
            == "accel_convert: 8 processes on 2 nodes, nccl, cuda, bf16 mixed precision\n"
        )
        assert said(process(3, 8), 4) == ""  # only the main process says it
        assert said(process(0, 1), 1) == ""  # nothing to say on one process
        state._announced = False
        state.announce(process(0, 2), None)
        state.announce(process(0, 2), None)  # a second Accelerator, an OOM retry's new group
        assert capsys.readouterr().err == "accel_convert: 2 processes on 1 node, nccl, cuda\n"
    finally:
        state._announced = previous
