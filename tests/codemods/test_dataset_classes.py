"""The dataset classes owner (``model/classes.dataset_classes``): classes deriving from a dataset,
by qualified name and through the file's own classes; what their methods save is left alone by the
checkpoint rule (the dataset is built under ``main_process_first``), a helper class's still reported."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

CLASSES = """\
import torch
import torch.utils.data as data
from torch.utils.data import TensorDataset
from mylib.base import BaseDataset as Remote


class Cached(data.Dataset):
    pass


class Child(Cached):
    pass


class Tensors(TensorDataset):
    pass


class Elsewhere(Remote):
    pass


class Logger:
    pass
"""


def test_dataset_classes_are_found_by_qualified_name_and_through_the_files_classes() -> None:
    facts = analyse(cst.parse_module(CLASSES), CLASSES)
    assert facts.dataset_classes == {"Cached", "Child", "Tensors", "Elsewhere"}


SAVING = """\
import os
import torch
import torch.nn as nn
import torch.utils.data as data


class {name}({base}):
    def __init__(self, root, download=False):
        self.root = root
        if download:
            self.download()
        self.x = torch.load(os.path.join(root, "cache.pt"))

    def download(self):
        torch.save(torch.randn(64, 8), os.path.join(self.root, "cache.pt"))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.x[i, :2]


def main():
    train_set = {name}("data", download=True)
    loader = data.DataLoader(train_set, batch_size=8)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def reported_saves(name: str, base: str) -> list[int]:
    source = SAVING.format(name=name, base=base)
    result = convert_source(source.encode(), Options(), path="train.py")
    return [change.line for change in result.changes if change.code == "ACC914"]


def test_a_datasets_cache_saved_in_its_download_is_not_reported() -> None:
    assert reported_saves("Digits", "data.Dataset") == []


def test_a_helper_classs_save_is_still_reported() -> None:
    assert reported_saves("Digits", "object") == [15]
