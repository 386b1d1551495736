"""Start real multi-process runs for tests: ``torchrun`` on CPU with Gloo.

Every test that needs several ranks goes through :func:`torchrun` so that ports never collide
(each launch gets a free port), a hung run is killed with its whole process group (no stray
workers outlive a test), and failures show every rank's output. A run past its timeout first
has every Python process of its group write all its threads' stacks to stderr (faulthandler,
enabled in every child, answers SIGABRT that way), so a hang says where each rank was waiting.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Time limits of multi-process tests allow a machine at least this many times busier than a quiet
#: one (CI and shared machines run several suites at once).
LOAD_SLACK = 5.0
#: How long a quiet machine's processes of a timed-out run take at most to write their stacks
#: (stretched by :func:`load_slack`; the wait ends as soon as they are done).
STACK_DUMP_SECONDS = 3.0
#: How long one process's stack dump takes at most on a quiet machine: the next process is sent
#: its signal once this one has ended, or after this (stretched) time (they share one stderr).
DUMP_STAGGER_SECONDS = 0.3


def load_slack() -> float:
    """The factor to stretch a quiet machine's time limit by: :data:`LOAD_SLACK`, or the present
    load per core (1-minute load average) when that is higher."""
    return max(LOAD_SLACK, os.getloadavg()[0] / (os.cpu_count() or 1))


# A timed-out run is ended with SIGABRT (see above); its processes must not write core files (a
# torch process's core is hundreds of megabytes). Children inherit the limit.
resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


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
    # Only fatal signals make faulthandler print; the harness sends SIGABRT to a hung run.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env.pop("ACCELERATE_USE_CPU", None)
    if extra:
        env.update(extra)
    return env


def run_command(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 180.0,
    raise_on_timeout: bool = True,
    clock_starts_when: Sequence[Path] = (),
) -> Run:
    """Run ``cmd`` in its own process group. On timeout every process of the group writes its
    stacks to stderr, then the group is killed, and the run fails (AssertionError), or, with
    ``raise_on_timeout=False``, is returned with returncode -9 and what it wrote (a caller
    running many cases fails only the case that hung).

    ``clock_starts_when``: files the run creates once it is in place (a test of the hang
    detector: every rank blocked where the test expects its stack); the timeout counts from when
    all exist, so a machine slow to start the ranks cannot fire it early. The run must write
    little before then (its pipes are not read while waiting)."""
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
        wait_for_files(proc, clock_starts_when, timeout * 10)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop_group_with_stacks(proc)
        message = f"{' '.join(map(str, cmd))} ran past {timeout}s and was killed (stacks of its processes above)"
        if raise_on_timeout:
            raise AssertionError(f"{message}\n--- stdout ---\n{out}\n--- stderr ---\n{err}") from None
        return Run(-signal.SIGKILL, out, f"{err}\n{message}")
    return Run(proc.returncode, out, err)


def wait_for_files(proc: subprocess.Popen[str], paths: Sequence[Path], limit: float) -> None:
    """Return once every path exists, the process has ended, or ``limit`` seconds have passed."""
    deadline = time.monotonic() + limit
    while paths and time.monotonic() < deadline and proc.poll() is None:
        if all(path.exists() for path in paths):
            return
        time.sleep(0.05)


def stop_group_with_stacks(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGABRT to the whole group and every descendant (each Python process prints its stacks,
    then ends), then SIGKILL to whatever is left; the output written until then. Descendants
    count because torchrun starts each rank in a session of its own, outside the group."""
    # The launcher is paused first: torchrun's agent, seeing one rank end, would end the others
    # with SIGTERM (no stacks) before their turn came.
    signal_each([proc.pid], signal.SIGSTOP)
    # One process at a time, the ranks first: their dumps share one stderr and would interleave.
    # Every rank is paused until its turn: a rank whose peer has just ended would otherwise see
    # its collective fail and leave the place it hung in before its own stack is taken.
    slack = load_slack()
    ranks = list(reversed(descendants(proc.pid)))
    signal_each(ranks, signal.SIGSTOP)
    for pid in ranks:
        signal_each([pid], signal.SIGABRT)  # pending while paused, taken first when it resumes
        signal_each([pid], signal.SIGCONT)
        wait_until_ended(pid, DUMP_STAGGER_SECONDS * slack)
    signal_each([proc.pid], signal.SIGCONT)
    signal_group(proc, signal.SIGABRT)
    try:
        return proc.communicate(timeout=STACK_DUMP_SECONDS * slack)
    except subprocess.TimeoutExpired:  # a process that could not print: killed (output kept)
        signal_group(proc, signal.SIGKILL)
        signal_each(descendants(proc.pid), signal.SIGKILL)
        return proc.communicate()
    finally:
        signal_group(proc, signal.SIGKILL)  # a process that left the run's pipes still goes
        signal_each(descendants(proc.pid), signal.SIGKILL)


def wait_until_ended(pid: int, limit: float) -> None:
    """Return once ``pid`` has ended (gone, or a zombie its paused parent has not reaped), or
    after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            return
        if stat[stat.rfind(")") + 2 :].startswith(("Z", "X")):
            return
        time.sleep(0.02)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc), children before grandchildren."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        # ``pid (command) state ppid ...``: the command may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop(0)
        children = [child for child, parent in parents.items() if parent == current]
        found.extend(children)
        pending.extend(children)
    return found


def signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def signal_group(proc: subprocess.Popen[str], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:  # the group has ended already
        pass


def torchrun(
    script: Path | str,
    *args: str,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 180.0,
    extra_launcher_args: list[str] | None = None,
    raise_on_timeout: bool = True,
    clock_starts_when: Sequence[Path] = (),
) -> Run:
    """``torchrun --nproc_per_node N script args`` on this machine, on a fresh free port
    (``clock_starts_when``: see :func:`run_command`)."""
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
    return run_command(
        cmd,
        env=env,
        cwd=cwd,
        timeout=timeout,
        raise_on_timeout=raise_on_timeout,
        clock_starts_when=clock_starts_when,
    )


def python(
    script: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 180.0,
    raise_on_timeout: bool = True,
) -> Run:
    """A plain one-process ``python script args`` run."""
    return run_command(
        [sys.executable, str(script), *args], env=env, cwd=cwd, timeout=timeout, raise_on_timeout=raise_on_timeout
    )
