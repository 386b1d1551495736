"""The ``accel-convert`` command: every flag, every exit code, bad input, and files left intact.

Most tests drive the click command in-process (CliRunner, fast); ``test_cli_process.py`` runs the
installed console script for real.
"""

from __future__ import annotations

import gc
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from accel_convert.converter import report
from accel_convert.converter.cli import main
from accel_convert.converter.report import CHECKS_WITHOUT_REWRITES, Output, Piece, rich_text

TRAIN = b"""import torch
from torch.utils.data import DataLoader


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
"""

NOT_TORCH = b"import os\n\nprint(os.getcwd())\n"

#: A script that already distributes itself: left as it is and reported (ACC9xx warnings only).
ALREADY_DISTRIBUTED = b"""import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(model, loader, optimizer):
    dist.init_process_group("gloo")
    model = DDP(model)
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
"""


#: A training function whose batch size comes from the command line: what --oom-retry wraps.
WITH_BATCH_SIZE = b"""import argparse

import torch
from torch.utils.data import DataLoader


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(torch.randn(256, 4), batch_size=args.batch_size)
    for data in loader:
        optimizer.zero_grad()
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()
"""


def run(*args: str | Path, stdin: bytes | None = None) -> Result:
    """Invoke the command in-process with separate stdout and stderr."""
    return CliRunner().invoke(main, [str(arg) for arg in args], input=stdin, catch_exceptions=False)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below ``folder`` with its bytes and modification time (ns)."""
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_bytes(TRAIN)
    return path


# -- the basic modes ------------------------------------------------------------------------------


def test_one_file_goes_to_stdout_and_findings_to_stderr(script: Path) -> None:
    result = run(script)
    assert result.exit_code == 0, result.stderr
    assert "accelerator.backward(loss)" in result.stdout
    assert "loss.backward()" not in result.stdout
    # By default what needs a person (and how to fix it), one line per converted file and the
    # summary (as ruff shows only problems); every rewrite with -v.
    assert result.stderr.splitlines()[1:] == [
        "  help: Build the training data as a `torch.utils.data.DataLoader` over a `Dataset` and convert again; "
        "the converter then prepares it (`train_loader = accelerator.prepare(train_loader)`) and each process "
        "reads its own shard.",
        f"{script}: converted (3 rewrites)",
        "1 converted, 0 unchanged, 0 failed (1 warning needs a person)",
    ]
    assert result.stderr.splitlines()[0].startswith(f"{script}:10:9: ACC901 ")
    verbose = run("-v", script)
    assert f"{script}:10:9: ACC105" in verbose.stderr
    assert "1 converted, 0 unchanged, 0 failed" in verbose.stderr
    assert script.read_bytes() == TRAIN


def test_output_file_is_written_atomically_with_the_input_permission_bits(script: Path, tmp_path: Path) -> None:
    script.chmod(0o750)
    out = tmp_path / "out" / "train_ddp.py"
    result = run(script, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert b"accelerator.backward(loss)" in out.read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert sorted(p.name for p in out.parent.iterdir()) == ["train_ddp.py"], "a temporary file was left behind"
    assert script.read_bytes() == TRAIN


def test_up_to_date_output_is_not_rewritten(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "train_ddp.py"
    assert run(script, "-o", out).exit_code == 0
    os.utime(out, ns=(1, 1))
    assert run(script, "-o", out).exit_code == 0
    assert out.stat().st_mtime_ns == 1


def test_in_place_rewrites_changed_files_and_leaves_others_untouched(tmp_path: Path) -> None:
    changed, plain = tmp_path / "train.py", tmp_path / "util.py"
    changed.write_bytes(TRAIN)
    plain.write_bytes(NOT_TORCH)
    os.utime(plain, ns=(1, 1))
    result = run("--in-place", changed, plain)
    assert result.exit_code == 0, result.stderr
    assert b"accelerator.backward(loss)" in changed.read_bytes()
    assert plain.read_bytes() == NOT_TORCH and plain.stat().st_mtime_ns == 1
    assert "1 converted, 1 unchanged, 0 failed" in result.stderr


def test_output_equal_to_input_needs_in_place(script: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    result = run(script, "-o", script)
    assert result.exit_code == 2
    assert str(script) in result.stderr and "--in-place" in result.stderr
    assert snapshot(tmp_path) == before
    assert run(script, "-o", script, "--in-place").exit_code == 0
    assert b"accelerator.backward(loss)" in script.read_bytes()


def test_diff_prints_a_unified_diff_and_writes_nothing(script: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    result = run("--diff", script)
    assert result.exit_code == 0
    assert "-        loss.backward()" in result.stdout
    assert "+        accelerator.backward(loss)" in result.stdout
    assert result.stdout.startswith(f"--- a/{str(script).lstrip('/')}\n+++ b/{str(script).lstrip('/')}\n")
    assert "\x1b[" not in result.stdout, "colour on a non-terminal without --color"
    assert snapshot(tmp_path) == before
    coloured = run("--diff", "--color", script)
    assert "\x1b[32m+        accelerator.backward(loss)" in coloured.stdout
    assert "\x1b[31m-        loss.backward()" in coloured.stdout
    assert run("--diff", "--check", script).exit_code == 1


def test_diff_keeps_tabs_and_non_ascii_text(tmp_path: Path) -> None:
    path = tmp_path / "tabs.py"
    path.write_bytes(
        TRAIN.replace(b"        loss.backward()", b"        tag = '\tcaf\xc3\xa9'\n        loss.backward()")
    )
    result = run("--diff", path)
    assert "         tag = '\tcafé'" in result.stdout


def test_color_flags_force_colour_off_and_on(script: Path) -> None:
    result = run("--no-color", "--check", script)
    assert "\x1b[" not in result.stderr
    assert "\x1b[" in run("--color", "--check", script).stderr


# -- --check ----------------------------------------------------------------------------------------


def test_check_lists_pending_rewrites_and_exits_1(script: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    result = run("--check", "-v", script)
    assert result.exit_code == 1
    assert f"{script}:10:9: ACC105 " in result.stderr
    assert "1 would convert, 0 unchanged, 0 failed" in result.stderr
    assert result.stdout == ""
    assert snapshot(tmp_path) == before


def test_check_passes_on_a_converted_script(script: Path, tmp_path: Path) -> None:
    converted = tmp_path / "converted.py"
    assert run(script, "-o", converted).exit_code == 0
    result = run("--check", converted)
    assert result.exit_code == 0, result.stderr
    assert "ACC105" not in result.stderr
    assert "0 would convert, 1 unchanged, 0 failed" in result.stderr


def reports(stderr: str, path: Path, code: str) -> bool:
    """Whether stderr holds a ``path:line:col: CODE ...`` finding."""
    return any(line.startswith(f"{path}:") and f": {code} " in line for line in stderr.splitlines())


def test_warnings_fail_only_with_strict(tmp_path: Path) -> None:
    path = tmp_path / "ddp.py"
    path.write_bytes(ALREADY_DISTRIBUTED)
    relaxed = run("--check", path)
    assert relaxed.exit_code == 0, relaxed.stderr
    assert reports(relaxed.stderr, path, "ACC903")
    assert "warnings need a person)" in relaxed.stderr
    assert run("--check", "--strict", path).exit_code == 1
    assert run("--check", "--strict", "--ignore", "ACC9", path).exit_code == 0
    assert path.read_bytes() == ALREADY_DISTRIBUTED


def test_check_with_output_fails_when_output_is_missing_or_stale(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "train_ddp.py"
    missing = run("--check", script, "-o", out)
    assert missing.exit_code == 1
    assert f"{out}:1:1: stale-output missing" in missing.stderr
    assert not out.exists(), "--check must not write"

    assert run(script, "-o", out).exit_code == 0
    fresh = run("--check", script, "-o", out)
    assert fresh.exit_code == 0, fresh.stderr

    script.write_bytes(TRAIN.replace(b"optimizer.step()", b"optimizer.step()\n        print(loss)"))
    stale = run("--check", script, "-o", out)
    assert stale.exit_code == 1
    assert f"{out}:1:1: stale-output stale: differs from converting {script}" in stale.stderr


def test_oom_retry_and_target_flags_reach_the_codemods(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(WITH_BATCH_SIZE)
    plain = run(path)
    assert "find_executable_batch_size" not in plain.stdout and "from accel_convert.runtime import" in plain.stdout
    retried = run("--oom-retry", "--target", "accelerate", "-v", path)
    assert retried.exit_code == 0, retried.stderr
    assert "@find_executable_batch_size(starting_batch_size=args.batch_size)" in retried.stdout
    assert "from accelerate import" in retried.stdout and "from accel_convert.runtime import" not in retried.stdout
    assert reports(retried.stderr, path, "ACC117")


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and "0.1.0" in result.stdout


def test_internal_error_exits_123_and_writes_nothing(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A codemod whose result changes again on a second run must never reach the disk."""
    import libcst as cst

    from accel_convert import codemods
    from accel_convert.codemods.engine.model import ConversionOutcome

    def unstable(
        module: cst.Module, options: object, source: object = None, *, tree_only: bool = False
    ) -> ConversionOutcome:
        return ConversionOutcome(module.with_changes(body=[*module.body, cst.parse_statement("x = 1")]))

    monkeypatch.setattr(codemods, "convert_module", unstable)
    out = tmp_path / "out.py"
    result = run(script, "-o", out)
    assert result.exit_code == 123
    assert result.stderr.startswith(f"{script}:") and "internal error" in result.stderr
    assert not out.exists()


