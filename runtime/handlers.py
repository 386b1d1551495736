"""Configuration objects that scripts pass to ``Accelerator(...)``, with Accelerate's names and defaults.

Each ``*Kwargs`` handler forwards only the fields the user changed (:meth:`KwargsHandler.to_kwargs`),
so torch's own defaults stay in charge of everything the script did not mention.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from runtime.comm_hooks import DDPCommunicationHookType


class KwargsHandler:
    """Base of the ``kwargs_handlers=[...]`` dataclasses: one per class, forwards non-default fields."""

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the dataclass default, as keyword arguments."""
        default = self.__class__()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != getattr(default, f.name)
        }


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Keyword arguments for :class:`torch.nn.parallel.DistributedDataParallel`.

    If neither ``find_unused_parameters`` nor ``static_graph`` is set, the runtime picks
    ``static_graph=True`` (see :mod:`runtime.ddp` for why).
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
    """Keyword arguments for :func:`torch.distributed.init_process_group` (backend, timeout...)."""

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: timedelta | None = None


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
