"""The fast batch streams of runtime.sharding_fast draw exactly what torch's samplers draw, when they do.

A sharded epoch reads every rank's batches, so ``ShardedBatchSampler`` replaces torch's
``BatchSampler`` over ``RandomSampler`` (one Python generator step per index) by slices of lists
drawn the same way. These tests step the fast and the general path side by side, one index or
batch at a time, and compare the values *and* every RNG state after each step: the order, the
moment of each draw, and what an early ``break`` leaves behind must all be the same.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from accel_convert.runtime.sharding import SeedableRandomSampler, ShardedBatchSampler
from accel_convert.runtime.sharding_fast import (
    UnreadBatch,
    random_draws,
    sliced_batches,
    source_batches,
)


class SubclassedRandomSampler(RandomSampler):
    """Draws like RandomSampler but is not exactly it, so it takes the general path."""


class YieldingSeedableSampler(SeedableRandomSampler):
    """The seedable sampler as a plain generator over RandomSampler (how it was first written):
    the reference for the fast one, and a subclass, so it takes the general path."""

    def __iter__(self):
        if self.generator is None:
            self.generator = torch.Generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from RandomSampler.__iter__(self)
        self.epoch += 1


def chained_draws(sampler):
    return itertools.chain.from_iterable(random_draws(sampler))


def _generator(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _steps_with_states(iterator, generator: torch.Generator | None, limit: int | None = None):
    """Each item of ``iterator`` with the RNG state right after it was produced (the sampler's
    generator, or the global RNG when it has none), then the state after exhaustion."""

    def state() -> torch.Tensor:
        return torch.get_rng_state() if generator is None else generator.get_state()

    steps = [(item, state()) for item in itertools.islice(iterator, limit)]
    if limit is None:
        steps.append(("exhausted", state()))
    return steps


def _assert_same_steps(expected, ours, case) -> None:
    assert len(ours) == len(expected), case
    for position, ((want, want_state), (got, got_state)) in enumerate(zip(expected, ours)):
        assert got == want, (case, position)
        assert torch.equal(got_state, want_state), (case, position)


SAMPLER_CASES = [
    # (dataset length, replacement, num_samples)
    (1, False, None),
    (5, False, None),
    (5, False, 3),
    (5, False, 5),
    (5, False, 12),
    (5, False, 15),
    (40, False, 7),
    (5, True, None),
    (5, True, 31),
    (5, True, 32),
    (5, True, 33),
    (50, True, 70),
    (50, True, 64),
]


@pytest.mark.parametrize("own_generator", [True, False])
@pytest.mark.parametrize(("length", "replacement", "num_samples"), SAMPLER_CASES)
def test_random_draws_draw_like_random_sampler_at_every_step(length, replacement, num_samples, own_generator) -> None:
    def run(stream_of):
        torch.manual_seed(3)
        generator = _generator() if own_generator else None
        sampler = RandomSampler(range(length), replacement=replacement, num_samples=num_samples, generator=generator)
        return _steps_with_states(stream_of(sampler), generator)

    expected = run(iter)
    ours = run(chained_draws)
    _assert_same_steps(expected, ours, (length, replacement, num_samples, own_generator))


def test_only_known_samplers_are_sliced() -> None:
    def sliced(sampler) -> bool:
        stream = source_batches(BatchSampler(sampler, 2, False))
        return getattr(stream, "__name__", None) == sliced_batches.__name__

    assert sliced(RandomSampler(range(4)))
    assert sliced(SeedableRandomSampler(range(4), data_seed=1))
    assert not sliced(SubclassedRandomSampler(range(4)))
    assert not sliced(YieldingSeedableSampler(range(4), data_seed=1))
    assert not sliced(SequentialSampler(range(4)))


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(
    ("length", "batch_size", "replacement"),
    [(10, 3, False), (12, 3, False), (12, 5, True), (2, 3, False), (64, 32, True)],
)
def test_source_batches_match_torch_batch_sampler_at_every_batch(length, batch_size, replacement, drop_last) -> None:
    def run(batches_of):
        generator = _generator()
        sampler = BatchSampler(
            RandomSampler(range(length), replacement=replacement, generator=generator), batch_size, drop_last
        )
        return _steps_with_states(batches_of(sampler), generator)

    _assert_same_steps(run(iter), run(source_batches), (length, batch_size, replacement, drop_last))


SHARD_GRID = list(
    itertools.product(
        [1, 7, 12, 13, 20],  # dataset length
        [1, 2, 4],  # batch size
        [2, 3],  # processes
        [False, True],  # split batches
        [True, False],  # even batches
        [False, True],  # drop_last
    )
)


def _sharded_steps(sampler_class, case, rank, limit=None, replacement=False):
    length, size, nproc, split, even, drop_last = case
    generator = _generator(length * 31 + size)
    sampler = sampler_class(range(length), replacement=replacement, generator=generator)
    base = BatchSampler(sampler, size, drop_last)
    sharded = ShardedBatchSampler(base, nproc, rank, split_batches=split, even_batches=even)
    return _steps_with_states(iter(sharded), generator, limit)


def test_sharded_fast_and_general_paths_agree_on_a_grid() -> None:
    """Per-rank batches and generator states, whole epochs and epochs left after one batch, with
    and without replacement."""
    checked = 0
    for case in SHARD_GRID:
        length, size, nproc, split, *_ = case
        if split and size % nproc:
            continue
        for rank, limit, replacement in itertools.product(range(nproc), (None, 1), (False, True)):
            general = _sharded_steps(SubclassedRandomSampler, case, rank, limit, replacement)
            fast = _sharded_steps(RandomSampler, case, rank, limit, replacement)
            _assert_same_steps(general, fast, (case, rank, limit, replacement))
            checked += 1
    assert checked > 600


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("length", "batch_size", "num_samples"), [(6, 4, None), (6, 3, 14), (5, 5, None)])
def test_seedable_sampler_batches_draws_and_epochs_match_the_generator_version(
    length, batch_size, num_samples, drop_last
) -> None:
    def run(sampler_class, batches_of, limit=None):
        sampler = sampler_class(range(length), num_samples=num_samples, data_seed=5)
        steps = []
        for _ in range(2):  # the second epoch reseeds from the advanced epoch counter
            iterator = batches_of(BatchSampler(sampler, batch_size, drop_last))
            for batch in itertools.islice(iterator, limit):
                steps.append((batch, sampler.generator.get_state(), sampler.epoch))
            steps.append(("end", sampler.generator.get_state(), sampler.epoch))
        return steps

    for limit in (None, 1):
        expected = run(YieldingSeedableSampler, iter, limit)
        for ours in (run(SeedableRandomSampler, iter, limit), run(SeedableRandomSampler, source_batches, limit)):
            assert [(b, e) for b, _, e in ours] == [(b, e) for b, _, e in expected], limit
            assert all(torch.equal(a, b) for (_, a, _), (_, b, _) in zip(ours, expected)), limit


def test_seedable_sampler_epochs_advance_only_when_exhausted() -> None:
    sampler = SeedableRandomSampler(range(6), data_seed=11)
    first = list(itertools.islice(iter(sampler), 2))
    assert sampler.epoch == 0  # an abandoned pass is not a finished epoch
    assert list(sampler)[:2] == first and sampler.epoch == 1
    second = list(sampler)
    assert sampler.epoch == 2
    assert second == torch.randperm(6, generator=_generator(12)).tolist()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("length", [12, 13])
def test_unwanted_full_batches_are_not_read_but_keep_their_size_and_draws(length, drop_last) -> None:
    def run(wanted):
        generator = _generator()
        blocks = random_draws(RandomSampler(range(length), generator=generator))
        return _steps_with_states(sliced_batches(blocks, 4, drop_last, wanted), generator)

    everything = run(None)
    odd_only = run(lambda position: position % 2 == 1)
    assert len(odd_only) == len(everything)
    for position, ((read, read_state), (got, got_state)) in enumerate(zip(everything, odd_only)):
        assert torch.equal(got_state, read_state)
        if position % 2 == 1 or len(read) < 4 or read == "exhausted":
            assert got == read  # wanted, short (the tail may be topped up) or the end
        else:
            assert isinstance(got, UnreadBatch) and len(got) == len(read) == 4
