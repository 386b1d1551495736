"""``accel-launch``: torchrun with a sensible default process count, plus ``--env`` for bug reports.

Every flag is ``torch.distributed.run``'s own (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``,
``--rdzv-backend``, ``--master-addr``...), so multi-node launching is torchrun's. Only two things
differ:

- ``--nproc-per-node`` defaults to the number of GPUs, or to 1 on a CPU-only machine (with a hint
  that more CPU workers can be asked for); torchrun's own default is always 1.
- ``accel-launch --env`` prints versions, devices and distributed backends instead of launching.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

import torch

_NPROC_ENV = "PET_NPROC_PER_NODE"  # torchrun reads its flags' defaults from PET_* variables


def default_nproc_per_node() -> tuple[int, str | None]:
    """One worker per GPU; on a CPU-only machine one worker and a hint about ``--nproc-per-node``."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        return gpus, None
    return 1, ("accel-launch: no GPU found, starting 1 process; pass --nproc-per-node N for N CPU workers (Gloo)")


def environment_report() -> str:
    """Versions, devices and backends: what a bug report needs."""
    import torch.distributed as dist

    lines = [
        f"Python: {platform.python_version()} ({sys.executable})",
        f"Platform: {platform.platform()}",
        f"torch: {torch.__version__}",
        f"CUDA available: {torch.cuda.is_available()} (torch built with CUDA {torch.version.cuda})",
        f"GPU count: {torch.cuda.device_count() if torch.cuda.is_available() else 0}",
    ]
    if torch.cuda.is_available():
        lines += [f"GPU {index}: {torch.cuda.get_device_name(index)}" for index in range(torch.cuda.device_count())]
    lines += [
        f"MPS available: {torch.backends.mps.is_available()}",
        f"CPU count: {os.cpu_count()}",
        f"Distributed available: {dist.is_available()}",
        f"Backends: gloo={dist.is_gloo_available()} nccl={dist.is_nccl_available()} mpi={dist.is_mpi_available()}",
    ]
    return "\n".join(lines)


def _user_chose_nproc(argv: Sequence[str]) -> bool:
    # Only the launcher's own flags count: those before the script (the first non-flag argument
    # is the script, but flag values such as "--nnodes 2" are not flags either, so parse).
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.set_defaults(nproc_per_node=None)
    args = parser.parse_args(list(argv))
    return args.nproc_per_node is not None or _NPROC_ENV in os.environ


def build_torchrun_args(argv: Sequence[str]) -> list[str]:
    """torchrun's argument list: the user's, with ``--nproc-per-node`` filled in if missing."""
    argv = list(argv)
    if _user_chose_nproc(argv):
        return argv
    count, hint = default_nproc_per_node()
    if hint:
        print(hint, file=sys.stderr)
    return ["--nproc-per-node", str(count), *argv]


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point ``accel-launch [--env] [torchrun flags] script.py [script args]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--env"]:
        print(environment_report())
        return
    from torch.distributed.run import main as torchrun_main

    torchrun_main(build_torchrun_args(argv))


if __name__ == "__main__":
    main()
