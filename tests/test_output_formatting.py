"""Converted code passes the user's own checks: the fixtures, formatted with black and sorted by
ruff first (a project with ``[tool.black]`` and ``[tool.ruff]``), are converted in a real
subprocess; ``black --check`` then passes on every output, and ``ruff check --select I,F841``
finds nothing the original did not have."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import black
import pytest

from accel_convert.converter.layout import formatter_layout, statement_split
from tests.launching import REPO_ROOT, base_env

CASES = REPO_ROOT / "fixtures" / "cases"
PYPROJECT = "[tool.black]\nline-length = 88\n\n[tool.ruff]\nline-length = 88\n"


def tool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *map(str, args)], cwd=cwd, env=base_env(), capture_output=True, text=True, timeout=600
    )


def ruff_findings(folder: str, cwd: Path) -> set[tuple[str, str]]:
    result = tool("ruff", "check", "--select", "I,F841", "--output-format", "json", "--exit-zero", folder, cwd=cwd)
    return {(Path(f["filename"]).name, f["code"]) for f in json.loads(result.stdout)}


def test_black_and_ruff_pass_on_the_output_where_they_passed_on_the_original(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    original = tmp_path / "in"
    original.mkdir()
    for script in CASES.glob("*.py"):
        shutil.copy(script, original / script.name)
    assert tool("black", "-q", "in", cwd=tmp_path).returncode in (0, 123)  # a file black refuses stays
    tool("ruff", "check", "--select", "I", "--fix", "-q", "in", cwd=tmp_path)
    tool("black", "-q", "in", cwd=tmp_path)
    black_clean = tool("black", "--check", "in", cwd=tmp_path)
    before = ruff_findings("in", tmp_path)

    converted = tool("accel_convert.converter", "in", "-o", "out/", "-q", cwd=tmp_path)
    assert converted.returncode in (0, 123), converted.stderr

    checked = tool("black", "--check", "out", cwd=tmp_path)
    assert checked.returncode == 0 or black_clean.returncode != 0, checked.stderr
    new = ruff_findings("out", tmp_path) - before
    # The conversion's own import goes where isort puts it (I001), and a device assignment it
    # leaves unread is removed (F841): nothing new.
    assert new == set(), sorted(new)


# -- black's defaults and ruff format, no [tool.black]: the converter's own layout ---------------

MODULE_SCRIPT = '''"""Module-level training."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
train_loader_with_a_long_name = DataLoader(data, batch_size=8, shuffle=True)
model_with_a_long_name = nn.Linear(8, 1).to(device)
optimizer_long_name = torch.optim.SGD(model_with_a_long_name.parameters(), lr=0.1)
for x, y in train_loader_with_a_long_name:
    x, y = x.to(device), y.to(device)
    loss = nn.functional.mse_loss(model_with_a_long_name(x), y)
    optimizer_long_name.zero_grad()
    loss.backward()
    optimizer_long_name.step()
