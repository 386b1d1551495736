"""``merge_fsdp_weights``: one ordinary weights file from a sharded FSDP checkpoint (Accelerate's
``accelerate.utils.merge_fsdp_weights``; ``accel-launch merge-weights`` on the command line).

``save_state`` under ``SHARDED_STATE_DICT`` writes each model as a ``torch.distributed.checkpoint``
(DCP) folder: one ``__<rank>_0.distcp`` file per rank holding that rank's slices, and a
``.metadata`` file listing every tensor's full shape and dtype and where each slice lies. Merging
needs no process group: one process allocates every tensor whole from the metadata and asks DCP
to fill it from the shard files (``dcp.load(..., no_dist=True)``), then writes the dict as
``model.safetensors`` (the safetensors format, written with torch and the standard library by
:mod:`runtime.weight_files`) or ``pytorch_model.bin`` (``torch.save``).
The whole model must fit in this machine's memory once.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from accel_convert.runtime.weight_files import SAFE_WEIGHTS_NAME, WEIGHTS_NAME, write_safetensors

__all__ = ["merge_fsdp_weights", "read_sharded_weights"]


def merge_fsdp_weights(
    checkpoint_dir: str | os.PathLike,
    output_path: str | os.PathLike,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> Path:
    """Merge a sharded model checkpoint into ``output_path/model.safetensors`` (or
    ``output_path/pytorch_model.bin`` with ``safe_serialization=False``); returns the file's path.

    ``checkpoint_dir`` is the model's DCP folder (``<save_state folder>/pytorch_model_fsdp_0``) or
    a ``save_state`` folder holding one sharded model. The shard files are checked against the
    checkpoint's manifest (sizes and SHA-256) when there is one. Under a process group only the
    main process merges and every rank waits for it, as in Accelerate. ``remove_checkpoint_dir``
    deletes ``checkpoint_dir`` once the file is written.
    """
    import torch.distributed as dist

    folder = sharded_model_folder(Path(checkpoint_dir))
    write = _writer(safe_serialization)
    target = Path(output_path) / (SAFE_WEIGHTS_NAME if safe_serialization else WEIGHTS_NAME)
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        _verify_against_manifest(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        write(read_sharded_weights(folder), target)
        if remove_checkpoint_dir:
            shutil.rmtree(checkpoint_dir)
    if distributed:
        dist.barrier()
    return target


def sharded_model_folder(path: Path) -> Path:
    """The DCP folder to merge: ``path`` itself, or the one model folder of a save_state folder."""
    if (path / ".metadata").is_file():
        return path
    if not path.is_dir():
        raise ValueError(f"merge_fsdp_weights: {path}: no such folder")
    models = sorted(child for child in path.glob("pytorch_model_fsdp_*") if (child / ".metadata").is_file())
    if len(models) == 1:
        return models[0]
    if models:
        names = ", ".join(str(model) for model in models)
        raise ValueError(f"merge_fsdp_weights: {path} holds several sharded models; pass one of {names}")
    if (path / "optimizer_0" / ".metadata").is_file():
        raise ValueError(f"merge_fsdp_weights: {path} holds a sharded optimizer but no sharded model")
    raise ValueError(
        f"merge_fsdp_weights: {path} is not a sharded checkpoint (no .metadata): save_state writes one "
        "with FullyShardedDataParallelPlugin(state_dict_type='SHARDED_STATE_DICT')"
    )


def _verify_against_manifest(folder: Path) -> None:
    # A save_state folder lists every shard file with its size and digest (runtime.checkpoint).
    from accel_convert.runtime.checkpoint import MANIFEST, _VerifiedLoader

    manifest_path = folder.parent / MANIFEST
    if not manifest_path.is_file():
        return  # a DCP folder written by something else: DCP's own reads are all there is
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    names = [name for name in manifest.get("files", {}) if name.startswith(f"{folder.name}/")]
    _VerifiedLoader(folder.parent, manifest, "cpu").verify(names)


def read_sharded_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP model folder, whole, in this process's memory (no process group)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = dcp.FileSystemReader(str(folder)).read_metadata()
    # Where each flattened key sat in the saved dict: (key,) for runtime's flat state dicts,
    # ("model", name) for Accelerate's {"model": state_dict}.
    paths = metadata.planner_data or {}
    state: dict[str, torch.Tensor] = {}
    names: dict[str, str] = {}
    for key, entry in metadata.state_dict_metadata.items():
        path = tuple(paths.get(key, (key,)))
        if not isinstance(entry, TensorStorageMetadata) or not (
            path == (key,) or (len(path) == 2 and path[0] == "model")
        ):
            raise ValueError(f"merge_fsdp_weights: {folder} holds {key!r}, which is not a model weight")
        state[key] = torch.empty(entry.size, dtype=entry.properties.dtype)
        names[key] = str(path[-1])
    with warnings.catch_warnings():  # "...assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.load(state, checkpoint_id=str(folder), no_dist=True)
    return {names[key]: tensor for key, tensor in state.items()}


def _writer(safe_serialization: bool) -> Any:
    if not safe_serialization:
        from accel_convert.runtime.utils import atomic_torch_save

        return atomic_torch_save
    return write_safetensors
