"""accel-launch under a cluster scheduler: the same one-line command on every machine reads the
job's shape from Slurm's, Kubeflow's or SkyPilot's variables (flags on the command line win), and
``--print-config`` writes each scheduler's job file. The variables are faked here: a Slurm job of
two "nodes" is two launches on 127.0.0.1."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
import yaml

from accel_convert.runtime.schedulers import (
    SchedulerError,
    SchedulerJob,
    expand_nodelist,
    read_scheduler,
)
from tests.launching import REPO_ROOT, Run, free_port, run_command


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node01", ["node01"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("a1,b[8-10]", ["a1", "b8", "b9", "b10"]),
        ("gpu-[1-2]x,cpu", ["gpu-1x", "gpu-2x", "cpu"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("127.0.0.[1,5]", ["127.0.0.1", "127.0.0.5"]),
    ],
)
def test_slurm_nodelists_expand_as_scontrol_does(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", ["node[1-2", "node[a-b]", "node1]"])
def test_a_malformed_nodelist_is_an_error(nodelist: str) -> None:
    with pytest.raises(SchedulerError):
        expand_nodelist(nodelist)


SLURM = {
    "SLURM_JOB_ID": "123456",
    "SLURM_NNODES": "4",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu[07-10]",
    "SLURM_GPUS_ON_NODE": "8",
}


@pytest.mark.parametrize(
    ("environ", "job"),
    [
        ({}, None),
        (
            SLURM,
            SchedulerJob("slurm", nnodes="4", node_rank=2, master_addr="gpu07", master_port=23456, nproc_per_node="8"),
        ),
        (  # the step's own node list first; the job's node count when the step's is not set
            {
                **{k: v for k, v in SLURM.items() if k != "SLURM_NNODES"},
                "SLURM_JOB_NUM_NODES": "2",
                "SLURM_STEP_NODELIST": "gpu[09-10]",
                "MASTER_PORT": "6000",
                "SLURM_GPUS_ON_NODE": "",
            },
            SchedulerJob("slurm", nnodes="2", node_rank=2, master_addr="gpu09", master_port=6000),
        ),
        (
            {
                "PET_NNODES": "3",
                "PET_NODE_RANK": "1",
                "PET_MASTER_ADDR": "job-master-0",
                "PET_MASTER_PORT": "23456",
                "PET_NPROC_PER_NODE": "4",
            },
            SchedulerJob(
                "kubeflow", nnodes="3", node_rank=1, master_addr="job-master-0", master_port=23456, nproc_per_node="4"
            ),
        ),
        (  # an operator that sets the pod's RANK and MASTER_* only
            {"PET_NNODES": "2", "RANK": "1", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"},
            SchedulerJob("kubeflow", nnodes="2", node_rank=1, master_addr="job-master-0", master_port=23456),
        ),
        (  # elastic: torchrun reads PET_RDZV_* itself
            {"PET_NNODES": "1:3", "PET_RDZV_ENDPOINT": "job-worker-0:23456", "PET_RDZV_BACKEND": "c10d"},
            SchedulerJob("kubeflow", nnodes="1:3"),
        ),
        (
            {
                "SKYPILOT_NUM_NODES": "2",
                "SKYPILOT_NODE_RANK": "1",
                "SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.5\n",
                "SKYPILOT_NUM_GPUS_PER_NODE": "8",
            },
            SchedulerJob(
                "skypilot", nnodes="2", node_rank=1, master_addr="10.0.0.4", master_port=29500, nproc_per_node="8"
            ),
        ),
    ],
)
def test_each_schedulers_variables_give_the_jobs_shape(environ: dict[str, str], job: SchedulerJob | None) -> None:
    assert read_scheduler(environ) == job


def test_the_flags_a_job_adds() -> None:
    job = SchedulerJob("slurm", nnodes="2", node_rank=1, master_addr="gpu07", master_port=21234, nproc_per_node="4")
    assert job.flags() == {
        "--nproc-per-node": "4",
        "--nnodes": "2",
        "--node-rank": "1",
        "--master-addr": "gpu07",
        "--master-port": "21234",
    }
    assert job.describe() == "slurm: node 1 of 2, rendezvous at gpu07:21234"
    # One node: no rendezvous address, torchrun finds a free port itself.
    assert SchedulerJob("slurm", nnodes="1", node_rank=0, master_addr="gpu07", master_port=21234).flags() == {}


def test_a_slurm_number_that_is_not_one_is_an_error() -> None:
    with pytest.raises(SchedulerError, match="SLURM_NODEID='x' is not a number"):
        read_scheduler({**SLURM, "SLURM_NODEID": "x"})


def launch_nodes(environs: list[dict[str, str]], *args: str) -> list[Run]:
    """One ``accel-launch ARGS`` per fake node, at once (each waits for the others)."""
    results: dict[int, Run] = {}

    def node(index: int) -> None:
        command = [sys.executable, "-m", "accel_convert.runtime.launch", *args]
        results[index] = run_command(command, env=environs[index], timeout=240)

    threads = [threading.Thread(target=node, args=(index,)) for index in range(len(environs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[index] for index in range(len(environs))]


def test_srun_accel_launch_runs_unchanged_on_every_node() -> None:
    # `srun accel-launch SCRIPT` on two nodes: the same command, Slurm's variables differ.
    port = str(free_port())
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "127.0.0.[1,5]", "MASTER_PORT": port}
    script = str(REPO_ROOT / "tests" / "scripts" / "runtime_node_gather.py")
    runs = launch_nodes([{**slurm, "SLURM_NODEID": str(rank)} for rank in (0, 1)], "--nproc-per-node", "1", script)
    for run in runs:
        run.check()
    for rank, run in enumerate(runs):
        assert run.stderr.splitlines()[0] == (
            f"accel-launch: slurm: node {rank} of 2, rendezvous at 127.0.0.1:{port}; 1 process on this machine"
        )
    lines = [line for run in runs for line in run.stdout.splitlines() if line.startswith("NODES ")]
    assert len(lines) == 1, [run.stdout for run in runs]
    report = json.loads(lines[0][len("NODES ") :])
    assert (report["num_processes"], report["gathered"]) == (2, [1, 11])
    assert sorted(report["node_ranks"]) == ["0", "1"]


def test_flags_on_the_command_line_win_over_the_schedulers(tmp_path: Path) -> None:
    # Slurm says 2 nodes; the command line says this one runs alone (a quick check on one node).
    worker = tmp_path / "worker.py"
    worker.write_text("import os, sys\nsys.stdout.write(f\"WORLD {os.environ['WORLD_SIZE']}\\n\")\n")
    slurm = {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "nowhere[1-2]"}
    run = run_command(
        [sys.executable, "-m", "accel_convert.runtime.launch", "--nnodes", "1", "--nproc-per-node", "1", str(worker)],
        env=slurm,
        timeout=240,
    ).check()
    assert run.stdout.splitlines() == ["WORLD 1"]
    assert run.stderr.splitlines()[0] == "accel-launch: slurm: 1 node; 1 process on this machine"


# -- job files -------------------------------------------------------------------------------------


def print_config(tmp_path: Path, scheduler: str, *args: str) -> str:
    command = [sys.executable, "-m", "accel_convert.runtime.launch", "--print-config", scheduler, *args]
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "ACCEL_LAUNCH_CONFIG": ""}
    run = run_command(command, env=env, cwd=tmp_path, timeout=120).check()
    assert run.stderr == ""
    return run.stdout


SHAPE = (
    "--nnodes",
    "3",
    "--nproc-per-node",
    "4",
    "--mixed-precision",
    "bf16",
    "train.py",
    "--lr",
    "1e-3",
    "--note",
    "a b",
)


def test_slurm_job_file_runs_one_launcher_per_node(tmp_path: Path) -> None:
    text = print_config(tmp_path, "slurm", *SHAPE)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=train",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --output=%x-%j.out",
    ]
    # The shape is Slurm's to give: the command each node runs does not repeat it.
    assert lines[-1] == "srun accel-launch --mixed-precision bf16 train.py --lr 1e-3 --note 'a b'"
    checked = tmp_path / "job.sbatch"
    checked.write_text(text)
    run_command(["bash", "-n", str(checked)], timeout=60).check()


def test_kubeflow_manifest_is_a_pytorchjob(tmp_path: Path) -> None:
    manifest = yaml.safe_load(print_config(tmp_path, "kubeflow", *SHAPE))
    assert (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"]) == (
        "kubeflow.org/v1",
        "PyTorchJob",
        "train",
    )
    assert manifest["spec"]["nprocPerNode"] == "4"
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"  # the operator finds its container by this name
        assert container["command"] == [
            "accel-launch",
            "--mixed-precision",
            "bf16",
            "train.py",
            "--lr",
            "1e-3",
            "--note",
            "a b",
        ]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    alone = yaml.safe_load(print_config(tmp_path, "kubeflow", "--nnodes", "1", "train.py"))
    assert list(alone["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_skypilot_task_runs_the_same_command_on_every_node(tmp_path: Path) -> None:
    task = yaml.safe_load(print_config(tmp_path, "skypilot", *SHAPE))
    assert (task["name"], task["num_nodes"]) == ("train", 3)
    assert task["resources"]["accelerators"] == "A100:4"
    assert task["run"] == "accel-launch --mixed-precision bf16 train.py --lr 1e-3 --note 'a b'\n"


def test_print_config_refuses_an_unknown_scheduler(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "accel_convert.runtime.launch", "--print-config", "pbs", "train.py"]
    run = run_command(command, timeout=60)
    assert (run.returncode, run.stderr) == (
        2,
        "accel-launch: error: --print-config pbs: one of slurm, kubeflow, skypilot\n",
    )


def test_several_slurm_tasks_per_node_is_refused() -> None:
    # `srun --ntasks-per-node=8 accel-launch ...` would start 8 launchers per node, each starting
    # every process of the node.
    with pytest.raises(SchedulerError, match=r"Slurm started 8 tasks on 2 nodes: run one accel-launch per node"):
        read_scheduler({**SLURM, "SLURM_NNODES": "2", "SLURM_NTASKS": "8"})
    assert read_scheduler({**SLURM, "SLURM_NNODES": "2", "SLURM_NTASKS": "2"}) is not None


def test_the_command_line_and_torchruns_variables_win_over_the_scheduler() -> None:
    from accel_convert.runtime import launch

    line = launch.split_command_line(["--master-port=7000", "--nproc_per_node", "2", "train.py"])
    environ = {**SLURM, "PET_NODE_RANK": "3"}
    job, flags = launch.scheduler_flags(line, environ)
    assert job is not None and job.scheduler == "slurm"
    assert flags == ["--nnodes", "4", "--master-addr", "gpu07"]
    # --nnodes on the command line is the job's shape: one node needs no rendezvous address.
    alone = launch.split_command_line(["--nnodes", "1", "train.py"])
    assert launch.scheduler_flags(alone, SLURM)[1] == ["--nproc-per-node", "8"]


def test_the_scheduler_wins_over_the_saved_settings() -> None:
    from accel_convert.runtime import launch

    line = launch.split_command_line(["train.py"])
    saved = {"nnodes": "3", "master_addr": "old-host", "master_port": 7000}
    added = launch.apply_settings(line, saved, {}, decided=["--nnodes", "4", "--master-addr", "gpu07"])
    assert added == ["--master-port", "7000"]


def test_a_wrong_scheduler_variable_is_one_line_before_torch_loads(tmp_path: Path) -> None:
    from tests.test_launch_options import NO_TORCH_SITECUSTOMIZE

    (tmp_path / "sitecustomize.py").write_text(NO_TORCH_SITECUSTOMIZE)  # torch cannot load here
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed\n")
    env = {**SLURM, "SLURM_NNODES": "2", "SLURM_NTASKS": "16", "PYTHONPATH": f"{tmp_path}:{REPO_ROOT}"}
    run = run_command([sys.executable, "-m", "accel_convert.runtime.launch", str(script)], env=env, timeout=120)
    assert run.returncode == 2
    assert run.stderr == (
        "accel-launch: error: Slurm started 16 tasks on 2 nodes: run one accel-launch per node "
        "(srun --ntasks-per-node=1 accel-launch ...); it starts the node's processes itself\n"
    )