torch.save(model_with_a_long_name.state_dict(), "final_weights.pt")
'''

MAIN_SCRIPT = """import argparse

import torch
import torch.nn as nn


def train(model, optimizer, batches, device):
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    device = torch.device("cuda")
    model = nn.Linear(8, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1)),
        batch_size=8,
    )
    for _ in range(args.epochs):
        train(model, optimizer, batches, device)
    model.load_state_dict(torch.load("a_checkpoint_with_a_rather_long_name.pt"))


if __name__ == "__main__":
    main()
"""

CLASS_SCRIPT = """import torch
import torch.nn as nn
from torchvision import datasets, transforms


class Trainer:
    def __init__(self):
        self.device = torch.device("cuda")
        self.model = nn.Linear(784, 10).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.dataset = datasets.MNIST(
            "data", download=True, transform=transforms.ToTensor()
        )
        self.loader = torch.utils.data.DataLoader(self.dataset, batch_size=32)

    def fit(self):
        for x, y in self.loader:
            x, y = x.to(self.device), y.to(self.device)
            loss = nn.functional.cross_entropy(self.model(x.flatten(1)), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        torch.save(self.model.state_dict(), "trained_classifier_weights_file.pt")


Trainer().fit()
"""

FORMATTED = {"module_script.py": MODULE_SCRIPT, "main_script.py": MAIN_SCRIPT, "class_trainer.py": CLASS_SCRIPT}


def test_formatter_clean_scripts_stay_clean_under_the_formatters_defaults(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'scripts'\n")  # no [tool.black]
    (tmp_path / "in").mkdir()
    for name, text in FORMATTED.items():
        (tmp_path / "in" / name).write_text(text)
    for check in (("black", "--check"), ("ruff", "format", "--check"), ("ruff", "check", "--select", "I001")):
        assert tool(*check, "in", cwd=tmp_path).returncode == 0, check  # the inputs are clean

    converted = tool("accel_convert.converter", "in", "-o", "out/", "-q", cwd=tmp_path)
    assert converted.returncode in (0, 123), converted.stderr

    for name, text in FORMATTED.items():
        assert (tmp_path / "out" / name).read_text() != text  # each one was converted
    for check in (("black", "--check"), ("ruff", "format", "--check"), ("ruff", "check", "--select", "I001")):
        result = tool(*check, "out", cwd=tmp_path)
        assert result.returncode == 0, (check, result.stdout, result.stderr)


# -- the layout's split of one long line, against black itself ---------------------------------

#: Long lines a conversion writes (``accelerator.reduce(...).item()``, a prepared loader passed
#: on), with the shapes that decide black's split: an empty call at the end stays in the tail,
#: black's invisible parentheses around a value kept (several delimiters, a value ending in an
#: empty call or an attribute) or left out (no delimiter, one method called on a call's result).
LONG_LINES = [
    'seen_total = accelerator.reduce(torch.tensor(seen, device=accelerator.device), "sum").item()',
    '    total += accelerator.reduce(torch.tensor(hits, device=accelerator.device), "sum").item()',
    "x = accelerator.unwrap_model(model).load_state_dict(torch.load(path, map_location=location))",
    "x = aaaa + bbbb + accelerator.gather_for_metrics(torch.tensor(flipped, device=accelerator.device))",
    "x = aaaa + accelerator.gather_for_metrics(torch.tensor(flipped, device=accelerator.device)).sum()",
    "x = aaaa + accelerator.gather_for_metrics(torch.tensor(flipped, device=accelerator.device)).y",
    "x = accelerator.gather_for_metrics(torch.tensor(flipped, device=accelerator.device)).yyyyyy",
    "    return aaaa + bbbb + accelerator.gather_for_metrics(torch.tensor(flipped, device=dev))",
    '    return accelerator.reduce(torch.tensor(seen, device=accelerator.device), "sum").item()',
    '    self.x[i] = accelerator.reduce(torch.tensor(flipped, device=accelerator.device), "sum")',
    "        train(model, accelerator.prepare(DataLoader(data, batch_size=8, shuffle=True)), optimizer, accelerator)",
    'accelerator.print(f"epoch {epoch} | test loss {total_loss / n:.5f} | accuracy {correct}/{n}")',
    # a comment after the statement stays with the closing bracket
    '    accelerator.save(accelerator.unwrap_model(net1).state_dict(), "net_params.pkl")  # parameters only',
    "    accelerator.backward(loss)  # a long comment that makes this line too long for black to be happy",
]


@pytest.mark.parametrize("line", LONG_LINES)
def test_the_layout_splits_a_long_line_as_black_does(line: str) -> None:
    indent = line[: len(line) - len(line.lstrip())]
    assert len(line) > 88
    # black formats the line where it stands: in as many blocks as its indent says.
    blocks = "".join(f"{'    ' * level}if x:\n" for level in range(len(indent) // 4))
    expected = black.format_str(blocks + line + "\n", mode=black.Mode()).removeprefix(blocks).splitlines()
    assert statement_split(line.strip(), indent, 88) == expected


def test_the_layout_leaves_a_line_it_cannot_split_as_black_would() -> None:
    # A comparison at the value's depth: black's rules there are not reproduced.
    assert (
        statement_split(
            "ok = accelerator.gather(torch.tensor(a_long_name, device=device)).sum() == expected_total", "", 88
        )
        is None
    )


def test_black_clean_fixtures_have_black_clean_goldens() -> None:
    """Every fixture script black leaves as it is converts to a script black leaves as it is
    (module level, in functions, in classes: whatever shapes the fixtures hold)."""
    clean = []
    for case in sorted(CASES.glob("*.py")):
        source = case.read_text(encoding="utf-8")
        if black.format_str(source, mode=black.Mode()) != source:
            continue
        clean.append(case.name)
        expected = (REPO_ROOT / "fixtures" / "expected" / case.name).read_text(encoding="utf-8")
        assert black.format_str(expected, mode=black.Mode()) == expected, case.name
    assert len(clean) >= 5, clean  # the check checks something


def test_a_long_element_of_a_split_call_is_split_as_black_does() -> None:
    # ``loader=`` inside the call is a keyword argument, not an assignment: no ``loader= (``.
    original = (
        "import torch\n\n\ndef main(data, model):\n    return evaluate(\n        model,\n"
        "        loader=torch.utils.data.DataLoader(data, batch_size=8, shuffle=False),\n    )\n"
    )
    converted = original.replace("loader=torch", "loader=accelerator.prepare(torch").replace("False),", "False)),")
    laid_out = formatter_layout(original, converted, 88)
    assert laid_out != converted and black.format_str(laid_out, mode=black.Mode()) == laid_out
