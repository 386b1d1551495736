"""Accelerate's state objects, logging, functional loader API, comm hooks, profiling and the
Accelerator methods scripts call (join_uneven_inputs, trigger_sync_in_backward, on_local_process).

One 2-process launch (tests/scripts/runtime_api_checks.py, debug mode on) serves the
distributed tests; the rest run in this process.
"""

from __future__ import annotations

import json
import logging
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from accel_convert.runtime import (
    Accelerator,
    AcceleratorState,
    DataLoaderConfiguration,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    DistributedType,
    GradientState,
    PartialState,
    ProfileKwargs,
    get_logger,
    prepare_data_loader,
    synchronize_rng_states,
)
from accel_convert.runtime.comm_hooks import register_comm_hook
from tests.launching import REPO_ROOT, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_api_checks.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    work = tmp_path_factory.mktemp("api")
    torchrun(SCRIPT, str(work), nproc=2, timeout=240, env={"ACCELERATE_DEBUG_MODE": "1"}).check()
    return [json.loads((work / f"result_rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(autouse=True)
def fresh_state():
    """Each test starts without a shared process state (as after Accelerate's _reset_state)."""
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


# ------------------------------------------------------------------------ two processes
def test_state_objects_agree_with_the_accelerator(ranks: list[dict]) -> None:
    assert [r["state_objects"]["same_facts"] for r in ranks] == [True, True]
    assert [r["state_objects"]["distributed_type"] for r in ranks] == ["MULTI_CPU", "MULTI_CPU"]
    assert [r["state_objects"]["local_process_ran"] for r in ranks] == [None, True]


def test_a_method_run_as_forward_averages_gradients_and_the_unwrapped_one_does_not(ranks: list[dict]) -> None:
    # Each rank's input is raised to a different power, so its own gradient differs.
    through, unwrapped = ([r["as_forward"][route] for r in ranks] for route in ("as_forward", "unwrapped"))
    assert through[0] == pytest.approx(through[1], rel=1e-6)
    assert unwrapped[0] != pytest.approx(unwrapped[1], rel=1e-3)
    # The average of the two ranks' own gradients.
    assert through[0] == pytest.approx((unwrapped[0] + unwrapped[1]) / 2, rel=1e-5)
    for result in ranks:
        assert result["as_forward"]["as_forward_forward_after"] == result["as_forward"]["unwrapped_forward_after"]


def test_parts_run_as_forward_one_by_one_keep_the_ranks_weights_equal(ranks: list[dict]) -> None:
    # A trainer calling the model's parts one by one (extractor, then rpn and head on its output)
    # before one backward: through as_forward, DDP averages the ranks' different gradients.
    through, unwrapped = ([r["parts_as_forward"][route] for r in ranks] for route in ("as_forward", "unwrapped"))
    assert through[0] == pytest.approx(through[1], rel=1e-6)
    assert unwrapped[0] != pytest.approx(unwrapped[1], rel=1e-3)


def test_as_forward_is_the_model_itself_on_one_process() -> None:
    model = torch.nn.Linear(2, 1)
    assert Accelerator().as_forward(model) is model


def test_debug_mode_names_each_ranks_shapes(ranks: list[dict]) -> None:
    for result in ranks:
        debug = result["debug"]
        assert debug["debug_from_env"] is True
        assert "Process 0: [(2, 3)]" in debug["gather"] and "Process 1: [(3, 3)]" in debug["gather"]
        assert "`reduce`" in debug["reduce"]
        assert "Process 0: [1]" in debug["pad"] and "Process 1: [2]" in debug["pad"]
    # Same number of dimensions: padding goes ahead (rank 0's [1, 1] padded to rank 1's length).
    assert [r["debug"]["pad_same_ndim"] for r in ranks] == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def test_comm_hooks_are_registered_and_average_like_plain_ddp(ranks: list[dict]) -> None:
    for result in ranks:
        hooks = result["comm_hooks"]
        assert {name: entry["hook"] for name, entry in hooks.items() if name != "bf16_error"} == {
            "no+no": None,
            "fp16+no": "fp16_compress_hook",
            "power_sgd+no": "powerSGD_hook",
            "power_sgd+fp16": "fp16_compress_wrapper.<locals>.fp16_compress_wrapper_hook",
            "batched_power_sgd+no": "batched_powerSGD_hook",
        }
        # No compression is exact; PowerSGD starts compressing only after start_powerSGD_iter
        # (1000) steps, so its first step is an exact all-reduce; fp16 rounds.
        assert hooks["no+no"]["max_error"] == 0.0 and hooks["power_sgd+no"]["max_error"] == 0.0
        assert 0.0 < hooks["fp16+no"]["max_error"] < 1e-3
        assert "BF16" in hooks["bf16_error"]  # torch allows bf16 hooks on NCCL/XCCL builds only
        assert result["fp16_hook"]["hook"] == result["fp16_hook"]["expected_hook"]
        assert result["fp16_hook"]["representable_in_fp16"] is True


def test_get_logger_logs_on_the_main_process_unless_told_otherwise(ranks: list[dict]) -> None:
    assert ranks[0]["logging"]["lines"] == ["main only", "every rank", "in order"]
    assert ranks[1]["logging"]["lines"] == ["every rank", "in order"]


def test_synchronize_rng_states_makes_every_rank_draw_rank_0s_numbers(ranks: list[dict]) -> None:
    assert ranks[0]["rng"] == ranks[1]["rng"]
    torch.manual_seed(0)
    assert ranks[0]["rng"]["torch_draw"] == pytest.approx(torch.rand(1).item())


def test_profile_writes_one_chrome_trace_per_rank(ranks: list[dict]) -> None:
    for result in ranks:
        assert result["profile"] == {"saw_matmul": True, "traces": ["profile_0.json", "profile_1.json"]}


def test_join_uneven_inputs_lets_ranks_run_different_step_counts_on_cpu(ranks: list[dict]) -> None:
    # 3 samples, batch size 1, even_batches=False: rank 0 gets 2 batches, rank 1 gets 1; without
    # Join rank 0's second all-reduce would wait for rank 1 forever.
    assert [r["join"]["steps"] for r in ranks] == [2, 1]


# ------------------------------------------------------------------------ one process
def test_partial_state_is_shared_and_reset_detects_again(monkeypatch: pytest.MonkeyPatch) -> None:
    first = PartialState()
    first.debug = True
    second = PartialState()
    assert second.debug is True and second.__dict__ is first.__dict__  # one shared state
    assert (first.num_processes, first.process_index, first.distributed_type) == (1, 0, DistributedType.NO)
    PartialState._reset_state()
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "1")
    assert PartialState().debug is True
    PartialState._reset_state()
    monkeypatch.delenv("ACCELERATE_DEBUG_MODE")
    assert PartialState().debug is False
    assert "Num processes: 1" in repr(PartialState())
    with PartialState().split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]


def test_accelerator_state_is_the_accelerators_and_survives_pickling() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    assert AcceleratorState().mixed_precision == "bf16" and "Mixed precision type: bf16" in repr(AcceleratorState())
    assert AcceleratorState().process_index == accelerator.process_index == 0
    later = Accelerator()
    assert (accelerator.mixed_precision, later.mixed_precision, AcceleratorState().mixed_precision) == (
        "bf16",
        "no",
        "no",
    )
    accelerator.state.distributed_type = DistributedType.FSDP
    assert accelerator.distributed_type == "FSDP" and AcceleratorState().distributed_type == DistributedType.FSDP
    restored = pickle.loads(pickle.dumps(later))
    assert restored.state.__dict__ == later.state.__dict__


def test_reset_state_breaks_an_existing_accelerator_with_accelerates_message() -> None:
    accelerator = Accelerator()
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError, match=r"This happens if `AcceleratorState._reset_state\(\)`"):
        accelerator.prepare(torch.nn.Linear(1, 1))


