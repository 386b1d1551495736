"""``accel-convert verify`` over the real-world corpus's cases (the oracle: scripts nobody on the
team wrote, see ``../shared/realworld/README.md``).

Both sets of the corpus: the examples (``cases/ARGS``) and the tutorials (``tutorials/cases/ARGS``).
Each case listed (``name|env|timeout|args``, the tutorials' fifth field, the runner's own checks,
is not verify's business) is copied into a scratch folder and verified there: ``accel-convert
verify orig.py --samples M --timeout T --output-format json -- ARGS`` with the case's environment
and its set's ``shim/`` on ``PYTHONPATH`` (its sitecustomize fakes torchvision's datasets, e.g.
with ``FIELD_FAKE_MNIST=1``; the tracer's own sitecustomize runs it). One line per case: the
verdicts that failed, with their first piece of evidence; then a figure per set.

Usage: ``python benchmarks/verify_corpus.py [--corpus DIR] [--sets examples tutorials] [--cases
NAME ...] [--samples M] [--json FILE]``. Needs torchvision (see the corpus README). Exit 0 when
every case verifies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


#: The corpus's sets: the folder (under the corpus) that holds each one's ``cases/`` and ``shim/``.
SETS = {"examples": ".", "tutorials": "tutorials"}


def verify_case(corpus: Path, line: str, work: Path, samples: int) -> dict[str, Any]:
    name, envs, timeout, args = line.split("|")[:4]
    folder = work / name
    shutil.copytree(corpus / "cases" / name, folder)
    user_path = [str(corpus / "shim"), str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(user_path)}
    env.update(dict(item.split("=", 1) for item in envs.split()))
    command = [sys.executable, "-m", "accel_convert.converter", "verify", "orig.py", "--samples", str(samples)]
    command += ["--timeout", timeout, "--output-format", "json", "--", *args.split()]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    result: dict[str, Any] = {"case": name, "exit": done.returncode, "seconds": round(time.perf_counter() - started, 1)}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        result["error"] = (done.stderr.strip().splitlines() or [""])[-1][:200]
        return result
    verdicts = report["one_process"] + report["n_processes"]
    result["failed"] = {item["key"]: (item["evidence"] or [""])[0][:200] for item in verdicts if not item["holds"]}
    return result


def case_lines(corpus: Path, cases: list[str] | None) -> list[str]:
    lines = (corpus / "cases" / "ARGS").read_text().splitlines()
    wanted = [line for line in lines if line and not line.startswith("#")]
    return [line for line in wanted if not cases or line.split("|", 1)[0] in cases]


def verify_set(corpus: Path, options: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    results = []
    for line in case_lines(corpus, options.cases):
        result = verify_case(corpus, line, work, options.samples)
        results.append(result)
        state = {0: "ok", 1: "FAILED"}.get(result["exit"], f"ERROR {result['exit']}")
        print(f"{result['case']:20} {state:9} {result['seconds']:6.1f} s  {result.get('error', '')}", flush=True)
        for key, evidence in result.get("failed", {}).items():
            print(f"{'':20} ✗ {key}: {evidence}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "realworld")
    parser.add_argument("--sets", nargs="*", choices=sorted(SETS), default=sorted(SETS))
    parser.add_argument("--cases", nargs="*", help="only these cases")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    options = parser.parse_args()
    corpus = options.corpus.resolve()
    if not (corpus / "cases" / "ARGS").exists():
        print(f"{corpus}: no real-world corpus here (cases/ARGS missing); pass --corpus DIR", file=sys.stderr)
        return 2
    every: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="verify-corpus-") as work:
        for name in options.sets:
            print(f"== {name}", flush=True)
            every[name] = verify_set(corpus / SETS[name], options, Path(work))
    for name, results in every.items():
        print(f"{name}: {sum(result['exit'] == 0 for result in results)} of {len(results)} cases verify")
    if options.json:
        options.json.write_text(json.dumps(every, indent=2) + "\n")
    return 0 if all(result["exit"] == 0 for results in every.values() for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
