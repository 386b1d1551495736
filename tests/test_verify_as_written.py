"""``accel-convert verify`` on a program the converter deliberately leaves as written (a model that
trains itself, a script that starts its own processes): on N processes every rank runs the script
as written, copies by design, so verify judges there only that every rank ends and exits 0, and
says why with the converter's reason (``left-as-written``), as the real-world corpus runner judges
it (exit codes and the one-process output)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from accel_convert.converter.verify import Settings, left_as_written
from accel_convert.converter.verify_verdicts import Verdict, as_written_verdicts
from tests.launching import base_env

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cases" / "forward_forward_layers.py"
#: Seconds a verify run may take in all (three runs on a machine loaded several times over).
VERIFY_TIMEOUT = 900
FINDING = {"code": "ACC925", "message": "Layer is a model that trains itself: nothing converted"}


def n_process_verdicts(crash: bool = False) -> list[Verdict]:
    return [
        Verdict("no-hang", "no hang", True, ["every rank finished in time"]),
        Verdict("no-crash", "no crash", not crash, ["rank 1: exit 1"] if crash else ["2 ranks exit 0"]),
        Verdict("in-sync", "in sync", True, ["3 steps"]),
        Verdict("prints-once", "prints once", False, ["printed by ranks 0, 1"]),
        Verdict("files-once", "files once", False, ["written by ranks 0, 1"]),
    ]


def test_a_program_left_as_written_is_judged_on_n_processes_by_its_ending_only() -> None:
    verdicts = as_written_verdicts(n_process_verdicts(), "ACC925 trains itself", 2)
    assert [item.key for item in verdicts] == ["no-hang", "no-crash", "left-as-written"]
    assert all(item.holds for item in verdicts)
    assert verdicts[-1].title == "left as written: ACC925 trains itself"
    assert "copies by design" in verdicts[-1].evidence[0]
    assert "not judged: in-sync, prints-once, files-once" in verdicts[-1].evidence[0]


def test_a_crash_of_the_program_left_as_written_still_fails() -> None:
    verdicts = as_written_verdicts(n_process_verdicts(crash=True), "ACC925 trains itself", 2)
    assert [item.key for item in verdicts if not item.holds] == ["no-crash"]


def program(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(text, encoding="utf-8")
    (folder / "helpers.py").write_text("X = 1\n", encoding="utf-8")
    return folder / "train.py"


def test_left_as_written_needs_every_file_unchanged_and_a_reason(tmp_path: Path) -> None:
    script = program(tmp_path / "src", "import helpers\n")
    same = program(tmp_path / "same", "import helpers\n").parent
    changed = program(tmp_path / "changed", "import helpers  # converted\n").parent
    settings = Settings(script=script)
    assert left_as_written(settings, same, [FINDING, FINDING]) == f"ACC925 {FINDING['message']}"
    assert left_as_written(settings, changed, [FINDING]) is None
    # Nothing reported: a program written for Accelerate already, judged in full.
    assert left_as_written(settings, same, []) is None
    # A conversion the user hands in is judged in full.
    assert left_as_written(Settings(script=script, converted=same / "train.py"), same, [FINDING]) is None


def test_verify_of_a_model_that_trains_itself_agrees_with_the_runner(tmp_path: Path) -> None:
    """Left as written (ACC925), both ranks train and print every line: before, prints-once failed
    and verify exited 1 where the corpus runner (exit codes, one-process output) passes."""
    shutil.copy(FIXTURE, tmp_path / "train.py")
    command = [sys.executable, "-m", "accel_convert.converter", "verify", "train.py", "--samples", "64"]
    command += ["--output-format", "json", "--", "--epochs", "2"]
    env = {**base_env(), "TMPDIR": str(tmp_path)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=VERIFY_TIMEOUT)
    report = json.loads(done.stdout)
    assert done.returncode == 0, (done.stderr, report)
    keys = [item["key"] for item in report["n_processes"]]
    assert keys == ["no-hang", "no-crash", "left-as-written"], report
    reason = report["n_processes"][-1]["title"]
    assert reason.startswith("left as written: ACC925") and "trains itself" in reason
    assert all(item["holds"] for item in report["one_process"]), report