def test_unexpected_exception_in_one_file_is_reported_and_the_rest_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel_convert.converter import cli as cli_module

    real_convert = cli_module.convert_source

    def explode_on_boom(source: bytes, options: object, *, path: str):
        if path.endswith("boom.py"):
            raise ValueError("unexpected")
        return real_convert(source, options, path=path)

    monkeypatch.setattr(cli_module, "convert_source", explode_on_boom)
    (tmp_path / "boom.py").write_bytes(TRAIN)
    (tmp_path / "train.py").write_bytes(TRAIN)
    # --jobs 1: the patched conversion runs only in this process, not in workers.
    result = run("--in-place", "--jobs", "1", tmp_path / "boom.py", tmp_path / "train.py")
    assert result.exit_code == 123
    assert f"{tmp_path / 'boom.py'}:1:1: internal error: ValueError: unexpected" in result.stderr
    assert (tmp_path / "boom.py").read_bytes() == TRAIN
    assert b"accelerator.backward(loss)" in (tmp_path / "train.py").read_bytes()
    assert "1 converted, 0 unchanged, 1 failed" in result.stderr


def test_check_against_an_output_folder_names_only_the_stale_file(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "a.py").write_bytes(TRAIN)
    (src / "b.py").write_bytes(TRAIN)
    assert run(src, "-o", out).exit_code == 0
    assert run("--check", src, "-o", out).exit_code == 0
    (src / "b.py").write_bytes(TRAIN + b"print('done')\n")
    stale = run("--check", src, "-o", out)
    assert stale.exit_code == 1
    assert f"{out / 'b.py'}:1:1: stale-output" in stale.stderr and str(out / "a.py") not in stale.stderr
    assert "1 would convert, 1 unchanged, 0 failed" in stale.stderr


