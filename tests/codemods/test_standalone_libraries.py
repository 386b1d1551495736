"""A module the training script imports that is also a script of its own (char-rnn's
``generate.py``, YOLOv3's ``test.py``): its ``__main__`` block calls the same function the
training script calls with a prepared model or loader, and has no accelerator to hand over.
Before, the function was left as written where the block called it (the accelerator reached only
functions every caller of which holds one): the training script's evaluation counted one rank's
share (ACC939) and ``model.init_state()`` on the wrapped model failed (ACC914). Now the function
takes the accelerator as an optional last parameter and creates its own when called without one,
so the training script hands it its own and the module still runs alone, printing what the
original prints. The fixtures ``standalone_evaluation_module``, ``standalone_evaluation_package``
and ``standalone_sampling_module`` run the training scripts on 1 and 2 processes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accel_convert.converter.cli import main as convert_cli
from tests.launching import REPO_ROOT, base_env, python

PROJECTS = REPO_ROOT / "fixtures" / "projects"


def converted_project(name: str, entry: str, tmp_path: Path) -> tuple[Path, Path]:
    """The project's original copy and its conversion (``-o`` a folder), both under ``tmp_path``."""
    original = tmp_path / "original"
    shutil.copytree(PROJECTS / name, original)
    out = tmp_path / "converted"
    target = out / Path(entry).parent
    with pytest.raises(SystemExit) as ended:
        convert_cli([str(original / entry), "-o", f"{target}/", "-q"])
    assert ended.value.code == 0
    for path in original.rglob("*.py"):  # what the entry does not import, as it is
        copy = out / path.relative_to(original)
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy)
    return original, out


@pytest.mark.parametrize(
    ("name", "entry", "script", "takes"),
    [
        (
            "standalone_evaluation_module",
            "train.py",
            "evaluate.py",
            "def evaluate(model, loader, device, accelerator=None):",
        ),
        (
            "standalone_sampling_module",
            "train.py",
            "sample.py",
            "def sample(model, first, length, device, accelerator=None):",
        ),
        (
            "standalone_evaluation_package",
            "pkg/train.py",
            "pkg/test.py",
            "def _evaluate(model, loader, device, accelerator=None):",
        ),
    ],
)
def test_a_function_its_own_main_block_calls_creates_an_accelerator_when_given_none(
    name: str, entry: str, script: str, takes: str, tmp_path: Path
) -> None:
    original, out = converted_project(name, entry, tmp_path)
    text = (out / script).read_text()
    assert takes in text
    assert "    if accelerator is None:\n        accelerator = Accelerator()\n" in text
    assert "ACC939" not in text
    training = (out / entry).read_text()
    assert "accelerator)" in training.split("for epoch")[1]  # the training script hands over its own
    # The module run alone, on one process, prints what the original prints.
    env = base_env()
    alone = python(out / script, env=env, cwd=out)
    as_written = python(original / script, env=env, cwd=original)
    assert alone.returncode == as_written.returncode == 0, alone.stderr
    assert alone.stdout == as_written.stdout != ""
