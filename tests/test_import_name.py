"""Converted scripts import the runtime as ``accel_convert.runtime``: a project's own ``runtime.py``
beside the script cannot shadow it, and the installed package owns that one top-level name only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.launching import REPO_ROOT, base_env, run_command

#: The project's own helper module, named as the runtime's folder is (common in real projects).
USERS_RUNTIME = '''\
"""Learning-rate warm-up used by train.py."""


def warmup_factor(step: int) -> float:
    return min(1.0, (step + 1) / 2)
'''

SCRIPT = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from runtime import warmup_factor

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)

for step, (x, y) in enumerate(loader):
    x, y = x.to(device), y.to(device)
    loss = nn.functional.mse_loss(model(x), y) * warmup_factor(step)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
"""


def test_a_users_runtime_module_beside_the_script_does_not_shadow_the_runtime(tmp_path: Path) -> None:
    (tmp_path / "runtime.py").write_text(USERS_RUNTIME)
    (tmp_path / "converter.py").write_text("raise SystemExit('the converted script must not import this')\n")
    (tmp_path / "train.py").write_text(SCRIPT)
    original = run_command([sys.executable, "train.py"], cwd=tmp_path, env=base_env(), timeout=120).check()

    run_command(
        [sys.executable, "-m", "accel_convert.converter", "train.py", "-o", "train_accel.py"],
        cwd=tmp_path,
        env=base_env(),
        timeout=120,
    ).check()
    converted = (tmp_path / "train_accel.py").read_text()
    assert "from accel_convert.runtime import Accelerator" in converted
    assert "from runtime import warmup_factor" in converted  # the project's own import is kept

    # `python train_accel.py` puts the script's folder first on sys.path, where runtime.py lies.
    ran = run_command([sys.executable, "train_accel.py"], cwd=tmp_path, env=base_env(), timeout=120).check()
    assert ran.stdout == original.stdout
    assert original.stdout.count("step ") == 4


def test_the_wheel_installs_one_top_level_name_and_runs_without_the_source_tree(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "accel_convert", source / "accel_convert", ignore=ignore)
    dist = tmp_path / "dist"
    build = (
        "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))",
        str(dist),
    )
    dist.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", *build], cwd=source, capture_output=True, text=True, timeout=300, check=False
    )
    assert built.returncode == 0, built.stderr
    wheel = dist / built.stdout.strip().splitlines()[-1]

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert {name.split("/")[0] for name in names} == {"accel_convert", wheel.name.split("-py3")[0] + ".dist-info"}
    for module in ("converter/cli.py", "codemods/engine/analysis.py", "runtime/accelerator.py", "runtime/launch.py"):
        assert f"accel_convert/{module}" in names
    assert "accel-convert = accel_convert.converter.cli:main" in entry_points
    assert "accel-launch = accel_convert.runtime.launch:main" in entry_points

    # Unpacked where nothing else of ours is importable: the installed files alone do the job.
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    probe = (
        "import accel_convert.runtime as r, accel_convert.converter.cli as c;"
        "from accel_convert.runtime import Accelerator;"
        "print(r.__file__); print(c.__file__)"
    )
    run = run_command([sys.executable, "-c", probe], cwd=tmp_path, env=env, timeout=120).check()
    assert all(line.startswith(str(site)) for line in run.stdout.splitlines()), run.stdout
    # A whole conversion from there: every rule module is found under the installed name.
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("from runtime import warmup_factor\n", "").replace(" * warmup_factor(step)", ""))
    converted = run_command(
        [sys.executable, "-m", "accel_convert.converter", str(script), "--diff"], cwd=tmp_path, env=env, timeout=120
    )
    assert converted.returncode == 0, converted.stderr
    assert "+from accel_convert.runtime import Accelerator" in converted.stdout
    assert "1 would convert, 0 unchanged, 0 failed" in converted.stderr
