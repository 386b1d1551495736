"""ACC119 loader-dict: the loaders of a dict keyed by phase are prepared, and the phase loop's running
sums read gathered per-sample tensors; what cannot be gathered exactly is reported (ACC928)."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Change, Options

#: The transfer-learning tutorial's shape: ``{criterion}`` builds the loss, ``{statistics}`` are the
#: loop's last lines (indented under the loop), ``{loader}`` the training function's name for the dict.
TEMPLATE = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train_model(model, criterion, optimizer, {loader}, sizes):
    for phase in ["train", "val"]:
        model.train() if phase == "train" else model.eval()
        running_loss = 0.0
        running_corrects = 0
        total = 0
        for inputs, labels in {loader}[phase]:
            optimizer.zero_grad()
            with torch.set_grad_enabled(phase == "train"):
                outputs = model(inputs)
                _, preds = torch.max(outputs, 1)
                loss = criterion(outputs, labels)
                if phase == "train":
                    loss.backward()
                    optimizer.step()
{statistics}
        print(phase, running_loss / sizes[phase], running_corrects / sizes[phase], total)


def main():
    torch.manual_seed(0)
    sets = {{x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}}
    dataloaders = {{x: DataLoader(sets[x], batch_size=4, shuffle=True) for x in ["train", "val"]}}
    model = nn.Linear(4, 2)
    criterion = {criterion}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_model(model, criterion, optimizer, dataloaders, {{x: len(sets[x]) for x in sets}})


if __name__ == "__main__":
    main()
"""

TUTORIAL_STATISTICS = """\
            running_loss += loss.item() * inputs.size(0)
            running_corrects += torch.sum(preds == labels.data)
            total += labels.size(0)"""


def convert(
    statistics: str = TUTORIAL_STATISTICS, criterion: str = "nn.CrossEntropyLoss()", loader: str = "dataloaders"
) -> tuple[list[str], list[Change]]:
    source = TEMPLATE.format(statistics=statistics, criterion=criterion, loader=loader)
    outcome = convert_module(cst.parse_module(source), Options())
    return [line.strip() for line in outcome.module.code.splitlines()], outcome.changes


@pytest.mark.parametrize("loader", ["dataloaders", "loaders"])
def test_the_tutorials_sums_read_gathered_rows(loader: str) -> None:
    """Through the training function's parameter (named as the dict or not): the model's outputs
    (detached), the targets and the predictions are gathered once, before the sums; the loss is
    recomputed on the gathered rows, the inputs only counted are not sent."""
    lines, changes = convert(loader=loader)
    gather = "gathered_outputs, gathered_labels, gathered_preds = accelerator.gather_for_metrics("
    at = lines.index(gather)
    assert lines[at + 1 : at + 6] == [
        "(outputs.detach(), labels, preds)",
        ")",
        "running_loss += criterion(gathered_outputs, gathered_labels).item() * gathered_labels.size(0)",
        "running_corrects += torch.sum(gathered_preds == gathered_labels.data)",
        "total += gathered_labels.size(0)",
    ]
    assert "dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}" in lines
    codes = [change.code for change in changes]
    # The dict prepared by the prepare rule (the loaders owner decides it holds loaders), its sums
    # gathered by the loader-dict rule.
    assert codes.count("ACC119") == 1 and "ACC103" in codes and "ACC901" not in codes and "ACC928" not in codes


UNSAFE = {
    # A mean over batches: the gathered batches are not the one-process batches.
    "loss without the batch size": ("running_loss += loss.item()", "nn.CrossEntropyLoss()"),
    # Weighted: the batch mean times the batch size is not the sum of the rows' losses.
    "weighted criterion": ("running_loss += loss.item() * inputs.size(0)", "nn.CrossEntropyLoss(weight=w)"),
    "summed criterion": ("running_loss += loss.item() * inputs.size(0)", "nn.CrossEntropyLoss(reduction='sum')"),
    # A sum the loop computes per process from something it does not follow.
    "per-process value": ("running_loss += optimizer.param_groups[0]['lr'] * loss.item()", "nn.CrossEntropyLoss()"),
    "sum under an if": (
        "if phase == 'val':\n                running_loss += loss.item() * inputs.size(0)",
        "nn.CrossEntropyLoss()",
    ),
}


@pytest.mark.parametrize(("statistics", "criterion"), UNSAFE.values(), ids=UNSAFE.keys())
def test_sums_that_cannot_be_gathered_exactly_are_reported_and_left(statistics: str, criterion: str) -> None:
    lines, changes = convert("            " + statistics, criterion)
    assert not any("gather_for_metrics" in line for line in lines)
    assert [change.code for change in changes].count("ACC928") == 1
    # The loaders are still prepared: the data is sharded, only the sums need a person.
    assert "dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}" in lines


