"""How fast is conversion, next to the cost of just parsing and printing the code?

Measures, per file, (a) the floor: libcst parse + code generation, and (b) the full conversion
(``converter.pipeline.convert_source``: byte check, parse, codemods, verification), for

- the fixture training scripts (``fixtures/cases/*.py``),
- the standard library's .py files outside its test suites, as they are (nearly all skip the
  parse: they never mention torch), and a sample spread over sizes *forced* through every pass
  (``import torch`` appended),

then (c) a whole ``accel-convert --check`` process on a typical ~9 KB training script against
(d) ``python -c "import libcst, click, rich"``, the start-up floor of any CLI built on them.

Targets (issue 6): b/a ≤ 3 for typical training scripts; c ≤ 1.5 × d.

To show where the time goes, b is also timed without its verification step (parse, codemods
once, print), reported as "codemods once".

Method: a and b are timed back to back for each file, alternating which goes first from round to
round, and each file keeps its best time over the rounds. Both are this process's CPU time
(``time.process_time``): the work is single-threaded, so on an idle machine that is the wall time,
and on a shared one it is not inflated by the other processes (best-of-N filters the rest).
Process timings (wall time: start-up is what they measure) alternate c and d after one untimed
warm-up each, with compiled bytecode as an installed package has it, and keep the median.
With ``--torchfix PATH`` the same run also times ``PATH <typical script>`` (torchfix 0.7, a
libcst-based PyTorch linter: install it in a separate environment, it pins an older libcst).

Usage: ``python benchmarks/convert_speed.py [--rounds N] [--quick] [--json OUT] [--torchfix PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from accel_convert import codemods  # noqa: E402
from accel_convert.codemods.engine.model import Options  # noqa: E402
from accel_convert.converter.pipeline import convert_source, mentions_torch  # noqa: E402

FIXTURES = REPO_ROOT / "fixtures" / "cases"
TYPICAL_SCRIPT = REPO_ROOT / "benchmarks" / "data" / "typical_train.py"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
OPTIONS = Options()


@dataclass
class FileTiming:
    path: Path
    size: int
    floor: float = float("inf")  # (a) best parse + codegen, seconds
    full: float = float("inf")  # (b) best full conversion, seconds
    once: float = float("inf")  # (b) without verification: parse, codemods once, codegen

    @property
    def ratio(self) -> float:
        return self.full / self.floor

    @property
    def once_ratio(self) -> float:
        return self.once / self.floor


def stdlib_files() -> list[Path]:
    """The standard library's .py files outside test suites and site-packages, sorted."""
    found = []
    for folder, dirnames, filenames in os.walk(STDLIB):
        dirnames[:] = sorted(name for name in dirnames if name not in EXCLUDED_DIRS)
        found.extend(Path(folder) / name for name in filenames if name.endswith(".py"))
    return sorted(found)


def spread_sample(files: list[Path], count: int) -> list[Path]:
    """``count`` files at evenly spaced ranks of size (all of them when there are fewer)."""
    by_size = sorted(files, key=lambda path: (path.stat().st_size, str(path)))
    if len(by_size) <= count:
        return by_size
    step = len(by_size) / count
    return [by_size[int(index * step)] for index in range(count)]


def libcst_handles(source: bytes) -> bool:
    """Whether the floor itself works: a few stdlib files use syntax libcst does not know, and
    pydoc_data/topics.py nests deeper than libcst's recursive code generation can go."""
    try:
        cst.parse_module(source).bytes
    except (Exception, RecursionError):  # noqa: BLE001
        return False
    return True


def floor(source: bytes, path: str) -> None:
    """(a) What any libcst tool pays: parse, then print the tree back."""
    cst.parse_module(source).bytes


def full(source: bytes, path: str) -> None:
    """(b) What accel-convert pays for one file."""
    convert_source(source, OPTIONS, path=path)


def once(source: bytes, path: str) -> None:
    """(b) minus the verification: where the codemods' own cost shows."""
    if mentions_torch(source):
        codemods.convert_module(cst.parse_module(source), OPTIONS, source).module.bytes


