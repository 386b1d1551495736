"""A ``torchrun`` launch whose hang fails with every rank's Python stack, as (run, hung).

The launch itself is ``tests/launching.torchrun``: every process runs with faulthandler on, and
past the timeout the whole launch (torchrun's agent, its process group and every rank, each in a
session of its own, found as its descendants) gets SIGABRT, writes its stacks to the shared
stderr, and is then killed: the failure shows where each rank waited (a barrier only one rank
reached, a collective the other rank never entered).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.launching import Run, torchrun


def torchrun_with_stacks(
    script: Path | str,
    *args: str,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 120.0,
    clock_starts_when: Sequence[Path] = (),
) -> tuple[Run, bool]:
    """``torchrun --nproc_per_node N script args``; (the run, whether it hung). A hung run's
    stderr ends with every process's stack (``clock_starts_when``: see ``run_command``)."""
    run = torchrun(
        script,
        *args,
        nproc=nproc,
        env=env,
        cwd=cwd,
        timeout=timeout,
        raise_on_timeout=False,
        clock_starts_when=clock_starts_when,
    )
    hung = f"ran past {timeout}s and was killed" in run.stderr
    return run, hung
