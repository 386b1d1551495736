"""Checkpoints: ``save_state`` writes everything training needs to continue exactly, ``load_state``
puts it back.

What "continue exactly" takes, beyond the weights: the optimizers' moments, the schedulers' step,
the gradient scaler, every rank's random generators (Python, NumPy when the script loaded it,
torch, CUDA; dropout draws from them), the generator each prepared loader shuffles with and its
epoch counter (Accelerate saves neither, so a resumed run sees other batches), objects registered
with ``register_for_checkpointing``, and the accumulation step. File names follow Accelerate's
(``model.safetensors``, ``optimizer.bin``, ``random_states_<rank>.pkl``, ...). As in Accelerate,
the models are safetensors files (:mod:`runtime.weight_files`; a tied weight is stored once, under
its first name) unless ``save_state(safe_serialization=False)`` asks for ``pytorch_model.bin``;
everything else is written with ``torch.save``. ``load_state`` reads a model's safetensors file
when the checkpoint has one, else its ``.bin``, whichever the checkpoint was saved with, and every
``torch.save`` file with ``weights_only=True``, which runs no pickled code.

Resuming mid-epoch: a loader's generator has already drawn the current epoch's order when a
mid-epoch checkpoint is taken, so the checkpoint holds the state the generator had when that epoch
began (``epoch_start_generator_state``), the global RNG state it began with (the loader's
iterator drew its base seed from it) and the epoch counter of that epoch. After ``load_state``,
``skip_first_batches(loader, k)`` then draws the same order and base seed again, leaves out the
``k`` batches already trained on, and every other draw continues from the checkpoint's states:
the rest of the epoch is exactly what an uninterrupted run would have seen. (On one process the
loader's own sampler shuffles from the global RNG, so this holds with several processes only.)
Between epochs the generator's current state is saved, so the next epoch gets its own order.

How a checkpoint is written so that a crash never leaves one that looks complete:

1. the main process makes an empty staging folder next to the target (``.<name>.incomplete``);
2. every rank writes its own files there (the main process also the shared ones), then all meet;
3. the main process writes ``checkpoint.json`` last: the world size and each file's size and
   SHA-256 digest; then it renames the staging folder to the target in one step.

A folder without ``checkpoint.json`` is not a checkpoint of ours. Loading checks the manifest
first and refuses, with the file's name, a checkpoint from another world size, a missing file or
one whose digest differs. The folders are assumed to be on a file system every rank sees, as in
Accelerate.

A checkpoint Hugging Face Accelerate's ``save_state`` wrote has no manifest: a folder without one
that holds Accelerate's ``random_states_0.pkl`` (which its save writes last) loads as one, with a
warning: its models, optimizers, schedulers, scaler and registered objects are restored, each file
read with ``weights_only=True`` but checked for presence only (there are no sizes or digests to
check it against, as under Accelerate); its random states are not (Accelerate pickles NumPy's
state as an array, which ``weights_only=True`` refuses), nor any loader's position (Accelerate
saves none). ``load_state()`` without a folder still picks only complete checkpoints of ours.

Saving over an existing folder takes two renames (the old one aside, the new one in place; see
:func:`_publish`). A process killed between them leaves no folder by the target's name, only the
two complete checkpoints beside it, hidden; so ``load_state`` of that name reads the new one if
its manifest vouches for every file, else the old one, and the next ``save_state`` into it first
puts that one back under its name (:func:`_recover`). At every instant, then, the name loads
either the previous checkpoint or the new complete one.

Sharded (FSDP) models and their optimizers are the exception to "the main process writes the
shared files": every rank takes part (:mod:`runtime.fsdp`). With ``SHARDED_STATE_DICT`` each
becomes a ``torch.distributed.checkpoint`` folder inside the staging folder (one shard file per
rank, listed in the manifest like any other file, so the same atomicity and digest checks hold);
with ``FULL_STATE_DICT`` they are gathered and rank 0 writes them as single files. Either form
keeps FSDP's own names (``pytorch_model_fsdp_<i>``, ``.bin`` when gathered) whatever
``safe_serialization`` says, as Accelerate does. Either form
loads onto another number of ranks: when every prepared model is sharded, a checkpoint from
another world size is accepted, and only the per-rank random states and loader positions (which
have no counterpart on another number of ranks) are left as they are, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from accel_convert.runtime import fsdp
from accel_convert.runtime.weight_files import (
    read_safetensors,
    shared_tensor_names,
    without_shared_tensors,
    write_safetensors,
)

__all__ = ["CheckpointError", "MANIFEST", "latest_checkpoint", "load_state", "save_state"]

MANIFEST = "checkpoint.json"
FORMAT_VERSION = 1
_AUTOMATIC_NAME = re.compile(r"^checkpoint_(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as it is; the message names the folder or file."""


