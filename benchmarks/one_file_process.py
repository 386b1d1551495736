"""The whole process on one 9 KB script against ``import libcst, click, rich`` (d), in one run.

Issue 41's bar for one file: the process converting ``benchmarks/data/typical_train.py`` takes at
most 1.6 d. Timed, interleaved (the order reversed every other round), medians of ``--rounds``:

- ``d``: ``python -c "import libcst, click, rich"``;
- ``convert``: ``python -m accel_convert.converter -q SCRIPT`` (the converted script to stdout);
- ``check``: ``python -m accel_convert.converter --check --no-cache -q SCRIPT`` (the cache of
  ``--check`` is left out: ``check_cache.py`` measures it; here every run converts);

each with compiled bytecode (as ``convert_speed.process_seconds`` runs them: an installed package
has it). With ``--against REV`` the same two commands of that commit (``git archive`` into a
temporary folder) are timed in the same rounds, so old and new are compared on one machine state.
Reported: wall time and CPU time (user + system of the child), each as a multiple of d's, and the
least CPU time of the rounds against d's least. On a machine shared with other work the wall time
waits for the CPU; the CPU time is the steadier, and its least the least disturbed by the load.

Usage: ``python benchmarks/one_file_process.py [--rounds 9] [--against REV]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "benchmarks" / "data" / "typical_train.py"


def commands(tree: Path) -> dict[str, list[str]]:
    """The two runs of the converter in ``tree``."""
    converter = [sys.executable, "-m", "accel_convert.converter"]
    return {
        "convert": [*converter, "-q", str(SCRIPT)],
        "check": [*converter, "--check", "--no-cache", "-q", str(SCRIPT)],
    }


def timed(command: list[str], tree: Path | None, bytecode: str) -> tuple[float, float]:
    """Wall and CPU seconds of one process (``tree`` on its ``PYTHONPATH``, run from there)."""
    environment = {**os.environ, "PYTHONPYCACHEPREFIX": bytecode}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    if tree is not None:
        environment["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    finished = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment, cwd=tree, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if finished.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed: {finished.stderr.decode(errors='replace')[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--against", help="also time this commit's converter, in the same rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        runs: dict[str, tuple[list[str], Path | None]] = {
            "d": ([sys.executable, "-c", "import libcst, click, rich"], None)
        }
        trees = {"": REPO_ROOT}
        if args.against:
            old = Path(folder) / "old"
            old.mkdir()
            archive = subprocess.run(["git", "archive", args.against], cwd=REPO_ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
            trees = {f"{args.against} ": old, "this tree ": REPO_ROOT}
        for label, tree in trees.items():
            for name, command in commands(tree).items():
                runs[f"{label}{name}"] = (command, tree)
        bytecode = {name: str(Path(folder) / "pyc" / str(index)) for index, name in enumerate(runs)}
        for name, (command, tree) in runs.items():  # untimed: compiles, warms the file cache
            timed(command, tree, bytecode[name])
        walls: dict[str, list[float]] = {name: [] for name in runs}
        cpus: dict[str, list[float]] = {name: [] for name in runs}
        for round_number in range(args.rounds):
            for name in list(runs) if round_number % 2 == 0 else list(reversed(runs)):
                wall, cpu = timed(*runs[name], bytecode[name])
                walls[name].append(wall)
                cpus[name].append(cpu)
    d_wall, d_cpu = statistics.median(walls["d"]), statistics.median(cpus["d"])
    d_least = min(cpus["d"])
    print(
        f"{SCRIPT.name} ({SCRIPT.stat().st_size / 1000:.1f} KB), medians of {args.rounds}, load {os.getloadavg()[0]:.1f}"
    )
    for name in runs:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        least = min(cpus[name])
        print(
            f"{name:24s} wall {wall * 1000:6.0f} ms ({wall / d_wall:.2f} d)   cpu {cpu * 1000:5.0f} ms ({cpu / d_cpu:.2f} d)"
            f"   least cpu {least * 1000:5.0f} ms ({least / d_least:.2f} d)"
        )


if __name__ == "__main__":
    main()
