"""loader-length-after-prepare (ACC122): a step count read from ``len(loader)`` before the
``prepare`` is computed again right after it, so that it counts this process's batches."""

from __future__ import annotations

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    {counts}
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {scheduler}
    step = 0
    for epoch in range(2):
        for x, y in loader:
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * (1 - step / total_steps)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            {stepping}


main()
"""


def converted(counts: str, scheduler: str = "", stepping: str = "") -> tuple[str, list[int]]:
    source = SCRIPT.format(counts=counts, scheduler=scheduler, stepping=stepping)
    conversion = convert_source(source.encode(), Options(), path="train.py")
    return conversion.output.decode(), [change.line for change in conversion.changes if change.code == "ACC122"]


def test_a_total_read_from_the_loader_length_is_counted_again_after_prepare() -> None:
    code, lines = converted("total_steps = 2 * len(loader)")
    prepare = code.index("accelerator.prepare(model, optimizer, loader)\n")
    assert code.index("    total_steps = 2 * len(loader)\n", prepare) > prepare
    assert code.count("total_steps = 2 * len(loader)") == 2
    assert lines == [10]


def test_a_chain_of_counts_is_repeated_in_order() -> None:
    code, lines = converted("per_epoch = math.ceil(len(loader) / 2)\n    total_steps = 2 * per_epoch")
    after = code[code.index("accelerator.prepare(model, optimizer, loader)\n") :]
    assert after.index("per_epoch = math.ceil(len(loader) / 2)") < after.index("total_steps = 2 * per_epoch")
    assert lines == [10, 11]


def test_the_conversion_is_stable() -> None:
    code, _ = converted("total_steps = 2 * len(loader)")
    again = convert_source(code.encode(), Options(), path="train.py")
    assert again.output.decode() == code
    assert not [change for change in again.changes if change.code == "ACC122"]


def test_with_a_prepared_scheduler_the_count_before_prepare_is_kept() -> None:
    """A prepared scheduler steps once per process per call: a total counted before the prepare
    already matches it, and counting again would run the schedule N times too fast."""
    code, lines = converted(
        "total_steps = 2 * len(loader)",
        scheduler="scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / total_steps)",
        stepping="scheduler.step()",
    )
    assert code.count("total_steps = 2 * len(loader)") == 1
    assert lines == []


def test_a_count_that_is_not_plain_arithmetic_is_left() -> None:
    code, lines = converted("total_steps = compute_total(len(loader))")
    assert code.count("total_steps = compute_total(len(loader))") == 1
    assert lines == []


def test_an_evaluation_loader_count_is_left() -> None:
    """Only training loaders: an evaluation's batch count divides gathered sums (reported by the
    metrics rule as a mean over batches) and keeps its one-process value."""
    counts = (
        "total_steps = 2 * len(loader)\n"
        "    val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)\n"
        "    n_val = len(val_loader)"
    )
    evaluation = (
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        for x, y in val_loader:\n"
        "            print(model(x).sum().item() / n_val)\n\n\nmain()\n"
    )
    source = SCRIPT.format(counts=counts, scheduler="", stepping="").replace("\n\nmain()\n", evaluation)
    code = convert_source(source.encode(), Options(), path="train.py").output.decode()
    assert "accelerator.prepare(model, optimizer, loader, val_loader)" in code
    assert code.count("n_val = len(val_loader)") == 1
    assert code.count("total_steps = 2 * len(loader)") == 2


DATASET_COUNT = """\
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    batch_size = 8
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(dataset, batch_size=batch_size)
    sizes = {{"train": len(dataset)}}
    n_train = len(dataset)
    total_steps = {count}
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    for x, y in loader:
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = 0.1 * min(1.0, step / total_steps)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


main()
"""


@pytest.mark.parametrize(
    ("count", "reported"),
    [
        ("len(dataset) // batch_size", True),  # ssd.pytorch's epoch_size
        ("len(dataset) / batch_size", True),
        ("math.ceil(len(dataset) / batch_size)", True),
        ("round(sizes['train'] / batch_size) * 2", True),  # re-ID's warm_iteration, a dict of sizes
        ("n_train // batch_size", True),  # a name bound to the size
        ("len(loader.dataset) // batch_size", True),
        ("len(dataset) // 2", False),  # not divided by the loaders' batch size
        ("batch_size / len(dataset)", False),
        ("len(dataset) * batch_size", False),
        ("sizes['train']", False),  # a size, not a count of batches
    ],
)
def test_a_batch_count_from_the_dataset_size_is_reported(count: str, reported: bool) -> None:
    """A count of batches from the data set's size counts every process's batches: reported
    (ACC967) at its line; the same arithmetic on anything else is not."""
    source = DATASET_COUNT.format(count=count)
    conversion = convert_source(source.encode(), Options(), path="train.py")
    found = [change.line for change in conversion.changes if change.code == "ACC967"]
    assert found == ([14] if reported else [])
