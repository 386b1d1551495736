"""training-class (ACC108): training code held in a class receives the accelerator.

Each case is a whole script (the class, the code constructing it) converted by the real pipeline;
the assertions name the lines a person converting it by hand would write, and check that no method
is left reading an ``accelerator`` variable it cannot see.
"""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Change, Options
from tests.codemods.support import convert as convert_lines
from tests.codemods.support import convert_text

IMPORTS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

"""

#: A Trainer that receives what its caller built, the shape of the usual DDP tutorials.
TRAINER = """\
class Trainer:
    def __init__(
        self,
        model,
        train_data,
        optimizer,
        save_every,
    ):
        self.model = model.to("cuda")
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def train(self, epochs):
        for epoch in range(epochs):
            for source, targets in self.train_data:
                self._run_batch(source.to("cuda"), targets.to("cuda"))
            print(f"epoch {epoch}")
            torch.save(self.model.state_dict(), "last.pt")

    @staticmethod
    def describe():
        print("a trainer")


def main():
    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(model, data, optimizer, 1)
    trainer.train(2)


if __name__ == "__main__":
    main()
"""

#: A Solver that builds its networks and loaders itself, in methods __init__ calls.
SOLVER = """\
class Solver:
    def __init__(self, config, log_step=10):
        self.lr = config.lr
        self.log_step = log_step
        self.build_data()
        self.build_model()
        self.ready = True

    def build_data(self):
        self.loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)

    def build_model(self):
        self.net = nn.Linear(4, 1)
        self.opt = torch.optim.Adam(self.net.parameters(), self.lr)

    def train(self):
        for x, y in self.loader:
            self.opt.zero_grad()
            F.mse_loss(self.net(x), y).backward()
            self.opt.step()
        print("done")


def main(config):
    solver = Solver(config)
    solver.train()
