"""The installed ``accel-convert`` console script, run as users and pre-commit run it.

Two real processes (each costs an interpreter start): a conversion from stdin to stdout, then a
``--check`` over the converted result and the original together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.launching import REPO_ROOT, base_env

SCRIPT = b"""import torch


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
"""


def console_script() -> str:
    path = Path(sysconfig.get_path("scripts")) / "accel-convert"
    assert path.is_file(), f"{path} missing: install the project (pip install -e .)"
    return str(path)


def accel_convert(*args: str, stdin: bytes | None = None, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [console_script(), *args], input=stdin, capture_output=True, cwd=cwd, env=base_env(), timeout=120, check=False
    )


def test_console_script_converts_stdin_then_checks_both_files(tmp_path: Path) -> None:
    source = SCRIPT
    converted = accel_convert("-", "--stdin-filename", "train.py", "-v", stdin=source, cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr.decode()
    assert b"accelerator.backward(loss)" in converted.stdout
    assert b"train.py:" in converted.stderr and b"ACC1" in converted.stderr
    (tmp_path / "original.py").write_bytes(source)
    (tmp_path / "converted.py").write_bytes(converted.stdout)

    check = accel_convert("--check", "-v", "original.py", "converted.py", cwd=tmp_path)
    assert check.returncode == 1, check.stderr.decode()
    stderr = check.stderr.decode()
    pending = [line for line in stderr.splitlines() if ": ACC1" in line]
    assert pending and all(line.startswith("original.py:") for line in pending), stderr
    assert stderr.splitlines()[-1].startswith("1 would convert, 1 unchanged, 0 failed")


def test_pre_commit_hook_definition_runs_the_check() -> None:
    text = (REPO_ROOT / ".pre-commit-hooks.yaml").read_text()
    lines = {line.strip(" -") for line in text.splitlines() if not line.lstrip().startswith("#")}
    assert {"id: accel-convert-check", "entry: accel-convert --check", "language: python", "types: [python]"} <= lines


#: Runs the command three times in one interpreter and reports what each run had imported.
IMPORT_PROBE = """
import atexit, gc, json, sys
from accel_convert.converter.cli import main

def run(*args):
    try:
        main(list(args), prog_name="accel-convert")
    except SystemExit as exit:
        return exit.code

def loaded():
    return sorted(name for name in ("rich", "rich.console", "rich.text", "tomllib", "torch", "pathspec")
                  if name in sys.modules)

report = {"clean": run("--check", "clean.py"), "after_clean": loaded()}
report["train"] = run("--check", "-v", "train.py")
report["after_train"] = loaded()
report["json"] = run("--check", "--output-format", "json", "train.py")
report["after_json"] = loaded()
report["coloured"] = run("--check", "-v", "--color", "train.py")
report["after_coloured"] = loaded()
report["frozen_after_in_process_runs"] = gc.get_freeze_count()
sys.__stdout__.write("\\nPROBE " + json.dumps(report) + "\\n")
# Last, as the console script runs it: the process's own command line, then the end.
sys.argv = ["accel-convert", "--check", "-q", "clean.py"]
atexit.register(lambda: sys.__stdout__.write(f"\\nFROZEN AT EXIT {gc.get_freeze_count()}\\n"))
main(prog_name="accel-convert")
"""


def test_check_on_a_pipe_never_imports_rich_console(tmp_path: Path) -> None:
    """Start-up: plain ``--check`` text (and JSON) on a pipe is written without rich, and no
    pyproject.toml means no TOML parser; ``--color`` still goes through rich. A run on the
    process's own command line ends with everything frozen out of the interpreter's final
    collection; in-process runs leave the collector as they found it."""
    (tmp_path / "clean.py").write_bytes(b"import os\nprint(os.getcwd())\n")
    (tmp_path / "train.py").write_bytes(SCRIPT)
    assert not any((folder / "pyproject.toml").exists() for folder in (tmp_path, *tmp_path.parents))
    env = base_env()
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], capture_output=True, cwd=tmp_path, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    stdout = result.stdout.decode()
    report = json.loads(stdout.rsplit("PROBE ", 1)[1].splitlines()[0])
    assert (report["clean"], report["train"], report["json"], report["coloured"]) == (0, 1, 1, 1)
    assert report["after_clean"] == report["after_train"] == report["after_json"] == [], report
    assert "rich.console" in report["after_coloured"], report
    assert report["frozen_after_in_process_runs"] == 0
    assert int(stdout.rsplit("FROZEN AT EXIT ", 1)[1]) > 10_000, "the final collection would walk every module"
    assert '"code": "ACC105"' in stdout
    stderr = result.stderr.decode()
    assert "0 would convert, 1 unchanged, 0 failed\n" in stderr
    backward_line = SCRIPT.splitlines().index(b"        loss.backward()") + 1
    assert f"train.py:{backward_line}:9: ACC105 X.backward() → accelerator.backward(X)\n" in stderr
    assert "\x1b[31mACC105\x1b[0m" in stderr


#: Runs the command as the console script does and, at exit, says which of the modules a
#: one-file conversion never needs were loaded.
ONE_FILE_PROBE = """
import atexit, runpy, sys
NEVER = ("hashlib", "base64", "nbformat", "rich", "accel_convert.converter.notebooks", "accel_convert.converter.docs")
atexit.register(lambda: sys.__stderr__.write("\\nLOADED " + ",".join(n for n in NEVER if n in sys.modules) + "\\n"))
sys.argv = ["accel-convert", *sys.argv[1:]]
runpy.run_module("accel_convert.converter", run_name="__main__")
"""


@pytest.mark.parametrize(
    ("arguments", "loaded"),
    [
        (["-q", "train.py"], ""),
        (["--check", "--no-cache", "-q", "train.py"], ""),
        # The cache digests and encodes what it keeps: it loads them, on first use.
        (["--check", "-q", "train.py"], "hashlib,base64"),
    ],
)
def test_one_file_loads_only_what_its_run_needs(tmp_path: Path, arguments: list[str], loaded: str) -> None:
    """Converting one script imports no notebook, docs, cache or colour support (issue 41: the
    whole process on one file, start-up included)."""
    (tmp_path / "train.py").write_bytes(SCRIPT)
    env = {**base_env(), "ACCEL_CONVERT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FORCE_COLOR", None)
    result = subprocess.run(
        [sys.executable, "-c", ONE_FILE_PROBE, *arguments],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr.decode()
    assert f"LOADED {loaded}\n" in result.stderr.decode(), result.stderr.decode()


#: Runs the command with every parse of TOML counted (a file by ``load``, a text by ``loads``;
#: Python 3.10's parser is tomli), and says at exit how many there were.
TOML_PROBE = """
import atexit, runpy, sys
try:
    import tomllib as toml
