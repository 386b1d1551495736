"""Unit tests of runtime.data / runtime.sharding, in one process, without any process group.

The samplers take ``num_processes`` and ``process_index`` explicitly, so each rank's view can be
computed here one rank at a time. Hugging Face Accelerate's own classes are the oracle for the
grids; the hand-written tables are the cases of Accelerate's tests/test_data_loader.py.
"""

from __future__ import annotations

import itertools
from collections import namedtuple

import pytest
import torch
from accelerate.data_loader import BatchSamplerShard, IterableDatasetShard
from accelerate.data_loader import prepare_data_loader as accelerate_prepare_data_loader
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler

from accel_convert.runtime.data import PreparedDataLoader, prepare_data_loader, send_to_device, skip_first_batches
from accel_convert.runtime.gradient_state import GradientState
from accel_convert.runtime.sharding import IterableShard, SeedableRandomSampler, ShardedBatchSampler, SkipBatchSampler


def batch_sampler(length: int, batch_size: int, drop_last: bool = False) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(length)), batch_size, drop_last)


def shards(sampler, num_processes: int = 2, **options) -> list[list[list[int]]]:
    return [list(ShardedBatchSampler(sampler, num_processes, rank, **options)) for rank in range(num_processes)]


def prepare(loader: DataLoader, num_processes: int = 1, process_index: int = 0, **options) -> PreparedDataLoader:
    settings = dict(device=None, split_batches=False, even_batches=True, gradient_state=GradientState(), rng_types=None)
    settings.update(options)
    return prepare_data_loader(loader, num_processes=num_processes, process_index=process_index, **settings)


def as_lists(loader) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


# ------------------------------------------------------------------------------------------------
# Reference tables (2 ranks)
# ------------------------------------------------------------------------------------------------
WHOLE_BATCH_TABLE = [
    # (length, batch size, drop_last, rank 0, rank 1)
    (
        24,
        3,
        False,
        [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]],
        [[3, 4, 5], [9, 10, 11], [15, 16, 17], [21, 22, 23]],
    ),
    (
        21,
        3,
        False,
        [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]],
        [[3, 4, 5], [9, 10, 11], [15, 16, 17], [0, 1, 2]],
    ),
    (21, 3, True, [[0, 1, 2], [6, 7, 8], [12, 13, 14]], [[3, 4, 5], [9, 10, 11], [15, 16, 17]]),
    (
        22,
        3,
        False,
        [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]],
        [[3, 4, 5], [9, 10, 11], [15, 16, 17], [21, 0, 1]],
    ),
    (
        20,
        3,
        False,
        [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 0]],
        [[3, 4, 5], [9, 10, 11], [15, 16, 17], [1, 2, 3]],
    ),
    (2, 3, False, [[0, 1, 0]], [[1, 0, 1]]),
    (2, 3, True, [], []),
    (9, 2, False, [[0, 1], [4, 5], [8, 0]], [[2, 3], [6, 7], [1, 2]]),
    (0, 3, False, [], []),
]


@pytest.mark.parametrize(("length", "batch_size", "drop_last", "rank0", "rank1"), WHOLE_BATCH_TABLE)
def test_whole_batches_reference_table(length, batch_size, drop_last, rank0, rank1) -> None:
    sampler = batch_sampler(length, batch_size, drop_last)
    assert shards(sampler) == [rank0, rank1]
    assert [len(ShardedBatchSampler(sampler, 2, rank)) for rank in (0, 1)] == [len(rank0), len(rank1)]


SPLIT_TABLE = [
    (
        24,
        4,
        False,
        [[0, 1], [4, 5], [8, 9], [12, 13], [16, 17], [20, 21]],
        [[2, 3], [6, 7], [10, 11], [14, 15], [18, 19], [22, 23]],
    ),
    (
        22,
        4,
        False,
        [[0, 1], [4, 5], [8, 9], [12, 13], [16, 17], [20, 21]],
        [[2, 3], [6, 7], [10, 11], [14, 15], [18, 19], [0, 1]],
    ),
    (
        21,
        4,
        False,
        [[0, 1], [4, 5], [8, 9], [12, 13], [16, 17], [20, 0]],
        [[2, 3], [6, 7], [10, 11], [14, 15], [18, 19], [1, 2]],
    ),
    (21, 4, True, [[0, 1], [4, 5], [8, 9], [12, 13], [16, 17]], [[2, 3], [6, 7], [10, 11], [14, 15], [18, 19]]),
    (2, 4, False, [[0, 1]], [[0, 1]]),
    (2, 4, True, [], []),
]


