"""Per-batch trace of gradient accumulation, under ``runtime`` or under Hugging Face Accelerate.

``python runtime_trace.py runtime|accelerate RESULT.json`` (under torchrun for several ranks;
Accelerate also needs ``ACCELERATE_USE_CPU=1`` there). For each configuration it records, batch by
batch, ``(sync_gradients, accelerator.step, scheduler.last_epoch, lr)`` plus the final parameters,
and rank 0 writes every rank's results to RESULT.json at once (the file exists only complete:
tests/reference_results.py). tests/test_runtime_accumulation.py compares the two libraries' files.
"""

from __future__ import annotations

import gc
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

LIBRARY = sys.argv[1] if __name__ == "__main__" else "runtime"
if LIBRARY == "accelerate":
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, gather_object, set_seed
else:
    from accel_convert.runtime import Accelerator, DataLoaderConfiguration, set_seed
    from accel_convert.runtime.utils import gather_object

#: name -> (dataset length, batch size, accumulation steps, split_batches, step_with_optimizer, schedule)
CONFIGS = {
    "len10_bs1_acc2": (10, 1, 2, False, True, "lambda"),
    "len11_bs2_acc3": (11, 2, 3, False, True, "lambda"),
    "split_len12_bs4_acc2": (12, 4, 2, True, True, "lambda"),
    "no_step_with_optimizer": (10, 2, 2, False, False, "lambda"),
    "onecycle_capped": (16, 1, 1, False, True, "onecycle"),
}


def fresh_accelerator(accumulation: int, split_batches: bool, step_with_optimizer: bool) -> Accelerator:
    if LIBRARY == "accelerate":
        # Accelerate's state objects are process-wide singletons: start each configuration afresh.
        AcceleratorState._reset_state()
        GradientState._reset_state()
    return Accelerator(
        gradient_accumulation_steps=accumulation,
        dataloader_config=DataLoaderConfiguration(split_batches=split_batches),
        step_scheduler_with_optimizer=step_with_optimizer,
    )


def make_scheduler(optimizer: torch.optim.Optimizer, kind: str):
    if kind == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=4)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / 50)


def trace(
    length: int, batch_size: int, accumulation: int, split_batches: bool, step_with_optimizer: bool, schedule: str
) -> dict:
    accelerator = fresh_accelerator(accumulation, split_batches, step_with_optimizer)
    set_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = make_scheduler(optimizer, schedule)
    x = torch.arange(length * 2, dtype=torch.float32).reshape(length, 2) / length
    dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = DataLoader(dataset, batch_size=batch_size)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    rows = []
    for _ in range(2):
        for inputs, targets in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            rows.append(
                [
                    accelerator.sync_gradients,
                    accelerator.step,
                    scheduler.scheduler.last_epoch,
                    round(scheduler.get_last_lr()[0], 8),
                ]
            )
    params = [
        round(value, 6)
        for value in torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()]).tolist()
    ]
    return {"rows": rows, "params": params, "len": len(loader)}


def collectives() -> dict:
    """The same collective calls under either library (nested structures, metrics, padding)."""
    accelerator = fresh_accelerator(1, False, True)
    rank = accelerator.process_index
    nested = {"ids": torch.tensor([rank, rank + 10]), "pair": (torch.full((1, 2), float(rank)), torch.tensor(rank))}
    gathered = accelerator.gather(nested)
    values = torch.tensor([rank + 1.0, 10.0])
    metrics = {}
    for length, batch_size in ((9, 2), (7, 3), (8, 4), (5, 1)):
        loader = accelerator.prepare(DataLoader(torch.arange(length), batch_size=batch_size))
        metrics[f"{length}_{batch_size}"] = [accelerator.gather_for_metrics(batch).tolist() for batch in loader]
        metrics[f"{length}_{batch_size}_objects"] = [
            accelerator.gather_for_metrics(batch.tolist(), use_gather_object=True) for batch in loader
        ]
    return {
        "gather": [gathered["ids"].tolist(), gathered["pair"][0].tolist(), gathered["pair"][1].tolist()],
        "gather_object": gather_object([f"rank{rank}"]),
        "reduce": [accelerator.reduce(values, how).tolist() for how in ("sum", "mean", "none", "max")],
        "pad": accelerator.pad_across_processes(torch.arange(rank + 1), pad_index=-1).tolist(),
        "pad_first": accelerator.pad_across_processes(torch.arange(rank + 1), pad_first=True).tolist(),
        "metrics": metrics,
    }


def all_traces() -> dict:
    """Every configuration's trace on this rank, and the collectives' results."""
    results = {name: trace(*config) for name, config in CONFIGS.items()}
    results["collectives"] = collectives()
    return results


def main(result_file: str) -> None:
    import torch.distributed as dist

    from tests.reference_results import write_json_atomically

    results = all_traces()
    # One file from rank 0 with every rank's results.
    per_rank = [results]
    if dist.is_initialized():
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, results)
    if not dist.is_initialized() or dist.get_rank() == 0:
        write_json_atomically(result_file, per_rank)
    if dist.is_initialized():
        dist.barrier()
        # DDP wrappers still alive in reference cycles keep the Gloo group busy at teardown
        # ("terminate called without an active exception" now and then): collect them first.
        gc.collect()
        dist.destroy_process_group()  # leave together: no rank exits while another still talks


if __name__ == "__main__":
    main(sys.argv[2])
