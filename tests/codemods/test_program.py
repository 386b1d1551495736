"""A program of several modules converted as one (codemods.engine.program), without processes."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import Program, ProgramModule, convert_program, local_imports

ENGINE = """\
import torch


def train_one_epoch(model, loader, optimizer, device):
    model.train()
    running = 0.0
    for x, y in loader:
        x = x.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss_value = loss.item()
        loss.backward()
        optimizer.step()
        running += loss_value * x.size(0)
    return running


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        out = model(x)
        total += (out - y).abs().sum().item()
    print(f"error {total:.3f}")
"""

DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loaders():
    train = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    test = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    return train, test
"""

TRAIN = """\
import torch

import engine
from data import get_loaders


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader, test_loader = get_loaders()
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        engine.train_one_epoch(model, train_loader, optimizer, device)
        engine.evaluate(model, test_loader)


if __name__ == "__main__":
    main()
"""


def modules(**sources: str) -> list[ProgramModule]:
    found = []
    for name, text in sources.items():
        dotted = name.replace("__", ".")
        package = dotted.endswith(".init")
        dotted = dotted.removesuffix(".init")
        text = textwrap.dedent(text)
        found.append(ProgramModule(dotted, cst.parse_module(text), text, package))
    return found


def converted(entry: str, **sources: str) -> dict[str, str]:
    outcomes = convert_program(modules(**sources), entry, Options())
    return {name: outcome.module.code for name, outcome in outcomes.items()}


def reports(entry: str, code: str, **sources: str) -> dict[str, list[int]]:
    outcomes = convert_program(modules(**sources), entry, Options())
    return {name: [c.line for c in outcome.changes if c.code == code] for name, outcome in outcomes.items()}


def test_roles_cross_modules_and_the_entry_creates_the_only_accelerator():
    code = converted("train", train=TRAIN, engine=ENGINE, data=DATA)
    engine, train = code["engine"], code["train"]
    assert "Accelerator" not in engine
    assert "def train_one_epoch(model, loader, optimizer, device, accelerator):" in engine
    assert "accelerator.backward(loss)" in engine
    assert "x = x.to(device)" not in engine  # the loader arrives prepared
    assert "out, y = accelerator.gather_for_metrics((out, y))" in engine
    assert 'accelerator.print(f"error {total:.3f}")' in engine
    # The loaders returned by data.get_loaders are prepared where they arrive.
    assert "model, optimizer, train_loader, test_loader = accelerator.prepare(" in train
    assert "engine.train_one_epoch(model, train_loader, optimizer, device, accelerator)" in train
    assert "engine.evaluate(model, test_loader, accelerator)" in train
    assert code["data"] == textwrap.dedent(DATA)  # nothing to do where the loaders are built


def test_a_library_function_called_where_no_accelerator_is_gets_none():
    entry = TRAIN.replace(
        "if __name__",
        "class Reporter:\n    def report(self, model, loader):\n        engine.evaluate(model, loader)\n\n\nif __name__",
    )
    code = converted("train", train=entry, engine=ENGINE, data=DATA)
    assert "def evaluate(model, loader):" in code["engine"]  # also called from a method: left
    assert "accelerator.gather_for_metrics" not in code["engine"]
    assert "engine.evaluate(model, loader)" in code["train"]


def test_relative_imports_in_a_package_resolve():
    utils = "def log(message):\n    print(message)\n"
    package_engine = "from .utils import log\n" + ENGINE.replace('print(f"error {total:.3f}")', 'log(f"error")')
    entry = TRAIN.replace("import engine\n", "from mylib import engine\n")
    code = converted("train", train=entry, mylib__init="", mylib__engine=package_engine, mylib__utils=utils, data=DATA)
    assert "def log(message, accelerator):" in code["mylib.utils"]
    assert 'log(f"error", accelerator)' in code["mylib.engine"]
    assert local_imports("from .utils import log\n", "mylib.engine", False) >= {"mylib.utils", "mylib.utils.log"}


def test_the_converted_program_converts_to_itself():
    first = converted("train", train=TRAIN, engine=ENGINE, data=DATA)
    outcomes = convert_program(modules(**first), "train", Options())
    assert all(not outcome.changes or not any(c.fixed for c in outcome.changes) for outcome in outcomes.values())


def test_rank_local_training_sums_are_reported_through_other_names_and_meters():
    meter = ENGINE.replace("running += loss_value * x.size(0)", "meter.update(loss_value, x.size(0))")
    assert reports("train", "ACC919", train=TRAIN, engine=ENGINE, data=DATA)["engine"] == [14]
    assert reports("train", "ACC919", train=TRAIN, engine=meter, data=DATA)["engine"] == [14]


def test_seeds_are_names_and_converge():
    program = Program(modules(train=TRAIN, engine=ENGINE, data=DATA), "train")
    seeds = program.plan()
    assert dict(seeds["engine"].parameter_roles)["models"] == {"model"}
    assert seeds["engine"].prepared >= {"model", "loader", "optimizer"}
    assert "data.get_loaders" in seeds["train"].loader_factories
    assert seeds["engine"].accelerator_reaches == {"train_one_epoch", "evaluate"}
    assert not seeds["train"].library and seeds["engine"].library
    assert program.order()[-1] == "train"


EVALUATOR = """\
import torch


class Evaluator:
    def __init__(self, model, loader, device):
        self.model = model
        self.loader = loader
        self.device = device

    def run(self):
        self.model.eval()
        total = 0
        with torch.no_grad():
            for x, y in self.loader:
                out = self.model(x.to(self.device))
                total += (out - y).abs().lt(1).sum().item()
        print("within 1:", total)
"""

MODULE_LEVEL_ENTRY = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

import engine
from evaluation import Evaluator

device = "cuda" if torch.cuda.is_available() else "cpu"
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
val = DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=8)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    engine.train_one_epoch(model, loader, optimizer, device)
Evaluator(model, val, device).run()
"""


def test_module_level_code_passes_the_accelerator_and_a_library_class_keeps_it() -> None:
    code = converted("train", train=MODULE_LEVEL_ENTRY, engine=ENGINE, evaluation=EVALUATOR)
    train, evaluation = code["train"], code["evaluation"]
    assert "    engine.train_one_epoch(model, loader, optimizer, device, accelerator)" in train
    assert "Evaluator(model, val, device, accelerator).run()" in train
    assert "    def __init__(self, model, loader, device, accelerator):" in evaluation
    assert "        self.accelerator = accelerator" in evaluation
    # The loader it evaluates is prepared (sharded) by the entry: its outputs are gathered.
    assert "out, y = self.accelerator.gather_for_metrics((out, y))" in evaluation
    assert '        self.accelerator.print("within 1:", total)' in evaluation