# -- stdin --------------------------------------------------------------------------------------------


def test_stdin_to_stdout_with_a_name_for_messages(tmp_path: Path) -> None:
    result = run("-", "--stdin-filename", tmp_path / "job.py", "-v", stdin=TRAIN)
    assert result.exit_code == 0, result.stderr
    assert "accelerator.backward(loss)" in result.stdout
    assert f"{tmp_path / 'job.py'}:10:9: ACC105" in result.stderr
    unnamed = run("-", "--check", "-v", stdin=TRAIN)
    assert unnamed.exit_code == 1
    assert "<stdin>:10:9: ACC105" in unnamed.stderr


def test_stdin_cannot_be_rewritten_in_place_or_mixed(script: Path) -> None:
    assert run("-", "--in-place", stdin=TRAIN).exit_code == 2
    assert run("-", script, "--check", stdin=TRAIN).exit_code == 2


# -- bad input -----------------------------------------------------------------------------------------


def test_syntax_error_gives_position_and_123_and_creates_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"import torch\n\ndef f(:\n    pass\n")
    out = tmp_path / "out.py"
    result = run(bad, "-o", out)
    assert result.exit_code == 123
    assert f"{bad}:3:7: syntax error:" in result.stderr
    assert not out.exists()


def test_undecodable_bytes_give_123_with_position(tmp_path: Path) -> None:
    bad = tmp_path / "latin.py"
    bad.write_bytes(b"import torch\nname = '\xe9t\xe9'\n")
    before = snapshot(tmp_path)
    result = run("--in-place", bad)
    assert result.exit_code == 123
    assert f"{bad}:2:9: cannot decode byte 0xe9" in result.stderr
    assert snapshot(tmp_path) == before


