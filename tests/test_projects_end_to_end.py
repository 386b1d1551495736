"""End to end on programs of several modules: ``fixtures/projects/<name>/`` with a ``project.json``.

Each project is converted as a folder with the CLI (``accel-convert PROJECT/ -o OUT/``), which
finds the entry script and converts it with the local modules it imports as one program. Then,
as for the sidecar cases of ``tests/test_end_to_end.py`` (fields in ``fixtures/README.md``, plus
``entry``, the script to run):

* the converted set equals the reviewed golden set ``fixtures/expected_projects/<name>/``, file
  for file (unchanged modules are copied, so the output folder runs);
* on one process the converted entry prints exactly what the original prints and writes the same
  ``compare_files``;
* on two processes (``torchrun``, Gloo on CPU, ``run_2proc`` arguments) it exits 0 within its
  time, prints every line once, counts each evaluation sample once (``dataset_size``) and gives
  the original's one-process metrics; a hang fails with every rank's stack.

Cost: every one-process run shares one ``forkrun`` launch, every two-process run one ``torchrun``
launch of ``rankrun`` (tests/e2e_support/): each rank imports torch once and forks that rank of
each project's run, which rendezvouses on a port of its own; the two launches run side by side.
Each run keeps its own timeout, and a run past it fails only its project's test, with every rank's
stack.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.cli import main as accel_convert
from tests.e2e_support.results import (
    FORKRUN,
    RAN_PAST_TIMEOUT,
    forkrun_jobs,
    forkrun_results,
    launches_side_by_side,
    rankrun_jobs,
)
from tests.e2e_support.stacks import torchrun_with_stacks
from tests.launching import REPO_ROOT, Run, load_slack, python
from tests.test_end_to_end import (
    SIDE_CAR_FIELDS,
    Case,
    compare_files,
    compare_metrics,
    describe,
    line_shapes,
    metric_rows,
    run_env,
    written_counts,
    wrong_totals,
)

PROJECTS_DIR = REPO_ROOT / "fixtures" / "projects"
EXPECTED_DIR = REPO_ROOT / "fixtures" / "expected_projects"
#: Seconds a one-process run may take (a run takes a second or two on a quiet machine).
ONE_PROCESS_TIMEOUT_S = 90
#: Seconds a two-process run may take before it counts as hung (a run takes a few seconds here).
TWO_PROCESS_TIMEOUT_S = 120


@dataclass(frozen=True)
class Project:
    folder: Path
    entry: str
    case: Case
    #: Regular expressions for whole lines every process prints on purpose (a ``print`` in a
    #: library class's method, which no accelerator reaches and the converter leaves as it is):
    #: dropped from both outputs before the two-process comparison.
    per_rank_lines: tuple[str, ...] = ()
    #: The module that creates the accelerator (a path like ``entry``): the entry script unless
    #: it only hands over to a function of another module that builds everything.
    home: str | None = None

    @property
    def name(self) -> str:
        return self.folder.name


def load_project(folder: Path) -> Project:
    spec = json.loads((folder / "project.json").read_text(encoding="utf-8"))
    unknown = set(spec) - SIDE_CAR_FIELDS - {"entry", "per_rank_lines", "home"}
    if unknown:
        raise ValueError(f"{folder}/project.json: unknown fields {sorted(unknown)}")
    two = spec.get("run_2proc")
    case = Case(
        name=folder.name,
        script=folder / spec["entry"],
        run=tuple(spec.get("run", [])),
        run_2proc=tuple(two) if two is not None else None,
        metrics=tuple(spec.get("metrics", [])),
        dataset_size=spec.get("dataset_size"),
        compare_2proc=tuple(spec["compare_2proc"]) if "compare_2proc" in spec else None,
        compare_files=tuple(spec.get("compare_files", [])),
        options=Options(target=spec.get("target", "runtime")),
        reported=tuple(spec.get("reported", [])),
        not_reported=tuple(spec.get("not_reported", [])),
        halved_2proc=tuple(spec.get("halved_2proc", [])),
        written_once=tuple(spec.get("written_once", [])),
    )
    return Project(folder, spec["entry"], case, tuple(spec.get("per_rank_lines", [])), spec.get("home"))


def without_per_rank_lines(project: Project, stdout: str) -> str:
    """``stdout`` without the messages every process prints on purpose. Two processes write to
    one pipe, and ``print`` writes the text and its newline separately, so such a message can
    land inside another process's line: each is cut out wherever it stands, then the lines left
    empty go."""
    for pattern in project.per_rank_lines:
        stdout = re.sub(pattern, "", stdout)
    return "".join(line for line in stdout.splitlines(keepends=True) if line.strip())


PROJECTS = [load_project(path.parent) for path in sorted(PROJECTS_DIR.glob("*/project.json"))]


def python_files(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


@dataclass(frozen=True)
class Converted:
    folder: Path
    exit_code: int
    messages: str


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Converted]:
    """Each project folder converted by the CLI into a folder of its own."""
    root = tmp_path_factory.mktemp("converted-projects")
    results = {}
    for project in PROJECTS:
        out = root / project.name
        result = CliRunner().invoke(accel_convert, [str(project.folder), "-o", f"{out}/", "--target", "runtime"])
        results[project.name] = Converted(out, result.exit_code, result.output)
    return results


@dataclass
class OneProcessRuns:
    runs: dict[tuple[str, str], Run]
    folders: dict[tuple[str, str], Path]


@pytest.fixture(scope="module")
def shared_launches(
    converted, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Future]]:
    """The forkrun launch and the rankrun launch, side by side (see ``launches_side_by_side``)."""
    starts = {
        "two_processes": lambda folder: run_two_processes(converted, folder),
        "one_process": lambda folder: run_one_process(converted, folder),
    }
    with launches_side_by_side(request, starts, lambda name: tmp_path_factory.mktemp(f"projects-{name}")) as launches:
        yield launches


@pytest.fixture(scope="module")
def one_process(shared_launches: dict[str, Future]) -> OneProcessRuns:
    return shared_launches["one_process"].result()


@pytest.fixture(scope="module")
def two_processes(shared_launches: dict[str, Future]) -> dict[str, tuple[Run, bool, Path]]:
    return shared_launches["two_processes"].result()


def run_one_process(converted: dict[str, Converted], root: Path) -> OneProcessRuns:
    """original(run), converted(run) and the two-process reference original(run_2proc), in one
    forkrun launch (local modules are never preloaded: each run imports its own copies)."""
    jobs, keys, folders = [], [], {}
    for project in PROJECTS:
        variants = [
            ("original", project.folder, project.case.run),
            ("converted", converted[project.name].folder, project.case.run),
        ]
        if project.case.run_2proc is not None:
            variants.append(("reference_2proc", project.folder, project.case.run_2proc))
        for variant, folder, args in variants:
            cwd = root / f"{project.name}-{variant}"
            cwd.mkdir()
            folders[(project.name, variant)] = cwd
            keys.append((project.name, variant))
            jobs.append({"script": str(folder / project.entry), "args": list(args), "cwd": str(cwd)})
    results, launch = forkrun_jobs(jobs, root, run_env(), ONE_PROCESS_TIMEOUT_S)
    missing = f"forkrun ended before this run:\n{describe(launch)}"
    runs = {key: run if run is not None else Run(-1, "", missing) for key, run in zip(keys, results)}
    return OneProcessRuns(runs, folders)


def run_two_processes(converted: dict[str, Converted], root: Path) -> dict[str, tuple[Run, bool, Path]]:
    """Each project's converted entry on two ranks (run, hung, folder): every project in one
    ``torchrun --nproc_per_node 2`` launch of rankrun, each run with its own timeout; a hung run
    has both ranks' stacks in its stderr."""
    runnable = [project for project in PROJECTS if project.case.run_2proc is not None]
    jobs = []
    for project in runnable:
        cwd = root / project.name
        cwd.mkdir()
        script = converted[project.name].folder / project.entry
        jobs.append({"script": str(script), "args": list(project.case.run_2proc or ()), "cwd": str(cwd)})
    runs = rankrun_jobs(jobs, root, run_env(), TWO_PROCESS_TIMEOUT_S)
    return {
        project.name: (run, RAN_PAST_TIMEOUT in run.stderr, root / project.name) for project, run in zip(runnable, runs)
    }


