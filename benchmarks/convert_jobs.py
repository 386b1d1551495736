"""``--jobs``: a folder converted with the default (the machine's cores) against ``--jobs 1``.

The 52 tutorial scripts of ``../shared/realworld/tutorials/src`` are copied to a temporary folder
(never into the project), then converted with ``accel-convert FOLDER -o OUT`` in a fresh process,
once with ``--jobs 1`` and once with the default, alternating for ``--rounds`` rounds; the best
wall time of each is kept. Printed: both times, their ratio (one worker / default: above 1 means
the workers pay off), the cores, and the load average before and after (a loaded machine shrinks
the gain: the workers compete with everything else for the same cores). The two runs' stdout,
stderr, exit code and written files must be identical, or the benchmark fails.

Every run loads the converter's modules compiled (``PYTHONPYCACHEPREFIX``, a temporary folder an
untimed run fills), as an installed package has them; ``--source-only`` times them compiled from
source at every start instead (``PYTHONDONTWRITEBYTECODE``, no cached bytecode: a checkout run with
that variable set, as this project's sessions are).

Usage: ``python benchmarks/convert_jobs.py [--source DIR] [--rounds N] [--source-only]`` from the
repository root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO_ROOT.parent / "shared" / "realworld" / "tutorials" / "src"


def convert(
    folder: Path, out: Path, jobs: list[str], bytecode: Path | None
) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    if bytecode is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", str(folder), "-o", str(out), *jobs],
        capture_output=True,
        env=env,
        cwd=folder.parent,
        check=False,
    )
    return time.perf_counter() - start, run


def written(out: Path) -> dict[str, bytes]:
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--source-only", action="store_true", help="no compiled bytecode: compile at every start")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        folder = root / "src"
        shutil.copytree(args.source, folder)
        bytecode = None if args.source_only else root / "pyc"
        if bytecode is not None:  # untimed: compiles every module a run loads
            convert(folder, root / "out", ["--jobs", "1"], bytecode)
        best: dict[str, float] = {}
        results: dict[str, tuple[int, bytes, bytes, dict[str, bytes]]] = {}
        for _ in range(args.rounds):
            for name, jobs in (("--jobs 1", ["--jobs", "1"]), ("default", [])):
                seconds, run = convert(folder, root / "out", jobs, bytecode)
                best[name] = min(seconds, best.get(name, seconds))
                results[name] = (run.returncode, run.stdout, run.stderr, written(root / "out"))
        files = len(list(folder.rglob("*.py")))
    if results["--jobs 1"] != results["default"]:
        sys.exit("the default --jobs gave other output than --jobs 1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    compiled = "compiled from source at every start" if args.source_only else "bytecode compiled beforehand"
    print(f"{files} files, {cores} cores (the default --jobs), best of {args.rounds} round(s), {compiled}")
    print(f"--jobs 1:  {best['--jobs 1']:.2f} s")
    print(f"default:   {best['default']:.2f} s")
    print(f"ratio (--jobs 1 / default): {best['--jobs 1'] / best['default']:.2f}")
    print(f"load average (1 min): {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
