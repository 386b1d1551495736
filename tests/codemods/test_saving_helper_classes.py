"""A class of the script, built with one of its models where the accelerator reaches, that saves
in its ``__init__`` or in a method (``Snapshot(model, "net.pt")`` whose ``__init__`` runs
``torch.save(model.state_dict(), path)``): it receives the accelerator as a training class does,
and saves the unwrapped model on the main process, as a save in ``main()`` does. Before, it was
only reported (ACC914): every rank wrote the file, with DDP's ``module.`` keys. A library's class
in the same shape already got the accelerator through the program's seeds."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from tests.codemods.support import convert_text

SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Snapshot:
    def __init__(self, model, path):
        self.path = path
SAVE


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    snapshot = BUILD
    fresh = nn.Linear(2, 2)
    fresh.load_state_dict(torch.load(snapshot.path))


if __name__ == "__main__":
    main()
"""

SAVES = {
    "in __init__": "        torch.save(model.state_dict(), path)",
    "in a method __init__ calls": (
        "        self.write(model)\n\n    def write(self, model):\n        torch.save(model.state_dict(), self.path)"
    ),
}

UNWRAPPED = "self.accelerator.save(self.accelerator.unwrap_model(model).state_dict()"


def script(save: str, build: str = 'Snapshot(model, "net.pt")') -> str:
    return textwrap.dedent(SCRIPT).replace("SAVE", save).replace("BUILD", build)


@pytest.mark.parametrize("save", SAVES.values(), ids=SAVES.keys())
def test_a_class_saving_the_model_it_is_built_with_receives_the_accelerator(save: str) -> None:
    source = script(save)
    assert "Snapshot" in analyse(cst.parse_module(source)).training_classes
    code, changes = convert_text(source)
    assert "def __init__(self, model, path, accelerator):" in code
    assert UNWRAPPED in code
    assert 'snapshot = Snapshot(model, "net.pt", accelerator)' in code
    assert "ACC914" not in {change.code for change in changes}


def test_a_class_saving_in_a_later_call_is_reported() -> None:
    # ``stopper.save(model)`` may be called on some ranks only (when this rank's loss improves): a
    # barrier in it would wait for ranks that never come, so the class keeps no accelerator.
    save = "        self.model = model\n\n    def save(self):\n        torch.save(self.model.state_dict(), self.path)"
    source = script(save).replace("    fresh = nn.Linear", "    snapshot.save()\n    fresh = nn.Linear")
    assert "Snapshot" not in analyse(cst.parse_module(source)).training_classes
    _, changes = convert_text(source)
    assert "ACC914" in {change.code for change in changes}


def test_a_class_built_without_a_model_is_left_as_it_was() -> None:
    # Handed no model here: what it saves is not the prepared model, and it gets no accelerator.
    source = script(SAVES["in __init__"], 'Snapshot(nn.Linear(2, 2), "net.pt")')
    assert "Snapshot" not in analyse(cst.parse_module(source)).training_classes
    code, _ = convert_text(source)
    assert "torch.save(model.state_dict(), path)" in code


def test_a_class_also_built_where_no_accelerator_reaches_is_reported() -> None:
    source = script(SAVES["in __init__"]) + '\n\ndef export(model):\n    Snapshot(model, "copy.pt")\n'
    assert "Snapshot" not in analyse(cst.parse_module(source)).training_classes
    _, changes = convert_text(source)
    assert "ACC914" in {change.code for change in changes}
