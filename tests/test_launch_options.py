"""accel-launch's own options, in real subprocesses: --help (ours, then torchrun's), --version,
--env anywhere before the script, one line instead of a traceback without torch, and the saved
launch configuration (``accel-launch config``, read by the launcher, overridden by the command
line)."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from accel_convert.runtime import launch
from tests.launching import REPO_ROOT, Run, free_port, run_command

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, installed as tomli
    import tomli as tomllib

#: A worker that reports what the launcher handed it (stdlib only: no torch import per rank).
#: One write per line: ``print`` writes the text and the newline separately, and the two workers
#: share one pipe, so their lines could interleave.
REPORTING_WORKER = """\
import os
import sys
names = ("RANK", "WORLD_SIZE", "MASTER_PORT", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU")
sys.stdout.write("WORKER " + " ".join(f"{name}={os.environ.get(name, '-')}" for name in names) + "\\n")
sys.stdout.flush()
"""

#: Makes ``import torch`` fail in the process, as on a machine without torch.
NO_TORCH_SITECUSTOMIZE = """\
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoTorch())
"""


def accel_launch(*args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 120) -> Run:
    """``python -m accel_convert.runtime.launch ARGS`` (what the ``accel-launch`` entry point runs)."""
    command = [sys.executable, "-m", "accel_convert.runtime.launch", *args]
    if stdin is None:
        return run_command(command, env=env, timeout=timeout)
    import subprocess

    from tests.launching import base_env

    result = subprocess.run(command, input=stdin, capture_output=True, text=True, env=base_env(env), timeout=timeout)
    return Run(result.returncode, result.stdout, result.stderr)


@pytest.fixture
def isolated(tmp_path: Path) -> dict[str, str]:
    """An environment whose default configuration lives in ``tmp_path`` (never the user's)."""
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path), "ACCEL_LAUNCH_CONFIG": ""}


def test_help_shows_what_accel_launch_adds_then_torchruns_options(isolated: dict[str, str]) -> None:
    run = accel_launch("--help", env=isolated).check()
    # Answered without importing torch (which took 9 s on a loaded machine).
    probe = "import sys; from accel_convert.runtime import launch; launch.help_text(); print('torch' in sys.modules)"
    assert run_command([sys.executable, "-c", probe], env=isolated).check().stdout.strip() == "False"
    ours = run.stdout.index("Added by accel-launch")
    assert ours < run.stdout.index("torchrun's options") < run.stdout.index("--rdzv-endpoint")
    for option in ("--config-file", "--mixed-precision", "--cpu", "--env", "--version", "config", "Exit codes"):
        assert option in run.stdout[ours : run.stdout.index("torchrun's options")]


def test_version_is_the_installed_distributions(isolated: dict[str, str]) -> None:
    run = accel_launch("--version", env=isolated).check()
    assert run.stdout == f"accel-launch (accel-convert) {metadata.version('accel-convert')}\n"


