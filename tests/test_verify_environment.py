"""The environment of ``accel-convert verify``'s runs: what a script written for Hugging Face
Accelerate needs to share its work on a machine without GPUs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from accel_convert.converter.verify import Layout, Settings, copy_working_folder, plan_run

ACCELERATE_SCRIPT = "import torch\nfrom accelerate import Accelerator\n\naccelerator = Accelerator()\n"
PLAIN_SCRIPT = "import torch\n\nmodel = torch.nn.Linear(2, 2)\n"


def planned_env(tmp_path: Path, text: str, **settings: str) -> dict[str, str]:
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "train.py").write_text(text, encoding="utf-8")
    layout = Layout(work, work / "train.py", True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return plan_run(Settings(script=work / "train.py", **settings), layout, scratch, "converted-n", None).env


def test_a_script_that_imports_accelerate_runs_its_processes_together_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accelerate's Accelerator on a machine without GPUs runs every torchrun process alone (each
    prints every line, trains on all the data) unless ACCELERATE_USE_CPU says the CPU is meant: the
    already_converted fixture failed prints-once under verify, not under accel-launch."""
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    assert planned_env(tmp_path, ACCELERATE_SCRIPT).get("ACCELERATE_USE_CPU") == "1"


def test_other_scripts_and_real_gpus_keep_the_users_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    assert "ACCELERATE_USE_CPU" not in planned_env(tmp_path / "plain", PLAIN_SCRIPT)
    assert "ACCELERATE_USE_CPU" not in planned_env(tmp_path / "gpu", ACCELERATE_SCRIPT, device="cuda")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "0")
    assert planned_env(tmp_path / "own", ACCELERATE_SCRIPT)["ACCELERATE_USE_CPU"] == "0"


def test_the_working_folder_is_copied_without_sockets_pipes_or_the_scratch(tmp_path: Path) -> None:
    # verify run from a shared folder such as /tmp: other programs' sockets and pipes in it have
    # no content to copy (copying a socket failed: "No such device or address", an internal error).
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "x.csv").write_text("1,2\n")
    (work / "train.py").write_text("print(1)\n")
    os.mkfifo(work / "a_pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(work / "a_socket"))
    scratch = work / "scratch"
    scratch.mkdir()
    try:
        copy_working_folder(work, scratch / "copy", scratch)
    finally:
        listener.close()
    copied = sorted(str(p.relative_to(scratch / "copy")) for p in (scratch / "copy").rglob("*"))
    assert copied == ["data", "data/x.csv", "train.py"]
    assert (scratch / "copy" / "data" / "x.csv").read_text() == "1,2\n"
