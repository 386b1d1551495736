"""The runtime half of ``accel-convert verify``: records what a run does, rank by rank.

``accel-convert verify`` runs the original script and the converted one (on 1 and on N processes)
and compares what they did. This module is what each process runs to say what it did. It is
injected through a ``sitecustomize.py`` (``python -m accel_convert.runtime.tracer inject FOLDER``
writes one; the orchestrator puts FOLDER first on ``PYTHONPATH``), which calls :func:`install`
when ``ACCEL_CONVERT_TRACE_DIR`` is set and then imports the user's own next ``sitecustomize``,
so a project's own start-up code (a data shim) still runs.

Environment read by :func:`install` (the contract, ``VERIFY_TRACE_CONTRACT.md`` version 1):

- ``ACCEL_CONVERT_TRACE_DIR``: records go to ``rank-<RANK>.jsonl`` there (required to activate).
- ``ACCEL_CONVERT_TRACE_SEED=S``: ``random``, NumPy (if importable) and torch seeded with ``S + RANK``.
- ``ACCEL_CONVERT_TRACE_SAMPLES=M``: every map-style dataset handed to a ``DataLoader`` is cut to
  its first M samples (a ``Subset`` that still answers the dataset's attributes); an iterable
  dataset stops after M samples; a loader given its own sampler takes the first M indices it
  draws, as many as its ``len`` then says (its own batch sampler keeps only the indices below M;
  a ``DistributedSampler`` shards the first M samples instead, so the ranks stay even).
- ``ACCEL_CONVERT_TRACE_FAKE_CUDA=1``: a machine without GPUs pretends to have
  ``LOCAL_WORLD_SIZE`` of them. Every CUDA request (``.cuda()``, ``.to("cuda:1")``, ``.to(0)``,
  ``device=`` in a factory, ``map_location`` in ``torch.load``) runs on the CPU and is recorded
  with the index it asked for; a bare ``"cuda"`` is the current device (``torch.cuda.set_device``).
  NCCL becomes Gloo and DDP's ``device_ids`` are dropped, so a script written for GPUs runs.

Records (one JSON object per line, written with one ``os.write`` each, so a crash keeps them).
Every record has ``kind``, ``rank`` and ``t``; paths are relative to the working folder at install
(POSIX), absolute outside it. Sites are ``file:line`` of the innermost frame in the user's code.

===========  ===============================================================================
kind         fields
===========  ===============================================================================
start        pid, argv, cwd, world_size, local_rank
loss         index, value (float of a scalar loss, else null): each backward the script asks
             for (``Tensor.backward``, ``torch.autograd.backward``, ``Accelerator.backward``,
             counted once, with the value the script passed; for ``scaler.scale(loss)``, the loss)
step         index, digest (sha256 over every parameter's bytes, param-group order), norm:
             after each optimizer step that ran
print        text: each complete line written to ``sys.stdout`` (a partial last one at exit)
write        path, size, sha256, via (``open``, ``torch.save``, ``numpy.save``): when a file
             opened for writing is closed, or after a save to a path returns
read         path, exists, size, sha256 (null when missing), via: before a file is opened for
             reading (``open``, ``torch.load``, ``numpy.load``), also when the open then fails
pass         loader (site where it was made), grad, samples, gathered, gather_inputs, complete,
             trained (a backward or an optimizer step ran during it), uneven (the ranks split
             its batches without repeating any: ``even_batches=False``): at the end of each
             pass over a DataLoader
device       what (``module``/``tensor``), requested (``cuda:1``), site: first time per triple,
             only for CUDA requests, only in fake-CUDA mode or on a real GPU
exit         code, exception (``"TypeError: msg"`` or null), site
tracer_error where, error: the tracer failed somewhere; the script went on as without it
===========  ===============================================================================

Example::

    {"kind": "loss", "rank": 1, "t": 1764910000.1, "index": 0, "value": 2.3125}
    {"kind": "device", "rank": 1, "t": 1764910000.0, "what": "module", "requested": "cuda:0", "site": "train.py:41"}

On a hang, ``SIGUSR1`` makes every thread's stack go to ``rank-<RANK>.stacks`` (``faulthandler``).

Cost: outside fake-CUDA mode nothing runs per tensor operation; the hooks are per backward, per
optimizer step (one hash over the parameters), per printed line, per file and per batch.
Everything the tracer does is guarded: a failure of its own becomes a ``tracer_error`` record,
never an exception in the script.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import faulthandler
import functools
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import io
import itertools
import json
import math
import os
import signal
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType, TracebackType
from typing import Any

import torch
import torch.utils.data as torch_data

DIR_VARIABLE = "ACCEL_CONVERT_TRACE_DIR"
SEED_VARIABLE = "ACCEL_CONVERT_TRACE_SEED"
SAMPLES_VARIABLE = "ACCEL_CONVERT_TRACE_SAMPLES"
FAKE_CUDA_VARIABLE = "ACCEL_CONVERT_TRACE_FAKE_CUDA"
#: Set by install() to the traced process's pid, so that its own child processes are not traced.
OWNER_VARIABLE = "ACCEL_CONVERT_TRACE_OWNER"

#: Set by :func:`install` in fake-CUDA mode; ``runtime.state`` reads it (through ``sys.modules``,
#: without importing this module) to report ``cuda:LOCAL_RANK`` on Gloo.
faking_cuda = False

#: Launchers that only start the ranks: tracing them would write a second rank-0 file.
_LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "accel_convert.runtime.launch",
    "accelerate.commands.launch",
}
_LAUNCHER_SCRIPTS = {"torchrun", "accel-launch", "accelerate"}


# ---------------------------------------------------------------------------------------- writer
class RecordWriter:
    """Appends one JSON line per record to this rank's file; thread-safe, never raises."""

    def __init__(self, path: str, rank: int) -> None:
        self.rank = rank
        self.pid = os.getpid()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._reset_lock)

    def _reset_lock(self) -> None:
        # A DataLoader worker forked while another thread held the lock must not wait forever.
        self._lock = threading.Lock()

    def write(self, kind: str, **fields: Any) -> None:
        try:
            record = {"kind": kind, "rank": self.rank, "t": time.time(), **fields}
            line = (json.dumps(record, default=str) + "\n").encode("utf-8", "replace")
            with self._lock:
                os.write(self._fd, line)
        except Exception:  # noqa: BLE001 - the tracer must never break the script
            pass


