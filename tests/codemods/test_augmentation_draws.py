"""A shuffle an augmentation draws per sample (a helper only a dataset's ``__getitem__`` calls,
in this module or in another module of the program) is each process's own on purpose: not a
split, so it is neither reported (ACC923) nor made to agree. The same helper reached from code
every process runs once (a split of the indices in ``main()``) still is. The process-locality
owner decides both (``shared_draws``); before, the rule reported every in-place shuffle of a file
that seeds torch at most, and a program's library module counted each of its functions as
reached from shared code."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from tests.codemods.support import converted_stably

HELPER = """\
import random

import torch


def perturb(x):
    steps = [lambda v: v * 1.05, lambda v: v + 0.01]
    random.shuffle(steps)
    for step in steps:
        x = step(x)
    return x


def save_checkpoint(model, path):
    torch.save(model.state_dict(), path)
"""

DATASET = """\
from torch.utils.data import Dataset

from helpers import perturb


class Augmented(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return perturb(self.x[i]), self.y[i]
"""

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from datasets import Augmented
from helpers import perturb, save_checkpoint


def main():
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    {extra}
    loader = DataLoader(Augmented(x, y), batch_size=8, shuffle=True)
    model = nn.Linear(4, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, targets in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs.cuda()), targets.cuda()).backward()
        optimizer.step()
    save_checkpoint(model, "model.pt")


if __name__ == "__main__":
    main()
"""


def reported_in_helpers(extra: str = "pass") -> list[int]:
    sources = {"train": TRAIN.format(extra=extra), "datasets": DATASET, "helpers": HELPER}
    modules = [ProgramModule(name, cst.parse_module(text), text) for name, text in sources.items()]
    outcomes = convert_program(modules, "train", Options())
    assert "accelerator" in outcomes["helpers"].module.code  # the library is converted with the entry
    return [change.line for change in outcomes["helpers"].changes if change.code == "ACC923"]


def test_a_library_shuffle_only_a_datasets_getitem_reaches_is_not_reported() -> None:
    assert reported_in_helpers() == []


def test_the_same_library_shuffle_reached_from_main_is_reported() -> None:
    # main() also calls it once, where every process goes: each draws its own order.
    assert reported_in_helpers("order = perturb(list(range(64)))") == [8]


SINGLE = """\
import random

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


def shuffled(items):
    items = list(items)
    random.shuffle(items)
    return items


class Augmented(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor(shuffled([1.0, 2.0, 3.0, float(i)])), i % 2


def main():
    torch.manual_seed(0)
    {extra}
    loader = DataLoader(Augmented(), batch_size=8, shuffle=True)
    model = nn.Linear(4, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, targets in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs.cuda()), targets.cuda()).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_a_shuffle_of_a_helper_only_getitem_calls_is_neither_reported_nor_agreed() -> None:
    text, codes = converted_stably(textwrap.dedent(SINGLE.format(extra="pass")))
    assert "ACC923" not in codes and "ACC124" not in codes
    assert "agree_random_state" not in text


def test_the_helper_splitting_indices_in_main_makes_the_processes_agree() -> None:
    # A split every process draws once: the processes take rank 0's generators before it (ACC124).
    text, codes = converted_stably(textwrap.dedent(SINGLE.format(extra="train_ids = shuffled(range(64))[:48]")))
    assert "ACC124" in codes
    assert text.index("accelerator.agree_random_state()") < text.index("train_ids = shuffled(")
