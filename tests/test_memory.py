"""runtime.memory without a process group: recognising OOM, the retry sequence, the guards, the vote."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from accel_convert.runtime import memory
from accel_convert.runtime.memory import find_executable_batch_size, is_out_of_memory, release_memory
from accel_convert.runtime.oom_agreement import (
    ERROR,
    FINISHED,
    OUT_OF_MEMORY,
    PEER_FAILED,
    Outcome,
    decide,
)

NEEDS_REAL_GARBAGE_COLLECTION = {"test_release_memory_returns_one_none_per_object_and_collects_cycles"}


@pytest.fixture(autouse=True)
def quick_garbage_collection(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection costs about a second with torch loaded; only the release test needs one."""
    if request.node.name not in NEEDS_REAL_GARBAGE_COLLECTION:
        monkeypatch.setattr(memory.gc, "collect", lambda *args: 0)


def cuda_oom() -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")


def fails_above(limit: int, tried: list[int]):
    """A training function that runs out of memory above ``limit`` and notes every size tried."""

    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > limit:
            raise cuda_oom()
        return batch_size

    return train


def test_halves_until_it_fits_like_the_seed_write_up(capsys: pytest.CaptureFixture[str]) -> None:
    tried: list[int] = []
    result = find_executable_batch_size(fails_above(512, tried), starting_batch_size=2048)()
    assert result == 512
    assert tried == [2048, 1024, 512]
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "find_executable_batch_size: out of memory at batch size 2048; retrying with 1024",
        "find_executable_batch_size: out of memory at batch size 1024; retrying with 512",
    ]


def test_second_call_starts_from_the_size_that_fit() -> None:
    tried: list[int] = []
    train = find_executable_batch_size(fails_above(30, tried), starting_batch_size=128)
    assert train() == 16
    assert train() == 16
    assert tried == [128, 64, 32, 16, 16]


def test_stops_with_a_clear_error_at_zero() -> None:
    tried: list[int] = []
    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero") as info:
        find_executable_batch_size(fails_above(-1, tried), starting_batch_size=8)()
    assert tried == [8, 4, 2, 1]
    assert "8, 4, 2, 1" in str(info.value)


def test_starting_at_zero_never_calls_the_function() -> None:
    tried: list[int] = []
    with pytest.raises(RuntimeError, match="reached zero"):
        find_executable_batch_size(fails_above(100, tried), starting_batch_size=0)()
    assert tried == []


def test_accelerate_style_reducer_is_honoured_in_the_configured_form() -> None:
    sizes = iter([100, 10, 1])
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=1000, reduce_batch_size_fn=lambda: next(sizes))
    def train(batch_size: int) -> int:
        return fails_above(5, tried)(batch_size)

    assert train() == 1
    assert tried == [1000, 100, 10, 1]


def test_reducer_may_take_the_failed_batch_size() -> None:
    tried: list[int] = []
    train = find_executable_batch_size(
        fails_above(50, tried),
        starting_batch_size=100,
        reduce_batch_size_fn=lambda size: size - 25,
    )
    assert train() == 50
    assert tried == [100, 75, 50]


@pytest.mark.parametrize("bad_size", [100, -1, 2.5, None])
def test_reducer_that_does_not_reduce_is_refused(bad_size: object) -> None:
    train = find_executable_batch_size(
        fails_above(1, []),
        starting_batch_size=100,
        reduce_batch_size_fn=lambda: bad_size,
    )
    with pytest.raises(ValueError, match="reduce_batch_size_fn returned .* at batch size 100"):
        train()


def test_batch_size_passed_positionally_is_a_type_error() -> None:
    calls: list[tuple] = []

    @find_executable_batch_size(starting_batch_size=16)
    def train(batch_size: int, model: str, optimizer: str) -> None:
        calls.append((batch_size, model, optimizer))

    with pytest.raises(TypeError, match="Batch size was passed into `train` as the first argument") as info:
        train(16, "model", "optimizer")
    assert "train(model='model', optimizer='optimizer')" in str(info.value)
    assert calls == []
    train("model", optimizer="optimizer")  # the right way still works
    assert calls == [(16, "model", "optimizer")]


@pytest.mark.parametrize("error", [ValueError("bad label"), RuntimeError("shape mismatch"), KeyError("out of memory.")])
def test_other_errors_propagate_at_once(error: Exception) -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=64)
    def train(batch_size: int) -> None:
        tried.append(batch_size)
        raise error

    with pytest.raises(type(error)) as info:
        train()
    assert info.value is error
    assert tried == [64]


def real_cpu_allocator_error() -> RuntimeError:
    try:
        torch.empty(1 << 62, dtype=torch.uint8)
    except RuntimeError as error:
        return error
    raise AssertionError("allocating 4 EiB did not fail")


