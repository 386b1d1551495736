"""A short train-gather-save-exit run, launched many times by the exit stress test.

Everything the issue's hang needed is here: DDP training inside a function (so the model is
freed when it returns), a metrics gather and a checkpoint (all-gathers and barriers right before
the end), ``end_training()``, then the function returns and the interpreter exits.
``runtime_exit_stress.py OUT_DIR`` writes OUT_DIR/done_rank<r> as the very last statement.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_convert.runtime import Accelerator


def train(out_dir: Path) -> int:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for inputs, targets in loader:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.gather_for_metrics(loss.detach().reshape(1))
    accelerator.save_state(str(out_dir / "checkpoint"))
    accelerator.gather(torch.tensor([accelerator.process_index]))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return accelerator.process_index


if __name__ == "__main__":
    out = Path(sys.argv[1])
    rank = train(out)
    (out / f"done_rank{rank}").write_text("ok")