"""


def convert(body: str) -> tuple[str, list[Change]]:
    source = IMPORTS + body
    outcome = convert_module(cst.parse_module(source), Options())
    return outcome.module.code, outcome.changes


def method_source(code: str, class_name: str, method: str) -> str:
    tree = ast.parse(code)
    owner = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    found = next(node for node in owner.body if isinstance(node, ast.FunctionDef) and node.name == method)
    return textwrap.dedent(ast.get_source_segment(code, found) or "")


def free_accelerator_reads(code: str, class_name: str) -> list[str]:
    """Methods of the class that read a bare ``accelerator`` they neither take nor assign."""
    tree = ast.parse(code)
    owner = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    found = []
    for method in owner.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        bound = {arg.arg for arg in method.args.args + method.args.kwonlyargs}
        reads = {n.id for n in ast.walk(method) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if "accelerator" in reads and "accelerator" not in bound:
            found.append(method.name)
    return found


def test_a_trainer_given_its_objects_receives_the_accelerator_and_its_methods_use_it() -> None:
    code, changes = convert(TRAINER)
    init = method_source(code, "Trainer", "__init__")
    # The new parameter keeps the signature's one-per-line layout and trailing comma.
    assert "        save_every,\n        accelerator,\n    ):" in init
    assert init.index("self.accelerator = accelerator") < init.index("self.model = model")
    assert "self.model = model\n" in init  # the move is prepare's job now
    run_batch = method_source(code, "Trainer", "_run_batch")
    assert "self.accelerator.backward(loss)" in run_batch
    train = method_source(code, "Trainer", "train")
    assert "self._run_batch(source, targets)" in train
    assert 'self.accelerator.print(f"epoch {epoch}")' in train
    assert 'self.accelerator.save(self.accelerator.unwrap_model(self.model).state_dict(), "last.pt")' in train
    # The caller prepares what it built, before handing it over, and passes the accelerator.
    lines = code.splitlines()
    prepare = lines.index("    model, optimizer, data = accelerator.prepare(model, optimizer, data)")
    construction = lines.index("    trainer = Trainer(model, data, optimizer, 1, accelerator)")
    assert lines.index("    accelerator = Accelerator()") < prepare < construction
    assert free_accelerator_reads(code, "Trainer") == []
    assert {change.code for change in changes} >= {"ACC101", "ACC103", "ACC105", "ACC107", "ACC108", "ACC114"}


def test_a_static_method_has_no_instance_to_reach_the_accelerator_through() -> None:
    code, _ = convert(TRAINER)
    assert 'print("a trainer")' in method_source(code, "Trainer", "describe")


def test_a_class_building_its_own_objects_prepares_them_after_the_last_one_is_built() -> None:
    code, changes = convert(SOLVER)
    init = method_source(code, "Solver", "__init__")
    # A parameter with a default before it: the accelerator comes keyword-only.
    assert "def __init__(self, config, log_step=10, *, accelerator):" in init
    prepare = "self.net, self.opt, self.loader = self.accelerator.prepare(self.net, self.opt, self.loader)"
    assert prepare in init
    body = [line.strip() for line in init.splitlines()]
    assert body.index(prepare) == body.index("self.build_model()") + 1
    assert body.index("self.accelerator = accelerator") == 1
    assert "self.accelerator.backward(F.mse_loss(self.net(x), y))" in method_source(code, "Solver", "train")
    assert "    solver = Solver(config, accelerator=accelerator)" in code.splitlines()
    assert free_accelerator_reads(code, "Solver") == []
    assert "ACC920" not in {change.code for change in changes}


def test_a_model_built_outside_init_is_prepared_where_built_as_its_optimizer() -> None:
    late = SOLVER.replace("        self.build_model()\n", "").replace(
        "    def train(self):\n", "    def train(self):\n        self.build_model()\n"
    )
    code, changes = convert(late)
    # ``train()`` builds them through ``build_model()``, outside ``__init__``: prepared there, in
    # order, the optimizer over the prepared model's parameters (before, the model was reported).
    assert "ACC920" not in {change.code for change in changes}
    build = [line.strip() for line in method_source(code, "Solver", "build_model").splitlines()]
    assert build[1:] == [
        "self.net = nn.Linear(4, 1)",
        "self.net = self.accelerator.prepare(self.net)",
        "self.opt = torch.optim.Adam(self.net.parameters(), self.lr)",
        "self.opt = self.accelerator.prepare(self.opt)",
    ]
    assert "self.loader = self.accelerator.prepare(self.loader)" in method_source(code, "Solver", "__init__")


def test_loaders_and_optimizers_a_method_builds_are_prepared_where_they_are_built() -> None:
    # minGPT's Trainer: the optimizer comes from the model's ``configure_optimizers`` and the
    # loader is a local of ``run``; ``self.optimizer = None`` in ``__init__`` only makes room.
    code, changes = convert(
        """\
class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(x)

    def configure_optimizers(self, config):
        optimizer = torch.optim.AdamW(self.parameters(), lr=config.lr)
        return optimizer


