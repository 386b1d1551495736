"""helpers (ACC104): functions that now use the accelerator receive it as a parameter."""

from __future__ import annotations

import pytest

from tests.codemods.support import check_expectations

HELPERS = {
    "positional parameter and arguments": (
        "def train(model, loader, optimizer):\n    for (x,) in loader:\n        model(x).sum().backward()\n",
        "train(model, loader, optimizer)",
        ["def train(model, loader, optimizer, accelerator):", "train(model, loader, optimizer, accelerator)"],
    ),
    "after defaulted parameters: keyword-only": (
        "def train(model, loader, optimizer, log_every=10):\n    for (x,) in loader:\n        model(x).sum().backward()\n",
        "train(model, loader, optimizer)",
        [
            "def train(model, loader, optimizer, log_every=10, *, accelerator):",
            "train(model, loader, optimizer, accelerator=accelerator)",
        ],
    ),
    "keyword call": (
        "def train(model, loader, optimizer):\n    for (x,) in loader:\n        model(x).sum().backward()\n",
        "train(model=model, loader=loader, optimizer=optimizer)",
        ["train(model=model, loader=loader, optimizer=optimizer, accelerator=accelerator)"],
    ),
    "through an intermediate function": (
        "def step(model, x):\n    model(x).sum().backward()\n\n"
        "def train(model, loader, optimizer):\n    for (x,) in loader:\n        step(model, x)\n",
        "train(model, loader, optimizer)",
        [
            "def step(model, x, accelerator):",
            "step(model, x, accelerator)",
            "def train(model, loader, optimizer, accelerator):",
        ],
    ),
}


@pytest.mark.parametrize(("helper", "call", "expectations"), HELPERS.values(), ids=HELPERS.keys())
def test_helper_functions_receive_the_accelerator(helper: str, call: str, expectations: list[str]) -> None:
    body = helper + (
        "\ndef main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    model = nn.Linear(4, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        f"    {call}\n"
    )
    check_expectations(body, expectations)
