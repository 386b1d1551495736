"""A loader whose ``collate_fn`` joins the samples' own rows (YOLO's boxes: ``torch.cat(targets,
0)`` with a column for each box's image in the batch) has batch values whose rows are not samples:
a per-batch gather would join boxes pointing at other processes' images and drop the padding by
counting rows. The loaders owner (``model/loaders.joined_rows_loaders``) keeps such an evaluation
loader unprepared, so every process evaluates every batch with nothing gathered, in one module or
across modules (the collate a dataset class of another module defines, the loader returned by
another module's factory and evaluated there); one that stays prepared, because a training loop
iterates it too, is reported (ACC965). Before, outputs and boxes were gathered together, silently."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.names import collect_names
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.codemods.engine.syntax import concatenated_rows
from tests.codemods.support import converted_stably


def joined_positions(function: str) -> frozenset[int]:
    module = cst.parse_module("import torch\n" + function)
    names = collect_names(module)
    definition = next(node for node in module.body if isinstance(node, cst.FunctionDef))
    return concatenated_rows(definition, lambda node: names.qualified_name(node, (definition.name.value,)))


def test_rows_joined_by_a_collate_are_found_by_their_position() -> None:
    yolo = """
def collate_fn(batch):
    paths, imgs, bb_targets = list(zip(*batch))
    for i, boxes in enumerate(bb_targets):
        boxes[:, 0] = i
    bb_targets = torch.cat(bb_targets, 0)
    return paths, torch.stack(imgs), bb_targets
"""
    assert joined_positions(yolo) == {2}
    assert joined_positions("def collate(batch):\n    return torch.cat([b[1] for b in batch])\n") == {-1}


def test_one_row_per_sample_joined_is_a_stack_not_joined_rows() -> None:
    stacked = "def collate(batch):\n    return torch.cat([x.unsqueeze(0) for x, _ in batch]), torch.stack([y for _, y in batch])\n"
    assert joined_positions(stacked) == frozenset()
    assert joined_positions("def collate(batch):\n    return torch.stack([x for x, _ in batch])\n") == frozenset()


SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def collate(batch):
    images, boxes = zip(*batch)
    return torch.stack(images), torch.cat([b.view(1, 3).repeat(2, 1) for b in boxes], 0)


data = TensorDataset(torch.randn(32, 8), torch.rand(32, 3))
model = nn.Linear(8, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(data, batch_size=8, collate_fn=collate)
test_loader = DataLoader(data, batch_size=8, collate_fn=collate)
for images, boxes in train_loader:
    optimizer.zero_grad()
    model(images.cuda()).sum().backward()
    optimizer.step()
hits = 0
with torch.no_grad():
    for images, boxes in {evaluated}:
        scores = model(images.cuda())
        hits += (scores.argmax(1)[boxes[:, 0].long().cuda()] == 1).sum().item()
print(hits)
"""


def test_an_evaluation_loader_of_joined_rows_stays_unprepared_and_ungathered() -> None:
    text, codes = converted_stably(SCRIPT.format(evaluated="test_loader"))
    assert "gather_for_metrics" not in text
    assert "accelerator.prepare(model, optimizer, train_loader)" in text
    assert "ACC965" not in codes


def test_an_evaluation_over_the_training_loader_of_joined_rows_is_reported() -> None:
    text, codes = converted_stably(SCRIPT.format(evaluated="train_loader"))
    assert "gather_for_metrics" not in text
    assert "ACC965" in codes


DATASETS = """\
import torch
from torch.utils.data import Dataset


class ListDataset(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.randn(8), torch.rand(i % 3 + 1, 3)

    def collate_fn(self, batch):
        images, bb_targets = list(zip(*batch))
        return torch.stack(images), torch.cat(bb_targets, 0)
"""

EVALUATE = """\
import torch
from torch.utils.data import DataLoader

from datasets import ListDataset


def make_valid_loader(batch_size):
    dataset = ListDataset()
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=dataset.collate_fn)
    return loader


def evaluate(model, dataloader):
    hits = 0
    with torch.no_grad():
        for images, targets in dataloader:
            hits += (model(images).argmax(1)[targets[:, 0].long()] == 1).sum().item()
    return hits
"""

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from datasets import ListDataset
from evaluate import evaluate, make_valid_loader


def main():
    model = nn.Linear(8, 4).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = ListDataset()
    train_loader = DataLoader(dataset, batch_size=4, collate_fn=dataset.collate_fn)
    valid_loader = make_valid_loader(4)
    for images, targets in train_loader:
        optimizer.zero_grad()
        model(images.cuda()).sum().backward()
        optimizer.step()
    print(evaluate(model, valid_loader))


if __name__ == "__main__":
    main()
"""


def test_a_factory_of_another_module_returning_joined_rows_is_evaluated_unsharded() -> None:
    sources = {"train": TRAIN, "evaluate": EVALUATE, "datasets": DATASETS}
    modules = [ProgramModule(name, cst.parse_module(text), text) for name, text in sources.items()]
    outcomes = convert_program(modules, "train", Options())
    train = outcomes["train"].module.code
    assert "accelerator.prepare(model, optimizer, train_loader)" in train
    assert "valid_loader" not in train.split("accelerator.prepare(")[1].split(")")[0]
    assert "gather" not in outcomes["evaluate"].module.code
    assert not [change for outcome in outcomes.values() for change in outcome.changes if change.code == "ACC965"]
