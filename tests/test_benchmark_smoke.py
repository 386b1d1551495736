"""Smoke run of the runtime benchmark: it launches, every variant trains, and the table has ratios.

No timing is asserted (speed is reported by the benchmark itself, see docs/performance.md); this
only proves the script that produces those numbers still works.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import pytest

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


def _gpu_checks() -> Any:
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import gpu_checks
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    return gpu_checks


def test_gpu_checks_verify_cuda_command_is_the_verify_commands_own() -> None:
    """The command the GPU run's ``verify_cuda`` starts is what ``accel-convert verify`` parses
    as ``--device cuda`` on 2 processes of the shipped example, with the launcher's variables
    dropped from the environment its runs inherit."""
    from accel_convert.converter.verify import verify_command

    gpu_checks = _gpu_checks()
    command = gpu_checks.verify_cuda_command(gpu_checks.VERIFY_EXAMPLE, gpu_checks.VERIFY_EXAMPLE_ARGS)
    assert command[1:4] == ["-m", "accel_convert.converter", "verify"]
    context = verify_command.make_context("verify", command[4:])
    assert context.params["device"] == "cuda" and context.params["nproc"] == 2, context.params
    assert context.params["script"] == gpu_checks.VERIFY_EXAMPLE and gpu_checks.VERIFY_EXAMPLE.is_file()
    assert context.params["script_args"] == ("--epochs", "1")
    launched = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x", "HOME": "/h"}
    env = gpu_checks.verify_environment(launched)
    assert env["HOME"] == "/h" and not {"RANK", "WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID"} & set(env)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO_ROOT)


def test_gpu_checks_verify_cuda_judges_two_processes_only_with_two_gpus() -> None:
    gpu_checks = _gpu_checks()

    def verdict(key: str, holds: bool) -> dict[str, Any]:
        return {"key": key, "holds": holds, "evidence": [] if holds else [f"{key} differs"]}

    report = {
        "one_process": [verdict("runs", True), verdict("losses", True)],
        "n_processes": [verdict("no-crash", False), verdict("in-sync", True)],
    }
    # One GPU: two ranks would share it; the 2-process part is not judged.
    assert gpu_checks.verify_cuda_verdict(report, 1) == (
        "1 process: 2/2 verdicts hold; 2 processes: NOT RUN (needs 2 GPUs)"
    )
    with pytest.raises(AssertionError, match="2 processes: no-crash"):
        gpu_checks.verify_cuda_verdict(report, 2)
    report["one_process"][1] = verdict("losses", False)
    with pytest.raises(AssertionError, match="1 process: losses"):
        gpu_checks.verify_cuda_verdict(report, 1)


def test_gpu_checks_verify_cuda_is_not_run_without_cuda() -> None:
    """On this machine (no CUDA) the check says NOT RUN, and the GPU run's main reports it so."""
    gpu_checks = _gpu_checks()
    with pytest.raises(gpu_checks.NotRun, match="no CUDA device"):
        gpu_checks.check_verify_cuda()


def test_gpu_checks_verify_run_reads_verifys_own_report_on_the_cpu() -> None:
    """The check's run of verify, here on the CPU (the example takes whatever accelerator exists):
    the JSON it reads is verify's, and every verdict of the example holds on 1 and 2 processes."""
    gpu_checks = _gpu_checks()
    report = gpu_checks.run_verify(gpu_checks.VERIFY_EXAMPLE, gpu_checks.VERIFY_EXAMPLE_ARGS, os.environ)
    line = gpu_checks.verify_cuda_verdict(report, 2)
    assert re.fullmatch(r"1 process: (\d+)/\1 verdicts hold; 2 processes: (\d+)/\2 verdicts hold", line), line
