"""The locality owner's ``shared_draws``: which draws before any seed decide what the processes
share (ACC124 agrees the generators above the first), and which are per process on purpose."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.model.runner import analyse
from tests.codemods.support import code

TRAINING = """
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Flips(Dataset):
    def __init__(self, n):
        self.data = torch.zeros(n, 4)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index].flip(0) if random.random() < 0.5 else self.data[index]


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(1))
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x) * self.scale


def seed_worker(worker_id):
    np.random.seed(worker_id)
    print(np.random.rand())


def main():
    {first}
    {second}
    loader = DataLoader(Flips(64), batch_size=8, worker_init_fn=seed_worker)
    model = Head()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        noise = torch.randn(x.shape)
        optimizer.zero_grad()
        model(x + noise).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def drawn_lines(first: str, second: str = "pass") -> list[str]:
    source = code(TRAINING).replace("{first}", first).replace("{second}", second)
    facts = analyse(cst.parse_module(source), source)
    lines = source.splitlines()
    return [lines[site.line - 1].strip() for site in facts.shared_draws]


def test_per_process_draws_are_not_shared() -> None:
    """A dataset's ``__getitem__``, a worker's initialiser, per-batch noise in the loop that
    trains: per process on purpose. A model's ``__init__`` drawing before any seed is shared."""
    assert drawn_lines("pass") == ["self.scale = nn.Parameter(torch.randn(1))"]


SCALE = "self.scale = nn.Parameter(torch.randn(1))"
LR = "lr = random.uniform(0.01, 0.1)"


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        # Seeded in main() before the model is built: run order, not line order, decides.
        ("torch.manual_seed(0)", "pass", []),
        # NumPy's seed leaves torch's and Python's generators as they were.
        ("np.random.seed(0)", LR, [SCALE, LR]),
        # Drawn before the seed: shared; the model is built after torch's seed.
        (LR, "torch.manual_seed(0)", [LR]),
        ("random.seed(0)", LR, [SCALE]),
    ],
)
def test_a_seed_run_before_a_draw_of_its_generator_makes_it_agree(first: str, second: str, shared: list[str]) -> None:
    assert drawn_lines(first, second) == shared


DATASET = "test_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))"
ORDER = "order = torch.utils.data.Subset(TensorDataset(torch.zeros(64, 4)), torch.randperm(64))"
SAMPLE = "sample = model(torch.randn(4, 4))"


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        # Handed straight to a dataset: the loader shards one dataset, so every rank needs it.
        (DATASET, "pass", [DATASET, DATASET, SCALE]),
        (ORDER, "pass", [ORDER, SCALE]),
        # Handed straight to a model: an input each process samples for itself.
        ("model = Head()", SAMPLE, [SCALE]),
    ],
)
def test_a_draw_handed_to_a_dataset_is_shared_and_one_handed_to_a_model_is_not(
    first: str, second: str, shared: list[str]
) -> None:
    assert sorted(drawn_lines(first, second)) == sorted(shared)
