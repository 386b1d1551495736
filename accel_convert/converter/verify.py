"""``accel-convert verify SCRIPT``: convert a script, run it three ways under the tracer, and judge.

The runs, each in its own copy of the working folder (so that the files each writes can be
compared): the original on one process, the converted script on one process (same seed), and the
converted script on N processes under ``torchrun`` (Gloo on the CPU, a seed per rank). The tracer
(``accel_convert.runtime.tracer``, injected with a ``sitecustomize.py`` that then runs the user's
own) records what each process does; converter.verify_verdicts judges the records. This module
never imports torch: every run is a ``sys.executable`` subprocess.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from accel_convert.converter.verify_verdicts import (
    RunTrace,
    UnreachedCadence,
    Verdict,
    as_written_verdicts,
    attach_findings,
    explain_unreached_cadence,
    n_process_verdicts,
    one_process_verdicts,
    unreached_cadence,
)

EXIT_OK, EXIT_FAILED_VERDICT, EXIT_USAGE, EXIT_TOOL_FAILED = 0, 1, 2, 123
#: Samples each DataLoader's dataset is cut to: enough for a few batches of every loader (so that
#: steps, evaluations and a last partial batch happen), few enough for a CPU run in seconds.
DEFAULT_SAMPLES = 256
#: The default budget is raised (once, by a whole factor) at most this many times over, when the
#: N-process run did not reach a step at which the original evaluated or wrote a file.
MAX_BUDGET_FACTOR = 8
DEFAULT_NPROC = 2
#: Seconds each run may take before its stacks are dumped and it is stopped (a hang).
DEFAULT_TIMEOUT = 300
#: The seed of the one-process runs; rank r of the N-process run gets SEED + r (the tracer adds it).
SEED = 1234
#: Folders not copied into a run's working folder: version control, caches, environments.
SKIPPED_FOLDERS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".venv",
        "venv",
    }
)
#: A working folder larger than this is copied with a note (each run copies it).
LARGE_FOLDER_BYTES = 1 << 30
#: Seconds given to the processes to dump their stacks after SIGUSR1, before they are killed.
STACK_DUMP_WAIT = 3.0
#: A source that asks for CUDA (by name, or an integer device) runs with fake CUDA on the CPU.
_ASKS_FOR_CUDA = re.compile(rb"cuda|\.to\(\s*\d|device\s*=\s*\d")
#: A source that imports Hugging Face Accelerate (accel-launch's test, runtime.launch_checks).
_IMPORTS_ACCELERATE = re.compile(rb"^[ \t]*(?:from|import)[ \t]+accelerate\b", re.MULTILINE)


class VerifyFailure(Exception):
    """The tool itself could not verify (the conversion failed, a run could not start): exit 123."""


@dataclass(frozen=True)
class Settings:
    script: Path
    nproc: int = DEFAULT_NPROC
    converted: Path | None = None
    samples: int = DEFAULT_SAMPLES
    timeout: float = DEFAULT_TIMEOUT
    device: str = "cpu"
    script_args: tuple[str, ...] = ()
    keep: bool = False
    #: ``--samples`` was given: the budget is the user's, never raised.
    budget_given: bool = False


@dataclass
class Report:
    settings: Settings
    one_process: list[Verdict]
    n_processes: list[Verdict]
    findings: list[dict[str, Any]] = field(default_factory=list)
    scratch: Path | None = None
    notes: list[str] = field(default_factory=list)
    #: The original's step cadence the N-process run did not reach, if any.
    cadence: UnreachedCadence | None = None

    @property
    def verdicts(self) -> list[Verdict]:
        return self.one_process + self.n_processes

    @property
    def holds(self) -> bool:
        return all(item.holds for item in self.verdicts)

    def as_json(self) -> dict[str, Any]:
        return {
            "script": str(self.settings.script),
            "nproc": self.settings.nproc,
            "samples": self.settings.samples,
            "holds": self.holds,
            "one_process": [item.as_json() for item in self.one_process],
            "n_processes": [item.as_json() for item in self.n_processes],
            "findings": self.findings,
            "scratch": str(self.scratch) if self.scratch is not None else None,
            "notes": self.notes,
        }


# Conversion ------------------------------------------------------------------------------------


def package_root() -> Path:
    """The folder holding the ``accel_convert`` package (put on the runs' PYTHONPATH)."""
    return Path(__file__).resolve().parents[2]


def base_pythonpath(*first: Path) -> str:
    """``first`` folders, then the user's PYTHONPATH, then this package's root (when not already on it)."""
    user = [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]
    parts = [str(folder) for folder in first] + user
    root = str(package_root())
    if not any(os.path.realpath(part) == os.path.realpath(root) for part in parts):
        parts.append(root)
    return os.pathsep.join(parts)


def convert(script: Path, into: Path) -> list[dict[str, Any]]:
    """Convert ``script`` with its local modules into folder ``into`` (as ``-o DIR/`` does), in this
    process (its modules are loaded already); return the findings for a person (``--output-format
    json`` objects of the ACC9xx warnings)."""
    from accel_convert.converter.cli import main as convert_main

    out, err = io.StringIO(), io.StringIO()
    arguments = [str(script), "-o", f"{into}{os.sep}", "--output-format", "json", "-q"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = convert_main.main(arguments, prog_name="accel-convert", standalone_mode=False)
    if code not in (0, 1, None):
        raise VerifyFailure(f"converting {script} failed (exit {code}): {err.getvalue().strip()[-2000:]}")
    try:
        findings = json.loads(out.getvalue() or "[]")
    except json.JSONDecodeError:
        findings = []
    return [finding for finding in findings if not finding.get("fixed")]


def program_sources(script: Path) -> list[Path]:
    """The script and the Python files beside it and below (its local modules, roughly)."""
    return [script, *sorted(path for path in script.parent.glob("*.py") if path != script)]


def asks_for_cuda(paths: Sequence[Path]) -> bool:
    for path in paths:
        try:
            if _ASKS_FOR_CUDA.search(path.read_bytes()):
                return True
        except OSError:
            continue
    return False


# Working folders -------------------------------------------------------------------------------


def copy_working_folder(source: Path, target: Path, scratch: Path) -> None:
    """Copy the working folder (skipping version control, caches and the scratch folder itself);
    symbolic links stay links."""
    scratch_real = os.path.realpath(scratch)

    def ignored(folder: str, names: list[str]) -> set[str]:
        return {
            name
            for name in names
            if name in SKIPPED_FOLDERS
            or not _copyable(os.path.join(folder, name))
            or os.path.realpath(os.path.join(folder, name)) == scratch_real
        }

    shutil.copytree(source, target, symlinks=True, ignore=ignored, copy_function=_copy_if_present)


def _copyable(path: str) -> bool:
    """A file, a folder or a link. A socket, a pipe or a device (another program's, in a shared
    folder such as /tmp) holds nothing a run reads back, and copying one fails or blocks."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False  # removed since the folder was listed
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)


def _copy_if_present(source: str, target: str) -> str:
    """Copy a file that another program may remove meanwhile (its temporary files): one gone is
    not the working folder's data."""
    try:
        return shutil.copy2(source, target)
    except FileNotFoundError:
        return target


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in walk_files(folder))


def walk_files(folder: Path) -> Iterator[Path]:
    for root, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if name not in SKIPPED_FOLDERS]
        for name in files:
            path = Path(root, name)
            if not path.is_symlink():
                yield path


