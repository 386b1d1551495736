"""converter.pipeline: parse once, convert, verify (parses, stable), bytes out; and the file helpers
it relies on (atomic writes, discovery, config lookup)."""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst
import pytest

import accel_convert.converter.pipeline as pipeline
from accel_convert import codemods
from accel_convert.codemods.engine.model import Change, ConversionOutcome, Options
from accel_convert.converter.config import ConfigError, load_config
from accel_convert.converter.files import WrittenFiles, atomic_write, discover, write_if_different
from accel_convert.converter.pipeline import ConversionError, convert_source, first_differing_line

OPTIONS = Options()


def appending_codemod(suffix: str):
    """A codemod that appends a statement every time it runs: never stable."""

    def convert(
        module: cst.Module, options: Options, source: bytes | None = None, *, tree_only: bool = False
    ) -> ConversionOutcome:
        extra = cst.parse_statement(suffix)
        return ConversionOutcome(
            module.with_changes(body=[*module.body, extra]), [Change("ACC105", "appended", 1, 0, 1, 1, True)]
        )

    return convert


def identity_codemod(module: cst.Module, options: Options, source: bytes | None = None) -> ConversionOutcome:
    return ConversionOutcome(module, [])


def test_valid_file_without_torch_is_returned_without_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parse(source: bytes) -> cst.Module:
        raise AssertionError("libcst parsed a valid file that never mentions torch")

    monkeypatch.setattr(pipeline.cst, "parse_module", no_parse)
    source = b"def f(a):\n    return a\r\n"
    conversion = convert_source(source, OPTIONS, path="x.py")
    assert conversion.output is source and not conversion.changed


@pytest.mark.parametrize(
    ("source", "position", "words"),
    [
        (b"x = 1\ndef f(:\n", "x.py:2:7:", "syntax error"),
        (b"x = 1\x00\n", "x.py:1:6:", "null byte"),
        (b"def f(a, a):\n    pass\n", "x.py:1:10:", "duplicate argument"),
        (b"\xff\xfe\x00\x81garbage\n", "x.py:1:", "syntax error"),
    ],
)
def test_invalid_file_without_torch_is_refused(source: bytes, position: str, words: str) -> None:
    with pytest.raises(ConversionError) as caught:
        convert_source(source, OPTIONS, path="x.py")
    assert str(caught.value).startswith(position) and words in str(caught.value), str(caught.value)


def test_unstable_rewrite_is_an_internal_error_naming_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codemods, "convert_module", appending_codemod("x = 1"), raising=False)
    with pytest.raises(ConversionError) as caught:
        convert_source(b"import torch\n", OPTIONS, path="train.py")
    error = caught.value
    assert error.path == "train.py" and "converting the result again changes it" in error.message
    assert str(error).startswith("train.py:3:1: internal error")


def test_output_that_does_not_parse_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        bytes = b"import torch\ndef (:\n"

    monkeypatch.setattr(
        codemods,
        "convert_module",
        lambda module, options, source=None, tree_only=False: ConversionOutcome(Broken(), []),
        raising=False,
    )
    with pytest.raises(ConversionError, match=r"does not parse \(line 2: invalid syntax\); nothing written"):
        convert_source(b"import torch\n", OPTIONS, path="train.py")


def test_codemod_crash_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(
        module: cst.Module, options: Options, source: bytes | None = None, *, tree_only: bool = False
    ) -> ConversionOutcome:
        raise KeyError("model")

    monkeypatch.setattr(codemods, "convert_module", crash, raising=False)
    with pytest.raises(ConversionError, match=r"internal error: conversion failed \(KeyError"):
        convert_source(b"import torch\n", OPTIONS, path="train.py")


def test_unchanged_output_skips_the_second_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counting(
        module: cst.Module, options: Options, source: bytes | None = None, *, tree_only: bool = False
    ) -> ConversionOutcome:
        calls.append(module)
        return identity_codemod(module, options)

    monkeypatch.setattr(codemods, "convert_module", counting, raising=False)
    source = b"# -*- coding: latin-1 -*-\r\nimport torch\r\nname = '\xe9'\r\n"
    conversion = convert_source(source, OPTIONS, path="x.py")
    assert conversion.output == source and conversion.encoding == "iso-8859-1"
    assert len(calls) == 1


def test_warnings_of_switched_off_codes_are_dropped_but_rewrites_never(monkeypatch: pytest.MonkeyPatch) -> None:
    def reports(
        module: cst.Module, options: Options, source: bytes | None = None, *, tree_only: bool = False
    ) -> ConversionOutcome:
        return ConversionOutcome(
            module,
            [
                Change("ACC901", "w", 1, 0, 1, 1, False),
                Change("ACC912", "w", 2, 0, 2, 1, False),
                Change("ACC915", "w", 3, 0, 3, 1, True),
            ],
        )

    monkeypatch.setattr(codemods, "convert_module", reports, raising=False)
    conversion = convert_source(b"import torch\n", Options(ignore=("ACC91",)), path="x.py")
    assert [change.code for change in conversion.changes] == ["ACC901", "ACC915"]
    assert [change.code for change in conversion.warnings] == ["ACC901"]
    assert [change.code for change in conversion.rewrites] == ["ACC915"]


