"""``accel-convert verify``'s budget against a step cadence: each step of the N-process run takes a
batch on every process, so a rank takes 1/N of the original's steps on the same budget, and what the
original does every k steps (validate, save the best model) may never run there. A failure that
follows is the budget's, not the conversion's: verify says so, and with its default budget verifies
again with one under which every rank reaches the original's first such step."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accel_convert.converter import verify as verify_module
from accel_convert.converter.verify import Report, Settings, verify
from accel_convert.converter.verify_verdicts import UnreachedCadence, Verdict
from tests.launching import base_env

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cases" / "eval_every_n_steps_best.py"
#: Seconds the two verifications may take in all (six runs on a machine loaded several times over).
VERIFY_TIMEOUT = 1500


def fake_report(settings: Settings, crash: bool, cadence: UnreachedCadence | None) -> Report:
    crash_verdict = Verdict("no-crash", "no crash", not crash, ["rank 0: UnboundLocalError"] if crash else ["ok"])
    return Report(settings, [], [crash_verdict], cadence=cadence)


def scripted(monkeypatch: pytest.MonkeyPatch, reports: dict[int, Report]) -> list[int]:
    """verify_on_budget answering ``reports[samples]``; returns the budgets it was asked for."""
    asked: list[int] = []

    def on_budget(settings: Settings, scratch: Path) -> Report:
        asked.append(settings.samples)
        return reports[settings.samples]

    monkeypatch.setattr(verify_module, "verify_on_budget", on_budget)
    return asked


def test_the_default_budget_is_raised_until_each_rank_reaches_the_first_evaluation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = Settings(script=tmp_path / "t.py")
    missed = UnreachedCadence(step=3, what="evaluated", taken=2)
    asked = scripted(monkeypatch, {256: fake_report(settings, True, missed), 512: fake_report(settings, False, None)})
    report = verify(settings, tmp_path)
    assert asked == [256, 512] and report.holds
    assert "with the default budget (256 samples) no-crash failed" in report.notes[0]
    assert report.notes[0].endswith("verified again with --samples 512")


def test_the_users_budget_is_kept_and_the_failure_says_why_and_what_to_give(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = Settings(script=tmp_path / "t.py", samples=100, budget_given=True)
    missed = UnreachedCadence(step=7, what="evaluated", taken=2)
    asked = scripted(monkeypatch, {100: fake_report(settings, True, missed)})
    report = verify(settings, tmp_path)
    assert asked == [100] and not report.holds
    evidence = report.n_processes[0].evidence
    assert evidence[0] == "rank 0: UnboundLocalError"
    assert "after optimizer step 7" in evidence[1] and evidence[1].endswith("rerun with --samples 400 or more")


def test_a_cadence_missed_on_the_whole_data_is_the_converted_scripts_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The budget cut nothing: a larger one changes nothing, and N processes do this for real."""
    settings = Settings(script=tmp_path / "t.py")
    missed = UnreachedCadence(step=3, what="evaluated", taken=2, budget_cut=False)
    asked = scripted(monkeypatch, {256: fake_report(settings, True, missed)})
    report = verify(settings, tmp_path)
    assert asked == [256] and not report.holds
    assert "--split-batches" in report.n_processes[0].evidence[-1]


def test_a_cadence_past_the_largest_raise_is_advice_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = Settings(script=tmp_path / "t.py")
    missed = UnreachedCadence(step=1000, what="wrote best.pt", taken=2)
    asked = scripted(monkeypatch, {256: fake_report(settings, True, missed)})
    report = verify(settings, tmp_path)
    assert asked == [256] and "rerun with --samples 128000 or more" in report.n_processes[0].evidence[-1]


def test_eval_every_n_steps_verifies_with_the_default_budget(tmp_path: Path) -> None:
    """The fixture validates every 3 steps and prints the last validation's accuracy at each epoch's
    end: 256 samples in batches of 64 are 4 steps per epoch on one process, 2 per rank on two (no
    validation in the first epoch: UnboundLocalError). Before: exit 1 with no-crash failed."""
    shutil.copy(FIXTURE, tmp_path / FIXTURE.name)
    support = Path(__file__).parents[1] / "fixtures" / "support"
    env = base_env({"TMPDIR": str(tmp_path)})
    env["PYTHONPATH"] = f"{support}:{env['PYTHONPATH']}"
    command = [sys.executable, "-m", "accel_convert.converter", "verify", FIXTURE.name, "--output-format", "json"]
    done = subprocess.run(
        [*command, "--", "--epochs", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=VERIFY_TIMEOUT,
    )
    report = json.loads(done.stdout)
    failed = [item for item in report["one_process"] + report["n_processes"] if not item["holds"]]
    assert done.returncode == 0, (failed, done.stderr[-2000:])
    assert report["samples"] == 512 and "verified again with --samples 512" in report["notes"][0]
