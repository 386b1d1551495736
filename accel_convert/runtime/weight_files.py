"""Model weight files as Accelerate and the Hugging Face libraries write them, with torch and the
standard library: the safetensors format, ``torch.save`` files, and a big state dict split into
numbered shard files named by an index.

Every writer of weights asks this module: ``Accelerator.save(..., safe_serialization=True)``,
``Accelerator.save_model``, ``merge_fsdp_weights`` and ``save_state``; ``load_state`` reads a
checkpoint's ``model.safetensors`` with :func:`read_safetensors`.

- ``model.safetensors``: an 8-byte little-endian header length, a JSON header naming each
  tensor's dtype, shape and byte range (and ``{"format": "pt"}`` as metadata), then the tensors'
  bytes back to back. ``safetensors.torch.load_file`` reads what :func:`write_safetensors` writes;
  it refuses what the safetensors package refuses, with the same exception types (a non-dict, a
  value that is no tensor, a sparse or non-contiguous tensor, two tensors overlapping in memory).
  :func:`read_safetensors` reads such a file back (ours, or one the safetensors package wrote).
- ``pytorch_model.bin``: ``torch.save`` of the state dict, loadable with ``weights_only=True``.
- Sharding (:func:`plan_shards`): tensors in state-dict order fill a file until the next one would
  take it past ``max_shard_size`` (a tensor larger than that gets a file of its own); tensors
  sharing storage stay in one file. Several files are named ``model-00001-of-00003.safetensors``
  (``pytorch_model-00001-of-00003.bin``) and listed by ``model.safetensors.index.json``
  (``{"metadata": {"total_size": ...}, "weight_map": {name: file}}``), as
  ``huggingface_hub.split_torch_state_dict_into_shards`` plans them.

Examples::

    write_safetensors({"weight": torch.ones(2, 3)}, "model.safetensors")
    read_safetensors("model.safetensors")  # {"weight": tensor([[1., 1., 1.], [1., 1., 1.]])}
    plan_shards(state, "5GB", safe_serialization=True).files  # {"model.safetensors": [names...]}
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "SAFE_WEIGHTS_INDEX_NAME",
    "SAFE_WEIGHTS_NAME",
    "WEIGHTS_INDEX_NAME",
    "WEIGHTS_NAME",
    "ShardPlan",
    "check_safetensors_input",
    "parse_shard_size",
    "plan_shards",
    "read_safetensors",
    "safetensors_path",
    "shared_tensor_names",
    "without_shared_tensors",
    "write_safetensors",
    "write_weights",
]

SAFE_WEIGHTS_NAME = "model.safetensors"
WEIGHTS_NAME = "pytorch_model.bin"
SAFE_WEIGHTS_INDEX_NAME = f"{SAFE_WEIGHTS_NAME}.index.json"
WEIGHTS_INDEX_NAME = f"{WEIGHTS_NAME}.index.json"

#: The file name pattern of each format's shards (``{suffix}`` is ``-00001-of-00003``, or empty).
_SHARD_PATTERNS = {True: "model{suffix}.safetensors", False: "pytorch_model{suffix}.bin"}
#: A shard file of either format, as ``_SHARD_PATTERNS`` names them.
_SHARD_FILE = re.compile(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)")

#: Units of ``max_shard_size`` strings ("5GB", "500MB"): decimal, as huggingface_hub reads them.
_SIZE_UNITS = {"TB": 10**12, "GB": 10**9, "MB": 10**6, "KB": 10**3}


def _safetensors_dtypes() -> dict[torch.dtype, str]:
    """torch dtype -> the safetensors format's name for it (the newer dtypes where torch has them)."""
    names = {
        "float64": "F64",
        "float32": "F32",
        "float16": "F16",
        "bfloat16": "BF16",
        "int64": "I64",
        "int32": "I32",
        "int16": "I16",
        "int8": "I8",
        "uint64": "U64",
        "uint32": "U32",
        "uint16": "U16",
        "uint8": "U8",
        "bool": "BOOL",
        "complex64": "C64",
        "float8_e4m3fn": "F8_E4M3",
        "float8_e5m2": "F8_E5M2",
        "float8_e4m3fnuz": "F8_E4M3FNUZ",
        "float8_e5m2fnuz": "F8_E5M2FNUZ",
        "float8_e8m0fnu": "F8_E8M0",
    }
    return {getattr(torch, name): code for name, code in names.items() if hasattr(torch, name)}


#: torch dtype -> the safetensors format's name for it.
SAFETENSORS_DTYPES = _safetensors_dtypes()


