"""The command as a process, on what a hostile user or a busy shell throws at it: symbolic links,
read-only files, signals mid-write, closed pipes, colour variables, patches that must apply, and
warnings CPython raises about the user's code.

Every test runs ``python -m accel_convert.converter`` in a real subprocess: exit codes, signals and pipes are
process-level behaviour that an in-process runner cannot show.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launching import base_env

TRAIN = b"""import torch


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
"""


def accel_convert(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, python: str = sys.executable, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "accel_convert.converter", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=base_env(env),
        timeout=timeout,
        check=False,
    )


def error_lines(stderr: str) -> list[str]:
    """stderr without the summary line."""
    return [line for line in stderr.splitlines() if not line.split(",")[0].endswith(("converted", "would convert"))]


# -- symbolic links and permissions ------------------------------------------------------------


def test_symlink_loops_are_one_line_each_and_the_run_goes_on(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.py").write_bytes(TRAIN)
    (folder / "loop1.py").symlink_to("loop2.py")
    (folder / "loop2.py").symlink_to("loop1.py")
    (tmp_path / "self.py").symlink_to("self.py")

    in_folder = accel_convert("--check", "src", cwd=tmp_path)
    assert in_folder.returncode == 1, in_folder.stderr  # a.py is pending; the loops are only skipped
    assert "Traceback" not in in_folder.stderr
    lines = in_folder.stderr.splitlines()
    assert [line for line in lines if "loop" in line] == [
        "src/loop1.py: skipped: symbolic link loop",
        "src/loop2.py: skipped: symbolic link loop",
    ]
    assert any(line.startswith("src/a.py:") for line in lines)
    assert lines[-1].startswith("1 would convert, 0 unchanged, 0 failed, 2 skipped")

    named = accel_convert("--check", "self.py", "src/a.py", cwd=tmp_path)
    assert named.returncode == 123, named.stderr
    assert "self.py:1:1: cannot read: symbolic link loop" in named.stderr.splitlines()
    assert any(line.startswith("src/a.py:") for line in named.stderr.splitlines()), "the run stopped"
    assert "Traceback" not in named.stderr


def test_writes_go_through_symlinks_and_create_missing_folders(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_bytes(TRAIN)
    (tmp_path / "link.py").symlink_to("real.py")
    in_place = accel_convert("-i", "link.py", cwd=tmp_path)
    assert in_place.returncode == 0, in_place.stderr
    assert (tmp_path / "link.py").is_symlink(), "the link was replaced by a regular file"
    converted = (tmp_path / "real.py").read_bytes()
    assert b"accelerator.backward(loss)" in converted

    (tmp_path / "source.py").write_bytes(TRAIN)
    (tmp_path / "out_link.py").symlink_to("elsewhere/out_real.py")
    (tmp_path / "elsewhere").mkdir()
    output = accel_convert("source.py", "-o", "out_link.py", "-q", cwd=tmp_path)
    assert output.returncode == 0, output.stderr
    assert (tmp_path / "out_link.py").is_symlink()
    assert (tmp_path / "elsewhere" / "out_real.py").read_bytes() == converted

    nested = accel_convert("source.py", "-o", "new/deeper/out.py", "-q", cwd=tmp_path)
    assert nested.returncode == 0, nested.stderr
    assert (tmp_path / "new" / "deeper" / "out.py").read_bytes() == converted


def test_a_read_only_file_is_refused_in_place(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_bytes(TRAIN)
    script.chmod(0o444)
    result = accel_convert("-i", "train.py", cwd=tmp_path)
    assert result.returncode == 123, result.stderr
    assert error_lines(result.stderr) == [
        "train.py:1:1: cannot rewrite: the file is read-only (make it writable to convert it in place)"
    ]
    assert script.read_bytes() == TRAIN and stat.S_IMODE(script.stat().st_mode) == 0o444
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.py"]


# -- signals -----------------------------------------------------------------------------------

#: The command, with every fsync made to wait: the signal then lands while a temporary file
#: exists beside its target, the moment a kill could leave it behind.
SLOW_WRITES = """
import os, sys, time
from pathlib import Path
marker = Path(sys.argv[1])
quick_writes = int(sys.argv[2])  # the first ones complete; the next waits for the signal
real_fsync = os.fsync
def slow_fsync(fd):
    global quick_writes
    if quick_writes:
        quick_writes -= 1
        return real_fsync(fd)
    marker.touch()
    time.sleep(60)
