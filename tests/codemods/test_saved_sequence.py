"""A list or tuple of whole training objects saved in one file (awd-lstm-lm's ``torch.save([model,
criterion, optimizer], f)``) holds the model unwrapped and the optimizer the runtime's wrapper
wraps, as a saved dict does: the file loads without a process group, as the original's does."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from tests.launching import REPO_ROOT

CASES = REPO_ROOT / "fixtures" / "cases"


def _saved(code: str) -> list[str]:
    """The first argument of every ``accelerator.save(...)`` call of ``code``, as written."""
    module = cst.parse_module(code)
    found: list[str] = []

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "save" and node.args:
                found.append(module.code_for_node(node.args[0].value))

    module.visit(Finder())
    return found


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("module", "(accelerator.unwrap_model(model), optimizer.optimizer)"),
        ("function", "[accelerator.unwrap_model(model), criterion, optimizer.optimizer]"),
        (
            "class",
            "[self.accelerator.unwrap_model(self.model), self.criterion, self.optimizer.optimizer]",
        ),
    ],
)
def test_saved_sequence_holds_the_unwrapped_objects(shape: str, expected: str) -> None:
    source = (CASES / f"saved_sequence_{shape}.py").read_text()
    code = convert_module(cst.parse_module(source), Options()).module.code
    assert expected in _saved(code)


def test_saved_sequence_of_plain_values_is_left_alone() -> None:
    source = """
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    torch.save([epoch, "note"], "meta.pt")
"""
    code = convert_module(cst.parse_module(source), Options()).module.code
    assert _saved(code) == ['[epoch, "note"]']
