"""Run many one-process script runs cheaply: import torch once, then fork one child per run.

A plain ``python script.py`` pays 1.5-5 s of imports (torch, accelerate) before the script does
anything; the fixture scripts themselves need well under a second. This runner imports what the
scripts import once, then forks a child per run, which starts with those modules already loaded
and otherwise behaves like ``python script.py args`` in the given folder: ``__name__`` is
``"__main__"``, ``sys.argv`` and ``sys.path[0]`` are the script's, stdout and stderr (file
descriptors 1 and 2, so C-level output too) go to the child's own files.

Usage: ``python forkrun.py JOBS.json`` where the file holds a list of jobs
``{"script": path, "args": [...], "cwd": folder, "timeout": seconds}`` (optional
``"sys_path"``: folders put after the script's own; ``"after_previous": true``: start only once
every earlier job has finished, e.g. after a job that writes files the next ones read). Each job
is reported as soon as it ends, one JSON object per stdout line:
``{"index", "returncode", "stdout", "stderr", "seconds", "timed_out"}``, so that a caller that
stops waiting still has every result finished so far. Two children run at a time (the machine has
two cores).

Every job has its own timeout, and a run past it is not silently killed: the child's own
faulthandler watchdog writes every thread's stack to its stderr and ends it (returncode 1,
``timed_out`` true), so the failing test shows where the script hung. Should the child be stuck
where even that cannot run, the parent kills it a few seconds later (returncode -9).

Forking is only safe because the parent never runs a torch operation: no intra-op thread pool
exists yet when the children are created.
"""

from __future__ import annotations

import ast
import faulthandler
import gc
import importlib
import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback

PARALLEL_RUNS = 2
#: How long after a job's own timeout (when its watchdog should have dumped its stacks and ended
#: it) the parent kills it.
KILL_GRACE_SECONDS = 10.0


def absolute_imports(script: str) -> dict[str, set[str]]:
    """Every module a script imports by absolute name (``torch.nn`` for ``import torch.nn as
    nn``), with the names it takes from it (``{"DataLoader"}`` for ``from torch.utils.data import
    DataLoader``)."""
    with open(script, "rb") as handle:
        tree = ast.parse(handle.read(), filename=script)
    modules: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.setdefault(node.module, set()).update(alias.name for alias in node.names if alias.name != "*")
    return modules


def is_local_module(name: str, scripts: list[str]) -> bool:
    """Whether ``name`` is a module or package beside one of the scripts (``engine.py`` of a
    project): each run must import its own copy (an original and a converted ``engine.py`` share
    the name), so the parent never imports it."""
    for script in scripts:
        folder = os.path.dirname(os.path.abspath(script))
        if os.path.exists(os.path.join(folder, name + ".py")) or os.path.isdir(os.path.join(folder, name)):
            return True
    return False


#: Modules a package imports only on first use, preloaded with it: building the first optimizer
#: imports ``torch._dynamo`` (and with it sympy), 1.5-2 s that every forked run would pay again.
IMPORTED_ON_FIRST_USE = {"torch": ("torch._dynamo",)}


def preload(scripts: list[str]) -> None:
    """Import in the parent what the scripts will import, so each child gets it for free: each
    module by its full name (``accel_convert.runtime``, not only ``accel_convert``), the names
    taken from it (a lazy package such as transformers imports ``BertModel``'s module only when
    the name is read), and what the package imports on first use. None of this starts a thread
    (one thread per process is what makes forking safe; the scripts' runs start theirs)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(scripts[0])) if scripts else ".")
    wanted: dict[str, set[str]] = {}
    for script in scripts:
        for module, names in absolute_imports(script).items():
            wanted.setdefault(module, set()).update(names)
    for module in sorted(wanted):
        top = module.split(".")[0]
        if is_local_module(top, scripts):
            continue
        try:
            loaded = importlib.import_module(module)
            for extra in IMPORTED_ON_FIRST_USE.get(top, ()):
                importlib.import_module(extra)
            for name in sorted(wanted[module]):
                getattr(loaded, name, None)
        except Exception:  # noqa: BLE001 - a module the child cannot import fails there, visibly
            pass
    sys.path.pop(0)
    # What is loaded now lives as long as the process: out of the collector's sight, a child's
    # gc.collect() (the runtime collects before leaving its process group) skips those objects,
    # and does not write to their pages, which the children would otherwise each copy.
    gc.freeze()


def run_child(job: dict, out_path: str, err_path: str) -> None:
    """In the forked child: become ``python script args`` in ``cwd`` and never return."""
    code = 0
    try:
        out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        # The watchdog is a C thread: it dumps the stacks even when Python code never yields.
        faulthandler.dump_traceback_later(job.get("timeout", 60), exit=True, file=sys.stderr)
        code = run_as_main(job)
    except BaseException:  # noqa: BLE001 - the child reports every failure as a traceback
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run_as_main(job: dict) -> int:
    """``python script args`` in ``cwd``, in this process: the exit code it ends with (a
    traceback on stderr and 1 for an exception, as the interpreter would)."""
    try:
        script = os.path.abspath(job["script"])
        os.chdir(job["cwd"])
        sys.argv = [script, *job["args"]]
        sys.path[0:0] = [os.path.dirname(script), *job.get("sys_path", [])]
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as the interpreter reports it
        traceback.print_exc()
        return 1
    return 0


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def report(result: dict) -> None:
    """One finished job, as one line, at once (the caller reads results as they come)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def run_jobs(jobs: list[dict], workdir: str) -> None:
    """Fork the jobs, at most PARALLEL_RUNS at a time, and report each as it ends."""
    running: dict[int, tuple[int, float]] = {}  # pid -> (job index, start time)
    pending = list(range(len(jobs)))
    paths = [(os.path.join(workdir, f"{i}.out"), os.path.join(workdir, f"{i}.err")) for i in range(len(jobs))]
    while pending or running:
        while pending and len(running) < PARALLEL_RUNS:
            if jobs[pending[0]].get("after_previous") and running:
                break
            index = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                run_child(jobs[index], *paths[index])
            running[pid] = (index, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for child, (job, started) in list(running.items()):
                if time.monotonic() - started > jobs[job].get("timeout", 60) + KILL_GRACE_SECONDS:
                    os.kill(child, signal.SIGKILL)
            time.sleep(0.02)
            continue
        index, started = running.pop(pid)
        seconds = time.monotonic() - started
        report(
            {
                "index": index,
                "returncode": os.waitstatus_to_exitcode(status),
                "stdout": read_text(paths[index][0]),
                "stderr": read_text(paths[index][1]),
                "seconds": round(seconds, 3),
                "timed_out": seconds >= jobs[index].get("timeout", 60),
            }
        )


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        jobs = json.load(handle)
    preload([job["script"] for job in jobs])
    with tempfile.TemporaryDirectory(prefix="forkrun-") as workdir:
        run_jobs(jobs, workdir)


if __name__ == "__main__":
    main()
