"""Functions nested in a function's or a method's body, at any depth: what their calls pass flows
into their parameters (a nested ``evaluate(loader)`` evaluates the loader it is handed), and
where training starts stays the enclosing block's own call of them, never a loop inside a
``def``."""

from __future__ import annotations

import pytest

from tests.codemods.test_model_plan import _line, _planned

HEAD = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


"""

TRAIN_EPOCH = """
def train_epoch(loader):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

def evaluate(loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += nn.functional.mse_loss(model(x), y).item()
    print(total)
"""

BUILD = """
train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=8)
"""

MODEL = """
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def _indented(text: str, depth: int) -> str:
    return "".join(f"{'    ' * depth}{line}\n" if line else "\n" for line in text.strip().splitlines())


def _two_levels_deep() -> tuple[str, str]:
    """``run()`` in ``main()`` holds the helpers; the model is built after its ``def``."""
    body = (
        _indented(BUILD, 1)
        + "    def run():\n"
        + _indented(TRAIN_EPOCH, 2)
        + "        for epoch in range(2):\n            train_epoch(train_loader)\n            evaluate(test_loader)\n\n"
        + _indented(MODEL, 1)
        + "    run()\n"
    )
    return HEAD + "def main():\n" + body + "\n\nmain()\n", "run()"


def _in_a_module_level_helper() -> tuple[str, str]:
    """``fit`` (module level) holds the helpers; ``main()`` builds everything and calls it."""
    fit = (
        "def fit(model, optimizer, train_loader, test_loader):\n"
        + _indented(TRAIN_EPOCH, 1)
        + "    for epoch in range(2):\n        train_epoch(train_loader)\n        evaluate(test_loader)\n"
    )
    main = "def main():\n" + _indented(BUILD + MODEL, 1) + "    fit(model, optimizer, train_loader, test_loader)\n"
    return HEAD + fit + "\n\n" + main + "\n\nmain()\n", "fit(model, optimizer, train_loader, test_loader)"


@pytest.mark.parametrize("shape", [_two_levels_deep, _in_a_module_level_helper], ids=["deeper", "helper"])
def test_training_starts_where_the_block_calls_the_nested_function(shape) -> None:
    source, start = shape()
    plan, source, converted = _planned(source)
    # Not the loop inside ``train_epoch``'s ``def`` (above the model's construction), nor a call
    # written in another function's body.
    assert plan.training_start_line == _line(source, start), converted
    # So what is built before the call is prepared before it, and the nested evaluation over the
    # loader it is handed is gathered.
    lines = [line.strip() for line in converted.splitlines()]
    called = next(
        i for i, line in enumerate(lines) if line.startswith(start.rstrip(")"))
    )  # it may pass the accelerator
    assert called > next(i for i, line in enumerate(lines) if ".prepare(" in line), converted
    assert "accelerator.gather_for_metrics(" in converted or "accelerator.reduce(" in converted, converted