_writer: RecordWriter | None = None
_local = threading.local()
_cwd = os.getcwd()


def _record(kind: str, **fields: Any) -> None:
    if _writer is not None:
        _writer.write(kind, **fields)


def _tracer_error(where: str, error: BaseException) -> None:
    _record("tracer_error", where=where, error=f"{type(error).__name__}: {error}")


def _guarded(where: str, action: Callable[..., Any], *args: Any) -> Any:
    """Run a piece of the tracer; its failure is recorded, not raised."""
    try:
        return action(*args)
    except Exception as error:  # noqa: BLE001 - see module docstring
        _tracer_error(where, error)
        return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Inside, file operations are not recorded (``torch.save`` opening its own file)."""
    _local.quiet = getattr(_local, "quiet", 0) + 1
    try:
        yield
    finally:
        _local.quiet -= 1


def _is_quiet() -> bool:
    return getattr(_local, "quiet", 0) > 0


# ------------------------------------------------------------------------------ paths and sites
#: accel_convert/ (the runtime's own frames are never "the user's code").
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(torch.__file__))
    roots.add(_PACKAGE_ROOT.rstrip(os.sep))
    return tuple(sorted(root + os.sep for root in roots if root))


_LIBRARY_ROOTS = _library_roots()


@functools.lru_cache(maxsize=4096)
def _is_library_file(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    return os.path.abspath(filename).startswith(_LIBRARY_ROOTS)


def display_path(path: str) -> str:
    """Relative to the working folder at install (POSIX), absolute outside it."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, _cwd)
    if relative == os.curdir or relative.startswith(os.pardir):
        return absolute.replace(os.sep, "/")
    return relative.replace(os.sep, "/")


def user_site(frame: Any = None) -> str | None:
    """``file:line`` of the innermost frame in the user's code (not torch, stdlib or accel_convert)."""
    frame = frame or sys._getframe(1)
    while frame is not None:
        if not _is_library_file(frame.f_code.co_filename):
            return f"{display_path(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


# ------------------------------------------------------------------------------------- seeding
_seed: int | None = None


def seed_everything(seed: int) -> None:
    """The same start for every run: ``random`` and torch now, NumPy when it is imported
    (:func:`patch_numpy`: the runtime never imports NumPy itself)."""
    global _seed
    import random

    _seed = seed
    random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------------------- losses
_loss_index = itertools.count()


def _loss_value(loss: Any) -> float | None:
    if isinstance(loss, (list, tuple)):
        loss = loss[0] if len(loss) == 1 else None
    loss = getattr(loss, "_accel_convert_unscaled", loss)  # scaler.scale(loss).backward(): the loss
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return float(loss.detach().float().cpu())
    return None


@contextlib.contextmanager
def _recording_loss(loss: Any, divisor: int = 1) -> Iterator[None]:
    """Record the outermost backward only (``Tensor.backward`` calls ``torch.autograd.backward``);
    ``divisor``: what the backward divides the loss by before it reaches the gradients."""
    depth = getattr(_local, "backward", 0)
    if depth == 0:
        value = _guarded("loss", _loss_value, loss)
        if value is not None and divisor > 1:
            value /= divisor
        _record("loss", index=next(_loss_index), value=value)
        TrainingWork.done += 1
    _local.backward = depth + 1
    try:
        yield
    finally:
        _local.backward = depth


def _traced_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def backward(first: Any, *args: Any, **kwargs: Any) -> Any:
        with _recording_loss(first):
            return original(first, *args, **kwargs)

    return backward


def _traced_method_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def backward(self: Any, loss: Any, *args: Any, **kwargs: Any) -> Any:
        # Under gradient accumulation the accelerator divides the loss by the steps, as the
        # original divided it by hand (``loss / accumulation_steps``): the record is what counts.
        steps = getattr(self, "gradient_accumulation_steps", 1)
        with _recording_loss(loss, steps if isinstance(steps, int) else 1):
            return original(self, loss, *args, **kwargs)

    return backward


def _remembering_unscaled(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GradScaler.scale``: the scaled loss remembers the loss, so that the loss record of
    ``scaler.scale(loss).backward()`` holds the loss itself, as ``Accelerator.backward(loss)`` does."""

    @functools.wraps(original)
    def scale(self: Any, outputs: Any) -> Any:
        scaled = original(self, outputs)
        if isinstance(scaled, torch.Tensor) and isinstance(outputs, torch.Tensor) and scaled is not outputs:
            with contextlib.suppress(Exception):
                scaled._accel_convert_unscaled = outputs  # type: ignore[attr-defined]
        return scaled

    return scale


def patch_backward() -> None:
    torch.Tensor.backward = _traced_backward(torch.Tensor.backward)  # type: ignore[method-assign]
    torch.autograd.backward = _traced_backward(torch.autograd.backward)
    scaler = torch.amp.GradScaler
    scaler.scale = _remembering_unscaled(scaler.scale)  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------- steps
_step_index = itertools.count()


def _hash_tensor(digest: Any, tensor: torch.Tensor) -> None:
    """Feed a tensor's bytes to ``digest`` without copying them (a CPU tensor's own memory)."""
    flat = tensor.detach()
    if hasattr(flat, "to_local"):  # a DTensor (FSDP2): this rank's shard
        flat = flat.to_local()
    flat = flat.to("cpu").contiguous()
    size = flat.numel() * flat.element_size()
    # Only a plain strided CPU tensor's memory is read directly (a meta tensor has no memory).
    if type(flat) not in (torch.Tensor, torch.nn.Parameter) or flat.layout != torch.strided or not flat.data_ptr():
        digest.update(repr((type(flat).__name__, tuple(flat.shape), str(flat.dtype))).encode())
    elif size:
        digest.update(memoryview((ctypes.c_char * size).from_address(flat.data_ptr())))


def parameter_digest(optimizer: torch.optim.Optimizer) -> tuple[str, float]:
    """sha256 over every parameter's bytes (param-group order) and the global L2 norm."""
    digest = hashlib.sha256()
    norms = []
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            _hash_tensor(digest, parameter)
            # Each tensor's norm in its own precision (float64 copies cost more than the hash).
            norms.append(torch.linalg.vector_norm(parameter.detach()).double().cpu())
    return digest.hexdigest(), float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def _after_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    result = _guarded("step", parameter_digest, optimizer)
    digest, norm = result if result is not None else (None, None)
    _record("step", index=next(_step_index), digest=digest, norm=norm)
    TrainingWork.done += 1


