"""Smoke run of the runtime benchmark: it launches, every variant trains, and the table has ratios.

No timing is asserted (speed is reported by the benchmark itself, see the README's Performance
section); this only proves the script that produces those numbers still works.
"""

from __future__ import annotations

import re
import sys

from tests.launching import REPO_ROOT, run_command


def test_runtime_overhead_quick_run_prints_every_ratio() -> None:
    run = run_command(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "runtime_overhead.py"), "--quick",
         "--nproc", "1", "2", "--models", "mlp", "--precisions", "fp32"],
        timeout=240,
    ).check()
    rows = [line for line in run.stdout.splitlines() if line.startswith("| mlp | fp32 |")]
    assert [row.split("|")[3].strip() for row in rows] == ["1", "2"], run.stdout
    for row in rows:
        ratios = [cell.strip() for cell in row.split("|")[7:10:2]]
        assert all(re.fullmatch(r"\d+\.\d{3}", value) for value in ratios), row
    assert re.search(r"prepared/plain throughput = \d+\.\d{3}", run.stdout), run.stdout
