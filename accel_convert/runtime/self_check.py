"""``accel-launch test``: a short self-check of the machines a training job will run on.

Launched like a training script (every process runs this file), it goes through what a converted
script relies on, in the order it relies on it, and stops at the first thing that does not hold:

1. the process group: every rank is there once, and the local ranks of each machine are 0..n-1;
2. the device: each process has its own (one GPU per process, or the CPU);
3. collectives: an all-reduce (the sum of every rank's number) and a gather (every rank's row,
   in rank order), on the device the backend uses;
4. a sharded loader: each sample of a small dataset reaches exactly one process;
5. a DDP step: after one backward and optimizer step the parameters are the same everywhere
   and equal to a one-process step on the whole batch;
6. a checkpoint: ``save_state`` by all, ``load_state`` by all, the same parameters back.

The main process ends with one line that says on what it ran, such as ``2 processes on 1 node,
gloo, cpu: all checks passed``; a failed check is one line naming it, and exit code 1.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from accel_convert.runtime.accelerator import Accelerator

#: A dataset whose size no process count up to 8 divides: the last batch is ragged.
SAMPLES = 37


class CheckFailed(Exception):
    """One check did not hold; the message says which and what was seen."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def check_ranks(accelerator: Accelerator) -> None:
    ranks = accelerator.gather(torch.tensor([accelerator.process_index], device=accelerator.device))
    expect(ranks.tolist() == list(range(accelerator.num_processes)), f"ranks seen: {ranks.tolist()}")
    expect(
        0 <= accelerator.local_process_index < accelerator.num_processes,
        f"local rank {accelerator.local_process_index} out of range",
    )


def check_devices(accelerator: Accelerator) -> None:
    device = accelerator.device
    if device.type == "cuda":
        indexes = accelerator.gather(torch.tensor([device.index or 0], device=device))
        hosts = _hosts(accelerator)
        pairs = list(zip(hosts, indexes.tolist()))
        expect(len(set(pairs)) == len(pairs), f"two processes share a GPU: {pairs}")


def _hosts(accelerator: Accelerator) -> list[str]:
    names: list[object] = [None] * accelerator.num_processes
    if dist.is_available() and dist.is_initialized():
        dist.all_gather_object(names, os.uname().nodename)
    else:
        names = [os.uname().nodename]
    return [str(name) for name in names]


def check_collectives(accelerator: Accelerator) -> None:
    n = accelerator.num_processes
    total = accelerator.reduce(torch.tensor([accelerator.process_index + 1.0], device=accelerator.device), "sum")
    expect(total.item() == n * (n + 1) / 2, f"all-reduce gave {total.item()}, not {n * (n + 1) / 2}")
    row = torch.full((2,), float(accelerator.process_index), device=accelerator.device)
    gathered = accelerator.gather(row)
    expected = [float(rank) for rank in range(n) for _ in range(2)]
    expect(gathered.tolist() == expected, f"gather gave {gathered.tolist()}")


def check_sharded_loader(accelerator: Accelerator) -> None:
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(SAMPLES)), batch_size=4))
    seen = torch.cat([batch for (batch,) in loader]) if len(loader) else torch.empty(0, dtype=torch.long)
    counts = accelerator.reduce(torch.bincount(seen.cpu(), minlength=SAMPLES).to(accelerator.device), "sum")
    per_sample = counts.tolist()
    if accelerator.num_processes > 1:
        # Evenly sized shards repeat the first samples to fill the last batch (as Accelerate's):
        # what counts is that every sample is seen, and gather_for_metrics drops the repeats.
        expect(all(count >= 1 for count in per_sample), "a sample reached no process")
        metrics_seen = 0
        for (batch,) in loader:
            metrics_seen += accelerator.gather_for_metrics(batch).numel()
        expect(metrics_seen == SAMPLES, f"gather_for_metrics counted {metrics_seen} samples of {SAMPLES}")
    else:
        expect(per_sample == [1] * SAMPLES, "a one-process loader must yield every sample once")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def check_ddp_step(accelerator: Accelerator) -> torch.nn.Module:
    data = torch.randn(8 * accelerator.num_processes, 4, generator=torch.Generator().manual_seed(1))
    reference = _model()
    torch.optim.SGD(reference.parameters(), lr=0.1).zero_grad()
    reference(data).pow(2).mean().backward()
    with torch.no_grad():
        expected = [p - 0.1 * p.grad for p in reference.parameters()]  # type: ignore[operator]

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    shard = data.chunk(accelerator.num_processes)[accelerator.process_index].to(accelerator.device)
    optimizer.zero_grad()
    accelerator.backward(model(shard).pow(2).mean())
    optimizer.step()
    for parameter, wanted in zip(accelerator.unwrap_model(model).parameters(), expected):
        expect(
            torch.allclose(parameter.detach().cpu(), wanted.cpu(), atol=1e-5),
            "after one DDP step the parameters differ from one process's step on the whole batch",
        )
        everywhere = accelerator.gather(parameter.detach().reshape(1, -1))
        expect(bool((everywhere == everywhere[0]).all()), "after one DDP step the processes' parameters differ")
    return model


def check_checkpoint(accelerator: Accelerator, model: torch.nn.Module) -> None:
    folder = tempfile.mkdtemp(prefix="accel-launch-test-") if accelerator.is_main_process else ""
    if dist.is_available() and dist.is_initialized():
        shared = [folder]
        dist.broadcast_object_list(shared, src=0)
        folder = shared[0]
    try:
        saved = [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()]
        accelerator.save_state(os.path.join(folder, "checkpoint"))
        with torch.no_grad():
            for parameter in accelerator.unwrap_model(model).parameters():
                parameter.zero_()
        accelerator.load_state(os.path.join(folder, "checkpoint"))
        for parameter, before in zip(accelerator.unwrap_model(model).parameters(), saved):
            expect(torch.equal(parameter.detach(), before), "load_state did not bring the saved parameters back")
    finally:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            shutil.rmtree(folder, ignore_errors=True)


def describe(accelerator: Accelerator) -> str:
    """``2 processes on 1 node, gloo, cpu``."""
    processes = accelerator.num_processes
    nodes = len(set(_hosts(accelerator))) if processes > 1 else 1
    if dist.is_available() and dist.is_initialized():
        backend = str(dist.get_backend())
    else:
        backend = "no process group"
    process_word = "process" if processes == 1 else "processes"
    node_word = "node" if nodes == 1 else "nodes"
    return f"{processes} {process_word} on {nodes} {node_word}, {backend}, {accelerator.device.type}"


CHECKS: list[tuple[str, Callable[[Accelerator], object]]] = [
    ("ranks", check_ranks),
    ("devices", check_devices),
    ("all-reduce and gather", check_collectives),
    ("sharded loader", check_sharded_loader),
]


def main() -> int:
    accelerator = Accelerator()
    running = "setup"  # the check under way, for the failure line
    try:
        for running, check in CHECKS:  # noqa: B007 - read by the failure line below
            check(accelerator)
        running = "DDP step"
        model = check_ddp_step(accelerator)
        running = "save_state/load_state"
        check_checkpoint(accelerator, model)
    except CheckFailed as failure:
        print(f"accel-launch test: rank {accelerator.process_index}: {running} failed: {failure}", file=sys.stderr)
        return 1
    summary = describe(accelerator)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        print(f"{summary}: all checks passed", flush=True)
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
