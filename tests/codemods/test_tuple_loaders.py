"""Loaders handed to a class as one tuple or list and unpacked into attributes
(``self.train_loader, self.test_loader = loaders``): each attribute is the loader at its position,
so the evaluation over ``self.test_loader`` is an evaluation over the (prepared) test loader, and
its counts are gathered. Before, the attributes were no loaders at all: the loop was left as
written and counted one rank's share (128 of 200 on two processes)."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import ScriptFacts

TRAINER = """
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loaders):
        self.model = model
        self.train_loader, self.test_loader = loaders
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self):
        for x, y in self.train_loader:
            self.optimizer.zero_grad()
            torch.nn.functional.cross_entropy(self.model(x), y).backward()
            self.optimizer.step()

    def evaluate(self):
        correct = 0
        with torch.no_grad():
            for x, y in self.test_loader:
                correct += (self.model(x).argmax(1) == y).sum().item()
        return correct


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    model = torch.nn.Linear(2, 2)
    HANDED
    trainer.fit()
    print(trainer.evaluate())
"""


def facts_of(handed: str) -> ScriptFacts:
    return analyse(cst.parse_module(textwrap.dedent(TRAINER).replace("HANDED", handed)))


def test_a_tuple_written_in_the_construction_fills_each_attribute_by_position() -> None:
    facts = facts_of("trainer = Trainer(model, (train_loader, test_loader))")
    assert "self.train_loader" in facts.train_loaders
    assert "self.test_loader" in facts.eval_loaders
    assert any(loop.loader == "self.test_loader" for loop in facts.eval_loops)


def test_a_name_bound_to_the_tuple_fills_each_attribute_by_position() -> None:
    facts = facts_of("loaders = [train_loader, test_loader]\n    trainer = Trainer(model, loaders)")
    assert "self.train_loader" in facts.train_loaders
    assert "self.test_loader" in facts.eval_loaders


def test_a_tuple_of_other_values_makes_no_loader() -> None:
    facts = facts_of("trainer = Trainer(model, (1, 2))")
    assert "self.test_loader" not in facts.loaders
    assert not facts.eval_loops
