"""The collectives scripts import (``runtime.utils.gather`` ..., Accelerate's ``accelerate.utils.operations``),
with debug mode's shape checks in front of :mod:`runtime.collectives`.

A collective whose ranks pass tensors of different shapes hangs, crashes one rank, or returns
garbage, far from the line that caused it. In debug mode (``ACCELERATE_DEBUG_MODE=1`` or
``PartialState().debug = True``) each call first exchanges the shapes of its tensors and raises
:class:`DistributedOperationException` on every rank, naming each rank's shapes, when they
disagree. The check costs one small collective per call, so it is off by default.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from accel_convert.runtime import collectives


class DistributedOperationException(Exception):
    """A collective was called with tensors the ranks cannot exchange (debug mode's shape check)."""


def debug_mode() -> bool:
    """Whether the shape checks are on (the shared ``PartialState().debug`` flag)."""
    from accel_convert.runtime.state_objects import PartialState

    return bool(PartialState._shared_state.get("debug", False))


def _shapes(data: Any, operation: str) -> list[tuple[int, ...]]:
    found: list[tuple[int, ...]] = []
    collectives.apply_to_tensors(lambda tensor: found.append(tuple(tensor.shape)), data, operation)
    return found


def verify_shapes(data: Any, operation: str, *, only_ndim: bool = False) -> None:
    """Raise :class:`DistributedOperationException` on every rank if the ranks' tensors differ in
    shape (``only_ndim``: in number of dimensions, for padding, which evens out the sizes)."""
    if not collectives.is_distributed():
        return
    mine: list[Any] = _shapes(data, operation)
    if only_ndim:
        mine = [len(shape) for shape in mine]
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, mine)
    if all(entry == per_rank[0] for entry in per_rank):
        return
    listing = "\n  - ".join(f"Process {rank}: {entry}" for rank, entry in enumerate(per_rank))
    what = "numbers of dimensions" if only_ndim else "shapes"
    raise DistributedOperationException(
        f"Cannot apply `{operation}`: the tensors' {what} differ across processes.\n"
        f"Operation: `{operation}`\nInput {what}:\n  - {listing}"
    )


def gather(tensor: Any) -> Any:
    """Every rank's tensors concatenated along dim 0, in rank order (see :func:`runtime.collectives.gather`)."""
    if debug_mode():
        verify_shapes(tensor, "gather")
    return collectives.gather(tensor)


def gather_object(obj: Any) -> Any:
    """Every rank's picklable object in one list (list contributions flattened one level)."""
    return collectives.gather_object(obj)


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """All-reduced copies: ``"mean"`` (Accelerate's default here), ``"sum"`` or ``"max"``."""
    if debug_mode():
        verify_shapes(tensor, "reduce")
    return collectives.reduce(tensor, reduction, scale)


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Every rank gets ``from_process``'s tensors (in place)."""
    if debug_mode():
        verify_shapes(tensor, "broadcast")
    return collectives.broadcast(tensor, from_process)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Every rank's list items replaced by ``from_process``'s (in place). Like Accelerate's, it
    joins the process group first where nothing has yet (a run folder named on import)."""
    from accel_convert.runtime.state_objects import PartialState

    PartialState()
    return collectives.broadcast_object_list(object_list, from_process)


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
    """Pad along ``dim`` to the largest size on any rank (the ranks' tensors must have as many dims)."""
    if debug_mode():
        verify_shapes(tensor, "pad_across_processes", only_ndim=True)
    return collectives.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """The main process's ``tensor`` on every rank (the others pass None): shape and dtype travel
    first, then the values."""
    from accel_convert.runtime.state_objects import PartialState

    state = PartialState()
    if not collectives.is_distributed():
        if tensor is None:
            raise ValueError("copy_tensor_to_devices: the main process must pass a tensor")
        return tensor.to(state.device)
    layout = [(tuple(tensor.shape), tensor.dtype) if tensor is not None else None]
    dist.broadcast_object_list(layout, src=0)
    if layout[0] is None:
        raise ValueError("copy_tensor_to_devices: the main process must pass a tensor")
    shape, dtype = layout[0]
    if state.is_main_process and tensor is not None:
        on_device = tensor.to(state.device)
    else:
        on_device = torch.empty(shape, dtype=dtype, device=state.device)
    return collectives.broadcast(on_device, 0)


__all__ = [
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "copy_tensor_to_devices",
    "debug_mode",
    "gather",
    "gather_object",
    "pad_across_processes",
    "reduce",
    "verify_shapes",
]