def test_env_anywhere_before_the_script_reports_versions_and_launch_variables(isolated: dict[str, str]) -> None:
    variables = {**isolated, "MASTER_ADDR": "10.1.2.3", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "3"}
    run = accel_launch("--nproc-per-node", "2", "--env", "--nnodes", "1", env=variables).check()
    import torch

    report = run.stdout
    accelerate = metadata.version("accelerate") if _installed("accelerate") else "not installed"
    for line in (
        f"accel-launch (accel-convert) {metadata.version('accel-convert')}",
        f"Accelerate: {accelerate}",
        f"torch: {torch.__version__}",
        f"CUDA available: {torch.cuda.is_available()}",
        "NCCL: ",
        "Backends: gloo=True",
        "  MASTER_ADDR=10.1.2.3",
        "  NCCL_DEBUG=INFO",
        "  OMP_NUM_THREADS=3",
        "  MASTER_PORT: not set",
        "  WORLD_SIZE: not set",
        "Saved launch settings: none",
    ):
        assert line in report, line


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_without_torch_one_line_names_the_extra(tmp_path: Path, isolated: dict[str, str]) -> None:
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH_SITECUSTOMIZE)
    env = {**isolated, "PYTHONPATH": f"{tmp_path}:{REPO_ROOT}"}
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")

    launched = accel_launch(str(script), env=env)
    assert launched.returncode == 3
    assert launched.stderr == (
        "accel-launch: error: torch is not installed here; install the runtime extra on this machine: "
        "pip install 'accel-convert[runtime]'\n"
    )
    assert "never run" not in launched.stdout

    report = accel_launch("--env", env=env).check()
    assert "torch: not installed (No module named 'torch'); pip install 'accel-convert[runtime]'" in report.stdout
    assert "Launch variables:" in report.stdout and "Traceback" not in report.stderr

    helped = accel_launch("--help", env=env).check()
    assert "Added by accel-launch" in helped.stdout
    assert helped.stdout.rstrip().endswith("launching needs it: pip install 'accel-convert[runtime]'")
    assert accel_launch("--version", env=env).check().stdout.startswith("accel-launch (accel-convert) ")
    # A converted script run there: the import names the extra too.
    imported = run_command([sys.executable, "-c", "from accel_convert.runtime import Accelerator"], env=env)
    assert imported.returncode == 1
    assert imported.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: accel_convert.runtime.Accelerator needs torch, which is not installed here: "
        "pip install 'accel-convert[runtime]'"
    )


@pytest.mark.parametrize(
    ("argv", "torchrun", "script"),
    [
        (["--env", "train.py", "--env", "CartPole"], [], ["train.py", "--env", "CartPole"]),
        (["--nnodes", "2", "--standalone", "train.py", "-h"], ["--nnodes", "2", "--standalone"], ["train.py", "-h"]),
        (["-r3", "--stand", "-m", "pkg.train", "--lr=1"], ["-r3", "--stand", "-m"], ["pkg.train", "--lr=1"]),
        (["--config-file=c.toml", "--mixed-precision", "bf16", "--cpu", "t.py"], [], ["t.py"]),
        (["--master-port", "--weird", "t.py"], ["--master-port", "--weird"], ["t.py"]),
    ],
)
def test_own_options_come_out_of_the_launchers_part_only(
    argv: list[str], torchrun: list[str], script: list[str]
) -> None:
    line = launch.split_command_line(argv)
    assert (line.torchrun, line.script) == (torchrun, script)


def test_config_answers_are_saved_and_shown(tmp_path: Path, isolated: dict[str, str]) -> None:
    port = free_port()
    # Processes, machines, rank, address, port, precision, cpu; "zero" is refused and asked again.
    answers = f"zero\n2\n\n\n\n{port}\nbf16\n\n"
    written = accel_launch("config", env=isolated, stdin=answers).check()
    path = tmp_path / "cache" / "accel-convert" / "launch.toml"
    assert f"launch settings written to {path}" in written.stdout
    assert "'zero': invalid literal" in written.stdout  # the wrong answer explained
    assert "Master port [29500]: " in written.stdout  # each question shows its default
    saved = tomllib.loads(path.read_text())
    assert saved == {
        "nproc_per_node": 2,
        "nnodes": "1",
        "node_rank": 0,
        "master_addr": "127.0.0.1",
        "master_port": port,
        "mixed_precision": "bf16",
        "cpu": False,
    }
    # The standard-library reader (Python 3.10 has no tomllib) reads what config writes the same.
    assert launch.parse_flat_toml(path.read_text()) == saved

    # Without questions: the options given change, the rest stay as saved.
    accel_launch("config", "--no-input", "--nproc-per-node", "3", "--cpu", "yes", env=isolated).check()
    shown = accel_launch("config", "--show", env=isolated).check().stdout
    assert shown.startswith(f"# {path}\n")
    assert "nproc_per_node = 3\n" in shown and f"master_port = {port}\n" in shown and "cpu = true\n" in shown

    refused = accel_launch("config", "--no-input", "--master-port", "70000", env=isolated)
    assert refused.returncode == 2
    assert refused.stderr == "accel-launch: error: --master-port 70000: a TCP port, 1 to 65535\n"


