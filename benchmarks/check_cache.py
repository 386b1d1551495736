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
the best wall time of each over ``--rounds`` rounds, and warm/bare and cold/bare from the medians
(the bar applies to warm/bare), with the load average before and after. The cold and the warm
run's stdout, stderr and exit code must be identical, or the benchmark fails.

Usage: ``python benchmarks/check_cache.py [--source DIR] [--rounds N]`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
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


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, env=env, cwd=cwd, check=False)
    return time.perf_counter() - start, run


def environment(work: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def one_round(check: list[str], env: dict[str, str], work: Path, cache: Path) -> tuple[float, float, float]:
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
        check = [sys.executable, "-m", "accel_convert.converter", "--check", str(folder)]
        load_before = os.getloadavg()[0]
        one_round(check, env, work, work / "cache")  # untimed: fills the bytecode cache
        times = [one_round(check, env, work, work / "cache") for _ in range(args.rounds)]
        load_after = os.getloadavg()[0]
    bare, cold, warm = (statistics.median(column) for column in zip(*times))
    files = len(list(args.source.glob("*.py")))
    print(f"{files} files from {args.source}; {args.rounds} rounds; load average {load_before:.2f} -> {load_after:.2f}")
    print("| run | median s | best s | / bare imports |")
    print("|---|---|---|---|")
    for name, column, median in zip(("bare imports", "cold --check", "warm --check"), zip(*times), (bare, cold, warm)):
        print(f"| {name} | {median:.3f} | {min(column):.3f} | {median / bare:.2f} |")
    verdict = "within" if warm / bare <= BAR else "ABOVE"
    print(f"warm/bare = {warm / bare:.2f} ({verdict} the bar of {BAR})")


if __name__ == "__main__":
    main()
