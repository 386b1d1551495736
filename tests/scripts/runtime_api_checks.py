"""The Accelerate-compatible API additions on 2 processes, in one launch (tests/test_runtime_api.py).

Usage: ``torchrun --nproc_per_node 2 runtime_api_checks.py OUT_DIR``; each rank writes
``OUT_DIR/result_rank{rank}.json``. Checks run in the same order on every rank (collectives).
Run with ``ACCELERATE_DEBUG_MODE=1``: the debug-mode check expects it.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from accel_convert.runtime import (
    Accelerator,
    AcceleratorState,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    PartialState,
    ProfileKwargs,
    get_logger,
)
from accel_convert.runtime.operations import DistributedOperationException
from accel_convert.runtime.utils import gather, pad_across_processes, reduce, synchronize_rng_states


class Scaled(torch.nn.Module):
    """Each rank's gradient differs (the input is raised to the power 1 + rank)."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.p = torch.nn.Parameter(torch.randn(16, 8, generator=generator))

    def forward(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        return self.p * x ** (1 + rank)


def gradient(model: torch.nn.Module, rank: int) -> torch.Tensor:
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2024))
    model(x, rank).mean().backward()
    return next(model.parameters()).grad.clone()


def check_comm_hooks(rank: int) -> dict:
    """Each hook's averaged gradient against plain DDP's (within compression error), and which
    hook the model really carries."""
    reference = gradient(torch.nn.parallel.DistributedDataParallel(Scaled()), rank)
    found = {}
    for hook, wrapper, options in [
        ("no", "no", {}),
        (DDPCommunicationHookType.FP16, "no", {}),
        ("power_sgd", "no", {"matrix_approximation_rank": 2}),
        ("power_sgd", "fp16", {}),
        ("batched_power_sgd", "no", {}),
    ]:
        accelerator = Accelerator(
            kwargs_handlers=[
                DistributedDataParallelKwargs(comm_hook=hook, comm_wrapper=wrapper, comm_state_option=options)
            ]
        )
        model = accelerator.prepare(Scaled())
        grad = gradient(model, rank)
        found[f"{hook}+{wrapper}"] = {
            "max_error": float((grad - reference).abs().max()),
            # DDP records the registered hook's qualified name in its logging data.
            "hook": model._get_ddp_logging_data().get("comm_hook"),
        }
    # torch allows the bf16 hooks on CUDA/NCCL (or XPU) builds only: on this CPU build they refuse.
    try:
        Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook="bf16")]).prepare(Scaled())
        found["bf16_error"] = None
    except TypeError as error:
        found["bf16_error"] = str(error)
    return found


def check_fp16_hook_is_really_used(rank: int) -> dict:
    """With the fp16 hook the averaged gradient is exactly what fp16 rounding of it gives."""
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook="fp16")])
    model = accelerator.prepare(Scaled())
    grad = gradient(model, rank)
    return {
        "representable_in_fp16": bool(torch.equal(grad, grad.half().float())),
        "hook": model._get_ddp_logging_data().get("comm_hook"),
        "expected_hook": default_hooks.fp16_compress_hook.__qualname__,
    }


def check_logging(out_dir: Path, rank: int) -> dict:
    path = out_dir / f"log_rank{rank}.txt"
    handler = logging.FileHandler(path)
    logging.getLogger("api_checks").addHandler(handler)
    logger = get_logger("api_checks", log_level="INFO")
    logger.info("main only")
    logger.info("every rank", main_process_only=False)
    logger.info("in order", main_process_only=False, in_order=True)
    logger.debug("below the level", main_process_only=False)
    handler.close()
    return {"lines": path.read_text().splitlines()}


def check_debug_mode(rank: int) -> dict:
    state = PartialState()
    found = {"debug_from_env": state.debug}
    mismatched = torch.ones(2, 3) if rank == 0 else torch.ones(3, 3)
    for name, call in [
        ("gather", lambda: gather(mismatched)),
        ("reduce", lambda: reduce(mismatched)),
        ("pad", lambda: pad_across_processes(torch.ones(2) if rank == 0 else torch.ones(2, 2))),
    ]:
        try:
            call()
            found[name] = None
        except DistributedOperationException as error:
            found[name] = str(error)
    found["pad_same_ndim"] = pad_across_processes(torch.ones(2 + rank)).tolist()
    state.debug = False
    return found