def test_bad_or_missing_configuration_is_one_error_line(tmp_path: Path, isolated: dict[str, str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("nproc = 2\n")
    script = str(tmp_path / "train.py")
    run = accel_launch("--config-file", str(bad), script, env=isolated)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert f"{bad}: unknown setting 'nproc'" in run.stderr
    missing = accel_launch(script, env={**isolated, "ACCEL_LAUNCH_CONFIG": str(tmp_path / "none.toml")})
    assert missing.returncode == 2 and "no such launch configuration" in missing.stderr


def test_launch_reads_the_saved_settings_and_the_command_line_wins(tmp_path: Path, isolated: dict[str, str]) -> None:
    port = free_port()
    config = tmp_path / "team.toml"
    accel_launch(
        "config",
        "--no-input",
        "--config-file",
        str(config),
        "--nproc-per-node",
        "2",
        "--master-port",
        str(port),
        "--mixed-precision",
        "bf16",
        env=isolated,
    ).check()
    worker = tmp_path / "worker.py"
    worker.write_text(REPORTING_WORKER)

    from_file = accel_launch(str(worker), env={**isolated, "ACCEL_LAUNCH_CONFIG": str(config)}, timeout=180).check()
    lines = sorted(line for line in from_file.stdout.splitlines() if line.startswith("WORKER "))
    assert lines == [
        f"WORKER RANK={rank} WORLD_SIZE=2 MASTER_PORT={port} ACCELERATE_MIXED_PRECISION=bf16 ACCELERATE_USE_CPU=-"
        for rank in (0, 1)
    ]
    assert f"accel-launch: from {config}: --nproc-per-node 2 --master-port {port}" in from_file.stderr

    other_port = free_port()
    overridden = accel_launch(
        "--config-file",
        str(config),
        "--nproc-per-node",
        "1",
        "--master-port",
        str(other_port),
        "--mixed-precision",
        "fp16",
        "--cpu",
        str(worker),
        env=isolated,
        timeout=180,
    ).check()
    lines = [line for line in overridden.stdout.splitlines() if line.startswith("WORKER ")]
    assert lines == [
        f"WORKER RANK=0 WORLD_SIZE=1 MASTER_PORT={other_port} ACCELERATE_MIXED_PRECISION=fp16 ACCELERATE_USE_CPU=1"
    ]
    # Every value the file holds was given on the command line: the file decided nothing, and the
    # "from FILE" line (it once said "--nproc-per-node 2" while 1 was used) is not printed.
    assert "from " not in overridden.stderr
    partly = accel_launch(
        "--nproc_per_node=1", str(worker), env={**isolated, "ACCEL_LAUNCH_CONFIG": str(config)}, timeout=180
    ).check()
    assert f"accel-launch: from {config}: --master-port {port}\n" in partly.stderr
    assert len([line for line in partly.stdout.splitlines() if line.startswith("WORKER ")]) == 1


def test_a_missing_script_is_one_error_line(tmp_path: Path, isolated: dict[str, str]) -> None:
    # Before, torchrun started the workers: each printed its traceback, then torchrun its summary.
    run = accel_launch(str(tmp_path / "nope.py"), env=isolated, timeout=120)
    assert run.returncode == 2
    assert run.stderr == f"accel-launch: error: {tmp_path / 'nope.py'}: no such file\n"


def test_accel_launch_test_checks_the_processes_and_says_on_what(tmp_path: Path, isolated: dict[str, str]) -> None:
    # Like ``accelerate test``: the self-check launched as a training script would be (here two
    # CPU processes, Gloo), one line at the end from the main process.
    run = accel_launch("test", "--nproc-per-node", "2", "--cpu", env=isolated, timeout=300).check()
    assert run.stdout.splitlines() == ["2 processes on 1 node, gloo, cpu: all checks passed"], run.stdout
    refused = accel_launch("test", "train.py", env=isolated)
    assert refused.returncode == 2
    assert refused.stderr == (
        "accel-launch: error: accel-launch test takes launch options only (accel-launch test --nproc-per-node 2)\n"
    )


def test_a_failed_self_check_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel_convert.runtime import self_check

    def wrong_sum(accelerator: object) -> None:
        self_check.expect(False, "all-reduce gave 2.0, not 3.0")

    monkeypatch.setattr(self_check, "CHECKS", [("all-reduce and gather", wrong_sum)])
    assert self_check.main() == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "accel-launch test: rank 0: all-reduce and gather failed: all-reduce gave 2.0, not 3.0\n"


# -- clean edges: answered before torch loads, one line each ---------------------------------------


def no_torch_env(tmp_path: Path, isolated: dict[str, str]) -> dict[str, str]:
    """An environment where ``import torch`` fails: a command that still answers with its own
    line (not the "torch is not installed" one, exit 3) never imported torch."""
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH_SITECUSTOMIZE)
    return {**isolated, "PYTHONPATH": f"{tmp_path}:{REPO_ROOT}"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.py"], "nope.py: no such file"),
        (["env"], "env: no such file; did you mean accel-launch --env?"),
        (
            ["--nproc-per-node", "two", "SCRIPT"],
            "--nproc-per-node two: a number of processes (1 or more), or one of gpu, cpu, auto",
        ),
        (["--nnodes=0", "SCRIPT"], "--nnodes 0: a number of machines, or MIN:MAX"),
        (["--master_port", "99999", "SCRIPT"], "--master_port 99999: a TCP port, 1 to 65535"),
        (["--bogus", "SCRIPT"], "unknown option --bogus; accel-launch --help lists the options"),
        (["--rdzv-endpont", "h:1", "SCRIPT"], "unknown option --rdzv-endpont; did you mean --rdzv-endpoint?"),
        (
            ["--multi_gpu", "SCRIPT"],
            "unknown option --multi_gpu; not needed: accel-launch starts one process per GPU by default (--nproc-per-node N for another count)",
        ),
        (["--num_machines", "2", "SCRIPT"], "unknown option --num_machines; did you mean --nnodes N?"),
        (["--machine-rank", "1", "SCRIPT"], "unknown option --machine-rank; did you mean --node-rank R?"),
        (["--main_process_ip", "h", "SCRIPT"], "unknown option --main_process_ip; did you mean --master-addr HOST?"),
        (
            ["--main_process_port", "1", "SCRIPT"],
            "unknown option --main_process_port; did you mean --master-port PORT?",
        ),
    ],
)
def test_usage_errors_are_one_line_before_torch_loads(
    args: list[str], message: str, tmp_path: Path, isolated: dict[str, str]
) -> None:
    # Before: `--nproc-per-node two` was a 30-line traceback (exit 1) after torch's import, and
    # an unknown option torchrun's usage text; `accel-launch nope.py` took 5 to 8 s.
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    run = accel_launch(*[str(script) if arg == "SCRIPT" else arg for arg in args], env=no_torch_env(tmp_path, isolated))
    assert (run.returncode, run.stderr) == (2, f"accel-launch: error: {message}\n")
    assert run.stdout == ""


