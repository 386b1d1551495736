"""Which samples each rank sees: the pure, process-group-free half of distributed data loading.

Data parallelism needs every rank to see a *different* slice of each global batch, and every rank
to run the *same number* of steps (a rank that stops early would leave the others waiting in the
gradient all-reduce forever). The samplers here decide the slices; they take ``num_processes`` and
``process_index`` explicitly, so they are plain Python objects that tests can drive without any
process group. The layouts are Hugging Face Accelerate's, so a script gets the same per-rank
batches under either library:

* **whole batches** (default): global batch ``i`` goes to rank ``i % n``; each step, the ``n`` ranks
  together consume ``n`` consecutive batches of the original loader.
* **split batches**: every original batch is cut into ``n`` contiguous slices, one per rank.
* **even batches**: when the data runs out mid-round, the round is completed with samples from the
  start of the epoch, so every rank still gets a full batch; ``gather_for_metrics`` later drops
  those duplicates (they always sit at the end of the last global batch).

Reading the epoch's batches quickly (every rank walks all of them) is :mod:`runtime.sharding_fast`'s
job; this module only decides who gets what.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, IterableDataset, RandomSampler

from accel_convert.runtime.sharding_fast import (
    Batch,
    random_draws,
    register_known_draws,
    source_batches,
)


def check_split_batch_size(batch_size: int | None, num_processes: int) -> None:
    """Split mode cuts each batch into ``num_processes`` equal slices, so the size must divide."""
    if num_processes > 1 and (batch_size is None or batch_size % num_processes != 0):
        raise ValueError(
            f"split_batches=True needs the loader's batch size ({batch_size}) to be a round multiple "
            f"of the number of processes ({num_processes})."
        )


class ShardedBatchSampler(BatchSampler):
    """The batches of one rank, cut from another batch sampler's stream (Accelerate's layout).

    ``batch_size`` and ``drop_last`` are read from the wrapped sampler; a sampler without a
    ``batch_size`` yields batches of varying size ("dynamic" batches), which are dealt out whole.
    """

    # BatchSampler.__init__ is deliberately not called: it would demand a sampler and a batch size,
    # and this class only re-deals the batches of an existing batch sampler.
    def __init__(
        self,
        batch_sampler: Iterable[Batch],
        num_processes: int,
        process_index: int,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        if not 0 <= process_index < num_processes:
            raise ValueError(f"process_index {process_index} is outside 0..{num_processes - 1}")
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last: bool = bool(getattr(batch_sampler, "drop_last", False))
        if split_batches:
            check_split_batch_size(self.batch_size, num_processes)

    # -- length ------------------------------------------------------------------------------
    def __len__(self) -> int:
        total = len(self.batch_sampler)  # type: ignore[arg-type]
        if self.split_batches:
            return total - self._missing_split_tail(total)
        rounds, leftover = divmod(total, self.num_processes)
        if leftover == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if self.process_index < leftover else 0)

    def _missing_split_tail(self, total: int) -> int:
        """1 when this rank gets no slice of a short last batch (split, uneven); else 0.

        Accelerate reports ``len(batch_sampler)`` here even for the ranks that get nothing; we
        count what is really yielded, so the loader can find its last batch by counting.
        """
        if self.drop_last or self.even_batches or total == 0 or self.batch_size is None:
            return 0
        dataset_size = _sampler_size(self.batch_sampler)
        if dataset_size is None:
            return 0
        last_batch = dataset_size - (total - 1) * self.batch_size
        slice_start = self.process_index * (self.batch_size // self.num_processes)
        return 1 if 0 < last_batch < self.batch_size and last_batch <= slice_start else 0

    # -- iteration ---------------------------------------------------------------------------
    def _source_batches(self, wanted: Callable[[int], bool] | None = None) -> Iterator[Any]:
        """The wrapped sampler's batches as new lists (see :func:`source_batches`)."""
        return source_batches(self.batch_sampler, wanted)

    def __iter__(self) -> Iterator[Batch]:
        if self.split_batches:
            return self._iter_split()
        return self._iter_whole()

    def _is_full(self, batch: Sequence[int]) -> bool:
        return self.batch_size is None or len(batch) == self.batch_size

    def _iter_split(self) -> Iterator[Batch]:
        assert self.batch_size is not None  # checked in __init__
        width = self.batch_size // self.num_processes
        mine = slice(self.process_index * width, (self.process_index + 1) * width)
        first: Batch = []
        last: Batch = []
        for position, batch in enumerate(self._source_batches()):
            if position == 0:
                first = batch
            if len(batch) == self.batch_size:
                yield batch[mine]
            last = batch
        if self.drop_last or not first or len(last) == self.batch_size:
            return
        if not self.even_batches:
            if len(last) > mine.start:
                yield last[mine]
            return
        # Top the short batch up with the epoch's first samples so every rank gets a full slice.
        padded = last + list(itertools.islice(itertools.cycle(first), self.batch_size - len(last)))
        yield padded[mine]

    def _iter_whole(self) -> Iterator[Batch]:
        n, rank = self.num_processes, self.process_index
        opening: list[Batch] = []  # the first n batches: the source of padding samples
        mine: Batch | None = None
        last: Batch = []
        position = -1
        # Only this rank's batches and the opening ones are read; of the others, only the size
        # matters (a short one is always read: it may be topped up below).
        for position, batch in enumerate(self._source_batches(lambda position: position < n or position % n == rank)):
            if not self.drop_last and position < n:
                opening.append(batch)
            if position % n == rank:
                mine = batch
            # A round is released only once its last batch is known to be full, so that a short
            # tail batch can still be topped up before anyone sees it.
            if position % n == n - 1 and self._is_full(batch):
                yield mine  # type: ignore[misc]
                mine = None
            last = batch
        if self.drop_last or not any(opening):
            return
        if not self.even_batches:
            if mine:
                yield mine
            return
        if mine and self._is_full(mine):
            yield mine
        yield from self._even_tail(opening, last, position)

    def _even_tail(self, opening: list[Batch], last: Batch, position: int) -> Iterator[Batch]:
        """Complete the final round: top up a short last batch, then cut whole batches for the
        ranks that have none, all from the start of the epoch (cycled when the data is tiny)."""
        n, rank = self.num_processes, self.process_index
        if self._is_full(last):
            pending, position = [], position + 1
        else:
            pending = last
        if self.batch_size is None:
            padding_batches = itertools.cycle(opening)
            while position % n != 0:
                batch = next(padding_batches)
                if position % n == rank:
                    yield batch
                position += 1
            return
        padding = itertools.cycle([index for batch in opening for index in batch])
        while position % n != 0 or pending:
            batch = pending + list(itertools.islice(padding, self.batch_size - len(pending)))
            if position % n == rank:
                yield batch
            pending, position = [], position + 1