def test_missing_file_is_a_usage_error_and_nothing_runs(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run(script, tmp_path / "absent.py", "-o", out)
    assert result.exit_code == 2
    assert f"{tmp_path / 'absent.py'}: no such file or directory" in result.stderr
    assert not out.exists()


def test_no_input_and_bad_flags_are_usage_errors() -> None:
    assert run().exit_code == 2
    assert run("--target", "tpu", "x.py").exit_code == 2
    assert run("--select", "ACC7", "x.py").exit_code == 2


# -- several files and folders ---------------------------------------------------------------------


def test_one_failure_does_not_stop_the_rest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a_train.py").write_bytes(TRAIN)
    (src / "b_bad.py").write_bytes(b"import torch\nx = (\n")
    (src / "c_util.py").write_bytes(NOT_TORCH)
    out = tmp_path / "out"
    result = run(src, "-o", out)
    assert result.exit_code == 123
    assert "1 converted, 1 unchanged, 1 failed" in result.stderr.splitlines()[-1]
    assert sorted(p.name for p in out.iterdir()) == ["a_train.py", "c_util.py"]


def test_folder_discovery_skips_hidden_venv_and_cache_and_mirrors_layout(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for relative in ["pkg/train.py", ".hidden/x.py", "venv_any_name/lib/y.py", "__pycache__/z.py", "pkg/notes.txt"]:
        (src / relative).parent.mkdir(parents=True, exist_ok=True)
        (src / relative).write_bytes(TRAIN)
    (src / "venv_any_name" / "pyvenv.cfg").write_text("home = /usr\n")
    out = tmp_path / "out"
    result = run(src, "-o", out, "-v")
    assert result.exit_code == 0, result.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == ["pkg/train.py"]
    assert f"{src / 'pkg' / 'train.py'}: converted" in result.stderr


def test_several_inputs_need_somewhere_to_go(script: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.py"
    other.write_bytes(TRAIN)
    assert run(script, other).exit_code == 2
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert run(script, other, "-o", a_file).exit_code == 2
    assert run(script, other, "--check").exit_code == 1


def test_conflicting_outputs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "train.py", tmp_path / "b" / "train.py"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(TRAIN)
    before = snapshot(tmp_path)
    clash = run(first, second, "-o", tmp_path / "out")
    assert clash.exit_code == 2 and "would both be written to" in clash.stderr
    assert run(first, "--in-place", "-o", tmp_path / "elsewhere.py").exit_code == 2
    assert run(first, "--in-place", "--check").exit_code == 2
    assert run(first, "--in-place", "--diff").exit_code == 2
    assert snapshot(tmp_path) == before


# -- output formats ----------------------------------------------------------------------------------


def test_json_has_one_object_per_finding_on_free_stdout(script: Path) -> None:
    result = run("--check", "--output-format", "json", script)
    assert result.exit_code == 1
    findings = json.loads(result.stdout)
    assert all(
        set(finding) == {"code", "message", "filename", "line", "column", "end_line", "end_column", "fixed", "help"}
        for finding in findings
    )
    backward = [finding for finding in findings if finding["code"] == "ACC105"]
    assert [(f["filename"], f["line"], f["column"], f["fixed"]) for f in backward] == [(str(script), 10, 9, True)]
    assert "accelerator.backward" in backward[0]["message"]


def test_github_annotations(script: Path, tmp_path: Path) -> None:
    ddp = tmp_path / "ddp.py"
    ddp.write_bytes(ALREADY_DISTRIBUTED)
    result = run("--check", "--output-format", "github", script, ddp)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith(f"::error file={script},line=10,col=9,") and "::ACC105 " in line for line in lines)
    assert any(line.startswith(f"::warning file={ddp},line=") and "::ACC903 " in line for line in lines)
    assert not any(line.startswith("::") and "ddp.py" in line and "::error" in line for line in lines)


def test_quiet_and_verbose(script: Path, tmp_path: Path) -> None:
    # Quiet: no findings, no summary, but the file failing --check is named (as black does).
    ready = tmp_path / "ready.py"
    ready.write_bytes(NOT_TORCH)
    quiet = run("-q", "--check", script, ready)
    assert quiet.exit_code == 1 and quiet.stderr == f"{script}: would convert\n"
    assert run("-q", "--check", ready).stderr == ""
    assert run("-q", "-o", tmp_path / "out.py", script).stderr == ""
    verbose = run("-v", "--check", script, ready)
    assert f"{script}: would convert" in verbose.stderr and f"{ready}: unchanged" in verbose.stderr


# -- codes: --list-codes, --help, --select/--ignore ---------------------------------------------------


def test_list_codes_shows_every_code_with_examples_under_verbose() -> None:
    from accel_convert.codemods.engine.registry import code_docs

    result = run("--list-codes", "-v")
    assert result.exit_code == 0
    for doc in code_docs():
        assert f"{doc.code}  {doc.name}" in result.stdout
        for example in (doc.before, doc.after):
            assert all(f"        {line}" in result.stdout for line in example.splitlines() if line)
    assert "accelerator.backward(loss" in result.stdout


def test_help_documents_exit_codes_and_points_to_the_code_list() -> None:
    from accel_convert.codemods.engine.registry import code_docs

    result = run("--help")
    assert result.exit_code == 0
    assert "Exit codes" in result.stdout and "123" in result.stdout
    # Every code is in --list-codes, not in --help (it made --help 194 lines), and no
    # reStructuredText ``literal`` reaches the terminal.
    assert f"{len(code_docs())} codes: accel-convert --list-codes" in " ".join(result.stdout.split())
    assert not any(doc.code in result.stdout for doc in code_docs() if doc.code != "ACC113")  # the --explain example
    assert len(result.stdout.splitlines()) < 110 and "``" not in result.stdout
    listed = run("--list-codes")
    assert all(doc.code in listed.stdout for doc in code_docs()) and "``" not in listed.stdout


def test_select_runs_only_the_selected_rewrites(script: Path) -> None:
    selected = run("--select", "ACC101", "-v", script)
    assert "accelerator = Accelerator()" in selected.stdout and "loss.backward()" in selected.stdout
    assert "ACC101" in selected.stderr and "ACC105" not in selected.stderr


def test_selecting_only_checks_says_they_judged_the_script_as_written(script: Path) -> None:
    """``--select ACC9`` runs no rewrite: the checks report what a conversion would settle, and
    one line under the summary says so; a selection with a rewrite in it says nothing of the kind."""
    checks_only = run("--select", "ACC9", "--check", script)
    assert checks_only.stderr.rstrip().splitlines()[-1] == CHECKS_WITHOUT_REWRITES
    for selection in (("--select", "ACC1,ACC9"), ("--select", "ACC105"), ()):
        assert CHECKS_WITHOUT_REWRITES not in run(*selection, "--check", script).stderr


def test_ignore_switches_a_rewrite_off(script: Path) -> None:
    ignored = run("--ignore", "ACC105", "-v", script)
    assert "accelerator = Accelerator()" in ignored.stdout
    assert "loss.backward()" in ignored.stdout and "ACC105" not in ignored.stderr
    both = run("--select", "ACC1", "--ignore", "ACC101", script)
    assert "accelerator.backward(loss)" in both.stdout and "Accelerator()" not in both.stdout


# -- config ---------------------------------------------------------------------------------------------


def test_config_from_pyproject_found_by_walking_up_and_flags_override(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\ntarget = "accelerate"\noutput-format = "json"\n')
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    path = deep / "train.py"
    path.write_bytes(TRAIN)
    from_config = run(path)
    assert "from accelerate import Accelerator" in from_config.stdout
    assert '"code": "ACC105"' in from_config.stderr, "json findings go to stderr when stdout carries the script"
    overridden = run("--target", "runtime", "--output-format", "text", "-v", path)
    assert "from accel_convert.runtime import Accelerator" in overridden.stdout
    assert f"{path}:10:9: ACC105" in overridden.stderr


def test_config_for_stdin_comes_from_stdin_filename(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\ntarget = "accelerate"\n')
    named = run("-", "--stdin-filename", tmp_path / "x.py", stdin=TRAIN)
    assert "from accelerate import Accelerator" in named.stdout


def test_bad_config_is_a_usage_error_naming_the_file(script: Path, tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.accel-convert]\ntraget = "accelerate"\n')
    result = run(script)
    assert result.exit_code == 2
    assert f"{pyproject}: [tool.accel-convert] unknown key 'traget'" in result.stderr
    pyproject.write_text('[tool.accel-convert]\ntarget = "tpu"\n')
    assert run(script).exit_code == 2
    pyproject.write_text("[tool.accel-convert\n")
    assert "invalid TOML" in run(script).stderr


# -- encodings and newlines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9t\xe9'\r\nx = torch.zeros(1)\n",
        b"import torch\r\n\r\nx = torch.zeros(1)  # caf\xc3\xa9\r\n",
        b"\xef\xbb\xbfimport torch\nx = torch.zeros(1)\n",
        b"# coding: latin-1\r\nname = '\xe9'\r\n",
    ],
    ids=["latin-1", "crlf", "bom", "latin-1-crlf-no-torch"],
)
def test_files_with_nothing_to_convert_survive_byte_for_byte(tmp_path: Path, source: bytes) -> None:
    path = tmp_path / "script.py"
    path.write_bytes(source)
    out = tmp_path / "out.py"
    assert run(path, "-o", out).exit_code == 0
    assert out.read_bytes() == source
    assert run("--check", path).exit_code == 0


def test_crlf_and_latin_1_are_kept_where_a_rewrite_happens(tmp_path: Path) -> None:
    path = tmp_path / "script.py"
    source = b"# -*- coding: latin-1 -*-\r\n" + TRAIN.replace(b"\n", b"\r\n") + b"name = '\xe9'\r\n"
    path.write_bytes(source)
    result = run(path, "--in-place")
    assert result.exit_code == 0, result.stderr
    converted = path.read_bytes()
    assert b"accelerator.backward(loss)" in converted
    assert b"name = '\xe9'\r\n" in converted
    assert converted.count(b"\n") == converted.count(b"\r\n")


# -- output without rich, and the collector during a run ------------------------------------------

#: Lines as the reporter builds them: pieces of text with a rich style or None.
PLAIN_LINES = [
    (("train.py:4:5:", "bold"), (" ", None), ("ACC101", "red"), (" create the accelerator → Accelerator()", None)),
    (("名前 ünï.py: unchanged", "dim"),),
    (("x" * 5000, None),),
    (("  leading and trailing spaces  ", "bold"),),
    (("", None),),
    ((json.dumps([{"code": "ACC105", "line": 7}, {"message": "a\tb\u0007"}], indent=2), None),),
    (("first line\n\nthird line", "red"),),
    (("combining e\u0301, emoji 🎉, wide ＡＢ", "yellow"),),
]

#: Text rich changes when it prints it (tabs expanded, some control characters dropped).
RICH_CHANGES = [
    (("tab\tname.py:1:1:", "bold"), (" ACC101", "red")),
    (("carriage\rreturn and bell\a", None),),
    (("escape \x1b[31m kept", None),),
]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def rich_prints(pieces: tuple[Piece, ...], stream: io.StringIO) -> str:
    """What rich prints, left to its own decisions (terminal, NO_COLOR, FORCE_COLOR)."""
    from rich.console import Console

    Console(file=stream, highlight=False, soft_wrap=True, markup=False, emoji=False).print(rich_text(pieces))
    return stream.getvalue()


def test_plain_output_is_byte_for_byte_what_rich_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    for pieces in PLAIN_LINES:
        expected = rich_prints(pieces, io.StringIO())
        with monkeypatch.context() as no_rich:
            no_rich.setattr(report, "make_console", None)  # calling it would fail the test
            plain = io.StringIO()
            Output(plain, None).print(*pieces)
            forced_off = Terminal()
            Output(forced_off, False).print(*pieces)
        assert plain.getvalue() == expected
        assert forced_off.getvalue() == rich_prints(pieces, io.StringIO())
    for pieces in RICH_CHANGES:
        stream = io.StringIO()
        Output(stream, None).print(*pieces)
        assert stream.getvalue() == rich_prints(pieces, io.StringIO())
    assert "\t" not in rich_prints(RICH_CHANGES[0], io.StringIO()), "rich expands tabs: the fallback matters"


def test_output_styles_wherever_rich_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    line = (("train.py:4:5:", "bold"), (" ", None), ("ACC101", "red"))
    terminal = Terminal()
    Output(terminal, None).print(*line)
    assert "\x1b[1m" in terminal.getvalue() and "\x1b[31m" in terminal.getvalue()
    forced = io.StringIO()
    Output(forced, True).print(*line)
    assert "\x1b[31m" in forced.getvalue()
    monkeypatch.setenv("FORCE_COLOR", "1")
    from_env = io.StringIO()
    Output(from_env, None).print(*line)
    assert from_env.getvalue() == rich_prints(line, io.StringIO()) and "\x1b[" in from_env.getvalue()


def test_objects_from_start_up_are_frozen_only_while_files_convert(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel_convert.converter import cli as cli_module

    frozen_during: list[int] = []
    real_convert = cli_module.convert_source

    def recording(*args: Any, **kwargs: Any) -> Any:
        frozen_during.append(gc.get_freeze_count())
        return real_convert(*args, **kwargs)

    monkeypatch.setattr(cli_module, "convert_source", recording)
    assert gc.get_freeze_count() == 0
    assert run("--check", script).exit_code == 1
    assert frozen_during and frozen_during[0] > 1000, frozen_during
    assert gc.get_freeze_count() == 0, "the caller's objects must be collectable again"


def test_write_failures_reach_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unencodable character gets rich's hint; a closed pipe is raised to the run, which stops
    quietly (the whole command is tested in a real pipe in test_cli_signals.py)."""
    ascii_stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    with pytest.raises(UnicodeEncodeError, match="PYTHONIOENCODING=utf-8"):
        Output(ascii_stream, False).print(("ünï.py:1:1:", "bold"))

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(report, "make_console", None)  # calling it would fail the test
    with pytest.raises(BrokenPipeError):
        Output(ClosedPipe(), False).print(("train.py:4:5:", "bold"), (" ACC101", "red"))
