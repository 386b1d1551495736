"""A ``with open(path, "w") as out:`` block around code the processes run together stays on every
rank, its file opened on the main process alone (``os.devnull`` on the others), with a barrier
after it; under ``if accelerator.is_main_process:`` the other ranks would wait forever at its
first collective. A block that only writes is still guarded. The shapes: an evaluation loop in
the block, a function of the script that evaluates, another module's ``validation(model, ...,
loader)`` (deep-text-recognition-benchmark's training log), a training loop."""

from __future__ import annotations

import textwrap

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

HEADER = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from evaluation import validation


def evaluate(model, loader):
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8)
    test_loader = DataLoader(data, batch_size=8)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
"""

BLOCKS = {
    "evaluation loop": """\
with open("log.txt", "w") as log:
    for x, y in test_loader:
        output = model(x)
        log.write(f"{output.argmax(1).tolist()}\\n")
""",
    "function of the script": """\
with open("log.txt", "w") as log:
    log.write(f"{evaluate(model, test_loader)}\\n")
""",
    "function of another module": """\
with open("log.txt", "a") as log:
    accuracy = validation(model, test_loader)
    log.write(f"{accuracy}\\n")
""",
    "training loop": """\
with open("log.txt", "w") as log:
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        log.write(f"{loss.item()}\\n")
""",
}


def _convert(block: str) -> str:
    source = HEADER + textwrap.indent(block, "    ") + '\n\nif __name__ == "__main__":\n    main()\n'
    text = convert_source(source.encode(), Options(), path="train.py").output.decode()
    assert convert_source(text.encode(), Options(), path="train.py").output.decode() == text
    return text


@pytest.mark.parametrize("shape", sorted(BLOCKS))
def test_the_block_stays_on_every_rank_and_opens_its_file_on_the_main_process(shape: str) -> None:
    text = _convert(BLOCKS[shape])
    mode = '"a"' if "another module" in shape else '"w"'
    assert f'    with open("log.txt" if accelerator.is_main_process else os.devnull, {mode}) as log:\n' in text
    assert "import os\n" in text.splitlines(keepends=True)
    assert "if accelerator.is_main_process:\n        with open" not in text
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("    with open")) + 1
    while lines[end].startswith("        "):
        end += 1
    assert lines[end] == "    accelerator.wait_for_everyone()"


def test_a_block_that_only_writes_is_guarded() -> None:
    text = _convert('with open("log.txt", "w") as log:\n    log.write("done\\n")\n')
    assert '    if accelerator.is_main_process:\n        with open("log.txt", "w") as log:\n' in text
    assert "os.devnull" not in text