def seconds(work: Callable[[bytes, str], None], source: bytes, path: str) -> float:
    start = time.process_time()
    work(source, path)
    return time.process_time() - start


def time_corpus(corpus: dict[Path, bytes], rounds: int) -> list[FileTiming]:
    """Best-of-``rounds`` a and b for every file, a and b interleaved and alternated."""
    timings = {path: FileTiming(path, len(source)) for path, source in corpus.items()}
    for round_number in range(rounds):
        for path, source in corpus.items():
            timing = timings[path]
            order = [(floor, "floor"), (full, "full"), (once, "once")]
            for work, field in order if round_number % 2 == 0 else reversed(order):
                elapsed = seconds(work, source, str(path))
                setattr(timing, field, min(getattr(timing, field), elapsed))
    return list(timings.values())


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def summarize(name: str, timings: list[FileTiming]) -> dict[str, float]:
    ratios = [timing.ratio for timing in timings]
    once_ratios = [timing.once_ratio for timing in timings]
    total_full = sum(timing.full for timing in timings)
    summary = {
        "files": len(timings),
        "megabytes": sum(timing.size for timing in timings) / 1e6,
        "ratio_median": statistics.median(ratios),
        "ratio_p90": percentile(ratios, 0.9),
        "ratio_max": max(ratios),
        "once_ratio_median": statistics.median(once_ratios),
        "files_per_second": len(timings) / total_full,
        "floor_seconds": sum(timing.floor for timing in timings),
        "full_seconds": total_full,
    }
    print(
        f"{name}: {summary['files']} files, {summary['megabytes']:.2f} MB: "
        f"b/a median {summary['ratio_median']:.2f}, p90 {summary['ratio_p90']:.2f}, "
        f"max {summary['ratio_max']:.2f} (codemods once, no verification: median "
        f"{summary['once_ratio_median']:.2f}); {summary['files_per_second']:.1f} files/s "
        f"(a total {summary['floor_seconds']:.2f} s, b total {summary['full_seconds']:.2f} s)"
    )
    return summary


def peak_conversion_memory(source: bytes, path: str) -> float:
    """Peak Python heap (MB, tracemalloc) while converting one file."""
    tracemalloc.start()
    try:
        full(source, path)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def cli_command(script: Path) -> list[str]:
    """The installed console script when there is one (what users run), else ``-m accel_convert.converter``;
    with ``--no-cache``: every timed run converts (after the untimed first run, the cache of
    ``--check`` would answer each one; ``check_cache.py`` measures that)."""
    console_script = Path(sysconfig.get_path("scripts")) / "accel-convert"
    if console_script.is_file():
        return [str(console_script), "--check", "--no-cache", "-q", str(script)]
    return [sys.executable, "-m", "accel_convert.converter", "--check", "--no-cache", "-q", str(script)]


def process_seconds(command: list[str], bytecode_folder: str) -> float:
    """Wall time of one process. Both commands run with compiled bytecode, as an installed package
    has it (pip compiles on install): it is written to ``bytecode_folder`` even where the
    environment says not to write any (PYTHONDONTWRITEBYTECODE), so that c does not pay for
    compiling our sources on every run while d's libraries come compiled."""
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONPYCACHEPREFIX": bytecode_folder}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=environment)
    elapsed = time.perf_counter() - start
    # 0: nothing to convert, 1: --check found something to convert; anything else is a failure
    # (an internal error, an installed accel-convert that is not this tree): no timing of it.
    if finished.returncode not in (0, 1):
        last = finished.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"{' '.join(command)} failed (exit {finished.returncode}): {' '.join(last)}")
    return elapsed