def test_every_project_has_a_golden_set_and_runs_on_two_processes():
    assert {project.name for project in PROJECTS} >= {"two_module", "three_module", "package_layout"}
    for project in PROJECTS:
        assert project.case.metrics and project.case.run_2proc is not None and project.case.dataset_size
        assert (EXPECTED_DIR / project.name).is_dir(), f"no golden set for {project.name}"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_converted_set_is_the_reviewed_golden_set(project: Project, converted):
    result = converted[project.name]
    assert result.exit_code == 0, result.messages
    got = python_files(result.folder)
    originals = python_files(project.folder)
    if any(got[name] != originals[name] for name in got if name != project.entry):
        assert "local module" in result.messages.splitlines()[-1], "the summary names the converted local modules"
    want = python_files(EXPECTED_DIR / project.name)
    # Every file of the project is in the set (unchanged modules copied, so the folder runs).
    assert sorted(got) == sorted(python_files(project.folder)) == sorted(want)
    different = [name for name in want if got[name] != want[name]]
    assert different == [], f"converted files differ from fixtures/expected_projects/{project.name}/: {different}"
    # What is left to a person is reported (``reported`` in project.json).
    missing = [
        codes for codes in project.case.reported if not any(code in result.messages for code in codes.split("|"))
    ]
    assert missing == [], result.messages
    assert not [code for code in project.case.not_reported if code in result.messages], result.messages
    # The golden set is stable: converting it again as a program changes nothing.
    again = CliRunner().invoke(accel_convert, [str(EXPECTED_DIR / project.name), "--check"])
    assert again.exit_code == 0, again.output
    # One accelerator, created in the entry script only (or in the module it hands over to); a
    # library function its module's own ``__main__`` block calls too creates one only when given none.
    creations = {
        name: text.count(b"Accelerator(") - text.count(b"if accelerator is None:\n") for name, text in got.items()
    }
    assert creations == {name: int(name == (project.home or project.entry)) for name in got}


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_converted_project_prints_what_the_original_prints_on_one_process(project: Project, converted, one_process):
    case = project.case
    original = one_process.runs[(project.name, "original")]
    assert original.returncode == 0, f"the ORIGINAL project failed; fix the fixture:\n{describe(original)}"
    assert metric_rows(case, original.stdout), f"no metrics pattern matched the original's output:\n{original.stdout}"
    assert not wrong_totals(case, original.stdout), "the project's dataset_size is wrong"
    result = one_process.runs[(project.name, "converted")]
    assert result.returncode == 0, describe(result)
    assert result.stdout == original.stdout
    assert not compare_files(
        case, one_process.folders[(project.name, "original")], one_process.folders[(project.name, "converted")]
    )
    written = written_counts(case, one_process.folders[(project.name, "original")])
    assert all(written.values()), f"the ORIGINAL project wrote none of {written}; fix the fixture"
    assert written_counts(case, one_process.folders[(project.name, "converted")]) == written


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_converted_project_on_two_processes_prints_once_and_evaluates_every_sample(
    project: Project, converted, one_process, two_processes
):
    case = project.case
    reference = one_process.runs[(project.name, "reference_2proc")]
    assert reference.returncode == 0, f"the ORIGINAL project failed; fix the fixture:\n{describe(reference)}"
    result, hung, folder = two_processes[project.name]
    assert not hung, f"two-process run hung:\n{describe(result)}"
    assert result.returncode == 0, describe(result)
    once, reference_once = (
        without_per_rank_lines(project, result.stdout),
        without_per_rank_lines(project, reference.stdout),
    )
    assert line_shapes(once) == line_shapes(reference_once), (
        f"two-process output is not the one-process output printed once\n--- one process ---\n"
        f"{reference.stdout}\n--- two processes ---\n{result.stdout}"
    )
    assert metric_rows(case, result.stdout), "no metrics found in the two-process output"
    assert wrong_totals(case, result.stdout) == []
    assert compare_metrics(case, reference.stdout, result.stdout, case.compare_2proc, case.halved_2proc) == []
    assert compare_files(case, one_process.folders[(project.name, "reference_2proc")], folder) == []
    # Written once, not once per process.
    assert written_counts(case, folder) == written_counts(case, one_process.folders[(project.name, "reference_2proc")])