class CheckpointRefusedByPeer(CheckpointError):
    """Another rank refused its part of the checkpoint; this rank refuses the whole with it.

    ``peer_rank`` tells the failure handling (:mod:`runtime.job_failure`) that this error only
    echoes the other rank's, whose own message says what is wrong.
    """

    def __init__(self, message: str, peer_rank: int) -> None:
        super().__init__(message)
        self.peer_rank = peer_rank


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------


def _indexed(stem: str, index: int, suffix: str) -> str:
    """Accelerate's naming: the first object has no index (``optimizer.bin``), then ``_1``, ..."""
    return f"{stem}{'' if index == 0 else f'_{index}'}{suffix}"


def _model_file(index: int, safe_serialization: bool) -> str:
    """Model ``index``'s file: ``model.safetensors`` (``model_1.safetensors``, ...), or
    ``pytorch_model.bin`` (``pytorch_model_1.bin``, ...) when not safe."""
    if safe_serialization:
        return _indexed("model", index, ".safetensors")
    return _indexed("pytorch_model", index, ".bin")


def _saved_model_file(files: dict[str, Any], index: int) -> str:
    """The file model ``index`` was saved to, among a checkpoint's ``files``: the safetensors one
    when there is one, else the ``.bin`` (as Accelerate's ``load_state`` chooses)."""
    safe = _model_file(index, True)
    return safe if safe in files else _model_file(index, False)


def _rng_file(rank: int) -> str:
    return f"random_states_{rank}.pkl"


def _shared_files(accelerator: Any, safe_serialization: bool) -> dict[str, Any]:
    """The files the main process writes, by name, with what goes in each."""
    files: dict[str, Any] = {}
    prepared = accelerator.prepared_objects()
    sharded_models, sharded_optimizers = _sharded_parts(accelerator)
    for index, model in enumerate(prepared.models):
        if index not in sharded_models:
            state = _unwrapped(accelerator, model).state_dict()
            if safe_serialization:
                state = without_shared_tensors(state)
            files[_model_file(index, safe_serialization)] = state
    for index, optimizer in enumerate(prepared.optimizers):
        if index not in sharded_optimizers:
            files[_indexed("optimizer", index, ".bin")] = _inner(optimizer, "optimizer").state_dict()
    for index, scheduler in enumerate(prepared.schedulers):
        files[_indexed("scheduler", index, ".bin")] = _inner(scheduler, "scheduler").state_dict()
    if accelerator.scaler is not None:
        files["scaler.pt"] = accelerator.scaler.state_dict()
    for index, obj in enumerate(prepared.custom_objects):
        files[f"custom_checkpoint_{index}.pkl"] = obj.state_dict()
    return files


def _sharded_parts(
    accelerator: Any,
) -> tuple[dict[int, torch.nn.Module], dict[int, tuple[torch.optim.Optimizer, torch.nn.Module]]]:
    """The prepared models FSDP shards, and the optimizers that update them (with their model),
    by preparation index."""
    prepared = accelerator.prepared_objects()
    models = {index: model for index, model in enumerate(prepared.models) if fsdp.is_sharded(model)}
    optimizers = {}
    for index, optimizer in enumerate(prepared.optimizers):
        owner = fsdp.owning_model(_inner(optimizer, "optimizer"), models.values())
        if owner is not None:
            optimizers[index] = (_inner(optimizer, "optimizer"), owner)
    return models, optimizers


def _full_state_dicts(accelerator: Any) -> bool:
    plugin = getattr(accelerator, "fsdp_plugin", None)
    return plugin is not None and plugin.state_dict_type == "FULL_STATE_DICT"


