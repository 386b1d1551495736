"""Who am I, how many of us are there, and which device do I train on?

``torchrun`` starts one process per worker and tells each one its place in environment variables:
``RANK`` (global index), ``WORLD_SIZE``, ``LOCAL_RANK`` (index on this machine),
``LOCAL_WORLD_SIZE``, and where rank 0 listens (``MASTER_ADDR``/``MASTER_PORT``). That is all a
process needs to join the *default process group*, through which every collective (all-reduce of
gradients, gathers of metrics, barriers) travels.

The backend follows the device: NCCL moves CUDA tensors between GPUs, Gloo moves CPU tensors.
Unlike Accelerate, a plain ``torchrun --nproc_per_node 2 script.py`` on a CPU-only machine gives
two real ranks over Gloo: no ``ACCELERATE_USE_CPU=1`` needed (Accelerate silently runs two
independent copies there).

Nothing here caches a ``ProcessGroup``: the default group may be destroyed and re-created between
OOM retries, so every collective asks ``torch.distributed`` for the current default group.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import os
import sys
import time
import weakref
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
import torch.distributed as dist

from accel_convert.runtime.job_failure import failure_seen, stop_watching, watch_for_failures


class DistributedType(str, Enum):
    """How the processes are connected (Accelerate's enum, same string values).

    This runtime only ever reports ``NO``, ``MULTI_CPU`` or ``MULTI_GPU``; the other members exist
    so that scripts comparing against them (``== DistributedType.DEEPSPEED``) run and get False.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


@dataclass(frozen=True)
class TorchrunEnvironment:
    """What ``torchrun`` (or any launcher following its conventions) told this process."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


@dataclass(frozen=True)
class ProcessState:
    """This process's place in the job, its device and its precision (``accelerator.state``)."""

    distributed_type: DistributedType
    num_processes: int
    process_index: int
    local_process_index: int
    device: torch.device
    backend: str | None
    mixed_precision: str = "no"

    @property
    def use_distributed(self) -> bool:
        """True when gradients and metrics must travel between processes."""
        return self.distributed_type != DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        """True on global rank 0."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """True on each machine's local rank 0."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """True on the last global rank."""
        return self.process_index == self.num_processes - 1


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def env_flag(name: str) -> bool:
    """An environment variable read as a boolean (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on", "y"}


def read_torchrun_environment() -> TorchrunEnvironment | None:
    """The launcher's variables, or None when this process was started by plain ``python``."""
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or world_size is None:
        return None
    local_rank = _env_int("LOCAL_RANK")
    local_world_size = _env_int("LOCAL_WORLD_SIZE")
    return TorchrunEnvironment(
        rank=rank,
        world_size=world_size,
        local_rank=rank if local_rank is None else local_rank,
        local_world_size=world_size if local_world_size is None else local_world_size,
    )


def wants_cpu(cpu: bool) -> bool:
    """``cpu=True``, or ``ACCELERATE_USE_CPU`` set (what ``accelerate launch --cpu`` exports)."""
    return cpu or env_flag("ACCELERATE_USE_CPU")


def tracer_fakes_cuda() -> bool:
    """True while ``accel-convert verify``'s tracer makes a machine without GPUs pretend to have
    them (:mod:`runtime.tracer`, ``ACCEL_CONVERT_TRACE_FAKE_CUDA=1``): the device is reported as
    ``cuda:LOCAL_RANK`` as on a GPU machine, but every tensor lives on the CPU, so the backend
    must stay Gloo. Read through ``sys.modules``: the runtime never imports the tracer itself."""
    tracer = sys.modules.get("accel_convert.runtime.tracer")
    return bool(getattr(tracer, "faking_cuda", False))


def default_backend(use_cuda: bool) -> str:
    """NCCL for GPUs, Gloo for CPU tensors (also for the tracer's pretended GPUs)."""
    return "nccl" if use_cuda and not tracer_fakes_cuda() else "gloo"


def ensure_process_group(backend: str, init_kwargs: dict[str, Any]) -> None:
    """Join the default process group once per process (env:// rendezvous from torchrun's variables).

    A group that already exists (created by an earlier ``Accelerator``, or by the script itself)
    is reused, as long as it does not contradict a backend the user asked for explicitly. Either
    way the runtime ends the group at exit: a group the script made and never destroyed would
    otherwise die in interpreter teardown, where Gloo's threads can abort the rank ("terminate
    called without an active exception") after a run that succeeded.
    """
    wanted = init_kwargs.get("backend")
    kwargs = {key: value for key, value in init_kwargs.items() if key != "backend"}
    if dist.is_initialized():
        current = dist.get_backend()
        if (wanted or backend) == "gloo" and current == "nccl" and _runtime_chose_backend():
            # cpu=True over the GPUs' group: NCCL cannot move the CPU tensors this process now
            # computes on. A group the runtime chose NCCL for itself (``PartialState()`` on import,
            # before the script's ``Accelerator(cpu=not args.cuda)``) is made again with Gloo:
            # every rank creates its Accelerator at the same point of the script.
            _make_default_group_again("gloo", kwargs)
        elif wanted is not None and wanted != current:
            raise ValueError(
                f"the default process group already uses backend {current!r}, cannot switch to "
                f"{wanted!r} in the same process"
            )
        elif backend == "gloo" and current == "nccl":
            raise ValueError(
                "cpu=True, but the default process group the script created uses 'nccl', which cannot "
                "move CPU tensors: create it with backend='gloo' (or 'cpu:gloo,cuda:nccl')"
            )
    else:
        _init_default_group(backend, wanted, kwargs)
    leave_group_at_exit()
    watch_for_failures()


#: The default group the runtime created with a backend of its own choice (no ``backend=`` asked
#: for), held weakly: a group the script made, or made again since, is not the runtime's to change.
_group_of_own_choice: weakref.ref[Any] | None = None


def _init_default_group(backend: str, wanted: str | None, init_kwargs: dict[str, Any]) -> None:
    global _group_of_own_choice
    dist.init_process_group(backend=wanted or backend, **init_kwargs)
    _group_of_own_choice = weakref.ref(dist.group.WORLD) if wanted is None else None


#: Where the remade group's ranks meet in torchrun's store: the first group's keys are still
#: there, and a group reading them would connect to its closed sockets.
_REMADE_GROUP_PREFIX = "accel_convert/default_group_remade"


def _make_default_group_again(backend: str, init_kwargs: dict[str, Any]) -> None:
    """Destroy the default group the runtime made and make it again with ``backend``, the same
    ranks meeting on a fresh prefix of the same store."""
    global _group_of_own_choice
    store = dist.distributed_c10d._get_default_store()
    store = getattr(store, "_underlying_non_prefix_store", store)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shut_down_process_group(release_models=False)
    options = {key: value for key, value in init_kwargs.items() if key not in ("init_method", "store")}
    options.update(rank=rank, world_size=world_size)
    dist.init_process_group(backend=backend, store=dist.PrefixStore(_REMADE_GROUP_PREFIX, store), **options)
    _group_of_own_choice = weakref.ref(dist.group.WORLD)


def _runtime_chose_backend() -> bool:
    """Whether the current default group is one the runtime created with the backend it chose."""
    group = dist.group.WORLD
    return group is not None and _group_of_own_choice is not None and _group_of_own_choice() is group


_leaving_at_exit = False


def leave_group_at_exit() -> None:
    """Register :func:`leave_process_group_at_exit` once per process."""
    global _leaving_at_exit
    if not _leaving_at_exit:
        atexit.register(leave_process_group_at_exit)
        _leaving_at_exit = True


#: How long a rank waits for the others at exit before leaving anyway.
EXIT_BARRIER_SECONDS = 10.0


def leave_process_group_at_exit() -> None:
    """Destroy the group we created before the interpreter tears down.

    After a clean run every rank meets in a bounded barrier first; after a failure (this rank's
    uncaught exception, or a peer's, see :mod:`runtime.job_failure`) nobody waits: the failing
    rank must exit at once so that the launcher stops the others.
    """
    try:
        if dist.is_initialized() and dist.get_backend() == "gloo" and not failure_seen():
            # Let every rank arrive before any closes its sockets: a peer that tears down while
            # this rank's Gloo threads still talk to it is the other way to die with "terminate
            # called". Bounded, so a rank that crashed costs the others seconds, not a hang.
            try:
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=EXIT_BARRIER_SECONDS))
            except RuntimeError:
                pass
        shut_down_process_group()
    finally:
        stop_watching()


