"""Distributed data loading: turn a script's ``DataLoader`` into the loader of one rank.

A tour of what ``prepare_data_loader`` does to a loader, in the order things happen:

1. **Shard.** Map-style datasets keep their sampler; the batches it produces are re-dealt by
   :class:`~runtime.sharding.ShardedBatchSampler` so that each rank gets its own. Iterable datasets
   are wrapped in :class:`~runtime.sharding.IterableShard`: every rank reads the whole stream and
   keeps its slice of each global batch. (Accelerate's default for iterable datasets is instead
   to *dispatch*: rank 0 reads and broadcasts. We shard, which needs no collective per batch and
   gives the same batches as ``DataLoaderConfiguration(dispatch_batches=False)``; the stream must
   then be deterministic or seeded identically on every rank.)
2. **Agree on randomness.** A shuffling sampler without its own generator would draw its order
   from each rank's global RNG; ranks whose RNGs drifted (dropout, augmentation) would then shuffle
   differently and see overlapping samples. So the sampler gets a ``torch.Generator`` seeded from
   the global RNG (exactly one draw, like Accelerate, so ``set_seed`` reproduces its orders), and at
   the start of every epoch rank 0's generator state is broadcast to all ranks.
3. **Iterate.** Each epoch the loader tells the :class:`~runtime.gradient_state.GradientState`
   that it started, flags its last batch before yielding it (``gather_for_metrics`` drops even
   batching's duplicates there; ``accumulate`` forces a gradient sync), and moves each batch to the
   device.

On one process nothing is sharded, no generator is created, no RNG is drawn and no batch is read
ahead: the prepared loader yields exactly what the original yields and consumes the global RNG
exactly as it did, so a converted script run on one process reproduces the original's numbers.

Where we deliberately differ from Accelerate 1.15 (everything else is checked against it):

* iterable datasets are sharded, never dispatched (see 1.);
* ``len()`` is always the number of batches the rank really gets (Accelerate over-counts a split,
  uneven last batch, and a split iterable dataset), and an iterable shard's ``remainder`` counts
  the real stream rather than the padded one, so ``gather_for_metrics`` drops its duplicates;
* a loop left early (``break``) unregisters the loader from the ``GradientState``;
* ``skip_first_batches`` keeps the loader's ``remainder``, and its copy shares the original's
  epoch counter (finishing the resumed epoch moves the original on to the next one);
* with several processes, a checkpoint saves the generator and global RNG states the epoch in
  progress began with (``epoch_start_generator_state``, ``epoch_start_rng_state``), so
  ``load_state`` + ``skip_first_batches`` resumes mid-epoch on the very batches it left;
* on one process, epochs are announced to samplers only by an explicit ``set_epoch`` (as the
  original loader would), and a shuffling sampler gets no generator of ours.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from accel_convert.runtime.collectives import keep_for_teardown
from accel_convert.runtime.gradient_state import GradientState
from accel_convert.runtime.sharding import (
    IterableShard,
    SeedableRandomSampler,
    ShardedBatchSampler,
    SkipBatchSampler,
    check_split_batch_size,
)

#: The RNGs a loader can keep identical across ranks (``Accelerator(rng_types=...)``).
SUPPORTED_RNG_TYPES = ("torch", "cuda", "generator")

# DataLoader arguments that survive re-building a loader (the sampling ones are replaced).
_SAMPLING_ARGUMENTS = {"dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"}
_LOADER_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(DataLoader.__init__).parameters.items()
    if name != "self" and name not in _SAMPLING_ARGUMENTS
}


# ------------------------------------------------------------------------------------------------
# Device placement
# ------------------------------------------------------------------------------------------------
def send_to_device(obj: Any, device: torch.device | str | None, non_blocking: bool = False) -> Any:
    """``obj`` with every tensor inside it moved to ``device``.

    Walks dicts (any ``Mapping``), lists, tuples and namedtuples, keeping their types; anything
    else with a ``.to`` method (tensors, transformers' ``BatchEncoding``, modules) is asked to move
    itself; other leaves (strings, numbers) come back unchanged.
    """
    if device is None:
        return obj
    if isinstance(obj, torch.Tensor):  # the common leaf: skip the generic checks below
        return obj.to(device, non_blocking=non_blocking)
    if type(obj) in (list, tuple):  # the common container (a namedtuple's type is a subclass)
        return type(obj)([send_to_device(item, device, non_blocking) for item in obj])
    if callable(getattr(obj, "to", None)) and not isinstance(obj, type):
        try:
            return obj.to(device, non_blocking=non_blocking)
        except TypeError:  # a `.to` that knows no `non_blocking`
            return obj.to(device)
    if isinstance(obj, Mapping):
        moved = {key: send_to_device(value, device, non_blocking) for key, value in obj.items()}
        if isinstance(obj, MutableMapping):
            # A shallow copy keeps the mapping's type and extras (a defaultdict's factory, say).
            clone = copy.copy(obj)
            clone.update(moved)
            return clone
        return type(obj)(moved)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple: fields are positional
        return type(obj)(*(send_to_device(item, device, non_blocking) for item in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(send_to_device(item, device, non_blocking) for item in obj)
    return obj


# ------------------------------------------------------------------------------------------------
# RNG synchronisation
# ------------------------------------------------------------------------------------------------
def _broadcast_from_rank0(state: torch.Tensor) -> torch.Tensor:
    """Rank 0's copy of an RNG state tensor, on every rank."""
    if dist.get_backend() == "nccl":  # NCCL only moves GPU tensors
        on_gpu = state.to(torch.device("cuda", torch.cuda.current_device()))
        dist.broadcast(on_gpu, src=0)
        return on_gpu.cpu()
    dist.broadcast(state, src=0)
    keep_for_teardown(state)  # see runtime.collectives.keep_for_teardown
    return state


def synchronize_rng_states(rng_types: list[str], generator: torch.Generator | None) -> None:
    """Make each listed RNG equal to rank 0's (a no-op without a process group)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    for kind in rng_types:
        if kind == "torch":
            torch.set_rng_state(_broadcast_from_rank0(torch.get_rng_state()))
        elif kind == "cuda" and torch.cuda.is_available():
            torch.cuda.set_rng_state(_broadcast_from_rank0(torch.cuda.get_rng_state()))
        elif kind == "generator" and generator is not None:
            generator.set_state(_broadcast_from_rank0(generator.get_state()))


def _checked_rng_types(rng_types: list[str] | None) -> list[str]:
    kinds = [str(getattr(kind, "value", kind)) for kind in (rng_types or [])]
    unknown = [kind for kind in kinds if kind not in SUPPORTED_RNG_TYPES]
    if unknown:
        raise ValueError(f"unsupported rng_types {unknown}; choose from {list(SUPPORTED_RNG_TYPES)}")
    return kinds


# ------------------------------------------------------------------------------------------------
# The prepared loader
# ------------------------------------------------------------------------------------------------
@dataclass
class EpochProgress:
    """Where a loader is in its epochs, shared with its ``skip_first_batches`` copies.

    A copy made to resume mid-epoch walks the rest of the original's epoch, so when it finishes,
    the original's next epoch must be the following one, and a checkpoint taken while the copy
    runs must see the epoch the copy is in.

    The epoch-start states are what a mid-epoch checkpoint needs to replay the epoch: by then the
    generator has drawn the epoch's order and torch's global RNG the iterator's base seed (for
    worker seeding; drawn from it when the loader has no generator of its own). They are kept
    with several processes only: one process records nothing, as it changes nothing.
    """

    #: Completed epochs; the epoch number handed to samplers at the start of the next one.
    iteration: int = 0
    #: The synchronized generator's state when the epoch in progress began, ``None`` between epochs.
    start_generator_state: torch.Tensor | None = None
    #: Torch's global RNG state when the epoch in progress began, ``None`` between epochs.
    start_rng_state: torch.Tensor | None = None
    #: Set by a mid-epoch restore: the global RNG state the replayed epoch's iterator draws its
    #: base seed from (the checkpoint's own global state then carries on for dropout and the like).
    replay_rng_state: torch.Tensor | None = None


@dataclass(frozen=True)
class LoaderPlan:
    """Everything a prepared loader needs besides its dataset and sampler (shared by its copies)."""

    device: torch.device | None
    non_blocking: bool
    gradient_state: GradientState
    rng_types: tuple[str, ...]
    synchronized_generator: torch.Generator | None
    num_processes: int
    #: The original loader's ``batch_size`` and ``drop_last`` (what the script configured).
    batch_size: int | None
    drop_last: bool
    #: Samples per step over all ranks (``None`` for dynamic batch sizes).
    total_batch_size: int | None
    #: Per-rank batch size of a sharded iterable dataset (its ``len`` needs it).
    rank_batch_size: int | None = None
    #: Batches an iterable loader still reads but does not yield (``skip_first_batches``).
    skip_batches: int = 0
    #: Shared by every copy of the plan, so a loader and its skipping copies count epochs together.
    progress: EpochProgress = field(default_factory=EpochProgress)


class PreparedDataLoader(DataLoader):
    """One rank's view of a data loader, with device placement and end-of-epoch bookkeeping.

    A real ``DataLoader`` (workers, pinning and collation are torch's own); only ``__iter__``
    and ``__len__`` are extended.
    """

    def __init__(self, dataset: Any, plan: LoaderPlan, *, iteration: int = 0, **loader_arguments: Any) -> None:
        super().__init__(dataset, **loader_arguments)
        self.plan = plan
        self.iteration = iteration
        # Report the script's own batch size and drop_last, not the placeholders torch stores when
        # it is given a batch sampler. DataLoader forbids setting these after construction because
        # its iterators could read stale values; but batching was fixed above (by the sharded batch
        # sampler, or for iterable datasets by the batch sampler torch built from the per-rank
        # size), so the attributes are only reported and bypassing the guard is safe.
        object.__setattr__(self, "batch_size", plan.batch_size)
        object.__setattr__(self, "drop_last", plan.drop_last)

    # -- attributes scripts and other runtime modules read --------------------------------------
    @property
    def device(self) -> torch.device | None:
        return self.plan.device

    @property
    def synchronized_generator(self) -> torch.Generator | None:
        return self.plan.synchronized_generator

    @property
    def iteration(self) -> int:
        """Completed epochs; the epoch number handed to samplers at the start of the next one."""
        return self.plan.progress.iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        self.plan.progress.iteration = value

    @property
    def epoch_start_generator_state(self) -> torch.Tensor | None:
        """The synchronized generator's state when the epoch in progress began (``None`` between
        epochs): what a mid-epoch checkpoint saves, to replay this epoch's order on resume."""
        return self.plan.progress.start_generator_state

    @property
    def epoch_start_rng_state(self) -> torch.Tensor | None:
        """Torch's global RNG state when the epoch in progress began (``None`` between epochs and
        on one process): a mid-epoch checkpoint saves it to replay the iterator's base seed."""
        return self.plan.progress.start_rng_state

    @property
    def rng_types(self) -> list[str]:
        return list(self.plan.rng_types)

    @property
    def total_batch_size(self) -> int | None:
        return self.plan.total_batch_size

    @property
    def remainder(self) -> int:
        """Real samples in the last global batch (0: it is full), or -1 when unknown/dropped."""
        if self.plan.drop_last or not self.plan.total_batch_size:
            return -1
        # A sharded stream's own length is already padded to whole batches: count the real data.
        dataset = self.dataset.dataset if isinstance(self.dataset, IterableShard) else self.dataset
        try:
            sampled = self._sampled_count()
            return (len(dataset) if sampled is None else sampled) % self.plan.total_batch_size
        except TypeError:  # an iterable dataset without __len__
            return -1

    def _sampled_count(self) -> int | None:
        """How many samples an epoch draws, when the sampler below the batching says: a
        ``SubsetRandomSampler(val_idx)`` over the whole dataset draws ``len(val_idx)`` of them, a
        ``WeightedRandomSampler`` its ``num_samples`` (Accelerate counts ``len(dataset)`` and keeps
        padding rows: 232 evaluated samples instead of 200)."""
        if isinstance(self.dataset, IterableDataset):
            return None
        level = self.batch_sampler if self.batch_sampler is not None else self.sampler
        while hasattr(level, "batch_sampler"):  # our sharding and skipping wrappers
            level = level.batch_sampler
        try:
            return len(level.sampler)
        except (AttributeError, TypeError):  # a custom batch sampler: no sampler, or one without len
            return None

    # -- epochs ---------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and hand it to every sampler (or else the dataset) that takes one."""
        self.iteration = epoch
        _propagate_epoch(self, epoch)

    def restore_progress(
        self, iteration: int, generator_state: torch.Tensor | None, epoch_start_rng_state: torch.Tensor | None = None
    ) -> None:
        """Put the loader where a checkpoint left it: ``iteration`` completed epochs, the generator
        ready to draw the order of the epoch the checkpoint was taken in (or after), and, for a
        mid-epoch checkpoint, the global RNG state that epoch's iterator drew its base seed from."""
        self.iteration = iteration
        if generator_state is not None and self.synchronized_generator is not None:
            self.synchronized_generator.set_state(generator_state)
        progress = self.plan.progress
        # Whatever epoch was in progress here before is not the one that will be replayed.
        progress.start_generator_state = progress.start_rng_state = None
        progress.replay_rng_state = epoch_start_rng_state

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableShard) and self.plan.rank_batch_size:
            batches = len(self.dataset) // self.plan.rank_batch_size  # the shard holds whole batches
        else:
            batches = super().__len__()
        return max(batches - self.plan.skip_batches, 0)

    def __iter__(self) -> Iterator[Any]:
        if self.plan.num_processes > 1:
            synchronize_rng_states(self._rng_types_to_synchronize(), self.plan.synchronized_generator)
            # Samplers like DistributedSampler reshuffle per epoch: tell them which one this is.
            self.set_epoch(self.iteration)
            self._record_epoch_start()
        # torch's iterator is made now, as ``DataLoader.__iter__`` makes it: creating it draws the
        # base seed from the global RNG, so two loaders zipped together (``zip(a, b)`` calls
        # ``iter`` on both before the first batch) draw in the script's order (made at the first
        # ``next``, a one-process run shuffled differently from the original).
        return self._batches(self._raw_batches())

    def _batches(self, raw: Iterator[Any]) -> Iterator[Any]:
        state = self.plan.gradient_state
        state.begin_loader(self, self.remainder)
        try:
            for is_last, batch in self._flag_last(raw):
                batch = send_to_device(batch, self.plan.device, self.plan.non_blocking)
                if is_last:
                    state.mark_last_batch()
                yield batch
            self.iteration += 1
            self.plan.progress.start_generator_state = self.plan.progress.start_rng_state = None
        finally:
            # Also when the loop is left early: a loader abandoned mid-epoch must not stay
            # "active" and confuse a later gather_for_metrics or accumulate(). (The check guards
            # against an abandoned iterator collected late, while another loader is running.)
            if self in state.active_dataloaders:
                state.end_loader(self)

    def _rng_types_to_synchronize(self) -> list[str]:
        if self.plan.progress.replay_rng_state is None:
            return list(self.plan.rng_types)
        # Replaying an epoch from a mid-epoch checkpoint: the ranks' global RNGs were synced at
        # that epoch's start and then drew apart (dropout); each rank's came back from the
        # checkpoint as it was, so syncing them again now would change the ranks' next draws.
        return [kind for kind in self.plan.rng_types if kind == "generator"]

    def _record_epoch_start(self) -> None:
        # After the ranks agreed on the generator, before the sampler and the iterator's base seed
        # draw from it or from the global RNG. Reading a state draws nothing.
        progress = self.plan.progress
        generator = self.plan.synchronized_generator
        progress.start_generator_state = None if generator is None else generator.get_state()
        replaying = progress.replay_rng_state
        progress.start_rng_state = torch.get_rng_state() if replaying is None else replaying

    def _new_iterator(self) -> Iterator[Any]:
        """torch's iterator for this epoch (creating it draws the workers' base seed)."""
        replay, self.plan.progress.replay_rng_state = self.plan.progress.replay_rng_state, None
        if replay is None:
            return super().__iter__()
        # The interrupted run drew the base seed at the epoch's start, before its checkpoint: draw
        # it again from that state, then go back to the checkpoint's, which the rest of the epoch
        # (dropout, augmentation) continues from.
        resumed = torch.get_rng_state()
        torch.set_rng_state(replay)
        try:
            return super().__iter__()
        finally:
            torch.set_rng_state(resumed)

    def _raw_batches(self) -> Iterator[Any]:
        batches = self._new_iterator()
        return itertools.islice(batches, self.plan.skip_batches, None) if self.plan.skip_batches else batches

    def _flag_last(self, batches: Iterator[Any]) -> Iterator[tuple[bool, Any]]:
        """Pair each batch with "is it the epoch's last?".

        A loader that knows its length finds the last batch by counting, without reading ahead:
        fetching a batch early would run ``__getitem__``/collate (and any RNG they draw) before
        the training step that precedes it, changing a one-process run's numbers. Iterable
        datasets (whose ``len`` is only a hint) and samplers without ``len`` are read one batch
        ahead instead.
        """
        expected = self._trusted_length()
        if expected is not None:
            for count, batch in enumerate(batches, start=1):
                yield count == expected, batch
            return
        previous, have_previous = None, False
        for batch in batches:
            if have_previous:
                yield False, previous
            previous, have_previous = batch, True
        if have_previous:
            yield True, previous

    def _trusted_length(self) -> int | None:
        if isinstance(self.dataset, IterableDataset):
            return None
        try:
            return len(self)
        except TypeError:  # a custom (batch) sampler without __len__
            return None


