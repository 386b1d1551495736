import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)

    @torch.cuda.amp.autocast()
    def forward(self, x):
        return self.fc(x)


def train(model, loader, optimizer, scaler, use_amp):
    for data, target in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", enabled=use_amp):
            loss = nn.functional.mse_loss(model(data), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def main():
    use_amp = True
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    for epoch in range(3):
        train(model, loader, optimizer, scaler, use_amp)


if __name__ == "__main__":
    main()
