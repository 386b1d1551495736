"""A tiny training script: the original of the planted-defect tests of accel-convert verify."""

import os
import random
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
inputs = torch.randn(128, 8)
targets = (inputs.sum(dim=1) > 0).long()
train_loader = DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True)
eval_loader = DataLoader(TensorDataset(inputs[:64], targets[:64]), batch_size=16)
LR = 0.1 * random.uniform(0.5, 1.5) if os.environ.get("RANDOM_LR") else 0.1

model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(2):
    model.train()
    for step, (x, y) in enumerate(train_loader):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")

model.eval()
correct = total = 0
os.makedirs("preds", exist_ok=True)
with torch.no_grad():
    for batch, (x, y) in enumerate(eval_loader):
        x, y = x.to(device), y.to(device)
        predicted = model(x).argmax(dim=1)
        with open(f"preds/batch_{batch}.txt", "w") as f:
            f.write(" ".join(str(int(p)) for p in predicted))
        correct += (predicted == y).sum().item()
        total += y.shape[0]
print(f"accuracy {correct / total:.3f} on {total} samples")

time.sleep(0.5)  # stands for a slow save (a large model)
torch.save(model.state_dict(), "model.pt")
model.load_state_dict(torch.load("model.pt"))
print("done")
