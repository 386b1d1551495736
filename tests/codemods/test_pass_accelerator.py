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


BROKEN_CALL = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def main():
    device = "cpu"
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, loader, optimizer, device)


main()
"""


def test_a_call_with_one_argument_too_many_gets_the_accelerator_where_the_parameter_sits() -> None:
    """``train(model, loader, optimizer, device)`` for ``def train(model, loader, optimizer)``
    fails as written. By keyword (``..., device, accelerator=accelerator``) the new parameter was
    filled twice and a second conversion read ``device`` as the accelerator (a fuzzed fixture
    converted differently the second time); positionally the extra argument stays extra."""
    from accel_convert.codemods.engine.model import Options
    from accel_convert.converter.pipeline import convert_source

    output = convert_source(BROKEN_CALL.encode(), Options(), path="train.py").output
    assert b"def train(model, loader, optimizer, accelerator):" in output
    assert b"train(model, loader, optimizer, accelerator, device)" in output
    assert convert_source(output, Options(), path="train.py").output == output


WORKER_SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def collate(batch):
    xs, ys = zip(*batch)
    print("batch of", len(xs))
    return torch.stack(xs), torch.stack(ys)


def seed_worker(worker_id):
    print("worker", worker_id)

{body}
"""

WORKER_BODY = """
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = DataLoader(data, batch_size=16, collate_fn=collate, worker_init_fn=seed_worker, num_workers=2)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""


def _in_main(body: str) -> str:
    return (
        "def main():\n"
        + "".join(f"    {line}\n" if line else "\n" for line in body.strip().splitlines())
        + "\n\nmain()\n"
    )


def _in_a_class(body: str) -> str:
    lines = "".join(f"        {line}\n" if line else "\n" for line in body.strip().splitlines())
    return "class Runner:\n    def run(self):\n" + lines + "\n\nRunner().run()\n"


@pytest.mark.parametrize("shape", [str, _in_main, _in_a_class], ids=["module", "function", "class"])
def test_functions_handed_to_worker_processes_are_not_handed_the_accelerator(shape) -> None:
    # A collate_fn or worker_init_fn runs in a DataLoader worker process: a partial holding
    # the accelerator would be pickled into a spawned worker (a TypeError there), and no
    # accelerator exists in it. They stay as written, their prints reported (ACC954).
    from accel_convert.codemods.engine.model import Options
    from accel_convert.converter.pipeline import convert_source

    result = convert_source(WORKER_SCRIPT.format(body=shape(WORKER_BODY)).encode(), Options(), path="w.py")
    output = result.output.decode()
    assert "accelerator.prepare(" in output, output
    for signature in ("def collate(batch):", "def seed_worker(worker_id):"):
        assert signature in output, output
    assert "functools.partial" not in output, output
