"""End to end: convert each runnable fixture script, run original and converted, compare.

A fixture ``fixtures/cases/<name>.py`` with a sidecar ``<name>.json`` is checked here (fields in
fixtures/README.md); adding one needs no test code. Its conversion must report the ``ACC9xx``
codes listed under ``reported``. A case whose sidecar names ``metrics`` is runnable:

* on one process, the converted script prints exactly what the original prints (the runtime is
  the identity on one process), and writes the same result files;
* on two processes (``torchrun --nproc_per_node 2``, Gloo on CPU), with the ``run_2proc``
  arguments (usually ``--lr 0``, so the parameters never move and evaluation must give the
  one-process numbers), it prints every line once -- the same lines as the original on one
  process, numbers aside -- its evaluation totals equal the dataset size, and its metrics equal
  the original's one-process metrics (integers exactly, other numbers to 1e-5 relative or one
  unit of the last printed digit).

Cost control: conversions run in this process; all one-process runs go through one
``tests/e2e_support/forkrun.py`` launch that imports torch once and forks a child per run, and
all two-process runs through one ``torchrun --nproc_per_node 2 tests/e2e_support/rankrun.py``
launch whose two workers import torch once and fork, per run, the two ranks of that run (each
run rendezvouses on a port of its own); the two launches run side by side. A ``torchrun`` launch
per script cost ~10 s, nearly all of it starting interpreters and importing torch.

Robustness on a busy machine: every run has its own timeout (:data:`ONE_PROCESS_TIMEOUT`,
:data:`TWO_PROCESS_TIMEOUT`), never one cap shared by many scripts, and a run that fails or hangs
fails only its own test: the shared launches record each run's outcome as it ends and never
raise. A hung run's failure shows the stacks of every process of that run (each forked run's own
faulthandler watchdog, on every rank).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import ConversionError
from tests.e2e_support.results import (
    FORKRUN,
    RANKRUN,
    describe,
    forkrun_jobs,
    forkrun_results,
    launches_side_by_side,
    rank_results,
    rankrun_jobs,
)
from tests.fixture_conversions import converted_fixture
from tests.launching import REPO_ROOT, Run, load_slack, python, torchrun

CASES_DIR = REPO_ROOT / "fixtures" / "cases"
SUPPORT_DIR = REPO_ROOT / "fixtures" / "support"
SIDE_CAR_FIELDS = {
    "run",
    "run_2proc",
    "metrics",
    "dataset_size",
    "compare_2proc",
    "compare_files",
    "written_once",
    "oom_retry",
    "target",
    "reported",
    "not_reported",
    "added_lines",
    "halved_2proc",
}
#: What ``--oom-retry`` conversions print at the start of each attempt (the seed write-up's reader
#: wanted to see the batch size in use); lines the original cannot have printed.
OOM_RETRY_ANNOUNCEMENT = r"Training with batch size \d+"
#: Groups that count evaluated samples: they must equal the sidecar's ``dataset_size``.
COUNT_GROUPS = ("total", "count")
#: Per-run limits, far above what a run needs on a quiet machine (well under 5 s, on one process
#: or two) so that a machine loaded several times over still passes.
ONE_PROCESS_TIMEOUT = 120.0
TWO_PROCESS_TIMEOUT = 180.0
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Case:
    """A fixture and what its sidecar asks for."""

    name: str
    script: Path
    run: tuple[str, ...]
    run_2proc: tuple[str, ...] | None
    metrics: tuple[str, ...]
    dataset_size: int | None
    compare_2proc: tuple[str, ...] | None
    compare_files: tuple[str, ...]
    options: Options
    #: Glob patterns (relative to the run's folder) of files every run writes once, however many
    #: processes run it (a TensorBoard event file): as many matches as the original's run.
    written_once: tuple[str, ...] = ()
    #: ACC9xx codes the conversion must report (``"ACC901|ACC903"``: either one).
    reported: tuple[str, ...] = ()
    #: ACC9xx codes the conversion must not report (a false finding once made on the case).
    not_reported: tuple[str, ...] = ()
    #: Regular expressions for whole lines the converted script adds on purpose.
    added_lines: tuple[str, ...] = ()
    #: Groups counting one process's share of the training (its batches per pass over the
    #: training data): on two processes, half the one-process value (rounded up).
    halved_2proc: tuple[str, ...] = ()

    @property
    def runnable(self) -> bool:
        return bool(self.metrics)


def load_case(sidecar: Path) -> Case:
    """Read ``<name>.json``; an unknown field is a mistake in the fixture, not something to ignore."""
    spec = json.loads(sidecar.read_text(encoding="utf-8"))
    unknown = set(spec) - SIDE_CAR_FIELDS
    if unknown:
        raise ValueError(f"{sidecar}: unknown sidecar fields {sorted(unknown)}")
    two = spec.get("run_2proc")
    return Case(
        name=sidecar.stem,
        script=sidecar.with_suffix(".py"),
        run=tuple(spec.get("run", [])),
        run_2proc=tuple(two) if two is not None else None,
        metrics=tuple(spec.get("metrics", [])),
        dataset_size=spec.get("dataset_size"),
        compare_2proc=tuple(spec["compare_2proc"]) if "compare_2proc" in spec else None,
        compare_files=tuple(spec.get("compare_files", [])),
        written_once=tuple(spec.get("written_once", [])),
        options=Options(target=spec.get("target", "runtime"), oom_retry=spec.get("oom_retry", False)),
        reported=tuple(spec.get("reported", [])),
        not_reported=tuple(spec.get("not_reported", [])),
        added_lines=tuple(spec.get("added_lines", [OOM_RETRY_ANNOUNCEMENT] if spec.get("oom_retry") else [])),
        halved_2proc=tuple(spec.get("halved_2proc", [])),
    )


ALL_CASES = [load_case(path) for path in sorted(CASES_DIR.glob("*.json"))]
CASES = [case for case in ALL_CASES if case.runnable]
TWO_PROCESS_CASES = [case for case in CASES if case.run_2proc is not None]
REPORTING_CASES = [case for case in ALL_CASES if case.reported or case.not_reported]


def run_env() -> dict[str, str]:
    """Runs import ``runtime`` from the repo and fixture helpers from fixtures/support, offline."""
    return {
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(SUPPORT_DIR)]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


# --------------------------------------------------------------------------------------------
# Output comparison helpers
# --------------------------------------------------------------------------------------------


def without_added_lines(case: Case, stdout: str) -> str:
    """The converted script's output minus the lines the conversion adds on purpose."""
    if not case.added_lines:
        return stdout
    added = [re.compile(pattern) for pattern in case.added_lines]
    kept = [
        line
        for line in stdout.splitlines(keepends=True)
        if not any(pattern.fullmatch(line.rstrip("\r\n")) for pattern in added)
    ]
    return "".join(kept)


