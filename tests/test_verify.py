"""``accel-convert verify`` end to end: a defect planted in an otherwise right conversion is named by
the verdict it breaks; the right conversion passes; the command line keeps ``accel-convert FILE``.

Every verify run of the module starts at once in one fixture (a few at a time) and the tests read
their reports: each run is three script runs, one of them on two processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.launching import base_env

CASES_DIR = Path(__file__).parent / "verify_cases"
ORIGINAL = (CASES_DIR / "original.py").read_text(encoding="utf-8")
RIGHT = (CASES_DIR / "converted.py").read_text(encoding="utf-8")
#: Seconds a verify run may take in all (three runs on a machine loaded several times over).
VERIFY_TIMEOUT = 900
#: Per run inside verify: generous, except for the planted hang, which must run into it.
RUN_TIMEOUT, HANG_TIMEOUT = "400", "60"

SAVE = "accelerator.wait_for_everyone()\naccelerator.unwrap_model(model).load_state_dict"
PER_BATCH_FILE = (
    '        with open(f"preds/batch_{batch * accelerator.num_processes + accelerator.process_index}.txt", "w") as f:\n'
    '            f.write(" ".join(str(int(p)) for p in output.argmax(dim=1)))\n'
)
MAIN_ONLY_FILE = (
    "        if accelerator.is_main_process:\n"
    '            with open(f"preds/batch_{batch}.txt", "w") as f:\n'
    '                f.write(" ".join(str(int(p)) for p in output.argmax(dim=1)))\n'
)
GATHER = "        output, y = accelerator.gather_for_metrics((output, y))\n"
COUNTS = (
    "        predicted = output.argmax(dim=1)\n"
    "        correct += (predicted == y).sum().item()\n"
    "        total += y.shape[0]\n"
)
INT_GATHERS = (
    "        predicted = output.argmax(dim=1)\n"
    "        correct += sum(accelerator.gather_for_metrics((predicted == y).sum().item()))\n"
    "        total += sum(accelerator.gather_for_metrics(y.shape[0]))\n"
)
PREPARE = (
    "model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)"
)


def plant(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class Case:
    converted: str | None  # None: verify converts the original itself
    flags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


CASES = {
    "right": Case(RIGHT),
    "converter": Case(None),
    "save-read": Case(plant(RIGHT, (SAVE, "accelerator.unwrap_model(model).load_state_dict"))),
    "half-files": Case(plant(RIGHT, (PER_BATCH_FILE, MAIN_ONLY_FILE))),
    "eval-share": Case(plant(RIGHT, (GATHER, ""))),
    "int-gather": Case(plant(RIGHT, (GATHER, ""), (COUNTS, INT_GATHERS))),
    "break": Case(
        plant(
            RIGHT,
            (
                "        optimizer.zero_grad()\n",
                "        if accelerator.process_index == 1 and step == 1:\n            break\n        optimizer.zero_grad()\n",
            ),
        ),
        flags=("--timeout", HANG_TIMEOUT),
    ),
    "random-lr": Case(RIGHT, env={"RANDOM_LR": "1"}),
    "to-0": Case(plant(RIGHT, ("model = nn.Linear(8, 2)\n", "model = nn.Linear(8, 2).to(0)\n"))),
    "print-everywhere": Case(plant(RIGHT, ('accelerator.print(f"epoch', 'print(f"epoch'))),
    "model-unprepared": Case(
        plant(
            RIGHT,
            (
                PREPARE,
                "optimizer, train_loader, eval_loader = accelerator.prepare(optimizer, train_loader, eval_loader)",
            ),
        )
    ),
}


@dataclass
class Outcome:
    returncode: int
    report: dict[str, Any]
    stderr: str

    def verdict(self, key: str) -> dict[str, Any]:
        verdicts = self.report["one_process"] + self.report["n_processes"]
        return next(item for item in verdicts if item["key"] == key)

    def failed(self) -> set[str]:
        return {item["key"] for item in self.report["one_process"] + self.report["n_processes"] if not item["holds"]}

    def evidence(self, key: str) -> str:
        return "\n".join(self.verdict(key)["evidence"])


def run_verify(name: str, case: Case, folder: Path) -> Outcome:
    folder.mkdir()
    (folder / "train.py").write_text(ORIGINAL, encoding="utf-8")
    command = [sys.executable, "-m", "accel_convert.converter", "verify", "train.py", "--samples", "64"]
    command += ["--output-format", "json", "--timeout", RUN_TIMEOUT, *case.flags]
    if case.converted is not None:
        (folder / "train_accel.py").write_text(case.converted, encoding="utf-8")
        command += ["--converted", "train_accel.py"]
    scratch = folder.parent / f"{name}-scratch"  # verify's kept folders end up with the test's
    scratch.mkdir()
    env = {**base_env(), **case.env, "TMPDIR": str(scratch)}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=VERIFY_TIMEOUT)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = {"one_process": [], "n_processes": [], "unparsed": done.stdout}
    return Outcome(done.returncode, report, done.stderr)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("verify")
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run_verify, name, case, root / name) for name, case in CASES.items()}
        return {name: future.result() for name, future in futures.items()}


def failed_with(outcome: Outcome, key: str) -> None:
    assert outcome.returncode == 1, (outcome.stderr, outcome.report)
    assert key in outcome.failed(), outcome.report


def test_a_right_conversion_passes(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["right"]
    assert outcome.returncode == 0, (outcome.stderr, outcome.report)
    assert outcome.failed() == set()
    assert len(outcome.report["one_process"]) == 5 and len(outcome.report["n_processes"]) == 8


def test_the_converters_own_conversion_passes(outcomes: dict[str, Outcome]) -> None:
    """The script writes one file per evaluation batch: the converter keeps that loop unsharded on
    every process (the per-batch files rule), so each file is written once, complete, and every
    verdict holds."""
    outcome = outcomes["converter"]
    assert outcome.returncode == 0, (outcome.stderr, outcome.report)
    assert outcome.failed() == set(), outcome.report


def test_a_main_only_save_read_by_every_rank(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["save-read"]
    failed_with(outcome, "reads-complete")
    assert "model.pt" in outcome.evidence("reads-complete")
    assert "FileNotFoundError" in outcome.evidence("no-crash") and "rank 1" in outcome.evidence("no-crash")
    assert outcome.verdict("no-crash")["site"].startswith("train.py:")


def test_half_the_per_batch_files(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["half-files"]
    failed_with(outcome, "files-once")
    assert "3 of the original's 5 files written" in outcome.evidence("files-once")
    assert "preds/batch_3.txt" in outcome.evidence("files-once")


def test_an_evaluation_counted_on_one_share(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["eval-share"]
    failed_with(outcome, "evaluation-counts")
    assert "counts 32 samples (its own share, nothing gathered), the original 64" in outcome.evidence(
        "evaluation-counts"
    )


def test_a_gather_of_a_python_int(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["int-gather"]
    failed_with(outcome, "evaluation-counts")
    assert "a gather of a Python int" in outcome.evidence("evaluation-counts")


def test_a_rank_dependent_break_hangs_with_stacks(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["break"]
    failed_with(outcome, "no-hang")
    evidence = outcome.evidence("no-hang")
    assert "rank 0 stack" in evidence and "rank 1 stack" in evidence
    assert "train.py" in evidence


def test_per_rank_unseeded_hyperparameters(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["random-lr"]
    failed_with(outcome, "in-sync")
    assert "after step 0: parameters differ between ranks" in outcome.evidence("in-sync")
    assert "in-sync" not in outcomes["right"].failed()  # the same script, its hyperparameter fixed


def test_a_device_index_on_every_rank(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["to-0"]
    failed_with(outcome, "own-device")
    assert "rank 1 (local rank 1) put a module on cuda:0" in outcome.evidence("own-device")
    assert outcome.verdict("own-device")["site"].startswith("train.py:")


def test_a_print_on_every_rank(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["print-everywhere"]
    failed_with(outcome, "prints-once")
    assert "'epoch # loss #': printed by ranks 0, 1" in outcome.evidence("prints-once")


def test_a_model_left_out_of_prepare_drifts(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["model-unprepared"]
    failed_with(outcome, "in-sync")
    assert "parameters differ between ranks" in outcome.evidence("in-sync")


def test_verify_help_and_usage_errors(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "accel_convert.converter", *args]
        return subprocess.run(command, cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=120)

    shown = run("verify", "--help")
    assert shown.returncode == 0
    for flag in ("--nproc", "--converted", "--samples", "--timeout", "--output-format", "--device", "SCRIPT ARGS"):
        assert flag in shown.stdout
    assert run("verify").returncode == 2
    assert run("verify", "missing.py").returncode == 2
    assert run("verify", "x.py", "--nproc", "1").returncode == 2


def test_a_file_named_verify_is_still_converted(tmp_path: Path) -> None:
    (tmp_path / "verify").write_text(ORIGINAL, encoding="utf-8")
    command = [sys.executable, "-m", "accel_convert.converter", "./verify"]
    done = subprocess.run(command, cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Accelerator" in done.stdout


def test_the_tool_failing_exits_123(tmp_path: Path) -> None:
    """A script the converter cannot read (a syntax error) cannot be verified: the tool's failure."""
    (tmp_path / "broken.py").write_text("import torch\ndef (:\n", encoding="utf-8")
    command = [sys.executable, "-m", "accel_convert.converter", "verify", "broken.py"]
    env = {**base_env(), "TMPDIR": str(tmp_path)}  # the kept scratch folder stays with the test
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 123, done.stderr
    assert "converting broken.py failed" in done.stderr
