"""Run many two-process script runs under one ``torchrun`` launch: each rank imports torch once,
then forks a child per run.

A ``torchrun --nproc_per_node 2 script.py`` launch costs some 10 s on two cores, nearly all of it
starting three interpreters that import torch and meeting at the rendezvous; the fixture scripts
themselves need a second or two. Launched as ``torchrun --nproc_per_node 2 rankrun.py JOBS.json
RESULTS``, each rank's worker imports what the scripts import, then for every job forks a child
that behaves like that rank of ``torchrun script.py args``: the same ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``... from torchrun, ``__name__ == "__main__"``, the job's folder as working folder
(both ranks share it, as under torchrun), its own stdout and stderr files. Each job rendezvouses
on a fresh port of its own (``MASTER_PORT``), so jobs never see each other's store keys; rank 0
picks the port and hands it to rank 1 through a file in RESULTS. The two children of a job meet
in ``init_process_group`` as two torchrun workers do; jobs run one after another.

Jobs: ``{"script", "args", "cwd", "timeout"}`` (optional ``"sys_path"``; optional
``"interpreter_exit": true``: the child ends through the interpreter's whole shutdown, module
teardown included, instead of only its first steps and ``os._exit``). For job ``i`` each rank
writes ``RESULTS/i.rank<r>.json``: ``{"returncode", "stdout", "stderr", "seconds",
"timed_out"}``, as soon as its child ends, so a caller still has every finished job when the
launch is cut short. A run past its timeout gets every thread's stack written to its stderr by
the child's own faulthandler watchdog (on both ranks: each child has its own), then ends; a child
stuck where even that cannot run is killed a few seconds later.

Forking is only safe because the workers never run a torch operation or join a process group
themselves: no thread pool or communicator exists when the children are created.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forkrun import KILL_GRACE_SECONDS, preload, read_text, run_as_main  # noqa: E402 - the folder is put on sys.path first

#: How often rank 1 looks for the port rank 0 chose for the next job.
PORT_POLL_SECONDS = 0.02


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def job_port(results: str, index: int, rank: int, deadline: float) -> int | None:
    """Rank 0 picks the job's port and publishes it (atomically: write, then rename); the other
    ranks wait for it. None when rank 0 never got there (it is stuck or gone)."""
    path = os.path.join(results, f"{index}.port")
    if rank == 0:
        port = free_port()
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(str(port))
        os.replace(path + ".tmp", path)
        return port
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as handle:
                return int(handle.read())
        except (OSError, ValueError):
            time.sleep(PORT_POLL_SECONDS)
    return None


def run_child(job: dict, port: int, out_path: str, err_path: str) -> None:
    """In the forked child: become this rank of ``torchrun script args`` and never return."""
    code = 0
    try:
        out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        faulthandler.dump_traceback_later(job["timeout"], exit=True, file=sys.stderr)
        os.environ["MASTER_PORT"] = str(port)
        # This job's rank 0 hosts its own store on MASTER_PORT (torchrun's agent store serves
        # the launch as a whole, and a second group on it would read the first one's keys).
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
        code = run_as_main(job)
    except BaseException:  # noqa: BLE001 - the child reports every failure as a traceback
        traceback.print_exc()
        code = 1
    if job.get("interpreter_exit"):
        # Leave through the interpreter's own shutdown, all of it (threads joined, atexit
        # handlers, modules torn down, the collector's last run), as the end of ``python
        # script.py`` does: unwinding out of this worker's main, nothing below catches it.
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(code)
    try:
        # What the interpreter does on the way out, in its order: wait for non-daemon threads,
        # then the atexit handlers (the runtime leaves its process group there).
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = code or 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run_job(job: dict, index: int, rank: int, results: str) -> dict:
    """Fork one job's child on this rank and wait for it (killing it past its timeout)."""
    started = time.monotonic()
    limit = job["timeout"] + KILL_GRACE_SECONDS
    # Rank 0 may still be waiting out the previous job (its peer here failed early): wait for it
    # that long too, so this job still gets its full time.
    port = job_port(results, index, rank, started + 2 * limit)
    if port is None:
        return {
            "returncode": -1,
            "stdout": "",
            "stderr": f"rank {rank}: rank 0 never published this job's port",
            "seconds": time.monotonic() - started,
            "timed_out": True,
        }
    out_path = os.path.join(results, f"{index}.rank{rank}.out")
    err_path = os.path.join(results, f"{index}.rank{rank}.err")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run_child(job, port, out_path, err_path)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - started > limit:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    seconds = time.monotonic() - started
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "stdout": read_text(out_path),
        "stderr": read_text(err_path),
        "seconds": round(seconds, 3),
        "timed_out": seconds >= job["timeout"],
    }


def main() -> None:
    jobs_file, results = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    with open(jobs_file, encoding="utf-8") as handle:
        jobs = json.load(handle)
    preload([job["script"] for job in jobs])
    for index, job in enumerate(jobs):
        result = run_job(job, index, rank, results)
        path = os.path.join(results, f"{index}.rank{rank}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