def metric_rows(case: Case, stdout: str) -> list[dict[str, str]]:
    """Every match of every metrics pattern, in pattern order then output order."""
    return [match.groupdict() for pattern in case.metrics for match in re.finditer(pattern, stdout)]


def line_shapes(stdout: str) -> list[str]:
    """The printed lines with every number replaced by ``#``: what must be identical between
    one and two processes even when training losses differ."""
    return [NUMBER.sub("#", line) for line in stdout.splitlines()]


def numbers_agree(expected: str, actual: str) -> bool:
    """Integers exactly; decimals to 1e-5 relative or one unit of the last printed digit (two
    processes sum in another order, which may flip the last rounded digit)."""
    try:
        float(expected)
    except ValueError:
        return expected == actual  # a label the pattern captured, not a number
    if "." not in expected and "e" not in expected.lower():
        return expected == actual
    decimals = len(expected.split(".")[1]) if "." in expected else 0
    return math.isclose(float(expected), float(actual), rel_tol=1e-5, abs_tol=1.01 * 10.0**-decimals)


def compare_metrics(
    case: Case, reference: str, candidate: str, groups: tuple[str, ...] | None, halved: tuple[str, ...] = ()
) -> list[str]:
    """Differences between the metric values of two outputs, as readable lines; the ``halved``
    groups of the candidate must be half the reference's (rounded up): each of two processes
    did half the work."""
    expected, actual = metric_rows(case, reference), metric_rows(case, candidate)
    if len(expected) != len(actual):
        return [f"{len(expected)} metric lines expected, {len(actual)} found"]
    problems = []
    for row, (want, got) in enumerate(zip(expected, actual)):
        for group, value in want.items():
            if group in halved:
                if int(got[group]) != math.ceil(int(value) / 2):
                    problems.append(f"metric row {row}, {group}: expected half of {value}, got {got[group]}")
                continue
            if groups is not None and group not in groups:
                continue
            if not numbers_agree(value, got[group]):
                problems.append(f"metric row {row}, {group}: expected {value}, got {got[group]}")
    return problems


