"""What the conversion plan prepares where, for two shapes it used to prepare too little in: an
optimizer built in a function nested in another (``main()``'s ``train(epoch)``, building it each
epoch over the ``net`` it closes over) and a model a training class's method builds itself
(``fit()`` binding ``model`` or ``self.model``, or unpacking them from a builder method). Each is
prepared where it is built, in the block building it: the plan names that block, and the converted
code prepares there, with no ACC926 / ACC920 left."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods import Options, convert_module
from tests.codemods.test_model_plan import _planned

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


"""

STEP = """
optimizer.zero_grad()
loss = F.cross_entropy(net(xb), yb)
loss.backward()
optimizer.step()
"""


def _indented(text: str, depth: int) -> str:
    return textwrap.indent(textwrap.dedent(text).strip("\n"), "    " * depth) + "\n"


def _lines(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines()]


def _follows(code: str, first: str, then: str) -> bool:
    """Whether the line ``then`` comes right after the line ``first`` in ``code``."""
    lines = _lines(code)
    return first in lines and lines[lines.index(first) + 1] == then


def _reported(source: str) -> set[str]:
    source = textwrap.dedent(source)
    return {change.code for change in convert_module(cst.parse_module(source), Options(), source).changes}


# -- an optimizer built in a nested function -----------------------------------------------------

#: ``main()`` building the model and the loader its nested functions close over.
MAIN_BUILDS = """def main():
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    net = nn.Linear(8, 2)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
"""

NESTED_TRAIN = (
    HEAD
    + MAIN_BUILDS
    + """
    def train(epoch):
        optimizer = optim.SGD(net.parameters(), lr=0.1 * 0.5**epoch)
        for xb, yb in train_loader:
"""
    + _indented(STEP, 3)
    + """
    for epoch in range(3):
        train(epoch)


main()
"""
)


def test_an_optimizer_built_in_a_nested_function_is_prepared_there() -> None:
    plan, _, converted = _planned(NESTED_TRAIN)
    assert plan.home_function == "main"
    assert plan.preparations["main"] == ("net", "train_loader")
    assert plan.preparations["main.train"] == ("optimizer",)
    assert plan.prepared_in("optimizer") == "main.train"
    assert _follows(
        converted,
        "optimizer = optim.SGD(net.parameters(), lr=0.1 * 0.5**epoch)",
        "optimizer = accelerator.prepare(optimizer)",
    )
    assert "net, train_loader = accelerator.prepare(net, train_loader)" in _lines(converted)


def test_a_nested_function_of_a_module_function_prepares_its_optimizer() -> None:
    # The model and loader at the top level; ``run()`` holds ``train(epoch)``.
    source = (
        HEAD
        + """x = torch.randn(64, 8)
y = (x[:, 0] > 0).long()
net = nn.Linear(8, 2)
train_loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)


def run(epochs):
    def train(epoch):
        optimizer = optim.SGD(net.parameters(), lr=0.1 * 0.5**epoch)
        for xb, yb in train_loader:
"""
        + _indented(STEP, 3)
        + """
    for epoch in range(epochs):
        train(epoch)


run(3)
"""
    )
    plan, _, converted = _planned(source)
    assert plan.home_kind == "module"
    assert plan.preparations["<module>"] == ("net", "train_loader")
    assert plan.prepared_in("optimizer") == "run.train"
    assert _follows(
        converted,
        "optimizer = optim.SGD(net.parameters(), lr=0.1 * 0.5**epoch)",
        "optimizer = accelerator.prepare(optimizer)",
    )


def test_a_nested_function_building_its_model_and_optimizer_prepares_both() -> None:
    source = (
        HEAD
        + """def main():
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    train_loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

    def run(lr):
        net = nn.Linear(8, 2)
        optimizer = optim.SGD(net.parameters(), lr=lr)
        for xb, yb in train_loader:
"""
        + _indented(STEP, 3)
        + """
    run(0.1)


main()
"""
    )
    plan, source, converted = _planned(source)
    assert plan.preparations == {"main.run": ("net", "optimizer"), "main": ("train_loader",)}
    assert plan.models_left_unprepared == ()
    assert _follows(
        converted,
        "optimizer = optim.SGD(net.parameters(), lr=lr)",
        "net, optimizer = accelerator.prepare(net, optimizer)",
    )
    assert "ACC926" not in _reported(source)


def test_a_nested_closure_returning_an_optimizer_builds_one() -> None:
    # ``build()`` returns the optimizer over the ``net`` it closes over: ``main`` prepares it.
    source = (
        HEAD
        + MAIN_BUILDS
        + """
    def build():
        return optim.SGD(net.parameters(), lr=0.1)

    optimizer = build()
    for xb, yb in train_loader:
"""
        + _indented(STEP, 2)
        + """

main()
"""
    )
    plan, _, converted = _planned(source)
    assert plan.to_prepare == ("net", "optimizer", "train_loader")
    assert plan.preparations == {"main": ("net", "optimizer", "train_loader")}
    assert _follows(
        converted,
        "optimizer = build()",
        "net, optimizer, train_loader = accelerator.prepare(net, optimizer, train_loader)",
    )