def _epoch_receivers(loader: DataLoader) -> list[Any]:
    """The batch samplers and samplers below ``loader``, outermost first, each once."""
    found: list[Any] = []
    level = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    while level is not None and all(level is not seen for seen in found):
        found.append(level)
        inner_sampler = getattr(level, "sampler", None)
        if inner_sampler is not None and all(inner_sampler is not seen for seen in found):
            found.append(inner_sampler)
        level = getattr(level, "batch_sampler", None)
    return found


def _propagate_epoch(loader: DataLoader, epoch: int) -> None:
    reached = False
    for receiver in _epoch_receivers(loader):
        if callable(getattr(receiver, "set_epoch", None)):
            receiver.set_epoch(epoch)
            reached = True
    if not reached and callable(getattr(loader.dataset, "set_epoch", None)):
        loader.dataset.set_epoch(epoch)


# ------------------------------------------------------------------------------------------------
# prepare_data_loader and its steps
# ------------------------------------------------------------------------------------------------
def _carried_arguments(dataloader: DataLoader) -> dict[str, Any]:
    """The original loader's workers/collate/pinning settings, to rebuild it faithfully."""
    return {name: getattr(dataloader, name, default) for name, default in _LOADER_DEFAULTS.items()}


def _batch_size_of(dataloader: DataLoader) -> int | None:
    if dataloader.batch_size is not None:
        return dataloader.batch_size
    sampler = dataloader.batch_sampler if dataloader.batch_sampler is not None else dataloader.sampler
    return getattr(sampler, "batch_size", None)


