"""Start real multi-process runs for tests: ``torchrun`` on CPU with Gloo.

Every test that needs several ranks goes through :func:`torchrun` so that ports never collide
(each launch gets a free port), a hung run is killed with its whole process group (no stray
workers outlive a test), and failures show every rank's output.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Run:
        if self.returncode != 0:
            raise AssertionError(
                f"run failed with exit code {self.returncode}\n--- stdout ---\n{self.stdout}"
                f"\n--- stderr ---\n{self.stderr}"
            )
        return self


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child run: the repo importable, one thread per rank, quiet torch."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    # Two cores shared by every rank: more threads per rank only make the ranks fight.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.pop("ACCELERATE_USE_CPU", None)
    if extra:
        env.update(extra)
    return env


def run_command(
    cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | str | None = None, timeout: float = 180.0
) -> Run:
    """Run ``cmd`` in its own process group; on timeout kill the whole group and fail."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_env(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"{' '.join(map(str, cmd))} ran past {timeout}s and was killed\n--- stdout ---\n{out}"
            f"\n--- stderr ---\n{err}"
        ) from None
    return Run(proc.returncode, out, err)


def torchrun(
    script: Path | str,
    *args: str,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 180.0,
    extra_launcher_args: list[str] | None = None,
) -> Run:
    """``torchrun --nproc_per_node N script args`` on this machine, on a fresh free port."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *(extra_launcher_args or []),
        str(script),
        *args,
    ]
    return run_command(cmd, env=env, cwd=cwd, timeout=timeout)


def python(
    script: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 180.0,
) -> Run:
    """A plain one-process ``python script args`` run."""
    return run_command([sys.executable, str(script), *args], env=env, cwd=cwd, timeout=timeout)
