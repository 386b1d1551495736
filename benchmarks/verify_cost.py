"""What ``accel-convert verify`` costs: one verification of a real-world case against the sum of
the three runs it makes, each made plainly (no tracer, no copies) on the same budget.

The case (default ``mnist`` of the real-world corpus, ``../shared/realworld``: pytorch/examples'
MNIST script, its data faked by the corpus's ``shim/sitecustomize.py`` with ``FIELD_FAKE_MNIST=1``)
is converted once for the plain runs (``accel-convert orig.py -o conv/``, not timed). Timed:

- plain: ``python orig.py ARGS`` + ``python conv/orig.py ARGS`` + ``torchrun --nproc_per_node 2
  conv/orig.py ARGS``, with the case's environment and the shim on ``PYTHONPATH``;
- verify: ``accel-convert verify orig.py --samples M -- ARGS`` in the same folder with the same
  environment: the conversion, three copies of the folder, the three runs under the tracer and the
  verdicts.

Same budget: ``--samples`` (default 500) is at least every dataset's size in the case's environment
(``FIELD_TRAIN_N=500``, ``FIELD_TEST_N=203``), so the tracer's cut changes nothing and both sides
train and evaluate on the same samples. Each side is timed ``--repeat`` times (alternating); the
medians and their ratio are printed. The bar: verify <= 1.3x the plain sum.

Usage: ``python benchmarks/verify_cost.py [--corpus DIR] [--case mnist] [--samples 500] [--repeat 3]
[--json FILE]``. Needs torchvision (see the corpus README). Exit 0 when the bar holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BAR = 1.3


def case_line(corpus: Path, name: str) -> tuple[dict[str, str], float, list[str]]:
    """The case's environment, timeout and arguments from ``cases/ARGS`` (``name|env|timeout|args``)."""
    for line in (corpus / "cases" / "ARGS").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{name}|"):
            _, envs, timeout, args = line.split("|", 3)
            return dict(item.split("=", 1) for item in envs.split()), float(timeout), args.split()
    raise SystemExit(f"{name}: not in {corpus}/cases/ARGS")


def timed(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed


def plain_runs(folder: Path, env: dict[str, str], timeout: float, args: list[str]) -> float:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    total = 0.0
    for command in ([sys.executable, "orig.py"], [sys.executable, "conv/orig.py"], [*torchrun, "conv/orig.py"]):
        total += timed([*command, *args], folder, env, timeout)
    return total


def verify_run(folder: Path, env: dict[str, str], timeout: float, args: list[str], samples: int) -> float:
    command = [sys.executable, "-m", "accel_convert.converter", "verify", "orig.py", "--samples", str(samples)]
    command += ["--timeout", str(timeout), "--", *args]
    return timed(command, folder, env, 4 * timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "realworld")
    parser.add_argument("--case", default="mnist")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    case_env, timeout, args = case_line(options.corpus, options.case)
    user_path = [str(options.corpus / "shim"), str(REPO)]
    user_path += [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]
    env = {**os.environ, **case_env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(user_path)}
    with tempfile.TemporaryDirectory(prefix="verify-cost-") as work:
        folder = Path(work) / options.case
        shutil.copytree(options.corpus / "cases" / options.case, folder)
        convert = [sys.executable, "-m", "accel_convert.converter", "orig.py", "-o", "conv/"]
        subprocess.run(convert, cwd=folder, env=env, check=True, capture_output=True, timeout=600)
        plain, verify = [], []
        for _ in range(options.repeat):
            plain.append(plain_runs(folder, env, timeout, args))
            shutil.rmtree(folder / "conv" / "__pycache__", ignore_errors=True)
            verify.append(verify_run(folder, env, timeout, args, options.samples))
    result = {
        "case": options.case,
        "samples": options.samples,
        "plain_s": [round(value, 2) for value in plain],
        "verify_s": [round(value, 2) for value in verify],
        "ratio": round(statistics.median(verify) / statistics.median(plain), 3),
    }
    print(
        f"{options.case}: plain runs {statistics.median(plain):.1f} s (sum of 3, median of {options.repeat}), "
        f"verify {statistics.median(verify):.1f} s: {result['ratio']}x (bar {BAR}x)"
    )
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0 if result["ratio"] <= BAR else 1


if __name__ == "__main__":
    sys.exit(main())
