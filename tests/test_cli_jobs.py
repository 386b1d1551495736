"""``--jobs N``: the files of a folder converted in worker processes (accel_convert/converter/parallel.py).

Real ``accel-convert`` processes over a folder of fixture cases (findings among them), a file that
does not parse, a file without torch and a program of two modules: ``--jobs 2`` prints the same
stdout and stderr, exits with the same code and writes the same files as ``--jobs 1``, in both
writing and ``--check`` modes; a SIGTERM during a ``--jobs 2`` run leaves no half-written file and
no worker behind. The in-process test shows that two jobs do use workers.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter import parallel
from accel_convert.converter.cli import EXIT_FAILED
from accel_convert.converter.pipeline import ConversionError, convert_source
from tests.launching import REPO_ROOT, base_env, descendants
from tests.test_cli_robustness import SLOW_WRITES, TRAIN

CASES = REPO_ROOT / "fixtures" / "cases"
#: Fixture cases with rewrites and warnings (ACC9xx) to report.
CASE_NAMES = ("wrapped_dataloader_tutorial", "accelerator_device", "accel_flag_cudnn")


def make_folder(root: Path) -> Path:
    folder = root / "src"
    folder.mkdir()
    for name in CASE_NAMES:
        shutil.copy(CASES / f"{name}.py", folder / f"{name}.py")
    (folder / "broken.py").write_bytes(b"import torch\ndef train(:\n    pass\n")
    (folder / "plain.py").write_bytes(b"print('no torch here')\n")
    (folder / "main.py").write_bytes(b"import torch\nfrom helpers import train\n\ntrain(torch.nn.Linear(2, 2), [])\n")
    (folder / "helpers.py").write_bytes(TRAIN)
    return folder


def accel_convert(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=base_env(),
        timeout=600,
        check=False,
    )


def written(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("mode", [(), ("--check",)], ids=["write", "check"])
def test_two_jobs_print_exit_and_write_as_one(tmp_path: Path, mode: tuple[str, ...]) -> None:
    make_folder(tmp_path)
    # --check: without -o (a stale-output message would name each run's own folder).
    runs = {
        jobs: accel_convert("src", *(mode or ("-o", f"out{jobs}")), "-v", "--jobs", str(jobs), cwd=tmp_path)
        for jobs in (1, 2)
    }
    one, two = runs[1], runs[2]
    assert one.returncode == EXIT_FAILED and "src/broken.py:2:" in one.stderr, one.stderr  # a failure to report
    assert "ACC9" in one.stderr + one.stdout  # findings to report
    assert (two.returncode, two.stdout, two.stderr) == (one.returncode, one.stdout, one.stderr)
    if not mode:
        assert written(tmp_path / "out1") == written(tmp_path / "out2") != {}
        assert "helpers.py" in written(tmp_path / "out2")  # the program's module came out too


def test_two_jobs_convert_in_workers_with_the_same_results(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    options = Options()

    class Job:
        def __init__(self, path: Path) -> None:
            self.source, self.shown_name, self.problem, self.program = path, str(path), None, ()

    jobs = [Job(folder / name) for name in ("accelerator_device.py", "broken.py", "plain.py")]
    conversions = parallel.start(2, jobs, options)
    try:
        assert isinstance(conversions, parallel.ParallelConversions)
        good, broken, plain = (job.source.read_bytes() for job in jobs)
        assert conversions.file(id(jobs[0]), good) == convert_source(good, options, path=jobs[0].shown_name)
        with pytest.raises(ConversionError, match="broken.py:2:"):
            conversions.file(id(jobs[1]), broken)
        # Bytes other than those the worker read (the file changed): the command converts them.
        assert conversions.file(id(jobs[2]), b"import torch\n") is None
    finally:
        conversions.close(stopped=False)
    assert type(parallel.start(1, jobs, options)) is parallel.Conversions


def test_sigterm_during_a_two_job_run_leaves_no_half_written_file_nor_worker(tmp_path: Path) -> None:
    sources = tmp_path / "src"
    sources.mkdir()
    for index in range(6):
        (sources / f"train{index}.py").write_bytes(TRAIN)
    marker = tmp_path / "writing"
    child = subprocess.Popen(  # "0": no write completes before the slow one
        [sys.executable, "-c", SLOW_WRITES, str(marker), "0", "src", "-o", "out", "--jobs", "2"],
        cwd=tmp_path,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the write never started"
            time.sleep(0.05)
        workers = descendants(child.pid)
        assert workers, "no worker processes"
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 143, stderr
    assert list((tmp_path / "out").iterdir()) == [], "a temporary (or half-written) file was left behind"
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1].startswith("accel-convert: terminated;")
    deadline = time.monotonic() + 60
    while [pid for pid in workers if Path(f"/proc/{pid}").exists()] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "a worker outlived the command"


#: In a fresh interpreter (no thread another test may have left): the start method chosen, and
#: whether the engine's modules and a rule the registry loads were imported before the fork.
FORK_PROBE = """
import sys
from accel_convert.converter import parallel
method = parallel._context().get_start_method()
loaded = set(parallel.CONVERSION_MODULES) | {"accel_convert.codemods.checks.unseeded_random"}
print(method, loaded <= set(sys.modules))
"""


def test_workers_fork_from_the_command_with_every_rule_loaded_unless_a_thread_runs() -> None:
    """No thread beside the command's: workers are forked from it, the engine and every rule
    imported first (each worker would otherwise import them again); a caller's thread running:
    a fork could copy a lock it holds, so the workers come from a fork server."""
    import threading

    probe = subprocess.run(
        [sys.executable, "-c", FORK_PROBE], capture_output=True, text=True, env=base_env(), timeout=300, check=True
    )
    assert probe.stdout.split() == ["fork", "True"], probe.stderr
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert parallel._context().get_start_method() == "forkserver"
    finally:
        stop.set()
        thread.join()
