"""device-count-scaling (ACC932): sizes multiplied by ``torch.cuda.device_count()`` (DataParallel's
batch scaling) are reported; other reads of the count are not."""

from __future__ import annotations

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

n_gpu = torch.cuda.device_count()
{line}
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


def reported_lines(line: str) -> list[int]:
    conversion = convert_source(SCRIPT.replace("{line}", line).encode(), Options(), path="train.py")
    return [change.line for change in conversion.changes if change.code == "ACC932"]


@pytest.mark.parametrize(
    "line",
    [
        "batch_size = 32 * max(1, n_gpu)",
        "batch_size = n_gpu * 16",
        "batch_size = 16 * torch.cuda.device_count()",
    ],
    ids=["through-max", "the-name", "the-call"],
)
def test_a_size_scaled_by_the_device_count_is_reported(line: str) -> None:
    assert reported_lines(line) == [6]


@pytest.mark.parametrize(
    "line",
    ['print(f"{n_gpu} GPUs")', "use_dp = n_gpu > 1", "batch_size = 32 + n_gpu"],
    ids=["printed", "compared", "not-a-scaling"],
)
def test_other_reads_of_the_count_are_not(line: str) -> None:
    assert reported_lines(line) == []
