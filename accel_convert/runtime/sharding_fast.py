"""Fast batch streams: the same batches and random draws as torch's samplers, at a fraction of the cost.

:class:`~runtime.sharding.ShardedBatchSampler` reads the whole epoch's batches on every rank to
keep its own. This module is an optimisation of that read only; :mod:`runtime.sharding` reads
correctly without it (any batch sampler it does not recognise is iterated as it is).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler

Batch = list[int]

# RandomSampler draws indices with replacement in blocks of this many (a torch constant).
_REPLACEMENT_BLOCK = 32


# Every rank walks the *whole* epoch's batches to keep its own, so with n ranks it pulls n times
# the batches it keeps. Through torch's BatchSampler and RandomSampler each index comes out of a
# Python generator on its own and every batch is a new list: on 2 ranks about 30 us per kept
# batch, against 9 us for DistributedSampler, and more once the data loading has evicted those
# lists from the caches. For the samplers whose draws we know, the streams below make the very
# same random draws at the very same moments, but slice this rank's batches out of the drawn
# lists and only count the others'.


def random_draws(sampler: RandomSampler) -> Iterator[list[int]]:
    """The index lists ``sampler`` draws, one per random draw, each drawn only when asked for.

    Chained (``itertools.chain.from_iterable``), this is ``iter(sampler)``: each block is drawn
    when the previous one is used up and the next index is wanted, exactly when RandomSampler
    draws it, and from the same generator (a fresh one seeded from the global RNG on the first
    index when the sampler has none), so the indices and every RNG state agree throughout.
    """
    size = len(sampler.data_source)
    generator = sampler.generator
    if generator is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        generator = torch.Generator()
        generator.manual_seed(seed)
    if sampler.replacement:
        full_blocks, rest = divmod(sampler.num_samples, _REPLACEMENT_BLOCK)
        for block in itertools.chain(itertools.repeat(_REPLACEMENT_BLOCK, full_blocks), (rest,)):
            yield torch.randint(high=size, size=(block,), dtype=torch.int64, generator=generator).tolist()
        return
    # Without replacement: whole permutations, then one more of which only a prefix is used (it
    # is drawn even when that prefix is empty).
    full_permutations, rest = divmod(sampler.num_samples, size)
    for _ in range(full_permutations):
        yield torch.randperm(size, generator=generator).tolist()
    yield torch.randperm(size, generator=generator)[:rest].tolist()


class UnreadBatch:
    """A full batch that nobody here reads (another rank's): only its size is known."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def sliced_batches(
    blocks: Iterator[list[int]], batch_size: int, drop_last: bool, wanted: Callable[[int], bool] | None = None
) -> Iterator[Batch | UnreadBatch]:
    """What torch's ``BatchSampler`` cuts from the chained ``blocks``, cut by slicing.

    BatchSampler asks its sampler for a batch's indices one by one, and for one more than there
    are when the epoch ends; so a block is drawn here exactly when an index asked for lies
    beyond the blocks drawn so far, which keeps the moment of every draw BatchSampler's own.
    A full batch at a position ``wanted`` rejects is not copied out: an :class:`UnreadBatch`
    stands in for it.
    """
    drawn: list[int] = []
    start = 0  # where the next batch begins in ``drawn``
    more = True
    for position in itertools.count():
        end = start + batch_size
        while more and len(drawn) < end:
            block = next(blocks, None)
            if block is None:
                more = False
            elif start == len(drawn):  # all handed out: take the new block as it is, uncopied
                drawn, start, end = block, 0, batch_size
            else:
                drawn += block
        size = min(end, len(drawn)) - start
        if size == 0 or (drop_last and size < batch_size):
            return
        read = size < batch_size or wanted is None or wanted(position)
        yield drawn[start:end] if read else UnreadBatch(size)
        start = end
        if 2 * start > len(drawn):  # forget what was handed out, in amortised linear time
            del drawn[:start]
            start = 0


#: Sampler classes whose draws we know -> the function listing one epoch's index blocks. Looked
#: up by exact type: a subclass may draw differently, so it takes the general path.
_KNOWN_DRAWS: dict[type, Callable[[Any], Iterator[list[int]]]] = {RandomSampler: random_draws}


def register_known_draws(sampler_class: type, draws: Callable[[Any], Iterator[list[int]]]) -> None:
    """Let the fast streams slice the batches of ``sampler_class`` (exactly that class), whose
    index blocks ``draws(sampler)`` yields at the moments ``iter(sampler)`` would draw them."""
    _KNOWN_DRAWS[sampler_class] = draws


def _index_blocks(sampler: Any) -> Iterator[list[int]] | None:
    """The index lists of a sampler whose draws we know; ``None`` for any other."""
    draws = _KNOWN_DRAWS.get(type(sampler))
    return None if draws is None else draws(sampler)


def source_batches(
    batch_sampler: Iterable[Batch], wanted: Callable[[int], bool] | None = None
) -> Iterator[Batch | UnreadBatch]:
    """``batch_sampler``'s batches, each a new list, with its draws made at the same moments.

    When it is torch's own BatchSampler over a sampler whose draws we know, the batches are
    sliced from the drawn lists, and full batches at positions ``wanted`` rejects are not read
    at all (see :func:`sliced_batches`). Any other batch sampler is iterated as it is, each batch
    copied: it may hand out tuples, or refill one list.
    """
    if type(batch_sampler) is BatchSampler:
        blocks = _index_blocks(batch_sampler.sampler)
        if blocks is not None:
            return sliced_batches(blocks, batch_sampler.batch_size, batch_sampler.drop_last, wanted)
    return map(list, batch_sampler)


__all__ = ["Batch", "UnreadBatch", "random_draws", "register_known_draws", "sliced_batches", "source_batches"]
