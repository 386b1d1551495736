"""A ``torchrun`` launch whose hang fails with every rank's Python stack.

Every process of the launch runs with ``PYTHONFAULTHANDLER=1``, so Python's faulthandler dumps
the stack of each of its threads when the process gets SIGABRT. When the launch runs past its
time, the whole process group (torchrun's agent and every rank, each in a session of its own, found as its descendants) gets SIGABRT, has a moment to
write its stacks to the shared stderr, and is then killed: the failure shows where each rank
waited (a barrier only one rank reached, a collective the other rank never entered).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.launching import Run, base_env, free_port

#: Seconds the ranks get to write their stacks after SIGABRT.
DUMP_GRACE_S = 3.0


def torchrun_with_stacks(
    script: Path | str,
    *args: str,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 120.0,
) -> tuple[Run, bool]:
    """``torchrun --nproc_per_node N script args``; (the run, whether it hung). A hung run's
    stderr ends with every process's stack."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(script),
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_env({**(env or {}), "PYTHONFAULTHANDLER": "1"}),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return Run(proc.returncode, out, err), False
    except subprocess.TimeoutExpired:
        pass
    # torchrun starts each rank in a session of its own: the ranks are found as descendants.
    processes = [proc.pid, *descendants(proc.pid)]
    signal_each(processes, signal.SIGABRT)
    time.sleep(DUMP_GRACE_S)
    signal_each([*processes, *descendants(proc.pid)], signal.SIGKILL)
    out, err = proc.communicate()
    return Run(-9, out, f"{err}\n--- ran past {timeout}s: every process's stack is above ---"), True


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc), children before grandchildren."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        # ``pid (command) state ppid ...``: the command may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop(0)
        children = [child for child, parent in parents.items() if parent == current]
        found.extend(children)
        pending.extend(children)
    return found


def signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