class Trainer:
    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.optimizer = None
        self.train_dataset = train_dataset

    def run(self):
        model, config = self.model, self.config
        self.optimizer = model.configure_optimizers(config)
        train_loader = DataLoader(self.train_dataset, batch_size=config.batch_size, shuffle=True)
        for x, y in train_loader:
            loss = F.mse_loss(model(x), y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def main(config):
    model = GPT()
    trainer = Trainer(config, model, TensorDataset(torch.randn(16, 4), torch.randn(16, 4)))
    trainer.run()
"""
    )
    run = method_source(code, "Trainer", "run")
    assert "self.optimizer = self.accelerator.unwrap_model(model).configure_optimizers(config)" in run
    assert "self.optimizer = self.accelerator.prepare(self.optimizer)" in run
    assert "train_loader = self.accelerator.prepare(train_loader)" in run
    assert "    model = accelerator.prepare(model)" in code.splitlines()
    assert "self.accelerator.prepare" not in method_source(code, "Trainer", "__init__")
    assert "ACC920" not in {change.code for change in changes}
    assert free_accelerator_reads(code, "Trainer") == []


def test_a_class_constructed_in_a_helper_gets_the_accelerator_through_the_helper() -> None:
    helper = TRAINER.replace(
        "    trainer = Trainer(model, data, optimizer, 1)\n    trainer.train(2)\n",
        "    fit(model, data, optimizer)\n\n\ndef fit(model, data, optimizer):\n"
        "    trainer = Trainer(model, data, optimizer, 1)\n    trainer.train(2)\n",
    )
    code, _ = convert(helper)
    assert "def fit(model, data, optimizer, accelerator):" in code
    assert "    fit(model, data, optimizer, accelerator)" in code
    assert "    trainer = Trainer(model, data, optimizer, 1, accelerator)" in code


def test_converting_a_converted_training_class_again_changes_nothing() -> None:
    for body in (TRAINER, SOLVER):
        once, _ = convert(body)
        twice = convert_module(cst.parse_module(once), Options()).module.code
        assert twice == once


def test_a_class_that_cannot_receive_the_accelerator_is_reported_and_left() -> None:
    body = TRAINER.replace("    trainer = Trainer(model, data, optimizer, 1)\n", "    trainer = make_trainer()\n")
    code, changes = convert(body)
    assert "        loss.backward()" in code
    assert "ACC904" in {change.code for change in changes}
    assert "self.accelerator" not in code


def test_a_class_without_init_or_base_is_given_an_init_that_keeps_the_accelerator() -> None:
    # Constructing it ran ``object.__init__``: an ``__init__`` of its own takes the accelerator.
    body = TRAINER.replace("    def __init__(", "    def setup(").replace(
        "trainer = Trainer(model, data, optimizer, 1)",
        "trainer = Trainer()\n    trainer.setup(model, data, optimizer, 1)",
    )
    code, changes = convert(body)
    assert "    def __init__(self, accelerator):\n        self.accelerator = accelerator\n\n    def setup(" in code
    assert "        self.accelerator.backward(loss)" in code
    assert "    trainer = Trainer(accelerator)" in code
    assert "ACC904" not in {change.code for change in changes}
    # With a base (whose ``__init__`` runs) it is not given one: reported and left.
    based = body.replace("class Trainer:", "class Trainer(Base):")
    code, changes = convert(based)
    assert "def __init__(self, accelerator)" not in code


def test_a_helper_a_method_calls_receives_the_instances_accelerator() -> None:
    body = TRAINER.replace(
        '            print(f"epoch {epoch}")\n',
        '            print(f"epoch {epoch}")\n            evaluate(self.model, self.train_data)\n',
    ).replace(
        "def main():\n",
        "def evaluate(model, loader):\n"
        "    correct = 0\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        for x, y in loader:\n"
        "            correct += (model(x) - y).abs().lt(0.5).sum().item()\n"
        "    print(correct)\n\n\n"
        "def main():\n",
    )
    code, _ = convert(body)
    assert "def evaluate(model, loader, accelerator):" in code
    assert "evaluate(self.model, self.train_data, self.accelerator)" in method_source(code, "Trainer", "train")
    assert "accelerator.gather_for_metrics" in code[code.index("def evaluate") :]


def test_a_class_constructed_by_module_level_code_gets_the_module_accelerator() -> None:
    body = TRAINER.split("def main():")[0] + (
        "data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n"
        "model = nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "trainer = Trainer(model, data, optimizer, 1)\n"
        "trainer.train(2)\n"
    )
    code, _ = convert(body)
    lines = code.splitlines()
    created = lines.index("accelerator = Accelerator()")
    prepared = lines.index("model, optimizer, data = accelerator.prepare(model, optimizer, data)")
    assert created < prepared < lines.index("trainer = Trainer(model, data, optimizer, 1, accelerator)")
    assert free_accelerator_reads(code, "Trainer") == []


def test_attributes_assigned_together_from_a_tuple_keep_their_roles() -> None:
    # ``self.model, self.val_loader = model, val_loader``: the evaluation over the prepared loader
    # is gathered and the saved weights come from the unwrapped model, as with one line each.
    body = """\
class Trainer:
    def __init__(self, model, train_loader, val_loader, optimizer):
        self.model, self.optimizer = model, optimizer
        self.train_loader, self.val_loader = train_loader, val_loader

    def fit(self):
        for x, y in self.train_loader:
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for x, y in self.val_loader:
                total += nn.functional.mse_loss(self.model(x), y, reduction="sum").item()
        torch.save(self.model.state_dict(), "last.pt")
        return total


def main():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    print(Trainer(model, train_loader, val_loader, optimizer).fit())
"""
    code, lines = convert_lines(body)
    assert "output, y = self.accelerator.gather_for_metrics((output, y))" in lines
    assert 'self.accelerator.save(self.accelerator.unwrap_model(self.model).state_dict(), "last.pt")' in lines


def test_simclr_shape_keyword_arguments_helper_saves_and_a_writer_whose_log_dir_every_rank_reads() -> None:
    # sthalles/SimCLR: ``__init__(self, *args, **kwargs)`` takes ``kwargs['model']``; a helper saves
    # a dict holding ``self.model.state_dict()`` into ``self.writer.log_dir``, which every rank
    # reads (logging's file, the checkpoint path): the writer cannot be None on the other ranks.
    body = """\
import logging
import os
from torch.utils.tensorboard import SummaryWriter


def save_checkpoint(state, filename):
    torch.save(state, filename)


class SimCLR:
    def __init__(self, *args, **kwargs):
        self.args = kwargs['args']
        self.model = kwargs['model'].to(self.args.device)
        self.optimizer = kwargs['optimizer']
        self.writer = SummaryWriter(log_dir=self.args.log_dir)
        logging.basicConfig(filename=os.path.join(self.writer.log_dir, 'training.log'))

    def train(self, train_loader):
        for x, y in train_loader:
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            self.writer.add_scalar('loss', loss)
        save_checkpoint({'state_dict': self.model.state_dict()}, os.path.join(self.writer.log_dir, 'last.pt'))


def main(args):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    SimCLR(model=model, optimizer=optimizer, args=args).train(loader)
"""
    code, lines = convert_lines(body)
    assert "self.writer = SummaryWriter(log_dir=self.args.log_dir)" in lines  # on every rank
    assert "#ACC916" in lines
    assert "if self.accelerator.is_main_process:" in lines  # its logging still on one process
    assert "save_checkpoint({'state_dict': self.accelerator.unwrap_model(self.model).state_dict()}, " in code
    assert "os.path.join(self.writer.log_dir, 'last.pt'), self.accelerator)" in code
    assert convert_text(code)[0] == code  # converts to itself


#: pytorch-template's shape: the epoch loop, the log and the checkpoints live in a base class.
BASE_AND_TRAINER = """\
class BaseTrainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def train(self, epochs):
        for epoch in range(epochs):
            log = self._train_epoch(epoch)
            print(log)
            self._save_checkpoint(epoch, save_best=log["loss"] < 0.1)

    def _save_checkpoint(self, epoch, save_best=False):
        state = {"arch": type(self.model).__name__, "state_dict": self.model.state_dict()}
        torch.save(state, f"checkpoint-{epoch}.pth")
        if save_best:
            torch.save(state, "model_best.pth")


class Trainer(BaseTrainer):
    def __init__(self, model, optimizer, data_loader):
        super().__init__(model, optimizer)
        self.data_loader = data_loader

    def _train_epoch(self, epoch):
        for data, target in self.data_loader:
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(data), target)
            loss.backward()
            self.optimizer.step()
        return {"loss": loss.item()}
