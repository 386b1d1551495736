"""A short, clean two-rank training run: it prints one line, ``done``. Launched by
tests/test_runtime_quiet.py, which checks that nothing else appears on either stream.

``runtime_quiet.py SECONDS``: after training, every rank idles SECONDS before the last barrier,
so the failure watcher lives long enough to have woken up on its own several times if it did.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_convert.runtime import Accelerator

accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4, shuffle=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for _epoch in range(2):
    for inputs, targets in loader:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
time.sleep(float(sys.argv[1]))
accelerator.wait_for_everyone()
accelerator.print("done")
accelerator.end_training()
