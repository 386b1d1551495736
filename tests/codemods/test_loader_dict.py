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
    assert "dataloaders = {x: accelerator.prepare(loader) for x, loader in dataloaders.items()}" in lines
    codes = [change.code for change in changes]
    assert codes.count("ACC119") == 2 and "ACC901" not in codes and "ACC928" not in codes


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
    assert "dataloaders = {x: accelerator.prepare(loader) for x, loader in dataloaders.items()}" in lines


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
