"""Reading forkrun's output (tests/e2e_support/forkrun.py): one JSON object per finished job,
``{"index", "returncode", "stdout", "stderr", "seconds", "timed_out"}``, printed as each job ends."""

from __future__ import annotations

import json

from tests.launching import Run


def forkrun_results(stdout: str, timeout_s: float) -> dict[int, Run]:
    """Job index → its run. Lines that are not results are ignored (a preloaded module may
    print); a job that ran past ``timeout_s`` says so at the end of its stderr."""
    results: dict[int, Run] = {}
    for line in stdout.splitlines():
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and "index" in result:
            note = f"\n(ran past its {timeout_s:.0f} s timeout)" if result["timed_out"] else ""
            results[result["index"]] = Run(result["returncode"], result["stdout"], result["stderr"] + note)
    return results