def patch_optimizer_steps() -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_after_step)


# --------------------------------------------------------------------------------------- stdout
class LineTee:
    """``sys.stdout`` as before, with each complete line also recorded."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: Any) -> Any:
        written = self._stream.write(text)
        if isinstance(text, str):
            _guarded("print", self._collect, text)
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _collect(self, text: str) -> None:
        if "\n" not in text:
            self._pending += text
            return
        with self._lock:
            *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            _record("print", text=line)

    def flush_partial(self) -> None:
        if self._pending:
            text, self._pending = self._pending, ""
            _record("print", text=text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


_tee: LineTee | None = None


def patch_stdout() -> None:
    global _tee
    if sys.stdout is not None:
        _tee = LineTee(sys.stdout)
        sys.stdout = _tee


# ---------------------------------------------------------------------------------------- files
_original_open = builtins.open
_SKIPPED_PREFIXES = ("/proc/", "/sys/", "/dev/")
_hash_cache: dict[tuple[str, int, int], str] = {}


def _trace_dir_prefix() -> str:
    return os.path.abspath(os.environ.get(DIR_VARIABLE, "/nonexistent")) + os.sep


def trackable_path(file: Any) -> str | None:
    """The absolute path of a file the user's program touches, or None (fds, library files)."""
    if isinstance(file, int) or not isinstance(file, (str, bytes, os.PathLike)):
        return None
    path = os.path.abspath(os.fsdecode(os.fspath(file)))
    if path.startswith(_SKIPPED_PREFIXES) or path.startswith(_trace_dir_prefix()) or _is_library_file(path):
        return None
    return path


def _file_sha256(path: str, size: int, mtime: int) -> str:
    key = (path, size, mtime)
    if key not in _hash_cache:
        digest = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY)  # os.open: not the traced builtins.open
        try:
            for chunk in iter(functools.partial(os.read, fd, 1 << 20), b""):
                digest.update(chunk)
        finally:
            os.close(fd)
        _hash_cache[key] = digest.hexdigest()
    return _hash_cache[key]


def file_facts(path: str) -> dict[str, Any]:
    """exists, size, sha256 (None for the last two when there is no such file)."""
    try:
        status = os.stat(path)
    except OSError:
        return {"exists": False, "size": None, "sha256": None}
    if not os.path.isfile(path):
        return {"exists": True, "size": status.st_size, "sha256": None}
    return {"exists": True, "size": status.st_size, "sha256": _file_sha256(path, status.st_size, status.st_mtime_ns)}


def record_read(path: str, via: str) -> None:
    _record("read", path=display_path(path), via=via, **file_facts(path))


def record_write(path: str, via: str) -> None:
    facts = file_facts(path)
    _record("write", path=display_path(path), size=facts["size"], sha256=facts["sha256"], via=via)


_open_for_writing: dict[int, tuple[str, str, Any]] = {}


def _watch_close(handle: Any, path: str, via: str) -> None:
    """Record the write when the handle closes (explicitly, by ``with``, or when collected).

    The ``close`` put on the handle holds it only weakly: a handle the script drops unclosed is
    still closed at once by reference counting, as without the tracer."""
    key = id(handle)
    handle_ref = weakref.ref(handle)
    close_of_its_type = type(handle).close
    _open_for_writing[key] = (path, via, handle_ref)

    def close() -> Any:
        try:
            target = handle_ref()
            return close_of_its_type(target) if target is not None else None
        finally:
            if _open_for_writing.pop(key, None) is not None:
                _guarded("write", record_write, path, via)

    try:
        handle.close = close
    except AttributeError:
        pass  # recorded at exit instead (see _record_unclosed_writes)


def _is_writing(mode: Any) -> bool:
    return isinstance(mode, str) and any(letter in mode for letter in "wax+")


#: Python reading its own sources (a traceback's lines) is not the script reading a file.
_SOURCE_READERS = ("linecache.py", "tokenize.py", "traceback.py", "inspect.py")


def _read_by_python_itself() -> bool:
    try:
        caller = sys._getframe(2).f_code.co_filename
    except ValueError:  # no Python caller
        return False
    return _is_library_file(caller) and os.path.basename(caller) in _SOURCE_READERS


def _traced_open(file: Any, mode: Any = "r", *args: Any, **kwargs: Any) -> Any:
    quiet = _is_quiet() or _read_by_python_itself()
    path = None if quiet else _guarded("open", trackable_path, file)
    if path is None:
        return _original_open(file, mode, *args, **kwargs)
    writing = _is_writing(mode)
    if not writing:
        _guarded("read", record_read, path, "open")
    handle = _original_open(file, mode, *args, **kwargs)
    if writing:
        _guarded("write", _watch_close, handle, path, "open")
    return handle


def _record_unclosed_writes() -> None:
    """Files still open at exit: what they hold once flushed (Python flushes them after us)."""
    for path, via, handle_ref in list(_open_for_writing.values()):
        handle = handle_ref()
        if handle is not None:
            with contextlib.suppress(Exception):
                handle.flush()
        _guarded("write", record_write, path, via)
    _open_for_writing.clear()


def _traced_saver(original: Callable[..., Any], via: str, suffix: str = "") -> Callable[..., Any]:
    """``torch.save(obj, path)`` / ``numpy.save(path, array)``: a write after it returns."""

    @functools.wraps(original)
    def save(*args: Any, **kwargs: Any) -> Any:
        if via == "torch.save":
            target = args[1] if len(args) > 1 else kwargs.get("f")
        else:
            target = args[0] if args else kwargs.get("file")
        path = None if _is_quiet() else _guarded(via, trackable_path, target)
        with _quiet():
            result = original(*args, **kwargs)
        if path is not None:
            if suffix and not os.path.exists(path) and os.path.exists(path + suffix):
                path += suffix
            _guarded(via, record_write, path, via)
        return result

    return save


