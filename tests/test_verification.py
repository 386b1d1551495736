"""The verification's two ways agree: converting again the tree the output was printed from (the
default, without libcst's parse of the printed text) gives the verdict and the bytes that
parsing the printed output afresh and converting that gives (``ACCEL_CONVERT_VERIFY=printed``,
what a user's second run does), on every fixture, with the default options and with the out-of-memory retry (which rewrites the
most; the Accelerate and FSDP targets differ from the default in imports and the constructor).

Both ways also reach the same verdict when a rewrite is unstable.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import accel_convert.converter.pipeline as pipeline
from accel_convert import codemods
from accel_convert.codemods.engine.model import ConversionOutcome, Options
from accel_convert.converter.project import convert_program_files, folder_entries
from tests.launching import REPO_ROOT

CASES = sorted((REPO_ROOT / "fixtures" / "cases").glob("*.py"))
OPTIONS = {
    "runtime": Options(),
    "oom": Options(oom_retry=True),
}


def second_conversion(output: bytes, options: Options, converted: cst.Module, codec: pipeline.Codec) -> str:
    """What the verification concludes: 'stable' or its error."""
    try:
        pipeline.verify_stable(output, options, "<fixture>", b"", converted, codec)
    except pipeline.ConversionError as error:
        return error.message
    return "stable"


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_the_tree_and_the_printed_output_give_the_same_verdict(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = case.read_bytes()
    for name, options in OPTIONS.items():
        module, codec = pipeline.parse(source, str(case))
        converted = pipeline.run_codemods(module, options, str(case), source).module
        output = codec.generate(converted)
        if output == source:
            continue
        monkeypatch.delenv("ACCEL_CONVERT_VERIFY", raising=False)
        from_tree = second_conversion(output, options, converted, codec)
        monkeypatch.setenv("ACCEL_CONVERT_VERIFY", "printed")
        from_text = second_conversion(output, options, converted, codec)
        assert from_tree == from_text == "stable", name


def test_an_unstable_rewrite_is_caught_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite that appends a line on every run: the tree it made gets one more line too."""
    original = codemods.convert_module

    def appending(module: cst.Module, options: Options, source=None, seeds=None, **flags: bool) -> ConversionOutcome:
        outcome = original(module, options, source, seeds, **flags)
        line = cst.parse_statement("ran_again = True\n")
        return ConversionOutcome(outcome.module.with_changes(body=[*outcome.module.body, line]), outcome.changes)

    monkeypatch.setattr(codemods, "convert_module", appending)
    source = (REPO_ROOT / "fixtures" / "cases" / CASES[0].name).read_bytes()
    for mode in ("tree", "printed"):
        monkeypatch.setenv("ACCEL_CONVERT_VERIFY", mode)
        with pytest.raises(pipeline.ConversionError, match="unstable rewrite"):
            pipeline.convert_source(source, Options(), path="train.py")


PROJECTS = sorted(path for path in (REPO_ROOT / "fixtures" / "projects").iterdir() if path.is_dir())


def test_programs_verify_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program's files (an entry script and its local modules) are verified together: on the
    converted trees by default, on a fresh parse of the printed files with
    ``ACCEL_CONVERT_VERIFY=printed``; both pass and give the same files on every shipped project."""
    entries = folder_entries(sorted(path for project in PROJECTS for path in project.rglob("*.py")))
    assert len(entries) >= len(PROJECTS)
    for files in entries.values():
        sources = [file.path.read_bytes() for file in files]
        results = []
        for mode in ("tree", "printed"):
            monkeypatch.setenv("ACCEL_CONVERT_VERIFY", mode)
            results.append([(c.output, c.changes) for c in convert_program_files(files, sources, Options())])
        assert results[0] == results[1], files[0].path
        assert any(output != source for (output, _), source in zip(results[0], sources)), files[0].path