def wrong_totals(case: Case, stdout: str) -> list[str]:
    """Sample counts that differ from the dataset size (a rank counting only its shard, or padding
    counted twice)."""
    if case.dataset_size is None:
        return []
    return [
        f"{group}={row[group]} but the evaluation set has {case.dataset_size} samples"
        for row in metric_rows(case, stdout)
        for group in COUNT_GROUPS
        if row.get(group) is not None and int(row[group]) != case.dataset_size
    ]


# --------------------------------------------------------------------------------------------
# Fixtures: convert everything once, run every one-process job in one forkrun launch
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Converted:
    """One conversion: the converted script (or why there is none) and the ACC9xx codes reported."""

    script: Path | None
    error: ConversionError | None = None
    reported: frozenset[str] = frozenset()


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Converted]:
    """Each case converted with its sidecar's options (the CLI's own code path), shared with the
    other tests that ask for the same conversion (tests/fixture_conversions.py)."""
    folder = tmp_path_factory.mktemp("converted")
    results: dict[str, Converted] = {}
    for case in ALL_CASES:
        try:
            conversion = converted_fixture(case.script, case.options)
        except ConversionError as error:
            results[case.name] = Converted(None, error)
            continue
        target = folder / case.script.name
        target.write_bytes(conversion.output)
        results[case.name] = Converted(target, reported=frozenset(c.code for c in conversion.warnings))
    return results


def converted_script(converted: dict[str, Converted], case: Case) -> Path:
    result = converted[case.name]
    if result.script is None:
        pytest.fail(f"conversion failed: {result.error}")
    return result.script


@dataclass
class OneProcessRuns:
    """Outputs of the one-process runs, keyed by (case name, variant), and the folders they ran
    in. A run with no outcome (forkrun itself died) has none in ``runs``; ``launch`` tells why."""

    runs: dict[tuple[str, str], Run]
    folders: dict[tuple[str, str], Path]
    launch: Run

    def get(self, case: Case, variant: str) -> Run:
        """The run's outcome; a missing one fails only the test that asks for it."""
        run = self.runs.get((case.name, variant))
        if run is None:
            pytest.fail(f"forkrun ended before the {variant} run of {case.name}:\n{describe(self.launch)}")
        return run


@pytest.fixture(scope="module")
def shared_launches(
    converted, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Future]]:
    """The forkrun launch and the rankrun launch, side by side (see ``launches_side_by_side``)."""
    starts = {
        "two_processes": lambda folder: run_two_processes(converted, folder),
        "one_process": lambda folder: run_one_process(converted, folder),
    }
    with launches_side_by_side(request, starts, lambda name: tmp_path_factory.mktemp(name)) as launches:
        yield launches


@pytest.fixture(scope="module")
def one_process(shared_launches: dict[str, Future]) -> OneProcessRuns:
    return shared_launches["one_process"].result()


@pytest.fixture(scope="module")
def two_processes(shared_launches: dict[str, Future]) -> dict[str, tuple[Run, Path]]:
    return shared_launches["two_processes"].result()


def run_one_process(converted: dict[str, Converted], root: Path) -> OneProcessRuns:
    """original(run), converted(run), and the two-process reference original(run_2proc)."""
    jobs, keys, folders = [], [], {}
    for case in CASES:
        variants = [("original", case.script, case.run)]
        if converted[case.name].script is not None:
            variants.append(("converted", converted[case.name].script, case.run))
        if case.run_2proc is not None:
            variants.append(("reference_2proc", case.script, case.run_2proc))
        for variant, script, args in variants:
            folder = root / f"{case.name}-{variant}"
            folder.mkdir()
            folders[(case.name, variant)] = folder
            keys.append((case.name, variant))
            jobs.append(
                {
                    "script": str(script),
                    "args": list(args),
                    "cwd": str(folder),
                    "sys_path": [str(SUPPORT_DIR)],
                }
            )
    results, launch = forkrun_jobs(jobs, root, run_env(), ONE_PROCESS_TIMEOUT)
    runs = {key: run for key, run in zip(keys, results) if run is not None}
    return OneProcessRuns(runs, folders, launch)