def check_rng_sync(rank: int) -> dict:
    torch.manual_seed(rank)
    generator = torch.Generator().manual_seed(100 + rank)
    synchronize_rng_states(["torch", "generator"], generator)
    return {"torch_draw": torch.rand(1).item(), "generator_draw": torch.rand(1, generator=generator).item()}


def check_profile(out_dir: Path) -> dict:
    accelerator = Accelerator(
        kwargs_handlers=[ProfileKwargs(output_trace_dir=str(out_dir / "traces"), record_shapes=True)]
    )
    with accelerator.profile() as profiler:
        torch.ones(32, 32) @ torch.ones(32, 32)
    names = {event.key for event in profiler.key_averages()}
    return {
        "saw_matmul": any("mm" in name for name in names),
        "traces": sorted(path.name for path in (out_dir / "traces").iterdir()),
    }


def check_uneven_join(rank: int) -> dict:
    """Rank 0 gets 2 batches, rank 1 gets 1: Join keeps the all-reduces matched."""
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator(even_batches=False)
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(3.0)[:, None]), batch_size=1))
    steps = 0
    with accelerator.join_uneven_inputs([model]):
        for (batch,) in loader:
            model(batch).sum().backward()
            steps += 1
    return {"steps": steps, "weight_grad": model.module.weight.grad.item()}


class WithLossMethod(Scaled):
    """A loss computed by a method that calls the model itself (``self(x, rank)``)."""

    def compute_loss(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        return self(x, rank).mean()


def check_methods_as_forward(rank: int) -> dict:
    """One step through ``accelerator.as_forward(model).compute_loss``, one through the unwrapped
    model's method: only the first averages the ranks' (different) gradients."""
    accelerator = Accelerator()
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(7))
    grads = {}
    for route in ("as_forward", "unwrapped"):
        model = accelerator.prepare(WithLossMethod())
        caller = accelerator.as_forward(model) if route == "as_forward" else accelerator.unwrap_model(model)
        caller.compute_loss(x, rank).backward()
        grads[route] = accelerator.unwrap_model(model).p.grad.sum().item()
        # The model's own forward still runs normally afterwards (the swap was for one call).
        grads[f"{route}_forward_after"] = float(model(x, rank).sum().item())
    return grads


class WithParts(torch.nn.Module):
    """A model whose forward runs its parts (simple-faster-rcnn-pytorch's ``extractor``, ``rpn``,
    ``head``), which a trainer calls one by one instead."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.extractor = torch.nn.Linear(4, 8)
        self.rpn = torch.nn.Linear(8, 2)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.extractor(x)
        return self.rpn(h), self.head(h)


def check_parts_as_forward(rank: int) -> dict:
    """Steps calling the model's parts one by one before one backward, each through
    ``accelerator.as_forward(model)`` (as the converter writes ``self.faster_rcnn.extractor(x)``)
    or through the unwrapped model: the ranks' weights agree only through ``as_forward``."""
    accelerator = Accelerator()
    weights = {}
    for route in ("as_forward", "unwrapped"):
        model = WithParts()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for step in range(3):
            x = torch.randn(5, 4, generator=torch.Generator().manual_seed(100 + rank + 10 * step))
            parts = accelerator.as_forward(model) if route == "as_forward" else accelerator.unwrap_model(model)
            optimizer.zero_grad()
            features = parts.extractor(x)
            loss = parts.rpn(features).pow(2).mean() + parts.head(features).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
        weights[route] = [p.detach().sum().item() for p in accelerator.unwrap_model(model).parameters()]
    return weights


def check_state_objects() -> dict:
    accelerator = Accelerator()
    state = AcceleratorState()
    return {
        "same_facts": [state.process_index, state.num_processes, str(state.device)]
        == [accelerator.process_index, accelerator.num_processes, str(accelerator.device)],
        "distributed_type": str(PartialState().distributed_type.value),
        "local_process_ran": accelerator.on_local_process(lambda: True, local_process_index=1)(),
    }


def main() -> None:
    out_dir = Path(sys.argv[1])
    state = PartialState()
    rank = state.process_index
    result = {
        "state_objects": check_state_objects(),
        "debug": check_debug_mode(rank),
        "comm_hooks": check_comm_hooks(rank),
        "fp16_hook": check_fp16_hook_is_really_used(rank),
        "logging": check_logging(out_dir, rank),
        "rng": check_rng_sync(rank),
        "profile": check_profile(out_dir),
        "join": check_uneven_join(rank),
        "as_forward": check_methods_as_forward(rank),
        "parts_as_forward": check_parts_as_forward(rank),
    }
    (out_dir / f"result_rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