# ------------------------------------------------------------------ the safetensors format
def check_safetensors_input(tensors: Any) -> None:
    """Raise what ``safetensors.torch.save_file`` raises for ``tensors``, before anything is written:
    ValueError for a non-dict, a value that is no tensor, a sparse, meta or non-contiguous tensor;
    TypeError for a key that is no string or a dtype the format has no name for; RuntimeError
    for tensors that overlap in memory (a tied weight under two names: keep one) and for shards
    of a sharded model (DTensors, whose bytes are only this rank's part)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"safetensors stores a dict of str -> torch.Tensor, not {type(tensors).__name__}")
    for name, tensor in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"safetensors names tensors with strings, not {type(name).__name__} ({name!r})")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name!r} is a {type(tensor).__name__}; safetensors stores only tensors")
    sharded = [name for name, tensor in tensors.items() if _is_shard(tensor)]
    if sharded:  # safetensors fails on them too, reading their storage: say what to do instead
        raise RuntimeError(
            f"{sharded} are shards of a sharded (FSDP) model; save accelerator.get_state_dict(model), which "
            "gathers the full tensors onto the main process (every rank must call it)"
        )
    sparse = [name for name, tensor in tensors.items() if tensor.layout != torch.strided]
    if sparse:
        raise ValueError(f"safetensors stores dense tensors only; {sparse} are sparse (.to_dense() them first)")
    overlapping = _overlapping_names(tensors)
    if overlapping:
        raise RuntimeError(
            f"these tensors share memory, which safetensors cannot store twice: {overlapping}; keep one name "
            "of each (Accelerator.save does that for an OrderedDict, as model.state_dict() returns)"
        )
    for name, tensor in tensors.items():
        if tensor.device.type == "meta":
            raise ValueError(f"{name!r} is on the meta device: it has no values to write")
        if not tensor.is_contiguous():
            raise ValueError(f"{name!r} is not contiguous; safetensors stores packed tensors (.contiguous() it)")
        if tensor.dtype not in SAFETENSORS_DTYPES:
            raise TypeError(f"{name!r} has dtype {tensor.dtype}, which the safetensors format cannot store")


def _is_shard(tensor: torch.Tensor) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def write_safetensors(tensors: dict[str, torch.Tensor], path: str | bytes | os.PathLike) -> None:
    """``tensors`` as a safetensors file at ``path`` (checked first: :func:`check_safetensors_input`).

    Written beside the target, then renamed over it: never a half-written file. Tensors on a
    device are copied to host memory one at a time. ``path`` must be a path: the format is
    written by name, as ``safetensors.torch.save_file`` writes it (a file object is a TypeError).
    """
    check_safetensors_input(tensors)
    target = safetensors_path(path)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the tensors' bytes start 8-byte aligned

    def write(out: IO[bytes]) -> None:
        out.write(len(encoded).to_bytes(8, "little"))
        out.write(encoded)
        for tensor in tensors.values():
            out.write(_tensor_bytes(tensor.detach().to("cpu")))

    _replace_atomically(target, write)


def safetensors_path(path: Any) -> Path:
    """``path`` as a ``Path``; a TypeError for anything else (a file object: safetensors writes by name)."""
    if isinstance(path, bytes):
        return Path(os.fsdecode(path))
    if isinstance(path, (str, os.PathLike)):
        return Path(path)
    raise TypeError(f"a safetensors file is written to a path (str, bytes or os.PathLike), not {type(path).__name__}")


def read_safetensors(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file at ``path``, in the file's order, on ``device``.

    A file that does not follow the format (a header that is no JSON object or runs past the end,
    an unknown dtype, a byte range that does not match its tensor's shape or lies outside the
    data) is a ValueError naming what is wrong; nothing is unpickled, so nothing in it can run.
    """
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: too short for a safetensors header")
    header_size = int.from_bytes(data[:8], "little")
    if 8 + header_size > len(data):
        raise ValueError(f"the header claims {header_size} bytes, the file has {len(data) - 8} after its length")
    try:
        header = json.loads(data[8 : 8 + header_size])
    except ValueError as error:
        raise ValueError(f"the header is no JSON ({error})") from None
    if not isinstance(header, dict):
        raise ValueError("the header is no JSON object")
    body = memoryview(data)[8 + header_size :]
    return {
        name: _read_tensor(name, entry, body).to(device) for name, entry in header.items() if name != "__metadata__"
    }


#: The safetensors format's dtype names -> torch dtype (the inverse of ``SAFETENSORS_DTYPES``).
_DTYPES_BY_NAME = {code: dtype for dtype, code in SAFETENSORS_DTYPES.items()}


