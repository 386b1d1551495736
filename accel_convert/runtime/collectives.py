"""Collectives on nested structures: gather, reduce, broadcast and pad every tensor in a batch.

Training code moves dicts, tuples and namedtuples of tensors around, so each operation walks the
structure and applies one ``torch.distributed`` call per tensor (all_gather, all_reduce,
broadcast, all_gather_object). ``gather`` is the one called in every evaluation step, so it
spends fewer: one small all_gather to check that the ranks' shapes agree, then one for a small
structure's tensors together (their bytes in one buffer) or one per tensor of a large one.
Nothing here talks to sockets itself, and nothing caches a process group: each call uses the
default group as it is now.

With a single process every function is the identity (``reduce`` returns a copy), so scripts run
unchanged under plain ``python``.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

#: The tensors of the last few collectives issued from here, still referenced (see below).
_RECENT_COLLECTIVE_TENSORS: deque[tuple[torch.Tensor, ...]] = deque(maxlen=8)


def keep_for_teardown(*tensors: torch.Tensor) -> None:
    """Keep a collective's Python tensors referenced after the call returns.

    A Gloo work item outlives the call that waited for it: its worker thread frees it a moment
    later, and a barrier issued meanwhile keeps it until the barrier itself is freed. If Python
    has let go of the tensors by then, freeing them takes the GIL, and a main thread that is
    destroying the group at that moment (holding the GIL, joining that worker) deadlocks the
    process at exit. Tensors still referenced here are freed without the GIL. Only the last few
    collectives' tensors are kept: small metric payloads as a rule, and the oldest go as new ones
    arrive.
    """
    _RECENT_COLLECTIVE_TENSORS.append(tensors)


def is_distributed() -> bool:
    """True when a default process group with more than one rank exists."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _is_namedtuple(data: Any) -> bool:
    return isinstance(data, tuple) and hasattr(data, "_fields")


def apply_to_tensors(func: Callable[[torch.Tensor], Any], data: Any, op_name: str = "this operation") -> Any:
    """Rebuild ``data`` (lists, tuples, namedtuples, mappings) with ``func`` applied to every tensor.

    Any other leaf is an error: a Python number cannot be all-gathered, and silently passing it
    through would give ranks different answers.
    """
    if isinstance(data, torch.Tensor):
        return func(data)
    if _is_namedtuple(data):
        return type(data)(*(apply_to_tensors(func, item, op_name) for item in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_tensors(func, item, op_name) for item in data)
    if isinstance(data, Mapping):
        return type(data)({key: apply_to_tensors(func, value, op_name) for key, value in data.items()})
    raise TypeError(
        f"Unsupported types ({type(data)}) passed to {op_name}: only nested list/tuple/dicts of "
        "tensors are supported (use gather_object for other Python objects)"
    )


def contains_only_tensors(data: Any) -> bool:
    """True if every leaf of the nested structure is a tensor."""
    try:
        apply_to_tensors(lambda tensor: tensor, data)
    except TypeError:
        return False
    return True


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    # all_gather needs a contiguous buffer with at least one dimension to concatenate along.
    tensor = tensor.reshape(1) if tensor.ndim == 0 else tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    keep_for_teardown(tensor, *parts)
    return torch.cat(parts, dim=0)


#: Up to this many bytes, the tensors of one structure travel in one all_gather: small payloads
#: (metrics: predictions and labels) cost a collective's latency each, large ones their bandwidth,
#: which packing only adds copies to.
PACKED_GATHER_BYTES = 1 << 24


def _packable(tensors: list[torch.Tensor]) -> bool:
    return (
        len(tensors) > 1
        and len({tensor.device for tensor in tensors}) == 1
        and all(tensor.layout == torch.strided and not tensor.is_quantized for tensor in tensors)
        and sum(tensor.numel() * tensor.element_size() for tensor in tensors) <= PACKED_GATHER_BYTES
    )


def _gather_packed(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """``_gather_one`` of each tensor, in one all_gather of all their bytes back to back."""
    rows = [tensor.detach().reshape(1) if tensor.ndim == 0 else tensor.detach().contiguous() for tensor in tensors]
    payload = torch.cat([row.reshape(-1).view(torch.uint8) for row in rows])
    parts = [torch.empty_like(payload) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, payload)
    keep_for_teardown(payload, *parts)
    gathered, offset = [], 0
    for row in rows:
        end = offset + row.numel() * row.element_size()
        # clone: a byte slice may start where the tensor's dtype could not be aligned.
        gathered.append(torch.cat([part[offset:end].clone().view(row.dtype).view(row.shape) for part in parts]))
        offset = end
    return gathered


def _leaf_layout(data: Any, op_name: str) -> list[tuple[tuple[int, ...], str]]:
    """Shape and dtype of every tensor in ``data``, in walking order."""
    layout: list[tuple[tuple[int, ...], str]] = []
    apply_to_tensors(lambda tensor: layout.append((tuple(tensor.shape), str(tensor.dtype))), data, op_name)
    return layout


def _collective_device() -> torch.device:
    # NCCL only moves GPU tensors; every other backend takes CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _layout_fingerprint(layout: list[tuple[tuple[int, ...], str]]) -> torch.Tensor:
    """Two int64s that differ, short of a 64-bit hash collision, when two layouts differ: the
    number of tensors and a digest of every shape and dtype."""
    digest = hashlib.blake2b(repr(layout).encode(), digest_size=8).digest()
    return torch.tensor([len(layout), int.from_bytes(digest, "little", signed=True)], dtype=torch.int64)


def check_same_shapes(data: Any, op_name: str = "gather") -> None:
    """Raise on every rank if the ranks' tensors differ in shape or dtype.

    Gloo's all_gather does not check: with a shorter tensor on one rank it returns garbage on the
    others and crashes that rank. The check costs one all_gather of two int64s per call, however
    many tensors ``data`` holds (a fingerprint of all their shapes and dtypes); only when the
    fingerprints differ are the full layouts exchanged, to name them in the error.
    """
    layout = _leaf_layout(data, op_name)
    mine = _layout_fingerprint(layout).to(_collective_device())
    fingerprints = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(fingerprints, mine)
    keep_for_teardown(mine, *fingerprints)
    if all(torch.equal(fingerprint, mine) for fingerprint in fingerprints):
        return
    # Every rank saw the same fingerprints, so every rank takes this branch and the collective below.
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, layout)
    shapes = [[shape for shape, _ in ranks_layout] for ranks_layout in per_rank]
    if all(rank_shapes == shapes[0] for rank_shapes in shapes):
        what, listing = "dtypes", [[dtype for _, dtype in ranks_layout] for ranks_layout in per_rank]
        remedy = "cast them to one dtype first"
    else:
        what, listing = "shapes", shapes
        remedy = "pad them first with accelerator.pad_across_processes(...)"
    ranks = "; ".join(f"rank {rank}: {entry}" for rank, entry in enumerate(listing))
    raise ValueError(f"{op_name}: tensor {what} differ across ranks ({ranks}); {remedy}, or use gather_object")


def gather(data: Any) -> Any:
    """Concatenate every rank's tensors along dim 0, in rank order (shapes and dtypes must match
    across ranks; a mismatch raises ``ValueError`` on every rank instead of returning garbage)."""
    if not is_distributed():
        return data
    check_same_shapes(data, "gather")
    tensors: list[torch.Tensor] = []
    apply_to_tensors(tensors.append, data, "gather")
    gathered = _gather_packed(tensors) if _packable(tensors) else [_gather_one(tensor) for tensor in tensors]
    # The same walk, in the same order, puts each gathered tensor where its input was.
    in_order = iter(gathered)
    return apply_to_tensors(lambda _tensor: next(in_order), data, "gather")


def gather_object(obj: Any) -> Any:
    """Every rank's picklable object, as one list: list/tuple contributions are flattened one level."""
    if not is_distributed():
        return obj  # as Accelerate: one process gets its own object back, not wrapped in a list
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, obj)
    flat: list[Any] = []
    for item in per_rank:
        flat.extend(item) if isinstance(item, (list, tuple)) else flat.append(item)
    return flat


