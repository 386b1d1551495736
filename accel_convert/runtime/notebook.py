"""``notebook_launcher``: start a training function on several processes from a notebook cell.

Accelerate's API (``notebook_launcher(function, args=(), num_processes=None, ...)``), written on
``torch.multiprocessing``. The workers are *forked* from the notebook's kernel: a function defined
in a cell lives in the kernel's ``__main__``, which a spawned (fresh) interpreter cannot import,
while a forked child inherits it as it is. Each worker gets the variables ``torchrun`` would set
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...), so the ``Accelerator`` created
*inside* the function joins the process group as under ``accel-launch``: NCCL on GPUs, Gloo on CPU.

Forking has one rule, Accelerate's too: nothing may have touched the GPU in the kernel before
the launch (CUDA cannot be used in a child forked after CUDA was initialised). That, and an
``Accelerator`` created in the kernel (its state would be copied into every worker as a
single-process one), are refused with a message saying what to change, before anything starts.

Restarts (``max_restarts``), as torchrun's elastic agent does them: when a worker fails, every
worker of this node is stopped and the whole group is forked again, with
``TORCHELASTIC_RESTART_COUNT`` telling the function which attempt it is (a script resumes from
its last checkpoint), until the restarts are spent. Accelerate's other elastic options
(``rdzv_backend``, ``rdzv_conf``, ``rdzv_id``) are accepted and have no effect: forked workers
always meet at ``master_addr:use_port`` (a static rendezvous); ``rdzv_endpoint`` given as
``HOST:PORT`` is that address. The rendezvous store lives in the notebook's process, as under
torchrun it lives in the agent (:func:`rendezvous_store`).
"""

from __future__ import annotations

import os
import string
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.multiprocessing as torch_mp

#: What the message says to do when the GPU was used before the launch.
CUDA_ALREADY_INITIALISED = (
    "notebook_launcher: CUDA was already initialised in this notebook's process (a cell used the GPU: "
    ".cuda(), .to('cuda'), torch.cuda.* calls, or a library that touches the GPU when imported), and "
    "processes forked after that cannot use CUDA. Restart the kernel and keep every GPU use inside the "
    "training function; only define things in the other cells."
)

ACCELERATOR_ALREADY_CREATED = (
    "notebook_launcher: an Accelerator (or PartialState) was already created in this notebook's process; "
    "each worker would inherit it as a single-process one. Restart the kernel and create the Accelerator "
    "inside the training function only."
)

