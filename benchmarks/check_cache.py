"""``--check``'s cache: a second ``--check`` of an unchanged folder against Python importing libcst.

The bar (issue 41): the second ``accel-convert --check FOLDER`` costs at most 1.5 times the bare
``python -c "import libcst, click, rich"``, the imports no run of the converter can do without.

Method: the folder's ``.py`` files (default: the fixture cases, ``fixtures/cases``; ``--source
DIR`` for another, such as ``../shared/realworld/tutorials/src``) are copied to a temporary folder
(never into the project). Each round runs, in fresh processes and in this order: the bare imports;
a cold ``--check`` (an empty cache folder, ``ACCEL_CONVERT_CACHE_DIR``); a warm ``--check`` (the
cache that cold run filled). Every process gets the same bytecode cache folder
(``PYTHONPYCACHEPREFIX``, warmed by one untimed run of each command first), so that no run pays
for compiling modules that an installed package has compiled already. Printed: the median and
the best wall time and CPU time (user + system, the process and its workers) of each over
``--rounds`` rounds, and the ratios to the bare imports from the medians (the bar applies to
warm/bare), with the load average before and after: on a loaded machine (the project's 2 shared
cores) wall times carry the other processes' waits, CPU times much less so. The cold and the warm
run's stdout, stderr and exit code must be identical, or the benchmark fails.

Usage: ``python benchmarks/check_cache.py [--source DIR] [--rounds N]`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO_ROOT / "fixtures" / "cases"
BARE = [sys.executable, "-c", "import libcst, click, rich"]
BAR = 1.5


Times = tuple[float, float]  # wall, CPU (user + system) seconds


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[Times, subprocess.CompletedProcess[bytes]]:
    """Run ``command``; its wall time and the CPU time of it and its children (workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, env=env, cwd=cwd, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime), run


def environment(work: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def one_round(check: list[str], env: dict[str, str], work: Path, cache: Path) -> tuple[Times, Times, Times]:
    """Bare imports, cold --check, warm --check: their wall times."""
    bare, run = timed(BARE, env, work)
    assert run.returncode == 0, run.stderr.decode()
    shutil.rmtree(cache, ignore_errors=True)
    env = {**env, "ACCEL_CONVERT_CACHE_DIR": str(cache)}
    cold, cold_run = timed(check, env, work)
    warm, warm_run = timed(check, env, work)
    first = (cold_run.returncode, cold_run.stdout, cold_run.stderr)
    second = (warm_run.returncode, warm_run.stdout, warm_run.stderr)
    if first != second:
        sys.exit(f"the warm run printed something else than the cold one:\n{first}\n{second}")
    if cold_run.returncode not in (0, 1, 123):
        sys.exit(cold_run.stderr.decode())
    return bare, cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="check-cache-") as temporary:
        work = Path(temporary)
        folder = work / "src"
        folder.mkdir()
        for script in sorted(args.source.glob("*.py")):
            shutil.copy(script, folder / script.name)
        env = environment(work)
        check = [sys.executable, "-m", "accel_convert.converter", "--check", "--jobs", "1", str(folder)]
        load_before = os.getloadavg()[0]
        one_round(check, env, work, work / "cache")  # untimed: fills the bytecode cache
        times = [one_round(check, env, work, work / "cache") for _ in range(args.rounds)]
        load_after = os.getloadavg()[0]
    files = len(list(args.source.glob("*.py")))
    print(f"{files} files from {args.source}; {args.rounds} rounds; load average {load_before:.2f} -> {load_after:.2f}")
    print("| run | wall: median s | best s | / bare | CPU: median s | best s | / bare |")
    print("|---|---|---|---|---|---|---|")
    names = ("bare imports", "cold --check", "warm --check")
    medians = {}
    for name, runs in zip(names, zip(*times)):
        walls, cpus = [wall for wall, _ in runs], [cpu for _, cpu in runs]
        medians[name] = (statistics.median(walls), statistics.median(cpus))
        wall_ratio = medians[name][0] / medians["bare imports"][0]
        cpu_ratio = medians[name][1] / medians["bare imports"][1]
        print(
            f"| {name} | {medians[name][0]:.3f} | {min(walls):.3f} | {wall_ratio:.2f} "
            f"| {medians[name][1]:.3f} | {min(cpus):.3f} | {cpu_ratio:.2f} |"
        )
    for kind, index in (("wall", 0), ("CPU", 1)):
        ratio = medians["warm --check"][index] / medians["bare imports"][index]
        print(f"warm/bare ({kind}, medians) = {ratio:.2f} ({'within' if ratio <= BAR else 'ABOVE'} the bar of {BAR})")


if __name__ == "__main__":
    main()
