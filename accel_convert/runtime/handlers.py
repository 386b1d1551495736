"""Configuration objects that scripts pass to ``Accelerator(...)``, with Accelerate's names and defaults.

Each ``*Kwargs`` handler forwards the fields the user set (:meth:`KwargsHandler.to_kwargs`):
every field passed to the constructor or assigned afterwards, even at its default value, plus
any field whose value differs from the default. Fields the script never mentioned stay out, so
torch's defaults (and the runtime's own, such as DDP's static graph) apply to those only.
Accelerate instead forwards only values that differ from the defaults, which silently drops an
explicit ``DistributedDataParallelKwargs(static_graph=False)``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, TypeVar

from accel_convert.runtime.comm_hooks import DDPCommunicationHookType

_Handler = TypeVar("_Handler", bound="KwargsHandler")


class KwargsHandler:
    """Base of the ``kwargs_handlers=[...]`` dataclasses: one per class, forwards the fields set."""

    def __new__(cls: type[_Handler], *args: Any, **kwargs: Any) -> _Handler:  # noqa: PYI019 (Self is 3.11+)
        handler = super().__new__(cls)
        # The dataclass __init__ assigns every field once; what the caller passed is known only here.
        positional = [f.name for f in fields(cls)][: len(args)]  # type: ignore[arg-type]
        object.__setattr__(handler, "_explicit_fields", {*positional, *kwargs})
        return handler

    def __setattr__(self, name: str, value: Any) -> None:
        # A field assigned a second time was set by the script after construction.
        if name in self.__dict__:
            self.__dict__.setdefault("_explicit_fields", set()).add(name)
        super().__setattr__(name, value)

    def explicit_fields(self) -> set[str]:
        """The fields the script set, in the constructor or later, whatever their value."""
        return set(self.__dict__.get("_explicit_fields", ()))

    def to_kwargs(self) -> dict[str, Any]:
        """The fields the script set explicitly, and those whose value differs from the default."""
        default = self.__class__()
        explicit = self.explicit_fields()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if f.name in explicit or getattr(self, f.name) != getattr(default, f.name)
        }


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Keyword arguments for :class:`torch.nn.parallel.DistributedDataParallel`.

    Every field the script sets reaches DDP, also at its default value
    (``static_graph=False``, say). If neither ``find_unused_parameters`` nor ``static_graph`` is
    set, the runtime chooses how to handle unused parameters (see :mod:`runtime.ddp`).
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    #: See :mod:`runtime.comm_hooks` (fp16/bf16 compression, PowerSGD).
    comm_hook: DDPCommunicationHookType | str = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType | str = DDPCommunicationHookType.NO
    comm_state_option: dict = field(default_factory=dict)


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Keyword arguments for :class:`torch.amp.GradScaler` (fp16 only)."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Keyword arguments for :func:`torch.distributed.init_process_group` (backend, timeout...).

    ``backend="nccl"`` is the default and stays a default even when written out, as in
    Accelerate: the runtime then picks NCCL with GPUs and Gloo without, so a GPU script's handler
    still runs on a CPU machine. Any other backend is forwarded.
    """

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: timedelta | None = None

    def to_kwargs(self) -> dict[str, Any]:
        """As for every handler, except that ``backend="nccl"`` counts as not set (see above)."""
        kwargs = super().to_kwargs()
        if kwargs.get("backend") == "nccl":
            del kwargs["backend"]
        return kwargs


@dataclass
class AutocastKwargs(KwargsHandler):
    """Keyword arguments for :class:`torch.autocast` under mixed precision."""

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class DataLoaderConfiguration:
    """How ``prepare`` shards data loaders (Accelerate's ``DataLoaderConfiguration``).

    ``dispatch_batches`` and ``use_stateful_dataloader`` are accepted only at their defaults:
    the runtime always shards (every rank reads its own batches) and uses torch's DataLoader.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        if self.dispatch_batches:
            raise ValueError(
                "DataLoaderConfiguration(dispatch_batches=True) is not supported by runtime: "
                "every rank reads its own shard; drop the argument"
            )
        if self.use_stateful_dataloader:
            raise ValueError(
                "DataLoaderConfiguration(use_stateful_dataloader=True) is not supported by runtime; "
                "resume mid-epoch with accelerator.skip_first_batches(...)"
            )


@dataclass
class ProjectConfiguration:
    """Where checkpoints go and how they are named (Accelerate's ``ProjectConfiguration``)."""

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    def set_directories(self, project_dir: str | os.PathLike | None = None) -> None:
        """Point both ``project_dir`` and ``logging_dir`` at ``project_dir``."""
        self.project_dir = None if project_dir is None else os.fspath(project_dir)
        self.logging_dir = self.project_dir


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """Gradient accumulation settings (Accelerate's ``GradientAccumulationPlugin``).

    ``adjust_scheduler`` is accepted for compatibility; like Accelerate (whose ``to_kwargs`` drops
    the default), the scheduler is never stepped on non-sync steps.
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False


#: Handler classes accepted in ``kwargs_handlers=[...]``.
SUPPORTED_KWARGS_HANDLERS = (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    AutocastKwargs,
)
