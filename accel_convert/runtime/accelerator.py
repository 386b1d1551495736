"""The ``Accelerator`` facade: Accelerate's API for the parts training scripts use, on torch.distributed.

A converted script does four things with it, and each maps to a small piece of this package:

1. ``Accelerator(...)`` reads the launcher's environment and joins the process group
   (:mod:`runtime.state`).
2. ``prepare(model, optimizer, loader, scheduler)`` moves the model to the device and wraps it in
   DDP (:mod:`runtime.ddp`), wraps optimizer and scheduler (:mod:`runtime.wrappers`), and shards
   the loader (:mod:`runtime.data`).
3. In the loop, ``backward`` scales the loss for accumulation/fp16, ``accumulate`` skips the
   gradient all-reduce on non-sync steps, ``clip_grad_norm_`` unscales first
   (:mod:`runtime.precision`).
4. In evaluation, ``gather_for_metrics`` collects every rank's predictions and drops the
   duplicates even batching added (:mod:`runtime.collectives`).

Deliberate differences from Accelerate are listed in the docstrings where they happen:
``split_batches=`` is honoured, fp16 on CPU really runs, DDP handles unused parameters by itself,
``save`` writes atomically, and unsupported options raise instead of being ignored.
"""

from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.utils.data import DataLoader

from accel_convert.runtime import collectives, fsdp, operations, precision
from accel_convert.runtime.comm_hooks import register_comm_hook
from accel_convert.runtime.ddp import as_forward, confirm_strategies, wrap_in_ddp
from accel_convert.runtime.fsdp import FullyShardedDataParallelPlugin
from accel_convert.runtime.gradient_state import GradientState
from accel_convert.runtime.handlers import (
    SUPPORTED_KWARGS_HANDLERS,
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProjectConfiguration,
)
from accel_convert.runtime.profiling import ProfileKwargs, profile_block
from accel_convert.runtime.state import DistributedType, detect_state
from accel_convert.runtime.state_objects import AcceleratorState, ProcessGuards
from accel_convert.runtime.wrappers import AcceleratedOptimizer, AcceleratedScheduler

_NOT_SET: Any = object()

#: Accelerate constructor arguments for engines this runtime does not provide.
_UNSUPPORTED_ENGINES = (
    "deepspeed_plugin",
    "torch_tp_plugin",
    "megatron_lm_plugin",
    "dynamo_plugin",
    "deepspeed_plugins",
    "parallelism_config",
)


#: Handler classes ``kwargs_handlers=[...]`` accepts.
_ACCEPTED_HANDLERS = (*SUPPORTED_KWARGS_HANDLERS, ProfileKwargs)


def _collect_handlers(kwargs_handlers: Sequence[KwargsHandler] | None) -> dict[type, KwargsHandler]:
    """One handler per class, each of a kind we support."""
    found: dict[type, KwargsHandler] = {}
    for handler in kwargs_handlers or []:
        if not isinstance(handler, _ACCEPTED_HANDLERS):
            names = ", ".join(cls.__name__ for cls in _ACCEPTED_HANDLERS)
            raise ValueError(f"kwargs_handlers: {handler!r} is not supported by runtime (supported: {names})")
        if type(handler) in found:
            raise ValueError(f"kwargs_handlers: you can only pass one {type(handler).__name__}")
        found[type(handler)] = handler
    return found


