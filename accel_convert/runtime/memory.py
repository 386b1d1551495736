"""Out of memory: recognise the error, give the memory back, and retry at a smaller batch size.

``find_executable_batch_size`` runs a training function with a batch size, and when the function
runs out of memory it frees what it can and runs it again with a smaller batch size (half, unless a
reducer says otherwise). Accelerate does that one process at a time. On several ranks that is not
enough: the rank that ran out of memory leaves the training loop while its peers sit inside a
collective (DDP's gradient all-reduce, a barrier) waiting for it, until the collective times out
half an hour later. Even when nothing hangs, ranks can end up on different batch sizes. So with
several ranks every attempt ends with a vote, and all ranks retry together with the same size or
stop together: that protocol lives in :mod:`runtime.oom_agreement`.

A single process needs none of that and simply retries.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "OUT_OF_MEMORY_MESSAGES",
    "find_executable_batch_size",
    "free_memory",
    "is_out_of_memory",
    "release_memory",
]

#: Text that allocators put in their error when memory runs out. CUDA, ROCm and XPU say
#: "<device> out of memory."; the others have their own wording.
OUT_OF_MEMORY_MESSAGES: tuple[str, ...] = (
    " out of memory.",
    "DefaultCPUAllocator: can't allocate memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",  # cuDNN's answer when a workspace does not fit
    "MPS backend out of memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",  # Habana HPU
)

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------------------------
# Recognising the error and freeing memory
# --------------------------------------------------------------------------------------------


def is_out_of_memory(exception: BaseException) -> bool:
    """Whether ``exception`` means "this batch did not fit": retrying smaller may succeed."""
    if isinstance(exception, torch.OutOfMemoryError):
        return True
    if not isinstance(exception, RuntimeError):
        return False
    text = str(exception)
    return any(message in text for message in OUT_OF_MEMORY_MESSAGES)


def _empty_device_caches() -> None:
    """Hand the caching allocators' unused blocks back to the device."""
    # is_initialized(): emptying the cache must not create a CUDA context in a CPU run.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        torch.xpu.empty_cache()
    if torch.backends.mps.is_available():
        torch.mps.empty_cache()


def free_memory() -> None:
    """Collect garbage (reference cycles keep tensors alive) and empty the device caches."""
    gc.collect()
    _empty_device_caches()


def release_memory(*objects: Any) -> list[None]:
    """Drop the caller's big objects and free memory: ``model, optimizer = release_memory(model, optimizer)``.

    A function cannot delete its caller's variables, so it returns one ``None`` per object for the
    caller to assign back; once they are reassigned, nothing here keeps them alive either.
    """
    released: list[Any] = list(objects)
    del objects
    for index in range(len(released)):
        released[index] = None
    free_memory()
    return released


# --------------------------------------------------------------------------------------------
# The batch size sequence
# --------------------------------------------------------------------------------------------


def halve(batch_size: int) -> int:
    """The default reducer: 2048, 1024, 512, ... 1, 0 (as the seed write-up observed)."""
    return batch_size // 2


def _reduced(batch_size: int, reduce_batch_size_fn: Callable[..., int] | None) -> int:
    """The next batch size after an out-of-memory error at ``batch_size``, checked.

    Accelerate's reducers take no argument and keep their own state; a reducer that takes one
    argument is given the batch size that failed, which needs no state at all.
    """
    if reduce_batch_size_fn is None:
        smaller = halve(batch_size)
    elif _accepts_one_argument(reduce_batch_size_fn):
        smaller = reduce_batch_size_fn(batch_size)
    else:
        smaller = reduce_batch_size_fn()
    if isinstance(smaller, bool) or not isinstance(smaller, int) or not 0 <= smaller < batch_size:
        # Anything else would retry forever (or with a nonsense size).
        raise ValueError(
            f"reduce_batch_size_fn returned {smaller!r} after running out of memory at batch size "
            f"{batch_size}; it must return a smaller int >= 0"
        )
    return smaller


def _accepts_one_argument(function: Callable[..., Any]) -> bool:
    try:
        inspect.signature(function).bind(0)
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): assume Accelerate's zero-argument form
        return False
    return True