def _read_tensor(name: str, entry: Any, body: memoryview) -> torch.Tensor:
    """One header entry's tensor, copied out of the file's data section."""
    try:
        dtype = _DTYPES_BY_NAME[entry["dtype"]]
        shape = [int(size) for size in entry["shape"]]
        start, stop = (int(offset) for offset in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{name!r}: the header entry {entry!r} is no dtype, shape and data_offsets") from None
    expected = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if not 0 <= start <= stop <= len(body) or stop - start != expected:
        raise ValueError(
            f"{name!r}: bytes {start}..{stop} of a {len(body)}-byte data section, its {entry['dtype']} "
            f"shape {shape} takes {expected}"
        )
    if expected == 0:
        return torch.empty(shape, dtype=dtype)
    # A fresh buffer per tensor: its own allocation is aligned for any dtype, the file's offsets need not be.
    return torch.frombuffer(bytearray(body[start:stop]), dtype=torch.uint8).view(dtype).reshape(shape)


def _overlapping_names(tensors: Mapping[str, torch.Tensor]) -> list[set[str]]:
    """Groups of names whose tensors overlap in memory (views of one storage that share bytes)."""
    by_storage: dict[tuple[Any, ...], list[str]] = {}
    for name, tensor in tensors.items():
        key = _storage_key(tensor)
        if key is not None and key[1] != 0 and key[2] != 0:
            by_storage.setdefault(key, []).append(name)
    groups: list[set[str]] = []
    for names in by_storage.values():
        spans = sorted((_byte_span(tensors[name]), name) for name in names)
        group: set[str] = set()
        reach = -1
        for (start, stop), name in spans:
            if group and start >= reach:  # starts after everything so far: a new group
                groups.append(group)
                group = set()
            group.add(name)
            reach = max(reach, stop)
        groups.append(group)
    return [group for group in groups if len(group) > 1]


def _byte_span(tensor: torch.Tensor) -> tuple[int, int]:
    """Where the tensor's elements lie in memory: from its first byte to past its last element."""
    start = tensor.data_ptr()
    if tensor.numel() == 0:
        return start, start
    last = (
        start + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride())) * tensor.element_size()
    )
    return start, last + tensor.element_size()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The bytes of a contiguous host tensor, in the machine's (little-endian) order."""
    if tensor.numel() == 0:
        return b""
    return ctypes.string_at(tensor.data_ptr(), tensor.numel() * tensor.element_size())


def _replace_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write a temporary file beside ``path``, flush it to disk, then rename it over ``path``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


# ------------------------------------------------------------------ shared (tied) tensors
def _storage_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    """What tells storages apart: (device, address, bytes); None for a meta tensor (no storage)."""
    if tensor.device.type == "meta":
        return None
    storage = tensor.untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def shared_tensor_names(state: Mapping[str, Any]) -> set[str]:
    """The names whose tensor shares its storage with a tensor named before it in ``state``: what
    :func:`without_shared_tensors` leaves out, and so what a model's safetensors file lacks (a
    tied weight under its second name). Empty tensors (no storage: address 0) share nothing."""
    shared: set[str] = set()
    seen: set[tuple[Any, ...]] = set()
    for name, value in state.items():
        key = _storage_key(value) if isinstance(value, torch.Tensor) else None
        if key is None or key[1] == 0:
            continue
        if key in seen:
            shared.add(name)
        seen.add(key)
    return shared


