"""Several branches of the home block each binding and training a model (``if args.big: model =
Big() ... else: model = Small() ...``, an ``if``/``elif``/``else`` chain, a ``try`` block): the plan
reads each such branch on its own, from the state before the statement, so each gets its own
``model, optimizer = accelerator.prepare(model, optimizer)`` after its binding, and a loader built
before the statement is prepared once, before it. Before, a single branch was opened only where it
was the only one: with two, the model was prepared after the ``if`` (trained unsynchronised on each
process over the sharded loader), and in an ``elif`` chain only the first branch was."""

from __future__ import annotations

import textwrap

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import Conversion, convert_source

HEADER = """\
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

"""

ARGS = """\
parser = argparse.ArgumentParser()
parser.add_argument("--arch", default="small")
args = parser.parse_args()
"""

LOADER = "loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=8)\n"


def _training(model: str) -> str:
    return f"""\
model = {model}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


def _branches(*openings: str, body: str = "") -> str:
    """An ``if`` chain (or any compound statement) whose branches each build and train a model."""
    models = ["nn.Linear(8, 2)", "nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))", "nn.Bilinear(8, 8, 2)"]
    parts = []
    for opening, model in zip(openings, models, strict=False):
        parts.append(opening + "\n" + textwrap.indent(body + _training(model), "    "))
    return "".join(parts)


def _script(block: str, where: str) -> str:
    tail = 'print("done")\n'
    if where == "module":
        return HEADER + ARGS + block + tail
    if where == "main guard":
        return HEADER + 'if __name__ == "__main__":\n' + textwrap.indent(ARGS + block + tail, "    ")
    return (
        HEADER
        + "\ndef main():\n"
        + textwrap.indent(ARGS + block + tail, "    ")
        + '\n\nif __name__ == "__main__":\n    main()\n'
    )


IF_ELSE = ("if args.arch == 'big':", "else:")
ELIF_CHAIN = ("if args.arch == 'big':", "elif args.arch == 'wide':", "else:")

SHAPES = {
    "if/else, module": (IF_ELSE, "module"),
    "if/else, function": (IF_ELSE, "function"),
    "if/else, main guard": (IF_ELSE, "main guard"),
    "if/elif/else, function": (ELIF_CHAIN, "function"),
    "if/elif/else, module": (ELIF_CHAIN, "module"),
    "if/elif without else, function": (ELIF_CHAIN[:2], "function"),
}


def _convert(source: str) -> Conversion:
    return convert_source(source.encode(), Options(), path="train.py")


def _assert_stable(text: str) -> None:
    assert _convert(text).output.decode() == text


def _prepares_after_each_optimizer(lines: list[str], branches: int) -> None:
    """Each branch's ``model, optimizer`` prepare right after its optimizer, before its loop."""
    prepares = [index for index, line in enumerate(lines) if line.strip() == PREPARED]
    assert len(prepares) == branches, lines
    for index in prepares:
        assert lines[index - 1].lstrip().startswith("optimizer = torch.optim.SGD"), lines[index - 1]
        assert lines[index + 1].lstrip() == "for x, y in loader:"
        indent = len(lines[index + 1]) - len(lines[index + 1].lstrip())
        assert len(lines[index]) - len(lines[index].lstrip()) == indent  # inside the branch


PREPARED = "model, optimizer = accelerator.prepare(model, optimizer)"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_branch_training_a_model_prepares_it(shape: str) -> None:
    openings, where = SHAPES[shape]
    result = _convert(_script(LOADER + _branches(*openings), where))
    text = result.output.decode()
    lines = text.splitlines()
    _prepares_after_each_optimizer(lines, len(openings))
    # The loader built before the ``if`` is prepared once, before it: a second prepare of the
    # same loader would shard it twice.
    loader_prepares = [line.strip() for line in lines if "accelerator.prepare(" in line and "loader" in line]
    assert loader_prepares == ["loader = accelerator.prepare(loader)"]
    loader_line = next(i for i, line in enumerate(lines) if line.strip() == "loader = accelerator.prepare(loader)")
    first_if = next(i for i, line in enumerate(lines) if line.lstrip().startswith("if args.arch"))
    assert loader_line < first_if
    assert not [change for change in result.changes if change.code == "ACC926"]
    _assert_stable(text)


def test_branches_building_their_own_loaders_prepare_each_where_it_is_built() -> None:
    block = _branches(*IF_ELSE, body=LOADER)
    text = _convert(_script(block, "function")).output.decode()
    lines = text.splitlines()
    _prepares_after_each_optimizer(lines, 2)
    assert [line.strip() for line in lines].count("loader = accelerator.prepare(loader)") == 2
    _assert_stable(text)


def test_a_try_block_binding_and_training_a_model_prepares_it_inside() -> None:
    block = LOADER + "try:\n" + textwrap.indent(_training("nn.Linear(8, 2)"), "    ")
    block += "except KeyboardInterrupt:\n    print('stopped')\n"
    text = _convert(_script(block, "function")).output.decode()
    lines = text.splitlines()
    _prepares_after_each_optimizer(lines, 1)
    _assert_stable(text)


def test_branches_handing_the_model_to_a_training_function_prepare_it_before_the_call() -> None:
    train = textwrap.dedent(
        """\
        def train(model, loader, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()

        """
    )
    block = LOADER
    for opening, model in zip(IF_ELSE, ["nn.Linear(8, 2)", "nn.Sequential(nn.Linear(8, 2))"], strict=True):
        block += f"{opening}\n    model = {model}\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        block += "    for epoch in range(2):\n        train(model, loader, optimizer)\n"
    source = _script(block, "function").replace("\ndef main():", train + "\ndef main():")
    result = _convert(source)
    text = result.output.decode()
    assert text.count(PREPARED) == 2
    assert not [change for change in result.changes if change.code == "ACC926"]
    _assert_stable(text)


def test_branches_that_only_bind_the_model_leave_one_prepare_after_the_if() -> None:
    """Left alone: the branches choose the model class and the training follows the ``if``."""
    block = LOADER + textwrap.dedent(
        """\
        if args.arch == "big":
            model = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))
        else:
            model = nn.Linear(8, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        """
    )
    for where in ("function", "module"):
        text = _convert(_script(block, where)).output.decode()
        assert text.count("accelerator.prepare(") == 1
        prepare = next(line for line in text.splitlines() if "accelerator.prepare(" in line)
        assert prepare.strip() == "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"
        _assert_stable(text)


def test_a_branch_loading_a_model_it_does_not_train_gets_no_prepare() -> None:
    """Left alone: only the branch that trains is read as the block's own statements."""
    block = LOADER + textwrap.dedent(
        """\
        if args.arch == "big":
            model = torch.load("model.pt", weights_only=False)
        else:
        """
    )
    block += textwrap.indent(_training("nn.Linear(8, 2)"), "    ")
    text = _convert(_script(block, "function")).output.decode()
    lines = text.splitlines()
    _prepares_after_each_optimizer(lines, 1)
    assert text.count("accelerator.prepare(") == 2  # the loader, and the training branch's model
    _assert_stable(text)
