"""A reference run that crashes at shutdown after writing its result passes, with a note; one that
crashes before (or without) writing it fails with its output (tests/reference_results.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launching import python
from tests.reference_results import ReferenceCrashedAfterItsResult, check_reference

WRITES_THEN_ABORTS = """
import os, sys
from tests.reference_results import write_json_atomically
if sys.argv[2] == "before":
    os.abort()
write_json_atomically(sys.argv[1], {"done": True})
print("result written", flush=True)
os.abort()  # as Accelerate's Gloo teardown does now and then
"""


def _run(tmp_path: Path, when: str):
    script = tmp_path / "reference.py"
    script.write_text(WRITES_THEN_ABORTS, encoding="utf-8")
    result = tmp_path / "result.json"
    return python(script, str(result), when, timeout=120), result


def test_a_crash_at_shutdown_after_a_complete_result_passes_with_a_note(tmp_path: Path, capsys) -> None:
    run, result = _run(tmp_path, "after")
    assert run.returncode != 0
    with pytest.warns(ReferenceCrashedAfterItsResult, match="after writing its complete result"):
        check_reference(run, [result])
    assert "judged by the written result" in capsys.readouterr().err
    assert json.loads(result.read_text(encoding="utf-8")) == {"done": True}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["reference.py", "result.json"]  # no partial


def test_a_crash_before_the_result_is_written_fails_with_the_output(tmp_path: Path) -> None:
    run, result = _run(tmp_path, "before")
    with pytest.raises(AssertionError, match=r"failed \(exit code -6\) before writing result.json"):
        check_reference(run, [result])
