"""A program of several modules converted as one (codemods.engine.program), without processes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from accel_convert.codemods.engine.local_imports import local_imports
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import Program, ProgramModule, convert_program

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


def test_functions_re_exported_by_a_package_init_are_followed_to_their_module():
    init = "from .engine import evaluate, train_one_epoch\nfrom .data import *\n"
    entry = TRAIN.replace(
        "import engine\nfrom data import get_loaders\n", "import mylib as lib\nfrom mylib import get_loaders\n"
    )
    entry = entry.replace("engine.", "lib.")
    code = converted("train", train=entry, mylib__init=init, mylib__engine=ENGINE, mylib__data=DATA)
    assert "def train_one_epoch(model, loader, optimizer, device, accelerator):" in code["mylib.engine"]
    assert "accelerator.gather_for_metrics" in code["mylib.engine"]  # evaluation over a prepared loader
    assert "lib.train_one_epoch(model, train_loader, optimizer, device, accelerator)" in code["train"]
    # get_loaders, re-exported with ``*``, returns loaders: the entry prepares them.
    assert "model, optimizer, train_loader, test_loader = accelerator.prepare(" in code["train"]


def test_star_imports_of_program_modules_bind_their_public_functions():
    entry = TRAIN.replace("import engine\n", "from engine import *\n").replace("engine.", "")
    code = converted("train", train=entry, engine=ENGINE, data=DATA)
    assert "def evaluate(model, loader, accelerator):" in code["engine"]
    assert "evaluate(model, test_loader, accelerator)" in code["train"]
    # A function of the entry's own shadows the star-imported one: not the library's any more.
    shadowed = entry.replace("def main():", "def evaluate(model, loader):\n    pass\n\n\ndef main():")
    code = converted("train", train=shadowed, engine=ENGINE, data=DATA)
    assert "evaluate(model, test_loader)\n" in code["train"]
    assert "def evaluate(model, loader):" in code["engine"]


HELPERS = """\
import sys
import numpy as np

__version__ = "1"


def banner(text):
    sys.stdout.write(text)
"""


@pytest.mark.parametrize(
    ("helpers", "bound"),
    [
        (HELPERS, {"sys": "sys", "np": "numpy"}),
        (HELPERS.replace("import numpy as np", "import numpy as np\nimport os as _os"), {"sys": "sys", "np": "numpy"}),
        (HELPERS.replace('__version__ = "1"', '__all__ = ["banner"]'), {}),
    ],
    ids=["imports", "private-alias-left-out", "listed-in-__all__"],
)
def test_star_imports_bind_the_libraries_the_star_imported_module_imports(helpers: str, bound: dict[str, str]):
    entry = "from helpers import *\n\nsys.stdout.write('hello')\n"
    seeds = Program(modules(train=entry, helpers=helpers), "train").plan()
    assert dict(seeds["train"].star_library_imports) == bound


def test_a_console_write_through_a_star_imported_sys_goes_to_the_main_process():
    entry = TRAIN.replace("import engine\n", "import engine\nfrom helpers import *\n").replace(
        "        engine.evaluate(model, test_loader)\n",
        "        engine.evaluate(model, test_loader)\n        sys.stdout.write(f'epoch {epoch}')\n",
    )
    code = converted("train", train=entry, engine=ENGINE, data=DATA, helpers=HELPERS)
    assert "        if accelerator.is_main_process:\n            sys.stdout.write(" in code["train"]
    # Bound in the module itself, ``sys`` is that binding, not the star import's.
    own = entry.replace("def main():", "sys = None\n\n\ndef main():")
    code = converted("train", train=own, engine=ENGINE, data=DATA, helpers=HELPERS)
    assert "        sys.stdout.write(" in code["train"]
    assert "is_main_process:\n            sys.stdout.write(" not in code["train"]


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


METER_UTILS = """\
import torch


class ProgressMeter:
    def __init__(self, num_batches, prefix=""):
        self.num_batches = num_batches
        self.prefix = prefix

    def display(self, batch):
        print(f"{self.prefix}[{batch}/{self.num_batches}]")


class MetricLogger:
    def __init__(self, delimiter="  "):
        self.delimiter = delimiter

    def log_every(self, iterable, print_freq, header=None):
        for i, obj in enumerate(iterable):
            yield obj
            if i % print_freq == 0:
                print(f"{header} [{i}/{len(iterable)}]")
"""

METER_ENGINE = """\
import torch

import utils


def train_one_epoch(model, loader, optimizer, epoch):
    progress = utils.ProgressMeter(len(loader), prefix=f"Epoch: [{epoch}]")
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        progress.display(i)
    print("epoch done")


def train_logged(model, loader, optimizer, epoch):
    metric_logger = utils.MetricLogger()
    for x, y in metric_logger.log_every(loader, 10, f"Epoch: [{epoch}]"):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""

METER_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from engine import train_logged, train_one_epoch


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_one_epoch(model, loader, optimizer, epoch)
        train_logged(model, loader, optimizer, epoch)


if __name__ == "__main__":
    main()
