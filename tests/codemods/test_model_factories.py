"""A function returning a new model of the program's classes (``build_model(16)`` returning
``Net(n)``, directly, through a local name, as a class method's ``cls(n)``, or from another module of
the program, a package's too) builds a model, as the construction it returns would: the model it
returns is prepared where it is built and an evaluation calling it is gathered. Before, the name
was no model: it trained unprepared (ACC926) and its counts covered one process (ACC945)."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from tests.codemods.test_program import converted

NET = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, hidden=4):
        super().__init__()
        self.fc = nn.Linear(2, hidden)

    def forward(self, x):
        return self.fc(x)
"""

ENTRY = """
import torch
from torch.utils.data import DataLoader, TensorDataset
IMPORT


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    net = BUILD
    train(net, train_loader)
    correct = 0
    with torch.no_grad():
        for x, y in test_loader:
            correct += (net(x).argmax(1) == y).sum().item()
    print(correct)


if __name__ == "__main__":
    main()
"""

PREPARED = "net, train_loader, test_loader = accelerator.prepare(net, train_loader, test_loader)"
GATHERED = "output, y = accelerator.gather_for_metrics((output, y))"


def script(factory: str, build: str) -> str:
    return (
        textwrap.dedent(NET)
        + textwrap.dedent(factory)
        + textwrap.dedent(ENTRY).replace("IMPORT\n", "").replace("BUILD", build)
    )


def test_a_function_returning_a_construction_is_a_model_factory() -> None:
    facts = analyse(cst.parse_module(script("\ndef build_model(n):\n    return Net(n)\n", "build_model(4)")))
    assert "build_model" in facts.model_factories
    assert "net" in facts.models


def test_a_function_returning_a_local_name_bound_to_a_construction_is_a_model_factory() -> None:
    factory = "\ndef build_model(n, device):\n    layers = Net(n)\n    layers = layers.to(device)\n    return layers\n"
    facts = analyse(cst.parse_module(script(factory, "build_model(4, 'cpu')")))
    assert "build_model" in facts.model_factories
    assert "net" in facts.models


def test_class_and_static_methods_returning_a_model_are_model_factories() -> None:
    methods = (
        "\n\nclass Zoo(Net):\n    @classmethod\n    def create(cls, n):\n        return cls(n)\n\n"
        "    @staticmethod\n    def small():\n        return Net(2)\n"
    )
    facts = analyse(cst.parse_module(script(methods, "Zoo.create(4)")))
    assert {"Zoo.create", "Zoo.small"} <= facts.model_factories
    assert "net" in facts.models


def test_a_function_returning_anything_else_is_no_model_factory() -> None:
    factories = "\ndef make(n):\n    if n:\n        return Net(n)\n    return None\n\ndef loss():\n    return torch.nn.CrossEntropyLoss()\n"
    facts = analyse(cst.parse_module(script(factories, "make(4)")))
    assert not facts.model_factories


def test_a_function_training_what_it_builds_is_no_model_factory() -> None:
    # It hands back a model it prepared itself, not a new one to prepare where it is called.
    trains = (
        "\ndef train_model(loader):\n    model = Net(2)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n        optimizer.zero_grad()\n"
        "        torch.nn.functional.cross_entropy(model(x), y).backward()\n        optimizer.step()\n    return model\n"
    )
    facts = analyse(cst.parse_module(script(trains, "Net(4)")))
    assert "train_model" not in facts.model_factories


def test_a_model_returned_by_another_modules_function_is_prepared_and_gathered() -> None:
    models = textwrap.dedent(NET) + "\n\ndef build_model(n):\n    return Net(n)\n"
    entry = (
        textwrap.dedent(ENTRY).replace("IMPORT", "\nfrom models import build_model").replace("BUILD", "build_model(4)")
    )
    code = converted("train", train=entry, models=models)["train"]
    assert PREPARED in code
    assert GATHERED in code


def test_a_model_returned_by_a_packages_function_through_a_factory_of_a_factory_is_prepared() -> None:
    models = textwrap.dedent(NET) + "\n\ndef build(n):\n    model = Net(n)\n    return model\n"
    entry = (
        textwrap.dedent(ENTRY)
        .replace("IMPORT", "\nfrom pkg.models import build\n\n\ndef make():\n    return build(4)\n")
        .replace("BUILD", "make()")
    )
    code = converted("train", train=entry, pkg__init="", pkg__models=models)["train"]
    assert PREPARED in code
    assert GATHERED in code


def test_a_class_method_of_another_modules_class_re_exported_by_a_package_is_a_factory() -> None:
    models = textwrap.dedent(NET) + "\n    @classmethod\n    def create(cls, n):\n        return cls(n)\n"
    entry = textwrap.dedent(ENTRY).replace("IMPORT", "\nfrom pkg import Net").replace("BUILD", "Net.create(4)")
    code = converted("train", train=entry, pkg__init="from .models import Net\n", pkg__models=models)["train"]
    assert PREPARED in code
    assert GATHERED in code
