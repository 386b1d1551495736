"""per-batch-files (ACC936): a file an evaluation over a prepared loader writes per batch, named
by the batch index or a per-batch counter, is reported at the write; files named otherwise, files
opened for reading and loops over loaders nothing prepares are not. Also: a write after the
gathered forward keeps its own position for every rule that runs after the gather."""

from __future__ import annotations

import pytest

from accel_convert.codemods.engine.model import Change, Options
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import os
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 2)), batch_size=64)
test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
for x, y in train_loader:
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
model.eval()
n = 0
with torch.no_grad():
    for {target} in {loop}:
        out = model(x.to(device))
        n += 1
        {write}
"""

WRITE_LINE = 24


def changes(target: str, loop: str, write: str) -> list[Change]:
    source = SCRIPT.format(target=target, loop=loop, write=write)
    return list(convert_source(source.encode(), Options(), path="evaluate.py").changes)


@pytest.mark.parametrize(
    "write",
    [
        'torch.save(out.cpu(), f"preds/batch_{i}.pt")',
        'np.save(os.path.join("preds", str(i) + ".npy"), out.cpu().numpy())',
        'open(f"preds_{i}.txt", "w").write(str(out.tolist()))',
        'np.save(f"preds_{n}.npy", out.cpu().numpy())',
    ],
    ids=["torch-save-f-string", "joined-path", "open-for-writing", "counter"],
)
def test_a_file_per_batch_named_by_its_index_is_reported_at_the_write(write: str) -> None:
    found = [change for change in changes("i, (x,)", "enumerate(test_loader)", write) if change.code == "ACC936"]
    assert [(change.line, change.fixed) for change in found] == [(WRITE_LINE, False)]


@pytest.mark.parametrize(
    ("target", "loop", "write"),
    [
        ("i, (x,)", "enumerate(test_loader)", 'torch.save(out.cpu(), "preds/last.pt")'),
        ("i, (x,)", "enumerate(test_loader)", 'print(open(f"preds_{i}.txt").read())'),
        (
            "i, (x,)",
            "enumerate(DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4))",
            'torch.save(out, f"p{i}.pt")',
        ),
    ],
    ids=["fixed-name", "read-only", "unprepared-loader"],
)
def test_other_writes_are_not(target: str, loop: str, write: str) -> None:
    assert not [change for change in changes(target, loop, write) if change.code == "ACC936"]


def test_a_save_after_the_gathered_forward_is_reported_where_it_stands() -> None:
    # The gather rebuilds the statements after the forward; the checkpoint rule, which runs
    # later, reported their saves at 1:1 before the positions were carried over.
    found = changes("i, (x,)", "enumerate(test_loader)", 'torch.save(out.cpu(), f"preds/batch_{i}.pt")')
    assert any(change.code == "ACC113" for change in found), "the evaluation is gathered"
    saves = [change for change in found if change.code == "ACC114"]
    assert [(change.line, change.column) for change in saves] == [(WRITE_LINE, 8)]