def _batch_sampler_of(dataloader: DataLoader) -> Any:
    """What yields index lists: the batch sampler, or a batch sampler passed as ``sampler``."""
    if isinstance(dataloader.sampler, BatchSampler):
        return dataloader.sampler
    return dataloader.batch_sampler


def _with_sampler(batch_sampler: Any, sampler: Any) -> Any:
    """``batch_sampler`` drawing from ``sampler`` instead, leaving the script's object untouched."""
    if type(batch_sampler) is BatchSampler:
        return BatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last)
    twin = copy.copy(batch_sampler)
    twin.sampler = sampler
    return twin


def _seed_shuffling_sampler(sampler: Any) -> torch.Generator | None:
    """The generator every rank's sampler must share; created (one global RNG draw) if missing."""
    if not hasattr(sampler, "generator"):
        return None
    if sampler.generator is None:
        # Drawn from the global RNG like Accelerate, so `set_seed(s)` gives Accelerate's orders.
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        sampler.generator = torch.Generator().manual_seed(seed)
    return sampler.generator


def _prepare_map_style(
    dataloader: DataLoader,
    plan: LoaderPlan,
    *,
    process_index: int,
    split_batches: bool,
    even_batches: bool,
    use_seedable_sampler: bool,
    data_seed: int | None,
) -> PreparedDataLoader:
    batch_sampler = _batch_sampler_of(dataloader)
    sampler = getattr(batch_sampler, "sampler", None)
    generator = None
    if use_seedable_sampler and isinstance(sampler, RandomSampler):
        batch_sampler = _with_sampler(batch_sampler, SeedableRandomSampler.replacing(sampler, data_seed))
    elif plan.num_processes > 1:
        generator = _seed_shuffling_sampler(sampler)
    if plan.num_processes > 1:
        batch_sampler = ShardedBatchSampler(
            batch_sampler, plan.num_processes, process_index, split_batches=split_batches, even_batches=even_batches
        )
    return _build(dataloader, dataloader.dataset, _with_generator(plan, generator), batch_sampler)


