"""The real-world bench: training scripts nobody on the team wrote, converted and run.

Reads the corpus folder (default ``../shared/realworld`` beside the checkout; it is kept outside
the project, which ships only its own code):

- ``src/*.py``: every script must convert (exit 0) and converting the output again must give the
  same bytes. Timed in-process through the CLI's own ``convert_source``.
- ``cases/<name>/`` listed in ``cases/ARGS`` (``name|env|timeout|args``): converted with the
  ``accel-convert`` command (its local modules too, ``-o conv/``), then the original and the
  converted script run on one process — their stdout must be equal, timing lines aside — and the
  converted one on two processes under ``torchrun`` (exit 0 before the timeout: no error, no hang).

An original whose two runs print different numbers (it draws from torch's generator without
seeding it: torch 2.13 seeds that generator differently in every process) cannot be compared
line for line; its case is judged by exit codes, and the figure says how many were. The
corpus's own ``run.sh`` compares every case but ``regression`` and counts such a case as failed.

Usage: ``python benchmarks/real_scripts.py [--corpus DIR] [--cases NAME ...] [--json FILE]``.
Needs torchvision (see the corpus README: ``run.sh`` installs a CPU-compatible one). Exit 0 when
everything holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMING = re.compile(r"ms/batch|elapsed|[0-9.]+ ?s/it|it/s|[Tt]ime")


@dataclass
class CaseResult:
    name: str
    converted: bool = False
    one_process_exit: int | None = None
    two_process_exit: int | None = None
    same_output: bool | None = None
    #: The original printed different numbers in two runs: only exit codes are judged.
    nondeterministic: bool = False
    seconds: float = 0.0
    why: str = ""

    @property
    def ok(self) -> bool:
        return (
            self.converted
            and self.one_process_exit == 0
            and self.two_process_exit == 0
            and self.same_output is not False
        )


@dataclass
class Bench:
    scripts: int = 0
    stable: int = 0
    failures: list[str] = field(default_factory=list)
    convert_seconds: float = 0.0
    cases: list[CaseResult] = field(default_factory=list)

    def figure(self) -> str:
        ok = sum(case.ok for case in self.cases)
        loose = sum(case.nondeterministic for case in self.cases)
        note = f" ({loose} judged by exit codes: the original's own output varies between runs)" if loose else ""
        return (
            f"{self.stable}/{self.scripts} real scripts convert and are stable; "
            f"{ok}/{len(self.cases)} real cases run right on 1 and 2 processes{note}"
        )


def convert_sources(corpus: Path, bench: Bench) -> None:
    from accel_convert.codemods.engine.model import Options
    from accel_convert.converter.pipeline import ConversionError, convert_source

    for script in sorted((corpus / "src").glob("*.py")):
        bench.scripts += 1
        source = script.read_bytes()
        started = time.perf_counter()
        try:
            output = convert_source(source, Options(), path=str(script)).output
            again = convert_source(output, Options(), path=str(script)).output
        except ConversionError as error:
            bench.failures.append(f"src/{script.name}: {error}")
            continue
        finally:
            bench.convert_seconds += time.perf_counter() - started
        if again == output:
            bench.stable += 1
        else:
            bench.failures.append(f"src/{script.name}: converting the output again changes it")


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        return 124, _text(expired.stdout), _text(expired.stderr)
    return done.returncode, done.stdout, done.stderr


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def without_timing(output: str) -> list[str]:
    return [line for line in output.splitlines() if not TIMING.search(line)]


def last_error(*streams: str) -> str:
    lines = [line for stream in streams for line in stream.splitlines() if re.search(r"Error|error:", line)]
    lines = [line for line in lines if not line.lstrip().startswith("File")]
    return lines[-1][:160] if lines else ""


def run_case(corpus: Path, line: str, work: Path, port: int) -> CaseResult:
    name, envs, timeout_text, args = line.split("|", 3)
    result = CaseResult(name)
    started = time.perf_counter()
    folder = work / name
    shutil.copytree(corpus / "cases" / name, folder)
    env = {**os.environ, "PYTHONPATH": str(corpus / "shim"), "OMP_NUM_THREADS": "1"}
    env.update(dict(item.split("=", 1) for item in envs.split()))
    timeout = float(timeout_text)
    arguments = args.split()
    converter = [sys.executable, "-m", "accel_convert.converter"]
    code, _, error = run([*converter, "orig.py", "-o", "conv/"], folder, {**os.environ, "PYTHONPATH": str(REPO)}, 300)
    if code != 0:
        result.why = f"convert failed: {error.strip().splitlines()[-1][:160] if error.strip() else code}"
        return result
    result.converted = True
    original = [sys.executable, "orig.py", *arguments]
    _, first, _ = run(original, folder, env, timeout)
    _, second, _ = run(original, folder, env, timeout)
    result.nondeterministic = name == "regression" or without_timing(first) != without_timing(second)
    result.one_process_exit, converted_out, err1 = run(
        [sys.executable, "conv/orig.py", *arguments], folder, env, timeout
    )
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    result.two_process_exit, _, err2 = run([*torchrun, "conv/orig.py", *arguments], folder, env, timeout)
    if not result.nondeterministic:
        result.same_output = without_timing(first) == without_timing(converted_out)
    result.seconds = time.perf_counter() - started
    if not result.ok:
        result.why = last_error(err1, err2)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "realworld")
    parser.add_argument("--cases", nargs="*", help="only these cases (and no src/ conversions)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    options = parser.parse_args()
    corpus = options.corpus.resolve()
    if not (corpus / "cases" / "ARGS").exists():
        print(f"{corpus}: no real-world corpus here (cases/ARGS missing); pass --corpus DIR", file=sys.stderr)
        return 2
    if subprocess.run([sys.executable, "-c", "import torchvision.datasets"], capture_output=True).returncode != 0:
        print("torchvision is not importable here: see the corpus README (run.sh installs one)", file=sys.stderr)
        return 2
    bench = Bench()
    if not options.cases:
        convert_sources(corpus, bench)
    lines = [line for line in (corpus / "cases" / "ARGS").read_text().splitlines() if line and not line.startswith("#")]
    with tempfile.TemporaryDirectory() as work:
        for index, line in enumerate(lines):
            if options.cases and line.split("|", 1)[0] not in options.cases:
                continue
            bench.cases.append(run_case(corpus, line, Path(work), 29850 + index))
    for failure in bench.failures:
        print(failure)
    for case in bench.cases:
        state = "ok" if case.ok else "FAILED"
        detail = (
            f"1 process exit {case.one_process_exit}, 2 processes exit {case.two_process_exit}"
            + ("" if case.same_output is not False else ", output differs from the original's")
            + (", original nondeterministic" if case.nondeterministic else "")
        )
        print(
            f"{case.name:20} {state:6} {case.seconds:6.1f} s  {detail if case.converted else case.why}  {case.why if case.converted and not case.ok else ''}"
        )
    if bench.scripts:
        print(f"src/: {bench.scripts} conversions (each converted twice) in {bench.convert_seconds:.1f} s")
    print(bench.figure())
    if options.json:
        payload = {**asdict(bench), "figure": bench.figure()}
        options.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if bench.stable == bench.scripts and all(case.ok for case in bench.cases) else 1


if __name__ == "__main__":
    sys.exit(main())