"""

MAIN_BUILDING_A_TRAINER = """

def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(model, optimizer, loader).train(2)
"""


def test_a_base_class_of_a_trainer_uses_the_accelerator_its_subclass_keeps() -> None:
    code, changes = convert(BASE_AND_TRAINER + MAIN_BUILDING_A_TRAINER)
    base_init = method_source(code, "BaseTrainer", "__init__")
    assert "accelerator" not in base_init  # the subclass keeps it before super().__init__
    trainer_init = method_source(code, "Trainer", "__init__")
    assert trainer_init.index("self.accelerator = accelerator") < trainer_init.index("super().__init__")
    assert "self.accelerator.print(log)" in method_source(code, "BaseTrainer", "train")
    save = method_source(code, "BaseTrainer", "_save_checkpoint")
    assert "type(self.accelerator.unwrap_model(self.model)).__name__" in save
    assert "self.accelerator.unwrap_model(self.model).state_dict()" in save
    assert save.count("self.accelerator.save(") == 2
    # ``save_best`` is computed by the caller from this rank's own loss: no barrier under it.
    assert save.count("wait_for_everyone") == 1
    assert save.index("wait_for_everyone") < save.index("if save_best:")
    assert free_accelerator_reads(code, "BaseTrainer") == []
    assert any(change.code == "ACC108" and "BaseTrainer is a base" in change.message for change in changes)
    again, _ = convert_text(code)
    assert again == code


@pytest.mark.parametrize(
    "extra",
    [
        # The base is constructed itself: that instance has no accelerator.
        MAIN_BUILDING_A_TRAINER + "    BaseTrainer(model, optimizer)\n",
        # Another subclass is not a training class: its instances have none either.
        MAIN_BUILDING_A_TRAINER + "\n\nclass Exporter(BaseTrainer):\n    pass\n",
    ],
    ids=["base constructed", "subclass without the accelerator"],
)
def test_a_base_class_some_instance_has_no_accelerator_for_is_left_alone(extra: str) -> None:
    code, _ = convert(BASE_AND_TRAINER + extra)
    assert method_source(code, "BaseTrainer", "train") == method_source(
        IMPORTS + BASE_AND_TRAINER, "BaseTrainer", "train"
    )
    assert free_accelerator_reads(code, "BaseTrainer") == []


def test_a_subclass_defining_only_the_step_of_its_base_s_loop_is_a_training_class() -> None:
    base = """\
