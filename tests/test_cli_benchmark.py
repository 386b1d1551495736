"""Smoke run of benchmarks/convert_speed.py: it runs and prints every ratio (numbers not judged)."""

from __future__ import annotations

import sys

from tests.launching import REPO_ROOT, run_command


def test_convert_speed_quick_prints_the_ratios() -> None:
    run = run_command(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "convert_speed.py"), "--quick"], timeout=120
    ).check()
    lines = run.stdout.splitlines()
    for corpus in (
        "fixtures: 2 files",
        "typical script ",
        "stdlib as is: 2 files",
        "stdlib forced through every pass (sample of 2)",
    ):
        assert any(line.startswith(corpus) and "b/a median" in line and "p90" in line for line in lines), run.stdout
    assert any(line.startswith("process:") and "c/d" in line for line in lines), run.stdout
    assert any(line.startswith("memory:") and "MB" in line for line in lines), run.stdout