@pytest.mark.parametrize(
    "source, position, words",
    [
        (b"import torch\nx = (1,\n", (2, 5), "never closed"),
        (b"import torch\nif x\n    pass\n", (2, 5), "expected ':'"),
        (b"import torch\nx = 1\x00\n", (2, 6), "null byte"),
        (b"# coding: no-such-codec\nimport torch\n", (1, 1), "unknown encoding"),
        (b"import torch\n\n\nx = '\xff'\n", (4, 6), "cannot decode byte 0xff as utf-8"),
    ],
)
def test_bad_input_becomes_one_positioned_error(source: bytes, position: tuple[int, int], words: str) -> None:
    with pytest.raises(ConversionError) as caught:
        convert_source(source, OPTIONS, path="bad.py")
    error = caught.value
    assert (error.line, error.column) == position, str(error)
    assert words in error.message
    assert "\n" not in str(error)


def test_first_differing_line() -> None:
    assert first_differing_line(b"a\nb\nc\n", b"a\nB\nc\n") == 2
    assert first_differing_line(b"a\n", b"a\nb\n") == 2


# -- files ---------------------------------------------------------------------------------------------


def test_atomic_write_leaves_nothing_behind_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.py"
    target.write_bytes(b"old\n")

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        atomic_write(target, b"new\n")
    assert target.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.py"]


def test_only_the_users_files_count_as_written(tmp_path: Path) -> None:
    """The Ctrl-C line counts the files written for the user; the tool's own cache entries,
    written by the same writer with ``output=False``, are not among them."""
    before = WrittenFiles.count
    atomic_write(tmp_path / "cache" / "entry.json", b"{}", output=False)
    assert WrittenFiles.count == before
    assert (tmp_path / "cache" / "entry.json").read_bytes() == b"{}"
    atomic_write(tmp_path / "out.py", b"x\n")
    assert WrittenFiles.count == before + 1


def test_new_files_get_umask_permissions_and_replaced_files_keep_theirs(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.py"
    atomic_write(fresh, b"x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    fresh.chmod(0o700)
    assert write_if_different(fresh, b"y\n")
    assert fresh.stat().st_mode & 0o777 == 0o700
    assert not write_if_different(fresh, b"y\n")


def test_discover_dedupes_and_keeps_roots(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / ".b.py").write_text("")
    found = discover([tmp_path, tmp_path / "a.py"])
    assert found == [(tmp_path / "a.py", tmp_path, None)]


# -- config --------------------------------------------------------------------------------------------


def test_nearest_pyproject_with_our_table_wins(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\ntarget = "accelerate"\noom_retry = true\n')
    inner = tmp_path / "pkg"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")
    config = load_config(inner / "train.py")
    assert config.path == tmp_path / "pyproject.toml"
    assert config.values == {"target": "accelerate", "oom_retry": True}


def test_config_type_errors_name_the_key(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\nselect = "ACC1"\n')
    with pytest.raises(ConfigError, match="select must be a list of strings"):
        load_config(tmp_path)


def test_syntax_newer_than_the_interpreter_still_converts_and_verifies() -> None:
    """A PEP 695 alias libcst reads but CPython 3.11 does not: positions and the verification's
    parse check fall back to libcst instead of calling the output broken."""
    source = (
        b"import torch\n"
        b"type Pair = tuple[int, int]\n"
        b"model = torch.nn.Linear(2, 1)\n"
        b"optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        b"loss = model(torch.ones(2)).sum()\n"
        b"loss.backward()\n"
    )
    conversion = convert_source(source, OPTIONS, path="new.py")
    assert b"accelerator.backward(loss)" in conversion.output
    assert b"type Pair = tuple[int, int]" in conversion.output
    backward = [change for change in conversion.changes if change.code == "ACC105"]
    assert [(change.line, change.column) for change in backward] == [(6, 0)]


@pytest.mark.parametrize(
    ("code", "line", "message"),
    [
        (
            "import torch\n\n\ndef step(model, batch, batch):\n    return model(batch)\n",
            4,
            "duplicate argument 'batch'",
        ),
        ("import torch\n\nreturn torch.zeros(1)\n", 3, "'return' outside function"),
    ],
    ids=["duplicate argument", "return outside a function"],
)
def test_a_script_cpython_parses_but_cannot_compile_is_refused_in_one_line(code: str, line: int, message: str) -> None:
    # ``ast.parse`` accepts these; CPython refuses them when it compiles. A conversion of a
    # script that cannot run would not run either (and its rewrite may not even be stable).
    with pytest.raises(ConversionError) as raised:
        convert_source(code.encode(), Options(), path="bad.py")
    error = raised.value
    assert error.line == line
    assert error.message.startswith(f"syntax error: {message}")
    assert "\n" not in str(error)


def test_a_converted_script_cpython_cannot_compile_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # A rewrite that added a second parameter of the same name would print code that parses
    # and cannot run: refused as an internal error, nothing written.
    original = pipeline.run_codemods

    def duplicating(module, options, path, source=None, **kwargs):  # type: ignore[no-untyped-def]
        outcome = original(module, options, path, source, **kwargs)
        code = outcome.module.code.replace("def step(model, batch):", "def step(model, batch, batch):")
        return ConversionOutcome(cst.parse_module(code), outcome.changes)

    monkeypatch.setattr(pipeline, "run_codemods", duplicating)
    with pytest.raises(ConversionError) as raised:
        convert_source(b"import torch\n\n\ndef step(model, batch):\n    return model(batch)\n", Options(), path="ok.py")
    assert "CPython cannot compile the converted script (duplicate argument 'batch'" in raised.value.message
