"""The import a rewrite adds follows the project's import sorting (``[tool.ruff]`` or
``[tool.isort]`` of the nearest pyproject.toml, converter.formatting.import_style): a script that
passes ``ruff check --select I`` under its project's settings still passes once converted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accel_convert.codemods.engine.model import ImportStyle
from accel_convert.converter.formatting import import_style
from tests.launching import base_env

RUFF = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")

SCRIPT = """\
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset
{first_party}

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""
#: The script's own first-party import, in a section of its own.
MYLIB = "\nfrom mylib import helpers  # noqa: F401\n"


def single_lines(script: str) -> str:
    """The script's imports as ``force-single-line`` sorts them."""
    return script.replace(
        "from torch.utils.data import DataLoader, TensorDataset",
        "from torch.utils.data import DataLoader\nfrom torch.utils.data import TensorDataset",
    )


def ruff_sorted(folder: Path, *config: str) -> subprocess.CompletedProcess[str]:
    """``ruff check --select I`` in ``folder`` (its pyproject.toml, or ``--config`` settings)."""
    command = [RUFF, "check", "--select", "I", "--no-cache", *[f"--config={item}" for item in config], "."]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=60)


def convert(folder: Path, *flags: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", "-i", "train.py", *flags],
        cwd=folder,
        capture_output=True,
        text=True,
        env=base_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return (folder / "train.py").read_text()


@pytest.mark.parametrize(
    ("pyproject", "first_party", "flags", "expected"),
    [
        # Our import is first-party here: into the script's first-party section.
        (
            '[tool.ruff.lint.isort]\nknown-first-party = ["accel_convert", "mylib"]\n',
            MYLIB,
            (),
            "from accel_convert.runtime import Accelerator\nfrom mylib import helpers",
        ),
        # ... and a section of its own after torch's when the script has none.
        (
            '[tool.ruff.lint.isort]\nknown-first-party = ["accel_convert"]\n',
            "",
            (),
            "from torch.utils.data import DataLoader, TensorDataset\n\nfrom accel_convert.runtime import Accelerator\n",
        ),
        # One name a line: the plugin's import is not merged into the Accelerator's.
        (
            "[tool.ruff.lint.isort]\nforce-single-line = true\n",
            "",
            ("--fsdp",),
            "from accel_convert.runtime import Accelerator\n"
            "from accel_convert.runtime import FullyShardedDataParallelPlugin\n",
        ),
        # A merged line longer than the project's limit is wrapped as ruff wraps it.
        (
            "[tool.ruff]\nline-length = 60\n",
            "",
            ("--fsdp",),
            "from accel_convert.runtime import (\n    Accelerator,\n    FullyShardedDataParallelPlugin,\n)\n",
        ),
    ],
    ids=["first-party-section", "new-first-party-section", "force-single-line", "line-length"],
)
def test_converted_imports_pass_the_projects_ruff(
    tmp_path: Path, pyproject: str, first_party: str, flags: tuple[str, ...], expected: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    script = SCRIPT.format(first_party=first_party)
    (tmp_path / "train.py").write_text(single_lines(script) if "force-single-line" in pyproject else script)
    before = ruff_sorted(tmp_path)
    assert before.returncode == 0, before.stdout  # the script is sorted as its project sorts
    converted = convert(tmp_path, *flags)
    assert expected in converted
    after = ruff_sorted(tmp_path)
    assert after.returncode == 0, after.stdout + converted


def test_isort_settings_are_read_too(tmp_path: Path) -> None:
    """``[tool.isort]``: profile black with force_single_line; ruff checks it with the same
    settings given on its command line (ruff does not read isort's table)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.isort]\nprofile = "black"\nforce_single_line = true\nknown_first_party = ["mylib"]\n'
    )
    (tmp_path / "train.py").write_text(single_lines(SCRIPT.format(first_party=MYLIB)))
    settings = ("lint.isort.force-single-line = true", 'lint.isort.known-first-party = ["mylib"]')
    assert ruff_sorted(tmp_path, *settings).returncode == 0
    converted = convert(tmp_path, "--fsdp")
    assert "from accel_convert.runtime import Accelerator\nfrom accel_convert.runtime import Fully" in converted
    after = ruff_sorted(tmp_path, *settings)
    assert after.returncode == 0, after.stdout + converted


@pytest.mark.parametrize(
    ("pyproject", "style"),
    [
        ("[tool.isort]\nline_length = 50\n", ImportStyle(line_length=50, wrap="grid")),
        ('[tool.isort]\nprofile = "google"\n', ImportStyle(force_single_line=True, line_length=1000, wrap="grid")),
        ("[tool.isort]\nmulti_line_output = 3\n", ImportStyle(line_length=79, wrap="vertical")),
        (
            '[tool.ruff]\nline-length = 100\n[tool.ruff.isort]\nknown-first-party = ["a"]\n',
            ImportStyle(known_first_party=("a",), line_length=100),
        ),
        # ruff's table wins when both sort imports; isort's when ruff only sets a line length.
        (
            "[tool.ruff.lint.isort]\nforce-single-line = true\n[tool.isort]\nline_length = 40\n",
            ImportStyle(force_single_line=True),
        ),
        ("[tool.ruff]\nline-length = 70\n[tool.isort]\nline_length = 40\n", ImportStyle(line_length=40, wrap="grid")),
        ("[tool.black]\nline-length = 70\n", None),
    ],
)
def test_settings_read_from_the_nearest_pyproject(tmp_path: Path, pyproject: str, style: ImportStyle | None) -> None:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "src").mkdir()
    assert import_style(tmp_path / "src") == style


def test_grid_wrapping_of_isorts_default(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.isort]\nline_length = 60\n")
    (tmp_path / "train.py").write_text(SCRIPT.format(first_party=""))
    converted = convert(tmp_path, "--fsdp")
    assert (
        "from accel_convert.runtime import (Accelerator,\n"
        "                                   FullyShardedDataParallelPlugin)\n"
    ) in converted
