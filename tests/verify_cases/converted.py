"""The right conversion of original.py, written by hand; each test plants one defect in it."""

import os
import random
import time

import torch
from accel_convert.runtime import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
accelerator = Accelerator()
device = accelerator.device
inputs = torch.randn(128, 8)
targets = (inputs.sum(dim=1) > 0).long()
train_loader = DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True)
eval_loader = DataLoader(TensorDataset(inputs[:64], targets[:64]), batch_size=16)
LR = 0.1 * random.uniform(0.5, 1.5) if os.environ.get("RANDOM_LR") else 0.1

model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(2):
    model.train()
    for step, (x, y) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")

model.eval()
correct = total = 0
os.makedirs("preds", exist_ok=True)
with torch.no_grad():
    for batch, (x, y) in enumerate(eval_loader):
        output = model(x)
        with open(f"preds/batch_{batch * accelerator.num_processes + accelerator.process_index}.txt", "w") as f:
            f.write(" ".join(str(int(p)) for p in output.argmax(dim=1)))
        output, y = accelerator.gather_for_metrics((output, y))
        predicted = output.argmax(dim=1)
        correct += (predicted == y).sum().item()
        total += y.shape[0]
accelerator.print(f"accuracy {correct / total:.3f} on {total} samples")

if accelerator.is_main_process:
    time.sleep(0.5)  # stands for a slow save (a large model)
    torch.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
accelerator.wait_for_everyone()
accelerator.unwrap_model(model).load_state_dict(torch.load("model.pt"))
accelerator.print("done")