#: Seconds the main thread lets go of the interpreter before destroying a Gloo group (see below).
GLOO_SETTLE_SECONDS = 0.05


def shut_down_process_group(release_models: bool = True) -> None:
    """Destroy the default group in an order that cannot deadlock (``end_training``, exit, OOM retry).

    The deadlock: a Gloo worker thread frees a finished work item (a barrier keeps earlier
    all-gathers alive until it is freed itself) whose tensors were created in Python; freeing such
    a tensor takes the GIL. If the main thread is then inside ``~ProcessGroupGloo``, joining that
    very worker while holding the GIL, neither moves. ``~ProcessGroupGloo`` runs wherever the last
    reference goes: a DDP reducer freed when the training function returns, or
    ``destroy_process_group``. So: (1) the runtime's own collectives keep their Python tensors
    referenced past any work item (:func:`runtime.collectives.keep_for_teardown`), so freeing
    those never needs the GIL; (2) every DDP reducer lets go of the group here, first, so that the
    group dies in ``destroy_process_group`` below and not at some later moment; (3) before that,
    the main thread sleeps briefly without the GIL, so a worker still freeing a work item of the
    script's own collectives can finish.

    ``release_models=False`` (the OOM retry's rebuild, where models prepared outside the retried
    function must stay usable objects) skips step (2).
    """
    from accel_convert.runtime.ddp import release_process_group_references

    if release_models:
        release_process_group_references()
    gc.collect()
    if not dist.is_initialized():
        return
    if dist.get_backend() == "gloo":
        time.sleep(GLOO_SETTLE_SECONDS)
    dist.destroy_process_group()


