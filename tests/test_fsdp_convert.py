"""``accel-convert --fsdp`` (and ``fsdp = true`` in ``[tool.accel-convert]``): the Accelerator the
converter creates gets an FSDP plugin, imported from the target package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_convert.converter.cli import main

TRAIN = """import torch
from torch.utils.data import DataLoader


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(torch.randn(256, 4), batch_size=8)
    for data in loader:
        optimizer.zero_grad()
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""

PLUGIN = "Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))"


def one_line_each(script: str) -> str:
    """``script`` with each statement on one line: TRAIN is black-clean, so the converter splits
    the longer ``Accelerator(...)`` line as black does (converter/layout.py)."""
    return ast.unparse(ast.parse(script))


def convert(folder: Path, *flags: str) -> str:
    script = folder / "train.py"
    if not script.exists():
        script.write_text(TRAIN)
    result = CliRunner().invoke(main, [str(script), *flags], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("target", ["runtime", "accelerate"])
def test_fsdp_flag_writes_the_plugin_into_the_created_accelerator(tmp_path: Path, target: str) -> None:
    converted = convert(tmp_path, "--fsdp", "--target", target)
    package = {"runtime": "accel_convert.runtime", "accelerate": "accelerate"}[target]
    assert f"from {package} import Accelerator, FullyShardedDataParallelPlugin\n" in converted
    assert f"accelerator = {PLUGIN}" in one_line_each(converted)
    compile(converted, "train.py", "exec")
    # Converting the output again changes nothing.
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "train.py").write_text(converted)
    assert convert(tmp_path / "again", "--fsdp", "--target", target) == converted


def test_without_the_flag_nothing_mentions_fsdp(tmp_path: Path) -> None:
    assert "FullyShardedDataParallelPlugin" not in convert(tmp_path)


def test_pyproject_key_turns_it_on_and_the_flag_off_again(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.accel-convert]\nfsdp = true\n")
    assert PLUGIN in one_line_each(convert(tmp_path))
    assert "FullyShardedDataParallelPlugin" not in convert(tmp_path, "--no-fsdp")


def test_pyproject_key_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\nfsdp = "yes"\n')
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(main, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert result.exit_code != 0 and "fsdp must be" in result.stderr


@pytest.mark.parametrize("package", ["accel_convert.runtime", "accelerate"])
def test_the_emitted_plugin_constructs_in_both_packages(package: str) -> None:
    import importlib

    plugin_class = importlib.import_module(package).FullyShardedDataParallelPlugin
    plugin = plugin_class(fsdp_version=2)
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
