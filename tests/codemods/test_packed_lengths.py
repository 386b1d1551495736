"""packed-lengths-on-device (ACC933): pack_padded_sequence given lengths that may come from a
prepared batch (a name, an attribute, a subscript) is reported; lengths already on the CPU or
written as a list are not."""

from __future__ import annotations

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

data = [(torch.randn(6, 4), 5, 1), (torch.randn(6, 4), 3, 0)] * 4
loader = DataLoader(data, batch_size=2)
rnn = nn.GRU(4, 8, batch_first=True)
optimizer = torch.optim.SGD(rnn.parameters(), lr=0.1)
for x, lengths, y in loader:
    optimizer.zero_grad()
    packed = {call}
    _, h = rnn(packed)
    h.sum().backward()
    optimizer.step()
"""


def reported(call: str) -> bool:
    conversion = convert_source(SCRIPT.replace("{call}", call).encode(), Options(), path="train.py")
    return any(change.code == "ACC933" for change in conversion.changes)


@pytest.mark.parametrize(
    "call",
    [
        "nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)",
        "nn.utils.rnn.pack_padded_sequence(x, lengths=lengths, batch_first=True, enforce_sorted=False)",
    ],
    ids=["positional", "keyword"],
)
def test_lengths_that_may_come_from_the_batch_are_reported(call: str) -> None:
    assert reported(call)


@pytest.mark.parametrize(
    "call",
    [
        "nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)",
        "nn.utils.rnn.pack_padded_sequence(x, [5, 3], batch_first=True, enforce_sorted=False)",
    ],
    ids=["already-on-the-cpu", "a-list"],
)
def test_lengths_on_the_cpu_are_not(call: str) -> None:
    assert not reported(call)