def pick_device(distributed: bool, local_rank: int, cpu: bool) -> torch.device:
    """``cuda:LOCAL_RANK`` with GPUs under a launcher, ``cuda``/``mps`` alone, else ``cpu``."""
    if not cpu and torch.cuda.is_available():
        if not distributed:
            return torch.device("cuda")
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    if not cpu and not distributed and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def detect_state(
    cpu: bool = False, init_kwargs: dict[str, Any] | None = None, mixed_precision: str = "no"
) -> ProcessState:
    """Read the environment, join the process group if launched with several ranks, pick the device.

    Safe to call many times: the group is created once and reused (or re-created if someone
    destroyed it since).
    """
    cpu = wants_cpu(cpu)
    use_cuda = not cpu and torch.cuda.is_available()
    env = read_torchrun_environment()
    if env is None and not dist.is_initialized():
        return ProcessState(DistributedType.NO, 1, 0, 0, pick_device(False, 0, cpu), None, mixed_precision)
    ensure_process_group(default_backend(use_cuda), dict(init_kwargs or {}))
    backend = dist.get_backend()
    local_rank = env.local_rank if env is not None else dist.get_rank()
    uses_gpu_backend = use_cuda and backend != "gloo"
    # Pretended GPUs (tracer_fakes_cuda): Gloo, yet the device reported is cuda:LOCAL_RANK.
    reports_gpu = uses_gpu_backend or (use_cuda and tracer_fakes_cuda())
    state = ProcessState(
        distributed_type=DistributedType.MULTI_GPU if uses_gpu_backend else DistributedType.MULTI_CPU,
        num_processes=dist.get_world_size(),
        process_index=dist.get_rank(),
        local_process_index=local_rank,
        device=pick_device(True, local_rank, not reports_gpu),
        backend=backend,
        mixed_precision=mixed_precision,
    )
    announce(state, env)
    return state


#: Set (to 1, true, yes, on) to keep the runtime's start-up line off stderr.
QUIET_VARIABLE = "ACCEL_CONVERT_QUIET"
_announced = False


def announce(state: ProcessState, env: TorchrunEnvironment | None) -> None:
    """Say once per job, on the main process, how it runs: ``accel_convert: 2 processes on 1 node,
    gloo, cpu`` on stderr (never on one process, nor with ``ACCEL_CONVERT_QUIET=1``). Once per
    process: a group re-created (an OOM retry) or a second Accelerator says nothing again."""
    global _announced
    if _announced or state.num_processes < 2:
        return
    _announced = True
    if state.process_index != 0 or env_flag(QUIET_VARIABLE):
        return
    per_node = env.local_world_size if env is not None and env.local_world_size > 0 else state.num_processes
    nodes = -(-state.num_processes // per_node)
    precision = f", {state.mixed_precision} mixed precision" if state.mixed_precision not in ("no", "") else ""
    print(
        f"accel_convert: {state.num_processes} processes on {nodes} node{'s' if nodes != 1 else ''}, "
        f"{state.backend}, {state.device.type}{precision}",
        file=sys.stderr,
        flush=True,
    )
