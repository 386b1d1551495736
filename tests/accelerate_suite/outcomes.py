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
#: Characters of a launch's stderr kept in the outcome of the cases it did not reach: a crashed
#: rank's traceback comes before torchrun's failure summary (about 2,000 characters), and a hung
#: launch's stacks (every rank and loader worker, written when its timeout ends it) before that.
STDERR_KEPT = 30_000


def launch(target: str, script: str, workdir: Path) -> dict[str, dict]:
    """``{case: {"passed": bool, "errors": {rank: text}}}``; a case the launch did not reach
    (it crashed, or hung and was ended by its timeout) is reported failed, with the launch's
    output: the cases it finished keep their own outcome."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{target}-{script}.json"
    env = {"ACCELERATE_USE_CPU": "1"} if target == "accelerate" else None
    run = torchrun(
        DRIVER, target, script, str(out), env=env, cwd=workdir, timeout=LAUNCH_TIMEOUT, raise_on_timeout=False
    )
    results = json.loads(out.read_text()) if out.exists() else {}
    missing = {
        "passed": False,
        "errors": {
            "launch": f"not reached (exit {run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-STDERR_KEPT:]}"
        },
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