@pytest.mark.parametrize(("length", "batch_size", "drop_last", "rank0", "rank1"), SPLIT_TABLE)
def test_split_batches_reference_table(length, batch_size, drop_last, rank0, rank1) -> None:
    assert shards(batch_sampler(length, batch_size, drop_last), split_batches=True) == [rank0, rank1]


UNEVEN_TABLE = [
    (21, 3, False, [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]], [[3, 4, 5], [9, 10, 11], [15, 16, 17]]),
    (20, 3, False, [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19]], [[3, 4, 5], [9, 10, 11], [15, 16, 17]]),
    (2, 3, False, [[0, 1]], []),
    (22, 3, False, [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]], [[3, 4, 5], [9, 10, 11], [15, 16, 17], [21]]),
]


@pytest.mark.parametrize(("length", "batch_size", "drop_last", "rank0", "rank1"), UNEVEN_TABLE)
def test_uneven_batches_reference_table(length, batch_size, drop_last, rank0, rank1) -> None:
    sampler = batch_sampler(length, batch_size, drop_last)
    assert shards(sampler, even_batches=False) == [rank0, rank1]
    assert [len(ShardedBatchSampler(sampler, 2, rank, even_batches=False)) for rank in (0, 1)] == [
        len(rank0),
        len(rank1),
    ]


def test_uneven_split_counts_only_real_slices() -> None:
    # 5 samples, batch 4: the short last batch [4] only has a slice for rank 0. Accelerate reports
    # len 2 on both ranks; we report what each rank really yields.
    sampler = batch_sampler(5, 4)
    assert shards(sampler, split_batches=True, even_batches=False) == [[[0, 1], [4]], [[2, 3]]]
    assert [len(ShardedBatchSampler(sampler, 2, r, split_batches=True, even_batches=False)) for r in (0, 1)] == [2, 1]


DYNAMIC_BATCHES = [[0, 1, 2], [3, 4], [5, 6, 7, 8], [9, 10, 11], [12, 13]]


def test_dynamic_batch_sizes_are_dealt_out_whole() -> None:
    assert shards(DYNAMIC_BATCHES) == [
        [[0, 1, 2], [5, 6, 7, 8], [12, 13]],
        [[3, 4], [9, 10, 11], [0, 1, 2]],
    ]
    assert shards(DYNAMIC_BATCHES, even_batches=False) == [
        [[0, 1, 2], [5, 6, 7, 8], [12, 13]],
        [[3, 4], [9, 10, 11]],
    ]
    assert shards(DYNAMIC_BATCHES[:1], num_processes=3) == [[[0, 1, 2]]] * 3


@pytest.mark.parametrize(("batch_size", "num_processes"), [(3, 2), (1, 2), (4, 3), (None, 2)])
def test_split_batches_rejects_sizes_that_do_not_divide(batch_size, num_processes) -> None:
    sampler = DYNAMIC_BATCHES if batch_size is None else batch_sampler(12, batch_size)
    with pytest.raises(ValueError, match="round multiple of the number of processes"):
        ShardedBatchSampler(sampler, num_processes, 0, split_batches=True)
    if batch_size is not None:
        with pytest.raises(ValueError, match="round multiple"):
            prepare(DataLoader(range(12), batch_size=batch_size), num_processes, 0, split_batches=True)
        with pytest.raises(ValueError, match="round multiple"):
            IterableShard(range(12), batch_size, False, num_processes, 0, split_batches=True)


def test_process_index_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="process_index 2 is outside 0..1"):
        ShardedBatchSampler(batch_sampler(4, 2), 2, 2)
    with pytest.raises(ValueError, match="outside"):
        prepare(DataLoader(range(4)), 2, 5)


