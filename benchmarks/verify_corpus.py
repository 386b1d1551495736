"""``accel-convert verify`` over the real-world corpus's cases (the oracle: scripts nobody on the
team wrote, see ``../shared/realworld/README.md``).

Both sets of the corpus: the examples (``cases/ARGS``) and the tutorials (``tutorials/ARGS``).
Each case listed (``name|env|timeout|args``, the tutorials' fifth field, the runner's own checks,
is not verify's business) is copied into a scratch folder and verified there: ``accel-convert
verify orig.py --samples M --timeout T --output-format json -- ARGS`` with the case's environment
and its set's ``shim/`` on ``PYTHONPATH`` (its sitecustomize fakes torchvision's datasets, e.g.
with ``FIELD_FAKE_MNIST=1``; the tracer's own sitecustomize runs it). One line per case: the
verdicts that failed, with their first piece of evidence; then a figure per set.

The project's own runnable fixtures (``fixtures/cases/*.json`` with ``metrics``, runtime target,
their ``run`` arguments, ``fixtures/support`` importable) are a third set, ``--sets fixtures``.

Usage: ``python benchmarks/verify_corpus.py [--corpus DIR] [--sets examples tutorials fixtures]
[--cases NAME ...] [--samples M] [--json FILE]``. Needs torchvision (see the corpus README). Exit 0 when
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Case:
    """One script to verify: the folder copied for it, the script there, and how it runs."""

    name: str
    source: Path
    script: str
    envs: str
    timeout: str
    args: list[str]
    user_path: list[Path]


def listed_cases(corpus: Path, listing: str) -> list[Case]:
    """A corpus set's cases (``name|env|timeout|args``; the tutorials' fifth field, the runner's
    own checks, is not verify's business), each run with the set's ``shim/``."""
    lines = [line for line in (corpus / listing).read_text().splitlines() if line and not line.startswith("#")]
    fields = [line.split("|")[:4] for line in lines]
    return [
        Case(name, corpus / "cases" / name, "orig.py", envs, timeout, args.split(), [corpus / "shim"])
        for name, envs, timeout, args in fields
    ]


def fixture_cases(fixtures: Path) -> list[Case]:
    """Every runnable fixture (a sidecar with ``metrics``) converted for the runtime, with its
    one-process arguments (``run``) and ``fixtures/support`` importable."""
    cases = []
    for sidecar in sorted((fixtures / "cases").glob("*.json")):
        spec = json.loads(sidecar.read_text(encoding="utf-8"))
        if "metrics" not in spec or spec.get("target", "runtime") != "runtime" or spec.get("oom_retry"):
            continue
        script = sidecar.with_suffix(".py")
        cases.append(Case(sidecar.stem, script, script.name, "", "300", spec.get("run", []), [fixtures / "support"]))
    return cases


def verify_case(case: Case, work: Path, samples: int | None) -> dict[str, Any]:
    folder = work / case.name
    if case.source.is_dir():
        shutil.copytree(case.source, folder)
    else:
        folder.mkdir(parents=True)
        shutil.copy(case.source, folder / case.script)
    user_path = [*map(str, case.user_path), str(REPO)]
    user_path += filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(user_path)}
    env.update(dict(item.split("=", 1) for item in case.envs.split()))
    command = [sys.executable, "-m", "accel_convert.converter", "verify", case.script]
    # verify's own default budget unless one is given: it raises it for a step cadence, as for a user
    command += ["--samples", str(samples)] if samples is not None else []
    command += ["--timeout", case.timeout, "--output-format", "json", "--", *case.args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    result: dict[str, Any] = {"case": case.name, "exit": done.returncode}
    result["seconds"] = round(time.perf_counter() - started, 1)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        result["error"] = (done.stderr.strip().splitlines() or [""])[-1][:200]
        return result
    verdicts = report["one_process"] + report["n_processes"]
    result["failed"] = {item["key"]: (item["evidence"] or [""])[0][:200] for item in verdicts if not item["holds"]}
    return result


def set_cases(name: str, corpus: Path) -> list[Case]:
    if name == "fixtures":
        return fixture_cases(REPO / "fixtures")
    return listed_cases(corpus / "tutorials", "ARGS") if name == "tutorials" else listed_cases(corpus, "cases/ARGS")


def verify_set(cases: list[Case], options: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    results = []
    for case in cases:
        if options.cases and case.name not in options.cases:
            continue
        result = verify_case(case, work, options.samples)
        results.append(result)
        state = {0: "ok", 1: "FAILED"}.get(result["exit"], f"ERROR {result['exit']}")
        print(f"{result['case']:20} {state:9} {result['seconds']:6.1f} s  {result.get('error', '')}", flush=True)
        for key, evidence in result.get("failed", {}).items():
            print(f"{'':20} ✗ {key}: {evidence}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "realworld")
    sets = ["examples", "tutorials", "fixtures"]
    parser.add_argument("--sets", nargs="*", choices=sets, default=sets[:2])
    parser.add_argument("--cases", nargs="*", help="only these cases")
    parser.add_argument("--samples", type=int, help="verify's --samples (default: verify's own)")
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
            every[name] = verify_set(set_cases(name, corpus), options, Path(work))
    for name, results in every.items():
        print(f"{name}: {sum(result['exit'] == 0 for result in results)} of {len(results)} cases verify")
    if options.json:
        options.json.write_text(json.dumps(every, indent=2) + "\n")
    return 0 if all(result["exit"] == 0 for results in every.values() for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
