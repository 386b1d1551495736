"""Roles decided by what the code does with an object, not by the name of its constructor: an
object built from a model's parameters and stepped is an optimizer, wherever the step is; a
class deriving from ``DataLoader`` (the file's own, or another module's of the program) builds a
loader. Each shape below was left unprepared before: the model trained on each process alone,
or each process read every batch."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import ScriptFacts
from tests.codemods.test_program import converted


def facts_of(source: str) -> ScriptFacts:
    return analyse(cst.parse_module(textwrap.dedent(source)))


OPAQUE_OPTIMIZER = """
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(net, opt, loader):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()


def main(config):
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    model = config.init_obj("arch", torch.nn)
    trainable = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = config.init_obj("optimizer", torch.optim, trainable)
    counter = config.count(model.parameters())
    train(model, optimizer, loader)
"""


def test_an_object_built_from_parameters_and_stepped_where_it_is_handed_is_an_optimizer() -> None:
    facts = facts_of(OPAQUE_OPTIMIZER)
    assert "optimizer" in facts.optimizers
    assert "model" in facts.models
    # Given the parameters too, but never stepped: not an optimizer.
    assert "counter" not in facts.optimizers
    assert {"opt", "optimizer"} <= facts.stepped_objects


LOADER_FAMILY = """
import torch
from torch.utils.data import DataLoader, TensorDataset


class BaseLoader(DataLoader):
    pass


class TrainLoader(BaseLoader):
    pass


class Batches:
    def __iter__(self):
        return iter([])


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = TrainLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    other = Batches()
    for x, y in train_loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


def test_the_files_own_loader_classes_build_loaders() -> None:
    facts = facts_of(LOADER_FAMILY)
    assert facts.loader_classes == {"BaseLoader", "TrainLoader"}
    assert "train_loader" in facts.train_loaders
    assert "other" not in facts.loaders
    # A local binding of the same name in a function is not the class.
    shadowed = LOADER_FAMILY.replace("    other = Batches()", "    TrainLoader = Batches\n    other = TrainLoader()")
    assert "other" not in facts_of(shadowed).loaders


TEMPLATE_ENTRY = """
import torch

import loaders
from parse_config import ConfigParser
from trainer import Trainer


def main(config):
    data_loader = loaders.SyntheticLoader(64)
    model = config.init_obj("arch", torch.nn)
    optimizer = config.init_obj("optimizer", torch.optim, model.parameters())
    trainer = Trainer(model, optimizer, data_loader)
    trainer.train()


if __name__ == "__main__":
    main(ConfigParser())
"""

TEMPLATE_BASE = """
class BaseTrainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def train(self):
        for epoch in range(2):
            self._train_epoch(epoch)
"""

TEMPLATE_TRAINER = """
import torch

from base import BaseTrainer


class Trainer(BaseTrainer):
    def __init__(self, model, optimizer, data_loader):
        super().__init__(model, optimizer)
        self.data_loader = data_loader

    def _train_epoch(self, epoch):
        for x, y in self.data_loader:
            self.optimizer.zero_grad()
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
"""

TEMPLATE_LOADERS = """
import torch
from torch.utils.data import DataLoader, TensorDataset


class BaseDataLoader(DataLoader):
    pass


class SyntheticLoader(BaseDataLoader):
    def __init__(self, n):
        super().__init__(TensorDataset(torch.randn(n, 2), torch.randn(n, 1)), batch_size=8)
"""

TEMPLATE_CONFIG = """
class ConfigParser:
    def init_obj(self, name, module, *args):
        return getattr(module, name)(*args)
"""


def test_a_trainer_of_another_module_stepping_through_its_base_makes_the_entrys_object_an_optimizer() -> None:
    code = converted(
        "train",
        train=TEMPLATE_ENTRY,
        base=TEMPLATE_BASE,
        trainer=TEMPLATE_TRAINER,
        loaders=TEMPLATE_LOADERS,
        parse_config=TEMPLATE_CONFIG,
    )
    assert "model, optimizer, data_loader = accelerator.prepare(model, optimizer, data_loader)" in code["train"]
    assert "self.accelerator.backward(" in code["trainer"]
    assert code["loaders"] == textwrap.dedent(TEMPLATE_LOADERS)


PICKED_CLASS = """
import torch
import torch.optim as optim

model = torch.nn.Linear(4, 2)
optim_name = optim.SGD
if fused:
    optim_name = FusedSGD
classifier_params = model.parameters()
optimizer_ft = optim_name([{"params": classifier_params, "lr": 0.1}], momentum=0.9)
"""


def test_an_optimizer_class_picked_into_a_name_builds_an_optimizer() -> None:
    """A re-identification baseline's ``optim_name = optim.SGD`` (a fused class, never imported,
    under a flag), then ``optim_name([...])`` over parameter groups held in names, never stepped
    in the file: still an optimizer, and the model it trains a model (before, neither, and
    nothing was prepared)."""
    facts = facts_of(PICKED_CLASS)
    assert "optimizer_ft" in facts.optimizers
    assert "model" in facts.models
    # Another optimizer class in the other branch: the name is no longer one class.
    other = PICKED_CLASS.replace("optim_name = FusedSGD", "optim_name = optim.Adam")
    assert "optimizer_ft" not in facts_of(other).optimizers


GROUPS_HELD = """
import torch

model = torch.nn.Linear(4, 2)
decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(groups, lr=0.01)
"""


def test_parameter_groups_held_in_a_name_train_the_model_their_lists_come_from() -> None:
    """``groups`` built from names already holding a model's parameters: the optimizer built from
    ``groups`` trains that model (before, only the optimizer was prepared, and the model trained on
    each process alone, reported by nothing)."""
    facts = facts_of(GROUPS_HELD)
    assert "optimizer" in facts.optimizers
    assert "model" in facts.models
    # Two lists of one model's parameters summed into one: the same model.
    summed = GROUPS_HELD.replace(
        'groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]',
        "groups = decay + no_decay",
    )
    assert "model" in facts_of(summed).models


PARAMETERS_COLLECTED_FROM_A_SELECTION = """
import torch
import torch.optim as optim


class Batches:
    def get_batch(self):
        return torch.randn(4, 2), torch.randn(4, 1)


def train(selection):
    batches = Batches()
    model = torch.nn.Linear(2, 1)
    filtered_parameters = []
    for p in SELECTION:
        filtered_parameters.append(p)
    optimizer = optim.Adadelta(filtered_parameters, lr=1.0)
    for iteration in range(3):
        x, y = batches.get_batch()
        cost = torch.nn.functional.mse_loss(model(x), y)
        model.zero_grad()
        cost.backward()
        optimizer.step()
"""


def test_a_list_collected_from_a_selection_of_parameters_makes_its_model_trained() -> None:
    """deep-text-recognition-benchmark's ``for p in filter(lambda p: p.requires_grad,
    model.parameters()): filtered_parameters.append(p)``: the optimizer given the list trains the
    model, which is prepared (issue 43; it was left out of ``prepare``, its gradients never
    averaged across processes)."""
    for selection in (
        "filter(lambda p: p.requires_grad, model.parameters())",
        "list(model.parameters())",
        "model.parameters()",
    ):
        facts = facts_of(PARAMETERS_COLLECTED_FROM_A_SELECTION.replace("SELECTION", selection))
        assert "optimizer" in facts.optimizers
        assert "model" in facts.models, selection


def test_a_list_collected_from_something_else_names_no_model() -> None:
    facts = facts_of(PARAMETERS_COLLECTED_FROM_A_SELECTION.replace("SELECTION", "filter(None, [model.weight])"))
    assert "model" not in facts.models