class BaseTrainer:
    def __init__(self, model, optimizer, loader):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader

    def train(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            self.step(x, y).backward()
            self.optimizer.step()
        print("done")


class RegressionTrainer(BaseTrainer):
    def __init__(self, model, optimizer, loader):
        super().__init__(model, optimizer, loader)

    def step(self, x, y):
        return F.mse_loss(self.model(x), y)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    RegressionTrainer(model, optimizer, loader).train()
"""
    code, _ = convert(base)
    assert "self.accelerator.backward(self.step(x, y))" in method_source(code, "BaseTrainer", "train")
    assert 'self.accelerator.print("done")' in method_source(code, "BaseTrainer", "train")
    assert "self.accelerator = accelerator" in method_source(code, "RegressionTrainer", "__init__")
    assert "RegressionTrainer(model, optimizer, loader, accelerator).train()" in code
    assert free_accelerator_reads(code, "BaseTrainer") == []


def test_what_a_training_base_builds_in_its_init_is_prepared_there() -> None:
    code, _ = convert(
        """\
class BaseTrainer:
    def __init__(self, model, train_loader, lr):
        self.model = model
        self.train_loader = train_loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.train_loader:
                self.optimizer.zero_grad()
                self.compute_loss(x, y).backward()
                self.optimizer.step()


class MSETrainer(BaseTrainer):
    def __init__(self, model, train_loader, lr=0.1):
        super().__init__(model, train_loader, lr)

    def compute_loss(self, x, y):
        return F.mse_loss(self.model(x), y)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    MSETrainer(nn.Linear(4, 1), loader).fit(2)
"""
    )
    base_init = method_source(code, "BaseTrainer", "__init__")
    assert base_init.endswith("self.optimizer = self.accelerator.prepare(self.optimizer)")
    assert "def __init__(self, model, train_loader, lr):" in base_init  # not given the accelerator
    trainer_init = method_source(code, "MSETrainer", "__init__")
    assert trainer_init.index("self.accelerator = accelerator") < trainer_init.index("super().__init__")
    again, _ = convert_text(code)
    assert again == code


def test_a_subclass_without_init_passes_the_accelerator_to_the_base_init_it_runs() -> None:
    code, _ = convert(
        """\
class BaseTrainer:
    def __init__(self, model, train_loader, lr=0.1):
        self.model = model
        self.train_loader = train_loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.train_loader:
                self.optimizer.zero_grad()
                self.compute_loss(x, y).backward()
                self.optimizer.step()


class MSETrainer(BaseTrainer):
    def compute_loss(self, x, y):
        return F.mse_loss(self.model(x), y)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    MSETrainer(model, loader).fit(2)
"""
    )
    base_init = method_source(code, "BaseTrainer", "__init__")
    assert "def __init__(self, model, train_loader, lr=0.1, *, accelerator):" in base_init
    assert base_init.endswith("self.optimizer = self.accelerator.prepare(self.optimizer)")
    assert "model, loader = accelerator.prepare(model, loader)" in code
    assert "MSETrainer(model, loader, accelerator=accelerator).fit(2)" in code
    assert "self.accelerator.backward(self.compute_loss(x, y))" in code
    again, _ = convert_text(code)
    assert again == code