def stamps(folder: Path) -> dict[str, tuple[int, int]]:
    """Relative path → (size, modification time) of every file: what a run changes is what differs."""
    result = {}
    for path in walk_files(folder):
        info = path.stat()
        result[path.relative_to(folder).as_posix()] = (info.st_size, info.st_mtime_ns)
    return result


def changed_files(folder: Path, before: dict[str, tuple[int, int]]) -> dict[str, str]:
    """Files new or changed since ``before`` → their sha256."""
    result = {}
    for path, stamp in stamps(folder).items():
        if before.get(path) != stamp:
            result[path] = hashlib.sha256((folder / path).read_bytes()).hexdigest()
    return result


def overlay(conversion: Path, folder: Path) -> None:
    """Put the converted files over the originals in a run's working folder."""
    if conversion.is_file():
        raise ValueError("overlay takes a folder")
    for path in conversion.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = folder / path.relative_to(conversion)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


# Runs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    name: str
    command: list[str]
    folder: Path
    trace: Path
    env: dict[str, str]


def run_environment(settings: Settings, injection: Path, trace: Path, fake_cuda: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = base_pythonpath(injection)
    env["ACCEL_CONVERT_TRACE_DIR"] = str(trace)
    env["ACCEL_CONVERT_TRACE_SEED"] = str(SEED)
    env["ACCEL_CONVERT_TRACE_SAMPLES"] = str(settings.samples)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("ACCEL_CONVERT_TRACE_FAKE_CUDA", None)
    if fake_cuda:
        env["ACCEL_CONVERT_TRACE_FAKE_CUDA"] = "1"
    return env


@dataclass
class Running:
    """A run started: its process, when it started, and the folder's files before it."""

    plan: RunPlan
    process: subprocess.Popen[bytes]
    started: float
    before: dict[str, tuple[int, int]]


def start(plan: RunPlan) -> Running:
    plan.trace.mkdir(parents=True, exist_ok=True)
    before = stamps(plan.folder)
    with open(plan.trace.parent / "stdout.txt", "wb") as out, open(plan.trace.parent / "stderr.txt", "wb") as err:
        process = subprocess.Popen(
            plan.command, cwd=plan.folder, env=plan.env, stdout=out, stderr=err, start_new_session=True
        )
    return Running(plan, process, time.monotonic(), before)


def finish(running: Running, timeout: float) -> RunTrace:
    """Wait for a run; past ``timeout`` (from its start), ask every traced process for its stacks,
    then stop the whole group."""
    plan, process = running.plan, running.process
    timed_out = False
    try:
        process.wait(timeout=max(0.0, timeout - (time.monotonic() - running.started)))
    except subprocess.TimeoutExpired:
        timed_out = True
        dump_stacks(plan.trace)
        stop_group(process)
    except BaseException:  # Ctrl-C: the run is in its own session, so the signal did not reach it
        stop_group(process)
        raise
    stderr = (plan.trace.parent / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    return RunTrace(
        plan.name,
        read_records(plan.trace),
        returncode=process.returncode if not timed_out else -1,
        timed_out=timed_out,
        stacks=read_stacks(plan.trace),
        files=changed_files(plan.folder, running.before),
        stderr_tail=stderr[-4000:],
    )


def dump_stacks(trace: Path) -> None:
    for pids in read_records(trace).values():
        for record in pids:
            if record.get("kind") == "start" and isinstance(record.get("pid"), int):
                try:
                    os.kill(record["pid"], signal.SIGUSR1)
                except OSError:
                    pass
    time.sleep(STACK_DUMP_WAIT)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.wait()


def read_records(trace: Path) -> dict[int, list[dict[str, Any]]]:
    """Every ``rank-R.jsonl`` of a trace folder; a line cut by a kill is skipped."""
    records: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(trace.glob("rank-*.jsonl")):
        rank = int(path.stem.split("-", 1)[1])
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        records[rank] = [record for record in map(parse_line, lines) if record is not None]
    return records


def parse_line(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def read_stacks(trace: Path) -> dict[int, str]:
    stacks = {}
    for path in sorted(trace.glob("rank-*.stacks")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            stacks[int(path.stem.split("-", 1)[1])] = text
    return stacks


def injection_text() -> str | None:
    """The tracer's ``sitecustomize.py`` text, its module's ``SITECUSTOMIZE`` constant, read from
    the source beside this package without importing it (importing the tracer imports torch: a few
    seconds on every verify); None when the module holds no such constant."""
    source = Path(__file__).resolve().parents[1] / "runtime" / "tracer.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(target, ast.Name) and target.id == "SITECUSTOMIZE" for target in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def write_injection(folder: Path) -> None:
    """The tracer's ``sitecustomize.py``: its text read from the tracer's source, else written by
    the tracer itself in a subprocess (``python -m accel_convert.runtime.tracer inject``)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = injection_text()
    if text is not None:
        (folder / "sitecustomize.py").write_text(text, encoding="utf-8")
        return
    command = [sys.executable, "-m", "accel_convert.runtime.tracer", "inject", str(folder)]
    env = {**os.environ, "PYTHONPATH": base_pythonpath()}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0 or not (folder / "sitecustomize.py").exists():
        raise VerifyFailure(f"the tracer could not be injected: {done.stderr.strip()[-2000:]}")


# The whole verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where the script is, relative to the working folder that each run copies."""

    cwd: Path
    script: Path  # absolute
    inside: bool

    @property
    def relative(self) -> Path:
        return self.script.relative_to(self.cwd)


def layout_of(script: Path) -> Layout:
    cwd = Path.cwd().resolve()
    absolute = script.resolve()
    return Layout(cwd, absolute, absolute.is_relative_to(cwd))


def prepare_conversion(settings: Settings, scratch: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A folder holding the converted program, laid out as the script's own folder, and the findings."""
    folder = scratch / "converted"
    if settings.converted is None:
        return folder, convert(settings.script, folder)
    if settings.converted.is_dir():
        shutil.copytree(settings.converted, folder)
    else:
        folder.mkdir(parents=True)
        shutil.copy2(settings.converted, folder / settings.script.name)
    return folder, []


def plan_run(settings: Settings, layout: Layout, scratch: Path, name: str, conversion: Path | None) -> RunPlan:
    """The run's working folder (a copy, with the converted program laid over the script's folder)
    and its command."""
    folder = scratch / name / "work"
    copy_working_folder(layout.cwd, folder, scratch)
    if layout.inside:
        script = str(layout.relative)
        if conversion is not None:
            overlay(conversion, folder / layout.relative.parent)
    elif conversion is not None:
        script = str(conversion / layout.script.name)
    else:
        script = str(layout.script)
    launcher = [sys.executable]
    if name == "converted-n":
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(settings.nproc)]
    env = run_environment(settings, scratch / "injection", scratch / name / "trace", fake_cuda(settings, layout))
    if settings.device == "cpu" and uses_accelerate([*program_sources(layout.script), *python_files(conversion)]):
        # Hugging Face Accelerate on a machine without GPUs runs every process alone unless told
        # the CPU is meant (what ``accelerate launch --cpu`` and accel-launch export).
        env.setdefault("ACCELERATE_USE_CPU", "1")
    return RunPlan(name, [*launcher, script, *settings.script_args], folder, scratch / name / "trace", env)


def python_files(folder: Path | None) -> list[Path]:
    return sorted(folder.rglob("*.py")) if folder is not None else []


def uses_accelerate(paths: Sequence[Path]) -> bool:
    """Whether a source of the program imports Hugging Face Accelerate (a script written for it,
    or a ``--target accelerate`` conversion)."""
    for path in paths:
        try:
            if _IMPORTS_ACCELERATE.search(path.read_bytes()):
                return True
        except OSError:
            continue
    return False


def fake_cuda(settings: Settings, layout: Layout) -> bool:
    return settings.device == "cpu" and asks_for_cuda(program_sources(layout.script))


RUN_NAMES = {
    "original": "the original (1 process)",
    "converted-1": "the converted script (1 process)",
    "converted-n": "the converted script ({nproc} processes)",
}


def verify(settings: Settings, scratch: Path) -> Report:
    """Convert, run three times, judge. When an N-process verdict fails and the N-process run never
    reached a step at which the original evaluated or wrote a file in the middle of a pass over its
    training data (each of its steps takes a batch on every process: a smaller budget per rank), the
    budget can explain it: with the default budget, verify again with one large enough; with the
    user's ``--samples``, say so and how much to give."""
    report = verify_on_budget(settings, scratch)
    raised = raised_budget(report)
    if raised is not None and report.cadence is not None:
        note = budget_note(report, report.cadence, raised)
        report = verify_on_budget(replace(settings, samples=raised), scratch / f"samples-{raised}")
        report.notes.insert(0, note)
    if report.cadence is not None:
        explain_unreached_cadence(report.n_processes, report.cadence, settings.nproc, budget_advice(report))
    return report


def budget_advice(report: Report) -> str:
    """What to do when the N-process run missed the original's step cadence."""
    cadence = report.cadence
    if cadence is not None and cadence.budget_cut:
        return f"rerun with --samples {budget_for(report.settings.samples, cadence)} or more"
    return (
        "each rank takes 1/N of the original's optimizer steps; convert with --split-batches to keep "
        "the original's steps, or make the script work when that step is not reached"
    )


def budget_for(samples: int, cadence: UnreachedCadence) -> int:
    """A budget under which each rank takes as many steps as the original had at its cadence."""
    return samples * math.ceil(cadence.step / cadence.taken)


def raised_budget(report: Report) -> int | None:
    """The budget to verify again with, or None (the user's own, every N-process verdict holds,
    no cadence missed, or a budget past ``MAX_BUDGET_FACTOR`` times the default)."""
    settings, cadence = report.settings, report.cadence
    if cadence is None or not cadence.budget_cut or settings.budget_given:
        return None
    if all(item.holds for item in report.n_processes):
        return None
    raised = budget_for(settings.samples, cadence)
    return raised if raised <= settings.samples * MAX_BUDGET_FACTOR else None


def budget_note(first: Report, cadence: UnreachedCadence, raised: int) -> str:
    failed = ", ".join(item.key for item in first.n_processes if not item.holds)
    return (
        f"with the default budget ({first.settings.samples} samples) {failed} failed, and "
        f"{cadence.explanation(first.settings.nproc)}; verified again with --samples {raised}"
    )


def verify_on_budget(settings: Settings, scratch: Path) -> Report:
    """Convert, run three times on ``settings.samples``, judge. The original runs while the script
    is converted."""
    layout = layout_of(settings.script)
    write_injection(scratch / "injection")
    original = start(plan_run(settings, layout, scratch, "original", None))
    try:
        conversion, findings = prepare_conversion(settings, scratch)
    except BaseException:
        stop_group(original.process)
        raise
    traces = {"original": finish(original, settings.timeout)}
    for name in ("converted-1", "converted-n"):
        traces[name] = finish(start(plan_run(settings, layout, scratch, name, conversion)), settings.timeout)
    for name, trace in traces.items():
        trace.name = RUN_NAMES[name].format(nproc=settings.nproc)
    if not any(traces["original"].records.values()) and traces["original"].returncode == 0:
        raise VerifyFailure("the tracer recorded nothing for the original run (was sitecustomize replaced?)")
    one = one_process_verdicts(traces["original"], traces["converted-1"])
    many = n_process_verdicts(traces["original"], traces["converted-n"], settings.nproc)
    reason = left_as_written(settings, conversion, findings)
    if reason is not None:
        many = as_written_verdicts(many, reason, settings.nproc)
    attach_findings(one + many, findings)
    notes = size_notes(layout.cwd) + tracer_errors(traces.values())
    cadence = unreached_cadence(traces["original"], traces["converted-n"], settings.samples)
    return Report(settings, one, many, findings, scratch, notes, cadence)


def left_as_written(settings: Settings, conversion: Path, findings: Sequence[dict[str, Any]]) -> str | None:
    """The converter's reason for leaving the program as written (every file of the conversion
    the same bytes as its source, and warnings saying why: a model that trains itself, a script
    that starts its own processes), or None: it converted something, verify was handed a
    conversion (``--converted``), or nothing was reported (a script written for Accelerate
    already, whose N-process run is judged in full)."""
    if settings.converted is not None or not findings:
        return None
    source_folder = settings.script.resolve().parent
    for path in python_files(conversion):
        source = source_folder / path.relative_to(conversion)
        if not source.is_file() or source.read_bytes() != path.read_bytes():
            return None
    reasons = dict.fromkeys(f"{finding.get('code')} {finding.get('message')}" for finding in findings)
    return "; ".join(reasons)


def tracer_errors(traces: Iterable[RunTrace]) -> list[str]:
    """What the tracer could not record (``tracer_error`` records): a verdict may lack evidence."""
    return [
        f"{trace.name}, rank {record.get('rank')}: the tracer failed in {record.get('where')}: {record.get('error')}"
        for trace in traces
        for record in trace.of("tracer_error")
    ]


def size_notes(folder: Path) -> list[str]:
    size = folder_size(folder)
    if size > LARGE_FOLDER_BYTES:
        return [f"the working folder ({size / (1 << 30):.1f} GiB) is copied for each of the three runs"]
    return []


# Output ----------------------------------------------------------------------------------------


def render_text(report: Report) -> list[str]:
    settings = report.settings
    lines = [
        f"accel-convert verify: {settings.script} ({settings.nproc} processes, {settings.samples} samples per loader)"
    ]
    lines += [f"note: {note}" for note in report.notes]
    lines.append("One process: the converted script does what the original does")
    lines += [line for item in report.one_process for line in verdict_lines(item)]
    if any(item.key == "left-as-written" for item in report.n_processes):
        lines.append(f"{settings.nproc} processes: the script as written on every rank ends and exits 0")
    else:
        lines.append(f"{settings.nproc} processes: the work is shared, nothing else changes")
    lines += [line for item in report.n_processes for line in verdict_lines(item)]
    failed = [item for item in report.verdicts if not item.holds]
    if failed:
        lines.append(f"{len(failed)} of {len(report.verdicts)} verdicts failed (see docs/verify.md)")
    else:
        lines.append(f"all {len(report.verdicts)} verdicts hold")
    if report.scratch is not None:
        lines.append(f"the runs' folders and traces are kept in {report.scratch}")
    return lines


def verdict_lines(item: Verdict) -> list[str]:
    mark = "✓" if item.holds else "✗"
    lines = [f"  {mark} {item.key}: {item.title}"]
    for evidence in item.evidence:
        lines += ["      " + line for line in evidence.splitlines()]
    if item.site:
        lines.append(f"      at {item.site}")
    for finding in item.findings:
        where = f"{finding.get('filename')}:{finding.get('line')}:{finding.get('column')}"
        lines.append(f"      {where}: {finding.get('code')} {finding.get('message')}")
    return lines


# Command ---------------------------------------------------------------------------------------


@click.command(
    name="verify",
    context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": True},
    epilog=(
        "\b\nExit codes:\n  0    every verdict holds\n  1    a verdict does not hold\n"
        "  2    usage error\n  123  the tool itself failed (the conversion, the tracer)\n"
        "\b\nExample:\n  accel-convert verify train.py --nproc 2 --samples 128 -- --epochs 1\n"
        "See docs/verify.md."
    ),
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT ARGS...]")
@click.option(
    "--nproc", type=click.IntRange(min=2), default=DEFAULT_NPROC, show_default=True, help="Processes of the N-run."
)
@click.option(
    "--converted",
    type=click.Path(exists=True, path_type=Path),
    metavar="OUT.py|DIR",
    help="Verify this conversion (a script, or a folder as -o DIR/ writes) instead of converting SCRIPT.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=None,
    help=(
        f"Cut every DataLoader's dataset to its first M samples (the same in every run). Default "
        f"{DEFAULT_SAMPLES}, raised (up to {MAX_BUDGET_FACTOR}x) when a failure on N processes comes from "
        "a step the original evaluated or saved at that no rank reached."
    ),
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    metavar="S",
    help="Seconds each run may take; past it the stacks of every rank are shown (a hang) and the run stopped.",
)
@click.option(
    "--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True, help="json: for CI."
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="cpu: a script that asks for CUDA runs on a fake CUDA on the CPU. cuda: on the machine's GPUs.",
)
@click.option("--keep", is_flag=True, help="Keep the runs' folders and traces even when every verdict holds.")
def verify_command(script: Path, script_args: tuple[str, ...], output_format: str, **flags: Any) -> None:
    """Run SCRIPT and its conversion on 1 and N processes and check the conversion changed nothing
    but the sharing of the work.

    \b
    Three runs, each in its own copy of the working folder, under a tracer:
    the original on 1 process, the converted script on 1 process (same seed),
    the converted on N processes (torchrun, Gloo on the CPU, a seed per rank).
    Your PYTHONPATH, sitecustomize, environment and data are kept.

    \b
    Verdicts, each ✓ or ✗ with its evidence, the source position and the
    conversion's ACC9xx warnings that can explain it:
      1 process:   runs, losses (every step), stdout (timings masked),
                   files (same bytes), parameters (after the last step)
      N processes: no-hang (stacks of every rank), no-crash, in-sync
                   (parameters after every step), prints-once, files-once,
                   reads-complete, evaluation-counts, own-device
      A program the converter left as written (its reported reason):
                   no-hang, no-crash and left-as-written on N processes
    """
    budget_given = flags["samples"] is not None
    flags["samples"] = flags["samples"] or DEFAULT_SAMPLES
    settings = Settings(script=script, script_args=tuple(script_args), budget_given=budget_given, **flags)
    scratch = Path(tempfile.mkdtemp(prefix="accel-convert-verify-"))
    try:
        report = verify(settings, scratch)
    except VerifyFailure as failure:
        click.echo(f"accel-convert verify: error: {failure}", err=True)
        click.echo(f"the runs' folders are kept in {scratch}", err=True)
        sys.exit(EXIT_TOOL_FAILED)
    except Exception as error:  # the tool's own failure, not the script's
        click.echo(f"accel-convert verify: internal error: {type(error).__name__}: {error}", err=True)
        sys.exit(EXIT_TOOL_FAILED)
    if report.holds and not settings.keep:
        shutil.rmtree(scratch, ignore_errors=True)
        report.scratch = None
    if output_format == "json":
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        click.echo("\n".join(render_text(report)))
    sys.exit(EXIT_OK if report.holds else EXIT_FAILED_VERDICT)