"""


def test_library_classes_the_training_code_constructs_print_with_an_accelerator() -> None:
    # pytorch/examples' ProgressMeter and torchvision's MetricLogger, constructed by functions that
    # get the accelerator: never an ``accelerator.print`` where no accelerator is (NameError).
    code = converted("train", train=METER_TRAIN, engine=METER_ENGINE, utils=METER_UTILS)
    utils, engine = code["utils"], code["engine"]
    # The meter is built only where the accelerator is: it keeps it and prints once (before, it
    # was left printing on every rank).
    assert '        self.accelerator.print(f"{self.prefix}[{batch}/{self.num_batches}]")' in utils
    assert 'def __init__(self, num_batches, prefix="", *, accelerator):' in utils
    assert 'progress = utils.ProgressMeter(len(loader), prefix=f"Epoch: [{epoch}]", accelerator=accelerator)' in engine
    # The logger loops over the prepared loader: it receives the accelerator and prints once.
    assert '    def __init__(self, delimiter="  ", *, accelerator):' in utils
    assert '                self.accelerator.print(f"{header} [{i}/{len(iterable)}]")' in utils
    assert "metric_logger = utils.MetricLogger(accelerator=accelerator)" in engine
    assert 'accelerator.print("epoch done")' in engine
    assert not [line for line in utils.splitlines() if line.strip().startswith("accelerator.")]


SAVING_UTILS = """\
import torch


def save_checkpoint(state, filename):
    torch.save(state, filename)
"""

SAVING_TRAINER = """\
import torch

from utils import save_checkpoint


class Trainer:
    def __init__(self, *args, **kwargs):
        self.model = kwargs["model"]
        self.optimizer = kwargs["optimizer"]

    def train(self, loader):
        for x, y in loader:
            self.optimizer.zero_grad()
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
        save_checkpoint({"state_dict": self.model.state_dict()}, "last.pt")
"""

SAVING_RUN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(model=model, optimizer=optimizer).train(loader)
    state = torch.load("last.pt")
    print(sorted(state["state_dict"]))


if __name__ == "__main__":
    main()
"""


def test_a_training_class_passes_its_accelerator_to_the_library_functions_that_take_it() -> None:
    # sthalles/SimCLR: the library function gains the parameter, so every call of it must pass it.
    code = converted("run", run=SAVING_RUN, trainer=SAVING_TRAINER, utils=SAVING_UTILS)
    assert "def save_checkpoint(state, filename, accelerator):" in code["utils"]
    trainer = code["trainer"]
    assert (
        'save_checkpoint({"state_dict": self.accelerator.unwrap_model(self.model).state_dict()}, '
        '"last.pt", self.accelerator)'
    ) in trainer
    # The checkpoint the library writes on the main process is read after every rank waits.
    run = code["run"].splitlines()
    assert (
        run[run.index('    state = torch.load("last.pt", map_location={"cuda:0": str(accelerator.device)})') - 1]
        == "    accelerator.wait_for_everyone()"
    )


STOPPER = """\
import numpy as np
import torch


class EarlyStopping:
    def __init__(self, patience=7, path="checkpoint.pt"):
        self.patience = patience
        self.path = path
        self.best = None
        self.early_stop = False

    def __call__(self, val_loss, model):
        if self.best is None or val_loss < self.best:
            self.best = val_loss
            self.save_checkpoint(model)

    def save_checkpoint(self, model):
        torch.save(model.state_dict(), self.path)
"""

STOPPING_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from pytorchtools import EarlyStopping


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    early_stopping = EarlyStopping(patience=2)
    for epoch in range(5):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        early_stopping(loss.item(), VALUE)
    model.load_state_dict(torch.load("checkpoint.pt"))


if __name__ == "__main__":
    main()
"""


def test_a_library_class_handed_the_prepared_model_saves_it_unwrapped_on_the_main_process() -> None:
    # Bjarten's EarlyStopping saved ``model.state_dict()`` on every rank, with DDP's keys. Handed
    # the prepared model, it receives the accelerator like a training class and saves once; no
    # barrier in it (it saves when this rank's loss improved), the entry's load waits instead.
    code = converted("train", train=STOPPING_TRAIN.replace("VALUE", "model"), pytorchtools=STOPPER)
    stopper, train = code["pytorchtools"], code["train"]
    assert '    def __init__(self, patience=7, path="checkpoint.pt", *, accelerator):' in stopper
    assert "        self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), self.path)" in stopper
    assert "wait_for_everyone" not in stopper
    assert "early_stopping = EarlyStopping(patience=2, accelerator=accelerator)" in train
    assert (
        '    accelerator.wait_for_everyone()\n    accelerator.unwrap_model(model).load_state_dict(torch.load("checkpoint.pt", map_location={"cuda:0": str(accelerator.device)}))'
        in train
    )
    # Handed something else, it is left as it is.
    other = converted("train", train=STOPPING_TRAIN.replace("VALUE", "loader"), pytorchtools=STOPPER)
    assert other["pytorchtools"] == STOPPER


def test_a_library_class_handed_the_prepared_model_where_no_accelerator_is_reports_its_save() -> None:
    # Constructed by module-level code before the accelerator exists: it cannot receive it, and
    # its save is reported, never left silently.
    entry = (
        STOPPING_TRAIN.replace("VALUE", "model")
        .replace("    early_stopping = EarlyStopping(patience=2)\n", "")
        .replace("def main():", "early_stopping = EarlyStopping(patience=2)\n\n\ndef main():")
    )
    handed = reports("train", "ACC914", train=entry, pytorchtools=STOPPER)
    assert handed["pytorchtools"] == [18]


BASE_TRAINER = """\
import torch