def test_num_processes_says_accelerate_counts_every_machine(tmp_path: Path, isolated: dict[str, str]) -> None:
    run = accel_launch("--num_processes", "4", "t.py", env=no_torch_env(tmp_path, isolated))
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "did you mean --nproc-per-node N (processes on each machine" in run.stderr


def test_test_subcommand_help_is_its_own(isolated: dict[str, str]) -> None:
    run = accel_launch("test", "--help", env=isolated).check()
    assert run.stdout.startswith("usage: accel-launch test [launch options]\n")
    assert "Added by accel-launch" not in run.stdout  # the top-level help, before


def launch_without_omp(*args: str, env: dict[str, str], timeout: float = 240) -> Run:
    """A launch whose environment has no OMP_NUM_THREADS (the test harness sets it for every run)."""
    import subprocess

    from tests.launching import base_env

    variables = base_env(env)
    variables.pop("OMP_NUM_THREADS", None)
    command = [sys.executable, "-m", "accel_convert.runtime.launch", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=variables, timeout=timeout)
    return Run(result.returncode, result.stdout, result.stderr)


FAILING_WORKER = """\
import os
import sys
sys.stdout.write(f"WORKER {os.environ['RANK']} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}\\n")
sys.stdout.flush()
if os.environ["RANK"] == "1":
    raise ValueError("rank one fails on purpose")
"""


