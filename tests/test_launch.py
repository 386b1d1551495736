"""accel-launch: torchrun's flags pass through, the process count defaults sensibly, and a two-node
launch (two launchers on 127.0.0.1, c10d rendezvous) gathers across both nodes. Its own options,
reports and saved configuration: tests/test_launch_options.py."""

from __future__ import annotations

import json
import sys
import threading
import uuid
from pathlib import Path

import pytest
import torch

from accel_convert.runtime import launch
from tests.launching import REPO_ROOT, Run, free_port, run_command


def test_default_nproc_is_one_with_a_hint_on_cpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PET_NPROC_PER_NODE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert launch.build_torchrun_args(["train.py", "--lr", "1"]) == ["--nproc-per-node", "1", "train.py", "--lr", "1"]
    hint = capsys.readouterr().err
    assert "no GPU" in hint and "--nproc-per-node" in hint and hint.count("\n") == 1


def test_default_nproc_is_the_gpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PET_NPROC_PER_NODE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert launch.build_torchrun_args(["train.py"])[:2] == ["--nproc-per-node", "4"]


@pytest.mark.parametrize("flags", [["--nproc-per-node", "3"], ["--nproc_per_node", "3"], ["--nproc-per-node=3"]])
def test_user_nproc_passes_through_untouched(flags: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PET_NPROC_PER_NODE", raising=False)
    argv = ["--nnodes", "1", *flags, "train.py", "--epochs", "2"]
    assert launch.build_torchrun_args(argv) == argv


def test_script_arguments_are_not_mistaken_for_launcher_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PET_NPROC_PER_NODE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["train.py", "--nproc-per-node", "8"]  # the script's own option, after the script
    assert launch.build_torchrun_args(argv) == ["--nproc-per-node", "1", *argv]


def test_two_nodes_on_localhost_gather_across_nodes() -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    run_id = uuid.uuid4().hex[:8]
    results: dict[int, Run] = {}

    def node(rank: int) -> None:
        command = [
            sys.executable,
            "-m",
            "accel_convert.runtime.launch",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            run_id,
            str(REPO_ROOT / "tests" / "scripts" / "runtime_node_gather.py"),
        ]
        results[rank] = run_command(command, timeout=180)

    threads = [threading.Thread(target=node, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for run in results.values():
        run.check()
    lines = [line for run in results.values() for line in run.stdout.splitlines() if line.startswith("NODES ")]
    assert len(lines) == 1, [run.stdout for run in results.values()]
    report = json.loads(lines[0][len("NODES ") :])
    assert report["num_processes"] == 2
    assert report["distributed_type"] == "MULTI_CPU"
    assert report["gathered"] == [1, 11]
    assert sorted(report["node_ranks"]) == ["0", "1"]  # one worker from each launcher (node)


def test_a_node_whose_master_never_comes_ends_in_one_line(tmp_path: Path) -> None:
    # Node 1 of 2 alone, its master address answering nothing: before, torchrun's 30-line
    # traceback of its agent's frames ending in DistNetworkError.
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed  # noqa: F401\n")
    command = [
        sys.executable,
        "-m",
        "accel_convert.runtime.launch",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--nproc-per-node",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--rdzv-conf",
        "timeout=3",
        str(script),
    ]
    run = run_command(command, timeout=240)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].startswith("accel-launch: the machines did not meet: ")
    assert "is every machine started, with the same --nnodes" in run.stderr.splitlines()[-1]
