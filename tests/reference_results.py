"""A reference library's run (Hugging Face Accelerate) is judged by the result it wrote.

Accelerate on CPU aborts at shutdown now and then (about 1 launch in 8: Gloo's teardown,
"terminate called without an active exception"), after its work is done and its result written.
That crash is not the behaviour under test, so a reference script writes each result file with
:func:`write_json_atomically` (a temporary file renamed into place: the file exists only once it
is complete), and the test checks the launch with :func:`check_reference`: a nonzero exit with
every result file written passes, with a note in the test's output (a warning in pytest's summary
and a line on stderr); a missing result fails with the run's whole output, as before. Our own
runtime's launches are never excused this way: they keep ``Run.check()``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from tests.launching import Run


class ReferenceCrashedAfterItsResult(UserWarning):
    """The reference exited nonzero after writing every result file; judged by those files."""


def write_json_atomically(path: Path | str, data: Any) -> None:
    """``path`` holds the whole JSON document or does not exist (never a partial file)."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(data), encoding="utf-8")
    os.replace(partial, target)


def check_reference(run: Run, results: list[Path], reference: str = "Accelerate") -> Run:
    """``run`` if it exited 0, or exited nonzero after writing every file of ``results`` (noted
    in the test's output); otherwise an AssertionError with the run's output."""
    if run.returncode == 0:
        return run
    missing = [path for path in results if not path.exists()]
    if missing:
        raise AssertionError(
            f"the {reference} reference failed (exit code {run.returncode}) before writing "
            f"{', '.join(path.name for path in missing)}\n--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}"
        )
    note = (
        f"NOTE: the {reference} reference exited with code {run.returncode} after writing its complete "
        f"result ({', '.join(path.name for path in results)}): a crash at shutdown, not a failure of "
        f"this test; judged by the written result. Its stderr ends:\n{run.stderr[-1500:]}"
    )
    print(note, file=sys.stderr)
    warnings.warn(ReferenceCrashedAfterItsResult(note), stacklevel=2)
    return run
