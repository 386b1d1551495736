"""Small helpers converted scripts import from ``runtime.utils`` (mirroring ``accelerate.utils``).

``runtime.utils`` also re-exports the handler classes, ``find_executable_batch_size`` and
``release_memory``; the ones from modules that import this one are loaded lazily (module
``__getattr__``) so there is no import cycle.
"""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any

import torch

from accel_convert.runtime.handlers import (  # noqa: F401 (re-exported, as accelerate.utils does)
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProjectConfiguration,
)

#: name -> module, imported on first access.
_LAZY = {
    "find_executable_batch_size": ".memory",
    "release_memory": ".memory",
    "skip_first_batches": ".data",
    "send_to_device": ".data",
    # The collectives, with debug mode's shape checks (runtime.operations wraps runtime.collectives).
    "gather": ".operations",
    "gather_object": ".operations",
    "broadcast": ".operations",
    "broadcast_object_list": ".operations",
    "reduce": ".operations",
    "pad_across_processes": ".operations",
    "copy_tensor_to_devices": ".operations",
    "DistributedOperationException": ".operations",
    "DistributedType": ".state",
    "DDPCommunicationHookType": ".comm_hooks",
    "ProfileKwargs": ".profiling",
    "FullyShardedDataParallelPlugin": ".fsdp",
    "merge_fsdp_weights": ".merge",
    "get_logger": ".logging",
    "prepare_data_loader": ".data_loader",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def synchronize_rng_states(rng_types: list[str], generator: torch.Generator | None = None) -> None:
    """Make the listed RNGs (``"torch"``, ``"cuda"``, ``"generator"`` with ``generator``) equal to
    rank 0's on every rank; a no-op on one process."""
    from accel_convert.runtime.data import _checked_rng_types
    from accel_convert.runtime.data import synchronize_rng_states as synchronize

    synchronize(_checked_rng_types(rng_types), generator)


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's, NumPy's (if installed) and torch's RNGs (all devices) for reproducibility.

    ``device_specific=True`` adds the process index, so ranks draw different numbers (e.g. for
    augmentation). ``deterministic=True`` also asks torch for deterministic algorithms.
    """
    if device_specific:
        import torch.distributed as dist

        seed += dist.get_rank() if dist.is_initialized() else 0
    random.seed(seed)
    _seed_numpy_if_present(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _seed_numpy_if_present(seed: int) -> None:
    # NumPy is not a runtime dependency; a script that draws from it has imported it already.
    import sys

    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` into a temporary folder beside the target, then rename over the target.

    A crash mid-write leaves the previous file (or none), never a truncated one: ``os.replace``
    within one file system is atomic. The temporary file has the target's own name, because
    ``torch.save`` names the records inside the archive after the file: the bytes are exactly
    those ``torch.save(obj, path)`` writes.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    workdir = tempfile.mkdtemp(dir=folder, prefix=".tmp-")
    temporary = os.path.join(workdir, os.path.basename(path))
    try:
        torch.save(obj, temporary)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
        os.rmdir(workdir)


def _share_bounds(length: int, num_processes: int, process_index: int) -> tuple[int, int]:
    per_process, extra = divmod(length, num_processes)
    start = process_index * per_process + min(process_index, extra)
    return start, start + per_process + (1 if process_index < extra else 0)


def _pad_share(share: Any, full: Any, target: int) -> Any:
    # Padding repeats the input's last element so every rank gets the same count.
    missing = target - len(share)
    if missing <= 0:
        return share
    if isinstance(share, torch.Tensor):
        return torch.cat([share, full[-1:].expand(missing, *full.shape[1:])])
    return type(share)(list(share) + [full[-1]] * missing)


def split_for_process(inputs: Any, num_processes: int, process_index: int, apply_padding: bool = False) -> Any:
    """Rank ``process_index``'s contiguous share of ``inputs`` (list, tuple, tensor, or dict of them)."""
    if num_processes == 1:
        return inputs
    if isinstance(inputs, dict):
        lengths = {len(value) for value in inputs.values()}
        if len(lengths) > 1:
            raise ValueError("split_between_processes: all values of the dict must have the same length")
        return {
            key: split_for_process(value, num_processes, process_index, apply_padding) for key, value in inputs.items()
        }
    start, end = _share_bounds(len(inputs), num_processes, process_index)
    share = inputs[start:end]
    if apply_padding and len(inputs):
        share = _pad_share(share, inputs, -(-len(inputs) // num_processes))
    return share