def broadcast(data: Any, from_process: int = 0) -> Any:
    """Overwrite every rank's tensors with ``from_process``'s (in place; the structure is returned)."""
    if not is_distributed():
        return data

    def _broadcast_one(tensor: torch.Tensor) -> torch.Tensor:
        dist.broadcast(tensor, src=from_process)
        keep_for_teardown(tensor)
        return tensor

    return apply_to_tensors(_broadcast_one, data, "broadcast")


def broadcast_object_list(objects: list[Any], from_process: int = 0) -> list[Any]:
    """Replace the items of ``objects`` on every rank by ``from_process``'s (in place)."""
    if is_distributed():
        dist.broadcast_object_list(objects, src=from_process)
    return objects


def reduce(data: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """All-reduce copies of the tensors: ``"max"`` takes the maximum, ``"mean"`` averages, anything
    else (``"sum"``, and ``"none"`` as in Accelerate) sums. ``scale`` multiplies the result."""

    def _reduce_one(tensor: torch.Tensor) -> torch.Tensor:
        result = tensor.clone()
        if not is_distributed():
            return result
        op = dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM
        dist.all_reduce(result, op=op)
        keep_for_teardown(result)
        if reduction == "mean":
            result /= dist.get_world_size()
        if scale != 1.0:
            result *= scale
        return result

    return apply_to_tensors(_reduce_one, data, "reduce")


def _pad_one(tensor: torch.Tensor, dim: int, pad_index: Any, pad_first: bool) -> torch.Tensor:
    if dim >= tensor.ndim or dim < -tensor.ndim:
        return tensor
    dim = dim % tensor.ndim
    # Every rank must call the same collectives, so sizes are exchanged even when equal.
    size = torch.tensor([tensor.shape[dim]], device=tensor.device)
    largest = int(_gather_one(size).max())
    if largest == tensor.shape[dim]:
        return tensor
    new_shape = list(tensor.shape)
    new_shape[dim] = largest
    padded = tensor.new_full(new_shape, pad_index)
    start = largest - tensor.shape[dim] if pad_first else 0
    index = [slice(None)] * tensor.ndim
    index[dim] = slice(start, start + tensor.shape[dim])
    padded[tuple(index)] = tensor
    return padded


def pad_across_processes(data: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
    """Pad each tensor along ``dim`` to the largest size any rank has, so it can be gathered."""
    if not is_distributed():
        return data
    return apply_to_tensors(lambda t: _pad_one(t, dim, pad_index, pad_first), data, "pad_across_processes")


def leading_rows(data: Any) -> int | None:
    """The size of the first dimension of the first tensor in ``data`` (a batch's row count);
    None where ``data`` holds anything but tensors or no tensor with a dimension."""
    found: list[int] = []
    try:
        apply_to_tensors(lambda tensor: found.append(tensor.shape[0]) if tensor.ndim else None, data)
    except TypeError:
        return None
    return found[0] if found else None


def truncate_to(data: Any, num_samples: int, object_list: bool = False) -> Any:
    """Keep the first ``num_samples`` rows of every tensor, or items of a gathered object list."""
    if object_list:
        return data[:num_samples]
    return apply_to_tensors(lambda tensor: tensor[:num_samples], data, "gather_for_metrics")
