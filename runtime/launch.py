"""``accel-launch``: torchrun with a sensible default process count, plus ``--env`` for bug reports.

Every flag is ``torch.distributed.run``'s own (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``,
``--rdzv-backend``, ``--master-addr``...), so multi-node launching is torchrun's. Only two things
differ:

- ``--nproc-per-node`` defaults to the number of GPUs, or to 1 on a CPU-only machine (with a hint
  that more CPU workers can be asked for); torchrun's own default is always 1.
- ``accel-launch --env`` prints versions, devices and distributed backends instead of launching.
- ``--fsdp`` (Accelerate: ``--use_fsdp``) and the ``--fsdp_*`` options (any of them also turns
  FSDP on) train every ``Accelerator()`` of the script with FSDP2 instead of DDP, as Accelerate's
  launcher does: they become ``ACCELERATE_USE_FSDP``/``FSDP_*`` variables that
  :class:`runtime.fsdp.FullyShardedDataParallelPlugin` reads. They must come before the script;
  a bad value stops the launch with one line (exit code 2) before any worker starts.
"""

from __future__ import annotations

import argparse
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


#: ``--fsdp_<option>`` -> the variable Accelerate's launcher exports for it.
FSDP_OPTIONS = {
    "version": "FSDP_VERSION",
    "sharding_strategy": "FSDP_SHARDING_STRATEGY",
    "reshard_after_forward": "FSDP_RESHARD_AFTER_FORWARD",
    "auto_wrap_policy": "FSDP_AUTO_WRAP_POLICY",
    "transformer_layer_cls_to_wrap": "FSDP_TRANSFORMER_CLS_TO_WRAP",
    "min_num_params": "FSDP_MIN_NUM_PARAMS",
    "offload_params": "FSDP_OFFLOAD_PARAMS",
    "state_dict_type": "FSDP_STATE_DICT_TYPE",
    "activation_checkpointing": "FSDP_ACTIVATION_CHECKPOINTING",
    "activation_checkpointing_offload": "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
}


def _fsdp_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--fsdp", "--use_fsdp", "--use-fsdp", dest="fsdp", action="store_true")
    for option in FSDP_OPTIONS:
        parser.add_argument(f"--fsdp_{option}", f"--fsdp-{option.replace('_', '-')}", dest=option)
    return parser


def split_fsdp_options(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The FSDP variables the launcher's own options ask for, and the arguments left for torchrun.

    Only options before the script count (the script may have a ``--fsdp`` of its own).
    """
    from torch.distributed.run import get_args_parser

    argv = list(argv)
    torchrun_parser = get_args_parser()
    for action in _fsdp_parser()._actions:  # so that torchrun's parser can find the script
        torchrun_parser._add_action(action)
    parsed = torchrun_parser.parse_args(argv)
    script_at = len(argv) - len(parsed.training_script_args) - 1
    ours, rest = _fsdp_parser().parse_known_args(argv[:script_at])
    chosen = {
        FSDP_OPTIONS[name]: str(value)
        for name, value in vars(ours).items()
        if name in FSDP_OPTIONS and value is not None
    }
    if not (ours.fsdp or chosen):
        return {}, argv
    return {"ACCELERATE_USE_FSDP": "true", **chosen}, [*rest, *argv[script_at:]]


def _check_fsdp_environment(variables: dict[str, str]) -> None:
    """Build the plugin the workers will build, here, so a bad value fails once and early."""
    from runtime.fsdp import FullyShardedDataParallelPlugin

    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        FullyShardedDataParallelPlugin()
    except ValueError as error:
        print(f"accel-launch: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point ``accel-launch [--env] [torchrun flags] script.py [script args]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--env"]:
        print(environment_report())
        return
    from torch.distributed.run import main as torchrun_main

    fsdp_variables, argv = split_fsdp_options(argv)
    if fsdp_variables:
        _check_fsdp_environment(fsdp_variables)
        os.environ.update(fsdp_variables)  # the workers inherit them
    torchrun_main(build_torchrun_args(argv))


if __name__ == "__main__":
    main()
