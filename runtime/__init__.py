"""Distributed training on torch.distributed with Hugging Face Accelerate's API.

Converted scripts do ``from runtime import Accelerator, DistributedDataParallelKwargs,
find_executable_batch_size, set_seed`` and run under ``torchrun`` / ``accel-launch`` (several
processes, one per GPU or CPU worker) or plain ``python`` (one process, identical results to the
original script).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name loads on first use
    from accel_convert.runtime.accelerator import Accelerator
    from accel_convert.runtime.comm_hooks import DDPCommunicationHookType
    from accel_convert.runtime.fsdp import FullyShardedDataParallelPlugin
    from accel_convert.runtime.gradient_state import GradientState
    from accel_convert.runtime.handlers import (
        AutocastKwargs,
        DataLoaderConfiguration,
        DistributedDataParallelKwargs,
        GradientAccumulationPlugin,
        GradScalerKwargs,
        InitProcessGroupKwargs,
        ProjectConfiguration,
    )
    from accel_convert.runtime.notebook import notebook_launcher
    from accel_convert.runtime.profiling import ProfileKwargs
    from accel_convert.runtime.state import DistributedType
    from accel_convert.runtime.state_objects import AcceleratorState, PartialState
    from accel_convert.runtime.utils import (
        find_executable_batch_size,
        get_logger,
        prepare_data_loader,
        release_memory,
        set_seed,
        skip_first_batches,
        synchronize_rng_states,
    )

#: Where each exported name lives. Nothing is imported by ``import runtime`` itself: torch is
#: loaded by the first name a script takes, so ``accel-launch`` (in this package) starts without
#: it (``--version``, ``--help``, ``config``, and a one-line answer where torch is missing), and
#: ``runtime.utils`` knows where its lazily loaded helpers live.
_EXPORTS = {
    "Accelerator": "runtime.accelerator",
    "DDPCommunicationHookType": "runtime.comm_hooks",
    "FullyShardedDataParallelPlugin": "runtime.fsdp",
    "GradientState": "runtime.gradient_state",
    "AutocastKwargs": "runtime.handlers",
    "DataLoaderConfiguration": "runtime.handlers",
    "DistributedDataParallelKwargs": "runtime.handlers",
    "GradientAccumulationPlugin": "runtime.handlers",
    "GradScalerKwargs": "runtime.handlers",
    "InitProcessGroupKwargs": "runtime.handlers",
    "ProjectConfiguration": "runtime.handlers",
    "notebook_launcher": "runtime.notebook",
    "ProfileKwargs": "runtime.profiling",
    "DistributedType": "runtime.state",
    "AcceleratorState": "runtime.state_objects",
    "PartialState": "runtime.state_objects",
    "find_executable_batch_size": "runtime.utils",
    "get_logger": "runtime.utils",
    "prepare_data_loader": "runtime.utils",
    "release_memory": "runtime.utils",
    "set_seed": "runtime.utils",
    "skip_first_batches": "runtime.utils",
    "synchronize_rng_states": "runtime.utils",
}

__all__ = [
    "Accelerator",
    "AcceleratorState",
    "AutocastKwargs",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "GradientState",
    "InitProcessGroupKwargs",
    "PartialState",
    "ProfileKwargs",
    "ProjectConfiguration",
    "find_executable_batch_size",
    "get_logger",
    "notebook_launcher",
    "prepare_data_loader",
    "release_memory",
    "set_seed",
    "skip_first_batches",
    "synchronize_rng_states",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        raise ModuleNotFoundError(
            f"runtime.{name} needs torch, which is not installed here: pip install 'accel-convert[runtime]'",
            name="torch",
        ) from error
    globals()[name] = value  # the next access is a plain attribute
    return value
