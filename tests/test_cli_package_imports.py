"""A package folder beside the scripts (YOLOv5's layout): an entry script inside the package
imports its siblings by the package's name (``from pkg.test import _evaluate``, ``import pkg.test
as t``) or relatively (``python -m pkg.train``). Those modules are the entry's program: a
function whose signature the conversion changes is never left with a caller that does not pass
the new argument (before, ``pkg/test.py`` and ``pkg/train.py`` were converted apart, and
``_evaluate`` gained an ``accelerator`` its caller never passed: TypeError at the first
evaluation). No process is launched but one ``python -m`` run of a converted fixture."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_convert.codemods.engine.name_flow import program_argument_problems
from accel_convert.converter.cli import main as accel_convert
from accel_convert.converter.project import program_files
from tests.launching import REPO_ROOT

TEST = """\
import torch


def _evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.size(0)
    return correct, total
"""

#: YOLO's val.py runs on its own too: an entry script of its own, imported by train.py.
TEST_MAIN = """

def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(40, 4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long()), batch_size=8)
    model = torch.nn.Linear(4, 2).to(device)
    correct, total = _evaluate(model, loader, device)
    print(f"test: {correct}/{total}")


if __name__ == "__main__":
    main()
"""

TRAIN = """\
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.append(str(Path(__file__).resolve().parents[1]))

{imports}


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(40, 4)
    data = TensorDataset(x, (x.sum(1) > 0).long())
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    val_loader = DataLoader(data, batch_size=8)
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in train_loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        print({call}(model, val_loader, device))


if __name__ == "__main__":
    main()
"""

#: How the training script reaches ``_evaluate``: (its import, the call's function).
SHAPES = {
    "from_package": ("from pkg.test import _evaluate", "_evaluate"),
    "module_alias": ("import pkg.test as t", "t._evaluate"),
    "relative": ("from .test import _evaluate", "_evaluate"),
}


def make_package(root: Path, shape: str, *, test_main: bool) -> Path:
    imports, call = SHAPES[shape]
    package = root / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "test.py").write_text(TEST + (TEST_MAIN if test_main else ""), encoding="utf-8")
    (package / "train.py").write_text(TRAIN.format(imports=imports, call=call), encoding="utf-8")
    return package / "train.py"


@pytest.mark.parametrize("shape", SHAPES)
def test_the_package_modules_an_entry_imports_by_the_package_name_are_its_program(tmp_path: Path, shape: str):
    entry = make_package(tmp_path, shape, test_main=False)
    files = program_files(entry)
    assert [(file.path.resolve(), file.module) for file in files] == [
        (entry.resolve(), "pkg.train"),
        ((tmp_path / "pkg" / "__init__.py").resolve(), "pkg"),
        ((tmp_path / "pkg" / "test.py").resolve(), "pkg.test"),
    ]


def calls_missing_arguments(original: Path, converted: Path) -> list[str]:
    """Every call, in any module of the converted folder, of a function whose converted signature
    gained a required parameter, that does not pass it."""
    names = {"pkg.train": "pkg/train.py", "pkg.test": "pkg/test.py", "pkg": "pkg/__init__.py"}
    before = {name: ast.parse((original / path).read_text(encoding="utf-8")) for name, path in names.items()}
    after = {name: ast.parse((converted / path).read_text(encoding="utf-8")) for name, path in names.items()}
    found = program_argument_problems(before, after, frozenset({"pkg"}))
    return [f"{module}: {problem.message}" for module, problems in found.items() for problem in problems]


@pytest.mark.parametrize("test_main", [False, True], ids=["library", "script_of_its_own"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_changed_signature_is_never_left_with_an_unchanged_caller_in_the_package(
    tmp_path: Path, shape: str, test_main: bool
):
    make_package(tmp_path / "project", shape, test_main=test_main)
    out = tmp_path / "out"
    result = CliRunner().invoke(accel_convert, [str(tmp_path / "project"), "-o", f"{out}/", "--target", "runtime"])
    assert result.exit_code == 0, result.output
    assert calls_missing_arguments(tmp_path / "project", out) == []
    converted_test = (out / "pkg" / "test.py").read_text(encoding="utf-8")
    converted_train = (out / "pkg" / "train.py").read_text(encoding="utf-8")
    if "accelerator" in converted_test.split("def _evaluate(", 1)[1].split(")", 1)[0]:
        assert "val_loader, device, accelerator)" in converted_train
    if not test_main:
        # Converted with its caller, the evaluation of the prepared loader is gathered.
        assert "def _evaluate(model, loader, device, accelerator):" in converted_test
        assert "gather_for_metrics" in converted_test


def test_the_converted_fixture_runs_as_a_module_of_its_package(tmp_path: Path):
    """``python -m pkg.train`` from the project folder (the fixture's end-to-end runs use
    ``python pkg/train.py``): same output as the original run the same way."""
    outputs = []
    for folder in (
        REPO_ROOT / "fixtures" / "projects" / "package_beside_scripts",
        REPO_ROOT / "fixtures" / "expected_projects" / "package_beside_scripts",
    ):
        copy = tmp_path / folder.parent.name
        shutil.copytree(folder, copy)
        run = subprocess.run(
            [sys.executable, "-m", "pkg.train", "--epochs", "1"],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=300,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "CUDA_VISIBLE_DEVICES": ""},
        )
        assert run.returncode == 0, run.stderr
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] and "final: " in outputs[0]


def test_a_script_in_a_package_importing_modules_beside_the_package_is_written_as_a_set(tmp_path: Path):
    """``pkg/train.py`` imports ``utils.general`` from beside ``pkg/``: converting the script alone
    writes the set under the folder holding both (before: an internal error on the path)."""
    entry = make_package(tmp_path / "project", "from_package", test_main=False)
    (tmp_path / "project" / "utils").mkdir()
    (tmp_path / "project" / "utils" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "project" / "utils" / "general.py").write_text(
        textwrap.dedent("""\
            import torch


            def seed():
                torch.manual_seed(0)
            """),
        encoding="utf-8",
    )
    source = entry.read_text(encoding="utf-8")
    entry.write_text(
        source.replace("\n\n\ndef main", "\nfrom utils.general import seed\n\n\ndef main", 1), encoding="utf-8"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(accel_convert, [str(entry), "-o", f"{out}/", "--target", "runtime"])
    assert result.exit_code == 0, result.output
    written = sorted(str(path.relative_to(out)) for path in out.rglob("*.py"))
    assert written == ["pkg/__init__.py", "pkg/test.py", "pkg/train.py", "utils/__init__.py", "utils/general.py"]
