"""Smoke run of the runtime benchmark: it launches, every variant trains, and the table has ratios.

No timing is asserted (speed is reported by the benchmark itself, see docs/performance.md); this
only proves the script that produces those numbers still works.
"""

from __future__ import annotations

import re
import sys

from tests.launching import REPO_ROOT, run_command


def test_runtime_overhead_quick_run_prints_every_ratio() -> None:
    run = run_command(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "runtime_overhead.py"),
            "--quick",
            "--nproc",
            "1",
            "2",
            "--models",
            "mlp",
            "--precisions",
            "fp32",
        ],
        timeout=240,
    ).check()
    rows = [line for line in run.stdout.splitlines() if line.startswith("| mlp | fp32 |")]
    assert [row.split("|")[3].strip() for row in rows] == ["1", "2"], run.stdout
    for row in rows:
        ratios = [cell.strip() for cell in row.split("|")[7:10:2]]
        # median of the per-round ratios [95% interval of that median]
        for value in ratios:
            match = re.fullmatch(r"(\d+\.\d{3}) \[(\d+\.\d{3}), (\d+\.\d{3})\]", value)
            assert match, row
            low, median, high = float(match[2]), float(match[1]), float(match[3])
            assert low <= median <= high, row
    assert re.search(r"prepared/plain throughput = \d+\.\d{3}", run.stdout), run.stdout


def test_the_median_interval_is_the_binomial_order_statistics() -> None:
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        from runtime_overhead import median_interval
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    # n = 15: P(Binomial(15, 1/2) <= 3) = 576/32768 ≈ 1.8% per side, <= 4 would be 5.9%: x(4), x(12).
    assert median_interval([float(v) for v in range(15, 0, -1)]) == (4.0, 12.0)
    # n = 7: even x(1), x(7) covers the median only 98.4% of the time; no narrower 95% interval.
    assert median_interval([3.0, 1.0, 2.0, 7.0, 5.0, 6.0, 4.0]) == (1.0, 7.0)
    assert median_interval([2.0, 2.0]) == (2.0, 2.0)


def test_fsdp_peak_rss_quick_run_prints_every_engine() -> None:
    """``fsdp_memory.py --peak-rss`` on a tiny model and 2 processes: a row per engine."""
    run = run_command(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "fsdp_memory.py"),
            "--peak-rss",
            "--procs",
            "2",
            "--layers",
            "2",
            "--hidden",
            "256",
        ],
        timeout=240,
    ).check()
    rows = [line.split()[:2] for line in run.stdout.splitlines() if re.match(r"\s*2 (ddp|fsdp)", line)]
    assert rows == [["2", engine] for engine in ("ddp", "fsdp", "fsdp_meta")], run.stdout


def test_gpu_checks_safe_saving_passes_on_the_cpu_too() -> None:
    """The GPU run's saving check, on this machine's CPU (one process): its reading and
    comparing are right, so a failure on a GPU is the GPU's."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT / 'benchmarks')!r})\n"
        "import gpu_checks\n"
        "print(gpu_checks.check_safe_saving())\n"
    )
    run = run_command([sys.executable, "-c", code], timeout=120).check()
    assert "read back equal" in run.stdout, run.stdout