def test_a_workers_failure_is_one_summary_line_and_no_banner(tmp_path: Path, isolated: dict[str, str]) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(FAILING_WORKER)
    run = launch_without_omp("--nproc-per-node", "2", str(worker), env=isolated)
    assert run.returncode == 1
    lines = run.stderr.splitlines()
    # The start line says OMP_NUM_THREADS once; torchrun's five-line banner is gone.
    assert (
        lines[0] == "accel-launch: 2 processes on this machine, OMP_NUM_THREADS=1 each (set OMP_NUM_THREADS to change)"
    )
    assert "*****" not in run.stderr and "Setting OMP_NUM_THREADS" not in run.stderr
    assert sorted(line for line in run.stdout.splitlines() if line.startswith("WORKER")) == [
        "WORKER 0 OMP_NUM_THREADS=1",
        "WORKER 1 OMP_NUM_THREADS=1",
    ]
    # The worker's own traceback stays; the launcher's frames and torchrun's box do not.
    assert "ValueError: rank one fails on purpose" in run.stderr
    assert "launch.py" not in run.stderr and "ChildFailedError" not in run.stderr and "=====" not in run.stderr
    assert "failed (exitcode" not in run.stderr
    assert lines[-1] == "accel-launch: rank 1 failed (exit code 1); its output is above"


def test_a_script_that_would_run_as_copies_is_warned_about(tmp_path: Path, isolated: dict[str, str]) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text(REPORTING_WORKER)
    run = accel_launch("--nproc-per-node", "2", str(plain), env=isolated, timeout=240).check()
    warning = (
        f"accel-launch: warning: {plain} imports neither accel_convert.runtime, accelerate nor torch.distributed: "
        f"each process runs its own copy of the whole training (convert it first: accel-convert {plain})"
    )
    assert warning in run.stderr.splitlines()
    assert len([line for line in run.stdout.splitlines() if line.startswith("WORKER ")]) == 2  # it went on
    # One process is one copy anyway; a script that imports torch.distributed cooperates.
    alone = accel_launch("--nproc-per-node", "1", str(plain), env=isolated, timeout=240).check()
    assert "warning" not in alone.stderr
    cooperating = tmp_path / "cooperating.py"
    cooperating.write_text("import torch.distributed as dist  # noqa\n" + REPORTING_WORKER)
    run = accel_launch("--nproc-per-node", "2", str(cooperating), env=isolated, timeout=240).check()
    assert "warning" not in run.stderr


@pytest.mark.parametrize(
    ("text", "copies"),
    [
        ("import torch\nmodel = torch.nn.Linear(2, 2)\n", True),
        ("# uses accelerate later\nimport torch\n", True),
        ("from accel_convert.runtime import Accelerator\n", False),
        ("from accel_convert import runtime\n", False),
        ("from accelerate import Accelerator\n", False),
        ("import torch.distributed as dist\n", False),
        ("from torch import nn, distributed as dist\n", False),
        ("import torch\ntorch.distributed.init_process_group('gloo')\n", False),
    ],
)
def test_runs_as_copies_reads_the_imports(text: str, copies: bool) -> None:
    from accel_convert.runtime.launch_checks import runs_as_copies

    assert runs_as_copies(text) is copies


ACCELERATE_WORKER = """\
import sys
from accelerate import Accelerator
accelerator = Accelerator()
sys.stdout.write(f"ACCELERATE {accelerator.process_index} {accelerator.num_processes} {accelerator.distributed_type.value}\\n")
sys.stdout.flush()
"""