def time_processes(script: Path, rounds: int, torchfix: Path | None = None) -> dict[str, float]:
    """(c) the whole check process against (d) importing what it is built on, and optionally
    torchfix linting the same script; medians of interleaved runs."""
    commands = {
        "check": cli_command(script),
        "imports": [sys.executable, "-c", "import libcst, click, rich"],
    }
    if torchfix is not None:
        commands["torchfix"] = [str(torchfix), str(script)]
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as bytecode_folder:
        for command in commands.values():  # untimed: compiles, and warms the file cache
            process_seconds(command, bytecode_folder)
        for round_number in range(rounds):
            names = list(commands) if round_number % 2 == 0 else list(reversed(commands))
            for name in names:
                times[name].append(process_seconds(commands[name], bytecode_folder))
    c, d = statistics.median(times["check"]), statistics.median(times["imports"])
    print(
        f"process: accel-convert --check {script.name} ({script.stat().st_size / 1000:.1f} KB) "
        f"c = {c * 1000:.0f} ms, import libcst, click, rich d = {d * 1000:.0f} ms: c/d {c / d:.2f} "
        f"(median of {rounds})"
    )
    result = {"check_ms": c * 1000, "imports_ms": d * 1000, "ratio": c / d}
    if torchfix is not None:
        linted = statistics.median(times["torchfix"])
        print(
            f"process: torchfix {script.name} {linted * 1000:.0f} ms: accel-convert --check takes "
            f"{c / linted:.2f} of its time"
        )
        result["torchfix_ms"] = linted * 1000
    return result


def read_corpus(paths: list[Path], *, force_torch: bool = False) -> dict[Path, bytes]:
    """Sources that libcst can parse (``force_torch``: with ``import torch`` appended)."""
    corpus = {}
    for path in paths:
        source = path.read_bytes()
        if force_torch:
            source = source.rstrip(b"\n") + b"\nimport torch\n"
        if libcst_handles(source):
            corpus[path] = source
    if len(corpus) < len(paths):
        print(f"  ({len(paths) - len(corpus)} of {len(paths)} files left out: libcst cannot parse or print them)")
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per measurement (best-of / median)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 files per corpus, 1 round")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--torchfix", type=Path, help="a torchfix executable to time on the typical script too")
    parser.add_argument(
        "--forced-sample",
        type=int,
        default=60,
        help="stdlib files (spread over sizes) forced through every pass; all of them "
        "would take the better part of an hour",
    )
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    limit = 2 if args.quick else None

    # --quick takes the smallest files: it checks that everything runs, not how fast.
    fixtures = sorted(FIXTURES.glob("*.py"), key=lambda path: (path.stat().st_size, path.name))[:limit]
    stdlib = stdlib_files()
    if args.quick:
        stdlib = stdlib[:limit]
    results: dict[str, object] = {"rounds": rounds, "python": sys.version.split()[0]}
    results["fixtures"] = summarize("fixtures", time_corpus(read_corpus(fixtures), rounds))
    # --quick stands the smallest fixture in for the 9 KB script (two slow conversions saved).
    typical = fixtures[0] if args.quick else TYPICAL_SCRIPT
    results["typical_script"] = summarize(f"typical script {typical.name}", time_corpus(read_corpus([typical]), rounds))
    results["stdlib"] = summarize("stdlib as is", time_corpus(read_corpus(stdlib), rounds))
    forced = read_corpus(spread_sample(stdlib, args.forced_sample), force_torch=True)
    results["stdlib_forced"] = summarize(
        f"stdlib forced through every pass (sample of {len(forced)})", time_corpus(forced, rounds)
    )
    largest = max(forced, key=lambda path: len(forced[path]))
    peak = peak_conversion_memory(forced[largest], str(largest))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"memory: converting the largest file ({largest.name}, {len(forced[largest]) / 1000:.0f} KB) "
        f"peaks at {peak:.1f} MB of Python heap; whole benchmark process peak RSS {rss:.0f} MB"
    )
    results["memory"] = {"largest_file": str(largest), "peak_heap_mb": peak, "process_peak_rss_mb": rss}
    # Process times move with the machine's state more than in-process ones: more rounds.
    results["process"] = time_processes(typical, 1 if args.quick else max(rounds, 15), args.torchfix)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
