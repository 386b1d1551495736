"""A model built and trained inside a branch or ``with`` block of the home block (``if
args.train:`` at the top level or in ``main()``, other than the ``__main__`` guard): the plan reads
that body as the block's own statements, so the model and its optimizer are prepared inside,
after they are bound, and the loader there too. Before, no prepare could be placed: in a
function the loader was sharded while the model trained unsynchronised on each process (ACC926),
and at the top level the script was left as it was (a conversion a second one had changed again:
fuzz mutant 269 of ``loader_after_training_main_block``)."""

from __future__ import annotations

import textwrap

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

TRAINING = """\
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=8)
model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""

HEADER = """\
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

"""

ARGS = """\
parser = argparse.ArgumentParser()
parser.add_argument("--train", type=int, default=1)
args = parser.parse_args()
"""


def _script(opening: str, in_function: bool) -> str:
    block = ARGS + opening + "\n" + textwrap.indent(TRAINING, "    ")
    if not in_function:
        return HEADER + block
    return HEADER + "\ndef main():\n" + textwrap.indent(block, "    ") + '\n\nif __name__ == "__main__":\n    main()\n'


SHAPES = {
    "module, if": ("if args.train:", False),
    "module, if with a constant test": ('if "__main__":', False),
    "function, if": ("if args.train:", True),
    "function, with": ("with torch.autograd.set_detect_anomaly(False):", True),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_model_trained_in_a_branch_is_prepared_inside_it(shape: str) -> None:
    opening, in_function = SHAPES[shape]
    source = _script(opening, in_function)
    result = convert_source(source.encode(), Options(), path="train.py")
    text = result.output.decode()
    body = " " * (8 if in_function else 4)
    lines = text.splitlines()
    assert f"{body}model, optimizer = accelerator.prepare(model, optimizer)" in lines
    assert f"{body}loader = accelerator.prepare(loader)" in lines
    # Prepared after they are bound and before the loop trains them.
    prepared = lines.index(f"{body}model, optimizer = accelerator.prepare(model, optimizer)")
    assert lines[prepared - 1].lstrip().startswith("optimizer = torch.optim.SGD")
    assert lines[prepared + 1] == f"{body}for x, y in loader:"
    assert not [change for change in result.changes if change.code == "ACC926"]
    assert convert_source(text.encode(), Options(), path="train.py").output.decode() == text


def test_under_the_main_guard_it_converts_as_before() -> None:
    source = _script('if __name__ == "__main__":', False)
    result = convert_source(source.encode(), Options(), path="train.py")
    text = result.output.decode()
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in text
    assert convert_source(text.encode(), Options(), path="train.py").output.decode() == text


def test_a_model_built_in_one_branch_and_trained_after_it_is_not_prepared_inside() -> None:
    # Trained below the ``if``, not inside it: nothing of the branch is read as the block's own.
    source = (
        HEADER
        + ARGS
        + textwrap.dedent(
            """\
        model = nn.Linear(8, 2)
        if args.train:
            model = nn.Linear(8, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=8)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        """
        )
    )
    text = convert_source(source.encode(), Options(), path="train.py").output.decode()
    assert "    model = accelerator.prepare(model)\n" not in text
    assert text.count("accelerator.prepare(") == 1