PROCESS_GROUP_ALREADY_JOINED = (
    "notebook_launcher: this notebook's process already joined a torch.distributed process group; "
    "restart the kernel and leave torch.distributed.init_process_group to the training function."
)


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str | int = "29500",
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> None:
    """Run ``function(*args)`` on ``num_processes`` processes (on each of ``num_nodes`` machines).

    ``num_processes`` defaults to the number of GPUs; without a GPU it must be given (CPU workers
    train with Gloo). With 1 (or 1 GPU and no count given), ``function`` runs right here in the
    notebook's process. ``mixed_precision`` (``"no"``, ``"fp16"``, ``"bf16"``) is what every
    ``Accelerator()`` created in the workers uses when it is not told otherwise. ``use_port`` and
    ``master_addr`` are where rank 0 waits for the others (the same on every node).

    A worker that raises ends the launch: the others are stopped and a ``RuntimeError`` carrying
    the worker's traceback is raised here; with ``max_restarts=k`` the workers are first started
    again up to ``k`` times (see the module's doc). ``monitor_interval``: seconds between two
    checks of the workers. ``log_line_prefix_template`` (torchrun's, e.g. ``"[${rank}]: "``;
    ``${rank}``, ``${local_rank}``, ``${role_name}``) starts every line a worker prints.
    ``rdzv_endpoint="HOST:PORT"`` replaces ``master_addr``/``use_port``; ``rdzv_backend``,
    ``rdzv_conf`` and ``rdzv_id`` have no effect (a static rendezvous).
    """
    from accel_convert.runtime.precision import resolve_mixed_precision

    mixed_precision = resolve_mixed_precision(mixed_precision)
    if num_nodes < 1 or not 0 <= node_rank < num_nodes:
        raise ValueError(f"notebook_launcher: node_rank={node_rank} must be in [0, num_nodes={num_nodes})")
    if num_processes is None:
        num_processes = gpu_count_without_initialising_cuda()
        if num_processes == 0:
            raise ValueError("notebook_launcher: no GPU found; pass num_processes=N to train on N CPU processes (Gloo)")
    if num_processes < 1:
        raise ValueError(f"notebook_launcher: num_processes={num_processes} must be at least 1")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"notebook_launcher: max_restarts={max_restarts!r} must be a whole number >= 0")
    if not monitor_interval > 0:
        raise ValueError(
            f"notebook_launcher: monitor_interval={monitor_interval!r} must be a positive number of seconds"
        )
    if rdzv_endpoint:
        master_addr, use_port = _endpoint(rdzv_endpoint)

    if num_processes == 1 and num_nodes == 1:
        device = "GPU" if gpu_count_without_initialising_cuda() else "CPU"
        print(f"Launching training on one {device}.")
        with environment({"ACCELERATE_MIXED_PRECISION": mixed_precision}):
            function(*args)
        return

    refuse_unforkable_state()
    world_size = num_processes * num_nodes
    variables = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(use_port),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(num_processes),
        "GROUP_RANK": str(node_rank),
        "NODE_RANK": str(node_rank),
        "ACCELERATE_MIXED_PRECISION": mixed_precision,
    }
    device = "GPU" if gpu_count_without_initialising_cuda() else "CPU"
    print(
        f"Launching training on {num_processes} {device}s"
        + (f" on each of {num_nodes} nodes." if num_nodes > 1 else ".")
    )
    if log_line_prefix_template:
        variables[_PREFIX_VARIABLE] = log_line_prefix_template
    for restart in range(max_restarts + 1):
        variables.update(TORCHELASTIC_RESTART_COUNT=str(restart), TORCHELASTIC_MAX_RESTARTS=str(max_restarts))
        try:
            with rendezvous_store(node_rank, master_addr, use_port, world_size, variables):
                run_forked(function, args, num_processes, node_rank * num_processes, variables, monitor_interval)
            return
        except WorkerFailed as failure:
            if restart == max_restarts:
                raise
            print(f"notebook_launcher: {failure.summary}; restarting the workers ({restart + 1} of {max_restarts})")


@contextmanager
def rendezvous_store(
    node_rank: int, host: str, port: str | int, world_size: int, variables: dict[str, str]
) -> Iterator[None]:
    """Host the workers' TCPStore here, in the kernel, for one attempt, as torchrun's agent does.

    Hosted by rank 0 (what ``init_process_group`` does by default), the store would end with
    rank 0's process: a rank still reading a barrier's last key when rank 0 returns from the
    function would lose its connection. ``TORCHELASTIC_USE_AGENT_STORE`` makes every worker a
    client of this one, which outlives them all; a fresh store per attempt starts every restart
    with no keys left from the failed one. Other nodes' workers connect to node 0's."""
    if node_rank != 0:
        yield
        return
    store = torch.distributed.TCPStore(host, int(port), world_size, is_master=True, wait_for_workers=False)
    variables["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    try:
        yield
    finally:
        del store  # closes the port for the next attempt


def _endpoint(endpoint: str) -> tuple[str, str]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"notebook_launcher: rdzv_endpoint={endpoint!r}: expected HOST:PORT")
    return host, port


class WorkerFailed(RuntimeError):
    """A worker raised or died; ``summary`` is the one-line reason (the message adds its traceback)."""

    def __init__(self, message: str, summary: str) -> None:
        super().__init__(message)
        self.summary = summary