def _write_sharded_parts(accelerator: Any, staging: Path) -> dict[str, Any]:
    """Every rank: write the sharded models and optimizers (see the module doc); returns the
    gathered full state dicts rank 0 must write, if that is the configured form."""
    models, optimizers = _sharded_parts(accelerator)
    if not models:
        return {}
    return fsdp.write_model_and_optimizers(
        staging,
        list(models.items()),
        [(index, optimizer, model) for index, (optimizer, model) in optimizers.items()],
        full=_full_state_dicts(accelerator),
    )


def _unwrapped(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    # The registry holds unwrapped models already; unwrapping again costs nothing and keeps DDP's
    # "module." prefix out of the file whatever was registered.
    return accelerator.unwrap_model(model)


def _inner(wrapper: Any, attribute: str) -> Any:
    return getattr(wrapper, attribute, wrapper)


# --------------------------------------------------------------------------------------------
# Random states
# --------------------------------------------------------------------------------------------


def _rng_snapshot(accelerator: Any) -> dict[str, Any]:
    """This rank's generators, as plain data and tensors (loadable with ``weights_only=True``)."""
    loaders = list(accelerator.prepared_objects().dataloaders)
    snapshot: dict[str, Any] = {
        "step": accelerator.step,
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "loader_generators": [_generator_state(loader) for loader in loaders],
        "loader_iterations": [getattr(loader, "iteration", 0) for loader in loaders],
        # Set only for loaders caught mid-epoch (see "Resuming mid-epoch" above).
        "loader_epoch_start_rng": [getattr(loader, "epoch_start_rng_state", None) for loader in loaders],
    }
    numpy_state = _numpy_rng_state()
    if numpy_state is not None:
        snapshot["numpy"] = numpy_state
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        snapshot["cuda"] = torch.cuda.get_rng_state_all()
    return snapshot


def _generator_state(loader: Any) -> torch.Tensor | None:
    """The state to restore: the one the epoch in progress started from, else the current one."""
    generator = getattr(loader, "synchronized_generator", None)
    if generator is None:
        return None
    epoch_start = getattr(loader, "epoch_start_generator_state", None)
    return generator.get_state() if epoch_start is None else epoch_start


def _loaded_numpy() -> Any | None:
    """NumPy if the script has loaded it. The runtime never imports it: a process that has not
    loaded NumPy has not drawn from its generator, so there is nothing to save."""
    return sys.modules.get("numpy")


def _numpy_rng_state() -> list[Any] | None:
    numpy = _loaded_numpy()
    if numpy is None:
        return None
    kind, keys, position, has_gauss, cached_gaussian = numpy.random.get_state()
    # The key array becomes a list of ints: weights_only loading refuses NumPy arrays.
    return [kind, [int(key) for key in keys], int(position), int(has_gauss), float(cached_gaussian)]


def _restore_rng(snapshot: dict[str, Any], accelerator: Any, source: Path) -> None:
    loaders = list(accelerator.prepared_objects().dataloaders)
    saved_generators = snapshot["loader_generators"]
    if len(saved_generators) != len(loaders):
        raise CheckpointError(
            f"{source}: saved with {len(saved_generators)} prepared data loader(s), this run has {len(loaders)}"
        )
    random.setstate(_as_python_state(snapshot["python"]))
    torch.set_rng_state(snapshot["torch"])
    if "numpy" in snapshot:
        _restore_numpy(snapshot["numpy"])
    if "cuda" in snapshot and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(snapshot["cuda"])
    epoch_start_rng = snapshot.get("loader_epoch_start_rng", [None] * len(loaders))
    for loader, state, iteration, start_rng in zip(
        loaders, saved_generators, snapshot["loader_iterations"], epoch_start_rng
    ):
        loader.restore_progress(iteration, state, start_rng)
    accelerator.step = snapshot["step"]


def _as_python_state(state: Any) -> tuple[Any, ...]:
    version, internal, gauss = state  # random.setstate wants tuples, not lists
    return version, tuple(internal), gauss


def _restore_numpy(state: list[Any]) -> None:
    numpy = _loaded_numpy()
    if numpy is None:
        return
    kind, keys, position, has_gauss, cached_gaussian = state
    numpy.random.set_state((kind, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached_gaussian))


# --------------------------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------------------------


def save_state(
    accelerator: Any, output_dir: str | os.PathLike | None = None, safe_serialization: bool = True, **_ignored: Any
) -> str:
    """Write a complete checkpoint of the training state to ``output_dir`` and return its path.

    With ``ProjectConfiguration(automatic_checkpoint_naming=True)`` the folder is
    ``project_dir/checkpoints/checkpoint_<iteration>`` and only the newest ``total_limit`` are
    kept (older ones are deleted after the new one is complete, never before). Every rank must
    call it. ``safe_serialization`` (default True, as Accelerate) writes each model as
    ``model.safetensors`` (``model_1.safetensors``, ...), False as ``pytorch_model.bin``; the
    other files are ``torch.save`` files either way, and FSDP-sharded models keep their own names.
    """
    config = accelerator.project_configuration
    target = _save_target(accelerator, output_dir)
    staging = _staging_folder(target)
    # Every rank first: a rank may still be reading, in a load_state just before, the hidden
    # folder that the main process is about to rename or remove here.
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _recover(target)  # a save killed between its two renames left the target missing
        _remove(staging)  # what a crashed save left behind
        staging.mkdir(parents=True)
    accelerator.wait_for_everyone()
    gathered = _write_sharded_parts(accelerator, staging)
    if accelerator.is_main_process:
        for name, content in {**_shared_files(accelerator, safe_serialization), **gathered}.items():
            _write(staging / name, content)
    _write(staging / _rng_file(accelerator.process_index), _rng_snapshot(accelerator))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _write_manifest(staging, accelerator)
        _sync_folder(staging)  # the manifest's name is on disk before the renames rely on it
        _publish(staging, target)
        if config.automatic_checkpoint_naming and config.total_limit:
            _keep_newest(target.parent, config.total_limit)
    accelerator.wait_for_everyone()
    if config.automatic_checkpoint_naming:
        config.iteration += 1
    return str(target)


def _staging_folder(target: Path) -> Path:
    """Where the checkpoint for ``target`` is written before it is complete."""
    return target.parent / f".{target.name}.incomplete"


def _replaced_folder(target: Path) -> Path:
    """Where the previous checkpoint of ``target`` waits while the new one is moved in."""
    return target.parent / f".{target.name}.replaced"


def _save_target(accelerator: Any, output_dir: str | os.PathLike | None) -> Path:
    config = accelerator.project_configuration
    if config.automatic_checkpoint_naming:
        if config.project_dir is None:
            raise ValueError("automatic_checkpoint_naming needs ProjectConfiguration(project_dir=...)")
        target = Path(config.project_dir) / "checkpoints" / f"checkpoint_{config.iteration}"
        if target.exists():
            raise ValueError(
                f"checkpoint folder {target} already exists; set project_configuration.iteration "
                "to the number the next checkpoint should get"
            )
        return target
    if output_dir is None:
        raise ValueError("save_state needs output_dir (or ProjectConfiguration(automatic_checkpoint_naming=True))")
    return Path(output_dir)


def _write(path: Path, content: Any) -> None:
    """``torch.save`` (a safetensors file for that suffix) and make it durable: the manifest will
    vouch for these bytes."""
    if path.suffix == ".safetensors":
        write_safetensors(content, path)  # flushed to disk before it gets its name
        return
    with open(path, "wb") as file:
        torch.save(content, file)
        file.flush()
        os.fsync(file.fileno())


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _write_manifest(staging: Path, accelerator: Any) -> None:
    # Relative paths: sharded models are folders of shard files (see the module doc).
    files = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
    for rank in range(accelerator.num_processes):
        if _rng_file(rank) not in files:
            # Every rank wrote its file before the barrier; not seeing one means another disk.
            raise CheckpointError(
                f"{staging / _rng_file(rank)}: rank {rank} wrote it but the main process cannot "
                "see it; save_state needs a folder that every rank shares"
            )
    manifest = {
        "format": FORMAT_VERSION,
        "world_size": accelerator.num_processes,
        "counts": _counts(accelerator),
        "files": {
            name: {"bytes": (staging / name).stat().st_size, "sha256": _digest(staging / name)} for name in files
        },
    }
    _write_text_durably(staging / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def _counts(accelerator: Any) -> dict[str, int]:
    prepared = accelerator.prepared_objects()
    return {
        "models": len(prepared.models),
        "optimizers": len(prepared.optimizers),
        "schedulers": len(prepared.schedulers),
        "custom_objects": len(prepared.custom_objects),
        "scaler": int(accelerator.scaler is not None),
    }


def _write_text_durably(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


def _publish(staging: Path, target: Path) -> None:
    """Make the complete staging folder the checkpoint: one rename, two over an existing folder.

    A rename cannot replace a non-empty folder, so saving over one moves the old checkpoint aside
    first and deletes it only once the new one is in place. Between the two renames ``target`` is
    missing; :func:`_recoverable` covers that moment. Swapping the two folders in one step is not
    portable: ``renameat2(RENAME_EXCHANGE)`` is Linux's alone (and not every file system's), and
    making ``target`` a symbolic link that is replaced atomically would change what users see and
    copy (Accelerate's checkpoint is a plain folder; Windows needs a privilege for links).
    """
    replaced = _replaced_folder(target)
    if target.exists():
        _remove(replaced)
        _rename(target, replaced)
    _rename(staging, target)
    _sync_folder(target.parent)
    _remove(replaced)


def _rename(source: Path, destination: Path) -> None:
    """One atomic rename: every observer sees the folder under one name or the other."""
    os.rename(source, destination)


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _recoverable(target: Path) -> Path | None:
    """The complete checkpoint a save over ``target`` left hidden when it was killed between
    its two renames: the new one if its manifest vouches for every file, else the old one."""
    for candidate in (_staging_folder(target), _replaced_folder(target)):
        if _vouched_for(candidate):
            return candidate
    return None


def _vouched_for(folder: Path) -> bool:
    """Whether ``folder`` holds a readable manifest and every file it lists, with its size and digest.

    Presence of the manifest is not enough here: a checkpoint being deleted (the old one, once the
    new one is in place) may lose its other files first.
    """
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
        return all(
            (folder / name).is_file()
            and (folder / name).stat().st_size == entry["bytes"]
            and _digest(folder / name) == entry["sha256"]
            for name, entry in files.items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _recover(target: Path) -> None:
    """Main process, before a save: if ``target`` is missing but a save over it left a complete
    checkpoint hidden, put that one back under its name (one rename), so the save replaces it as
    usual and a crash during this save still leaves it loadable."""
    if target.exists():
        return
    found = _recoverable(target)
    if found is not None:
        _rename(found, target)
        _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    """Persist the rename itself (POSIX only: Windows cannot open folders)."""
    if os.name != "posix":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _keep_newest(folder: Path, total_limit: int) -> None:
    for old in _complete_checkpoints(folder)[:-total_limit]:
        shutil.rmtree(old)


def _complete_checkpoints(folder: Path) -> list[Path]:
    """``checkpoint_<n>`` folders that hold a manifest, oldest first."""
    if not folder.is_dir():
        return []
    numbered = [
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if (match := _AUTOMATIC_NAME.match(path.name)) and (path / MANIFEST).is_file()
    ]
    return [path for _, path in sorted(numbered)]


def latest_checkpoint(project_dir: str | os.PathLike) -> Path | None:
    """The newest complete automatically named checkpoint under ``project_dir``, if any."""
    found = _complete_checkpoints(Path(project_dir) / "checkpoints")
    return found[-1] if found else None


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_state(
    accelerator: Any,
    input_dir: str | os.PathLike | None = None,
    map_location: str | None = None,
    **load_model_kwargs: Any,
) -> None:
    """Restore everything ``save_state`` wrote; every rank must call it.

    ``input_dir=None`` with automatic checkpoint naming loads the newest complete checkpoint.
    ``map_location`` is Accelerate's: ``None``/``"cpu"`` or ``"on_device"``. Extra keyword
    arguments go to each model's ``load_state_dict`` (``strict=False``, say).

    Every rank reaches the same verdict before any rank changes anything: each one checks every
    file of the checkpoint against the manifest (every rank's random-state file too, not only its
    own), and the one file that differs per rank, this rank's random states, is unpickled first
    and the ranks agree that all of them loaded. A checkpoint refused on one rank is refused on
    all, with the file's name, instead of leaving the others waiting in their next collective.
    """
    source = _load_source(accelerator, input_dir)
    location = _map_location(accelerator, map_location)
    manifest = _read_manifest(source, accelerator)
    same_world = manifest["world_size"] == accelerator.num_processes and not manifest["unchecked"]
    loader = _VerifiedLoader(source, manifest, location)
    loader.verify(_files_to_load(accelerator, manifest, same_world))
    rng_file = _rng_file(accelerator.process_index)
    snapshot = _load_on_every_rank(loader, rng_file, accelerator) if same_world else None
    prepared = accelerator.prepared_objects()
    sharded_models, sharded_optimizers = _sharded_parts(accelerator)
    for index, model in enumerate(prepared.models):
        if index not in sharded_models:
            name = _saved_model_file(loader.files, index)
            _load_model(_unwrapped(accelerator, model), loader.load(name), name, load_model_kwargs)
    _load_sharded_parts(accelerator, loader, load_model_kwargs)
    for index, optimizer in enumerate(prepared.optimizers):
        if index not in sharded_optimizers:
            _inner(optimizer, "optimizer").load_state_dict(loader.load(_indexed("optimizer", index, ".bin")))
    for index, scheduler in enumerate(prepared.schedulers):
        _inner(scheduler, "scheduler").load_state_dict(loader.load(_indexed("scheduler", index, ".bin")))
    if accelerator.scaler is not None:
        accelerator.scaler.load_state_dict(loader.load("scaler.pt"))
    for index, obj in enumerate(prepared.custom_objects):
        obj.load_state_dict(loader.load(f"custom_checkpoint_{index}.pkl"))
    if snapshot is not None:
        _restore_rng(snapshot, accelerator, source / rng_file)
    elif accelerator.is_main_process and not manifest["unchecked"]:  # Accelerate's: said when found
        warnings.warn(
            f"{source}: saved by {manifest['world_size']} processes, loaded by {accelerator.num_processes}: "
            "models, optimizers and schedulers were restored, the per-rank random states and data "
            "loader positions were not",
            stacklevel=3,
        )
    if accelerator.project_configuration.automatic_checkpoint_naming:
        match = _AUTOMATIC_NAME.match(source.name)
        if match:  # the next save must not collide with what we resumed from
            accelerator.project_configuration.iteration = int(match.group(1)) + 1


def _load_model(model: torch.nn.Module, state: dict[str, Any], name: str, load_model_kwargs: dict[str, Any]) -> None:
    """``model.load_state_dict(state)``, where a safetensors file may lack the second name of a
    tied weight (it was stored once): those names are not missing, their storage was loaded under
    the first name. Every other missing or unexpected name is refused as ``strict`` says."""
    if not name.endswith(".safetensors"):
        model.load_state_dict(state, **load_model_kwargs)
        return
    kwargs = dict(load_model_kwargs)
    strict = kwargs.pop("strict", True)
    result = model.load_state_dict(state, strict=False, **kwargs)
    tied = shared_tensor_names(model.state_dict())
    missing = [key for key in result.missing_keys if key not in tied]
    if strict and (missing or result.unexpected_keys):
        raise RuntimeError(
            f"Error(s) in loading state_dict for {type(model).__name__} from {name}: "
            f"missing keys {missing}, unexpected keys {result.unexpected_keys}"
        )


def _files_to_load(accelerator: Any, manifest: dict[str, Any], same_world: bool) -> list[str]:
    """Every file any rank of this run reads: the shared ones, the sharded models' and each
    rank's random states (only read when the world size is the one that saved them)."""
    ranks = range(accelerator.num_processes) if same_world else range(0)
    return [
        *_shared_files_names(accelerator, manifest["files"]),
        *_sharded_files_names(accelerator, manifest),
        *(_rng_file(rank) for rank in ranks),
    ]


def _saved_full(manifest: dict[str, Any], index: int) -> bool:
    """Whether sharded model ``index`` was saved gathered (a file) or sharded (a DCP folder)."""
    return fsdp.model_entry(index, True) in manifest["files"]


def _sharded_files_names(accelerator: Any, manifest: dict[str, Any]) -> list[str]:
    """The full-state files, or each DCP folder's metadata and every shard file listed under it."""
    models, optimizers = _sharded_parts(accelerator)
    if not models:
        return []
    full = _saved_full(manifest, min(models))  # one form for all: the plugin's state_dict_type
    names = []
    for kind, indices in ((fsdp.model_entry, models), (fsdp.optimizer_entry, optimizers)):
        for index in indices:
            if full:
                names.append(kind(index, True))
            else:
                folder = kind(index, False) + "/"
                names.append(folder + ".metadata")
                names += [
                    name for name in manifest["files"] if name.startswith(folder) and name != folder + ".metadata"
                ]
    return names


def _load_sharded_parts(accelerator: Any, loader: _VerifiedLoader, load_model_kwargs: dict[str, Any]) -> None:
    models, optimizers = _sharded_parts(accelerator)
    if not models:
        return
    fsdp.load_model_and_optimizers(
        loader.source,
        list(models.items()),
        [(index, optimizer, model) for index, (optimizer, model) in optimizers.items()],
        full=_saved_full({"files": loader.files}, min(models)),
        read_file=loader.load,
        strict=load_model_kwargs.get("strict", True),
    )


def _shared_files_names(accelerator: Any, files: dict[str, Any]) -> list[str]:
    """The main process's files this run loads, among the checkpoint's ``files`` (whose model
    files are safetensors or ``.bin``, as they were saved)."""
    prepared = accelerator.prepared_objects()
    sharded_models, sharded_optimizers = _sharded_parts(accelerator)
    names = [_saved_model_file(files, i) for i in range(len(prepared.models)) if i not in sharded_models]
    names += [_indexed("optimizer", i, ".bin") for i in range(len(prepared.optimizers)) if i not in sharded_optimizers]
    names += [_indexed("scheduler", index, ".bin") for index in range(len(prepared.schedulers))]
    if accelerator.scaler is not None:
        names.append("scaler.pt")
    names += [f"custom_checkpoint_{index}.pkl" for index in range(len(prepared.custom_objects))]
    return names


def _load_on_every_rank(loader: _VerifiedLoader, name: str, accelerator: Any) -> Any:
    """Load this rank's own file, then agree with the other ranks that all of theirs loaded."""
    from accel_convert.runtime.collectives import is_distributed, reduce

    failure: CheckpointError | None = None
    content: Any = None
    try:
        content = loader.load(name)
    except CheckpointError as error:
        failure = error
    if is_distributed():
        refused = torch.zeros(accelerator.num_processes, dtype=torch.int64)
        refused[accelerator.process_index] = int(failure is not None)
        refused = reduce(refused.to(_agreement_device()), "sum").cpu()
        ranks = [rank for rank, flag in enumerate(refused.tolist()) if flag]
        if ranks and failure is None:
            names = ", ".join(str(loader.source / _rng_file(rank)) for rank in ranks)
            raise CheckpointRefusedByPeer(
                f"{names}: refused by rank(s) {', '.join(map(str, ranks))} "
                "(see that rank's message); nothing was loaded",
                ranks[0],
            )
    if failure is not None:
        raise failure
    return content


def _agreement_device() -> torch.device:
    import torch.distributed as dist

    if dist.get_backend() == "nccl":  # NCCL only moves GPU tensors
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _load_source(accelerator: Any, input_dir: str | os.PathLike | None) -> Path:
    config = accelerator.project_configuration
    if input_dir is not None:
        source = Path(input_dir)
        if source.is_dir():
            return source
        found = _recoverable(source)
        if found is None:
            raise CheckpointError(f"{source}: no such checkpoint folder")
        if accelerator.is_main_process:
            warnings.warn(
                f"{source}: missing, a save over it was interrupted; loading the complete checkpoint it left in {found}",
                stacklevel=4,
            )
        return found
    if not config.automatic_checkpoint_naming or config.project_dir is None:
        raise ValueError("load_state needs input_dir (or ProjectConfiguration(automatic_checkpoint_naming=True))")
    latest = latest_checkpoint(config.project_dir)
    if latest is None:
        raise CheckpointError(f"{Path(config.project_dir) / 'checkpoints'}: no complete checkpoint to load")
    return latest


def _map_location(accelerator: Any, map_location: str | None) -> str | torch.device:
    if map_location in (None, "cpu"):
        # Optimizers move their state to their parameters' device when loading it.
        return "cpu"
    if map_location == "on_device":
        return accelerator.device
    raise TypeError(f"Unsupported map_location {map_location!r}: use None, 'cpu' or 'on_device'")


def _reshardable(accelerator: Any) -> bool:
    """True when every prepared model and optimizer is sharded: their checkpoints load onto any
    number of ranks (see the module doc)."""
    prepared = accelerator.prepared_objects()
    models, optimizers = _sharded_parts(accelerator)
    return bool(models) and len(models) == len(prepared.models) and len(optimizers) == len(prepared.optimizers)


def _read_manifest(source: Path, accelerator: Any) -> dict[str, Any]:
    """The manifest of ``source``, checked against this run (``"unchecked"`` False); for a folder
    Accelerate wrote, the listing that stands in for it (:func:`_accelerate_listing`)."""
    path = source / MANIFEST
    if not path.is_file() and (source / _rng_file(0)).is_file():
        return _accelerate_listing(source, accelerator)
    if not path.is_file():
        raise CheckpointError(
            f"{path}: missing, so {source} is not a complete checkpoint "
            f"(it was never finished, or was not written by save_state: Accelerate's holds {_rng_file(0)})"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        files, world_size, counts = manifest["files"], manifest["world_size"], manifest["counts"]
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: unreadable manifest ({error})") from None
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise CheckpointError(f"{path}: malformed manifest (world_size is {world_size!r}, not a number of processes)")
    if world_size != accelerator.num_processes and not _reshardable(accelerator):
        raise CheckpointError(
            f"{path}: saved by {world_size} processes, this run has "
            f"{accelerator.num_processes}; resume with the same number of processes"
        )
    for kind, present in _counts(accelerator).items():
        expected = counts.get(kind)
        if present != expected:
            raise CheckpointError(f"{path}: holds {expected} {kind.replace('_', ' ')}, this run prepared {present}")
    if not isinstance(files, dict):
        raise CheckpointError(f"{path}: unreadable manifest (no file list)")
    return {**manifest, "unchecked": False}


def _accelerate_listing(source: Path, accelerator: Any) -> dict[str, Any]:
    """What stands in for the manifest of a checkpoint Accelerate wrote (see the module doc):
    every file in the folder, with no size or digest to check; only their presence is."""
    if accelerator.is_main_process:
        warnings.warn(
            f"{source}: no {MANIFEST}, loading it as a checkpoint Hugging Face Accelerate wrote: its "
            "files are not checked for completeness or corruption, and the random states and data "
            "loader positions are not restored",
            stacklevel=4,
        )
    files = {path.relative_to(source).as_posix(): None for path in sorted(source.rglob("*")) if path.is_file()}
    world_size = sum(1 for name in files if re.fullmatch(r"random_states_\d+\.pkl", name))
    return {"world_size": world_size, "files": files, "unchecked": True}


class _VerifiedLoader:
    """Reads checkpoint files only after checking them against the manifest."""

    def __init__(self, source: Path, manifest: dict[str, Any], location: str | torch.device) -> None:
        self.source = source
        self.files: dict[str, dict[str, Any] | None] = manifest["files"]
        # Only the listing that stands in for Accelerate's missing manifest says so: presence is
        # all there is to check. A manifest as save_state writes it (merge_fsdp_weights reads one) is checked.
        self.unchecked: bool = manifest.get("unchecked", False)
        self.location = location
        self.verified: set[str] = set()

    def verify(self, names: list[str]) -> None:
        """Check each file's presence, size and digest (each is hashed once per load)."""
        for name in names:
            path = self.source / name
            if name not in self.files and not self.unchecked:
                raise CheckpointError(f"{path}: not listed in {self.source / MANIFEST}")
            if not path.is_file():
                raise CheckpointError(f"{path}: missing from the checkpoint")
            if self.unchecked:
                self.verified.add(name)
                continue
            expected = self.files[name]
            try:
                size, digest = expected["bytes"], expected["sha256"]
            except (KeyError, TypeError):
                raise CheckpointError(
                    f"{self.source / MANIFEST}: malformed manifest (no size and digest for {name})"
                ) from None
            if path.stat().st_size != size or _digest(path) != digest:
                raise CheckpointError(f"{path}: corrupt (its contents differ from what was saved)")
            self.verified.add(name)

    def load(self, name: str) -> Any:
        if name not in self.verified:
            self.verify([name])
        path = self.source / name
        if path.suffix == ".safetensors":
            try:
                return read_safetensors(path, self.location)
            except ValueError as error:
                raise CheckpointError(f"{path}: not a safetensors file ({error})") from error
        try:
            return torch.load(path, map_location=self.location, weights_only=True)
        except Exception as error:  # noqa: BLE001 (any unpickling failure gets the file's name)
            raise CheckpointError(f"{path}: cannot be loaded with weights_only=True ({error})") from error
