"""``accel-convert nb.ipynb --launcher``: training written at a notebook's top level becomes one
``training_function()`` cell and a ``notebook_launcher`` cell (converter.launcher_cells); a
notebook that cannot be restructured safely keeps its usual conversion and says why."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

from accel_convert.codemods import Options
from accel_convert.converter.notebook_dispatch import convert_notebook
from tests.launching import REPO_ROOT, free_port
from tests.test_notebooks import FIXTURE, cli, notebook_bytes, run_in_kernel

TUTORIAL = REPO_ROOT / "fixtures" / "notebooks" / "quickstart_toplevel.ipynb"
LAUNCHER = Options(launcher_processes=2)


def cells_of(data: bytes) -> list[Any]:
    return list(nbformat.reads(data.decode(), as_version=4).cells)


def launcher_warnings(conversion: Any) -> list[str]:
    return [change.message for change in conversion.changes if change.code == "notebook-launcher"]


def test_tutorial_training_becomes_one_function_and_a_launcher_cell() -> None:
    source = TUTORIAL.read_bytes()
    conversion = convert_notebook(source, LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    before = {cell.id: cell for cell in cells_of(source)}
    after = cells_of(conversion.output)
    ids = [cell.id for cell in after]
    # Imports and data stay; the definitions stay where they were, and so do the plain values of
    # the training cells (`batch_size = 16`, `loss_fn`, `epochs = 2`: the workers are forks of the
    # kernel); the rest of cells 5, 7, 8, 12 and 13 (the save reads the trained model) is gone
    # into the function.
    assert ids == [
        "cell-1", "cell-2", "cell-3", "cell-4", "cell-5", "cell-6", "cell-7", "cell-8", "cell-9", "cell-10",
        "cell-11", "cell-12", "training-function", "notebook-launcher", "cell-14", "cell-15",
    ]  # fmt: skip
    assert after[3].source == before["cell-4"].source  # the data cell: nothing to convert
    assert [after[4].source, after[7].source, after[11].source] == [
        "batch_size = 16",
        "loss_fn = nn.CrossEntropyLoss()",
        "epochs = 2",
    ]
    assert after[6].source.startswith("class NeuralNetwork(nn.Module):") and "model =" not in after[6].source
    assert after[6].outputs == []  # its outputs came from the statements that moved
    function = after[12].source
    assert function.splitlines()[:3] == [
        "# Cells 5-13 as one function: notebook_launcher runs it in every process.",
        "def training_function():",
        "    accelerator = Accelerator()",
    ]
    assert "    model, optimizer, train_dataloader, test_dataloader = accelerator.prepare(" in function
    assert "        train(train_dataloader, model, loss_fn, optimizer, accelerator)" in function
    assert '    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pth")' in function
    assert not re.search(r"(?m)^[ \t]+$", function)  # blank lines carry no indentation
    assert "gather_for_metrics" in after[9].source  # the evaluation helper gathers every sample
    assert after[13].source == (
        "from accel_convert.runtime import notebook_launcher\n\nnotebook_launcher(training_function, num_processes=2)"
    )
    assert "accelerator" not in after[15].source  # after the launch: the kernel's own process
    nbformat.validate(nbformat.reads(conversion.output.decode(), as_version=4))
    # Converting the result again (with or without --launcher) changes nothing.
    for options in (LAUNCHER, Options()):
        again = convert_notebook(conversion.output, options, path="nb.ipynb")
        assert again.output == conversion.output and not launcher_warnings(again)


def test_num_processes_and_target_name_the_launcher() -> None:
    conversion = convert_notebook(
        TUTORIAL.read_bytes(), Options(launcher_processes=8, target="accelerate"), path="nb.ipynb"
    )
    launcher = next(cell for cell in cells_of(conversion.output) if cell.get("id") == "notebook-launcher")
    assert launcher.source == (
        "from accelerate import notebook_launcher\n\nnotebook_launcher(training_function, num_processes=8)"
    )


#: Training across three cells, then a cell that reads nothing of it and one that does.
CELLS = (
    "%matplotlib inline\nimport torch\ndata = torch.randn(8, 2)",
    "model = torch.nn.Linear(2, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
    "loader = torch.utils.data.DataLoader(data, batch_size=2)",
    "for x in loader:\n    %time loss = model(x).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()",
    "print('labels', ['a', 'b'])",
    "print(model.weight)",
)


def test_cells_after_training_move_in_only_with_what_they_read() -> None:
    conversion = convert_notebook(notebook_bytes(*CELLS), LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    cells = cells_of(conversion.output)
    assert [cell.id for cell in cells] == ["c1", "training-function", "notebook-launcher"]
    function = cells[1].source
    # The cell between moves in with the one reading the model (their order is kept); the
    # IPython lines stay as written, indented with the code around them.
    assert function.index("print('labels'") < function.index("print(accelerator.unwrap_model(model).weight)")
    assert "        %time loss = model(x).sum()" in function and "%matplotlib inline\nimport torch" in cells[0].source
    assert "    model, opt, loader = accelerator.prepare(model, opt, loader)" in function


def test_the_kernels_cells_keep_their_prints_and_stay_unless_they_read_what_moves() -> None:
    """The top level of a restructured notebook is the kernel, one process: a print there, in a
    cell of settings before the function or after the launch, prints once as written (it was kept
    to ``RANK`` 0, as a script's module-level print run by every process). And a later cell
    reading only what stays in the kernel (``batch_size``, ``data``) stays after the launch: it
    was moved into the function with every cell before it."""
    source = notebook_bytes(
        "import torch\ndata = torch.randn(8, 2)",
        "batch_size = 2\nprint('samples', len(data))\nloader = torch.utils.data.DataLoader(data, batch_size=batch_size)",
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "for x in loader:\n    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step()",
        "print('labels', ['a', 'b'])",
        "print('batches of', batch_size, 'from', data.shape)",
    )
    conversion = convert_notebook(source, LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    cells = cells_of(conversion.output)
    assert [cell.id for cell in cells] == ["c1", "c2", "training-function", "notebook-launcher", "c5", "c6"]
    assert cells[1].source == "batch_size = 2\nprint('samples', len(data))"
    assert [cells[4].source, cells[5].source] == [
        "print('labels', ['a', 'b'])",
        "print('batches of', batch_size, 'from', data.shape)",
    ]
    assert "RANK" not in conversion.output.decode() and "import os" not in cells[0].source


def notebook_of(*cells: tuple[str, str]) -> bytes:
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
            for kind, source in cells
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    for number, cell in enumerate(notebook.cells, start=1):
        cell["id"] = f"c{number}"
    return (nbformat.writes(notebook) + "\n").encode()


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (FIXTURE.read_bytes(), "the training is already in train: launch it with notebook_launcher(train"),
        (
            notebook_bytes(CELLS[0], CELLS[1], CELLS[2], "%%time\nprint(1)", CELLS[3]),
            "a cell magic (%%...) sits among the training cells",
        ),
        # A helper reading the training's optimizer as a global: inside the function it is a local.
        (
            notebook_bytes(
                CELLS[0],
                CELLS[1],
                CELLS[2],
                "def step(loss):\n    opt.zero_grad()\n    loss.backward()\n    opt.step()",
                "for x in loader:\n    step(model(x.cuda()).sum())",
            ),
            "restructured, 'opt' would be read in step before it is bound",
        ),
        (notebook_bytes("import torch\nx = torch.ones(2)"), "no model, optimizer or DataLoader"),
    ],
    ids=["already-a-function", "cell-magic", "helper-reads-a-training-local", "no-training"],
)
def test_what_cannot_be_restructured_is_converted_as_it_is_and_said(source: bytes, reason: str) -> None:
    conversion = convert_notebook(source, LAUNCHER, path="nb.ipynb")
    (warning,) = launcher_warnings(conversion)
    assert warning.startswith(f"not restructured for notebook_launcher: {reason}"), warning
    assert conversion.output == convert_notebook(source, Options(), path="nb.ipynb").output


def test_cli_launcher(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    refused = cli(str(script), "--launcher")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"accel-convert: error: --launcher restructures Jupyter notebooks (.ipynb), not {script}: a script is "
        "launched with accel-launch or torchrun"
    ]
    assert cli(str(TUTORIAL), "--num-processes", "2").returncode == 2  # only with --launcher
    written = cli(str(TUTORIAL), "--launcher", "--num-processes", "3", "-o", str(tmp_path / "out.ipynb"))
    assert written.returncode == 0, written.stderr
    assert "num_processes=3)" in (tmp_path / "out.ipynb").read_text()
    shown = TUTORIAL.relative_to(REPO_ROOT)
    diff = cli(str(shown), "--launcher", "--diff", cwd=REPO_ROOT)
    assert diff.returncode == 0, diff.stderr
    # One diff per cell: changed cells by their number on each side (a cell keeping its settings
    # too), the cells whose code moved into the function removed, the function and the launcher
    # cells new; unchanged cells left out.
    headers = [line for line in diff.stdout.splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers[:4] == [
        f"--- a/{shown}:cell 2",
        f"+++ b/{shown}:cell 2",
        f"--- a/{shown}:cell 5",
        f"+++ b/{shown}:cell 5",
    ]
    assert f"--- a/{shown}:cell 13\n+++ /dev/null\n" in diff.stdout  # the save: all in the function
    assert f"--- /dev/null\n+++ b/{shown}:cell 13\n@@ -0,0 +1,30 @@\n+# Cells 5-13" in diff.stdout
    assert f"--- /dev/null\n+++ b/{shown}:cell 14\n" in diff.stdout  # the launcher cell
    assert f"{shown}:cell 15\n" not in diff.stdout  # moved down, its print in the kernel as written
    assert f"{shown}:cell 4\n" not in diff.stdout and "No newline at end of file" not in diff.stdout
    assert "+def training_function():\n" in diff.stdout
    unchanged = cli(str(FIXTURE), "--launcher", "--check")
    assert (
        f"{FIXTURE}:cell 6:1:1: notebook-launcher not restructured for notebook_launcher: the training is already in train"
        in (unchanged.stderr)
    )


# -- a real kernel -------------------------------------------------------------------------------


def accuracy_lines(notebook: Any) -> list[tuple[int, int]]:
    text = "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", []))
    return [(int(correct), int(seen)) for correct, seen in re.findall(r"Test: Accuracy: (\d+)/(\d+)", text)]


def test_launched_evaluation_counts_every_sample_as_one_process_does(tmp_path: Path) -> None:
    """The tutorial run as written in one kernel process, and converted with --launcher and run on
    2 CPU processes forked from a kernel: each epoch's evaluation counts all 200 test samples,
    printed once (not 100 per process, nor 2 lines)."""
    original = run_in_kernel(nbformat.read(TUTORIAL, as_version=4), tmp_path)
    expected = accuracy_lines(original)
    assert [seen for _, seen in expected] == [200, 200]

    converted = tmp_path / "launched.ipynb"
    result = cli(str(TUTORIAL), "--launcher", "-o", str(converted))
    assert result.returncode == 0, result.stderr
    notebook = nbformat.read(converted, as_version=4)
    launcher = next(cell for cell in notebook.cells if cell.get("id") == "notebook-launcher")
    launcher.source = launcher.source.replace("num_processes=2)", f"num_processes=2, use_port={free_port()})")
    launched = run_in_kernel(notebook, tmp_path)
    output = "".join(output.get("text", "") for output in launched.cells[notebook.cells.index(launcher)].outputs)
    assert "Launching training on 2 CPUs." in output
    counts = accuracy_lines(launched)
    assert [seen for _, seen in counts] == [200, 200], output
    # Every sample once: the gathered predictions of the well-separated data are as good.
    assert all(correct >= 0.9 * seen for correct, seen in counts), counts
    assert (tmp_path / "model.pth").is_file()  # saved once, from the main process


def test_an_older_notebook_gets_no_cell_ids_and_comment_cells_stay() -> None:
    data = json.loads(notebook_bytes(CELLS[0], CELLS[1], "# just a note", CELLS[2], CELLS[3]))
    data["nbformat_minor"] = 4
    for cell in data["cells"]:
        del cell["id"]
    conversion = convert_notebook(json.dumps(data, indent=1).encode(), LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    converted = json.loads(conversion.output)
    assert all("id" not in cell for cell in converted["cells"]) and converted["nbformat_minor"] == 4
    sources = ["".join(cell["source"]) for cell in converted["cells"]]
    assert sources[1] == "# just a note" and sources[2].startswith("# Cells 2-5 as one function")
    nbformat.validate(nbformat.reads(conversion.output.decode(), as_version=4))


def test_training_under_a_main_guard_is_not_restructured() -> None:
    source = notebook_bytes(
        CELLS[0],
        "if __name__ == '__main__':\n    "
        + "\n    ".join((CELLS[1] + "\n" + CELLS[2]).splitlines())
        + "\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        opt.step()",
    )
    (warning,) = launcher_warnings(convert_notebook(source, LAUNCHER, path="nb.ipynb"))
    assert "the training runs under if __name__ ==" in warning


# -- settings read as globals ---------------------------------------------------------------------

#: Notebooks of a course's shape: a settings cell binds hyperparameters (and the device) next to
#: the data and the loaders, and definitions read them as globals. Per notebook: the cell that
#: keeps the settings and the data (index in the converted notebook, how its source starts) and
#: a line of the function.
SETTINGS_NOTEBOOKS = {
    # A model class reads the architecture's sizes; an evaluation helper reads the device. The
    # cell's banner stays with the settings; the comment above the device moves with it.
    "settings_mlp": (
        3,
        "##########################\n### SETTINGS\n##########################\n\n# Hyperparameters\n"
        "random_seed = 1\nlearning_rate = 0.5\nnum_epochs = 2\nbatch_size = 16\n\n# Architecture\n"
        "num_features = 8\nnum_hidden_1 = 32\n",
        "    # Device\n    device = accelerator.device\n",
    ),
    # A helper makes a tensor on the device: each process binds its own device as a global.
    "settings_device_helper": (
        2,
        "batch_size = 16\nepochs = 2\nlr = 0.5\n\ngenerator = ",
        "    # The definitions above read these as globals: each process binds its own.\n    global device\n",
    ),
    # Settings over several cells: a namespace of hyperparameters (read by a class), data sets
    # built by a function, a print of their size; a count of the loader's batches.
    "settings_spread_cells": (
        4,
        "# Hyperparameters, as argparse would give them\nargs = SimpleNamespace(hidden=32, lr=0.5, epochs=2, batch_size=16)\n\n"
        "generator = torch.Generator().manual_seed(0)\ntrain_dataset = make_dataset(256, generator)",
        "    steps_per_epoch = len(train_loader)\n",
    ),
    # A class reads its sizes from a dict of settings.
    "settings_config_dict": (
        2,
        'config = {"hidden": 32, "lr": 0.5, "epochs": 2, "batch_size": 16}\n\ngenerator = ',
        "    model = Classifier()\n",
    ),
}


def settings_notebook(name: str) -> Path:
    return REPO_ROOT / "fixtures" / "notebooks" / f"{name}.ipynb"


@pytest.mark.parametrize("name", sorted(SETTINGS_NOTEBOOKS))
def test_settings_read_as_globals_stay_at_the_top_level(name: str) -> None:
    source = settings_notebook(name).read_bytes()
    conversion = convert_notebook(source, LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    cells = cells_of(conversion.output)
    kept_index, kept_source, function_line = SETTINGS_NOTEBOOKS[name]
    assert cells[kept_index].source.startswith(kept_source)
    function = next(cell.source for cell in cells if cell.get("id") == "training-function")
    assert function_line in function
    # What each process makes is made in the function, not in the kernel.
    for made in ("DataLoader(", "optimizer = torch.optim.SGD(", "accelerator.prepare("):
        assert made in function and all(made not in cell.source for cell in cells if cell.source != function)
    # The data is the same in every process: made once, in the kernel, before the fork.
    for data in ("generator = torch.Generator()", "train_dataset = "):
        assert data in cells[kept_index].source and data not in function
    nbformat.validate(nbformat.reads(conversion.output.decode(), as_version=4))
    again = convert_notebook(conversion.output, LAUNCHER, path="nb.ipynb")
    assert again.output == conversion.output and not launcher_warnings(again)


@pytest.mark.parametrize("name", sorted(SETTINGS_NOTEBOOKS))
def test_settings_notebooks_train_on_two_processes_from_a_kernel(name: str, tmp_path: Path) -> None:
    """Converted with --launcher and run in a real kernel on 2 CPU processes: each epoch's
    evaluation counts all 200 test samples (each rank's 100, gathered), printed once."""
    converted = tmp_path / "launched.ipynb"
    result = cli(str(settings_notebook(name)), "--launcher", "-o", str(converted))
    assert result.returncode == 0, result.stderr
    notebook = nbformat.read(converted, as_version=4)
    launcher = next(cell for cell in notebook.cells if cell.get("id") == "notebook-launcher")
    launcher.source = launcher.source.replace("num_processes=2)", f"num_processes=2, use_port={free_port()})")
    launched = run_in_kernel(notebook, tmp_path)
    output = "".join(output.get("text", "") for output in launched.cells[notebook.cells.index(launcher)].outputs)
    assert "Launching training on 2 CPUs." in output
    counts = accuracy_lines(launched)
    assert [seen for _, seen in counts] == [200, 200], output
    assert all(correct >= 0.8 * seen for correct, seen in counts), counts  # every sample once, and learnt


def test_plain_values_stay_in_the_kernel_and_what_each_process_makes_moves_in() -> None:
    """Settings over several cells: the plain values and the data (same in every process) stay
    in their cells, in order, with their comments; the device, the loaders, the model, the
    optimizer and what reads them (a count of the loader's batches) move into the function."""
    conversion = convert_notebook(settings_notebook("settings_spread_cells").read_bytes(), LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    cells = {cell.id: cell.source for cell in cells_of(conversion.output)}
    assert cells["cell-5"] == (
        "# Hyperparameters, as argparse would give them\n"
        "args = SimpleNamespace(hidden=32, lr=0.5, epochs=2, batch_size=16)\n\n"
        "generator = torch.Generator().manual_seed(0)\n"
        "train_dataset = make_dataset(256, generator)"
    )
    # The print reads only values made in the kernel: it runs there, once, before the launch.
    assert cells["cell-7"].startswith("test_size = 200\ntest_dataset = make_dataset(test_size, generator)\n") and cells[
        "cell-7"
    ].endswith('print("test samples:", len(test_dataset))')
    assert "test_loader" not in cells["cell-7"] and "device" not in cells["cell-5"]
    assert cells["cell-9"].startswith("class Net(torch.nn.Module):") and "model" not in cells["cell-9"]
    function = cells["training-function"]
    for made in (
        "    train_loader = DataLoader(train_dataset, batch_size=args.batch_size)\n",
        "    test_loader = DataLoader(test_dataset, batch_size=args.batch_size)\n",
        "    model = Net()\n",
        "    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)\n",
        "    steps_per_epoch = len(train_loader)\n",
    ):
        assert made in function
    for value in ("args =", "generator =", "make_dataset(", "test_size =", "test samples"):
        assert value not in function


def test_a_value_the_function_rebinds_or_changes_moves_in_with_what_reads_it() -> None:
    """What stays must not depend on what moves: a value read after the function changed it in
    place, a value the function reads before rebinding it, and one bound again after a moving
    statement read it move in; the values before stay, argparse-like settings too."""
    cells = restructured_cells(
        "import argparse\nimport torch",
        "parser = argparse.ArgumentParser()\nparser.add_argument('--scale', type=int, default=2)\n"
        "scale = parser.parse_args([]).scale\nfeatures = torch.ones(8, 2)\nloader = torch.utils.data.DataLoader(features, batch_size=2)\n"
        "features.mul_(scale)\ntotal = features.sum()\nlr = 0.1\nmodel = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=lr)\nlr = lr / 2\nhidden = 4\nprint(hidden)",
        "for x in loader:\n    loss = model(x).sum() * total\n    opt.zero_grad()\n    loss.backward()\n    opt.step()",
    )
    kept = cells[1].source
    assert kept.startswith(
        "parser = argparse.ArgumentParser()\nparser.add_argument('--scale', type=int, default=2)\n"
        "scale = parser.parse_args([]).scale\nfeatures = torch.ones(8, 2)\nhidden = 4\n"
    ) and kept.endswith("print(hidden)")
    function = cells[2].source
    for moved in ("    features.mul_(scale)\n", "    total = features.sum()\n", "    lr = 0.1\n", "    lr = lr / 2\n"):
        assert moved in function


def restructured_cells(*sources: str) -> list[Any]:
    """The cells of a notebook of ``sources`` converted with --launcher (restructured: no warning)."""
    conversion = convert_notebook(notebook_bytes(*sources), LAUNCHER, path="nb.ipynb")
    assert not launcher_warnings(conversion)
    return cells_of(conversion.output)


def test_a_tracker_and_a_tensor_moved_to_the_gpu_are_made_in_each_process() -> None:
    """Plain assignments that must not run in the kernel: a tracker (one per process, logging
    from the main one) and a tensor moved to the GPU (CUDA must not start before the fork)."""
    cells = restructured_cells(
        "import torch\nfrom torch.utils.tensorboard import SummaryWriter",
        "writer = SummaryWriter()\nweights = torch.ones(2).cuda()\nsize = 4\n"
        "loader = torch.utils.data.DataLoader(torch.ones(8, 2), batch_size=size)\n"
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "for x in loader:\n    loss = model(x).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
        "    writer.add_scalar('loss', loss.item())",
    )
    assert cells[1].source == "size = 4"
    assert "    writer = SummaryWriter(" in cells[2].source and "    weights = torch.ones(2)" in cells[2].source


def test_a_notebook_diff_names_each_changed_cell_and_leaves_out_the_others(tmp_path: Path) -> None:
    (tmp_path / "train.ipynb").write_bytes(
        notebook_bytes(
            "import torch\nfrom torch.utils.data import DataLoader",
            "labels = ['negative', 'positive']\nsizes = (4, 1)",
            "model = torch.nn.Linear(*sizes)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "loader = DataLoader(torch.ones(64, 4), batch_size=8)\n"
            "for x in loader:\n    loss = model(x).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()",
        )
    )
    diff = cli("train.ipynb", "--diff", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    headers = [line for line in diff.stdout.splitlines() if line.startswith(("--- ", "+++ ", "@@"))]
    assert headers == [
        "--- a/train.ipynb:cell 1",
        "+++ b/train.ipynb:cell 1",
        "@@ -1,2 +1,3 @@",
        "--- a/train.ipynb:cell 3",
        "+++ b/train.ipynb:cell 3",
        "@@ -1,8 +1,10 @@",
    ]
    assert "+from accel_convert.runtime import Accelerator\n" in diff.stdout
    assert "-    loss.backward()\n+    accelerator.backward(loss)\n" in diff.stdout
    assert "labels" not in diff.stdout and "No newline at end of file" not in diff.stdout
    assert cli("train.ipynb", "--diff", "--check", cwd=tmp_path).returncode == 1  # would change
    assert (tmp_path / "train.ipynb").read_bytes() == notebook_bytes(
        "import torch\nfrom torch.utils.data import DataLoader",
        "labels = ['negative', 'positive']\nsizes = (4, 1)",
        "model = torch.nn.Linear(*sizes)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(torch.ones(64, 4), batch_size=8)\n"
        "for x in loader:\n    loss = model(x).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()",
    )  # --diff writes nothing


def test_a_setting_stays_with_what_it_is_computed_from_and_a_per_process_value_is_declared_global() -> None:
    cells = restructured_cells(
        "import torch\ndata = torch.ones(8, 2)",
        "base = 4\nhidden = 2 * base\nloader = torch.utils.data.DataLoader(data, batch_size=2)\nsteps = len(loader)",
        "def progress(step):\n    return f'{step}/{steps}'\n\n"
        "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.layer = torch.nn.Linear(2, hidden)\n\n    def forward(self, x):\n        return self.layer(x)",
        "model = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor i, x in enumerate(loader):\n"
        "    loss = model(x).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n    print(progress(i))",
    )
    # `hidden` (read by Net) stays with `base`, which it is computed from; `steps` counts the
    # loader's batches, made per process: bound in the function, declared global for progress().
    assert cells[1].source == "base = 4\nhidden = 2 * base"
    function = cells[3].source
    assert "    global steps\n" in function and "    steps = len(loader)\n" in function
    assert "base = 4" not in function and "hidden =" not in function
