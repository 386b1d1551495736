"""A name holding a tuple of loaders on some paths and one loader on the others
(recurrent-visual-attention's ``dloader``: ``get_train_valid_loader(...)`` when training,
``get_test_loader(...)`` otherwise) fits no one ``prepare``: ``prepare`` passes a tuple through
unchanged, so ``dloader = accelerator.prepare(dloader)`` after the ``if`` sharded nothing. The
loaders owner records the shape of each binding (``loader_tuple_bindings``) and the plan prepares
each binding where it is made, by its shape (``prepared_where_bound``); so is a loader bound only
under a flag before the training, which no ``prepare`` took at all. A loader taken from such a
tuple by index (``self.train_loader = data_loader[0]``) is the loader at that position, in one
module or in another (the seeds' parts of the parameter). And an evaluation batch whose first
forward runs in a loop inside the batch loop is reported (ACC943), not gathered by its last
forward alone."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.codemods.model.plan import plan_of
from tests.codemods.support import converted_stably

FACTORIES = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_train_valid_loader():
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    valid_loader = DataLoader(data, batch_size=8)
    return train_loader, valid_loader


def get_test_loader():
    test_loader = DataLoader(TensorDataset(torch.randn(16, 8), torch.randint(0, 4, (16,))), batch_size=8)
    return test_loader
"""

TRAINER = """\
class Trainer:
    def __init__(self, train, data_loader):
        if train:
            self.train_loader = data_loader[0]
            self.valid_loader = data_loader[1]
        else:
            self.test_loader = data_loader
        self.model = nn.Linear(8, 4)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train(self):
        for x, y in self.train_loader:
            self.optimizer.zero_grad()
            nn.functional.cross_entropy(self.model(x), y).backward()
            self.optimizer.step()
        correct = 0
        with torch.no_grad():
            for x, y in self.valid_loader:
                output = self.model(x)
                correct += (output.argmax(1) == y).sum().item()
        print(correct)
"""

MAIN = """\
def main(train):
    if train:
        dloader = get_train_valid_loader()
    else:
        dloader = get_test_loader()
    trainer = Trainer(train, dloader)
    trainer.train()
"""


def test_each_binding_of_a_tuple_or_one_loader_is_prepared_by_its_shape() -> None:
    code, reported = converted_stably(FACTORIES + "\n\n" + TRAINER + "\n\n" + MAIN)
    assert "        dloader = get_train_valid_loader()\n        dloader = accelerator.prepare(*dloader)\n" in code
    assert "        dloader = get_test_loader()\n        dloader = accelerator.prepare(dloader)\n" in code
    assert "\n    dloader = accelerator.prepare(dloader)\n" not in code
    # The trainer's loaders, taken by index, are the prepared loaders: its evaluation is gathered.
    assert "output, y = self.accelerator.gather_for_metrics((output, y))" in code
    assert "ACC901" not in reported


def test_the_shape_of_each_binding_is_recorded_and_the_plan_prepares_where_bound() -> None:
    source = FACTORIES + "\n\n" + TRAINER + "\n\n" + MAIN
    facts = analyse(cst.parse_module(source), source)
    line = next(number for number, text in enumerate(source.splitlines(), 1) if "dloader = get_train_valid" in text)
    assert dict(facts.loader_tuple_bindings["dloader"]) == {line: 2}
    assert facts.loader_tuple_length("dloader") == 2
    assert "dloader" not in facts.loader_tuples
    assert {"self.train_loader", "self.valid_loader"} <= facts.loaders
    plan = plan_of(facts)
    assert plan.prepared_where_bound["main"] == {"dloader"}
    assert "dloader" not in plan.prepare_after("main")


def test_a_loader_bound_only_under_a_flag_is_prepared_where_it_is_bound() -> None:
    script = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(train):
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if train:
        train_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,))), shuffle=True)
    if train:
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
"""
    code, _ = converted_stably(script)
    assert "        train_loader = accelerator.prepare(train_loader)\n" in code


def test_a_tuple_taken_apart_where_it_trains_is_prepared_by_its_parts_only() -> None:
    script = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_loaders():
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    return DataLoader(data, shuffle=True), DataLoader(data)


model = nn.Linear(8, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train = True
if train:
    loaders = get_loaders()
if train:
    train_loader, valid_loader = loaders
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
"""
    code, _ = converted_stably(script)
    assert "accelerator.prepare(*loaders)" not in code
    assert code.count("train_loader = accelerator.prepare(train_loader)") == 1


def test_a_trainer_of_another_module_takes_the_tuple_by_index() -> None:
    factories = FACTORIES
    trainer = "import torch\nimport torch.nn as nn\n\n\n" + TRAINER
    main = "from data import get_train_valid_loader, get_test_loader\nfrom trainer import Trainer\n\n\n" + MAIN
    modules = [
        ProgramModule(name, cst.parse_module(source), source)
        for name, source in (("main", main), ("trainer", trainer), ("data", factories))
    ]
    outcomes = convert_program(modules, "main", Options())
    converted = {name: outcome.module.code for name, outcome in outcomes.items()}
    assert "dloader = accelerator.prepare(*dloader)" in converted["main"]
    assert "self.accelerator.gather_for_metrics((output, y))" in converted["trainer"]
    assert "ACC901" not in {change.code for change in outcomes["trainer"].changes}


def test_an_evaluation_whose_first_forward_runs_in_an_inner_loop_is_reported_not_gathered() -> None:
    script = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(12, 4)

    def forward(self, x, h):
        h = torch.tanh(self.cell(torch.cat([x, h], 1)))
        return h, h.mean(1, keepdim=True)


model = Step()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
train_loader = DataLoader(data, shuffle=True)
test_loader = DataLoader(data)
for x, y in train_loader:
    optimizer.zero_grad()
    h, _ = model(x, x[:, :4] * 0)
    nn.functional.cross_entropy(h, y).backward()
    optimizer.step()
correct = 0
with torch.no_grad():
    for x, y in test_loader:
        h = x[:, :4] * 0
        baselines = []
        for _ in range(2):
            h, b = model(x, h)
            baselines.append(b)
        h, b = model(x, h)
        baselines.append(b)
        baselines = torch.stack(baselines)
        correct += (h.argmax(1) == y).sum().item()
print(correct)
"""
    code, reported = converted_stably(script)
    assert "gather_for_metrics" not in code
    assert "ACC943" in reported
