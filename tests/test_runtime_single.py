"""One process (plain ``python``, no launcher): the runtime must be the identity for training, and
its constructor, prepare and wrappers must behave as documented. Runs in-process (no launch)."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_convert import runtime
from accel_convert.runtime import (
    Accelerator,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    set_seed,
)
from accel_convert.runtime import utils as runtime_utils
from accel_convert.runtime.gradient_state import GradientState
from accel_convert.runtime.wrappers import AcceleratedOptimizer, AcceleratedScheduler


@pytest.fixture(autouse=True)
def no_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "ACCELERATE_USE_CPU",
        "ACCELERATE_MIXED_PRECISION",
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    ):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------- identity
def _dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(23, 6, generator=generator)
    return TensorDataset(x, (x[:, :1] * 2 - x[:, 1:2]).sign())


def _train(use_runtime: bool, epochs: int = 3) -> list[float]:
    """A shuffled, dropout, multi-epoch training with a scheduler; returns every loss."""
    set_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    loader = DataLoader(_dataset(), batch_size=4, shuffle=True)
    accelerator = Accelerator() if use_runtime else None
    if accelerator:
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses = []
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), (y + 1) / 2)
            accelerator.backward(loss) if accelerator else loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
    return losses


def test_one_process_is_the_identity_for_training() -> None:
    original = _train(use_runtime=False)
    prepared = _train(use_runtime=True)
    assert len(original) == 3 * 6
    assert prepared == original  # exactly: same RNG draws, same batches, same updates
    assert len(set(original)) > 10  # the losses really move (the test would notice a frozen model)


def test_single_process_state() -> None:
    accelerator = Accelerator()
    assert (accelerator.num_processes, accelerator.process_index, accelerator.use_distributed) == (1, 0, False)
    assert accelerator.distributed_type == runtime.DistributedType.NO == "NO"
    assert accelerator.is_main_process and accelerator.is_local_main_process and accelerator.is_last_process
    assert accelerator.device.type in {"cpu", "cuda", "mps"}
    assert Accelerator(cpu=True).device == torch.device("cpu")


# ---------------------------------------------------------------------------- constructor
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"not_an_option": 1}, TypeError, "not_an_option"),
        ({"log_with": "wandb"}, ValueError, "not supported"),
        ({"deepspeed_plugin": object()}, ValueError, "deepspeed_plugin"),
        ({"fsdp_plugin": object()}, ValueError, "fsdp_plugin"),
        ({"dynamo_backend": "inductor"}, ValueError, "dynamo_backend"),
        ({"mixed_precision": "fp8"}, ValueError, "fp8"),
        ({"mixed_precision": "int4"}, ValueError, "int4"),
        (
            {"gradient_accumulation_steps": 2, "gradient_accumulation_plugin": GradientAccumulationPlugin(num_steps=2)},
            ValueError,
            "not both",
        ),
        ({"gradient_accumulation_steps": 0}, ValueError, ">= 1"),
        (
            {"kwargs_handlers": [DistributedDataParallelKwargs(), DistributedDataParallelKwargs()]},
            ValueError,
            "only pass one",
        ),
        ({"kwargs_handlers": [object()]}, ValueError, "not supported"),
        ({"split_batches": True, "dataloader_config": DataLoaderConfiguration()}, ValueError, "dataloader_config"),
        ({"dispatch_batches": True}, ValueError, "dispatch_batches"),
    ],
)
def test_constructor_rejects_unknown_and_unsupported_arguments(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Accelerator(**kwargs)


def test_split_batches_argument_is_honoured() -> None:
    # Accelerate 1.x silently ignores Accelerator(split_batches=True); we do not.
    assert Accelerator(split_batches=True).split_batches is True
    assert Accelerator().split_batches is False
    assert Accelerator(even_batches=False).even_batches is False


def test_launcher_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    accelerator = Accelerator()
    assert (accelerator.mixed_precision, accelerator.gradient_accumulation_steps) == ("bf16", 4)


def test_handlers_forward_only_changed_fields() -> None:
    assert DistributedDataParallelKwargs().to_kwargs() == {}
    assert DistributedDataParallelKwargs(bucket_cap_mb=50).to_kwargs() == {"bucket_cap_mb": 50}
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=128.0)])
    assert accelerator.scaler.get_scale() == 128.0


def test_runtime_utils_reexports() -> None:
    from accel_convert.runtime.memory import find_executable_batch_size, release_memory

    assert runtime_utils.find_executable_batch_size is find_executable_batch_size
    assert runtime.find_executable_batch_size is find_executable_batch_size
    assert runtime_utils.release_memory is release_memory
    assert runtime_utils.DistributedDataParallelKwargs is DistributedDataParallelKwargs
    with pytest.raises(AttributeError):
        runtime_utils.no_such_helper  # noqa: B018


# ---------------------------------------------------------------------------- prepare
def test_prepare_classifies_keeps_order_and_is_idempotent() -> None:
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = DataLoader(torch.arange(6), batch_size=2)
    other = {"keep": "me"}
    prepared = accelerator.prepare(scheduler, other, loader, optimizer, model)
    p_scheduler, p_other, p_loader, p_optimizer, p_model = prepared
    assert isinstance(p_scheduler, AcceleratedScheduler) and p_scheduler.optimizers == [p_optimizer]
    assert p_other is other
    assert isinstance(p_loader, DataLoader) and len(p_loader) == 3
    assert isinstance(p_optimizer, AcceleratedOptimizer) and p_optimizer.optimizer is optimizer
    assert p_model is model  # one process: no DDP wrapper
    assert accelerator.prepare(p_model) is p_model  # one argument: the bare object
    assert accelerator.prepare(p_optimizer, p_loader) == (p_optimizer, p_loader)
    assert (len(accelerator._models), len(accelerator._optimizers), len(accelerator._dataloaders)) == (1, 1, 1)


def test_a_prepared_model_pickles_as_the_original() -> None:
    """One process: ``prepare`` hands back the script's own module, so ``torch.save(model)`` must
    write what the unconverted script writes (``accel-convert verify`` compares the files)."""
    model = torch.nn.Linear(2, 2)
    before = pickle.dumps(model.state_dict()), sorted(vars(model))
    assert Accelerator().prepare(model) is model
    assert (pickle.dumps(model.state_dict()), sorted(vars(model))) == before
    assert Accelerator().prepare(model) is model  # still known as prepared: not prepared twice


def test_prepare_device_placement_list_must_match() -> None:
    with pytest.raises(ValueError, match="device_placement"):
        Accelerator().prepare(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1), device_placement=[True])


def test_register_for_checkpointing_validates() -> None:
    accelerator = Accelerator()
    with pytest.raises(ValueError, match="index 1, `int`"):
        accelerator.register_for_checkpointing(torch.nn.Linear(1, 1), 3)
    accelerator.register_for_checkpointing(torch.nn.Linear(1, 1))
    assert len(accelerator._custom_objects) == 1


def test_unwrap_model_can_remove_the_autocast_forward() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    assert model(torch.ones(1, 2)).dtype == torch.float32  # fp32 outputs from a bf16 forward
    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert "forward" not in vars(plain)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert plain(torch.ones(1, 2)).dtype == torch.bfloat16


# ---------------------------------------------------------------------------- wrappers
def _scheduler(num_processes: int, split: bool = False, with_optimizer: bool = True, skipped: bool = False):
    state = GradientState()
    optimizer = AcceleratedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0), state)
    optimizer.step_was_skipped = skipped
    inner = torch.optim.lr_scheduler.LambdaLR(optimizer.optimizer, lambda step: 1 - step / 10)
    return AcceleratedScheduler(inner, [optimizer], state, num_processes, with_optimizer, split), state


# The wrapped scheduler is stepped without a real optimizer step here; torch warns about that.
@pytest.mark.filterwarnings("ignore:Detected call of")
@pytest.mark.parametrize(
    ("processes", "split", "with_optimizer", "skipped", "lr"),
    [
        (2, False, True, False, 0.8),  # num_processes steps per optimizer step
        (3, False, True, False, 0.7),
        (2, True, True, False, 0.9),  # split_batches: the loader kept its length, one step
        (2, False, False, False, 0.9),  # step_scheduler_with_optimizer=False: exactly one step
        (2, False, True, True, 1.0),  # the GradScaler skipped the optimizer step: no step
    ],
)
def test_scheduler_stepping_rule(processes: int, split: bool, with_optimizer: bool, skipped: bool, lr: float) -> None:
    scheduler, _ = _scheduler(processes, split, with_optimizer, skipped)
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(lr)


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_scheduler_waits_for_sync_and_caps_total_steps() -> None:
    scheduler, state = _scheduler(2)
    state.sync_gradients = False
    scheduler.step()
    assert scheduler.last_epoch == 0
    state = GradientState()
    optimizer = AcceleratedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0), state)
    one_cycle = torch.optim.lr_scheduler.OneCycleLR(optimizer.optimizer, max_lr=1.0, total_steps=3)
    capped = AcceleratedScheduler(one_cycle, [optimizer], state, num_processes=2)
    capped.step()
    capped.step()  # would be steps 3 and 4 of 3: OneCycleLR raises past its end; the cap stops at 3
    assert one_cycle._step_count == 4 and one_cycle.last_epoch == 3


def test_plateau_scheduler_steps_once_per_evaluation_on_any_process_count() -> None:
    # ReduceLROnPlateau counts the metrics it is given: stepped twice per call on 2 processes,
    # patience=1 would cut the learning rate at the second epoch without improvement, not the third.
    state = GradientState()
    optimizer = AcceleratedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0), state)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer.optimizer, patience=1, factor=0.5)
    scheduler = AcceleratedScheduler(plateau, [optimizer], state, num_processes=2)
    learning_rates = []
    for _ in range(4):
        scheduler.step(1.0)  # the validation loss never improves
        learning_rates.append(optimizer.param_groups[0]["lr"])
    assert learning_rates == [1.0, 1.0, 0.5, 0.5]


def test_optimizer_acts_only_on_sync_steps() -> None:
    state = GradientState()
    param = torch.nn.Parameter(torch.ones(1))
    optimizer = AcceleratedOptimizer(torch.optim.SGD([param], lr=1.0), state)
    param.grad = torch.ones(1)
    state.sync_gradients = False
    optimizer.step()
    optimizer.zero_grad()
    assert param.item() == 1.0 and param.grad is not None
    state.sync_gradients = True
    optimizer.step()
    optimizer.zero_grad()
    assert param.item() == 0.0 and param.grad is None


def test_fp16_single_process_skips_nan_step_and_clips_after_unscaling() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=64.0)])
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.ones(1, 2)).sum())
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.5)
    assert norm.item() == pytest.approx(3**0.5, rel=1e-3)  # grads (1, 1, 1) once unscaled
    accelerator.clip_grad_norm_(model.parameters(), 0.5)  # a second unscale would raise in torch
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped is False
    optimizer.zero_grad()
    weight = model.weight.detach().clone()
    accelerator.backward(model(torch.ones(1, 2)).sum() * float("inf"))
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped is True
    assert torch.equal(model.weight.detach(), weight)


# ---------------------------------------------------------------------------- helpers
def test_save_is_atomic(tmp_path: os.PathLike) -> None:
    accelerator = Accelerator()
    target = tmp_path / "state.pt"
    accelerator.save({"a": torch.ones(2)}, target)
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        accelerator.save({"bad": lambda: None}, target)  # lambdas cannot be pickled
    assert torch.equal(torch.load(target)["a"], torch.ones(2))  # the previous file survived
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.pt"]


def test_single_process_collectives_are_the_identity() -> None:
    accelerator = Accelerator()
    data = {"x": torch.arange(3), "y": (torch.ones(2),)}
    assert accelerator.gather(data) is data
    assert accelerator.gather_object(["a"]) == ["a"]
    reduced = accelerator.reduce(torch.ones(2), "mean")
    assert torch.equal(reduced, torch.ones(2))
    loader = accelerator.prepare(DataLoader(torch.arange(5), batch_size=2))
    assert [accelerator.gather_for_metrics(batch).tolist() for batch in loader] == [[0, 1], [2, 3], [4]]
    # A batch-mean scalar next to per-sample tensors comes back as it went in, even on the last batch.
    gathered = [accelerator.gather_for_metrics((batch, batch.float().mean())) for batch in loader]
    assert [(rows.tolist(), mean.dim(), mean.item()) for rows, mean in gathered] == [
        ([0, 1], 0, 0.5),
        ([2, 3], 0, 2.5),
        ([4], 0, 4.0),
    ]
    with accelerator.split_between_processes([1, 2, 3]) as share:
        assert share == [1, 2, 3]


def test_autocast_context_follows_mixed_precision() -> None:
    a = torch.ones(2, 2)
    with Accelerator(mixed_precision="bf16").autocast():
        assert (a @ a).dtype == torch.bfloat16
    with Accelerator().autocast():
        assert (a @ a).dtype == torch.float32


def test_skip_first_batches_and_free_memory() -> None:
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(torch.arange(10), batch_size=2))
    resumed = accelerator.skip_first_batches(loader, 2)
    assert [batch.tolist() for batch in resumed] == [[4, 5], [6, 7], [8, 9]]
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    accelerator.step = 3
    assert accelerator.free_memory(model) == [None]
    assert (accelerator._models, accelerator._dataloaders, accelerator.step) == ([], [], 0)