def test_gradient_state_reset_is_accepted_and_each_accelerator_owns_one() -> None:
    first, second = Accelerator(gradient_accumulation_steps=4), Accelerator()
    GradientState._reset_state()
    assert first.gradient_state is not second.gradient_state
    assert (first.gradient_accumulation_steps, second.gradient_accumulation_steps) == (4, 1)


def test_distributed_type_compares_with_strings_and_accelerates_enum() -> None:
    from accelerate.utils import DistributedType as AccelerateDistributedType

    assert DistributedType.MULTI_CPU == "MULTI_CPU"
    assert [member.value for member in DistributedType] == [member.value for member in AccelerateDistributedType]
    assert DistributedType.MULTI_GPU == AccelerateDistributedType.MULTI_GPU
    assert DistributedType.NO in (AccelerateDistributedType.NO, AccelerateDistributedType.MULTI_CPU)


def test_comm_hook_names_and_handler_defaults() -> None:
    assert DDPCommunicationHookType.FP16 == "fp16" and str(DDPCommunicationHookType.POWER_SGD) == "power_sgd"
    # A field the script sets is kept even at its default value (it reaches DDP's wrapping).
    assert DistributedDataParallelKwargs().to_kwargs() == {}
    assert DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.NO).to_kwargs() == {
        "comm_hook": DDPCommunicationHookType.NO
    }
    assert DistributedDataParallelKwargs(comm_hook="fp16").to_kwargs() == {"comm_hook": "fp16"}

    class Recorder:
        def __init__(self) -> None:
            self.registered: list = []

        def register_comm_hook(self, state, hook) -> None:
            self.registered.append((state, hook.__qualname__))

    with pytest.raises(ValueError, match="comm_hook='zip'"):
        register_comm_hook(Recorder(), "zip")
    with pytest.raises(ValueError, match="comm_wrapper"):
        register_comm_hook(Recorder(), "fp16", "power_sgd")
    with pytest.raises(ValueError, match="only applies to PowerSGD"):
        register_comm_hook(Recorder(), "fp16", "no", {"matrix_approximation_rank": 2})
    with pytest.raises(ValueError, match="need a comm_hook"):
        register_comm_hook(Recorder(), "no", "fp16")
    recorder = Recorder()
    assert register_comm_hook(recorder, "power_sgd", "fp16", {"matrix_approximation_rank": 3}) == "power_sgd"
    state, name = recorder.registered[-1]
    assert state.matrix_approximation_rank == 3 and name.startswith("fp16_compress_wrapper")