def _with_generator(plan: LoaderPlan, generator: torch.Generator | None) -> LoaderPlan:
    # Nothing to keep in sync without a generator: drop "generator" rather than fail later.
    rng_types = tuple(kind for kind in plan.rng_types if kind != "generator" or generator is not None)
    return replace(plan, synchronized_generator=generator, rng_types=rng_types)


def _build(
    original: DataLoader, dataset: Any, plan: LoaderPlan, batch_sampler: Any, *, iteration: int = 0
) -> PreparedDataLoader:
    arguments = _carried_arguments(original)
    if isinstance(original.sampler, BatchSampler):  # the script passed a batch sampler as `sampler`
        return PreparedDataLoader(
            dataset, plan, iteration=iteration, sampler=batch_sampler, batch_size=None, **arguments
        )
    return PreparedDataLoader(dataset, plan, iteration=iteration, batch_sampler=batch_sampler, **arguments)


def _prepare_iterable(
    dataloader: DataLoader, plan: LoaderPlan, *, process_index: int, split_batches: bool
) -> PreparedDataLoader:
    dataset, batch_size = dataloader.dataset, dataloader.batch_size
    generator = None
    if plan.num_processes > 1:
        if batch_size is None:
            raise ValueError(
                "an iterable dataset can only be sharded by a loader with a batch_size; got batch_size=None"
            )
        generator = getattr(dataset, "generator", None)
        dataset = IterableShard(
            dataset, batch_size, dataloader.drop_last, plan.num_processes, process_index, split_batches=split_batches
        )
        batch_size = dataset.rank_batch_size
        plan = replace(plan, rank_batch_size=batch_size)
    return PreparedDataLoader(
        dataset,
        _with_generator(plan, generator),
        batch_size=batch_size,
        drop_last=dataloader.drop_last,
        **_carried_arguments(dataloader),
    )


