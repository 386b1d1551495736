"""Distributed training on torch.distributed with Hugging Face Accelerate's API.

Converted scripts do ``from accel_convert.runtime import Accelerator, DistributedDataParallelKwargs,
find_executable_batch_size, set_seed`` and run under ``torchrun`` / ``accel-launch`` (several
processes, one per GPU or CPU worker) or plain ``python`` (one process, identical results to the
original script).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name loads on first use
    from accel_convert.runtime.accelerator import Accelerator
    from accel_convert.runtime.big_modeling import init_empty_weights
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
    from accel_convert.runtime.merge import merge_fsdp_weights
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

#: Where each exported name lives. Nothing is imported by ``import accel_convert.runtime`` itself: torch is
#: loaded by the first name a script takes, so ``accel-launch`` (in this package) starts without
#: it (``--version``, ``--help``, ``config``, and a one-line answer where torch is missing), and
#: ``runtime.utils`` knows where its lazily loaded helpers live.
_EXPORTS = {
    "Accelerator": ".accelerator",
    "init_empty_weights": ".big_modeling",
    "DDPCommunicationHookType": ".comm_hooks",
    "FullyShardedDataParallelPlugin": ".fsdp",
    "GradientState": ".gradient_state",
    "AutocastKwargs": ".handlers",
    "DataLoaderConfiguration": ".handlers",
    "DistributedDataParallelKwargs": ".handlers",
    "GradientAccumulationPlugin": ".handlers",
    "GradScalerKwargs": ".handlers",
    "InitProcessGroupKwargs": ".handlers",
    "ProjectConfiguration": ".handlers",
    "merge_fsdp_weights": ".merge",
    "notebook_launcher": ".notebook",
    "ProfileKwargs": ".profiling",
    "DistributedType": ".state",
    "AcceleratorState": ".state_objects",
    "PartialState": ".state_objects",
    "find_executable_batch_size": ".utils",
    "get_logger": ".utils",
    "prepare_data_loader": ".utils",
    "release_memory": ".utils",
    "set_seed": ".utils",
    "skip_first_batches": ".utils",
    "synchronize_rng_states": ".utils",
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
    "init_empty_weights",
    "merge_fsdp_weights",
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
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module, __name__), name)
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        raise ModuleNotFoundError(
            f"{__name__}.{name} needs torch, which is not installed here: pip install 'accel-convert[runtime]'",
            name="torch",
        ) from error
    globals()[name] = value  # the next access is a plain attribute
    return value
