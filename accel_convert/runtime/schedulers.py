"""What ``accel-launch`` reads from a cluster scheduler's environment, and the job files it writes.

The same one-line command (``accel-launch train.py``) then runs unchanged on every machine of a
job: each launcher finds the number of machines, its own machine's rank, the machine that hosts
the rendezvous and the GPUs per machine in the variables the scheduler sets, and hands them to
torchrun as the flags a user would have typed. Flags given on the command line win.

- Slurm (``srun accel-launch train.py``, one task per node): ``SLURM_NNODES`` (else
  ``SLURM_JOB_NUM_NODES``), ``SLURM_NODEID``, the first host of ``SLURM_STEP_NODELIST`` (else
  ``SLURM_NODELIST``, ``SLURM_JOB_NODELIST``; compact lists such as ``node[01-03,07]`` are
  expanded here, without ``scontrol``), ``SLURM_GPUS_ON_NODE``; the port is ``MASTER_PORT`` when
  set, else derived from ``SLURM_JOB_ID`` (two jobs sharing a machine do not collide).
- Kubeflow's training operator (a ``PyTorchJob``): ``PET_NNODES``, ``PET_NODE_RANK``,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, ``PET_NPROC_PER_NODE`` (torchrun's own variables);
  where an older operator sets only ``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` for the pod,
  those stand in. An elastic job (``PET_RDZV_ENDPOINT``) is torchrun's as it is.
- SkyPilot: ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NODE_RANK``, the first line of
  ``SKYPILOT_NODE_IPS``, ``SKYPILOT_NUM_GPUS_PER_NODE``; the port is ``MASTER_PORT`` or 29500.

Standard library only: nothing here needs torch.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 29500
#: Slurm jobs get a port in [SLURM_PORT_BASE, SLURM_PORT_BASE + SLURM_PORT_SPAN), from the job id:
#: below Linux's ephemeral ports, and the same on every node of the job.
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000


class SchedulerError(ValueError):
    """A scheduler variable that cannot be read (one line, exit 2)."""


@dataclass(frozen=True)
class SchedulerJob:
    """The shape of the job as the scheduler describes it; None where it says nothing."""

    scheduler: str
    nnodes: str | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    nproc_per_node: str | None = None

    def flags(self) -> dict[str, str]:
        """torchrun's flags for what is known. One machine needs no rendezvous address: torchrun
        then finds a free port itself."""
        flags: dict[str, str] = {}
        if self.nproc_per_node is not None:
            flags["--nproc-per-node"] = self.nproc_per_node
        if self.nnodes is None or self.nnodes == "1":
            return flags
        flags["--nnodes"] = self.nnodes
        if self.node_rank is not None:
            flags["--node-rank"] = str(self.node_rank)
        if self.master_addr is not None:
            flags["--master-addr"] = self.master_addr
        if self.master_port is not None:
            flags["--master-port"] = str(self.master_port)
        return flags

    def describe(self) -> str:
        """``slurm: node 1 of 2, rendezvous at node01:21234``."""
        if self.nnodes is None or self.nnodes == "1":
            return f"{self.scheduler}: 1 node"
        where = f", rendezvous at {self.master_addr}:{self.master_port or DEFAULT_PORT}" if self.master_addr else ""
        rank = "?" if self.node_rank is None else self.node_rank
        return f"{self.scheduler}: node {rank} of {self.nnodes}{where}"


def _number(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    # Slurm writes some counts with a repeat suffix ("2(x3)"); the first number is this node's.
    match = re.match(r"\d+", value)
    if match is None:
        raise SchedulerError(f"{name}={value!r} is not a number")
    return int(match.group())


def _first(environ: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _split_top_level(text: str) -> list[str]:
    """``a[1-2],b`` -> ``["a[1-2]", "b"]``: commas inside brackets belong to the range."""
    parts, depth, current = [], 0, ""
    for character in text:
        if character == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(character, 0)
        current += character
    parts.append(current)
    return [part for part in parts if part]


def _expand_range(body: str) -> list[str]:
    """``01-03,07`` -> ``["01", "02", "03", "07"]`` (a zero-padded start keeps its width)."""
    values: list[str] = []
    for item in body.split(","):
        start, dash, end = item.partition("-")
        if not start.isdigit() or (dash and not end.isdigit()):
            raise SchedulerError(f"[{body}]: not a Slurm host range")
        if not dash:
            values.append(start)
            continue
        width = len(start) if start.startswith("0") else 0
        values += [str(number).zfill(width) for number in range(int(start), int(end) + 1)]
    return values


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compact host list, expanded as ``scontrol show hostnames`` would:
    ``node[01-03,07],gpu-a[1-2]x`` -> node01 node02 node03 node07 gpu-a1x gpu-a2x; several
    bracket groups in one name multiply (``r[1-2]n[1-2]``: r1n1 r1n2 r2n1 r2n2)."""
    hosts: list[str] = []
    for entry in _split_top_level(nodelist.strip()):
        match = re.search(r"\[([^\]]*)\]", entry)
        if match is None:
            if "[" in entry or "]" in entry:
                raise SchedulerError(f"{entry}: unbalanced brackets in a Slurm host list")
            hosts.append(entry)
            continue
        head, tail = entry[: match.start()], entry[match.end() :]
        hosts += [host for value in _expand_range(match.group(1)) for host in expand_nodelist(head + value + tail)]
    return hosts