def _accumulation_plugin(steps: int, plugin: GradientAccumulationPlugin | None) -> GradientAccumulationPlugin:
    """The plugin, built from ``gradient_accumulation_steps`` (or the launcher's env var) if absent."""
    if plugin is not None:
        if steps != 1:
            raise ValueError("pass either gradient_accumulation_steps or gradient_accumulation_plugin, not both")
        if plugin.num_steps is None:
            raise ValueError("GradientAccumulationPlugin(num_steps=...) is required")
        return plugin
    steps = int(os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", steps))
    if steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {steps}")
    return GradientAccumulationPlugin(num_steps=steps)


def _data_config(
    config: DataLoaderConfiguration | None, split_batches: Any, even_batches: Any, dispatch_batches: Any
) -> DataLoaderConfiguration:
    """Merge the legacy ``split_batches=``/``even_batches=`` arguments into one configuration.

    Accelerate ignores ``Accelerator(split_batches=True)`` since 1.0; we honour it.
    """
    legacy = {
        name: value
        for name, value in (
            ("split_batches", split_batches),
            ("even_batches", even_batches),
            ("dispatch_batches", dispatch_batches),
        )
        if value is not _NOT_SET
    }
    if config is not None and legacy:
        raise ValueError(
            f"pass {', '.join(legacy)} inside dataloader_config=DataLoaderConfiguration(...), not next to it"
        )
    return config if config is not None else DataLoaderConfiguration(**legacy)


def _check_log_with(log_with: Any) -> None:
    if log_with not in (None, [], (), ""):
        raise ValueError(
            f"log_with={log_with!r}: experiment trackers are not supported by runtime; "
            "log from `if accelerator.is_main_process:` with the tracker's own API"
        )


@dataclass(frozen=True)
class PreparedObjects:
    """What an Accelerator has prepared or registered, in preparation order (what ``save_state``
    writes and ``load_state`` restores, one file per object)."""

    models: tuple[torch.nn.Module, ...]
    optimizers: tuple[AcceleratedOptimizer, ...]
    schedulers: tuple[AcceleratedScheduler, ...]
    dataloaders: tuple[DataLoader, ...]
    #: Objects passed to ``register_for_checkpointing``.
    custom_objects: tuple[Any, ...]


#: What ``prepare`` returned, remembered beside the objects rather than on them: on one process
#: the prepared model is the script's own module, and a flag in its ``__dict__`` would travel into
#: every ``torch.save(model)`` (the file would then differ from what the original script writes).
_prepared_objects: weakref.WeakSet[Any] = weakref.WeakSet()


def _mark_prepared(obj: Any) -> Any:
    try:
        _prepared_objects.add(obj)
    except TypeError:  # not weakly referable, or unhashable: the flag Accelerate sets instead
        try:
            obj._is_accelerate_prepared = True
        except AttributeError:  # objects with __slots__: nothing to remember the flag on
            pass
    return obj


def _is_prepared(obj: Any) -> bool:
    """Returned by ``prepare`` already (ours, or flagged the way Accelerate flags its objects)."""
    try:
        if obj in _prepared_objects:
            return True
    except TypeError:
        pass
    return bool(getattr(obj, "_is_accelerate_prepared", False))


class Accelerator(ProcessGuards):
    """Distributed training in a few calls: ``prepare`` the objects, ``backward`` the loss, and
    ``gather_for_metrics`` the predictions. Same constructor arguments as Accelerate's for
    DDP/CPU training; anything this runtime cannot honour raises a ``ValueError`` (unknown
    names a ``TypeError``).

    Args:
        device_placement: move prepared models and batches to ``accelerator.device``.
        split_batches: cut each batch across ranks instead of giving each rank whole batches
            (honoured here; Accelerate 1.x ignores this argument).
        mixed_precision: ``"no"``, ``"fp16"`` or ``"bf16"``; None reads ``ACCELERATE_MIXED_PRECISION``.
        gradient_accumulation_steps: batches per optimizer step under ``accumulate()``.
        cpu: use the CPU (and Gloo) even when a GPU is present (also ``ACCELERATE_USE_CPU=1``).
        dataloader_config: a :class:`DataLoaderConfiguration` (split/even batches, seedable sampler).
        rng_types: RNGs made equal to rank 0's at each epoch start (default ``["generator"]``).
        log_with: must be None: experiment trackers are not part of this runtime.
        project_dir / project_config: where ``save_state`` puts checkpoints.
        gradient_accumulation_plugin: alternative to ``gradient_accumulation_steps``.
        step_scheduler_with_optimizer: advance prepared schedulers with optimizer steps
            (``num_processes`` times each); False steps them once per call.
        kwargs_handlers: at most one each of DistributedDataParallelKwargs, GradScalerKwargs,
            InitProcessGroupKwargs, AutocastKwargs.
        fsdp_plugin: a :class:`~runtime.fsdp.FullyShardedDataParallelPlugin`: shard models with
            FSDP2 instead of replicating them with DDP (also ``ACCELERATE_USE_FSDP=true``, which
            ``accel-launch --fsdp`` sets). Applies when launched (torchrun), on any number of ranks.
        even_batches / dispatch_batches: pre-1.0 spellings of the DataLoaderConfiguration fields.
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = _NOT_SET,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        rng_types: list[str] | None = None,
        log_with: Any = None,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list[KwargsHandler] | None = None,
        dynamo_backend: str | None = None,
        even_batches: bool = _NOT_SET,
        dispatch_batches: bool | None = _NOT_SET,
        fsdp_plugin: FullyShardedDataParallelPlugin | None = None,
        **unsupported: Any,
    ) -> None:
        self._reject_unsupported(unsupported, dynamo_backend)
        _check_log_with(log_with)
        handlers = _collect_handlers(kwargs_handlers)
        self.ddp_handler = handlers.get(DistributedDataParallelKwargs)
        self.scaler_handler = handlers.get(GradScalerKwargs)
        self.init_handler = handlers.get(InitProcessGroupKwargs)
        self.autocast_handler = handlers.get(AutocastKwargs)
        self.profile_handler = handlers.get(ProfileKwargs)
        self.dataloader_config = _data_config(dataloader_config, split_batches, even_batches, dispatch_batches)
        self.project_configuration = project_config or ProjectConfiguration(project_dir=project_dir)
        if project_dir is not None and project_config is not None:
            self.project_configuration.set_directories(project_dir)

        mixed = precision.resolve_mixed_precision(mixed_precision)
        init_kwargs = self.init_handler.to_kwargs() if self.init_handler else {}
        # The process-wide state (AcceleratorState()/PartialState() elsewhere see the same facts);
        # this Accelerator computes with its own mixed precision whatever a later one sets there.
        self.state = AcceleratorState._for_accelerator(
            detect_state(cpu=cpu, init_kwargs=init_kwargs, mixed_precision=mixed)
        )
        self._mixed_precision = mixed
        self._use_fsdp(fsdp_plugin if fsdp_plugin is not None else fsdp.plugin_from_environment())
        precision.check_device_supports(mixed, self.state.device)
        scaler_kwargs = self.scaler_handler.to_kwargs() if self.scaler_handler else {}
        self.scaler = precision.make_grad_scaler(mixed, self.state.device, scaler_kwargs)
        self.native_amp = mixed != "no"

        plugin = _accumulation_plugin(gradient_accumulation_steps, gradient_accumulation_plugin)
        self.gradient_state = GradientState(
            num_steps=plugin.num_steps,
            sync_with_dataloader=plugin.sync_with_dataloader,
            sync_each_batch=plugin.sync_each_batch,
        )
        from accel_convert.runtime.data_loader import adopt_gradient_state

        adopt_gradient_state(self.gradient_state)  # loaders from the functional prepare_data_loader report here

        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = ["generator"] if rng_types is None else list(rng_types)
        self.step = 0
        self.flag_tensor: torch.Tensor | None = None
        self._models: list[torch.nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[DataLoader] = []
        self._custom_objects: list[Any] = []

    def _use_fsdp(self, plugin: FullyShardedDataParallelPlugin | None) -> None:
        """Remember the FSDP plugin; under a launcher, report ``DistributedType.FSDP`` as Accelerate.

        On one process without a launcher there is nothing to shard across: the plugin is kept
        but models are prepared as without it.
        """
        if plugin is not None and not isinstance(plugin, FullyShardedDataParallelPlugin):
            raise ValueError(f"fsdp_plugin must be a FullyShardedDataParallelPlugin, got {type(plugin).__name__}")
        self.fsdp_plugin = plugin
        self._parameter_swaps = fsdp.ParameterSwaps()
        if plugin is not None and self.state.distributed_type != DistributedType.NO:
            self.state.distributed_type = DistributedType.FSDP
            self.state.fsdp_plugin = plugin

    @property
    def is_fsdp2(self) -> bool:
        """True when prepared models are sharded with FSDP2."""
        return self.state.distributed_type == DistributedType.FSDP

    @staticmethod
    def _reject_unsupported(unsupported: dict[str, Any], dynamo_backend: str | None) -> None:
        if dynamo_backend not in (None, "no", "NO"):
            raise ValueError(
                f"dynamo_backend={dynamo_backend!r} is not supported by runtime; "
                "call torch.compile on the model yourself"
            )
        engines = {name: value for name, value in unsupported.items() if name in _UNSUPPORTED_ENGINES}
        for name, value in engines.items():
            if value is not None:
                raise ValueError(f"Accelerator({name}=...) is not supported by runtime (DDP only)")
        unknown = sorted(set(unsupported) - set(_UNSUPPORTED_ENGINES))
        if unknown:
            raise TypeError(f"Accelerator() got unknown argument(s): {', '.join(unknown)}")

    # ------------------------------------------------------------------ where am I
    @property
    def device(self) -> torch.device:
        """The device this process trains on (``cuda:LOCAL_RANK``, ``cuda``, ``mps`` or ``cpu``)."""
        return self.state.device

    @property
    def distributed_type(self) -> DistributedType:
        """``NO`` (one process), ``MULTI_CPU`` (Gloo) or ``MULTI_GPU`` (NCCL)."""
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        """How many processes train together (the world size)."""
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        """This process's global rank, 0 .. num_processes - 1."""
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        """This process's rank on its machine (``LOCAL_RANK``)."""
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        """True on global rank 0 (write files, print summaries here)."""
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """True on each machine's local rank 0."""
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """True on the last global rank."""
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        """True when more than one process trains together."""
        return self.state.use_distributed

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"`` or ``"bf16"``."""
        return self._mixed_precision

    @property
    def multi_device(self) -> bool:
        """True when several processes train together through DDP (on GPUs or CPUs)."""
        return self.use_distributed and self.distributed_type in (DistributedType.MULTI_GPU, DistributedType.MULTI_CPU)

    @property
    def non_blocking(self) -> bool:
        """Whether prepared loaders move batches with ``non_blocking=True`` (DataLoaderConfiguration);
        it only overlaps the copy with compute for pinned memory (``DataLoader(pin_memory=True)``)."""
        return self.dataloader_config.non_blocking

    @property
    def split_batches(self) -> bool:
        """True when each batch is cut across ranks (see DataLoaderConfiguration)."""
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        """True when the last round of batches is completed from the start (equal steps per rank)."""
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def project_dir(self) -> str | None:
        """Base folder of checkpoints (``ProjectConfiguration.project_dir``)."""
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        """Logging folder (``ProjectConfiguration.logging_dir``)."""
        return self.project_configuration.logging_dir

    # ------------------------------------------------------------------ prepare
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, schedulers and data loaders; return them in the same order.

        Loaders, models and optimizers are prepared first, then schedulers (they need the wrapped
        optimizers). Other objects pass through unchanged; one argument returns one object.
        Preparing an already prepared object returns it unchanged.
        """
        if device_placement is None:
            device_placement = [None] * len(args)
        elif len(device_placement) != len(args):
            raise ValueError(f"device_placement has {len(device_placement)} entries for {len(args)} objects")
        first = [self._prepare_one(obj, placement, schedulers=False) for obj, placement in zip(args, device_placement)]
        result = tuple(
            self._prepare_one(obj, placement, schedulers=True) for obj, placement in zip(first, device_placement)
        )
        return result[0] if len(result) == 1 else result

    def _prepare_one(self, obj: Any, placement: bool | None, *, schedulers: bool) -> Any:
        if _is_prepared(obj):
            return obj
        if schedulers:
            if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
                return self.prepare_scheduler(obj)
            return obj
        if isinstance(obj, DataLoader):
            return self.prepare_data_loader(obj, device_placement=placement)
        if isinstance(obj, torch.nn.Module):
            return self.prepare_model(obj, device_placement=placement)
        if isinstance(obj, torch.optim.Optimizer):
            return self.prepare_optimizer(obj, device_placement=placement)
        return obj

    def prepare_model(
        self, model: torch.nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> torch.nn.Module:
        """Autocast the forward (mixed precision), move to the device, wrap in DDP when distributed.

        ``evaluation_mode=True`` skips DDP (inference needs no gradient reduction).
        """
        if _is_prepared(model):
            return model
        placement = self.device_placement if device_placement is None else device_placement
        self._models.append(model)
        if self.native_amp:
            precision.patch_forward(model, self.autocast)
        if self.is_fsdp2 and not evaluation_mode:
            return _mark_prepared(self._shard(model))
        if placement:
            model.to(self.device)
        wants_ddp = self.use_distributed and not evaluation_mode
        if wants_ddp and any(param.requires_grad for param in model.parameters()):
            user_kwargs = self.ddp_handler.to_kwargs() if self.ddp_handler else {}
            model = wrap_in_ddp(model, self.device, user_kwargs)
            handler = (
                self.ddp_handler
                if isinstance(self.ddp_handler, DistributedDataParallelKwargs)
                else DistributedDataParallelKwargs()
            )
            register_comm_hook(model, handler.comm_hook, handler.comm_wrapper, handler.comm_state_option)
        return _mark_prepared(model)

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        """FSDP2 instead of DDP (runtime.fsdp); optimizers already prepared on the original
        parameters are re-pointed to the shards (those prepared later are, in prepare_optimizer)."""
        assert self.fsdp_plugin is not None
        before = self._parameter_swaps.names_of(model)
        fsdp.shard_model(model, self.fsdp_plugin, self.mixed_precision, self.device)
        self._parameter_swaps.record(before, model)
        for optimizer in self._optimizers:
            self._parameter_swaps.repoint(optimizer.optimizer)
        return model

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        """Wrap so that ``step``/``zero_grad`` act only on sync steps (and go through the GradScaler)."""
        if _is_prepared(optimizer):
            return optimizer  # type: ignore[return-value]
        if self.is_fsdp2:  # built on parameters a sharded model replaced: update the shards instead
            self._parameter_swaps.repoint(optimizer)
        placement = self.device_placement if device_placement is None else device_placement
        wrapped = AcceleratedOptimizer(optimizer, self.gradient_state, self.scaler, move_state=placement)
        self._optimizers.append(wrapped)
        return _mark_prepared(wrapped)

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap so that the schedule advances with real optimizer steps (``num_processes`` times each)."""
        if _is_prepared(scheduler):
            return scheduler
        inner = getattr(scheduler, "optimizer", None)
        mine = [opt for opt in self._optimizers if inner is opt or inner is opt.optimizer]
        wrapped = AcceleratedScheduler(
            scheduler,
            mine or list(self._optimizers),
            self.gradient_state,
            self.num_processes,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            split_batches=self.split_batches,
        )
        self._schedulers.append(wrapped)
        return _mark_prepared(wrapped)

    def prepare_data_loader(
        self, data_loader: DataLoader, device_placement: bool | None = None, slice_fn_for_dispatch: Any = None
    ) -> DataLoader:
        """Shard the loader: this rank's batches, moved to the device, end-of-epoch bookkeeping."""
        from accel_convert.runtime.data import prepare_data_loader

        if _is_prepared(data_loader):
            return data_loader
        placement = self.device_placement if device_placement is None else device_placement
        config = self.dataloader_config
        prepared = prepare_data_loader(
            data_loader,
            device=self.device if placement else None,
            num_processes=self.num_processes,
            process_index=self.process_index,
            split_batches=config.split_batches,
            even_batches=config.even_batches,
            gradient_state=self.gradient_state,
            rng_types=list(self.rng_types),
            non_blocking=config.non_blocking,
            use_seedable_sampler=config.use_seedable_sampler,
            data_seed=config.data_seed,
        )
        self._dataloaders.append(prepared)
        return _mark_prepared(prepared)

    def skip_first_batches(self, dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
        """A loader that resumes mid-epoch: the first ``num_batches`` (per-rank) batches are skipped."""
        from accel_convert.runtime.data import skip_first_batches

        return skip_first_batches(dataloader, num_batches)

    # ------------------------------------------------------------------ training step
    @property
    def sync_gradients(self) -> bool:
        """True when this step's gradients are complete: reduce them and step the optimizer."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step under ``accumulate()`` (writable)."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.num_steps = steps

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by the accumulation steps (always, as Accelerate) and scaled
        by the GradScaler under fp16."""
        if self.gradient_accumulation_steps != 1:  # x / 1 == x exactly: spare the autograd node
            loss = loss / self.gradient_accumulation_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        confirm_strategies(loss)
        loss.backward(**kwargs)

    def _advance_accumulation(self) -> None:
        # ``self.step`` counts batches since the last sync (Accelerate's counter, saved in
        # checkpoints); a loader's last batch always syncs, so no partial gradient leaks into
        # the next epoch.
        state = self.gradient_state
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.step = 0
            state.sync_gradients = True
        else:
            self.step += 1
            state.sync_gradients = self.step % state.num_steps == 0
        state.step = self.step

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """One batch of gradient accumulation: sets ``sync_gradients`` and, on non-sync steps,
        skips DDP's all-reduce for ``models`` (their gradients just add up locally)."""
        self._advance_accumulation()
        skip_reduce = not self.sync_gradients and not (self.use_distributed and self.gradient_state.sync_each_batch)
        with contextlib.ExitStack() as stack:
            if skip_reduce:
                for model in models:
                    stack.enter_context(self.no_sync(model))
            yield

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module) -> Iterator[None]:
        """DDP's ``no_sync`` for a prepared model when distributed (FSDP: no reduce-scatter);
        nothing otherwise."""
        if fsdp.is_sharded(model):
            with fsdp.gradient_sync_paused(model):
                yield
        elif self.use_distributed and isinstance(model, DistributedDataParallel):
            with model.no_sync():
                yield
        else:
            yield

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: torch.nn.Module) -> Iterator[None]:
        """Make the next ``backward`` all-reduce ``model``'s gradients even though its forward ran
        inside ``no_sync()`` (several forwards, then several backwards, syncing on the last)."""
        if not (self.use_distributed and isinstance(model, DistributedDataParallel)):
            yield
            return
        saved = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = model.require_forward_param_sync = True
        # The reducer was told "no sync" at forward time; prepare it for a reducing backward now.
        model.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = saved

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Train on loaders whose ranks get different numbers of batches (torch's ``Join``): a
        rank that runs out shadows the others' collectives until all are done.

        ``even_batches`` overrides the prepared map-style loaders' setting inside the block
        (``False`` is what makes their lengths uneven); Join is only enabled when batches are
        uneven. Unlike Accelerate, this also works on several CPU processes (Gloo).
        """
        if not self.multi_device:
            if self.distributed_type != DistributedType.NO:
                warnings.warn(
                    "Joining uneven inputs is only supported for multi-GPU/multi-CPU DDP training "
                    f"(here: {getattr(self.distributed_type, 'value', self.distributed_type)}); "
                    "join_uneven_inputs has no effect",
                    stacklevel=2,
                )
            yield
            return
        from torch.distributed.algorithms.join import Join

        overridden: list[tuple[Any, bool]] = []
        if even_batches is not None:
            saw_iterable = False
            for loader in self._dataloaders:
                sampler: Any = getattr(loader, "batch_sampler", None)
                if not hasattr(sampler, "even_batches"):
                    saw_iterable = True
                    continue
                overridden.append((sampler, sampler.even_batches))
                sampler.even_batches = even_batches
            if saw_iterable:
                warnings.warn(
                    "Overriding even_batches is only supported for map-style datasets, yet some "
                    "dataloaders given were iterable",
                    stacklevel=2,
                )
        else:
            even_batches = self.even_batches
        try:
            with Join(joinables, enable=not even_batches, throw_on_early_termination=False):
                yield
        finally:
            for sampler, value in overridden:
                sampler.even_batches = value

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[torch.profiler.profile]:
        """Profile the block with torch.profiler (``ProfileKwargs`` from the argument, else from
        ``kwargs_handlers``, else defaults); with ``output_trace_dir``, each rank writes
        ``profile_{rank}.json``."""
        handler = profile_handler or self.profile_handler
        if not isinstance(handler, ProfileKwargs):
            handler = ProfileKwargs()
        with profile_block(handler, self.process_index, self.wait_for_everyone) as profiler:
            yield profiler

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True if a GradScaler skipped the last step of any prepared optimizer (inf/NaN gradients)."""
        return any(optimizer.step_was_skipped for optimizer in self._optimizers)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide gradients by the fp16 loss scale (once per step; a no-op without a GradScaler)."""
        if optimizer is None:
            optimizers = self._optimizers
        else:
            optimizers = optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]
        for opt in optimizers:
            if isinstance(opt, AcceleratedOptimizer):
                opt.unscale_gradients()

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Unscale (fp16), clip the gradients' total norm to ``max_norm``, return the norm before clipping.

        Under fp16 on a non-sync step the gradients are a still-scaled partial sum: their true norm
        is returned and they are left alone (Accelerate would unscale them, and then fail at the
        next unscale with "unscale_() has already been called").
        """
        parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if self.scaler is not None and not self.sync_gradients:
            norms = [
                torch.linalg.vector_norm(param.grad.float(), norm_type)
                for param in parameters
                if param.grad is not None
            ]
            total = torch.linalg.vector_norm(torch.stack(norms), norm_type) if norms else torch.tensor(0.0)
            return total / self.scaler.get_scale()
        self.unscale_gradients()
        # Sharded gradients are DTensors: their norms are reduced across ranks (runtime.fsdp); the
        # result is returned as an ordinary tensor, equal on every rank.
        return fsdp.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Unscale (fp16), then clamp every gradient to ``[-clip_value, clip_value]``."""
        if self.scaler is not None and not self.sync_gradients:
            raise RuntimeError(
                "clip_grad_value_ under fp16 is only meaningful on sync steps "
                "(check `accelerator.sync_gradients` first)"
            )
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> contextlib.AbstractContextManager:
        """The mixed-precision autocast context, for code outside the prepared model's forward."""
        handler = autocast_handler or self.autocast_handler
        kwargs = handler.to_kwargs() if handler else {}
        return precision.autocast_context(self.device, self.mixed_precision, kwargs)

    # ------------------------------------------------------------------ collectives
    def gather(self, tensor: Any) -> Any:
        """Concatenate every rank's tensors (nested structures too) along dim 0, in rank order."""
        return operations.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather predictions/labels for metrics: every sample exactly once.

        Even batching pads the last global batch with samples from the start of the epoch; on a
        loader's last batch, only the first ``remainder`` gathered rows are real, the rest are dropped.
        Non-tensor data goes through ``gather_object``.
        """
        if not self.use_distributed:
            return input_data  # one process: nothing was padded, so nothing to drop (and 0-d stays 0-d)
        as_objects = use_gather_object or not collectives.contains_only_tensors(input_data)
        data = collectives.gather_object(input_data) if as_objects else collectives.gather(input_data)
        state = self.gradient_state
        if state.end_of_dataloader and state.remainder > 0:
            return collectives.truncate_to(data, state.remainder, object_list=as_objects)
        return data

    def without_padding(self, dataloader: Any, skip_empty: bool = True) -> Iterator[Any]:
        """Beyond Accelerate's API: the prepared ``dataloader``'s batches without the padding.

        Even batching tops the last round of batches up with samples from the start of the epoch,
        so every process gets the same number of batches. An evaluation that sums its counts in
        Python on each process and reduces them afterwards (it needs its own rows between two
        forwards: an attack, a saliency map) would count those samples twice: here each batch of
        the last round is cut to the rows that are real samples (the first ``remainder`` rows of
        the round, in process order, as ``gather_for_metrics`` keeps); a batch holding anything
        but tensors is left whole. A batch with no real row is skipped: processes may then run
        different numbers of batches, so no collective may run inside the loop. With
        ``skip_empty=False`` it is handed on with no rows instead, and every process runs as many
        batches as the loader gives it (a DDP model's backward in the loop all-reduces on each)."""
        for batch in dataloader:
            state = self.gradient_state
            rows = collectives.leading_rows(batch)
            if self.use_distributed and state.end_of_dataloader and state.remainder > 0 and rows is not None:
                real = max(0, min(rows, state.remainder - self.process_index * rows))
                if real == 0 and skip_empty:
                    continue
                batch = collectives.truncate_to(batch, real)
            yield batch

    def gather_object(self, obj: Any) -> Any:
        """Every rank's picklable object in one list (list contributions flattened one level)."""
        return collectives.gather_object(obj)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """All-reduce copies: ``"sum"`` (also ``"none"``, as Accelerate), ``"mean"`` or ``"max"``."""
        return operations.reduce(tensor, reduction, scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
        """Pad along ``dim`` to the largest size on any rank (so the tensors can be gathered)."""
        return operations.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def broadcast(self, tensor: Any, from_process: int = 0) -> Any:
        """Every rank gets ``from_process``'s tensors (in place)."""
        return operations.broadcast(tensor, from_process)

    def agree_random_state(self) -> None:
        """Every process takes the main process's state of Python's, NumPy's and torch's global
        generators (runtime.random_state): from here on, a script that never seeded draws the same
        values on every process; nothing changes on one process."""
        from accel_convert.runtime.random_state import agree_random_state

        agree_random_state(self.device)

    def set_trigger(self) -> None:
        """Raise a flag on this rank; ``check_trigger`` then returns True on every rank."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """True on all ranks if any rank called ``set_trigger`` since the last check (then reset)."""
        flag = self.flag_tensor if self.flag_tensor is not None else torch.tensor(0, device=self.device)
        if collectives.reduce(flag, "sum").item() >= 1:
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False

    # ------------------------------------------------------------------ process control
    def wait_for_everyone(self) -> None:
        """Barrier: every rank waits here until all have arrived (no-op on one process).

        Past ``ACCEL_CONVERT_BARRIER_TIMEOUT`` seconds (30) every rank prints which ranks are
        missing and where each rank is, and raises ``BarrierTimeoutError`` (runtime.job_failure).
        """
        if self.use_distributed:
            from accel_convert.runtime.job_failure import monitored_barrier

            monitored_barrier()

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager:
        """Run the body on the main process first (e.g. download/preprocess), then on the others."""
        return self._first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager:
        """Like ``main_process_first``, per machine."""
        return self._first(self.is_local_main_process)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This rank's contiguous share of a list/tuple/tensor/dict (the first ranks get one extra)."""
        from accel_convert.runtime.utils import split_for_process

        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)

    def end_training(self) -> None:
        """Leave the process group (call once, at the very end of the script)."""
        from accel_convert.runtime.state import shut_down_process_group

        self.wait_for_everyone()
        shut_down_process_group()

    # ------------------------------------------------------------------ models and files
    def as_forward(self, model: torch.nn.Module) -> Any:
        """Call a custom method of a prepared model so that DDP averages its gradients:
        ``accelerator.as_forward(model).compute_loss(batch)`` runs ``compute_loss`` as the
        wrapper's forward (see :mod:`accel_convert.runtime.ddp`). Not part of Accelerate's API."""
        return as_forward(model)

    def unwrap_model(
        self, model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> torch.nn.Module:
        """The user's model inside the DDP wrapper (``keep_fp32_wrapper=False`` also removes autocast)."""
        while isinstance(model, (DistributedDataParallel, DataParallel)):
            model = model.module
        if not keep_torch_compile and hasattr(model, "_orig_mod"):
            model = model._orig_mod
        if not keep_fp32_wrapper:
            precision.remove_forward_patch(model)
        return model

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The model's state dict without DDP's ``module.`` prefix.

        A sharded (FSDP) model's is gathered whole onto rank 0, in CPU memory; other ranks get an
        empty dict. Every rank must call it then.
        """
        if fsdp.is_sharded(model):
            return fsdp.full_state_dict(model)
        return (self.unwrap_model(model) if unwrap else model).state_dict()

    def save_model(
        self,
        model: torch.nn.Module,
        save_directory: str | os.PathLike,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Write the model's full state dict into ``save_directory`` from the main process, as
        Accelerate does: ``model.safetensors`` (``pytorch_model.bin`` with
        ``safe_serialization=False``), or numbered shards (``model-00001-of-00002.safetensors``)
        and ``model.safetensors.index.json`` when it is larger than ``max_shard_size`` (bytes, or
        ``"10GB"``, ``"500MB"``). Every rank must call it (a sharded FSDP model is gathered onto
        the main process first); it returns once the files are written.

        For safetensors a tied weight is written once, under its first name in the state dict
        (a warning names the others). A ``save_directory`` that is a file is logged as an error
        and nothing is written (Accelerate's behaviour). Deliberate differences: every file is
        written atomically, and shard files and the index of an earlier save into the folder
        that this one did not replace are removed, once its own files are written, in both formats (Accelerate leaves
        safetensors shards and every index behind, so an old index may name files of another
        save).
        """
        from accel_convert.runtime.logging import get_logger
        from accel_convert.runtime.weight_files import parse_shard_size, without_shared_tensors, write_weights

        parse_shard_size(max_shard_size)  # a bad size is refused on every rank, before the gather
        if os.path.isfile(save_directory):
            get_logger(__name__).error(f"save_model: {save_directory} is a file; it should be a directory")
            return
        if any(param.device.type == "meta" for param in model.parameters()):
            raise RuntimeError("save_model: some parameters are on the meta device; they have no values to save")
        state = self.get_state_dict(model)
        os.makedirs(save_directory, exist_ok=True)
        # Under FSDP only the main process holds the gathered weights: another node's writer has none.
        if self._writes_saved_files() and (state or self.is_main_process):
            if safe_serialization:
                state = without_shared_tensors(state)
            plan = write_weights(state, Path(save_directory), max_shard_size, safe_serialization)
            get_logger(__name__).info(
                f"save_model: {len(plan.files)} file(s) in {save_directory}: {', '.join(plan.files)}"
            )
        self.wait_for_everyone()

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save`` on the main process only (on each machine's local main process with
        ``ProjectConfiguration(save_on_each_node=True)``), atomically (temp file + rename: never
        half-written).

        ``safe_serialization=True`` writes a safetensors file instead (``f`` must be a path), as
        Accelerate does: ``obj`` must be a dict of tensors (anything else raises what
        ``safetensors.torch.save_file`` raises, on every rank), and an ``OrderedDict`` (what
        ``model.state_dict()`` returns) keeps one name per tied weight.
        """
        from accel_convert.runtime.utils import atomic_torch_save

        if safe_serialization:
            from accel_convert.runtime.weight_files import (
                check_safetensors_input,
                safetensors_path,
                without_shared_tensors,
                write_safetensors,
            )

            if isinstance(obj, OrderedDict):
                obj = without_shared_tensors(obj)
            check_safetensors_input(obj)
            safetensors_path(f)
            if self._writes_saved_files():
                write_safetensors(obj, f)
            return
        if not self._writes_saved_files():
            return
        if isinstance(f, (str, os.PathLike)):
            atomic_torch_save(obj, f)
        else:  # an open file object: the caller owns how it is written
            torch.save(obj, f)

    def _writes_saved_files(self) -> bool:
        """Whether this process writes what ``save``/``save_model`` save: the main process, or
        each machine's local main process with ``ProjectConfiguration(save_on_each_node=True)``."""
        if self.project_configuration.save_on_each_node:
            return self.is_local_main_process
        return self.is_main_process

    def prepared_objects(self) -> PreparedObjects:
        """The models, optimizers, schedulers and loaders prepared so far, and the registered objects."""
        return PreparedObjects(
            tuple(self._models),
            tuple(self._optimizers),
            tuple(self._schedulers),
            tuple(self._dataloaders),
            tuple(self._custom_objects),
        )

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Also save/load these objects (each needs ``state_dict`` and ``load_state_dict``) in save_state."""
        invalid = [
            f"- Item at index {index}, `{type(obj).__name__}`"
            for index, obj in enumerate(objects)
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)))
        ]
        if invalid:
            raise ValueError(
                "All `objects` must include a `state_dict` and `load_state_dict` function to be "
                "stored. The following inputs are invalid:\n" + "\n".join(invalid)
            )
        self._custom_objects.extend(objects)

    def save_state(self, output_dir: str | None = None, **kwargs: Any) -> str:
        """Save models, optimizers, schedulers, scaler, RNG states and registered objects (see runtime.checkpoint)."""
        from accel_convert.runtime.checkpoint import save_state

        return save_state(self, output_dir, **kwargs)

    def load_state(self, input_dir: str | None = None, **kwargs: Any) -> None:
        """Restore what ``save_state`` wrote (see runtime.checkpoint)."""
        from accel_convert.runtime.checkpoint import load_state

        load_state(self, input_dir, **kwargs)

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object (and release ``objects``); returns Nones to reassign."""
        from accel_convert.runtime.memory import release_memory

        released = release_memory(*objects)
        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        self.step = 0
        return released

    def clear(self, *objects: Any) -> list[Any]:
        """Alias of :meth:`free_memory`."""
        return self.free_memory(*objects)

    # ------------------------------------------------------------------ trackers (none)
    def init_trackers(self, project_name: str, config: Any = None, init_kwargs: Any = None) -> None:
        """No trackers are configured (``log_with`` must be None): nothing to start."""

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: Any = None) -> None:
        """No trackers are configured: nothing to log to (as Accelerate without ``log_with``)."""

    def __repr__(self) -> str:
        state = self.state
        kind = getattr(state.distributed_type, "value", state.distributed_type)
        return (
            f"Accelerator(distributed_type={kind}, num_processes={state.num_processes}, "
            f"process_index={state.process_index}, device={state.device}, "
            f"mixed_precision={self.mixed_precision})"
        )