def run_two_processes(converted: dict[str, Converted], root: Path) -> dict[str, tuple[Run, Path]]:
    """Each two-process case's converted script on two ranks, with the folder it ran in: all of
    them in one ``torchrun --nproc_per_node 2`` launch of rankrun.py, each run with its own
    timeout; a run that fails or hangs is that case's outcome, never raised."""
    jobs, names, outcomes = [], [], {}
    for case in TWO_PROCESS_CASES:
        folder = root / case.name
        folder.mkdir()
        script = converted[case.name].script
        if script is None:
            outcomes[case.name] = (Run(-1, "", f"conversion failed: {converted[case.name].error}"), folder)
            continue
        names.append(case.name)
        jobs.append(
            {
                "script": str(script),
                "args": list(case.run_2proc or ()),
                "cwd": str(folder),
                "sys_path": [str(SUPPORT_DIR)],
            }
        )
    for name, run in zip(names, rankrun_jobs(jobs, root, run_env(), TWO_PROCESS_TIMEOUT)):
        outcomes[name] = (run, root / name)
    return outcomes


def compare_files(case: Case, reference: Path, candidate: Path) -> list[str]:
    problems = []
    for name in case.compare_files:
        want, got = reference / name, candidate / name
        if not got.is_file():
            problems.append(f"{name} was not written")
        elif not want.is_file():
            problems.append(f"{name} missing from the reference run")
        elif want.read_bytes() != got.read_bytes():
            problems.append(f"{name} differs:\n--- expected ---\n{want.read_text()}\n--- got ---\n{got.read_text()}")
    return problems


def written_counts(case: Case, folder: Path) -> dict[str, int]:
    """How many files match each ``written_once`` pattern in a run's folder."""
    return {pattern: len(list(folder.glob(pattern))) for pattern in case.written_once}


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", REPORTING_CASES, ids=lambda case: case.name)
def test_conversion_reports_what_needs_a_person(case: Case, converted):
    converted_script(converted, case)
    reported = converted[case.name].reported
    missing = [codes for codes in case.reported if not set(codes.split("|")) & reported]
    assert missing == [], f"reported only {sorted(reported)}"
    assert not reported & set(case.not_reported), f"reported {sorted(reported)}"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_converted_script_prints_what_the_original_prints_on_one_process(case: Case, converted, one_process):
    original = one_process.get(case, "original")
    assert original.returncode == 0, f"the ORIGINAL fixture failed; fix the fixture:\n{describe(original)}"
    assert metric_rows(case, original.stdout), f"no metrics pattern matched the original's output:\n{original.stdout}"
    assert not wrong_totals(case, original.stdout), "the fixture's dataset_size is wrong"

    converted_script(converted, case)
    result = one_process.get(case, "converted")
    assert result.returncode == 0, describe(result)
    assert without_added_lines(case, result.stdout) == original.stdout
    assert not compare_files(
        case, one_process.folders[(case.name, "original")], one_process.folders[(case.name, "converted")]
    )
    written = written_counts(case, one_process.folders[(case.name, "original")])
    assert all(written.values()), f"the ORIGINAL fixture wrote none of {written}; fix the fixture"
    assert written_counts(case, one_process.folders[(case.name, "converted")]) == written


@pytest.mark.parametrize("case", TWO_PROCESS_CASES, ids=lambda case: case.name)
def test_converted_script_on_two_processes_prints_once_and_evaluates_every_sample(
    case: Case, converted, one_process, two_processes
):
    reference = one_process.get(case, "reference_2proc")
    assert reference.returncode == 0, f"the ORIGINAL fixture failed; fix the fixture:\n{describe(reference)}"
    converted_script(converted, case)

    result, folder = two_processes[case.name]
    assert result.returncode == 0, describe(result)
    stdout = without_added_lines(case, result.stdout)

    # Printed once: the same lines, in the same order, as one process (numbers may differ).
    assert line_shapes(stdout) == line_shapes(reference.stdout), (
        f"two-process output is not the one-process output printed once\n--- one process ---\n"
        f"{reference.stdout}\n--- two processes ---\n{stdout}"
    )
    # Every evaluation sample counted exactly once, and the one-process numbers.
    assert metric_rows(case, stdout), "no metrics found in the two-process output"
    assert wrong_totals(case, stdout) == []
    # Each rank did its half of the training, where the case prints a rank's share.
    assert compare_metrics(case, reference.stdout, stdout, case.compare_2proc, case.halved_2proc) == []
    assert compare_files(case, one_process.folders[(case.name, "reference_2proc")], folder) == []
    # Written once, not once per process.
    assert written_counts(case, folder) == written_counts(case, one_process.folders[(case.name, "reference_2proc")])