os.fsync = slow_fsync
from accel_convert.converter.cli import main
if sys.argv[3] == "--in-process":
    # Called by another program with arguments: after the clean-up, the signal is that
    # program's (here the default handler: the process ends by SIGTERM, nothing after runs).
    main(sys.argv[4:], prog_name="accel-convert", standalone_mode=False)
    print("the caller carried on", file=sys.stderr)
else:
    sys.argv = ["accel-convert", *sys.argv[3:]]
    main()  # the console script: its own process
"""


@pytest.mark.parametrize(
    "sent, code, word, how, done",
    [
        (signal.SIGINT, 130, "interrupted", (), 0),
        (signal.SIGINT, 130, "interrupted", (), 2),
        (signal.SIGTERM, 143, "terminated", (), 1),
        # In-process, SIGTERM is not turned into a return value the caller would go on after
        # (a cancelled CI job ran on for 333 s when a test runner's SIGTERM became exit code 143).
        (signal.SIGTERM, -signal.SIGTERM, "terminated", ("--in-process",), 0),
    ],
)
def test_a_signal_mid_write_leaves_no_temporary_file(
    tmp_path: Path, sent: signal.Signals, code: int, word: str, how: tuple[str, ...], done: int
) -> None:
    """``done`` files are written before the signal comes, in the middle of the next one: they
    are complete, the one being written leaves nothing, and the last line counts them."""
    sources = tmp_path / "src"
    sources.mkdir()
    for index in range(3):
        (sources / f"train{index}.py").write_bytes(TRAIN)
    marker = tmp_path / "writing"
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITES, str(marker), str(done), *how, "src", "-o", "out"],
        cwd=tmp_path,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the write never started"
            time.sleep(0.05)
        assert [path.name for path in (tmp_path / "out").iterdir() if path.name.endswith(".tmp")], "no temp file"
        child.send_signal(sent)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == code, stderr
    written = sorted((tmp_path / "out").iterdir())
    assert len(written) == done and not [path for path in written if path.name.endswith(".tmp")], written
    assert all(path.read_bytes().startswith(b"import") for path in written)  # complete conversions
    assert "Traceback" not in stderr and "Aborted" not in stderr
    files = f"{done} file{'' if done == 1 else 's'} written"
    assert stderr.splitlines()[-1] == f"accel-convert: {word}; {files}, each complete; no file is half-written"
    assert "carried on" not in stderr


def test_a_closed_pipe_ends_the_run_quietly(tmp_path: Path) -> None:
    """``accel-convert --diff src | head -1``: more diff than a pipe holds, so writes hit the
    closed pipe for sure."""
    sources = tmp_path / "src"
    sources.mkdir()
    for index in range(60):
        (sources / f"train{index:02}.py").write_bytes(TRAIN)
    pipeline = subprocess.run(
        [
            "bash",
            "-c",
            f"set -o pipefail; {sys.executable} -m accel_convert.converter --diff src 2>errors.txt | head -1",
        ],
        cwd=tmp_path,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert pipeline.stdout == "--- a/src/train00.py\n"
    assert pipeline.returncode == 141, pipeline.stderr
    errors = (tmp_path / "errors.txt").read_text()
    # The findings (with their help lines) of the files converted before the pipe closed,
    # nothing else: no error, no traceback, no summary of a run that did not finish.
    assert errors and all(
        (line.startswith("src/train") and (": ACC" in line or line.endswith(" rewrites)")))
        or line.startswith("  help: ")
        for line in errors.splitlines()
    ), errors


# -- what is printed ---------------------------------------------------------------------------


def test_compiler_warnings_about_the_users_code_stay_quiet(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_bytes(TRAIN + b'\npattern = "\\d+"\nflag = 1 is 1\n')
    for warnings_setting in ("always", "error"):
        result = accel_convert("--check", "train.py", cwd=tmp_path, env={"PYTHONWARNINGS": warnings_setting})
        assert result.returncode == 1, result.stderr
        assert "Warning" not in result.stderr and "syntax error" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    "env, flag, coloured",
    [
        ({"FORCE_COLOR": "1"}, None, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, None, False),
        ({"FORCE_COLOR": "1"}, "--no-color", False),
        ({"NO_COLOR": "1"}, "--color", True),
    ],
)
def test_colour_is_one_decision_for_findings_and_diffs(
    tmp_path: Path, env: dict[str, str], flag: str | None, coloured: bool
) -> None:
    (tmp_path / "train.py").write_bytes(TRAIN)
    base = {"NO_COLOR": "", "FORCE_COLOR": ""}
    result = accel_convert("--diff", "train.py", *([flag] if flag else []), cwd=tmp_path, env={**base, **env})
    assert result.returncode == 0, result.stderr
    assert ("\x1b[" in result.stdout) is coloured, result.stdout
    assert ("\x1b[" in result.stderr) is coloured, result.stderr


DIFF_CASES = {
    "lf.py": TRAIN,
    "crlf.py": TRAIN.replace(b"\n", b"\r\n"),
    "no_final_newline.py": TRAIN.rstrip(b"\n"),
    "tabs.py": TRAIN.replace(b"    ", b"\t"),
}


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("patch") is None, reason="needs git and patch")
def test_diffs_apply_with_git_apply_and_patch(tmp_path: Path) -> None:
    for name, source in DIFF_CASES.items():
        (tmp_path / name).write_bytes(source)
    diff = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", "--diff", *DIFF_CASES],
        capture_output=True,
        cwd=tmp_path,
        env=base_env(),
        timeout=120,
        check=False,
    )
    assert diff.returncode == 0, diff.stderr.decode()
    (tmp_path / "changes.diff").write_bytes(diff.stdout)
    git = subprocess.run(
        ["git", "apply", "--check", "-v", "changes.diff"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert git.returncode == 0, git.stderr
    patch = subprocess.run(
        ["patch", "-p1", "--dry-run", "-i", "changes.diff"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert patch.returncode == 0, patch.stdout + patch.stderr
    applied = subprocess.run(
        ["git", "apply", "changes.diff"], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False
    )
    assert applied.returncode == 0, applied.stderr
    for name, source in DIFF_CASES.items():
        expected = subprocess.run(
            [sys.executable, "-m", "accel_convert.converter", "-", "-q"],
            input=source,
            capture_output=True,
            cwd=tmp_path,
            env=base_env(),
            timeout=120,
            check=True,
        ).stdout
        assert (tmp_path / name).read_bytes() == expected, name


# -- Python 3.10 -------------------------------------------------------------------------------


def python310() -> str | None:
    """A Python 3.10 with the converter's dependencies: $ACCEL_CONVERT_PYTHON310, else python3.10."""
    candidate = os.environ.get("ACCEL_CONVERT_PYTHON310") or shutil.which("python3.10")
    if candidate is None:
        return None
    probe = subprocess.run(
        [candidate, "-c", "import sys, libcst, click, rich, tomli, pathspec; assert sys.version_info[:2] == (3, 10)"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return candidate if probe.returncode == 0 else None


@pytest.mark.skipif(python310() is None, reason="no Python 3.10 with libcst, click, rich, tomli and pathspec installed")
def test_python_310_reads_pyproject_with_tomli(tmp_path: Path) -> None:
    interpreter = python310()
    assert interpreter is not None
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\nignore = ["ACC901"]\n')
    (tmp_path / "train.py").write_bytes(TRAIN)
    result = accel_convert("--check", "-v", "train.py", cwd=tmp_path, python=interpreter)
    assert result.returncode == 1, result.stderr
    assert "ACC105" in result.stderr and "ACC901" not in result.stderr and "Traceback" not in result.stderr
    # A folder search (pathspec) on 3.10 too: the ignored copy is not visited.
    (tmp_path / "ignored.py").write_bytes(TRAIN)
    (tmp_path / ".gitignore").write_text("ignored.py\n")
    folder = accel_convert("--check", "-q", ".", cwd=tmp_path, python=interpreter)
    assert (folder.returncode, folder.stderr) == (1, "train.py: would convert\n")