class BaseTrainer:
    def __init__(self, model, optimizer, loader):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader

    def train(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                self._step(x, y).backward()
                self.optimizer.step()
            print(f"epoch {epoch}")
            torch.save(self.model.state_dict(), "last.pt")
"""

REGRESSION_TRAINER = """\
import torch
from base import BaseTrainer


class RegressionTrainer(BaseTrainer):
    def __init__(self, model, optimizer, loader):
        super().__init__(model, optimizer, loader)

    def _step(self, x, y):
        return torch.nn.functional.mse_loss(self.model(x), y)
"""

TRAIN_WITH_A_TRAINER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import RegressionTrainer


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    RegressionTrainer(model, optimizer, loader).train(2)


if __name__ == "__main__":
    main()
"""


def test_a_base_class_in_another_module_uses_the_accelerator_its_subclass_keeps() -> None:
    code = converted("train", train=TRAIN_WITH_A_TRAINER, trainer=REGRESSION_TRAINER, base=BASE_TRAINER)
    # The subclass's own methods never use the accelerator; it keeps it for its base's.
    assert "def __init__(self, model, optimizer, loader, accelerator):" in code["trainer"]
    assert "self.accelerator = accelerator" in code["trainer"]
    base = code["base"]
    assert "def __init__(self, model, optimizer, loader):" in base
    assert "self.accelerator.backward(self._step(x, y))" in base
    assert 'self.accelerator.print(f"epoch {epoch}")' in base
    # ``self.model`` is the prepared model super().__init__ receives: saved unwrapped.
    assert 'self.accelerator.save(self.accelerator.unwrap_model(self.model).state_dict(), "last.pt")' in base
    assert "RegressionTrainer(model, optimizer, loader, accelerator).train(2)" in code["train"]


TRAINER_BUILDS_OPTIMIZER = """\
import torch


class Trainer:
    def __init__(self, model, loader, frozen_teacher, lr):
        self.model = model
        self.teacher = frozen_teacher.eval()
        self.loader = loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def fit(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            with torch.no_grad():
                target = self.teacher(x)
            loss = torch.nn.functional.mse_loss(self.model(x), target + y)
            loss.backward()
            self.optimizer.step()
"""

ENTRY_HANDS_MODEL_OVER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    net = torch.nn.Linear(4, 1)
    teacher = torch.nn.Linear(4, 1)
    teacher.requires_grad_(False)
    Trainer(net, loader, teacher, 0.1).fit()


if __name__ == "__main__":
    main()
"""


def test_a_model_handed_to_a_class_of_another_module_that_trains_it_is_prepared_by_the_entry():
    """The class builds the optimizer over ``self.model`` and leaves preparing what it is handed to
    its caller: the entry, which only passes ``net`` on, must know it is a model (before, only
    the loader was prepared and the model trained undistributed)."""
    code = converted("main", main=ENTRY_HANDS_MODEL_OVER, trainer=TRAINER_BUILDS_OPTIMIZER)
    assert "net, loader = accelerator.prepare(net, loader)" in code["main"], code["main"]
    assert "self.optimizer = self.accelerator.prepare(self.optimizer)" in code["trainer"]


LIBRARY_TRAIN = """\
import torch


def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct


def run(args):
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(evaluate(model, loader))
"""

THIN_ENTRY = """\
import argparse

from lib import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    run(parser.parse_args())
"""


def test_a_thin_entry_hands_over_to_the_function_that_builds_everything():
    """The entry builds nothing to train: ``run`` creates the accelerator and prepares what it
    builds, as in a single script; the entry stays as it is (before: nothing was converted but
    a removed model move, and everything was reported)."""
    code = converted("main", main=THIN_ENTRY, lib=LIBRARY_TRAIN)
    assert code["main"] == THIN_ENTRY
    assert "    accelerator = Accelerator()" in code["lib"]
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in code["lib"]
    assert "def evaluate(model, loader, accelerator):" in code["lib"]


def test_a_library_function_building_its_model_prepares_it_with_its_optimizer():
    """The entry builds the loader and passes it on; ``fit`` builds the model and its optimizer:
    the entry (which imports no torch) creates the accelerator, prepares the loader and passes
    both; ``fit`` prepares its model and optimizer (before: the entry was left unconverted, so
    ``fit`` missed its accelerator argument, and the model was reported, its move removed)."""
    built = LIBRARY_TRAIN.split("def run(args):\n")[1].splitlines()[0]
    library = LIBRARY_TRAIN.replace(f"def run(args):\n{built}\n", "def fit(args, loader):\n")
    entry = (
        "import argparse\n\nfrom data import make_loader\nfrom lib import fit\n\n"
        'if __name__ == "__main__":\n    parser = argparse.ArgumentParser()\n'
        '    parser.add_argument("--lr", type=float, default=0.1)\n    loader = make_loader()\n'
        "    fit(parser.parse_args(), loader)\n"
    )
    data = (
        "import torch\n\n\ndef make_loader():\n    return torch.utils.data.DataLoader("
        "torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))))\n"
    )
    code = converted("main", main=entry, lib=library, data=data)
    assert "accelerator = Accelerator()" in code["main"], code["main"]
    assert "def fit(args, loader, accelerator):" in code["lib"]
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in code["lib"], code["lib"]
    assert "Accelerator()" not in code["lib"]


def test_loaders_reach_methods_through_method_calls_and_helper_class_saves_are_reported():
    """``Trainer(...).fit(train_loader, val_loader)`` then ``self.evaluate(val_loader)``: the
    method's ``loader`` is the prepared validation loader, so its evaluation is gathered; a
    callback class saving ``trainer.model`` (no accelerator reaches it) is reported (ACC914)."""
    entry = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\nfrom callbacks import Saver\n\n\n"
        "class Trainer:\n    def __init__(self, model, optimizer, callbacks):\n        self.model = model\n"
        "        self.optimizer = optimizer\n        self.callbacks = callbacks\n\n"
        "    def fit(self, train_loader, val_loader):\n        for x, y in train_loader:\n"
        "            self.optimizer.zero_grad()\n"
        "            torch.nn.functional.cross_entropy(self.model(x), y).backward()\n"
        "            self.optimizer.step()\n        correct = self.evaluate(val_loader)\n"
        "        for cb in self.callbacks:\n            cb.on_epoch_end(self, correct)\n\n"
        "    @torch.no_grad()\n    def evaluate(self, loader):\n        correct = 0\n        for x, y in loader:\n"
        "            out = self.model(x)\n            correct += (out.argmax(1) == y).sum().item()\n"
        "        return correct\n\n\ndef main():\n"
        "    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))\n"
        "    train_loader = DataLoader(data, batch_size=2)\n    val_loader = DataLoader(data, batch_size=4)\n"
        "    model = torch.nn.Linear(4, 2)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    Trainer(model, optimizer, [Saver()]).fit(train_loader, val_loader)\n"
    )
    callbacks = (
        "import torch\n\n\nclass Saver:\n    def on_epoch_end(self, trainer, correct):\n"
        '        torch.save(trainer.model.state_dict(), "best.pt")\n'
    )
    code = converted("main", main=entry, callbacks=callbacks)
    assert "out, y = self.accelerator.gather_for_metrics((out, y))" in code["main"], code["main"]
    assert reports("main", "ACC914", main=entry, callbacks=callbacks)["callbacks"] == [6]


INHERITING_TRAINER = """\
import torch

from base import BaseTrainer


class ClassifierTrainer(BaseTrainer):
    def evaluate(self):
        correct = 0
        with torch.no_grad():
            for x, y in self.valid_loader:
                correct += (self.model(x).argmax(dim=1) == y).sum().item()
        return correct
"""

INITIALISING_BASE = """\
import torch


class BaseTrainer:
    def __init__(self, model, optimizer, loader, valid_loader):
        self.model, self.optimizer = model, optimizer
        self.loader = loader
        self.valid_loader = valid_loader

    def train(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                torch.nn.functional.cross_entropy(self.model(x), y).backward()
                self.optimizer.step()
            print(f"epoch {epoch} correct {self.evaluate()}")
"""

TRAIN_WITH_AN_INHERITING_TRAINER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import ClassifierTrainer


def main():
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    loader = DataLoader(data, batch_size=4)
    valid_loader = DataLoader(data, batch_size=8)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ClassifierTrainer(model, optimizer, loader, valid_loader).train(2)


if __name__ == "__main__":
    main()
"""


def test_a_subclass_without_init_runs_and_passes_on_its_base_modules_init() -> None:
    """``ClassifierTrainer`` defines no ``__init__``: constructing it runs ``base.BaseTrainer``'s,
    which receives the prepared objects and the accelerator; the subclass's evaluation reads it as
    ``self.accelerator``, which that ``__init__`` keeps."""
    code = converted(
        "train", train=TRAIN_WITH_AN_INHERITING_TRAINER, trainer=INHERITING_TRAINER, base=INITIALISING_BASE
    )
    base = code["base"]
    assert "def __init__(self, model, optimizer, loader, valid_loader, accelerator):" in base
    assert "self.accelerator = accelerator" in base
    assert "self.accelerator.backward(torch.nn.functional.cross_entropy(self.model(x), y))" in base
    assert 'self.accelerator.print(f"epoch {epoch} correct {self.evaluate()}")' in base
    assert "def __init__" not in code["trainer"]
    assert "self.accelerator.gather_for_metrics(" in code["trainer"]
    assert "ClassifierTrainer(model, optimizer, loader, valid_loader, accelerator).train(2)" in code["train"]
    assert "model, optimizer, loader, valid_loader = accelerator.prepare(" in code["train"]


def test_a_subclass_of_the_entry_without_init_runs_its_base_modules_init() -> None:
    """The same subclass defined in the entry script itself: its construction there fills the
    base module's ``__init__``, which receives the accelerator (by keyword, from the entry's own
    training-class rewrite)."""
    subclass = INHERITING_TRAINER.split("\n\n\n", 1)[1]
    entry = TRAIN_WITH_AN_INHERITING_TRAINER.replace(
        "from trainer import ClassifierTrainer\n", "from base import BaseTrainer\n\n\n" + subclass
    )
    code = converted("train", train=entry, base=INITIALISING_BASE)
    assert "def __init__(self, model, optimizer, loader, valid_loader, accelerator):" in code["base"]
    assert "self.accelerator.backward(" in code["base"]
    assert "self.accelerator.gather_for_metrics(" in code["train"]
    assert (
        "ClassifierTrainer(model, optimizer, loader, valid_loader, accelerator=accelerator).train(2)" in code["train"]
    )


def test_a_library_subclass_without_init_over_a_base_of_its_own_module_gathers_with_self_accelerator() -> None:
    """Base and subclass in one library module, the subclass constructed by the entry only: the
    base receives the accelerator and the subclass's evaluation reads ``self.accelerator``."""
    subclass = INHERITING_TRAINER.split("\n\n\n", 1)[1]
    library = INITIALISING_BASE + "\n\n" + subclass
    code = converted("train", train=TRAIN_WITH_AN_INHERITING_TRAINER, trainer=library)
    assert "def __init__(self, model, optimizer, loader, valid_loader, accelerator):" in code["trainer"]
    assert "self.accelerator.gather_for_metrics(" in code["trainer"]
    assert "ClassifierTrainer(model, optimizer, loader, valid_loader, accelerator).train(2)" in code["train"]


CAPTION_MODELS = """
import torch
import torch.nn as nn


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 12)

    def forward(self, features, lengths):
        decode_lengths = (lengths - 1).tolist()
        return self.fc(features), decode_lengths
"""

CAPTION_TRAIN = """
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from models import Decoder


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randint(2, 7, (64,)), torch.randint(0, 12, (64,)))
    train_loader = DataLoader(data, batch_size=8)
    val_loader = DataLoader(data, batch_size=16)
    decoder = Decoder()
    optimizer = torch.optim.Adam(decoder.parameters())
    for features, lengths, words in train_loader:
        scores, _ = decoder(features, lengths)
        loss = F.cross_entropy(scores, words)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hits = []
    with torch.no_grad():
        for features, lengths, words in val_loader:
            scores, decode_lengths = decoder(features, lengths)
            for j, length in enumerate(decode_lengths):
                hits.append(int(scores[j].argmax() == words[j]) * length)
    print(sum(hits))


if __name__ == "__main__":
    main()
"""


def test_a_python_value_returned_by_a_model_class_of_another_module_is_not_gathered() -> None:
    """The decoder of show-attend-tell returns ``decode_lengths``, a Python list, and lives in
    ``models.py``: gathered with the tensors, ``gather_for_metrics`` got a tuple it cannot join and
    the converted program stopped on two processes. The class is known across modules, as when it
    is in the entry script: the tensors are not gathered per batch, and the list the loop keeps per
    sample (``hits``) is gathered after the loop, each process's real samples once."""
    code = converted("train", train=CAPTION_TRAIN, models=CAPTION_MODELS)
    assert "gather_for_metrics" not in code["train"]
    assert "hits = accelerator.gather_object(hits)" in code["train"]
    assert "in accelerator.without_padding(val_loader):" in code["train"]
    assert reports("train", "ACC946", train=CAPTION_TRAIN, models=CAPTION_MODELS)["train"] == []
    # In one file the same class was already known.
    alone = CAPTION_TRAIN.replace("from models import Decoder\n", CAPTION_MODELS.split("import torch.nn as nn\n", 1)[1])
    outcome = convert_program(modules(train=alone), "train", Options())["train"]
    assert "gather_for_metrics" not in outcome.module.code
    assert "hits = accelerator.gather_object(hits)" in outcome.module.code


LATE_MODEL_BASE = """\
import torch.nn as nn


class Base(nn.Module):
    pass


class Settings:
    pass
"""

LATE_MODEL_NETS = """\
from .base import Base


class Net(Base):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""

LATE_MODEL_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from nets import Net


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), "model.pt")
    final = Net()
    final.load_state_dict(torch.load("model.pt"))
    correct = 0
    with torch.no_grad():
        for x, y in test_loader:
            correct += (final(x).argmax(1) == y).sum().item()
    print(correct)
"""


def test_the_model_classes_of_a_program_are_known_by_qualified_name_through_bases_and_re_exports() -> None:
    program = Program(
        modules(
            train=LATE_MODEL_TRAIN,
            nets__init="from .mlp import Net\n",
            nets__mlp=LATE_MODEL_NETS,
            nets__base=LATE_MODEL_BASE,
        ),
        "train",
    )
    seeds = program.plan()
    # Net derives from a torch module through Base, a class of another module of the package;
    # Settings is a plain class.
    assert seeds["train"].model_classes == frozenset({"nets.base.Base", "nets.mlp.Net"})


def test_a_model_built_after_training_from_a_class_of_another_module_is_moved_and_gathered() -> None:
    sources = {"nets__init": "from .mlp import Net\n", "nets__mlp": LATE_MODEL_NETS, "nets__base": LATE_MODEL_BASE}
    code = converted("train", train=LATE_MODEL_TRAIN, **sources)["train"]
    assert "    final.to(accelerator.device)\n" in code
    assert "output, y = accelerator.gather_for_metrics((output, y))" in code
    # Named through its module (``import nets`` then ``nets.Net()``) the class is the same one.
    through_module = LATE_MODEL_TRAIN.replace("from nets import Net\n", "import nets\n").replace("Net()", "nets.Net()")
    code = converted("train", train=through_module, **sources)["train"]
    assert "    final.to(accelerator.device)\n" in code
    assert "accelerator.gather_for_metrics" in code
    # A class of the program that is no torch module builds no model to move.
    plain = {**sources, "nets__mlp": LATE_MODEL_NETS.replace("(Base)", "(object)")}
    assert "final.to(accelerator.device)" not in converted("train", train=LATE_MODEL_TRAIN, **plain)["train"]


EVALUATION_HELPER = """\
import torch
from torch.utils.data import DataLoader


def evaluate_on_val(model, val_set):
    loader = DataLoader(val_set, batch_size=4)
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct


def make_loader(val_set):
    return DataLoader(val_set, batch_size=4)
"""

EVALUATED_EACH_EPOCH = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from evaluation import evaluate_on_val, make_loader


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    val_set = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        print(evaluate_on_val(model, val_set))
    extra = make_loader(val_set)
"""


def test_an_evaluation_helper_of_another_module_prepares_the_loader_it_builds_where_the_accelerator_is() -> None:
    code = converted("train", train=EVALUATED_EACH_EPOCH, evaluation=EVALUATION_HELPER)
    helper = code["evaluation"]
    assert "def evaluate_on_val(model, val_set, accelerator):" in helper
    assert "    loader = accelerator.prepare(loader)\n" in helper
    assert "accelerator.gather_for_metrics" in helper
    # A factory returning the loader it builds is not where its loader is prepared.
    assert "def make_loader(val_set):\n    return DataLoader(val_set, batch_size=4)\n" in helper
    # Also called where no accelerator is (a function outside the training), it reads its loader whole.
    elsewhere = EVALUATED_EACH_EPOCH + "\n\ndef check(model, val_set):\n    evaluate_on_val(model, val_set)\n"
    helper = converted("train", train=elsewhere, evaluation=EVALUATION_HELPER)["evaluation"]
    assert "accelerator.prepare" not in helper


SNAPSHOT_DIRS = """\
import os


def make_snapshot_dir(path):
    os.makedirs(path)


def make_logs(path):
    os.makedirs(path)


class Folders:
    def make(self, path):
        os.makedirs(path)
"""

SNAPSHOT_TRAIN = """\
import os

import snapshot_dirs
from snapshot_dirs import Folders, make_logs


def main():
    folders = Folders()
    make_logs("logs")
    for epoch in range(2):
        d = f"snapshots/{epoch}"
        if not os.path.isdir(d):
            snapshot_dirs.make_snapshot_dir(d)
        if not os.path.isdir("best"):
            folders.make("best")


if __name__ == "__main__":
    main()
"""


def test_a_function_another_module_calls_on_some_ranks_is_known_there() -> None:
    """``if not os.path.isdir(d): snapshot_dirs.make_snapshot_dir(d)`` in the entry: the program
    tells ``snapshot_dirs`` that some rank may not call it (a barrier there would hang), nor the
    method ``folders.make("best")`` of its class (an instance the entry builds); what the entry
    calls where every rank goes (``make_logs``) is not among them."""
    program = Program(modules(train=SNAPSHOT_TRAIN, snapshot_dirs=SNAPSHOT_DIRS), "train")
    seeds = program.plan()
    assert seeds["snapshot_dirs"].called_on_some_ranks == {"make_snapshot_dir", "Folders.make"}
    assert seeds["train"].called_on_some_ranks == frozenset()


PROJECTS = Path(__file__).resolve().parents[2] / "fixtures" / "projects"


def test_a_model_of_another_modules_class_handed_to_a_training_function_is_prepared_where_it_is_built() -> None:
    folder = PROJECTS / "inline_model_package_module_level"
    code = converted(
        "train",
        train=(folder / "train.py").read_text(),
        pkg__init="",
        pkg__models=(folder / "pkg" / "models.py").read_text(),
    )["train"]
    assert "model, train_loader, test_loader = accelerator.prepare(model, train_loader, test_loader)\n" in code
    assert not reports(
        "train",
        "ACC926",
        train=(folder / "train.py").read_text(),
        pkg__init="",
        pkg__models=(folder / "pkg" / "models.py").read_text(),
    )["train"]


def test_a_class_building_another_modules_trainer_is_a_training_class() -> None:
    folder = PROJECTS / "experiment_builds_trainer_modules"
    sources = {"train": (folder / "train.py").read_text(), "trainer": (folder / "trainer.py").read_text()}
    seeds = Program(modules(**sources), "train").plan()
    assert seeds["train"].training_classes_elsewhere == frozenset({"trainer.Trainer"})
    code = converted("train", **sources)
    assert "    def __init__(self, args, accelerator):\n        self.accelerator = accelerator\n" in code["train"]
    assert "self.device, self.accelerator)\n" in code["train"]
    assert "self.accelerator.backward(" in code["trainer"]


CONSOLE_LOGGER = """\
import sys


class ConsoleLogger:
    def __init__(self, batches):
        self.batches = batches

    def end_epoch(self, epoch):
        sys.stdout.write("epoch %d of %d batches\\n" % (epoch, self.batches))


class CachedSquares(torch.utils.data.Dataset):
    def __init__(self, n):
        print("building", n)
        self.x = torch.arange(n, dtype=torch.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i : i + 1], self.x[i : i + 1] ** 2
"""

CONSOLE_TRAIN = """\
import torch
from torch.utils.data import DataLoader

from logs import CachedSquares, ConsoleLogger

loader = DataLoader(CachedSquares(16), batch_size=4)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
logger = ConsoleLogger(len(loader))
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    logger.end_epoch(epoch)
"""


def test_a_console_logger_of_another_module_keeps_the_accelerator_and_a_dataset_does_not() -> None:
    code = converted("train", train=CONSOLE_TRAIN, logs="import torch\n\n\n" + CONSOLE_LOGGER)
    logs, train = code["logs"], code["train"]
    assert "    def __init__(self, batches, accelerator):" in logs
    assert "        if self.accelerator.is_main_process:" in logs
    assert "logger = ConsoleLogger(len(loader), accelerator)" in train
    # A dataset goes to the loader's workers, where the accelerator cannot: it keeps its print.
    assert "    def __init__(self, n):" in logs
    assert '        print("building", n)' in logs


def _detector_project(name: str) -> dict[str, str]:
    folder = PROJECTS / name
    return {path.stem: path.read_text() for path in sorted(folder.glob("*.py"))}


def test_a_models_optimizer_method_is_told_to_the_modules_calling_it() -> None:
    """faster-rcnn's ``FasterRCNN.get_optimizer`` builds ``SGD(self.parameters())``: the program
    tells every module so, and where a trainer of another module calls it on the detector it
    holds, that builds the optimizer and the detector is a trained model."""
    sources = _detector_project("detector_trainer_module")
    seeds = Program(modules(**sources), "train").plan()
    assert "model.Detector.get_optimizer" in seeds["trainer"].optimizer_methods
    assert seeds["train"].models_handed_over == frozenset({"detector"})
    # ``trainer.train_step(x, y)`` runs per batch of the entry's loop over the training loader.
    assert seeds["trainer"].fed_from_elsewhere == frozenset({"DetectorTrainer.train_step"})


@pytest.mark.parametrize(
    "name", ["optimizer_branches_module", "optimizer_branches_function", "optimizer_branches_class"]
)
def test_an_optimizer_method_binding_it_under_a_flag_is_told_to_the_modules_calling_it(name: str) -> None:
    """simple-faster-rcnn-pytorch's ``get_optimizer`` binds ``self.optimizer`` to ``Adam(params)``
    under ``if opt.use_adam:`` and to ``SGD(params, momentum=0.9)`` otherwise, then returns it:
    an optimizer method all the same (before, only one built in the return or bound to a local
    once was), so the entry prepares the detector and its optimizer."""
    sources = _detector_project(name)
    entry = Program(modules(**sources), "train")
    assert "model.Detector.get_optimizer" in entry.plan()["train"].optimizer_methods
    assert "accelerator.prepare(detector" in "".join(converted("train", **sources)["train"].split())


def test_a_models_parts_and_evaluating_methods_are_told_to_the_modules_calling_them() -> None:
    """The parts ``Detector.forward`` runs (``self.extractor(x)``, ``self.rpn(h)``,
    ``self.head(h)``, handed to ``__init__``) and its ``predict``, which switches it to eval mode:
    the trainer calling the parts one by one calls them through ``as_forward``, and the entry's
    loop calling ``detector.predict`` evaluates (reported, not gathered: the forward runs inside)."""
    sources = _detector_project("detector_parts_trainer")
    seeds = Program(modules(**sources), "train").plan()
    assert {"model.Detector.extractor", "model.Detector.rpn", "model.Detector.head"} <= seeds["trainer"].model_parts
    assert "model.Detector.predict" not in seeds["trainer"].model_parts
    assert "model.Detector.predict" in seeds["train"].evaluating_methods
    code = converted("train", **sources)
    assert "features = self.accelerator.as_forward(self.detector).extractor(x)" in code["trainer"]
    assert "scores = self.accelerator.as_forward(self.detector).head(features)" in code["trainer"]
    # ``if eval_result["map"] > best_map:`` decides a save: the evaluation whose outputs cannot be
    # gathered runs over every batch on every process (locality's ``deciding_evaluations``), so
    # every rank takes the branch alike and ``save`` keeps its barrier.
    save = code["trainer"].split("    def save(")[1].split("    def load(")[0]
    assert "wait_for_everyone" in save and "self.accelerator.save(" in save


@pytest.mark.parametrize(
    ("name", "trainer_module"),
    [
        ("detector_trainer_module", "trainer"),
        ("detector_trainer_plain_module", "trainer"),
        ("detector_trainer_entry", "train"),
    ],
)
def test_the_detector_a_trainer_trains_through_its_optimizer_method_is_prepared(name: str, trainer_module: str) -> None:
    """The detector is prepared where the entry builds it (before, only the loaders were: each
    process trained its own copy, unsynchronised, on half the data, without a word); the trainer
    builds the optimizer from the unwrapped detector and prepares it, steps through the
    accelerator's backward, and the entry saves the unwrapped detector. No finding is left."""
    sources = _detector_project(name)
    code = converted("train", **sources)
    train, trainer = code["train"], code[trainer_module]
    assert "detector, train_loader, test_loader = accelerator.prepare(detector, train_loader, test_loader)\n" in train
    assert "self.optimizer = self.accelerator.unwrap_model(self.detector).get_optimizer()\n" in trainer
    assert "self.optimizer = self.accelerator.prepare(self.optimizer)\n" in trainer
    assert "self.accelerator.backward(loss)" in trainer
    assert 'accelerator.save(accelerator.unwrap_model(trainer.detector).state_dict(), "detector.pt")' in train
    outcomes = convert_program(modules(**sources), "train", Options())
    assert [c.code for outcome in outcomes.values() for c in outcome.changes if c.code.startswith("ACC9")] == []


FIT = """\
import torch


def train_epoch(loader, model, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()


def fit(loader, model, optimizer, n_epochs):
    for epoch in range(n_epochs):
        train_epoch(loader, model, optimizer)
"""

TWO_MODELS = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

{import_line}


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4, shuffle=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {call}(loader, model, optimizer, 2)

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    {call}(loader, model, optimizer, 2)


if __name__ == "__main__":
    main()
"""


#: The training objects ``TWO_MODELS`` hands to its training function.
TRAINED = ("loader", "model", "optimizer")


def _unprepared_when_handed(code: str, callee: str) -> list[tuple[int, str]]:
    """(line, name) of each model, optimizer or loader a call of ``callee`` in ``main`` hands
    over while the object bound to that name was last bound otherwise than by ``prepare``."""
    import ast

    main = next(node for node in ast.parse(code).body if isinstance(node, ast.FunctionDef) and node.name == "main")
    prepared: dict[str, bool] = {}
    found = []
    for statement in main.body:
        if isinstance(statement, ast.Assign):
            targets = [
                element.id
                for target in statement.targets
                for element in (target.elts if isinstance(target, ast.Tuple) else [target])
                if isinstance(element, ast.Name)
            ]
            by_prepare = isinstance(statement.value, ast.Call) and ast.unparse(statement.value.func).endswith(
                ".prepare"
            )
            prepared.update(dict.fromkeys(targets, by_prepare))
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            if ast.unparse(call.func) == callee:
                found += [
                    (statement.lineno, arg.id)
                    for arg in call.args
                    if isinstance(arg, ast.Name) and arg.id in TRAINED and not prepared[arg.id]
                ]
    return found


@pytest.mark.parametrize(
    ("import_line", "call"),
    [("from trainer import fit", "fit"), ("import trainer", "trainer.fit"), ("from . import trainer", "trainer.fit")],
    ids=["from_import", "module_import", "relative_import"],
)
def test_every_model_handed_to_another_modules_training_function_is_prepared(import_line: str, call: str) -> None:
    # siamese-triplet's notebook: trainer.fit trains a classification net, then a siamese net
    # built (with its optimizer) once the first's training is over. Each call is where
    # training starts; what it hands over must be prepared before it, the second model too.
    entry = TWO_MODELS.format(import_line=import_line, call=call)
    if import_line.startswith("from ."):
        code = converted("pkg.train", pkg__init="", pkg__train=entry, pkg__trainer=FIT)["pkg.train"]
    else:
        code = converted("train", train=entry, trainer=FIT)["train"]
    assert code.count("accelerator.prepare(") == 2
    assert _unprepared_when_handed(code, call) == []


ALIAS_FACTORY = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def return_data(batch_size):
    train_loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=batch_size, shuffle=True)
    {aliases}
    return {returned}
"""

ALIAS_ENTRY = """\
import torch

from dataset import return_data


def main():
    net = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    data_loader = return_data(4)
    for (x,) in data_loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(net(x), x).backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    ("aliases", "returned"),
    [("data_loader = train_loader", "data_loader"), ("loader = train_loader\n    chosen = loader", "chosen")],
    ids=["one_alias", "alias_of_alias"],
)
def test_a_factory_returning_its_loader_under_another_name_is_a_loader_factory(aliases: str, returned: str) -> None:
    # Beta-VAE's dataset.return_data: ``data_loader = train_loader`` then ``return data_loader``.
    factory = ALIAS_FACTORY.format(aliases=aliases, returned=returned)
    program = Program(modules(train=ALIAS_ENTRY, dataset=factory), "train")
    assert program.plan()["train"].loader_factories == {"dataset.return_data"}
    assert "data_loader = accelerator.prepare(" in converted("train", train=ALIAS_ENTRY, dataset=factory)["train"]
    assert reports("train", "ACC901", train=ALIAS_ENTRY, dataset=factory)["train"] == []
