"""The CLI on programs of several modules: an entry script and the local modules it imports are
converted, checked, diffed and written as one set (no process is launched: in-process CLI runs)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_convert.converter.cli import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from accel_convert.converter.cli import main as accel_convert

ENGINE = """\
import torch


def train_epoch(model, loader, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    print("epoch done")
"""

MODEL = """\
import torch.nn as nn


def build():
    return nn.Linear(4, 1)
"""

TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

import engine
from model import build


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        engine.train_epoch(model, loader, optimizer)


if __name__ == "__main__":
    main()
"""


def make_project(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    contents = {"train.py": TRAIN, "engine.py": ENGINE, "model.py": MODEL}
    contents.update({f"{name}.py": text for name, text in files.items()})
    for name, text in contents.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def run(*args: str):
    return CliRunner().invoke(accel_convert, list(args))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_script_with_local_modules_is_written_with_them_into_a_folder(tmp_path: Path):
    project = make_project(tmp_path / "project")
    out = tmp_path / "out"
    result = run(str(project / "train.py"), "-o", f"{out}/")
    assert result.exit_code == EXIT_OK, result.output
    assert sorted(snapshot(out)) == ["engine.py", "model.py", "train.py"]
    engine = (out / "engine.py").read_text()
    train = (out / "train.py").read_text()
    assert "def train_epoch(model, loader, optimizer, accelerator):" in engine
    assert "accelerator.backward(loss)" in engine and "accelerator.print(" in engine
    assert "Accelerator()" not in engine  # only the entry creates one
    assert train.count("accelerator = Accelerator()") == 1
    assert "engine.train_epoch(model, loader, optimizer, accelerator)" in train
    assert (out / "model.py").read_bytes() == (project / "model.py").read_bytes()  # copied: out/ runs
    assert "1 local module converted with its entry script" in result.output.splitlines()[-1]
    # The set is stable: converting it again changes nothing.
    again = run(str(out / "train.py"), "--check")
    assert again.exit_code == EXIT_OK, again.output


def test_a_project_folder_converts_its_entry_script_with_its_libraries(tmp_path: Path):
    project = make_project(tmp_path / "project")
    out = tmp_path / "out"
    result = run(str(project), "-o", str(out))
    assert result.exit_code == EXIT_OK, result.output
    assert "Accelerator()" not in (out / "engine.py").read_text()
    assert "accelerator.backward(loss)" in (out / "engine.py").read_text()
    assert run(str(project), "--check", "-o", str(out)).exit_code == EXIT_OK
    (out / "engine.py").write_text("stale\n")
    stale = run(str(project), "--check", "-o", str(out))
    assert stale.exit_code == EXIT_FINDINGS and "engine.py" in stale.output


def test_in_place_converts_the_local_modules_too_and_says_so(tmp_path: Path):
    project = make_project(tmp_path / "project")
    model_before = (project / "model.py").read_bytes()
    result = run("--in-place", str(project / "train.py"))
    assert result.exit_code == EXIT_OK, result.output
    assert "accelerator.backward(loss)" in (project / "engine.py").read_text()
    assert (project / "model.py").read_bytes() == model_before
    assert "2 converted" in result.output and "1 local module converted with its entry script" in result.output


def test_check_and_diff_cover_every_file_of_the_set_and_write_nothing(tmp_path: Path):
    project = make_project(tmp_path / "project")
    before = snapshot(project)
    check = run("--check", str(project / "train.py"))
    assert check.exit_code == EXIT_FINDINGS
    assert "engine.py" in check.output and "train.py" in check.output
    diff = run("--diff", str(project / "train.py"))
    assert diff.exit_code == EXIT_OK
    headers = [line for line in diff.output.splitlines() if line.startswith("+++ ")]
    assert [header.rsplit("/", 1)[-1] for header in headers] == ["train.py", "engine.py"]  # each file named
    assert snapshot(project) == before


def test_a_set_cannot_go_to_stdout_or_to_one_file(tmp_path: Path):
    project = make_project(tmp_path / "project")
    to_stdout = run(str(project / "train.py"))
    assert to_stdout.exit_code == EXIT_USAGE
    assert "engine.py" in to_stdout.output and "-o DIR/" in to_stdout.output
    one_file = run(str(project / "train.py"), "-o", str(tmp_path / "converted.py"))
    assert one_file.exit_code == EXIT_USAGE and "must be a folder" in one_file.output
    assert not (tmp_path / "converted.py").exists()


def test_a_script_whose_local_modules_do_not_use_torch_converts_alone(tmp_path: Path):
    plain = "def train_epoch(*args):\n    return None\n\n\ndef build():\n    return None\n"
    project = make_project(tmp_path / "project", engine=plain, model=plain)
    result = run(str(project / "train.py"))
    assert result.exit_code == EXIT_OK
    assert "Accelerator()" in result.output  # the script itself, on stdout as before


def test_a_broken_module_fails_the_set_and_writes_nothing(tmp_path: Path):
    project = make_project(tmp_path / "project", engine=ENGINE + "def broken(:\n")
    out = tmp_path / "out"
    result = run(str(project / "train.py"), "-o", f"{out}/")
    assert result.exit_code == EXIT_FAILED
    assert "engine.py" in result.output and "syntax error" in result.output
    assert not out.exists() or snapshot(out) == {}


def test_a_library_two_entries_need_converted_differently_is_reported_not_guessed(tmp_path: Path):
    project = make_project(
        tmp_path / "project",
        evaluate="""\
        import torch

        import engine


        def main():
            engine.train_epoch(torch.nn.Linear(4, 1), [], None)


        if __name__ == "__main__":
            main()
        """,
    )
    out = tmp_path / "out"
    result = run(str(project), "-o", str(out))
    assert result.exit_code == EXIT_FAILED
    assert "engine.py" in result.output and "need different conversions" in result.output
    assert not (out / "engine.py").exists() and not (out / "train.py").exists()


def test_into_a_folder_a_local_module_without_torch_is_written_too(tmp_path: Path):
    # The converted entry still imports it: without it in out/, `python out/train.py` fails.
    plain = "def build_loaders():\n    return None\n\n\ndef train_epoch(*args):\n    return None\n"
    project = make_project(tmp_path / "project", engine=plain, model=plain)
    out = tmp_path / "out"
    result = run(str(project / "train.py"), "-o", f"{out}/")
    assert result.exit_code == EXIT_OK, result.output
    assert sorted(path.name for path in out.iterdir() if path.suffix == ".py") == sorted(
        path.name for path in project.iterdir() if path.suffix == ".py"
    )
    assert (out / "engine.py").read_text() == plain


def test_the_retry_is_added_to_the_entry_and_its_libraries_get_no_warning(tmp_path: Path):
    """--oom-retry on a program: the entry's training code is retried; its modules without
    training code of their own (the model, the epoch loop it calls) are not each warned that
    there is nothing to retry there (ACC917 on every library module before)."""
    project = make_project(tmp_path / "project")
    result = run(str(project), "--diff", "--oom-retry", "-v")
    assert result.exit_code == EXIT_OK, result.output  # no warning left for a person
    assert "train.py:" in result.output and "ACC117" in result.output
    assert "ACC917" not in result.output, result.output


GPU_ENGINE = """\
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, gpu):
        super().__init__()
        self.gpu = gpu
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


def build(gpu):
    return Net(gpu)


def train(model, loader, optimizer, epochs, gpu):
    for epoch in range(epochs):
        for x, y in loader:
            x, y = x.cuda(gpu), y.to(gpu)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
"""

GPU_TRAIN = """\
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

import engine

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, default=None)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
torch.manual_seed(0)
if args.gpu is not None:
    torch.cuda.set_device(args.gpu)
model = engine.build(args.gpu)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
engine.train(model, loader, optimizer, args.epochs, args.gpu)
"""


def test_a_gpu_index_handed_to_another_module_is_followed_there_or_reported_at_the_call(tmp_path: Path):
    """``--gpu`` given to ``torch.cuda.set_device`` and handed on: ``engine.train`` moves the batches
    to it (followed there: the moves go, the call is not reported), ``engine.build`` passes it on
    to ``Net(gpu)``, which nobody follows (reported at the call, ACC924). ``args.epochs``, another
    ``int`` option, is no GPU for ``range(epochs)``."""
    project = make_project(tmp_path / "project", train=GPU_TRAIN, engine=GPU_ENGINE)
    out = tmp_path / "out"
    result = run(str(project / "train.py"), "-o", f"{out}/")
    assert result.exit_code in (EXIT_OK, EXIT_FINDINGS), result.output
    engine = (out / "engine.py").read_text()
    assert ".cuda(" not in engine and ".to(gpu)" not in engine
    reported = [line for line in result.output.splitlines() if "ACC924" in line]
    assert len(reported) == 1 and reported[0].startswith(f"{project / 'train.py'}:15:"), result.output


TRAINER = """\
import torch.nn.functional as F


class Trainer:
    def __init__(self, model, loader, optimizer, gpu_id):
        self.gpu_id = gpu_id
        self.model = model.to(gpu_id)
        self.loader, self.optimizer = loader, optimizer

    def train(self, epochs):
        for epoch in range(epochs):
            for source, targets in self.loader:
                source, targets = source.to(self.gpu_id), targets.to(self.gpu_id)
                self.optimizer.zero_grad()
                F.mse_loss(self.model(source), targets).backward()
                self.optimizer.step()
"""

TRAINER_ENTRY = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer

loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
Trainer(model, loader, optimizer, 0).train(2)
"""


def test_an_integer_gpu_given_to_another_modules_class_is_followed_to_its_moves(tmp_path: Path):
    """The DDP tutorial's ``Trainer(model, ..., 0)`` from another module: ``model.to(gpu_id)`` and
    ``source.to(self.gpu_id)`` there would put every rank on GPU 0; the moves go (``prepare``
    places the model and the batches on each process's device)."""
    project = make_project(tmp_path / "project", train=TRAINER_ENTRY, trainer=TRAINER)
    out = tmp_path / "out"
    result = run(str(project / "train.py"), "-o", f"{out}/")
    assert result.exit_code == EXIT_OK, result.output
    trainer = (out / "trainer.py").read_text()
    assert "self.model = model\n" in trainer and ".to(" not in trainer, trainer


LIBRARY_TRAINER = """\
import torch.nn.functional as F


class Trainer:
    def __init__(self, model, loader, lr, device):
        self.model, self.loader, self.device = model, loader, device
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                x, y = x.to(self.device), y.to(self.device)
                self.optimizer.zero_grad()
                F.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
"""

_LIBRARY_IMPORTS = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer

"""

_EXPERIMENT_CLASS = (
    _LIBRARY_IMPORTS
    + """
class Experiment:
    def __init__(self, lr):
        self.lr = lr
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
        self.model = torch.nn.Linear(4, 1).to(self.device)

    def run(self):
        Trainer(self.model, self.loader, self.lr, self.device).fit(2)
"""
)

_RUNS_THE_EXPERIMENT = """\
from experiment import run_experiment

if __name__ == "__main__":
    run_experiment(0.1)
"""

#: An experiment module that builds the model and the data and trains them with ``trainer.py``
#: (as a class, a function, module-level code), run by an entry script that builds nothing; and
#: what is reported: what needs the accelerator (ACC904), or, where the conversion would make the
#: library's own call of the class miss its new ``accelerator`` argument, the file left as
#: written (ACC937).
LIBRARY_EXPERIMENTS = {
    "class": (
        _EXPERIMENT_CLASS,
        'from experiment import Experiment\n\nif __name__ == "__main__":\n    Experiment(0.1).run()\n',
        "ACC904",
    ),
    "class built in the library": (
        _EXPERIMENT_CLASS + "\n\ndef run_experiment(lr):\n    Experiment(lr).run()\n",
        _RUNS_THE_EXPERIMENT,
        "ACC937",
    ),
    "function": (
        _LIBRARY_IMPORTS
        + """
def run_experiment(lr):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1).to(device)
    Trainer(model, loader, lr, device).fit(2)
""",
        _RUNS_THE_EXPERIMENT,
        "ACC904",
    ),
    "module level": (
        _LIBRARY_IMPORTS
        + """
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(4, 1).to(device)


def run_experiment(lr):
    Trainer(model, loader, lr, device).fit(2)
""",
        _RUNS_THE_EXPERIMENT,
        "ACC904",
    ),
}


@pytest.mark.parametrize("shape", sorted(LIBRARY_EXPERIMENTS))
def test_a_library_the_accelerator_does_not_reach_keeps_its_moves(tmp_path: Path, shape: str):
    """The entry script only runs an experiment of another module, which builds and trains (with
    a trainer of a third module): nothing there can be prepared, since no accelerator reaches it.
    Its model keeps its move to the device (removed, the model would stay on the CPU while the
    trainer moves the batches to the GPU), and what is left to a person is reported."""
    experiment, entry, reported = LIBRARY_EXPERIMENTS[shape]
    project = make_project(
        tmp_path / "project", train=entry, experiment=experiment, trainer="import torch\n" + LIBRARY_TRAINER
    )
    out = tmp_path / "out"
    result = run(str(project / "train.py"), "-o", f"{out}/")
    assert result.exit_code in (EXIT_OK, EXIT_FINDINGS), result.output
    assert "torch.nn.Linear(4, 1).to(" in (out / "experiment.py").read_text()
    assert reported in result.output, result.output
