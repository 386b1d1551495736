"""Launch the suite: one torchrun per (target, script), returning each case's outcome.

``python -m tests.accelerate_suite.outcomes`` runs every script under both targets and prints
the case table (case, passes under Accelerate, passes under runtime) in Markdown.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.accelerate_suite.cases import CASES, SCRIPTS
from tests.launching import torchrun

DRIVER = Path(__file__).with_name("run_cases.py")
TARGETS = ("accelerate", "runtime")
#: Seconds one launch may take (the slowest, the data loop under Accelerate, takes about 70 on
#: two shared cores, 30 of them a Gloo timeout in a case that hangs there).
LAUNCH_TIMEOUT = 420.0


def launch(target: str, script: str, workdir: Path) -> dict[str, dict]:
    """``{case: {"passed": bool, "errors": {rank: text}}}``; a case the launch did not reach
    (it crashed or timed out) is reported failed, with the launch's output."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{target}-{script}.json"
    env = {"ACCELERATE_USE_CPU": "1"} if target == "accelerate" else None
    run = torchrun(DRIVER, target, script, str(out), env=env, cwd=workdir, timeout=LAUNCH_TIMEOUT)
    results = json.loads(out.read_text()) if out.exists() else {}
    missing = {
        "passed": False,
        "errors": {"launch": f"not reached (exit {run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"},
    }
    return {case: results.get(case, missing) for case in CASES[script]}


def table(outcomes: dict[tuple[str, str], dict[str, dict]]) -> str:
    """Markdown: one row per case, a column per target."""
    rows = ["| script | case | Accelerate | runtime |", "|---|---|---|---|"]
    for script in SCRIPTS:
        for case in CASES[script]:
            marks = ["pass" if outcomes[(target, script)][case]["passed"] else "FAIL" for target in TARGETS]
            rows.append(f"| {script} | `{case}` | {marks[0]} | {marks[1]} |")
    return "\n".join(rows)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        found = {
            (target, script): launch(target, script, Path(folder) / script) for script in SCRIPTS for target in TARGETS
        }
    print(table(found))
    sys.exit(0)