def prepare_data_loader(
    dataloader: DataLoader,
    *,
    device: torch.device | None,
    num_processes: int,
    process_index: int,
    split_batches: bool,
    even_batches: bool,
    gradient_state: GradientState,
    rng_types: list[str] | None,
    non_blocking: bool = False,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
) -> PreparedDataLoader:
    """The loader rank ``process_index`` of ``num_processes`` iterates in place of ``dataloader``.

    ``split_batches``: cut each original batch across ranks (the global batch is the script's
    batch size) instead of giving each rank whole batches (global batch = size x ranks).
    ``even_batches``: complete the last round with samples from the start so all ranks run the
    same number of equal steps. ``rng_types``: RNGs made equal to rank 0's at each epoch start.
    ``use_seedable_sampler``: shuffle from ``data_seed`` (or torch's initial seed) + epoch.
    """
    if not 0 <= process_index < num_processes:
        raise ValueError(f"process_index {process_index} is outside 0..{num_processes - 1}")
    batch_size = _batch_size_of(dataloader)
    if split_batches and num_processes > 1:
        check_split_batch_size(batch_size, num_processes)
    plan = LoaderPlan(
        device=device,
        non_blocking=non_blocking,
        gradient_state=gradient_state,
        rng_types=tuple(_checked_rng_types(rng_types)),
        synchronized_generator=None,
        num_processes=num_processes,
        batch_size=dataloader.batch_size,
        drop_last=bool(dataloader.drop_last or getattr(dataloader.batch_sampler, "drop_last", False)),
        total_batch_size=None if batch_size is None else batch_size * (1 if split_batches else num_processes),
    )
    if isinstance(dataloader.dataset, IterableDataset):
        return _prepare_iterable(dataloader, plan, process_index=process_index, split_batches=split_batches)
    return _prepare_map_style(
        dataloader,
        plan,
        process_index=process_index,
        split_batches=split_batches,
        even_batches=even_batches,
        use_seedable_sampler=use_seedable_sampler,
        data_seed=data_seed,
    )