def test_a_function_nested_in_a_method_prepares_its_optimizer() -> None:
    source = (
        HEAD
        + """class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader

    def fit(self, epochs):
        def train(epoch):
            optimizer = optim.SGD(self.model.parameters(), lr=0.1 * 0.5**epoch)
            for xb, yb in self.loader:
                optimizer.zero_grad()
                F.cross_entropy(self.model(xb), yb).backward()
                optimizer.step()

        for epoch in range(epochs):
            train(epoch)


def main():
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    model = nn.Linear(8, 2)
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    Trainer(model, loader).fit(3)


main()
"""
    )
    plan, _, converted = _planned(source)
    assert plan.method_preparations["Trainer"]["fit.train"] == ("optimizer",)
    assert _follows(
        converted,
        "optimizer = optim.SGD(self.model.parameters(), lr=0.1 * 0.5**epoch)",
        "optimizer = self.accelerator.prepare(optimizer)",
    )


# -- a model a training class's method builds ---------------------------------------------------

TRAINER = (
    HEAD
    + """class Trainer:
    def __init__(self, loader):
        self.loader = loader

    def fit(self, epochs):
        model = nn.Linear(8, 2)
        optimizer = optim.SGD(model.parameters(), lr=0.1)
        for _ in range(epochs):
            for xb, yb in self.loader:
                optimizer.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                optimizer.step()


def main():
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    Trainer(loader).fit(3)


main()
"""
)


def test_a_model_a_method_builds_is_prepared_there() -> None:
    plan, source, converted = _planned(TRAINER)
    assert "Trainer" in plan.class_preparations or "Trainer" in plan.method_preparations
    assert plan.method_preparations["Trainer"]["fit"] == ("model", "optimizer")
    assert plan.models_left_unprepared == ()
    assert _follows(converted, "model = nn.Linear(8, 2)", "model = self.accelerator.prepare(model)")
    assert _follows(
        converted,
        "optimizer = optim.SGD(model.parameters(), lr=0.1)",
        "optimizer = self.accelerator.prepare(optimizer)",
    )
    assert "model.to(self.accelerator.device)" not in _lines(converted)  # prepared, not moved
    assert "Trainer(loader, accelerator).fit(3)" in _lines(converted)
    assert "ACC926" not in _reported(source)


def test_a_model_a_method_keeps_as_an_attribute_is_prepared_there() -> None:
    source = (
        TRAINER.replace("model = nn.Linear(8, 2)", "self.model = nn.Linear(8, 2)")
        .replace("SGD(model.parameters()", "SGD(self.model.parameters()")
        .replace("F.cross_entropy(model(xb), yb)", "F.cross_entropy(self.model(xb), yb)")
    )
    plan, source, converted = _planned(source)
    assert plan.method_preparations["Trainer"]["fit"] == ("self.model", "optimizer")
    assert "self.model" not in plan.class_preparations.get("Trainer", ())
    assert _follows(converted, "self.model = nn.Linear(8, 2)", "self.model = self.accelerator.prepare(self.model)")
    assert not {"ACC920", "ACC926"} & _reported(source)


def test_a_model_and_optimizer_a_builder_method_returns_are_prepared_where_unpacked() -> None:
    source = TRAINER.replace(
        """    def fit(self, epochs):
        model = nn.Linear(8, 2)
        optimizer = optim.SGD(model.parameters(), lr=0.1)
""",
        """    def build(self):
        model = nn.Linear(8, 2)
        return model, optim.SGD(model.parameters(), lr=0.1)

    def fit(self, epochs):
        model, optimizer = self.build()
""",
    )
    plan, source, converted = _planned(source)
    assert dict(plan.method_preparations["Trainer"]) == {"fit": ("model", "optimizer")}
    assert _follows(
        converted, "model, optimizer = self.build()", "model, optimizer = self.accelerator.prepare(model, optimizer)"
    )
    assert _follows(converted, "model = nn.Linear(8, 2)", "return model, optim.SGD(model.parameters(), lr=0.1)")
    assert "ACC926" not in _reported(source)


def test_a_model_a_method_only_evaluates_is_moved_not_prepared() -> None:
    # ``test()`` builds a ``model`` of the trained one's name and loads weights into it: the
    # module itself (a prepared one would take the weights under DDP's ``module.`` names).
    source = TRAINER.replace(
        "\n\ndef main():",
        """
    def test(self):
        model = nn.Linear(8, 2)
        model.load_state_dict(torch.load("m.pt"))
        with torch.no_grad():
            for xb, yb in self.loader:
                print(model(xb).sum().item())


def main():""",
    )
    plan, _, converted = _planned(source)
    assert "test" not in plan.method_preparations["Trainer"]
    assert plan.method_preparations["Trainer"]["fit"] == ("model", "optimizer")
    assert _follows(converted, "model = nn.Linear(8, 2)", "model = self.accelerator.prepare(model)")
    assert "model.to(self.accelerator.device)" in _lines(converted)