def test_iterable_shard_interleaves_global_batches() -> None:
    # 2 ranks, batch 4: each rank keeps its slice of every 8-element global batch; the tail
    # is completed from the first global batch.
    stream = list(range(20))
    rank0 = list(IterableShard(stream, 4, False, 2, 0))
    rank1 = list(IterableShard(stream, 4, False, 2, 1))
    assert rank0 == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]
    assert rank1 == [4, 5, 6, 7, 12, 13, 14, 15, 0, 1, 2, 3]
    # Read back in rank order, the shards reproduce the stream, cycled to whole global batches.
    interleaved = [x for i in range(0, 12, 4) for x in rank0[i : i + 4] + rank1[i : i + 4]]
    assert interleaved == (stream + stream)[:24]
    assert list(IterableShard(stream, 4, True, 2, 1)) == [4, 5, 6, 7, 12, 13, 14, 15]
    assert list(IterableShard(stream, 4, False, 2, 1, split_batches=True)) == [2, 3, 6, 7, 10, 11, 14, 15, 18, 19]
    assert list(IterableShard(range(3), 4, False, 2, 1)) == [1, 2, 0, 1]  # tail cycles itself


# ------------------------------------------------------------------------------------------------
# Grids against Accelerate's own classes
# ------------------------------------------------------------------------------------------------
GRID = list(itertools.product(range(26), range(1, 6), range(1, 4), [False, True], [False, True], [False, True]))


def _accelerate_or_error(build):
    try:
        sampler = build()
        return list(sampler), len(sampler)
    except ValueError:
        return "ValueError", None