def test_local_modules_are_never_preloaded_by_forkrun(tmp_path: Path):
    """Two projects with an ``engine.py`` each: every run must import its own (else a converted
    entry would run the original engine, or the other way round)."""
    jobs = []
    for tag in ("first", "second"):
        folder = tmp_path / tag
        folder.mkdir()
        (folder / "engine.py").write_text(f"NAME = {tag!r}\n", encoding="utf-8")
        (folder / "main.py").write_text("import engine\nprint(engine.NAME)\n", encoding="utf-8")
        jobs.append({"script": str(folder / "main.py"), "args": [], "cwd": str(folder), "timeout": 30})
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    results = forkrun_results(python(FORKRUN, str(jobs_file), timeout=60).check().stdout, 30)
    assert [results[index].stdout for index in sorted(results)] == ["first\n", "second\n"]


def test_a_hung_launch_fails_with_every_ranks_stack(tmp_path: Path):
    """The hang detector itself: rank 0 waits in a barrier rank 1 never reaches."""
    script = tmp_path / "hang.py"
    script.write_text(
        "import time, pathlib\nimport torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "pathlib.Path(f'in_place{dist.get_rank()}').touch()\n"
        "if dist.get_rank() == 0:\n    dist.barrier()\nelse:\n    time.sleep(600)\n",
        encoding="utf-8",
    )
    # The hang is declared a few seconds after both ranks are in place (torch imported, group
    # formed, each about to block): a loaded machine may take long to get there, and a stack
    # taken before would show the import, not the barrier.
    in_place = [tmp_path / "in_place0", tmp_path / "in_place1"]
    run, hung = torchrun_with_stacks(script, cwd=tmp_path, timeout=3 * load_slack(), clock_starts_when=in_place)
    assert hung and run.returncode != 0, run.stderr
    assert f'File "{script}", line 6' in run.stderr, run.stderr  # rank 0, in the barrier
    assert f'File "{script}", line 8' in run.stderr, run.stderr  # rank 1, asleep
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs(pid, str(script))]


def _runs(pid: str, script: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return script.encode() in handle.read()
    except OSError:
        return False