def read_slurm(environ: Mapping[str, str]) -> SchedulerJob | None:
    if "SLURM_JOB_ID" not in environ or "SLURM_NODEID" not in environ:
        return None
    nodes = _number(environ, "SLURM_NNODES") or _number(environ, "SLURM_JOB_NUM_NODES") or 1
    tasks = _number(environ, "SLURM_STEP_NUM_TASKS") or _number(environ, "SLURM_NTASKS")
    if nodes > 1 and tasks is not None and tasks > nodes:
        # Each task would be a launcher starting every process of its node: N times too many.
        raise SchedulerError(
            f"Slurm started {tasks} tasks on {nodes} nodes: run one accel-launch per node "
            "(srun --ntasks-per-node=1 accel-launch ...); it starts the node's processes itself"
        )
    nodelist = _first(environ, "SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
    hosts = expand_nodelist(nodelist) if nodelist else []
    port = _number(environ, "MASTER_PORT")
    if port is None:
        port = SLURM_PORT_BASE + (_number(environ, "SLURM_JOB_ID") or 0) % SLURM_PORT_SPAN
    gpus = _number(environ, "SLURM_GPUS_ON_NODE")
    return SchedulerJob(
        "slurm",
        nnodes=str(nodes),
        node_rank=_number(environ, "SLURM_NODEID"),
        master_addr=hosts[0] if hosts else None,
        master_port=port,
        nproc_per_node=str(gpus) if gpus else None,
    )


def read_kubeflow(environ: Mapping[str, str]) -> SchedulerJob | None:
    if "PET_NNODES" not in environ:
        return None
    if environ.get("PET_RDZV_ENDPOINT"):  # elastic: torchrun reads every PET_* variable itself
        return SchedulerJob("kubeflow", nnodes=environ["PET_NNODES"])
    rank = _number(environ, "PET_NODE_RANK")
    return SchedulerJob(
        "kubeflow",
        nnodes=environ["PET_NNODES"].strip(),
        node_rank=rank if rank is not None else _number(environ, "RANK"),
        master_addr=_first(environ, "PET_MASTER_ADDR", "MASTER_ADDR"),
        master_port=_number(environ, "PET_MASTER_PORT") or _number(environ, "MASTER_PORT"),
        nproc_per_node=_first(environ, "PET_NPROC_PER_NODE"),
    )


def read_skypilot(environ: Mapping[str, str]) -> SchedulerJob | None:
    if "SKYPILOT_NODE_RANK" not in environ:
        return None
    ips = environ.get("SKYPILOT_NODE_IPS", "").split()
    gpus = _number(environ, "SKYPILOT_NUM_GPUS_PER_NODE")
    return SchedulerJob(
        "skypilot",
        nnodes=str(_number(environ, "SKYPILOT_NUM_NODES") or 1),
        node_rank=_number(environ, "SKYPILOT_NODE_RANK"),
        master_addr=ips[0] if ips else None,
        master_port=_number(environ, "MASTER_PORT") or DEFAULT_PORT,
        nproc_per_node=str(gpus) if gpus else None,
    )


def read_scheduler(environ: Mapping[str, str]) -> SchedulerJob | None:
    """The job this launcher runs in, from the first scheduler whose variables are set
    (Kubeflow's are torchrun's own, so they are read first)."""
    for reader in (read_kubeflow, read_skypilot, read_slurm):
        job = reader(environ)
        if job is not None:
            return job
    return None


# -- job files -----------------------------------------------------------------------------------

SCHEDULERS = ("slurm", "kubeflow", "skypilot")


@dataclass(frozen=True)
class JobShape:
    """What a job file asks for: machines, GPUs per machine, and the command each one runs."""

    nnodes: int
    gpus_per_node: int
    options: Sequence[str]  # accel-launch's options that are not the job's shape
    script: Sequence[str]  # the script and its arguments

    @property
    def name(self) -> str:
        """The job's name, from the script's: lower case, letters, digits and dashes."""
        return re.sub(r"[^a-z0-9-]+", "-", Path(self.script[0]).stem.lower()).strip("-") or "train"

    @property
    def command(self) -> list[str]:
        return ["accel-launch", *self.options, *self.script]

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)