def test_an_accelerate_script_on_a_machine_without_gpus_gets_cpu_ranks(
    tmp_path: Path, isolated: dict[str, str]
) -> None:
    # Before, Accelerate's Accelerator under torchrun on a CPU-only machine ran every process
    # alone (DistributedType.NO, 1 process each): ACCELERATE_USE_CPU is what `accelerate launch
    # --cpu` sets for it.
    script = tmp_path / "accelerate_train.py"
    script.write_text(ACCELERATE_WORKER)
    no_gpu = {**isolated, "CUDA_VISIBLE_DEVICES": ""}  # a machine without GPUs, wherever the test runs
    run = accel_launch("--nproc-per-node", "2", str(script), env=no_gpu, timeout=400).check()
    lines = sorted(line for line in run.stdout.splitlines() if line.startswith("ACCELERATE "))
    assert lines == ["ACCELERATE 0 2 MULTI_CPU", "ACCELERATE 1 2 MULTI_CPU"], run.stdout
    assert "ACCELERATE_USE_CPU=1 for Accelerate (no GPU here)" in run.stderr.splitlines()[0]


PREEMPTED_WORKER = """\
import os
import signal
import sys
import time

def save_and_stop(signum, frame):
    # Where a training script would call accelerator.save_state(): the launcher passed SIGTERM on.
    sys.stdout.write(f"SAVED {os.environ['RANK']}\\n")
    sys.stdout.flush()
    sys.exit(0)

signal.signal(signal.SIGTERM, save_and_stop)
sys.stdout.write("READY\\n")
sys.stdout.flush()
time.sleep(600)
"""


def test_sigterm_reaches_every_worker_and_the_launcher_says_so_in_one_line(
    tmp_path: Path, isolated: dict[str, str]
) -> None:
    # A preempted job: the scheduler sends SIGTERM to the launcher, torchrun sends it on to every
    # worker (which saves and exits), and the launcher ends with 128 + 15 and one line, not
    # torchrun's SignalException traceback.
    import signal
    import subprocess

    from tests.launching import base_env, stop_group_with_stacks

    worker = tmp_path / "worker.py"
    worker.write_text("import torch.distributed  # noqa: F401  (cooperates: no copies warning)\n" + PREEMPTED_WORKER)
    command = [sys.executable, "-m", "accel_convert.runtime.launch", "--nproc-per-node", "2", str(worker)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_env(isolated),
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        ready = [process.stdout.readline() for _ in range(2)]  # blocks until both workers run
        assert ready == ["READY\n", "READY\n"]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=180)
    except BaseException:
        stop_group_with_stacks(process)
        raise
    assert sorted(out.splitlines()) == ["SAVED 0", "SAVED 1"]
    assert process.returncode == 128 + signal.SIGTERM
    assert err.splitlines()[-1] == "accel-launch: stopped by SIGTERM; the workers were sent SIGTERM too"
    assert "Traceback" not in err and "SignalException" not in err


CONVERTED_FAILING_WORKER = """\
import torch
from accel_convert.runtime import Accelerator

accelerator = Accelerator()
accelerator.reduce(torch.ones(1), "sum")
if accelerator.process_index == 1:
    raise ValueError("rank one fails on purpose")
accelerator.wait_for_everyone()
"""


def test_a_converted_scripts_failure_line_names_the_error(tmp_path: Path, isolated: dict[str, str]) -> None:
    # The runtime writes the failing rank's error where torchrun's agent reads it (the worker's
    # TORCHELASTIC_ERROR_FILE), so the summary line can name it.
    worker = tmp_path / "converted.py"
    worker.write_text(CONVERTED_FAILING_WORKER)
    run = accel_launch("--nproc-per-node", "2", str(worker), env=isolated, timeout=300)
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines()[-1] == (
        "accel-launch: rank 1 failed (exit code 1): ValueError: rank one fails on purpose; its output is above"
    )
    assert run.stderr.count("Traceback") == 1  # the worker's own, once