def _traced_loader(original: Callable[..., Any], via: str) -> Callable[..., Any]:
    """``torch.load(path)`` / ``numpy.load(path)``: a read before the call."""

    @functools.wraps(original)
    def load(*args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("f", kwargs.get("file"))
        path = None if _is_quiet() else _guarded(via, trackable_path, target)
        if path is not None:
            _guarded(via, record_read, path, via)
        if faking_cuda and via == "torch.load":
            kwargs = _cpu_map_location(kwargs)
        with _quiet():
            return original(*args, **kwargs)

    return load


def patch_files() -> None:
    builtins.open = _traced_open
    io.open = _traced_open
    for module in (torch, torch.serialization):
        module.save = _traced_saver(torch.serialization.save, "torch.save")  # type: ignore[attr-defined]
        module.load = _traced_loader(torch.serialization.load, "torch.load")  # type: ignore[attr-defined]


def patch_numpy(numpy: ModuleType) -> None:
    if _seed is not None:
        numpy.random.seed(_seed % 2**32)
    numpy.save = _traced_saver(numpy.save, "numpy.save", suffix=".npy")  # type: ignore[attr-defined]
    numpy.load = _traced_loader(numpy.load, "numpy.load")  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------- sample budget
class BudgetSubset(torch_data.Subset):
    """The first M samples of a dataset, answering the dataset's own attributes (``.classes``)."""

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "indices") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


class BudgetIterable(torch_data.IterableDataset):
    """An iterable dataset that stops after M samples."""

    def __init__(self, dataset: Any, limit: int) -> None:
        self.dataset = dataset
        self.limit = limit

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.dataset), self.limit)

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "limit") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


class SizedBudgetIterable(BudgetIterable):
    """A sized iterable dataset that stops after M samples, and says so: its ``len`` (what the
    runtime reads to drop the padding of its last batches, ``streaming_eval_sized``)."""

    def __len__(self) -> int:
        return min(len(self.dataset), self.limit)


class BudgetSampler(torch_data.Sampler):
    """The script's own sampler, cut to the first M indices it draws: as many in every pass as its
    ``len`` says (what the runtime shards and pads by), whatever it draws. Keeping the indices
    below M instead kept a number that depends on the draw (a ``SubsetRandomSampler`` of scattered
    indices, a ``WeightedRandomSampler``), which its ``len`` could not tell."""

    def __init__(self, sampler: Any, limit: int) -> None:
        self.sampler = sampler
        self.limit = limit

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.sampler, len(self))

    def __len__(self) -> int:
        return min(len(self.sampler), self.limit)

    def __getattr__(self, name: str) -> Any:
        if name in ("sampler", "limit") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.sampler, name)


class BudgetBatchSampler(BudgetSampler):
    """The script's own batch sampler, cut to the batches a plain sampler cut to M would make: its
    first batches, holding the first M indices it draws (the last one cut to M, or dropped when
    partial under ``drop_last``), as many in every pass as its ``len`` says. A batch sampler whose
    batches may differ in size (no ``batch_size``) keeps its first batches whole, as many as M
    samples fill at its mean batch size. Keeping the indices below M of every batch instead kept
    a number of batches that depends on the draw, which its ``len`` could not tell."""

    def __iter__(self) -> Iterator[Any]:
        size, left = self._batch_size(), self.limit
        for batch in itertools.islice(self.sampler, len(self)):
            if size is None:
                yield batch
                continue
            yield list(batch)[:left]
            left -= size

    def __len__(self) -> int:
        batches, size = len(self.sampler), self._batch_size()
        if size is None:
            return min(batches, math.ceil(self.limit / self._mean_batch_size(batches)))
        if getattr(self.sampler, "drop_last", False):
            return min(batches, self.limit // size)
        return min(batches, math.ceil(self.limit / size))

    def _batch_size(self) -> int | None:
        size = getattr(self.sampler, "batch_size", None)
        return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None

    def _mean_batch_size(self, batches: int) -> int:
        samples = _sized(getattr(self.sampler, "sampler", None))
        return max(1, math.ceil(samples / batches)) if samples and batches else 1


def _sized(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except Exception:  # noqa: BLE001 - an iterable dataset without a length
        return None


def budget_dataset(dataset: Any, limit: int) -> Any:
    if isinstance(dataset, torch_data.IterableDataset):
        if isinstance(dataset, BudgetIterable):
            return dataset
        return BudgetIterable(dataset, limit) if _sized(dataset) is None else SizedBudgetIterable(dataset, limit)
    size = _sized(dataset)
    if size is None or size <= limit:
        return dataset
    return BudgetSubset(dataset, range(limit))


def cut_distributed_sampler(sampler: torch_data.DistributedSampler, limit: int) -> None:
    """A ``DistributedSampler`` (the script's own DDP loader) shards the first M samples instead,
    in place (the script may call ``set_epoch`` on it), every rank getting as many as before."""
    sampler.dataset = budget_dataset(sampler.dataset, limit)
    size, ranks = len(sampler.dataset), sampler.num_replicas  # type: ignore[arg-type]
    if sampler.drop_last and size % ranks:
        sampler.num_samples = math.ceil((size - ranks) / ranks)
    else:
        sampler.num_samples = math.ceil(size / ranks)
    sampler.total_size = sampler.num_samples * ranks


def _budget_sampler(kwargs: dict[str, Any], limit: int) -> bool:
    """Cut the script's own sampler or batch sampler, if it gave one (True: the dataset stays)."""
    for name, wrapper in (("sampler", BudgetSampler), ("batch_sampler", BudgetBatchSampler)):
        given = kwargs.get(name)
        if isinstance(given, torch_data.DistributedSampler):
            cut_distributed_sampler(given, limit)
            return False  # the dataset is cut too: the sampler's indices fit it
        if given is not None and not isinstance(given, (BudgetSampler, bool, int)):
            kwargs[name] = wrapper(given, limit)
            return True
    return False


def budget_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], limit: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The DataLoader's arguments with the dataset (or the script's own sampler) cut to M."""
    kwargs = dict(kwargs)
    if _budget_sampler(kwargs, limit):
        return args, kwargs
    if args:
        return (budget_dataset(args[0], limit), *args[1:]), kwargs
    if "dataset" in kwargs:
        kwargs["dataset"] = budget_dataset(kwargs["dataset"], limit)
    return args, kwargs


# ----------------------------------------------------------------------------- loader passes
class TrainingWork:
    """Backwards and optimizer steps so far: a pass during which none ran is an evaluation, even
    with gradients on (``with torch.no_grad():`` inside the loop, after the batch is fetched)."""

    done = 0


class Pass:
    """One pass over a DataLoader: what it yielded and what was gathered meanwhile."""

    def __init__(self, site: str | None, per_item: bool) -> None:
        self.site = site
        self.per_item = per_item
        self.grad: bool | None = None
        self.samples = 0
        #: Samples gathered per call site (``file:line``): predictions and labels gathered apart
        #: are the same samples twice, so the pass counts the site that gathered the most.
        self.gathered_by_site: dict[str | None, int] = {}
        self.gather_inputs: list[str] = []
        self.ended = False
        #: The loader said StopIteration. The pass ends when its iterator is dropped: a loader
        #: that fetches one batch ahead (Accelerate's ``DataLoaderShard`` over its
        #: ``base_dataloader``) hears it before the script has used the last batch.
        self.exhausted = False
        self.work_at_start = TrainingWork.done
        #: A prepared loader whose ranks get uneven shares of its batches, none repeated: what
        #: they count together is what one process counts.
        self.uneven = False

    @property
    def gathered(self) -> int | None:
        return max(self.gathered_by_site.values()) if self.gathered_by_site else None

    def gather(self, samples: int, site: str | None) -> None:
        self.gathered_by_site[site] = self.gathered_by_site.get(site, 0) + samples

    def end(self, complete: bool) -> None:
        if self.ended:
            return
        self.ended = True
        with contextlib.suppress(ValueError):
            _active_passes.remove(self)
        grad = torch.is_grad_enabled() if self.grad is None else self.grad
        _record(
            "pass",
            loader=self.site,
            grad=grad,
            samples=self.samples,
            gathered=self.gathered,
            gather_inputs=self.gather_inputs,
            complete=complete,
            trained=TrainingWork.done > self.work_at_start,
            uneven=self.uneven,
        )


_active_passes: list[Pass] = []


def first_dim(data: Any) -> int:
    """How many samples a batch (or a gathered result) holds: the first dim of its first tensor
    (``(inputs, labels)``, a dict of tensors); of a batch with no tensor of its own, the length of
    its first field (``(images, targets)`` of tuples, as a detection ``collate_fn`` makes them), or
    its own (a list of per-sample dicts, strings)."""
    if isinstance(data, torch.Tensor):
        return int(data.shape[0]) if data.dim() else 1
    if isinstance(data, Mapping):
        return first_dim(next(iter(data.values()))) if data else 0
    if isinstance(data, (list, tuple)):
        tensors = [item for item in data if isinstance(item, torch.Tensor)]
        if tensors:
            return first_dim(tensors[0])
        if data and isinstance(data[0], Mapping):
            return len(data)  # one dict per sample
        if data and isinstance(data[0], (list, tuple)):
            return len(data[0])  # fields, each a sequence of samples
        return len(data)
    return 1


class PassIterator:
    """The loader's iterator, counting what it yields; ends the pass at StopIteration or when dropped."""

    def __init__(self, iterator: Any, current: Pass) -> None:
        self._iterator = iterator
        self._pass = current

    def __iter__(self) -> PassIterator:
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._pass.exhausted = True
            raise
        _guarded("pass", self._count, batch)
        return batch

    def _count(self, batch: Any) -> None:
        if self._pass.grad is None:
            self._pass.grad = torch.is_grad_enabled()
        self._pass.samples += 1 if self._pass.per_item else first_dim(batch)

    def __len__(self) -> int:
        return len(self._iterator)

    def __getattr__(self, name: str) -> Any:
        if name in ("_iterator", "_pass"):
            raise AttributeError(name)
        return getattr(self._iterator, name)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._pass.end(self._pass.exhausted)