def test_a_dict_bound_twice_is_left_to_the_report() -> None:
    """Which binding trains is a guess: not prepared, ACC901 names the dict."""
    source = TEMPLATE.format(statistics=TUTORIAL_STATISTICS, criterion="nn.CrossEntropyLoss()", loader="dataloaders")
    source = source.replace(
        "    model = nn.Linear(4, 2)\n",
        "    dataloaders = {x: DataLoader(sets[x], batch_size=2) for x in ['train', 'val']}\n    model = nn.Linear(4, 2)\n",
    )
    outcome = convert_module(cst.parse_module(source), Options())
    assert "accelerator.prepare(loader)" not in outcome.module.code
    assert "gather_for_metrics" not in outcome.module.code
    assert "ACC901" in {change.code for change in outcome.changes}


@pytest.mark.parametrize(
    ("loop", "statistics"),
    [
        ("for inputs, labels in tqdm(dataloaders[phase]):", TUTORIAL_STATISTICS),
        ("for step, (inputs, labels) in enumerate(dataloaders[phase]):", TUTORIAL_STATISTICS),
    ],
    ids=["tqdm", "enumerate"],
)
def test_a_wrapped_loop_over_the_dict_is_gathered_too(loop: str, statistics: str) -> None:
    source = TEMPLATE.format(statistics=statistics, criterion="nn.CrossEntropyLoss()", loader="dataloaders")
    source = source.replace("for inputs, labels in dataloaders[phase]:", loop)
    source = "from tqdm import tqdm\n" + source
    outcome = convert_module(cst.parse_module(source), Options())
    lines = [line.strip() for line in outcome.module.code.splitlines()]
    assert "running_corrects += torch.sum(gathered_preds == gathered_labels.data)" in lines
    assert "ACC928" not in {change.code for change in outcome.changes}


def test_a_meter_updated_per_batch_is_reported() -> None:
    """``meter.update(loss.item(), inputs.size(0))`` keeps one process's values: not gathered."""
    lines, changes = convert(
        TUTORIAL_STATISTICS + "\n            meter.update(loss.item(), inputs.size(0))",
    )
    assert not any("gather_for_metrics" in line for line in lines)
    assert [change.code for change in changes].count("ACC928") == 1


HELPER = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def test(model, loader):
    correct = 0
    with torch.no_grad():
        for inputs, labels in loader:
            correct += model(inputs).argmax(1).eq(labels).sum().item()
    return correct


class Trainer:
    def __init__(self):
        self.model = nn.Linear(4, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.dataloaders = {DICT}

    def evaluate(self, loader):
        correct = 0
        with torch.no_grad():
            for inputs, labels in loader:
                correct += self.model(inputs).argmax(1).eq(labels).sum().item()
        return correct

    def fit(self):
        for inputs, labels in self.dataloaders["train"]:
            self.optimizer.zero_grad()
            nn.functional.cross_entropy(self.model(inputs), labels).backward()
            self.optimizer.step()
        return self.evaluate(self.dataloaders["val"])


def main():
    dataloaders = {DICT}
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, labels in dataloaders["train"]:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    print(test(model, dataloaders["val"]), Trainer().fit())


main()
"""

DICTS = [
    '{x: DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4) for x in ["train", "val"]}',
    '{"train": DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4), '
    '"val": DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)}',
]


@pytest.mark.parametrize("written", DICTS)
def test_a_loader_of_a_written_dict_handed_to_an_evaluation_is_gathered(written: str) -> None:
    """``test(model, dataloaders["val"])`` and ``self.evaluate(self.dataloaders["val"])`` with the
    dict written in the file (the re-ID baseline's): the dict's loaders are prepared by their values
    (in the function and in ``__init__``), and the loops of the helper and of the method run over
    one of them, so what they count is gathered (before: neither was gathered, and the class's dict
    was not prepared at all)."""
    source = HELPER.replace("{DICT}", written)
    code = convert_module(cst.parse_module(source), Options(), source).module.code
    assert "dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}" in code
    assert (
        "self.dataloaders = {key: self.accelerator.prepare(loader) for key, loader in self.dataloaders.items()}" in code
    )
    helper = code[code.index("def test(") : code.index("class Trainer")]
    method = code[code.index("def evaluate(") : code.index("def fit(")]
    assert "accelerator.gather_for_metrics(" in helper
    assert "self.accelerator.gather_for_metrics(" in method