def test_get_logger_without_a_process_group_logs_and_sets_the_level(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("runtime_api_single", log_level="WARNING")
    with caplog.at_level(logging.DEBUG, logger="runtime_api_single"):
        logger.setLevel(logging.WARNING)
        logger.info("dropped")
        logger.warning("kept")
        logger.warning_once("once")
        logger.warning_once("once")
    messages = [record.getMessage() for record in caplog.records if record.name == "runtime_api_single"]
    assert messages == ["kept", "once"]
    assert caplog.records[-1].filename == Path(__file__).name  # the caller, not runtime/logging.py


def test_functional_prepare_data_loader_takes_accelerates_arguments() -> None:
    loader = DataLoader(list(range(10)), batch_size=4)
    # Two processes, this is the second: batch 1, then a full batch cut from the epoch's start
    # after the samples that topped up rank 0's short [8, 9] (Accelerate's even-batches layout).
    prepared = prepare_data_loader(loader, None, 2, 1)
    assert [batch.tolist() for batch in prepared] == [[4, 5, 6, 7], [2, 3, 4, 5]]
    alone = prepare_data_loader(loader, put_on_device=True)  # the process facts from PartialState
    assert [batch.tolist() for batch in alone] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert alone.device == PartialState().device
    with pytest.raises(ValueError, match="dispatch_batches=True"):
        prepare_data_loader(loader, dispatch_batches=True)


def test_functional_loader_reports_to_the_latest_accelerator() -> None:
    accelerator = Accelerator()
    prepared = prepare_data_loader(DataLoader(list(range(4)), batch_size=2), None, 1, 0)
    flags = [accelerator.gradient_state.end_of_dataloader for _ in prepared]
    assert flags == [False, True]


def test_synchronize_rng_states_is_a_no_op_alone_and_checks_its_names() -> None:
    torch.manual_seed(3)
    before = torch.get_rng_state()
    synchronize_rng_states(["torch", "generator"], torch.Generator())
    assert torch.equal(before, torch.get_rng_state())
    with pytest.raises(ValueError, match="unsupported rng_types"):
        synchronize_rng_states(["xla"])


def test_profile_uses_the_handler_from_kwargs_handlers(tmp_path: Path) -> None:
    seen = []
    handler = ProfileKwargs(
        schedule_option={"wait": 0, "warmup": 1, "active": 1, "repeat": 1},
        on_trace_ready=seen.append,
        output_trace_dir=str(tmp_path),
    )
    accelerator = Accelerator(kwargs_handlers=[handler])
    with accelerator.profile() as profiler:
        for _ in range(3):  # warm-up, active (the trace is ready), then nothing: one cycle
            torch.ones(4) + 1
            profiler.step()
    assert len(seen) == 1 and (tmp_path / "profile_0.json").exists()
    with pytest.raises(ValueError, match="unknown profiler activity 'tpu'"):
        ProfileKwargs(activities=["tpu"]).build()


def test_join_and_trigger_sync_are_transparent_on_one_process() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one process: no "has no effect" warning either
        with accelerator.join_uneven_inputs([model], even_batches=False):
            model(torch.ones(1, 1)).sum().backward()
        with accelerator.trigger_sync_in_backward(model):
            model(torch.ones(1, 1)).sum().backward()
    assert model.weight.grad.item() == 2.0
    assert accelerator.on_local_process(lambda: "ran", local_process_index=0)() == "ran"
    assert accelerator.on_local_process(local_process_index=1)(lambda: "ran")() is None


def test_non_blocking_placement_reaches_every_batch() -> None:
    calls = []

    class Moves:
        def to(self, device, non_blocking=False):
            calls.append(non_blocking)
            return self

    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))
    assert accelerator.non_blocking is True
    loader = accelerator.prepare(DataLoader([Moves(), Moves()], batch_size=None))
    assert len(list(loader)) == 2 and calls == [True, True]
