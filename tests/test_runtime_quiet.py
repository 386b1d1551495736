"""A clean run prints only what the script prints: nothing of the runtime's, nothing of torch's.

The failure watcher (runtime/job_failure.py) used to wake every second with a store wait that
timed out, and torch's TCPStore client logs every such timeout: two ``socket.cpp ...
waitForInput ... timed out after 1000ms`` lines per rank per second of training, in the user's
stderr (measured: 24 lines on a 6 s two-rank run; plain torchrun prints none).
"""

from __future__ import annotations

import re

from tests.launching import REPO_ROOT, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_quiet.py"
#: How long the ranks idle with the watcher running: three of the old watcher's wake-ups.
IDLE_SECONDS = 3.0
#: Torch's C++ warnings and errors (``[rank0]:[W1202 16:10:30.70 socket.cpp:469] ...``), its
#: socket layer's words, and the runtime's own ``[rank N] ...`` lines.
NOISE = re.compile(r"\[rank\d+\]:\[[WE]|socket\.cpp|waitForInput|timed out|TCPStore|^\[rank \d+\] ")


def test_a_clean_two_rank_run_prints_only_what_the_script_prints() -> None:
    # Torch's own default log level, not the quieter one the test harness sets for other runs.
    run = torchrun(SCRIPT, str(IDLE_SECONDS), nproc=2, timeout=120, env={"TORCH_CPP_LOG_LEVEL": "WARNING"}).check()
    noise = [line for line in run.stderr.splitlines() if NOISE.search(line)]
    assert noise == [], f"{len(noise)} line(s) of noise on stderr:\n" + "\n".join(noise)
    assert run.stdout.splitlines() == ["done"], run.stdout
