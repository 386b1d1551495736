"""An unprepared module built before any seed draws its weights: a draw the processes agree on
(``model/locality.py`` ``shared_draws``), unless its weights are fixed or loaded."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.model.locality import locality_of

SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


class Window(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.linspace(0, 1, 8))

    def forward(self, x):
        return x * self.w


def main():
    window = Window()
    teacher = Net()
    teacher.requires_grad_(False)
    projection = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    student = Net()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.ones(16, 8)), batch_size=4)
    for (x,) in loader:
        optimizer.zero_grad()
        loss = ((student(window(x)) - teacher(projection(x))) ** 2).mean()
        loss.backward()
        optimizer.step()
    best = Net()
    best.load_state_dict(torch.load("best.pt"))


if __name__ == "__main__":
    main()
"""


def drawn_lines(source: str) -> list[int]:
    facts = analyse(cst.parse_module(textwrap.dedent(source)))
    return sorted(site.line for site in locality_of(facts).shared_draws)


def test_unprepared_modules_drawing_their_weights_are_shared_draws() -> None:
    lines = textwrap.dedent(SCRIPT).splitlines()
    drawn = [lines[line - 1].strip() for line in drawn_lines(SCRIPT)]
    # The teacher and the projection; not the fixed window, the prepared student, the loaded best.
    assert drawn == ["teacher = Net()", "projection = nn.Sequential(nn.Linear(8, 8), nn.ReLU())"]


def test_a_seed_before_the_construction_makes_it_agree() -> None:
    seeded = SCRIPT.replace("    window = Window()\n", "    torch.manual_seed(0)\n    window = Window()\n")
    assert drawn_lines(seeded) == []


def test_weights_from_a_name_holding_a_checkpoint_read_are_loaded() -> None:
    """``checkpoint = torch.load(...)`` (by qualified name: ``load`` imported from ``torch``),
    then ``best.load_state_dict(checkpoint["net"])``: the file decides its weights."""
    loaded = SCRIPT.replace(
        '    best.load_state_dict(torch.load("best.pt"))\n',
        '    checkpoint = read("best.pt")\n    best.load_state_dict(checkpoint["net"])\n',
    ).replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom torch import load as read\n")
    lines = textwrap.dedent(loaded).splitlines()
    assert [lines[line - 1].strip() for line in drawn_lines(loaded)] == [
        "teacher = Net()",
        "projection = nn.Sequential(nn.Linear(8, 8), nn.ReLU())",
    ]


def test_weights_copied_from_a_module_through_a_name_are_as_random_as_that_module() -> None:
    """``best.load_state_dict(snapshot)`` with ``snapshot = copy.deepcopy(teacher.state_dict())``:
    no checkpoint is read, so ``best`` holds the teacher's random weights and is a shared draw
    (before, any argument but a ``state_dict()`` call written in the call counted as loaded)."""
    copied = SCRIPT.replace(
        '    best.load_state_dict(torch.load("best.pt"))\n',
        "    snapshot = copy.deepcopy(teacher.state_dict())\n    best.load_state_dict(snapshot)\n",
    ).replace("import torch\n", "import copy\nimport torch\n", 1)
    lines = textwrap.dedent(copied).splitlines()
    assert [lines[line - 1].strip() for line in drawn_lines(copied)] == [
        "teacher = Net()",
        "projection = nn.Sequential(nn.Linear(8, 8), nn.ReLU())",
        "best = Net()",
    ]
