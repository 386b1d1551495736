"""Simulated out-of-memory errors under torchrun: every rank must end on the same batch size.

Run by tests/test_memory_distributed.py with 2 ranks (Gloo). One launch plays several scenarios in
a row, each a separate decorated call, so the process group is also re-created several times:

- ``forward``: only rank 1 runs out of memory, in the forward pass at step 3;
- ``backward``: only rank 1 runs out of memory in the backward pass at step 3, while rank 0 is
  already waiting in DDP's gradient all-reduce;
- ``both``: both ranks run out of memory together;
- ``accelerator``: like ``forward``, but the training goes through ``Accelerator.prepare`` after
  ``accelerator.free_memory()``, as in the seed write-up;
- ``held``: like ``forward``, but the script keeps every DDP model in a global list, so the failing
  rank cannot free its process group (nor close its sockets): the peer is released by the bounded
  collective timeout instead, and the retry must still agree;
- ``error``: rank 1 raises a ValueError: both ranks must stop (and nobody hangs).

A fake out-of-memory error fires while the batch size is above ``FITS`` and the step is 3, so
from 32 the run goes 32 -> 16. Each rank writes one JSON line per scenario.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from accel_convert.runtime.memory import find_executable_batch_size

STARTING_BATCH_SIZE = 32
FITS = 16  # largest batch size that does not "run out of memory"
FAILING_STEP = 3
SAMPLES = 256
KEPT_MODELS: list = []  # the "held" scenario's references from outside the decorated function


def fake_oom() -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")


class FailInBackward(torch.autograd.Function):
    """Identity forward; the backward raises the fake error when armed."""

    @staticmethod
    def forward(ctx, x, armed):  # type: ignore[override]
        ctx.armed = armed
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if ctx.armed:
            time.sleep(0.5)  # make sure rank 0 is inside the all-reduce by now
            raise fake_oom()
        return grad, None


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 32)
        self.second = torch.nn.Linear(32, 1)
        self.fail_backward = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Between the layers, so that on a failing rank the first layer's gradients never come:
        # DDP's bucket is never complete there, and the peer waits in its all-reduce.
        hidden = FailInBackward.apply(torch.relu(self.first(x)), self.fail_backward)
        return self.second(hidden)


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, 8, generator=generator)
    return TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))


def should_fail(scenario: str, rank: int, batch_size: int, step: int) -> bool:
    failing_ranks = {"forward": {1}, "backward": {1}, "both": {0, 1}, "accelerator": {1}, "held": {1}}.get(
        scenario, set()
    )
    return rank in failing_ranks and batch_size > FITS and step == FAILING_STEP


def record_allreduce_launches(model: DistributedDataParallel, log: dict) -> None:
    """A DDP comm hook that does the usual all-reduce and notes when it started, finished or broke."""

    def hook(state, bucket):  # noqa: ANN001 (DDP's hook signature)
        log["allreduce_started_steps"].append(log["step"])
        future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def average(fut):  # noqa: ANN001
            try:
                summed = fut.value()[0]
            except Exception:
                log["allreduce_failed_steps"].append(log["step"])
                raise
            log["allreduce_finished_steps"].append(log["step"])
            return summed / dist.get_world_size()

        return future.then(average)

    model.register_comm_hook(None, hook)


def train_with_ddp(scenario: str, log: dict):
    rank = dist.get_rank()

    @find_executable_batch_size(starting_batch_size=STARTING_BATCH_SIZE)
    def train(batch_size: int) -> tuple[int, float]:
        log["attempts"].append({"batch_size": batch_size, "steps": 0, "started": time.time()})
        torch.manual_seed(1)
        net = Net()
        model = DistributedDataParallel(net)
        if scenario == "held":
            KEPT_MODELS.append(model)
        record_allreduce_launches(model, log)
        sampler = DistributedSampler(dataset(), shuffle=True, seed=0)
        loader = DataLoader(dataset(), batch_size=batch_size, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step, (x, y) in enumerate(loader):
            log["step"] = step
            failing = should_fail(scenario, rank, batch_size, step)
            if failing and scenario in ("forward", "both", "held"):
                raise fake_oom()
            if scenario == "error" and rank == 1 and step == FAILING_STEP:
                raise ValueError("a bug that is not about memory")
            net.fail_backward = failing and scenario == "backward"
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            log["attempts"][-1]["steps"] += 1
        return batch_size, sum(float(p.detach().sum()) for p in net.parameters())

    return train()


def train_with_accelerator(log: dict):
    from accel_convert.runtime.accelerator import Accelerator

    accelerator = Accelerator()
    rank = accelerator.process_index

    @find_executable_batch_size(starting_batch_size=STARTING_BATCH_SIZE)
    def train(batch_size: int) -> tuple[int, float]:
        nonlocal accelerator
        accelerator.free_memory()
        log["attempts"].append({"batch_size": batch_size, "steps": 0, "started": time.time()})
        torch.manual_seed(1)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(dataset(), batch_size=batch_size, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for step, (x, y) in enumerate(loader):
            if should_fail("accelerator", rank, batch_size, step):
                raise fake_oom()
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            log["attempts"][-1]["steps"] += 1
        return batch_size, sum(float(p.detach().sum()) for p in accelerator.unwrap_model(model).parameters())

    return train()


def play(scenario: str) -> dict:
    log: dict = {
        "scenario": scenario,
        "attempts": [],
        "step": None,
        "allreduce_started_steps": [],
        "allreduce_finished_steps": [],
        "allreduce_failed_steps": [],
    }
    try:
        if scenario == "accelerator":
            final_batch_size, parameter_sum = train_with_accelerator(log)
        else:
            final_batch_size, parameter_sum = train_with_ddp(scenario, log)
        log.update(final_batch_size=final_batch_size, parameter_sum=parameter_sum)
    except Exception as error:  # noqa: BLE001 (the error scenario reports what each rank raised)
        log.update(error_type=type(error).__name__, error=str(error))
    log["rank"] = int(os.environ["RANK"])
    log["finished_at"] = time.time()
    return log


def main() -> None:
    """``memory_oom_retry.py OUT_DIR SCENARIO...``: rank r writes OUT_DIR/rank<r>.jsonl."""
    out_dir, scenarios = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo")
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.jsonl"), "w", encoding="utf-8") as out:
        for scenario in scenarios:
            out.write(json.dumps(play(scenario)) + "\n")
            out.flush()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