def _traced_iter(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def loader_iter(self: Any) -> Any:
        iterator = original(self)
        # A subclass's __iter__ calling this one (super().__iter__()) is the same pass, counted there.
        if getattr(type(self).__iter__, "_accel_convert_traced", None) is not loader_iter:
            return iterator
        per_item = getattr(self, "batch_size", 1) is None and getattr(self, "batch_sampler", None) is None
        current = Pass(getattr(self, "_accel_convert_site", None), per_item)
        # ``join_uneven_inputs(..., even_batches=False)``: the ranks split the batches between them.
        current.uneven = getattr(getattr(self, "batch_sampler", None), "even_batches", True) is False
        _active_passes.append(current)
        return PassIterator(iterator, current)

    loader_iter._accel_convert_traced = loader_iter  # type: ignore[attr-defined]
    return loader_iter


def _trace_iter_of(loader_class: type) -> None:
    """Wrap the ``__iter__`` that instances of this class use (a subclass may define its own)."""
    for klass in loader_class.__mro__:
        if "__iter__" in klass.__dict__:
            found = klass.__dict__["__iter__"]
            if getattr(found, "_accel_convert_traced", None) is None:
                klass.__iter__ = _traced_iter(found)  # type: ignore[attr-defined]
            return


def _loader_site(dataset: Any, caller: Any) -> str | None:
    """Where the script made the loader; a loader the runtime rebuilds (``prepare``) keeps it."""
    inherited = getattr(dataset, "_accel_convert_site", None)
    if inherited is not None and _is_library_file(caller.f_code.co_filename):
        return str(inherited)
    site = user_site(caller)
    with contextlib.suppress(Exception):
        dataset._accel_convert_site = site
    return site


def _traced_loader_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1)
        limit = _env_int(SAMPLES_VARIABLE)
        # A loader the runtime rebuilds (prepare) holds a dataset already cut at the script's loader.
        if limit is not None and not caller.f_code.co_filename.startswith(_PACKAGE_ROOT):
            args, kwargs = _guarded("budget", budget_arguments, args, kwargs, limit) or (args, kwargs)
        if faking_cuda:
            kwargs["pin_memory"] = False  # pinning needs a real GPU
        original(self, *args, **kwargs)
        _guarded("loader", _note_loader, self, caller)

    return init


def _note_loader(loader: Any, caller: Any) -> None:
    object.__setattr__(loader, "_accel_convert_site", _loader_site(loader.dataset, caller))
    _trace_iter_of(type(loader))


