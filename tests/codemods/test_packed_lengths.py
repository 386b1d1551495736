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


MOVED = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

data = [(torch.randn(6, 4), 5, 1), (torch.randn(6, 4), 3, 0)] * 4
loader = DataLoader(data, batch_size=2)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 8, batch_first=True)

    def forward(self, x, lengths):
        return self.rnn(x)[0], (lengths - 1).tolist()


model = Tagger().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for {target} in {loop}:
    {moves}
    optimizer.zero_grad()
    out, decode_lengths = model(x, lengths)
    packed = nn.utils.rnn.pack_padded_sequence(out, decode_lengths, batch_first=True, enforce_sorted=False)
    packed.data.sum().backward()
    optimizer.step()
"""


def reported_in(target: str, loop: str, moves: str) -> bool:
    source = MOVED.replace("{target}", target).replace("{loop}", loop).replace("{moves}", moves)
    conversion = convert_source(source.encode(), Options(), path="train.py")
    return any(change.code == "ACC933" for change in conversion.changes)


@pytest.mark.parametrize(
    ("target", "loop", "moves"),
    [
        ("x, lengths, y", "loader", "x, lengths, y = x.to(device), lengths.to(device), y.to(device)"),
        ("i, (x, lengths, y)", "enumerate(loader)", "x = x.to(device); lengths = lengths.cuda(); y = y.to(device)"),
    ],
    ids=["tuple-assignment", "enumerate-one-per-line"],
)
def test_lengths_the_original_moved_with_every_batch_element_are_not_reported(target: str, loop: str, moves: str):
    # The original moved every element itself: the prepared loader changes nothing the packing sees.
    assert not reported_in(target, loop, moves)


@pytest.mark.parametrize(
    "moves",
    ["x, y = x.to(device), y.to(device)", "x, lengths, y = x.to(device), lengths.cpu(), y.to(device)"],
    ids=["lengths-left-on-the-host", "lengths-moved-to-the-cpu"],
)
def test_lengths_the_original_left_on_the_host_are_still_reported(moves: str):
    assert reported_in("x, lengths, y", "loader", moves)
