"""A model built and trained inside a top-level ``if`` other than the ``__main__`` guard
(``if args.train:``), where no prepare call can be placed: the script is left as it is and the
model reported (ACC926), rather than converted with its loaders sharded and its model trained
unsynchronised on each process (a conversion a second one changed again: fuzz mutant 269 of
``loader_after_training_main_block``). Under the ``__main__`` guard it converts."""

from __future__ import annotations

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--train", type=int, default=1)
args = parser.parse_args()
{test}
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=8)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


@pytest.mark.parametrize("test", ["if args.train:", 'if "__main__":'])
def test_a_model_trained_in_a_top_level_if_is_reported_and_the_script_left_as_it_is(test: str) -> None:
    source = SCRIPT.format(test=test)
    result = convert_source(source.encode(), Options(), path="train.py")
    assert result.output.decode() == source
    found = [change for change in result.changes if change.code == "ACC926"]
    assert [(change.line, change.fixed) for change in found] == [(11, False)]
    assert "inside a top-level `if`" in found[0].message


def test_under_the_main_guard_it_converts() -> None:
    source = SCRIPT.format(test='if __name__ == "__main__":')
    result = convert_source(source.encode(), Options(), path="train.py")
    text = result.output.decode()
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in text
    assert convert_source(text.encode(), Options(), path="train.py").output.decode() == text
