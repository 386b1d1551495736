"""Accelerate's functional data-loader API (``accelerate.data_loader``) on :mod:`runtime.data`.

``prepare_data_loader(dataloader, device, num_processes, process_index, ...)`` takes Accelerate's
positional order and defaults: the process facts come from :class:`~runtime.state_objects.PartialState`
when not given, and batches are moved to ``device`` only with ``put_on_device=True``. The loader
reports to the gradient state of the most recently created ``Accelerator`` (so its
``gather_for_metrics`` sees the last batch), or to a fresh one when there is none.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel_convert.runtime.data import PreparedDataLoader, skip_first_batches
from accel_convert.runtime.data import prepare_data_loader as _prepare_sharded
from accel_convert.runtime.gradient_state import GradientState
from accel_convert.runtime.sharding import (
    IterableShard,
    SeedableRandomSampler,
    ShardedBatchSampler,
    SkipBatchSampler,
)

_latest_gradient_state: weakref.ReferenceType[GradientState] | None = None


def adopt_gradient_state(state: GradientState) -> None:
    """Loaders prepared with the functional API from now on report to ``state`` (each new
    ``Accelerator`` calls this with its own)."""
    global _latest_gradient_state
    _latest_gradient_state = weakref.ref(state)


def current_gradient_state() -> GradientState:
    """The latest ``Accelerator``'s gradient state, or a fresh one."""
    state = _latest_gradient_state() if _latest_gradient_state is not None else None
    return state if state is not None else GradientState()


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Any = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> PreparedDataLoader:
    """The loader rank ``process_index`` of ``num_processes`` iterates instead of ``dataloader``.

    Same arguments as Accelerate's; ``dispatch_batches=True``, ``use_stateful_dataloader=True``
    and a device mesh raise (every rank reads its own shard, as with ``Accelerator.prepare``).
    """
    if dispatch_batches:
        raise ValueError(
            "prepare_data_loader(dispatch_batches=True) is not supported by runtime: every rank "
            "reads its own shard; drop the argument"
        )
    if use_stateful_dataloader:
        raise ValueError(
            "prepare_data_loader(use_stateful_dataloader=True) is not supported by runtime; "
            "resume mid-epoch with skip_first_batches(...)"
        )
    if torch_device_mesh is not None:
        raise ValueError("prepare_data_loader(torch_device_mesh=...) is not supported by runtime (DDP only)")
    if num_processes is None or process_index is None or (put_on_device and device is None):
        from accel_convert.runtime.state_objects import PartialState

        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
        device = state.device if device is None else device
    return _prepare_sharded(
        dataloader,
        device=torch.device(device) if put_on_device and device is not None else None,
        num_processes=num_processes,
        process_index=process_index,
        split_batches=split_batches,
        even_batches=even_batches,
        gradient_state=current_gradient_state(),
        rng_types=rng_types,
        non_blocking=non_blocking,
        use_seedable_sampler=use_seedable_sampler,
        data_seed=data_seed,
    )


__all__ = [
    "IterableShard",
    "PreparedDataLoader",
    "SeedableRandomSampler",
    "ShardedBatchSampler",
    "SkipBatchSampler",
    "adopt_gradient_state",
    "current_gradient_state",
    "prepare_data_loader",
    "skip_first_batches",
]