# --------------------------------------------------------------------------------------------
# The comparisons themselves must catch what they are for (no process launched)
# --------------------------------------------------------------------------------------------

SAMPLE_CASE = Case(
    name="sample",
    script=CASES_DIR / "sample.py",
    run=(),
    run_2proc=(),
    metrics=(r"loss (?P<loss>[0-9.]+), (?P<correct>\d+)/(?P<total>\d+)",),
    dataset_size=200,
    compare_2proc=None,
    compare_files=(),
    options=Options(),
)


def test_a_line_printed_by_both_ranks_changes_the_line_shapes():
    one = "epoch 0: train 0.51\nloss 0.250000, 150/200\n"
    twice = "epoch 0: train 0.49\nloss 0.250000, 150/200\nloss 0.250000, 150/200\n"
    assert line_shapes(one) == line_shapes("epoch 0: train 0.49\nloss 0.250001, 150/200\n")
    assert line_shapes(one) != line_shapes(twice)


def test_a_rank_counting_only_its_shard_is_reported():
    assert wrong_totals(SAMPLE_CASE, "loss 0.25, 150/200\n") == []
    assert wrong_totals(SAMPLE_CASE, "loss 0.25, 75/100\n") == ["total=100 but the evaluation set has 200 samples"]
    # padding counted twice by a plain gather: 208 instead of 200
    assert wrong_totals(SAMPLE_CASE, "loss 0.25, 150/208\n")


def test_only_the_announced_lines_are_dropped_from_converted_output():
    case = load_case_from(dict(metrics=["x"], oom_retry=True))
    output = "Training with batch size 64\nepoch 0: 5/200\nTraining with batch size 64 now\n"
    assert without_added_lines(case, output) == "epoch 0: 5/200\nTraining with batch size 64 now\n"
    assert without_added_lines(SAMPLE_CASE, output) == output


def load_case_from(spec: dict, tmp_name: str = "inline") -> Case:
    """A Case from a sidecar dict, as load_case reads it from disk."""
    with tempfile.TemporaryDirectory() as folder:
        sidecar = Path(folder) / f"{tmp_name}.json"
        sidecar.write_text(json.dumps(spec), encoding="utf-8")
        return load_case(sidecar)


def test_metric_values_compare_counts_exactly_and_decimals_to_the_printed_precision():
    reference = "loss 0.250000, 150/200\n"
    assert compare_metrics(SAMPLE_CASE, reference, "loss 0.250001, 150/200\n", None) == []
    assert compare_metrics(SAMPLE_CASE, reference, "loss 0.250400, 150/200\n", None) != []
    assert compare_metrics(SAMPLE_CASE, reference, "loss 0.250000, 151/200\n", None) != []
    assert compare_metrics(SAMPLE_CASE, reference, "loss 0.250400, 150/200\n", ("correct", "total")) == []
    assert compare_metrics(SAMPLE_CASE, reference, "", None) == ["1 metric lines expected, 0 found"]


def test_a_halved_count_must_be_half_the_one_process_count():
    case = load_case_from(dict(metrics=[r"(?P<batches>\d+) batches, (?P<correct>\d+)/200"], halved_2proc=["batches"]))
    reference = "13 batches, 150/200\n"
    assert compare_metrics(case, reference, "7 batches, 150/200\n", None, case.halved_2proc) == []
    # Both ranks trained on every batch (the loader not sharded): the full count.
    assert compare_metrics(case, reference, "13 batches, 150/200\n", None, case.halved_2proc) != []
    assert compare_metrics(case, reference, "7 batches, 151/200\n", None, case.halved_2proc) != []


# --------------------------------------------------------------------------------------------
# A hang fails its own run, and shows where every process was (a few seconds, no torch)
# --------------------------------------------------------------------------------------------

HANGING_SCRIPT = """\
import subprocess, sys, time


def wait_forever_in_this_process():
    time.sleep(600)


if sys.argv[1:] == ["spawn"]:  # a second process in the same group, as torchrun starts ranks
    subprocess.Popen([sys.executable, __file__])
print("started", flush=True)
wait_forever_in_this_process()
"""