def _reject_positional_batch_size(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Accelerate's guard: the decorator supplies the batch size, so the caller must not."""
    parameters = list(inspect.signature(function).parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return
    positional = [
        p for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(args) + 1 <= len(positional):
        return
    name = getattr(function, "__name__", repr(function))
    suggestion = ", ".join(f"{p.name}={value!r}" for p, value in zip(positional[1:], args[1:]))
    raise TypeError(
        f"Batch size was passed into `{name}` as the first argument when called. The decorator "
        f"passes the batch size itself; call it without: `{name}({suggestion})`"
    )


def _without_locals(error: Exception) -> Exception:
    """The same exception and traceback, minus the local variables its frames keep alive."""
    traceback.clear_frames(error.__traceback__)
    return error


def _say(message: str) -> None:
    """One line on stderr: a retry must not look like a frozen job."""
    print(f"find_executable_batch_size: {message}", file=sys.stderr, flush=True)


def _reached_zero(tried: list[int]) -> RuntimeError:
    sizes = ", ".join(map(str, tried)) or "none"
    return RuntimeError(f"No executable batch size found, reached zero. (Tried batch sizes: {sizes}.)")


# --------------------------------------------------------------------------------------------
# The decorator
# --------------------------------------------------------------------------------------------


def find_executable_batch_size(
    function: F | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[..., int] | None = None,
) -> Any:
    """Run ``function(batch_size, *args, **kwargs)``, retrying smaller after out-of-memory errors.

    Use it bare (``@find_executable_batch_size``) or configured
    (``@find_executable_batch_size(starting_batch_size=2048, reduce_batch_size_fn=...)``); the
    reducer is honoured in both forms. The batch size is halved by default; a reducer may take no
    argument (Accelerate's form) or the batch size that failed. The function must take
    ``batch_size`` first and its caller must not pass it. The size reached is kept: a second call
    starts from it.

    With an initialised process group of several ranks, an out-of-memory error on any rank makes
    every rank retry with the same (smallest proposed) size, and a non-memory error on any rank
    stops every rank (see the module docstring). Every rank must make the call. The process group
    must exist before it, and the call replaces it: once at the start (with bounded collectives),
    between attempts, and once more on success (the script's own timeout again). So build the
    model, optimizer and loaders inside ``function`` (and call ``accelerator.free_memory()``
    first), as Accelerate's examples do, and do not keep using a DDP-wrapped model the function
    returns (unwrap it: its group is gone).
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )

    batch_size = starting_batch_size

    @functools.wraps(function)
    def run_until_it_fits(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        _reject_positional_batch_size(function, args)
        free_memory()
        agreed = start_agreed_run()
        if agreed is None:
            _warn_if_ranks_cannot_agree()
            attempt, scope = _attempt_alone, contextlib.nullcontext()
        else:
            attempt, scope = agreed
        tried: list[int] = []
        with scope:
            while True:
                if batch_size == 0:
                    raise _reached_zero(tried)
                tried.append(batch_size)
                finished, value = attempt(function, batch_size, reduce_batch_size_fn, args, kwargs)
                if finished:
                    return value
                batch_size = value

    return run_until_it_fits


def start_agreed_run() -> tuple[Callable[..., tuple[bool, Any]], contextlib.AbstractContextManager] | None:
    """With a process group of several ranks: the attempt function of a rank-agreed run and the
    scope the whole call runs in (see :mod:`runtime.oom_agreement`); None without one."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    # Imported here: only runs with several ranks need the protocol.
    from accel_convert.runtime.oom_agreement import start_run

    return start_run()


def _warn_if_ranks_cannot_agree() -> None:
    """Launched on several ranks but no process group yet: each rank would retry on its own."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _say(
            "WORLD_SIZE > 1 but the process group is not initialised, so ranks cannot agree on "
            "retries; create the Accelerator (or init_process_group) before calling the decorated function"
        )


def _attempt_alone(
    function: Callable[..., Any],
    batch_size: int,
    reduce_batch_size_fn: Callable[..., int] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[bool, Any]:
    """One try in a single process: ``(True, result)`` or ``(False, next batch size)``."""
    try:
        return True, function(batch_size, *args, **kwargs)
    except Exception as error:  # noqa: BLE001 (anything but memory is re-raised below)
        if not is_out_of_memory(error):
            raise
        smaller = _reduced(batch_size, reduce_batch_size_fn)
    # Outside the except block: the exception's traceback (and the tensors its frames hold) is
    # gone now, so collecting garbage can actually free them.
    free_memory()
    _say(f"out of memory at batch size {batch_size}; retrying with {smaller}")
    return False, smaller
