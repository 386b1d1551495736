"""Train, checkpoint, keep training; or resume from the checkpoint: the two must agree exactly.

``checkpoint_resume.py full CHECKPOINT OUT_DIR [TARGET]``: train one epoch,
``save_state(CHECKPOINT)``, train two more epochs; with the runtime, also ``save_state``
(CHECKPOINT_mid) after MID_STEP steps of the first of them. ``checkpoint_resume.py resume CHECKPOINT
OUT_DIR [TARGET]``: build the same objects (from a *different* seed, so nothing matches by luck),
``load_state(CHECKPOINT)``, train the two epochs; with the runtime, then resume mid-epoch the way
Accelerate documents it: ``load_state(CHECKPOINT_mid)``, train the rest of that epoch on
``skip_first_batches(loader, MID_STEP)``, then one more epoch on the loader itself (report key
"mid_epoch"). TARGET is ``runtime`` (default) or ``accelerate`` (the same script under Hugging
Face Accelerate, for comparison).
Each rank writes OUT_DIR/<target>_<phase>_rank<r>.json: the sample indices of every batch after the
checkpoint, random draws from Python and NumPy, and the final parameters. The model has dropout
and the loader shuffles, so batches and parameters only agree if every RNG came back.
"""

from __future__ import annotations

import gc
import json
import random
import sys
from pathlib import Path

import numpy
import torch
from torch.utils.data import DataLoader, TensorDataset

SAMPLES, BATCH_SIZE, EPOCHS_AFTER = 64, 4, 2
MID_STEP = 3  # steps into the first epoch after CHECKPOINT at which CHECKPOINT_mid is saved


class StepCounter:
    """A registered custom object: its state must come back too."""

    def __init__(self) -> None:
        self.steps = 0

    def state_dict(self) -> dict[str, int]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.steps = state["steps"]


def make_accelerator(target: str):
    if target == "accelerate":  # the same script under Hugging Face Accelerate, for comparison
        from accelerate import Accelerator
    else:
        from accel_convert.runtime.accelerator import Accelerator
    return Accelerator()


def build(seed: int, target: str):
    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)
    accelerator = make_accelerator(target)
    data = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, 4, generator=data)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True), torch.arange(SAMPLES))
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)
    counter = StepCounter()
    accelerator.register_for_checkpointing(counter)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    return accelerator, model, optimizer, scheduler, loader, counter


def train_epoch(accelerator, model, optimizer, scheduler, loader, counter, after_step=None) -> list[list[int]]:
    batches = []
    model.train()
    for inputs, targets, indices in loader:
        batches.append(indices.tolist())
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        counter.steps += 1
        if after_step is not None:
            after_step(len(batches))
    return batches


def epoch_report(batches: list[list[int]]) -> dict:
    return {"batches": batches, "python": random.random(), "numpy": float(numpy.random.rand())}


def final_state(accelerator, model, counter, loader) -> dict:
    return {
        "parameters": [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()],
        "counter": counter.steps,
        "loader_iteration": loader.iteration,
    }


def resume_mid_epoch(checkpoint: str, objects) -> dict:
    """Accelerate's documented recipe: load, skip the batches already trained on, carry on."""
    accelerator, model, optimizer, scheduler, loader, counter = objects
    accelerator.load_state(checkpoint)
    report = {"counter_at_start": counter.steps}
    rest = train_epoch(
        accelerator, model, optimizer, scheduler, accelerator.skip_first_batches(loader, MID_STEP), counter
    )
    report["epochs"] = [epoch_report(rest), epoch_report(train_epoch(*objects))]
    report.update(final_state(accelerator, model, counter, loader))
    return report


def run() -> None:
    phase, checkpoint, out_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    target = sys.argv[4] if len(sys.argv) > 4 else "runtime"
    objects = build(seed=0 if phase == "full" else 1234, target=target)
    accelerator, model, optimizer, scheduler, loader, counter = objects
    mid_checkpoint = f"{checkpoint}_mid"

    def save_mid_epoch(step: int) -> None:
        if step == MID_STEP and target == "runtime":
            accelerator.save_state(mid_checkpoint)

    if phase == "full":
        train_epoch(*objects)
        accelerator.save_state(checkpoint)
    else:
        accelerator.load_state(checkpoint)
    report = {"counter_at_start": counter.steps, "lr_at_start": scheduler.get_last_lr(), "epochs": []}
    for epoch in range(EPOCHS_AFTER):
        batches = train_epoch(*objects, after_step=save_mid_epoch if phase == "full" and epoch == 0 else None)
        report["epochs"].append(epoch_report(batches))
    report.update(final_state(accelerator, model, counter, loader))
    report["world_size"] = accelerator.num_processes
    if phase == "resume" and target == "runtime":
        report["mid_epoch"] = resume_mid_epoch(mid_checkpoint, objects)
    (out_dir / f"{target}_{phase}_rank{accelerator.process_index}.json").write_text(json.dumps(report))


def main() -> None:
    run()
    # Accelerate leaves its group to interpreter teardown, where DDP wrappers still alive in
    # reference cycles make Gloo abort now and then ("terminate called..."): collect, then leave.
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
