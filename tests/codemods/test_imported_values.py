"""Functions of another module of a program named as values (a hook list, ``functools.partial``,
a dict of callbacks): the code handing them over holds the accelerator, so they receive it as
the same module's functions do, carried by ``functools.partial(f, accelerator=accelerator)``."""

from __future__ import annotations

import textwrap

import pytest

from tests.codemods.test_program import converted

CALLBACKS = """
import torch


def log_epoch(epoch):
    print(f"epoch {epoch}")


def save_weights(model, path):
    torch.save(model.state_dict(), path)


def collate(batch):
    print("collating")
    return torch.utils.data.default_collate(batch)
"""

ENTRY = """
import functools

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import collate, log_epoch, save_weights

{body}
"""

BODY = """
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, collate_fn=collate)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
hooks = [log_epoch]
table = {"save": functools.partial(save_weights, path="last.pt")}
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    for hook in hooks:
        hook(epoch)
    table["save"](model)
"""


def _indented(body: str, indent: str) -> str:
    return "".join(f"{indent}{line}\n" if line else "\n" for line in body.strip().splitlines())


def _in_main(body: str) -> str:
    return "def main():\n" + _indented(body, "    ") + "\n\nmain()\n"


def _in_a_class(body: str) -> str:
    return "class Runner:\n    def run(self):\n" + _indented(body, "        ") + "\n\nRunner().run()\n"


@pytest.mark.parametrize("shape", [str, _in_main, _in_a_class], ids=["module", "function", "class"])
def test_another_modules_functions_used_as_values_receive_the_accelerator(shape) -> None:
    code = converted("train", train=ENTRY.format(body=shape(textwrap.dedent(BODY))), callbacks=CALLBACKS)
    callbacks, train = code["callbacks"], code["train"]
    # The helpers print and save on the main process, with the accelerator handed to them.
    assert "def log_epoch(epoch, accelerator):" in callbacks, callbacks
    assert "accelerator.print(" in callbacks, callbacks
    assert "def save_weights(model, path, accelerator):" in callbacks, callbacks
    assert "accelerator.save(" in callbacks, callbacks
    # The values carry it: the hook list, and the partial in a dict of callbacks.
    holder = "self.accelerator" if shape is _in_a_class else "accelerator"
    assert f"[functools.partial(log_epoch, accelerator={holder})]" in train, train
    assert f"functools.partial(functools.partial(save_weights, accelerator={holder}), path=" in train, train
    # A DataLoader worker's collate_fn runs in a worker process: no accelerator there.
    assert "def collate(batch):" in callbacks, callbacks
    assert "collate_fn=collate" in train, train