def _sampler_size(batch_sampler: Any) -> int | None:
    """How many samples a standard batch sampler draws from, if it can tell."""
    try:
        return len(batch_sampler.sampler)
    except (AttributeError, TypeError):
        return None


class SkipBatchSampler(BatchSampler):
    """Another batch sampler minus its first ``skip_batches`` batches (resuming mid-epoch)."""

    def __init__(self, batch_sampler: Iterable[Batch], skip_batches: int = 0) -> None:
        if skip_batches < 0:
            raise ValueError(f"cannot skip a negative number of batches ({skip_batches})")
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))

    def __iter__(self) -> Iterator[Batch]:
        return itertools.islice(iter(self.batch_sampler), self.skip_batches, None)

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip_batches, 0)  # type: ignore[arg-type]


class IterableShard(IterableDataset):
    """One rank's elements of an iterable dataset, in Accelerate's ``IterableDatasetShard`` layout.

    Elements are buffered one *global* batch at a time (``batch_size`` when split, else
    ``batch_size * num_processes``) and each rank keeps its contiguous slice. A short tail is
    dropped with ``drop_last``, else completed by cycling the first global batch (or the tail
    itself when the stream never filled one), so every rank ends on a full batch.
    """

    def __init__(
        self,
        dataset: Iterable[Any],
        batch_size: int,
        drop_last: bool,
        num_processes: int,
        process_index: int,
        split_batches: bool = False,
    ) -> None:
        if split_batches:
            check_split_batch_size(batch_size, num_processes)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.epoch = 0

    @property
    def global_batch_size(self) -> int:
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def rank_batch_size(self) -> int:
        return self.global_batch_size // self.num_processes

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        _call_set_epoch(self.dataset, epoch)

    def __len__(self) -> int:
        full, tail = divmod(len(self.dataset), self.global_batch_size)  # type: ignore[arg-type]
        rounds = full + (1 if tail and not self.drop_last else 0)
        return rounds * self.rank_batch_size

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if isinstance(generator, torch.Generator) and not hasattr(self.dataset, "set_epoch"):
            # The dataset shuffles with its own generator but cannot be told the epoch: seed it
            # with the epoch so that every rank shuffles identically (Accelerate does the same).
            generator.manual_seed(self.epoch)
        start = self.process_index * self.rank_batch_size
        mine = slice(start, start + self.rank_batch_size)
        first: list[Any] | None = None
        buffer: list[Any] = []
        for element in self.dataset:
            buffer.append(element)
            if len(buffer) == self.global_batch_size:
                yield from buffer[mine]
                first = first if first is not None else buffer
                buffer = []
        if buffer and not self.drop_last:
            source = first if first is not None else list(buffer)
            buffer += itertools.islice(itertools.cycle(source), self.global_batch_size - len(buffer))
            yield from buffer[mine]


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order depends only on ``seed + epoch``.

    Opt-in (``use_seedable_sampler=True``): the order no longer depends on how much of the
    global RNG the script consumed before the epoch started, so runs are reproducible across
    resumes. Each full pass advances the epoch by one.
    """

    def __init__(
        self,
        data_source: Sequence[Any],
        *,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
    ) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples, generator=generator)
        self.initial_seed = data_seed if data_seed is not None else torch.initial_seed()
        self.epoch = 0

    @classmethod
    def replacing(cls, sampler: RandomSampler, data_seed: int | None) -> SeedableRandomSampler:
        """A seedable twin of ``sampler`` (same data, replacement and sample count)."""
        return cls(
            sampler.data_source,
            replacement=sampler.replacement,  # type: ignore[arg-type]
            num_samples=sampler._num_samples,
            generator=sampler.generator,
            data_seed=data_seed,
        )

    def __iter__(self) -> Iterator[int]:
        # Chained lists rather than ``yield from``: the indices come out at C speed.
        return itertools.chain.from_iterable(self.seeded_draws())

    def seeded_draws(self) -> Iterator[list[int]]:
        """This epoch's index lists (see :func:`random_draws`); the epoch advances once they
        are used up."""
        if self.generator is None:
            self.generator = torch.Generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from random_draws(self)
        self.epoch += 1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


# The seedable sampler's draws are known, so the fast streams may slice them (exactly this class:
# a subclass may draw differently).
register_known_draws(SeedableRandomSampler, SeedableRandomSampler.seeded_draws)


def _call_set_epoch(target: Any, epoch: int) -> None:
    set_epoch = getattr(target, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


__all__ = [
    "ShardedBatchSampler",
    "SkipBatchSampler",
    "IterableShard",
    "SeedableRandomSampler",
    "check_split_batch_size",
]