@pytest.mark.parametrize(
    "make_error",
    [
        cuda_oom,
        lambda: RuntimeError("CUDA out of memory. Tried to allocate 2.00 MiB"),
        lambda: RuntimeError("HIP out of memory. Tried to allocate 2.00 MiB"),
        real_cpu_allocator_error,
        lambda: RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if ..."),
        lambda: RuntimeError("MPS backend out of memory (MPS allocated: 1.2 GB, other allocations: 0 bytes)"),
    ],
    ids=["torch.OutOfMemoryError", "cuda-text", "hip-text", "cpu-allocator", "cudnn", "mps"],
)
def test_each_out_of_memory_error_is_recognised_and_retried(make_error) -> None:
    error = make_error()
    assert is_out_of_memory(error)
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=4)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size == 4:
            raise error
        return batch_size

    assert train() == 2
    assert tried == [4, 2]


@pytest.mark.parametrize(
    "error",
    [RuntimeError("Expected all tensors to be on the same device"), ValueError("CUDA out of memory."), MemoryError()],
)
def test_look_alikes_are_not_out_of_memory(error: Exception) -> None:
    assert not is_out_of_memory(error)


def test_release_memory_returns_one_none_per_object_and_collects_cycles() -> None:
    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # only the garbage collector frees a cycle
    watcher = weakref.ref(cycle)
    gc.disable()  # no collection may happen by chance before release_memory runs
    try:
        del cycle
        assert watcher() is not None
        model, optimizer = torch.nn.Linear(2, 2), object()
        model, optimizer = release_memory(model, optimizer)
        assert watcher() is None
    finally:
        gc.enable()
    assert (model, optimizer) == (None, None)
    assert release_memory() == []


def test_free_memory_empties_the_device_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    emptied: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("cuda"))
    memory.free_memory()
    assert emptied == ["cuda"]


def test_out_of_memory_between_retries_frees_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    frees: list[int] = []
    monkeypatch.setattr(memory, "_empty_device_caches", lambda: frees.append(1))
    find_executable_batch_size(fails_above(2, []), starting_batch_size=8)()
    assert len(frees) == 1 + 2  # once before the first try, once after each of the two failures


# ---------------------------------------------------------------- the vote of several ranks


def test_everyone_finished_means_done() -> None:
    assert decide({0: Outcome(FINISHED), 1: Outcome(FINISHED)}).action == "done"


def test_one_rank_out_of_memory_makes_everyone_retry_with_the_smallest_size() -> None:
    decision = decide(
        {0: Outcome(PEER_FAILED), 1: Outcome(OUT_OF_MEMORY, 512), 2: Outcome(OUT_OF_MEMORY, 256), 3: Outcome(FINISHED)}
    )
    assert (decision.action, decision.batch_size, decision.ranks) == ("retry", 256, (1, 2))


def test_an_error_that_is_not_memory_stops_everyone() -> None:
    decision = decide({0: Outcome(OUT_OF_MEMORY, 8), 1: Outcome(ERROR, detail="ValueError: bad label")})
    assert (decision.action, decision.ranks) == ("stop", (1,))
    assert "rank 1: ValueError: bad label" in decision.reason


def test_a_broken_group_without_a_culprit_stops_everyone() -> None:
    assert decide({0: Outcome(PEER_FAILED), 1: Outcome(FINISHED)}).action == "stop"


def test_outcomes_travel_through_the_store_unchanged() -> None:
    outcome = Outcome(OUT_OF_MEMORY, 1024, "detail")
    assert Outcome.from_bytes(outcome.to_bytes()) == outcome


# ---------------------------------------------------------------- against Hugging Face Accelerate

ACCELERATE_EXAMPLES = [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("XPU out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError(
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
    ),
    RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes."
    ),
    RuntimeError("FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed"),
    RuntimeError("Expected all tensors to be on the same device"),
    ValueError("CUDA out of memory."),
]


@pytest.mark.parametrize("error", ACCELERATE_EXAMPLES, ids=lambda e: str(e)[:30])
def test_recognises_whatever_accelerate_recognises(error: Exception) -> None:
    from accelerate.utils.memory import should_reduce_batch_size

    assert is_out_of_memory(error) == should_reduce_batch_size(error)


def test_type_error_guard_says_what_accelerate_says() -> None:
    from accelerate.utils import find_executable_batch_size as accelerate_decorator

    def train(batch_size: int, model: str) -> None:
        pass

    messages = []
    for decorator in (accelerate_decorator, find_executable_batch_size):
        with pytest.raises(TypeError) as info:
            decorator(train, starting_batch_size=8)(8, "model")
        messages.append(str(info.value))
    lead = "Batch size was passed into `train` as the first argument when called."
    assert all(message.startswith(lead) for message in messages)


def test_launched_on_several_ranks_without_a_group_says_ranks_cannot_agree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert find_executable_batch_size(fails_above(8, []), starting_batch_size=16)() == 8
    first_line = capsys.readouterr().err.splitlines()[0]
    assert first_line.startswith("find_executable_batch_size: WORLD_SIZE > 1 but the process group is not initialised")