def test_batch_sampler_shard_grid_matches_accelerate() -> None:
    mismatches, length_differences = [], []
    for length, size, nproc, split, even, drop_last in GRID:
        base = batch_sampler(length, size, drop_last)
        for rank in range(nproc):
            expected, expected_len = _accelerate_or_error(
                lambda: BatchSamplerShard(base, nproc, rank, split_batches=split, even_batches=even)
            )
            ours, ours_len = _accelerate_or_error(
                lambda: ShardedBatchSampler(base, nproc, rank, split_batches=split, even_batches=even)
            )
            case = (length, size, nproc, rank, split, even, drop_last)
            if ours != expected:
                mismatches.append((case, expected, ours))
            elif ours != "ValueError":
                assert ours_len == len(ours), case  # our len is always what is yielded
                if ours_len != expected_len:
                    length_differences.append(case)
    assert not mismatches, mismatches[:3]
    # The only len difference is the documented one: split, uneven, a short last batch with no
    # slice for this rank.
    for length, size, nproc, rank, split, even, drop_last in length_differences:
        assert split and not even and not drop_last
        assert 0 < length % size <= rank * (size // nproc)
    assert length_differences, "the grid should contain the split/uneven case"


def test_iterable_shard_grid_matches_accelerate() -> None:
    for length, size, nproc, split, _, drop_last in GRID:
        if split and size % nproc:
            continue
        for rank in range(nproc):
            expected = IterableDatasetShard(list(range(length)), size, drop_last, nproc, rank, split)
            expected.set_epoch(0)
            ours = IterableShard(list(range(length)), size, drop_last, nproc, rank, split)
            assert list(ours) == list(expected), (length, size, nproc, rank, split, drop_last)
            assert len(ours) == len(list(ours))


def _accelerate_loader(loader, nproc, rank, split, even):
    return accelerate_prepare_data_loader(
        loader, None, nproc, rank, split_batches=split, even_batches=even, put_on_device=False
    )


# torch.manual_seed also seeds every lazily-initialised device backend, which costs milliseconds;
# restoring a seeded CPU state is the same for these CPU-only runs, and cheap.
SEEDED_RNG_STATE = torch.Generator().manual_seed(1234).get_state()


def _epochs_and_rng(make_prepared, length, size, shuffle, drop_last):
    torch.set_rng_state(SEEDED_RNG_STATE)
    prepared = make_prepared(DataLoader(list(range(length)), batch_size=size, shuffle=shuffle, drop_last=drop_last))
    epochs = [as_lists(prepared) for _ in range(2)]
    return epochs, torch.get_rng_state()


def test_prepared_loader_grid_matches_accelerate() -> None:
    """Shuffled (seeded) per-rank batches over two epochs, and the global RNG afterwards, as
    Accelerate. (Unshuffled layouts are the batch-sampler grid above.)"""
    shuffle = True
    for length, size, nproc, split, even, drop_last in GRID:
        # Every residue of length mod (size x ranks) is below 16; longer ones only repeat rounds.
        if length == 0 or (split and size % nproc) or 15 < length < 25:
            continue
        for rank in range(nproc):
            case = (length, size, nproc, rank, split, even, drop_last)
            expected, expected_rng = _epochs_and_rng(
                lambda dl: _accelerate_loader(dl, nproc, rank, split, even), length, size, shuffle, drop_last
            )
            ours, ours_rng = _epochs_and_rng(
                lambda dl: prepare(dl, nproc, rank, split_batches=split, even_batches=even),
                length,
                size,
                shuffle,
                drop_last,
            )
            assert ours == expected, case
            assert torch.equal(ours_rng, expected_rng), case


# ------------------------------------------------------------------------------------------------
# The prepared loader's attributes and bookkeeping
# ------------------------------------------------------------------------------------------------
def test_prepared_loader_attributes() -> None:
    dataset = list(range(10))
    original = DataLoader(dataset, batch_size=2, shuffle=True)
    prepared = prepare(original, 2, 1)
    assert isinstance(prepared, DataLoader)
    assert prepared.dataset is dataset
    assert (prepared.batch_size, prepared.drop_last) == (2, False)
    assert (len(original), len(prepared)) == (5, 3)
    assert (prepared.total_batch_size, prepared.remainder) == (4, 2)
    assert prepared.synchronized_generator is original.sampler.generator
    assert isinstance(prepared.synchronized_generator, torch.Generator)
    assert prepared.iteration == 0
    as_lists(prepared)
    assert prepared.iteration == 1
    split = prepare(DataLoader(dataset, batch_size=4, drop_last=True), 2, 0, split_batches=True)
    assert (split.total_batch_size, split.remainder, len(split)) == (4, -1, 2)


def test_one_process_shuffle_keeps_the_script_generator_free() -> None:
    original = DataLoader(list(range(10)), batch_size=2, shuffle=True)
    prepared = prepare(original, 1, 0, rng_types=["generator"])
    assert original.sampler.generator is None
    assert prepared.synchronized_generator is None and prepared.rng_types == []


def test_prepared_loaders_pickle_and_are_garbage_collected() -> None:
    import gc
    import pickle
    import weakref

    prepared = prepare(DataLoader(list(range(10)), batch_size=2, shuffle=True), 2, 1)
    copy = pickle.loads(pickle.dumps(prepared))
    assert isinstance(copy, PreparedDataLoader) and len(copy) == 3
    assert as_lists(copy) == as_lists(prepared)  # the generator's state travelled with it
    reference = weakref.ref(prepared)
    del prepared, copy
    gc.collect()
    assert reference() is None


def test_unknown_rng_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unsupported rng_types \\['xla'\\]"):
        prepare(DataLoader(range(4)), 1, 0, rng_types=["xla"])


def _trace(loader, state: GradientState):
    return [
        (batch.tolist(), state.end_of_dataloader, state.remainder, state.active_dataloader is loader)
        for batch in loader
    ]


def test_end_of_dataloader_only_on_last_batch_every_epoch() -> None:
    state = GradientState()
    prepared = prepare(DataLoader(list(range(9)), batch_size=2), 2, 0, gradient_state=state)
    expected = [([0, 1], False, 1, True), ([4, 5], False, 1, True), ([8, 0], True, 1, True)]
    assert _trace(prepared, state) == expected
    assert _trace(prepared, state) == expected  # second epoch too
    assert (state.in_dataloader, state.end_of_dataloader, state.remainder) == (False, False, -1)


def test_end_of_dataloader_for_iterable_and_nested_loaders() -> None:
    state = GradientState()
    train = prepare(DataLoader(RangeStream(7), batch_size=2), 2, 1, gradient_state=state)
    evaluation = prepare(DataLoader(list(range(4)), batch_size=2), 2, 0, gradient_state=state)
    seen = []
    for batch in train:
        seen.append((batch.tolist(), state.end_of_dataloader, state.remainder))
        inner = _trace(evaluation, state)
        assert inner == [([0, 1], True, 0, True)]
        assert state.active_dataloader is train and state.remainder == 3
    assert seen == [([2, 3], False, 3), ([6, 0], True, 3)]
    assert not state.in_dataloader


class UnsizedBatchSampler:
    """A batch sampler that cannot tell its length (only ``__iter__``)."""

    def __iter__(self):
        return iter([[0, 1], [2, 3], [4]])


@pytest.mark.parametrize(("num_processes", "expected"), [(1, [[0, 1], [2, 3], [4]]), (2, [[0, 1], [4]])])
def test_last_batch_is_found_without_a_length(num_processes, expected) -> None:
    state = GradientState()
    prepared = prepare(
        DataLoader(list(range(5)), batch_sampler=UnsizedBatchSampler()), num_processes, 0, gradient_state=state
    )
    with pytest.raises(TypeError):
        len(prepared)
    trace = [(batch.tolist(), state.end_of_dataloader, state.remainder) for batch in prepared]
    assert trace == [(batch, index == len(expected) - 1, -1) for index, batch in enumerate(expected)]


def test_leaving_a_loop_early_unregisters_the_loader() -> None:
    state = GradientState()
    prepared = prepare(DataLoader(list(range(8)), batch_size=2), 1, 0, gradient_state=state)
    for _ in prepared:
        assert state.active_dataloader is prepared
        break
    assert not state.in_dataloader
    assert prepared.iteration == 0  # an abandoned epoch is not a completed one


def test_batches_are_moved_to_the_device() -> None:
    prepared = prepare(
        DataLoader([{"x": torch.ones(2), "label": i} for i in range(4)], batch_size=2),
        2,
        0,
        device=torch.device("meta"),
    )
    batches = list(prepared)
    assert [batch["x"].device.type for batch in batches] == ["meta"]
    assert batches[0]["label"].device.type == "meta"


# ------------------------------------------------------------------------------------------------
# One process is the identity
# ------------------------------------------------------------------------------------------------
class NoisyDataset(torch.utils.data.Dataset):
    """Augmentation-like: every __getitem__ draws from torch's global RNG."""

    def __len__(self) -> int:
        return 11

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index)]) + torch.rand(1)