# ------------------------------------------------------------------------------------------------
# Resuming mid-epoch
# ------------------------------------------------------------------------------------------------
class _SkippingDataLoader(DataLoader):
    """A plain loader over an iterable dataset that discards its first batches."""

    def __init__(self, dataset: Any, skip_batches: int, **loader_arguments: Any) -> None:
        super().__init__(dataset, **loader_arguments)
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(super().__iter__(), self.skip_batches, None)

    def __len__(self) -> int:
        return max(super().__len__() - self.skip_batches, 0)


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A new loader that starts ``num_batches`` (per-rank) batches into the epoch.

    For resuming mid-epoch from a checkpoint. A prepared loader's copy keeps its device, RNG
    synchronisation, generator and ``remainder``, and shares its epoch counter (``iteration``) and
    epoch-start generator state; a plain loader gives a plain loader.
    """
    if num_batches < 0:
        raise ValueError(f"cannot skip a negative number of batches ({num_batches})")
    dataset = dataloader.dataset
    arguments = _carried_arguments(dataloader)
    if isinstance(dataloader, PreparedDataLoader):
        if isinstance(dataset, IterableDataset):
            plan = replace(dataloader.plan, skip_batches=dataloader.plan.skip_batches + num_batches)
            return PreparedDataLoader(
                dataset,
                plan,
                iteration=dataloader.iteration,
                batch_size=dataloader.plan.rank_batch_size or dataloader.batch_size,
                drop_last=dataloader.drop_last,
                **arguments,
            )
        skipping = SkipBatchSampler(_batch_sampler_of(dataloader), num_batches)
        return _build(dataloader, dataset, dataloader.plan, skipping, iteration=dataloader.iteration)
    if isinstance(dataset, IterableDataset):
        return _SkippingDataLoader(
            dataset, num_batches, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last, **arguments
        )
    skipping = SkipBatchSampler(_batch_sampler_of(dataloader), num_batches)
    if isinstance(dataloader.sampler, BatchSampler):
        return DataLoader(dataset, sampler=skipping, batch_size=None, **arguments)
    return DataLoader(dataset, batch_sampler=skipping, **arguments)


__all__ = [
    "prepare_data_loader",
    "skip_first_batches",
    "send_to_device",
    "synchronize_rng_states",
    "PreparedDataLoader",
    "LoaderPlan",
    "EpochProgress",
    "SUPPORTED_RNG_TYPES",
]
