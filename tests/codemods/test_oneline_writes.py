"""Writes on one line with their ``if`` (``if not os.path.exists(d): os.makedirs(d)``, ``if
args.tensorboard: configure(...)``), a file opened, written and dropped in one expression
(``open(path, "w").write(text)``), and the trackers of ``tensorboard_logger``, visdom, Comet,
Neptune and Aim: each runs on the main process only, folders with a barrier after them. Before,
all of these ran on every rank, unreported: two ranks racing to make one folder, every rank
starting its own event file (found on xternalz/WideResNet-pytorch)."""

from __future__ import annotations

import pytest

from tests.codemods.support import converted_stably

SCRIPT = """\
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
{imports}


def main(save_dir, flag):
    {setup}
    model = nn.Linear(4, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        {logging}


if __name__ == "__main__":
    main("out", True)
"""


def guarded_lines(imports: str = "", setup: str = "pass", logging: str = "pass") -> list[str]:
    """The lines the conversion puts under ``if accelerator.is_main_process:`` (the line after it)."""
    text, _ = converted_stably(SCRIPT.format(imports=imports, setup=setup, logging=logging))
    lines = text.splitlines()
    return [lines[i + 1].strip() for i, line in enumerate(lines) if line.strip() == "if accelerator.is_main_process:"]


@pytest.mark.parametrize(
    "setup",
    [
        "if not os.path.exists(save_dir): os.makedirs(save_dir)",
        "if not os.path.isdir(save_dir): os.mkdir(save_dir)",
        'if flag: open(os.path.join(save_dir, "config.txt"), "w").write("lr 0.1")',
        'open(os.path.join(save_dir, "config.txt"), "w").write("lr 0.1")',
    ],
)
def test_a_write_on_one_line_runs_on_the_main_process(setup: str) -> None:
    assert guarded_lines(setup=setup) == [setup]


def test_a_folder_made_on_one_line_is_waited_for() -> None:
    text, _ = converted_stably(
        SCRIPT.format(imports="", setup="if not os.path.exists(save_dir): os.makedirs(save_dir)", logging="pass")
    )
    made = text.index("os.makedirs(save_dir)")
    assert text.index("accelerator.wait_for_everyone()", made) > made


def test_tensorboard_logger_logs_on_the_main_process() -> None:
    lines = guarded_lines(
        imports="from tensorboard_logger import configure, log_value",
        setup='if flag: configure("runs/x")',
        logging='log_value("loss", loss.item(), epoch)',
    )
    assert lines == ['if flag: configure("runs/x")', 'log_value("loss", loss.item(), epoch)']


def test_a_visdom_tracker_is_built_and_used_on_the_main_process() -> None:
    text, _ = converted_stably(
        SCRIPT.format(
            imports="import visdom", setup="viz = visdom.Visdom()", logging="viz.line([loss.item()], [epoch])"
        )
    )
    assert "viz = visdom.Visdom() if accelerator.is_main_process else None" in text
    assert "if accelerator.is_main_process:\n            viz.line([loss.item()], [epoch])" in text