def patch_data_loaders() -> None:
    loader = torch_data.DataLoader
    loader.__init__ = _traced_loader_init(loader.__init__)  # type: ignore[method-assign]
    _trace_iter_of(loader)


# -------------------------------------------------------------------------------------- gathers
def note_gather(data: Any, result: Any) -> None:
    if not _active_passes:
        return
    current = _active_passes[-1]
    current.gather(first_dim(result), user_site())
    name = type(data).__name__
    if name not in current.gather_inputs:
        current.gather_inputs.append(name)


def _traced_gather(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def gather(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, "gather", 0)
        _local.gather = depth + 1
        try:
            result = original(self, data, *args, **kwargs)
        finally:
            _local.gather = depth
        if depth == 0:
            _guarded("gather", note_gather, data, result)
        return result

    return gather


def patch_accelerator(module: ModuleType) -> None:
    """``Accelerator.backward``/``gather``/``gather_for_metrics`` (this runtime's, or Accelerate's)."""
    accelerator = getattr(module, "Accelerator", None)
    if accelerator is None:
        return
    accelerator.backward = _traced_method_backward(accelerator.backward)
    for name in ("gather", "gather_for_metrics"):
        if hasattr(accelerator, name):
            setattr(accelerator, name, _traced_gather(getattr(accelerator, name)))


class AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module right after it is first imported (NumPy, an Accelerator module)."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self._patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self._patches:
            return None
        patch = self._patches.pop(name)
        spec = self._next_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _guarded(f"patch {name}", patch, module)

        spec.loader.exec_module = exec_module
        return spec

    def _next_spec(self, name: str, path: Any, target: Any) -> Any:
        """The spec the import system would find without this finder."""
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    return spec
        return None


def patch_after_import(patches: dict[str, Callable[[ModuleType], None]]) -> None:
    pending = {}
    for name, patch in patches.items():
        if name in sys.modules:
            _guarded(f"patch {name}", patch, sys.modules[name])
        else:
            pending[name] = patch
    sys.meta_path.insert(0, AfterImport(pending))


# ------------------------------------------------------------------------------------ fake CUDA
class FakeCuda:
    """The GPUs a CPU-only machine pretends to have: a count and a current index."""

    count = 1
    current = 0


def requested_cuda(device: Any) -> str | None:
    """``cuda:<index>`` when ``device`` asks for a GPU (an int is a GPU index), else None."""
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return f"cuda:{device}"
    if isinstance(device, str) and device.startswith("cuda"):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "cuda":
        return f"cuda:{FakeCuda.current if device.index is None else device.index}"
    return None


_seen_devices: set[tuple[str, str, str | None]] = set()


def record_device(what: str, requested: str) -> None:
    if getattr(_local, "module_move", 0) and what == "tensor":
        return  # the module's own record covers its parameters
    key = (what, requested, user_site(sys._getframe(2)))
    if key not in _seen_devices:
        _seen_devices.add(key)
        _record("device", what=what, requested=requested, site=key[2])


def _mapped(what: str, device: Any) -> Any:
    """Record a CUDA request; in fake mode answer it with the CPU."""
    requested = _guarded("device", requested_cuda, device)
    if requested is None:
        return device
    _guarded("device", record_device, what, requested)
    return torch.device("cpu") if faking_cuda else device


def _map_move_arguments(
    what: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``.to(device, ...)``/``.to(device=...)``: the device argument mapped."""
    if "device" in kwargs:
        kwargs = {**kwargs, "device": _mapped(what, kwargs["device"])}
    if args and not isinstance(args[0], (torch.dtype, torch.Tensor)):
        args = (_mapped(what, args[0]), *args[1:])
    return args, kwargs


def _traced_to(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _map_move_arguments(what, args, kwargs)
        return _moving(what, original, self, *args, **kwargs)

    return to


def _moving(what: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if what != "module":
        return original(*args, **kwargs)
    _local.module_move = getattr(_local, "module_move", 0) + 1
    try:
        return original(*args, **kwargs)
    finally:
        _local.module_move -= 1


def _traced_cuda(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def cuda(self: Any, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        _mapped(what, torch.device("cuda") if device is None else device)
        if not faking_cuda:
            return _moving(what, original, self, device, *args, **kwargs)
        return _moving(what, self.to, "cpu") if what == "module" else self

    return cuda


def patch_device_moves() -> None:
    """``Tensor.to``/``.cuda`` and ``Module.to``/``.cuda``: recorded (and mapped when faking)."""
    torch.Tensor.to = _traced_to(torch.Tensor.to, "tensor")  # type: ignore[method-assign]
    torch.Tensor.cuda = _traced_cuda(torch.Tensor.cuda, "tensor")  # type: ignore[method-assign]
    module = torch.nn.Module
    module.to = _traced_to(module.to, "module")  # type: ignore[method-assign]
    module.cuda = _traced_cuda(module.cuda, "module")  # type: ignore[method-assign]


_FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "scalar_tensor", "empty_strided", "tril_indices",
    "triu_indices",
)  # fmt: skip


#: The legacy per-type constructors (``torch.cuda.FloatTensor(n, m)``, ``x.type(torch.cuda.LongTensor)``),
#: which a CPU build refuses: answered by the CPU's own types in fake mode, each use recorded as a
#: tensor made on the current GPU (:class:`_LegacyCudaType`).
_LEGACY_TENSOR_TYPES = (
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor", "CharTensor",
    "ShortTensor", "IntTensor", "LongTensor", "BoolTensor",
)  # fmt: skip


class _LegacyCudaType(type):
    """``torch.cuda.FloatTensor`` and its kin in fake mode: calling one records a tensor made on
    the current GPU (what a legacy CUDA constructor allocates on: ``cuda:<set_device's index>``,
    so a rank's own GPU once ``Accelerator()`` ran ``torch.cuda.set_device``, GPU 0 before) and
    makes the CPU type's tensor; ``isinstance`` answers as for the CPU type."""

    cpu_type: Any

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        _guarded("device", record_device, "tensor", f"cuda:{FakeCuda.current}")
        return cls.cpu_type(*args, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls.cpu_type)


def _legacy_cuda_type(name: str) -> _LegacyCudaType:
    return _LegacyCudaType(name, (), {"cpu_type": getattr(torch, name), "__module__": "torch.cuda"})


def _cpu_tensor_type(dtype: Any) -> Any:
    """The CPU type a fake ``torch.cuda.<X>Tensor`` stands for (recorded as a CUDA request, as a
    call of it is); anything else as it is."""
    if isinstance(dtype, _LegacyCudaType):
        _guarded("device", record_device, "tensor", f"cuda:{FakeCuda.current}")
        return dtype.cpu_type
    return dtype


def _traced_type(original: Callable[..., Any]) -> Callable[..., Any]:
    """``x.type(torch.cuda.LongTensor)`` in fake mode: converted to the CPU type."""

    @functools.wraps(original)
    def type_(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (_cpu_tensor_type(args[0]), *args[1:])
        if "dtype" in kwargs:
            kwargs["dtype"] = _cpu_tensor_type(kwargs["dtype"])
        return original(self, *args, **kwargs)

    return type_


def _traced_factory(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _mapped("tensor", kwargs["device"])
        return original(*args, **kwargs)

    return factory


def _cpu_map_location(kwargs: dict[str, Any]) -> dict[str, Any]:
    location = kwargs.get("map_location")
    if location is not None and not callable(location) and not isinstance(location, dict):
        kwargs = {**kwargs, "map_location": _mapped("tensor", location)}
    return kwargs


def _set_device(device: Any) -> None:
    requested = requested_cuda(device)
    if requested is not None:
        FakeCuda.current = int(requested.split(":")[1])


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


#: What a pretended GPU says it holds (80 GiB), for scripts that size batches by it.
FAKE_GPU_MEMORY = 80 * 2**30


def _fake_properties(*args: Any, **kwargs: Any) -> Any:
    import types

    return types.SimpleNamespace(
        name="fake GPU (CPU)", total_memory=FAKE_GPU_MEMORY, major=8, minor=0, multi_processor_count=1
    )


def _cuda_stubs() -> dict[str, Any]:
    # One function object per name: torch._dynamo's rule map refuses one object under two names.
    return {
        "is_available": lambda: True,
        "device_count": lambda: FakeCuda.count,
        "current_device": lambda: FakeCuda.current,
        "set_device": _set_device,
        "get_device_name": lambda *args, **kwargs: "fake GPU (CPU)",
        "get_device_capability": lambda *args, **kwargs: (8, 0),
        "is_bf16_supported": lambda *args, **kwargs: True,
        "get_rng_state": lambda *args, **kwargs: torch.get_rng_state(),
        "get_rng_state_all": lambda: [torch.get_rng_state()] * FakeCuda.count,
        "get_device_properties": _fake_properties,
        "mem_get_info": lambda *args, **kwargs: (FAKE_GPU_MEMORY, FAKE_GPU_MEMORY),
        "memory_summary": lambda *args, **kwargs: "",
        **{name: functools.partial(_nothing) for name in ("synchronize", "empty_cache", "manual_seed", "manual_seed_all", "seed",
                                      "seed_all", "set_rng_state", "set_rng_state_all", "reset_peak_memory_stats",
                                      "init", "ipc_collect")},
        **{name: (lambda *args, **kwargs: 0) for name in ("memory_allocated", "max_memory_allocated",
                                                          "memory_reserved", "max_memory_reserved")},
    }  # fmt: skip


class FakeEvent:
    """``torch.cuda.Event`` on the CPU: ``elapsed_time`` is wall time between two records (ms)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.recorded_at: float | None = None

    def record(self, stream: Any = None) -> None:
        self.recorded_at = time.perf_counter()

    def elapsed_time(self, end_event: FakeEvent) -> float:
        return ((end_event.recorded_at or 0.0) - (self.recorded_at or 0.0)) * 1000.0

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None


def _gloo_instead_of_nccl(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], str) and "nccl" in args[0]:
            args = ("gloo", *args[1:])
        if "nccl" in str(kwargs.get("backend") or ""):
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    return init_process_group


def _cpu_ddp(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def init(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        args = args[:0]  # device_ids and output_device (positional 2 and 3) are GPU-only
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        original(self, module, *args, **kwargs)

    return init


def patch_fake_cuda(local_world_size: int) -> None:
    """A CPU-only machine answers CUDA requests (module docstring)."""
    global faking_cuda
    faking_cuda = True
    FakeCuda.count = max(local_world_size, 1)
    for name, stub in _cuda_stubs().items():
        setattr(torch.cuda, name, stub)
    for name in _FACTORIES:
        setattr(torch, name, _traced_factory(getattr(torch, name)))
    for name in _LEGACY_TENSOR_TYPES:  # ``Tensor = torch.cuda.FloatTensor if cuda else ...``
        setattr(torch.cuda, name, _legacy_cuda_type(name))
    torch.Tensor.type = _traced_type(torch.Tensor.type)  # type: ignore[method-assign]
    torch.cuda.Event = FakeEvent  # type: ignore[misc,assignment]
    # ``nn.DataParallel`` as torch builds it without GPUs: the module itself, no replicas (its
    # GPU path checks that the parameters are on cuda:0, which they are not here).
    # (``torch.nn.parallel.data_parallel`` the attribute is a function: the module, by name)
    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")
    data_parallel._get_available_device_type = lambda: None  # type: ignore[attr-defined]
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group = _gloo_instead_of_nccl(dist.init_process_group)
    DistributedDataParallel.__init__ = _cpu_ddp(DistributedDataParallel.__init__)  # type: ignore[method-assign]


# ----------------------------------------------------------------------------------------- exit
class ExitWatch:
    """What the exit record says: a ``sys.exit`` code, an uncaught exception."""

    code: int | None = None
    exception: BaseException | None = None
    recorded = False


def _exit_site(error: BaseException | None) -> str | None:
    trace = error.__traceback__ if error is not None else None
    site = None
    while trace is not None:
        if not _is_library_file(trace.tb_frame.f_code.co_filename):
            site = f"{display_path(trace.tb_frame.f_code.co_filename)}:{trace.tb_lineno}"
        trace = trace.tb_next
    return site


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def record_exit(code: int | None = None) -> None:
    """The exit record, once, from the process that installed the tracer (not a forked worker)."""
    if ExitWatch.recorded or _writer is None or os.getpid() != _writer.pid:
        return
    ExitWatch.recorded = True
    if _tee is not None:
        _tee.flush_partial()
    _record_unclosed_writes()
    for current in [current for current in _active_passes if current.exhausted]:
        current.end(True)  # its iterator still held (an attribute) at exit
    error = ExitWatch.exception or getattr(sys, "last_value", None)
    if code is None:
        code = 1 if error is not None else (ExitWatch.code or 0)
    summary = f"{type(error).__name__}: {error}" if error is not None else None
    _record("exit", code=code, exception=summary, site=_exit_site(error))


def _exception_seen(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    ExitWatch.exception = error


def _chained_excepthook(previous: Callable[..., Any]) -> Callable[..., Any]:
    def excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        _guarded("exit", _exception_seen, kind, error, trace)
        with _quiet():  # printing the traceback reads the script's sources: not the script's reads
            previous(kind, error, trace)

    return excepthook


def _traced_sys_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def exit(code: Any = None) -> Any:
        ExitWatch.code = _exit_code(code)
        return original(code)

    return exit


def _traced_os_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _exit(code: int) -> Any:
        _guarded("exit", record_exit, code)
        return original(code)

    return _exit


class TracedQuitter:
    """The ``exit``/``quit`` builtins, noting the code they exit with."""

    def __init__(self, quitter: Any) -> None:
        self._quitter = quitter

    def __repr__(self) -> str:
        return repr(self._quitter)

    def __call__(self, code: Any = None) -> Any:
        ExitWatch.code = _exit_code(code)
        return self._quitter(code)


def patch_exit() -> None:
    sys.excepthook = _chained_excepthook(sys.excepthook)
    sys.exit = _traced_sys_exit(sys.exit)
    for name in ("exit", "quit"):
        if hasattr(builtins, name):
            setattr(builtins, name, TracedQuitter(getattr(builtins, name)))
    os._exit = _traced_os_exit(os._exit)
    atexit.register(_guarded, "exit", record_exit)


def register_stacks(folder: str, rank: int) -> None:
    """SIGUSR1 writes every thread's stack to ``rank-<R>.stacks`` (asked for before a hang is killed)."""
    stacks = _original_open(os.path.join(folder, f"rank-{rank}.stacks"), "a")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    _keep_open.append(stacks)


_keep_open: list[Any] = []


# -------------------------------------------------------------------------------------- install
def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def _is_launcher() -> bool:
    """True in ``torchrun`` and the like: they start the ranks, whose own tracers record."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    for index, argument in enumerate(argv[:-1]):
        if argument == "-m" and argv[index + 1] in _LAUNCHER_MODULES:
            return True
    return any(os.path.basename(argument) in _LAUNCHER_SCRIPTS for argument in argv[1:2])


_installed = False


def install() -> bool:
    """Start recording (once per process); False when not asked to (no trace folder, a launcher)."""
    global _writer, _installed, _cwd
    folder = os.environ.get(DIR_VARIABLE)
    owner = os.environ.get(OWNER_VARIABLE)
    # A program the script starts (a subprocess, a spawned worker) would write a second run into
    # this rank's file: only the rank itself is traced (a forked DataLoader worker still writes
    # its prints and reads into the rank's file, as the rank's own).
    if _installed or not folder or _is_launcher() or (owner and owner != str(os.getpid())):
        return False
    _installed = True
    os.environ[OWNER_VARIABLE] = str(os.getpid())
    rank = _env_int("RANK") or 0
    os.makedirs(folder, exist_ok=True)
    _cwd = os.getcwd()
    _writer = RecordWriter(os.path.join(folder, f"rank-{rank}.jsonl"), rank)
    _record(
        "start",
        pid=os.getpid(),
        argv=list(getattr(sys, "orig_argv", sys.argv)),
        cwd=_cwd,
        world_size=_env_int("WORLD_SIZE") or 1,
        local_rank=_env_int("LOCAL_RANK") or 0,
    )
    _install_parts(folder, rank)
    return True


def _install_parts(folder: str, rank: int) -> None:
    seed = _env_int(SEED_VARIABLE)
    if seed is not None:
        _guarded("seed", seed_everything, seed + rank)
    fake = os.environ.get(FAKE_CUDA_VARIABLE, "").strip() == "1" and not torch.cuda.is_available()
    parts: list[tuple[str, Callable[[], None]]] = [
        ("stacks", lambda: register_stacks(folder, rank)),
        ("exit", patch_exit),
        ("backward", patch_backward),
        ("step", patch_optimizer_steps),
        ("print", patch_stdout),
        ("files", patch_files),
        ("loaders", patch_data_loaders),
        ("imports", lambda: patch_after_import(_IMPORT_PATCHES)),
    ]
    if fake:
        parts.append(("fake cuda", lambda: patch_fake_cuda(_env_int("LOCAL_WORLD_SIZE") or 1)))
    if fake or torch.cuda.is_available():
        parts.append(("devices", patch_device_moves))
    for name, part in parts:
        _guarded(f"install {name}", part)


_IMPORT_PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "numpy": patch_numpy,
    "accel_convert.runtime.accelerator": patch_accelerator,
    "accelerate.accelerator": patch_accelerator,
}


# ------------------------------------------------------------------------------------ injection
SITECUSTOMIZE = '''\
"""Written by `python -m accel_convert.runtime.tracer inject`: trace this run, then run the
project's own sitecustomize (the next one on sys.path), as if this file were not here."""
import os
import sys

if os.environ.get("ACCEL_CONVERT_TRACE_DIR"):
    try:
        from accel_convert.runtime.tracer import install

        install()
    except Exception as error:  # the run goes on untraced rather than not at all
        sys.stderr.write(f"accel_convert tracer: not installed ({type(error).__name__}: {error})\\n")


def _run_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    folders = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    after = folders[folders.index(here) + 1 :] if here in folders else folders
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [f for f in after if f != here])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # an error here is reported by site.py, as for any sitecustomize


_run_next_sitecustomize()
'''


def write_injection(folder: str) -> None:
    """Write ``FOLDER/sitecustomize.py`` (see :data:`SITECUSTOMIZE`)."""
    os.makedirs(folder, exist_ok=True)
    with _original_open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as handle:
        handle.write(SITECUSTOMIZE)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 2 or arguments[0] != "inject":
        sys.stderr.write("usage: python -m accel_convert.runtime.tracer inject FOLDER\n")
        return 2
    write_injection(arguments[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