def without_shared_tensors(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with one name per storage (the first in order: a tied weight keeps the name it
    has first in ``model.state_dict()``) and every tensor contiguous; a warning on the main process
    names the ones left out. As Accelerate cleans a state dict for safetensors: names whose tensors
    are different views of one storage are left out too (:func:`shared_tensor_names`). ``state``
    itself is not changed."""
    shared = shared_tensor_names(state)
    left_out = [name for name in state if name in shared]
    kept = {
        name: value.contiguous() if isinstance(value, torch.Tensor) else value
        for name, value in state.items()
        if name not in shared
    }
    if left_out:
        from accel_convert.runtime.logging import get_logger

        get_logger(__name__).warning(
            f"not saved under their own names: {left_out} (they share memory with a tensor saved under "
            "another name, tied weights; safetensors stores each tensor once, and a model that ties "
            "them ties them again when it loads)"
        )
    return kept


# ------------------------------------------------------------------ shards
def parse_shard_size(max_shard_size: int | str) -> int:
    """Bytes from an int or a string of digits and a unit: ``"10GB"``, ``"1.5MB"`` (decimal units)."""
    if isinstance(max_shard_size, int):
        return max_shard_size
    text = str(max_shard_size).strip()
    multiplier = _SIZE_UNITS.get(text[-2:].upper())
    if multiplier is None:
        raise ValueError(f"max_shard_size {max_shard_size!r}: the unit must be one of TB, GB, MB, KB")
    try:
        return int(float(text[:-2].strip()) * multiplier)
    except ValueError:
        raise ValueError(f"max_shard_size {max_shard_size!r}: no number before the unit") from None


@dataclass
class ShardPlan:
    """Which tensors go to which file; ``total_size`` counts each storage once, in bytes."""

    files: dict[str, list[str]]
    total_size: int

    @property
    def sharded(self) -> bool:
        return len(self.files) > 1

    def index(self) -> dict[str, Any]:
        """The index file's content: ``{"metadata": {"total_size": ...}, "weight_map": {...}}``."""
        weight_map = {name: file for file, names in self.files.items() for name in names}
        return {"metadata": {"total_size": self.total_size}, "weight_map": weight_map}


def plan_shards(state: Mapping[str, Any], max_shard_size: int | str, safe_serialization: bool) -> ShardPlan:
    """The files ``state`` is written to (see the module docstring). String values (bitsandbytes
    serialisation) are left out; an empty state gets no file at all."""
    limit = parse_shard_size(max_shard_size)
    shards: list[list[str]] = []
    current: list[str] = []
    current_size = total_size = 0
    sharing: dict[tuple[Any, ...], list[str]] = {}  # storage -> every name on it, the first placed
    for name, tensor in state.items():
        if isinstance(tensor, str):
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"save_model: {name!r} in the state dict is a {type(tensor).__name__}, not a tensor")
        key = _storage_key(tensor)
        if key is not None and key in sharing:
            sharing[key].append(name)  # goes with the first name on this storage, below
            continue
        if key is not None:
            sharing[key] = [name]
        size = tensor.untyped_storage().nbytes() if key is not None else tensor.numel() * tensor.element_size()
        total_size += size
        if size > limit:
            shards.append([name])
            continue
        if current and current_size + size > limit:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    for names in sharing.values():
        shard = next(shard for shard in shards if names[0] in shard)
        shard.extend(names[1:])
    return ShardPlan(_shard_file_names(shards, _SHARD_PATTERNS[safe_serialization]), total_size)


def _shard_file_names(shards: list[list[str]], pattern: str) -> dict[str, list[str]]:
    if len(shards) == 1:
        return {pattern.format(suffix=""): shards[0]}
    count = len(shards)
    return {pattern.format(suffix=f"-{number:05d}-of-{count:05d}"): names for number, names in enumerate(shards, 1)}


def write_weights(
    state: Mapping[str, Any], directory: Path, max_shard_size: int | str, safe_serialization: bool
) -> ShardPlan:
    """Write ``state`` into ``directory`` as :func:`plan_shards` splits it, each file atomically,
    with the index when there are several files; returns the plan. Then the shard files and the
    index of an earlier save in this format that the new one did not replace are removed: the
    folder holds one consistent set of weights, and until the new files are in place the earlier
    set stays whole (a refused state writes and removes nothing). ``state`` must already be free
    of shared tensors for safetensors (:func:`without_shared_tensors`). Call it on one process."""
    from accel_convert.runtime.utils import atomic_torch_save

    plan = plan_shards(state, max_shard_size, safe_serialization)
    if safe_serialization:
        check_safetensors_input({name: state[name] for names in plan.files.values() for name in names})
    for file, names in plan.files.items():
        shard = {name: state[name] for name in names}
        if safe_serialization:
            write_safetensors(shard, directory / file)
        else:
            atomic_torch_save(shard, directory / file)
    index_name = SAFE_WEIGHTS_INDEX_NAME if safe_serialization else WEIGHTS_INDEX_NAME
    if plan.sharded:
        content = (json.dumps(plan.index(), indent=2, sort_keys=True) + "\n").encode()
        _replace_atomically(directory / index_name, lambda out: out.write(content))
    _remove_stale_files(directory, plan, safe_serialization, index_name)
    return plan


def _remove_stale_files(directory: Path, plan: ShardPlan, safe_serialization: bool, index_name: str) -> None:
    extension = ".safetensors" if safe_serialization else ".bin"
    for path in directory.iterdir():
        stale_shard = (
            _SHARD_FILE.fullmatch(path.name) is not None
            and path.name.endswith(extension)
            and path.name not in plan.files
        )
        stale_index = path.name == index_name and not plan.sharded
        if (stale_shard or stale_index) and path.is_file():
            path.unlink(missing_ok=True)  # another node's writer may share the folder and be first