def gpu_count_without_initialising_cuda() -> int:
    """How many GPUs there are, asked through NVML so that CUDA stays uninitialised here (a
    forked worker could not use it otherwise)."""
    with environment({"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}):
        return torch.cuda.device_count() if torch.cuda.is_available() else 0


def refuse_unforkable_state() -> None:
    """Raise before forking when the kernel holds what a forked worker cannot use."""
    if torch.cuda.is_initialized():
        raise RuntimeError(CUDA_ALREADY_INITIALISED)
    from accel_convert.runtime.state_objects import AcceleratorState, PartialState

    if PartialState._shared_state or AcceleratorState._shared_state:
        raise RuntimeError(ACCELERATOR_ALREADY_CREATED)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise RuntimeError(PROCESS_GROUP_ALREADY_JOINED)


def run_forked(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    count: int,
    first_rank: int,
    variables: Mapping[str, str],
    monitor_interval: float = 0.1,
) -> None:
    """Fork ``count`` workers and wait for all of them, looking every ``monitor_interval``
    seconds; stop the rest when one fails or the cell is interrupted, so that no worker is left
    waiting in a collective for a dead peer."""
    context = torch_mp.start_processes(
        _worker, args=(function, args, first_rank, dict(variables)), nprocs=count, join=False, start_method="fork"
    )
    try:
        while not context.join(timeout=monitor_interval):
            pass
    except torch_mp.ProcessRaisedException as error:
        if "Cannot re-initialize CUDA in forked subprocess" in str(error):
            raise RuntimeError(CUDA_ALREADY_INITIALISED) from None  # a restart would fail the same way
        raise WorkerFailed(
            f"notebook_launcher: a worker failed:\n{error}", f"worker {error.error_index} raised"
        ) from None
    except torch_mp.ProcessExitedException as error:
        raise WorkerFailed(f"notebook_launcher: {error}", f"worker {error.error_index} exited") from None
    finally:
        stop_workers(context.processes)


def stop_workers(processes: list[Any], grace_s: float = 5.0) -> None:
    """Terminate the workers still running, then kill those that ignore it."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(grace_s)
        if process.is_alive():
            process.kill()
            process.join()


def _worker(
    local_rank: int, function: Callable[..., Any], args: tuple[Any, ...], first_rank: int, variables: dict[str, str]
) -> None:
    """One forked worker: torchrun's variables for this rank, then the user's function."""
    os.environ.update(variables)
    os.environ["RANK"] = str(first_rank + local_rank)
    os.environ["LOCAL_RANK"] = str(local_rank)
    if "OMP_NUM_THREADS" not in os.environ and int(variables["LOCAL_WORLD_SIZE"]) > 1:
        # As torchrun does: several workers each using every core only fight over them.
        torch.set_num_threads(1)
    template = variables.get(_PREFIX_VARIABLE)
    if template:
        prefix = string.Template(template).safe_substitute(
            rank=os.environ["RANK"], local_rank=str(local_rank), role_name="default"
        )
        sys.stdout, sys.stderr = _Prefixed(sys.stdout, prefix), _Prefixed(sys.stderr, prefix)
    try:
        function(*args)
    finally:
        # A forked child leaves through os._exit: flush what the function printed (in a notebook,
        # the kernel forwards it to the cell's output).
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass


_PREFIX_VARIABLE = "ACCEL_NOTEBOOK_LOG_PREFIX"


class _Prefixed:
    """A text stream that starts each line written to it with ``prefix`` (torchrun's
    ``--log-line-prefix-template``, for the forked workers' shared output)."""

    def __init__(self, stream: Any, prefix: str) -> None:
        self._stream, self._prefix, self._at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        for line in text.splitlines(keepends=True):
            self._stream.write(self._prefix + line if self._at_line_start else line)
            self._at_line_start = line.endswith("\n")
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding...: the stream's own
        return getattr(self._stream, name)


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore the previous ones."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