def _training_like_run(wrap, num_workers: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    torch.manual_seed(7)
    loader = wrap(DataLoader(NoisyDataset(), batch_size=3, shuffle=True, num_workers=num_workers))
    seen = []
    for _epoch in range(3):
        for batch in loader:
            seen.append(torch.nn.functional.dropout(batch, 0.5))  # the "training step" draws RNG too
    return seen, torch.get_rng_state()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_process_prepared_loader_is_the_original_loader(num_workers: int) -> None:
    original_batches, original_rng = _training_like_run(lambda loader: loader, num_workers)
    state = GradientState()
    prepared_batches, prepared_rng = _training_like_run(
        lambda loader: prepare(loader, 1, 0, gradient_state=state, rng_types=["torch", "generator"]), num_workers
    )
    assert len(prepared_batches) == len(original_batches) == 12
    for ours, theirs in zip(prepared_batches, original_batches):
        assert torch.equal(ours, theirs)
    assert torch.equal(prepared_rng, original_rng)


# ------------------------------------------------------------------------------------------------
# skip_first_batches
# ------------------------------------------------------------------------------------------------
def test_skip_first_batches_on_plain_loaders() -> None:
    skipped = skip_first_batches(DataLoader(list(range(16)), batch_size=4), num_batches=2)
    assert type(skipped) is DataLoader
    assert as_lists(skipped) == [[8, 9, 10, 11], [12, 13, 14, 15]] and len(skipped) == 2
    skipped = skip_first_batches(DataLoader(RangeStream(10), batch_size=2), num_batches=2)
    assert as_lists(skipped) == [[4, 5], [6, 7], [8, 9]] and len(skipped) == 3
    with pytest.raises(ValueError, match="negative"):
        skip_first_batches(DataLoader(range(4)), -1)


def test_skip_first_batches_on_a_prepared_loader_keeps_its_state() -> None:
    state = GradientState()
    prepared = prepare(
        DataLoader(list(range(10)), batch_size=2), 2, 1, gradient_state=state, device=torch.device("meta")
    )
    prepared.set_epoch(3)
    skipped = skip_first_batches(prepared, 1)
    assert isinstance(skipped, PreparedDataLoader)
    assert (skipped.iteration, skipped.device, skipped.remainder, len(skipped)) == (3, torch.device("meta"), 2, 2)
    trace = []
    for batch in skipped:
        trace.append((batch.device.type, state.end_of_dataloader))
    assert trace == [("meta", False), ("meta", True)]
    assert skipped.iteration == 4
    plain = skip_first_batches(prepare(DataLoader(list(range(10)), batch_size=2), 2, 1), 1)
    assert as_lists(plain) == [[6, 7], [0, 1]]


def test_a_mid_epoch_restore_replays_the_rest_of_that_epoch() -> None:
    """What a checkpoint saves mid-epoch (the generator state when the epoch began) and
    ``skip_first_batches`` give back exactly the batches the interrupted epoch had left."""
    torch.set_rng_state(SEEDED_RNG_STATE)
    prepared = prepare(DataLoader(list(range(12)), batch_size=2, shuffle=True), 2, 0)
    generator = prepared.synchronized_generator
    assert prepared.epoch_start_generator_state is None
    epoch_start_rng = torch.get_rng_state()  # after prepare's one draw (the generator's seed)
    batches = iter(prepared)
    next(batches), next(batches)
    start = prepared.epoch_start_generator_state
    assert start is not None and not torch.equal(start, generator.get_state())  # the order is drawn
    # The iterator drew its base seed from the global RNG: the state before that draw is kept.
    assert torch.equal(prepared.epoch_start_rng_state, epoch_start_rng)
    rest = [batch.tolist() for batch in batches]
    assert prepared.epoch_start_generator_state is None and prepared.iteration == 1
    after_epoch = generator.get_state()
    torch.rand(3)  # training draws (dropout) after the checkpoint's moment
    mid_epoch_rng = torch.get_rng_state()
    prepared.restore_progress(0, start, epoch_start_rng)  # what load_state does with that checkpoint
    resumed = skip_first_batches(prepared, 2)
    assert as_lists(resumed) == rest and len(rest) == 1
    assert torch.equal(generator.get_state(), after_epoch)  # the next epoch's order is the same too
    # The base seed was drawn again from the epoch's start, not from the resumed run's RNG.
    assert torch.equal(torch.get_rng_state(), mid_epoch_rng)
    assert prepared.iteration == 1  # the copy finished the epoch for the original


def test_one_process_records_no_generator_state() -> None:
    prepared = prepare(DataLoader(list(range(12)), batch_size=2, shuffle=True), 1, 0)
    batches = iter(prepared)
    next(batches)
    assert prepared.epoch_start_generator_state is None and prepared.synchronized_generator is None
    assert prepared.epoch_start_rng_state is None


def test_skip_first_batches_on_a_prepared_iterable_loader() -> None:
    prepared = prepare(DataLoader(RangeStream(10), batch_size=2), 2, 0)
    assert as_lists(prepared) == [[0, 1], [4, 5], [8, 9]] and len(prepared) == 3
    skipped = skip_first_batches(prepared, 2)
    assert as_lists(skipped) == [[8, 9]] and len(skipped) == 1
    alone = skip_first_batches(prepare(DataLoader(RangeStream(5), batch_size=2), 1, 0), 1)
    assert as_lists(alone) == [[2, 3], [4]] and len(alone) == 2


def test_skip_batch_sampler() -> None:
    assert list(SkipBatchSampler(batch_sampler(7, 2), 2)) == [[4, 5], [6]]
    assert len(SkipBatchSampler(batch_sampler(7, 2), 2)) == 2
    assert len(SkipBatchSampler(batch_sampler(7, 2), 9)) == 0


# ------------------------------------------------------------------------------------------------
# set_epoch
# ------------------------------------------------------------------------------------------------
class RangeStream(IterableDataset):
    def __init__(self, length: int) -> None:
        self.length = length
        self.epochs: list[int] = []

    def __iter__(self):
        return iter(range(self.length))

    def __len__(self) -> int:
        return self.length

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class EpochSampler(SequentialSampler):
    def __init__(self, data) -> None:
        super().__init__(data)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class EpochBatchSampler(BatchSampler):
    def __init__(self, sampler, batch_size: int) -> None:
        super().__init__(sampler, batch_size, False)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class EpochMapDataset(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> int:
        return index

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_set_epoch_reaches_samplers_batch_samplers_and_datasets() -> None:
    dataset = EpochMapDataset()
    sampler = EpochSampler(dataset)
    custom = EpochBatchSampler(sampler, 2)
    prepared = prepare(DataLoader(dataset, batch_sampler=custom), 2, 0)
    prepared.set_epoch(5)
    assert (sampler.epochs, custom.epochs, dataset.epochs, prepared.iteration) == ([5], [5], [], 5)
    for _epoch in range(2):  # on several processes every epoch re-announces its number
        list(prepared)
    assert sampler.epochs == [5, 5, 6]
    # The dataset hears of the epoch only when no sampler takes it.
    dataset = EpochMapDataset()
    prepare(DataLoader(dataset, batch_size=2), 2, 0).set_epoch(2)
    assert dataset.epochs == [2]
    stream = RangeStream(4)
    prepared = prepare(DataLoader(stream, batch_size=1), 2, 1)
    prepared.set_epoch(1)
    assert stream.epochs == [1] and prepared.dataset.epoch == 1


def test_one_process_does_not_announce_epochs_by_itself() -> None:
    sampler = EpochSampler(range(4))
    prepared = prepare(DataLoader(range(4), sampler=sampler, batch_size=2), 1, 0)
    list(prepared)
    list(prepared)
    assert sampler.epochs == []  # the original loader would not have called it either
    prepared.set_epoch(4)
    assert sampler.epochs == [4]


# ------------------------------------------------------------------------------------------------
# Seedable sampler
# ------------------------------------------------------------------------------------------------
def test_seedable_sampler_depends_on_seed_and_epoch_only() -> None:
    def orders(data_seed, noise_draws=0):
        torch.manual_seed(0)
        torch.rand(noise_draws)
        loader = prepare(
            DataLoader(list(range(12)), batch_size=12, shuffle=True),
            2,
            0,
            use_seedable_sampler=True,
            data_seed=data_seed,
            split_batches=True,
        )
        return [as_lists(loader) for _ in range(2)]

    first = orders(42)
    assert first == orders(42, noise_draws=5)  # unaffected by the global RNG
    assert first[0] != first[1]  # each epoch reshuffles
    assert first != orders(43)
    sampler = SeedableRandomSampler(range(5), data_seed=3)
    sampler.set_epoch(2)
    assert list(sampler) == torch.randperm(5, generator=torch.Generator().manual_seed(5)).tolist()


def test_seedable_sampler_leaves_the_script_sampler_alone() -> None:
    original = DataLoader(list(range(6)), batch_size=2, shuffle=True)
    prepared = prepare(original, 2, 0, use_seedable_sampler=True)
    assert type(original.batch_sampler.sampler) is RandomSampler
    assert isinstance(prepared.batch_sampler.batch_sampler.sampler, SeedableRandomSampler)
    assert prepared.synchronized_generator is None


# ------------------------------------------------------------------------------------------------
# send_to_device
# ------------------------------------------------------------------------------------------------
Pair = namedtuple("Pair", ["inputs", "labels"])


class Movable:
    """Like transformers' BatchEncoding: moves itself, and knows no ``non_blocking``."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def to(self, device):
        return Movable(self.tensor.to(device))


def test_send_to_device_walks_nested_structures() -> None:
    meta = torch.device("meta")
    batch = {
        "pair": Pair(torch.ones(2), [torch.zeros(1), "text", 3]),
        "enc": Movable(torch.ones(1)),
        "tuple": (torch.ones(1),),
    }
    moved = send_to_device(batch, meta, non_blocking=True)
    assert isinstance(moved["pair"], Pair) and isinstance(moved["tuple"], tuple)
    assert moved["pair"].inputs.device == meta and moved["pair"].labels[0].device == meta
    assert moved["pair"].labels[1:] == ["text", 3]
    assert moved["enc"].tensor.device == meta and moved["tuple"][0].device == meta
    assert batch["pair"].inputs.device.type == "cpu"  # the input is not modified
    assert send_to_device(batch, None) is batch
    from collections import OrderedDict, defaultdict

    counts = defaultdict(list, {"x": torch.ones(1)})
    moved = send_to_device(counts, meta)
    assert type(moved) is defaultdict and moved.default_factory is list and moved["x"].device == meta
    assert counts["x"].device.type == "cpu"
    assert type(send_to_device(OrderedDict(a=torch.ones(1)), meta)) is OrderedDict


def test_send_to_device_moves_batch_encodings() -> None:
    from transformers import BatchEncoding

    encoding = BatchEncoding({"input_ids": torch.ones(2, 3, dtype=torch.long)})
    moved = send_to_device([encoding], torch.device("meta"))
    assert isinstance(moved[0], BatchEncoding) and moved[0]["input_ids"].device.type == "meta"
