"""The README: its table of codes is the one the codemod docstrings generate, its commands exist, and its pre-commit snippet works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from accel_convert.codemods.engine.registry import code_docs
from accel_convert.converter.docs import README, codes_table, with_table
from tests.launching import base_env


def test_readme_codes_table_is_generated_from_the_docstrings() -> None:
    current = README.read_text(encoding="utf-8")
    assert with_table(current, codes_table(code_docs())) == current, "run `python -m accel_convert.converter.docs`"


def test_every_code_appears_once_in_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    for doc in code_docs():
        assert len(re.findall(rf"\| `{doc.code}` \|", text)) == 1, doc.code


def test_contributing_test_command_is_what_ci_runs() -> None:
    """The README is the user's page; the test command a contributor runs is CONTRIBUTING.md's,
    the same line CI runs last."""
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    test_command = ci.strip().splitlines()[-1].strip()
    assert f"```bash\n{test_command}\n```" in (README.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")


def test_readme_main_job_launches_with_accel_launch_and_writes_only_ignored_files() -> None:
    """The README's main job converts, verifies and launches with ``accel-launch`` (not torchrun),
    and the converted script it writes lands where git ignores it (so ruff, which respects
    .gitignore, never lints it)."""
    text = README.read_text(encoding="utf-8")
    main_job = text.split("## The main job", 1)[1].split("\n## ", 1)[0]
    assert "accel-convert verify fixtures/cases/mnist_helpers.py -- --epochs 1" in main_job
    assert "accel-launch --nproc-per-node 2" in main_job and "torchrun" not in main_job.split("```")[1]
    outputs = re.findall(r"-o (\S+)", main_job)
    assert outputs, "the main job writes a converted script"
    for output in outputs:
        ignored = subprocess.run(["git", "check-ignore", "-q", output], cwd=README.parent, check=False)
        assert ignored.returncode == 0, f"{output} is not ignored by git"


def test_readme_pre_commit_snippet_runs_the_check(tmp_path: Path) -> None:
    """The snippet copied as it stands into a new repository: pre-commit fails on a script that
    is not converted, and passes once it is."""
    snippet = re.search(r"```yaml\n(repos:\n.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert snippet is not None, "the README's pre-commit snippet"
    (tmp_path / ".pre-commit-config.yaml").write_text(snippet.group(1), encoding="utf-8")
    script = tmp_path / "train" / "train.py"
    script.parent.mkdir()
    script.write_text(UNCONVERTED, encoding="utf-8")
    env = {**base_env(), "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_CONFIG_NOSYSTEM": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    for command in (["git", "init", "-q"], ["git", "add", "-A"]):
        assert run(*command).returncode == 0
    pre_commit = [sys.executable, "-m", "pre_commit", "run", "--all-files"]
    failed = run(*pre_commit)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "accel-convert --check" in failed.stdout and "Failed" in failed.stdout
    assert "train/train.py" in failed.stdout
    converted = run(sys.executable, "-m", "accel_convert.converter", "-i", "train/train.py")
    assert converted.returncode == 0, converted.stderr
    assert run("git", "add", "-A").returncode == 0
    passed = run(*pre_commit)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout


UNCONVERTED = """\
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 4, device=device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