def slurm_job(shape: JobShape) -> str:
    """An sbatch script: one task (one accel-launch) per node; each reads Slurm's variables."""
    return f"""\
#!/bin/bash
# Submit with: sbatch {shape.name}.sbatch   (written by accel-launch --print-config slurm)
#SBATCH --job-name={shape.name}
#SBATCH --nodes={shape.nnodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={shape.gpus_per_node}
#SBATCH --output=%x-%j.out

# One accel-launch per node: each finds its node's rank, the first node's address and the
# GPUs on its node in Slurm's variables, and starts one process per GPU.
srun {shape.command_line}
"""


def kubeflow_job(shape: JobShape) -> str:
    """A PyTorchJob manifest (kubeflow.org/v1): a master and nnodes-1 workers, one pod per node."""
    command = ", ".join(json.dumps(part) for part in shape.command)  # a JSON string is YAML

    def replica(kind: str, replicas: int) -> str:
        return f"""\
    {kind}:
      replicas: {replicas}
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: IMAGE  # an image with accel-convert[runtime] and the script
              command: [{command}]
              resources:
                limits:
                  nvidia.com/gpu: {shape.gpus_per_node}
"""

    workers = replica("Worker", shape.nnodes - 1) if shape.nnodes > 1 else ""
    return f"""\
# Apply with: kubectl apply -f {shape.name}.yaml   (written by accel-launch --print-config kubeflow)
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: {shape.name}
spec:
  nprocPerNode: "{shape.gpus_per_node}"
  pytorchReplicaSpecs:
{replica("Master", 1)}{workers}"""


def skypilot_job(shape: JobShape) -> str:
    """A SkyPilot task: every node runs the same command."""
    return f"""\
# Launch with: sky launch -c {shape.name} {shape.name}.yaml   (written by accel-launch --print-config skypilot)
name: {shape.name}
num_nodes: {shape.nnodes}
resources:
  accelerators: A100:{shape.gpus_per_node}  # the GPU type to ask for, and how many per node
workdir: .
setup: pip install 'accel-convert[runtime]'
run: |
  {shape.command_line}
"""


JOB_WRITERS = {"slurm": slurm_job, "kubeflow": kubeflow_job, "skypilot": skypilot_job}