def test_a_hung_launch_shows_every_process_stack_and_fails_alone(tmp_path: Path):
    script = tmp_path / "hang.py"
    script.write_text(HANGING_SCRIPT, encoding="utf-8")
    # Both processes must be waiting before the timeout: well under a second on a quiet machine.
    timeout = round(2 * load_slack())
    run = python(script, "spawn", timeout=timeout, raise_on_timeout=False)
    assert run.returncode == -9
    assert f"ran past {timeout}s" in run.stderr
    # Both processes (the launcher's and the one it started) say where they were waiting.
    assert run.stderr.count("in wait_forever_in_this_process") == 2, run.stderr
    assert run.stdout.startswith("started")


def test_forkrun_reports_each_run_on_its_own_and_a_hung_one_with_its_stack(tmp_path: Path):
    script = tmp_path / "hang.py"
    script.write_text(HANGING_SCRIPT, encoding="utf-8")
    quick = tmp_path / "quick.py"
    quick.write_text("import sys\nprint('done', sys.argv[1:])\n", encoding="utf-8")
    jobs = [
        {"script": str(script), "args": [], "cwd": str(tmp_path), "timeout": 3},
        {"script": str(quick), "args": ["x"], "cwd": str(tmp_path), "timeout": 60},
    ]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    launch = python(FORKRUN, str(tmp_path / "jobs.json"), timeout=60)
    results = forkrun_results(launch.stdout, ONE_PROCESS_TIMEOUT)
    assert results[1].returncode == 0 and results[1].stdout == "done ['x']\n"
    assert results[0].returncode != 0
    assert "in wait_forever_in_this_process" in results[0].stderr
    assert "ran past" in results[0].stderr


def test_rankrun_times_out_a_hung_run_on_every_rank_with_stacks_and_runs_the_next(tmp_path: Path):
    hang = tmp_path / "hang.py"
    hang.write_text(HANGING_SCRIPT, encoding="utf-8")
    quick = tmp_path / "quick.py"
    quick.write_text("import os\nprint('rank', os.environ['RANK'], 'port', os.environ['MASTER_PORT'])\n")
    # Runs that leave through the interpreter's whole shutdown: one hangs in an atexit handler
    # (caught there, with its stack), one has an object that only module teardown finalizes.
    hang_at_exit = tmp_path / "hang_at_exit.py"
    hang_at_exit.write_text(
        "import atexit, time\n\ndef wait_forever_at_exit():\n    time.sleep(600)\n\n"
        "atexit.register(wait_forever_at_exit)\nprint('finished', flush=True)\n"
    )
    teardown = tmp_path / "teardown.py"
    teardown.write_text(
        "import os\n\nclass Witness:\n    def __del__(self):\n"
        "        os.write(1, b'torn down rank ' + os.environ['RANK'].encode() + b'\\n')\n\n"
        "keep = [Witness()]\nkeep.append(keep)  # a cycle: freed by module teardown's collection\n"
    )
    jobs = [
        {"script": str(hang), "args": [], "cwd": str(tmp_path), "timeout": 4},
        {"script": str(quick), "args": [], "cwd": str(tmp_path), "timeout": 60},
        {"script": str(hang_at_exit), "args": [], "cwd": str(tmp_path), "timeout": 4, "interpreter_exit": True},
        {"script": str(teardown), "args": [], "cwd": str(tmp_path), "timeout": 60, "interpreter_exit": True},
    ]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    results = tmp_path / "results"
    results.mkdir()
    launch = torchrun(RANKRUN, str(tmp_path / "jobs.json"), str(results), nproc=2, timeout=120)
    assert launch.returncode == 0, describe(launch)
    hung = rank_results(results, 0, launch)
    assert hung.returncode != 0
    assert hung.stderr.count("(ran past its timeout)") == 2
    assert hung.stderr.count("in wait_forever_in_this_process") == 2, hung.stderr
    after = rank_results(results, 1, launch)
    assert after.returncode == 0, after.stderr
    rank0, rank1 = after.stdout.splitlines()
    assert rank0.startswith("rank 0 port ") and rank1.startswith("rank 1 port ")
    assert rank0.split()[-1] == rank1.split()[-1], "both ranks of a run meet on one port"
    hung_at_exit = rank_results(results, 2, launch)
    assert hung_at_exit.returncode != 0 and hung_at_exit.stdout == "finished\nfinished\n"
    assert hung_at_exit.stderr.count("(ran past its timeout)") == 2
    assert hung_at_exit.stderr.count("in wait_forever_at_exit") == 2, hung_at_exit.stderr
    torn_down = rank_results(results, 3, launch)
    assert torn_down.returncode == 0, torn_down.stderr
    assert torn_down.stdout == "torn down rank 0\ntorn down rank 1\n"
