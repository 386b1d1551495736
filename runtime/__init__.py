"""Distributed training on torch.distributed with Hugging Face Accelerate's API.

Converted scripts do ``from runtime import Accelerator, DistributedDataParallelKwargs,
find_executable_batch_size, set_seed`` and run under ``torchrun`` / ``accel-launch`` (several
processes, one per GPU or CPU worker) or plain ``python`` (one process, identical results to the
original script).
"""

from __future__ import annotations

from typing import Any

from runtime.accelerator import Accelerator
from runtime.comm_hooks import DDPCommunicationHookType
from runtime.fsdp import FullyShardedDataParallelPlugin
from runtime.gradient_state import GradientState
from runtime.handlers import (
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProjectConfiguration,
)
from runtime.profiling import ProfileKwargs
from runtime.state import DistributedType
from runtime.state_objects import AcceleratorState, PartialState
from runtime.utils import set_seed, synchronize_rng_states

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
    "prepare_data_loader",
    "release_memory",
    "set_seed",
    "skip_first_batches",
    "synchronize_rng_states",
]

#: Loaded on first use (these modules are large and not every script needs them), through
#: ``runtime.utils``, which knows where each one lives.
_FROM_UTILS = frozenset(
    {"find_executable_batch_size", "release_memory", "skip_first_batches", "get_logger", "prepare_data_loader"}
)


def __getattr__(name: str) -> Any:
    if name in _FROM_UTILS:
        from runtime import utils

        return getattr(utils, name)
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