except ImportError:
    import tomli as toml
parses = []
def counted(parse):
    return lambda *args, **options: parses.append(1) or parse(*args, **options)
toml.load, toml.loads = counted(toml.load), counted(toml.loads)
atexit.register(lambda: sys.__stderr__.write(f"\\nTOML PARSES {len(parses)}\\n"))
sys.argv = ["accel-convert", *sys.argv[1:]]
runpy.run_module("accel_convert.converter", run_name="__main__")
"""


def test_one_file_parses_its_projects_pyproject_once(tmp_path: Path) -> None:
    """The project's pyproject.toml answers four questions of a one-file run (this command's
    table, black's, the line length, the import sorting): its text is parsed once, and every
    answer still comes from it (issue 41: the whole process on one file)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.accel-convert]\ntarget = "accelerate"\n\n[tool.ruff]\nline-length = 100\n', encoding="utf-8"
    )
    (tmp_path / "train.py").write_bytes(SCRIPT)
    result = subprocess.run(
        [sys.executable, "-c", TOML_PROBE, "-q", "train.py"],
        capture_output=True,
        cwd=tmp_path,
        env=base_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"from accelerate import Accelerator" in result.stdout  # the command's own table was read
    assert "TOML PARSES 1\n" in result.stderr.decode(), result.stderr.decode()


@pytest.mark.parametrize("collecting", [True, False])
def test_importing_the_command_leaves_the_collector_as_it_found_it(collecting: bool) -> None:
    """The collector is off while the command's modules load (start-up), and as it was after."""
    probe = (
        "import gc\n"
        f"(gc.enable if {collecting} else gc.disable)()\n"
        "import accel_convert.converter.cli\n"
        "print(gc.isenabled(), 'libcst' in __import__('sys').modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, env=base_env(), timeout=120, check=False
    )
    assert result.stdout.decode().split() == [str(collecting), "True"], result.stderr.decode()


#: The console script's run with an exit handler that writes, and an audit hook that writes when
#: the interpreter's teardown clears its state (events it raises after the exit handlers).
END_PROBE = """
import atexit, os, runpy, sys
def audit(event, arguments, write=os.write):
    if event in ("cpython.PyInterpreterState_Clear", "cpython._PySys_ClearAuditHooks"):
        write(2, b"TORN DOWN\\n")
sys.addaudithook(audit)
atexit.register(lambda: sys.__stdout__.write("EXIT HANDLER RAN\\n"))
sys.argv = ["accel-convert", *sys.argv[1:]]
runpy.run_module("accel_convert.converter", run_name="__main__")
"""


@pytest.mark.parametrize(("arguments", "code"), [(["-q", "train.py"], 0), (["--check", "--no-cache", "train.py"], 1)])
def test_the_process_ends_without_teardown_after_its_output_and_exit_handlers(
    tmp_path: Path, arguments: list[str], code: int
) -> None:
    """A run on the process's own command line ends once its output is flushed and the exit
    handlers have run, with its own exit code, skipping the interpreter's teardown of every
    module (issue 41: the whole process on one file)."""
    (tmp_path / "train.py").write_bytes(SCRIPT)
    result = subprocess.run(
        [sys.executable, "-c", END_PROBE, *arguments], capture_output=True, cwd=tmp_path, env=base_env(), timeout=120
    )
    assert result.returncode == code, result.stderr.decode()
    assert result.stdout.endswith(b"EXIT HANDLER RAN\n")
    if code == 0:
        assert result.stdout.count(b"accelerator.backward(loss)") == 1
    else:
        assert result.stderr.decode().splitlines()[-1].startswith("1 would convert")
    assert b"TORN DOWN" not in result.stderr


def test_a_process_end_inside_the_test_process_fails_the_test_and_a_forked_child_still_ends() -> None:
    """The command's ``os._exit`` reached in pytest's own process would end the whole run with the
    command's code (0: green, half the tests never run); tests/conftest.py turns it into a failure
    there, while a forked child (multiprocessing's workers) still ends with its code."""
    from tests.conftest import ProcessEndedInTest

    with pytest.raises(ProcessEndedInTest):
        os._exit(0)
    child = os.fork()
    if child == 0:
        os._exit(7)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 7
