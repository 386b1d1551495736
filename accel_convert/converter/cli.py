"""The ``accel-convert`` command: flags and config → a plan → convert each file → report.

Every decision that could refuse the run (missing file, ``-o`` equal to an input, several inputs
with nowhere to put them) is made before the first file is converted, so a usage error (exit 2)
never leaves a file written. After that, files are independent: one failure is reported and the
rest still run.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from accel_convert.records import record

# What is imported below lives for the whole run (libcst's modules alone are some 35,000
# objects, the converter's and the rules' classes more): the collector stays off while it loads
# rather than walking it again at every collection the imports trigger (about 3% of a
# one-file run; benchmarks/README.md), and is left as it was found.
_COLLECTING = gc.isenabled()
gc.disable()
try:
    import click
    from click.core import ParameterSource

    from accel_convert.codemods import Options
    from accel_convert.converter import parallel
    from accel_convert.converter.cache import CheckCache, NoCache, cache_folder, tool_version
    from accel_convert.converter.config import ConfigError, load_config
    from accel_convert.converter.files import (
        DEFAULT_EXCLUDE,
        Exclusions,
        Patterns,
        ReadOnlyFile,
        WrittenFiles,
        discover,
        same_file,
        write_if_different,
        write_set,
    )
    from accel_convert.converter.pipeline import (
        Conversion,
        ConversionError,
        convert_source,
        mentions_torch,
        one_line,
        quiet_compiler_warnings,
    )
    from accel_convert.converter.project import ProgramFile, convert_program_files, folder_entries, program_files
    from accel_convert.converter.report import (
        Finding,
        Output,
        ProgressBar,
        Reporter,
        batch_sentence,
        code_rationales,
        codes_listing,
        explain_lines,
        print_diff,
        stale_output_finding,
        unified_diff,
        wants_colour,
    )
finally:
    if _COLLECTING:
        gc.enable()


EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 123
#: 128 + the signal's number, as shells report a command ended by that signal.
EXIT_INTERRUPTED, EXIT_OUTPUT_CLOSED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGPIPE, 128 + signal.SIGTERM

EXIT_CODES = [
    ("0", "success; with --check, every script is ready (or its -o output up to date)"),
    ("1", "--check found pending rewrites or a missing/stale -o output; with --strict, also ACC9xx warnings"),
    (
        "2",
        "usage error: bad flag or config, missing file, -o equal to the input without --in-place, a script whose "
        "local modules are converted with it sent to stdout or to one file",
    ),
    (
        "123",
        (
            "a file could not be converted: syntax error, undecodable bytes, nesting too deep, symbolic link "
            "loop, read-only file under --in-place, a local module two entry scripts need converted differently, "
            "internal failure (a program of several modules is then written not at all)"
        ),
    ),
    ("130", "interrupted (Ctrl-C); 143: terminated (SIGTERM); no file is left half-written"),
    ("141", "stdout or stderr was closed (| head): the run stops quietly"),
]

STDIN = "-"
#: A progress bar is shown (on a terminal) from this many files on: below it the run is over
#: before a bar would be read.
PROGRESS_MIN_FILES = 6


#: The command is the process's own (the console script, ``python -m``): a SIGTERM ends it with
#: exit code 143. Called in-process with arguments, the signal goes on to the caller's handler.
OWN_PROCESS: ContextVar[bool] = ContextVar("OWN_PROCESS", default=False)


class UsageProblem(Exception):
    """A reason to refuse the whole run before anything is converted (exit 2)."""


class NothingToConvert(Exception):
    """The folders given hold no Python file (a wrong path, a pattern that excluded everything):
    said on stderr, exit 0, as ruff and black do."""


class OutputClosed(Exception):
    """The reader of stdout or stderr went away (``accel-convert --diff | head``)."""


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no ``except Exception``
    swallows it and every ``finally`` (the temporary file of a write in progress) runs."""


def code_docs() -> list[Any]:
    """The codemods' self-documentation; imported late so plain runs never pay for it."""
    from accel_convert.codemods.engine.registry import code_docs as registry_code_docs

    return registry_code_docs()


class CommandWithCodes(click.Command):
    """``--help`` ends with the exit codes and every code, generated from the codemods."""

    def main(self, args: Sequence[str] | None = None, *rest: Any, **options: Any) -> Any:
        """Run the command; ``args`` None means the process's own command line (the console
        script, ``python -m accel_convert.converter``), and then the process ends with the command.
        ``accel-convert verify ...`` is the verify command (a file named ``verify`` is ``./verify``)."""
        given = list(args) if args is not None else sys.argv[1:]
        if given[:1] == ["verify"]:
            from accel_convert.converter.verify import verify_command

            prog_name = options.pop("prog_name", None) or (rest[0] if rest else None) or "accel-convert"
            return verify_command.main(given[1:], f"{prog_name} verify", **options)
        if args is not None:
            return super().main(args, *rest, **options)
        token = OWN_PROCESS.set(True)
        ending: SystemExit | None = None
        try:
            return super().main(args, *rest, **options)
        except SystemExit as exiting:
            ending = exiting
            raise
        finally:
            OWN_PROCESS.reset(token)
            # The interpreter's last act is a full collection over every object still alive
            # (about 20 ms with libcst's modules loaded) to free memory the OS takes back anyway;
            # frozen objects are skipped.
            gc.freeze()
            if ending is not None:
                end_process(ending)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Exit codes"):
            formatter.write_dl(EXIT_CODES)
        with formatter.section("Codes"):
            # The list of every code is long (it made --help 194 lines): it has its own flag.
            formatter.write_text(
                f"{len(code_docs())} codes: accel-convert --list-codes lists them (with -v: before/after examples); "
                "accel-convert --explain CODE (or NAME, such as metrics) explains one."
            )
        super().format_epilog(ctx, formatter)


def end_process(ending: SystemExit) -> None:
    """End the process now with ``ending``'s code, once its exit handlers have run and its output
    is flushed, without the interpreter's teardown, which frees every module and object one by
    one (libcst's modules and the converter's: about 7 ms of CPU after a one-file run) for memory
    the OS takes back anyway; mypy ends the same way. Returns, for the interpreter's own exit,
    where that is not safe: a thread still running (the interpreter waits for it), a code that is
    not a number (the interpreter prints it), or output that cannot be flushed (it reports that).
    """
    code = ending.code
    if not (code is None or isinstance(code, int)) or threading.active_count() > 1 or not _flushed():
        return
    import atexit

    atexit._run_exitfuncs()  # noqa: SLF001 - what the interpreter runs before its teardown
    if not _flushed():  # an exit handler wrote to a closed pipe: the interpreter's own code for it
        silence_closed_streams()
        code = EXIT_UNFLUSHED
    os._exit(code or 0)


#: The code the interpreter ends with when it cannot flush its output at exit.
EXIT_UNFLUSHED = 120


def _flushed() -> bool:
    """Whether every output stream (the process's own and any replacement) could be flushed."""
    try:
        for stream in {id(each): each for each in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True


@record(frozen=True)
class Job:
    """One file to convert, and where its result goes (``None``: stdout, or nowhere)."""

    source: Path | None  # None: stdin
    shown_name: str
    target: Path | None
    #: Why the file cannot be read (a symbolic link loop), found while discovering it.
    problem: str | None = None
    #: Named on the command line (not found in a folder): a problem is then an error.
    named: bool = True
    #: An entry script converted with the local modules it imports (see converter.project): every
    #: file of the program (the entry first) and where each one's result goes.
    program: tuple[ProgramFile, ...] = ()
    program_targets: tuple[Path | None, ...] = ()
    #: A file converted alone: the local modules it imports, transitively (converter.project's
    #: resolution, made once while planning): their bytes are part of its cache key.
    local_modules: tuple[ProgramFile, ...] = ()


@record(frozen=True)
class Plan:
    """The run, fully decided: what to read, what to do with the result, how to report."""

    jobs: list[Job]
    options: Options
    check: bool
    diff: bool
    strict: bool
    to_stdout: bool
    #: Nothing is written anywhere (``--check``, ``--diff``): the report says "would convert".
    writes: bool = True


def split_codes(values: Sequence[str]) -> tuple[str, ...]:
    """``--select ACC1,ACC9 --select ACC105`` → ``("ACC1", "ACC9", "ACC105")``; a former code that
    is now several (``ACC913``) stands for all of them."""
    codes = tuple(code.upper() for code in split_list(values))
    if not codes:
        return codes
    from accel_convert.codemods.engine.registry import code_aliases

    aliases = code_aliases()
    return tuple(dict.fromkeys(new for code in codes for new in aliases.get(code, (code,))))


def split_list(values: Sequence[str]) -> tuple[str, ...]:
    """Repeated and comma-separated values, one list: ``("a,b", "c")`` → ``("a", "b", "c")``."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def check_code_prefixes(prefixes: Sequence[str], flag: str) -> None:
    """Refuse a --select/--ignore prefix that matches no known code (a typo would silently
    switch everything off or nothing)."""
    if not prefixes:
        return
    known = [doc.code for doc in code_docs()]
    for prefix in prefixes:
        if not any(code.startswith(prefix) for code in known):
            raise UsageProblem(f"{flag} {prefix}: matches no code (see accel-convert --list-codes)")


#: Settings a config file adds to the command line's instead of giving a default for it.
CONFIG_EXTENDS = ("extend_exclude",)


def apply_config(ctx: click.Context, flags: dict[str, Any], start: Path) -> Exclusions:
    """Fill every flag the user did not give from ``[tool.accel-convert]``; return what folder
    searches exclude (patterns from the config are relative to its folder)."""
    try:
        config = load_config(start)
    except ConfigError as error:
        raise UsageProblem(str(error)) from None
    from_config: dict[str, Any] = {}
    for name, value in config.values.items():
        if name in CONFIG_EXTENDS or ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None):
            from_config[name] = value
            if name not in CONFIG_EXTENDS:
                flags[name] = value
    config_dir = config.path.parent if config.path is not None else Path.cwd()
    cwd = Path.cwd()
    if "exclude" in from_config:
        patterns = [Patterns.of(config_dir, split_list(from_config["exclude"]))]
    elif flags["exclude"]:
        patterns = [Patterns.of(cwd, split_list(flags["exclude"]))]
    else:
        patterns = [Patterns.of(cwd, DEFAULT_EXCLUDE)]
    if from_config.get("extend_exclude"):
        patterns.append(Patterns.of(config_dir, split_list(from_config["extend_exclude"])))
    if flags["extend_exclude"]:
        patterns.append(Patterns.of(cwd, split_list(flags["extend_exclude"])))
    return Exclusions(tuple(patterns), ignore_files=flags["respect_gitignore"])


def output_target(file: Path, root: Path, output: Path, into_folder: bool) -> Path:
    """Where ``-o`` puts one file: OUT itself, or inside folder OUT mirroring its input folder."""
    if not into_folder:
        return output
    return output / (file.relative_to(root) if root.is_dir() else file.name)


def several_inputs(sources: Sequence[str]) -> bool:
    """More than one file, or a folder (however many files it holds: the answer must not
    depend on what a folder happens to contain today)."""
    return sources != (STDIN,) and (len(sources) > 1 or any(Path(source).is_dir() for source in sources))


def plan_file_jobs(
    sources: Sequence[str],
    output: Path | None,
    in_place: bool,
    exclusions: Exclusions | None = None,
    *,
    output_is_folder: bool = False,
    writes_set: bool = True,
) -> list[Job]:
    """Check the inputs exist and decide every output path, refusing clashes up front.
    ``output_is_folder``: ``-o`` was written ending in ``/``; ``writes_set``: the run may write
    or show several files (not a single script on stdout)."""
    paths = [Path(source) for source in sources]
    for path in paths:
        if not path.exists() and not path.is_symlink():  # a link loop is reported per file
            raise UsageProblem(f"{path}: no such file or directory")
    several = several_inputs(sources)
    if output is not None and several and output.exists() and not output.is_dir():
        raise UsageProblem(f"-o {output}: with several inputs, -o must be a directory")
    into_folder = output is not None and (several or output.is_dir() or output_is_folder)
    discovered = discover(paths, exclusions)
    resolved: dict[str, tuple[ProgramFile, ...]] = {}
    programs = plan_programs(discovered, every_local_module=into_folder, resolved=resolved)
    covered = {os.path.realpath(file.path) for files in programs.values() for file in files[1:]}
    jobs: list[Job] = []
    claimed: dict[Path, Path] = {}
    for file, root, problem in discovered:
        program = programs.get(os.path.realpath(file), ())
        if program:
            jobs.append(plan_program_job(file, root, program, output, in_place, into_folder, writes_set, claimed))
        elif os.path.realpath(file) not in covered:  # a local module of an entry script: converted with it
            target = file if in_place and output is None else None
            if output is not None:
                target = output_target(file, root, output, into_folder)
                claim_target(file, target, output, in_place, claimed)
            local_modules = resolved.get(os.path.realpath(file), ())[1:]
            jobs.append(Job(file, str(file), target, problem, named=file == root, local_modules=local_modules))
    return jobs


def claim_target(file: Path, target: Path, output: Path, in_place: bool, claimed: dict[Path, Path]) -> None:
    """Record that ``file`` is written to ``target`` (in ``claimed``, by real path); refuse a
    target that is the input itself without ``--in-place``, or that another input is written to."""
    if same_file(target, file) and not in_place:
        raise UsageProblem(f"{file}: -o {target} is the input itself; add --in-place to overwrite it")
    previous = claimed.setdefault(Path(os.path.realpath(target)), file)
    if previous != file:
        raise UsageProblem(f"-o {output}: {previous} and {file} would both be written to {target}")


def plan_programs(
    discovered: Sequence[tuple[Path, Path, str | None]],
    *,
    every_local_module: bool = False,
    resolved: dict[str, tuple[ProgramFile, ...]] | None = None,
) -> dict[str, tuple[ProgramFile, ...]]:
    """Entry scripts (by real path) that import local modules using torch → their program's
    files (the entry first). Entries: files named or found that have a ``__main__`` block or that
    no other input imports, but not one another entry's program imports (it is converted there). ``every_local_module`` (output into a folder): modules without torch
    count too, so the folder gets them and the converted entry can import them. ``resolved``, when
    given, receives every readable file's own program (by real path), entry or not."""
    readable = [file for file, _, problem in discovered if problem is None]
    programs: dict[str, tuple[ProgramFile, ...]] = {}
    with quiet_compiler_warnings():  # the user's code is parsed: its warnings are not ours to show
        every_program = {file: program_files(file) for file in readable}
        entries = folder_entries(readable, every_program)
    if resolved is not None:
        resolved.update((os.path.realpath(file), tuple(files)) for file, files in every_program.items())
    for entry, files in entries.items():
        if len(files) > 1 and (every_local_module or any(_mentions_torch(file.path) for file in files[1:])):
            programs[os.path.realpath(entry)] = tuple(files)
    return programs


def _mentions_torch(path: Path) -> bool:
    try:
        return mentions_torch(path.read_bytes())
    except OSError:
        return True  # unreadable: the conversion reports it


def plan_program_job(
    entry: Path,
    root: Path,
    program: tuple[ProgramFile, ...],
    output: Path | None,
    in_place: bool,
    into_folder: bool,
    writes_set: bool,
    claimed: dict[Path, Path],
) -> Job:
    """An entry script with its local modules: every file's target decided now."""
    around = program_folder(program)
    names = ", ".join(os.path.relpath(file.path, entry.parent) for file in program[1:])
    if not writes_set:
        raise UsageProblem(
            f"{entry} imports local modules converted with it ({names}): write the set with -o DIR/ "
            "or --in-place, or look at it with --diff or --check"
        )
    if output is not None and not into_folder:
        raise UsageProblem(
            f"{entry} imports local modules converted with it ({names}): -o must be a folder (end it with /)"
        )
    targets: list[Path | None] = []
    for file in program:
        target: Path | None = file.path if in_place and output is None else None
        if output is not None:
            base = root if root.is_dir() and file.path.resolve().is_relative_to(root.resolve()) else around
            target = output / Path(os.path.abspath(file.path)).relative_to(os.path.abspath(base))
            claim_target(file.path, target, output, in_place, claimed)
        targets.append(target)
    return Job(entry, str(entry), targets[0], named=entry == root, program=program, program_targets=tuple(targets))


def program_folder(program: Sequence[ProgramFile]) -> Path:
    """The innermost folder holding every file of a program: the entry's own, unless it imports
    modules from above it (``pkg/train.py`` importing ``utils.general`` beside ``pkg/``)."""
    return Path(os.path.commonpath([os.path.abspath(file.path.parent) for file in program]))


def build_plan(ctx: click.Context, flags: dict[str, Any], exclusions: Exclusions | None = None) -> Plan:
    """Turn flags (already merged with config) into a Plan, or raise UsageProblem."""
    sources: tuple[str, ...] = flags["sources"]
    raw_output: str | Path | None = flags["output"]
    output: Path | None = Path(raw_output) if raw_output is not None else None
    check, diff, in_place = flags["check"], flags["diff"], flags["in_place"]
    refuse_contradicting_flags(sources, output, check, diff, in_place)
    if STDIN in sources:
        jobs = [plan_stdin_job(sources, flags["stdin_filename"], output, in_place)]
    else:
        jobs = plan_file_jobs(
            sources,
            output,
            in_place,
            exclusions,
            # ``-o out/``: a folder even when it does not exist yet (Path drops the slash).
            output_is_folder=isinstance(raw_output, str) and raw_output.endswith(("/", os.sep)),
            writes_set=in_place or output is not None or check or diff,
        )
    writes_files = in_place or output is not None
    if not jobs:
        folders = ", ".join(dict.fromkeys(source for source in sources if Path(source).is_dir()))
        raise NothingToConvert(f"no Python file found in {folders} (nothing to convert)")
    to_stdout = not (writes_files or check or diff)
    if several_inputs(sources) and to_stdout:
        raise UsageProblem("several inputs need --in-place, -o DIR, --check or --diff (stdout takes one script)")
    options = Options(
        target=flags["target"],
        oom_retry=flags["oom_retry"],
        fsdp=flags["fsdp"],
        split_batches=flags["split_batches"],
        launcher_processes=launcher_option(flags, jobs),
        select=split_codes(flags["select"]),
        ignore=split_codes(flags["ignore"]),
    )
    check_code_prefixes(options.select, "--select")
    check_code_prefixes(options.ignore, "--ignore")
    return Plan(jobs, options, check, diff, flags["strict"], to_stdout, writes=not (check or diff))


def refuse_contradicting_flags(
    sources: Sequence[str], output: Path | None, check: bool, diff: bool, in_place: bool
) -> None:
    """No input, or ``--in-place`` with ``--check``, ``--diff`` or an ``-o`` other than the input."""
    if not sources:
        raise UsageProblem("no input: pass files, folders, or - to read stdin")
    if in_place and (check or diff):
        raise UsageProblem("--in-place writes files, --check and --diff write nothing: choose one")
    if (
        in_place
        and output is not None
        and not all(Path(source).exists() and same_file(output, Path(source)) for source in sources)
    ):
        raise UsageProblem("use either --in-place or -o OUT, not both")


def launcher_option(flags: dict[str, Any], jobs: Sequence[Job]) -> int | None:
    """``--launcher [--num-processes N]``: the processes notebook_launcher starts (None without
    it); only notebooks have cells to restructure."""
    processes: int | None = flags.get("num_processes")
    if not flags.get("launcher"):
        if processes is not None:
            raise UsageProblem("--num-processes is the process count of --launcher: add --launcher")
        return None
    for job in jobs:
        if job.named and not job.shown_name.lower().endswith(".ipynb"):
            raise UsageProblem(
                f"--launcher restructures Jupyter notebooks (.ipynb), not {job.shown_name}: a script is launched "
                "with accel-launch or torchrun"
            )
    return processes if processes is not None else 2


def plan_stdin_job(sources: Sequence[str], stdin_filename: str | None, output: Path | None, in_place: bool) -> Job:
    """``-`` reads stdin; it cannot be mixed with files or rewritten in place."""
    if len(sources) > 1:
        raise UsageProblem("- (stdin) cannot be combined with other inputs")
    if in_place:
        raise UsageProblem("--in-place needs files; stdin cannot be rewritten (use -o OUT or stdout)")
    return Job(None, stdin_filename or "<stdin>", output)


def config_start(sources: Sequence[str], stdin_filename: str | None) -> Path:
    """Where the search for pyproject.toml begins: the first file (or the stdin file's name)."""
    if sources and sources[0] == STDIN:
        return Path(stdin_filename) if stdin_filename else Path.cwd()
    return Path(sources[0]) if sources else Path.cwd()


class Runner:
    """Carries out a Plan, file by file, reporting through a Reporter."""

    def __init__(
        self,
        plan: Plan,
        reporter: Reporter,
        color: bool,
        progress: bool = False,
        conversions: parallel.Conversions | None = None,
        cache: NoCache | None = None,
    ) -> None:
        self.plan = plan
        #: Results kept from an earlier ``--check`` (converter.cache), and kept for the next one.
        self.cache = cache or NoCache()
        #: Where each file's conversion comes from: this process, or workers (``--jobs``).
        self.conversions = conversions or parallel.Conversions()
        self.reporter = reporter
        self.color = color
        #: Program jobs (by entry) → their conversions, or why they cannot be written.
        self.programs: dict[str, list[Conversion] | ConversionError] = {}
        #: Library files already delivered by an earlier program (a library two entries share).
        self.delivered: set[str] = set()
        self.progress = progress

    def run(self) -> int:
        """Every job, then the summary. A closed stdout or stderr (``| head``) ends the run:
        :class:`OutputClosed` is raised for the command to exit quietly."""
        try:
            code = self.run_all()
        except BaseException:  # Ctrl-C and SIGTERM among them: workers are ended at once
            self.conversions.close(stopped=True)
            raise
        self.conversions.close(stopped=False)
        return code

    def run_all(self) -> int:
        try:
            self.convert_programs()
            if self.progress:
                with ProgressBar(self.reporter.messages, len(self.plan.jobs)).running() as bar:
                    self.run_jobs(bar.advance)
            else:
                self.run_jobs(lambda: None)
            self.reporter.finish()
        except BrokenPipeError:
            raise OutputClosed() from None
        return self.exit_code()

    def run_jobs(self, advance: Callable[[], None]) -> None:
        """Every job in turn; one that fails is reported and the rest still run."""
        for job in self.plan.jobs:
            try:
                self.run_job(job)
            except ConversionError as error:
                self.reporter.error(error)
            except BrokenPipeError:
                raise
            except Exception as error:  # noqa: BLE001 - our bug: report it, go on with the rest
                self.reporter.error(
                    ConversionError(
                        job.shown_name, 1, 1, f"internal error: {type(error).__name__}: {one_line(str(error))}"
                    )
                )
            advance()

    def exit_code(self) -> int:
        if self.reporter.failed:
            return EXIT_FAILED
        pending = self.plan.check and self.reporter.converted > 0
        if pending or (self.plan.strict and self.reporter.warning_count):
            return EXIT_FINDINGS
        return EXIT_OK

    def read(self, job: Job) -> bytes:
        if job.source is None:
            return sys.stdin.buffer.read()
        try:
            return job.source.read_bytes()
        except OSError as error:
            raise ConversionError(job.shown_name, 1, 1, f"cannot read: {error.strerror}") from None

    def convert_programs(self) -> None:
        """Convert every program before anything is written: a library two entry scripts import
        must come out the same from both, or neither program is written (it is reported)."""
        outputs: dict[str, tuple[bytes, str]] = {}
        for job in self.plan.jobs:
            if not job.program:
                continue
            try:
                sources = [self.read_program_file(file.path) for file in job.program]
                conversions = self.convert_program(job, sources)
            except ConversionError as error:
                self.programs[job.shown_name] = error
                continue
            self.programs[job.shown_name] = conversions
            for file, conversion in zip(job.program[1:], conversions[1:]):
                key = os.path.realpath(file.path)
                earlier = outputs.setdefault(key, (conversion.output, job.shown_name))
                if earlier[0] != conversion.output:
                    clash = ConversionError(
                        str(file.path),
                        1,
                        1,
                        f"imported by {earlier[1]} and by {job.shown_name}, which need different conversions "
                        "of it: neither program is written (convert them separately)",
                    )
                    self.programs[job.shown_name] = clash
                    self.programs[earlier[1]] = clash

    def convert_program(self, job: Job, sources: list[bytes]) -> list[Conversion]:
        """A program's conversions: from the cache, a worker, or converted here (then cached)."""
        found = self.cache.found(job, sources)
        if found is not None:
            return found
        conversions = self.conversions.program(id(job), sources) or convert_program_files(
            job.program, sources, self.plan.options
        )
        self.cache.store(job, sources, conversions)
        return conversions

    def convert_file(self, job: Job, source: bytes) -> Conversion:
        """One file's conversion: from the cache, a worker, or converted here (then cached)."""
        found = self.cache.found(job, [source])
        if found is not None:
            return found[0]
        conversion = self.conversions.file(id(job), source) or convert_source(
            source, self.plan.options, path=job.shown_name
        )
        self.cache.store(job, [source], [conversion])
        return conversion

    def read_program_file(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as error:
            raise ConversionError(str(path), 1, 1, f"cannot read: {error.strerror}") from None

    def run_program_job(self, job: Job) -> None:
        """An entry script and its local modules: reported file by file, written as a set."""
        result = self.programs[job.shown_name]
        if isinstance(result, ConversionError):
            raise result
        pending: list[tuple[ProgramFile, Path | None, Conversion]] = []
        for file, target, conversion in zip(job.program, job.program_targets, result):
            key = os.path.realpath(file.path)
            if key in self.delivered:
                continue
            self.delivered.add(key)
            pending.append((file, target, conversion))
        if not (self.plan.check or self.plan.diff):
            self.deliver_set(pending)
        for index, (file, target, conversion) in enumerate(pending):
            shown = str(file.path)
            findings = [Finding.from_change(shown, change) for change in conversion.changes]
            warnings = [finding for finding in findings if finding.is_warning]
            changed = conversion.changed
            text = self.snippet_source(conversion)
            if self.plan.check and target is not None:
                stale = self.stale_finding(Job(file.path, shown, target), conversion)
                changed = stale is not None
                self.reporter.file_done(shown, warnings + ([stale] if stale else []), changed=changed, source=text)
            elif self.plan.check:
                self.reporter.file_done(shown, findings if changed else warnings, changed=changed, source=text)
            else:
                self.reporter.file_done(shown, findings, changed=changed, source=text)
            if index and changed:
                self.reporter.local_modules += 1
            if self.plan.diff and conversion.changed:
                print_diff(unified_diff(conversion, str(target or shown)), self.color)

    def deliver_set(self, pending: list[tuple[ProgramFile, Path | None, Conversion]]) -> None:
        """Write every file of a program or none: each goes to a temporary file beside its target
        first, and only once all are written do they replace their targets. With ``-o``, files
        the conversion leaves unchanged are copied too, so that the output folder runs."""
        writes = []
        for file, target, conversion in pending:
            if target is None:
                continue
            in_place = same_file(target, file.path) if target.exists() else False
            if in_place and not conversion.changed:
                continue
            writes.append((target, conversion.output, file.path, in_place))
        try:
            write_set(writes)
        except ReadOnlyFile as error:
            raise ConversionError(
                str(error.filename),
                1,
                1,
                "cannot rewrite: the file is read-only (make it writable to convert it in place)",
            ) from None
        except OSError as error:
            raise ConversionError(
                str(error.filename or pending[0][0].path), 1, 1, f"cannot write: {error.strerror}"
            ) from None

    def run_job(self, job: Job) -> None:
        if job.program:
            self.run_program_job(job)
            return
        if job.problem is not None:
            if not job.named:
                self.reporter.skipped(job.shown_name, job.problem)
                return
            raise ConversionError(job.shown_name, 1, 1, f"cannot read: {job.problem}")
        source = self.read(job)
        conversion = self.convert_file(job, source)
        findings = [Finding.from_change(job.shown_name, change) for change in conversion.changes]
        warnings = [finding for finding in findings if finding.is_warning]
        text = self.snippet_source(conversion)
        if self.plan.check and job.target is not None:
            stale = self.stale_finding(job, conversion)
            found = warnings + ([stale] if stale else [])
            self.reporter.file_done(job.shown_name, found, changed=stale is not None, source=text)
            return
        if self.plan.check:
            self.reporter.file_done(
                job.shown_name, findings if conversion.changed else warnings, changed=conversion.changed, source=text
            )
        else:
            self.deliver(job, conversion)
            # Said where the conversion is delivered (not under --diff, which shows the change).
            batch = self.plan.writes and batch_sentence(
                conversion.batch_size, conversion.has_loader, self.plan.options.split_batches
            )
            self.reporter.file_done(
                job.shown_name, findings, changed=conversion.changed, batch=batch or "", source=text
            )
        if self.plan.diff and conversion.changed:
            print_diff(unified_diff(conversion, str(job.target or job.shown_name)), self.color)

    def snippet_source(self, conversion: Conversion) -> str | None:
        """The original's text, decoded as the conversion decoded it, for the source lines shown
        under findings on a terminal; None off a terminal, and for a notebook (its findings count
        lines within a cell)."""
        if not self.reporter.snippets or hasattr(conversion, "cell_diffs"):
            return None
        return conversion.source.decode(conversion.encoding, errors="replace")

    def stale_finding(self, job: Job, conversion: Conversion) -> Finding | None:
        """``--check -o OUT``: a finding when OUT is missing or differs from the conversion now."""
        assert job.target is not None
        if not job.target.is_file():
            return stale_output_finding(str(job.target), job.shown_name, missing=True)
        if job.target.read_bytes() != conversion.output:
            return stale_output_finding(str(job.target), job.shown_name, missing=False)
        return None

    def deliver(self, job: Job, conversion: Conversion) -> None:
        """Put the result where the plan says: stdout, OUT, or the file itself."""
        if self.plan.diff:
            return
        if self.plan.to_stdout or job.target is None:
            stdout = sys.stdout.buffer
            stdout.write(conversion.output)
            stdout.flush()
            return
        if job.target == job.source and not conversion.changed:
            return
        in_place = job.target == job.source
        try:
            write_if_different(job.target, conversion.output, mode_like=job.source, refuse_read_only=in_place)
        except ReadOnlyFile:
            raise ConversionError(
                job.shown_name,
                1,
                1,
                "cannot rewrite: the file is read-only (make it writable to convert it in place)",
            ) from None
        except OSError as error:
            raise ConversionError(job.shown_name, 1, 1, f"cannot write {job.target}: {error.strerror}") from None


def list_codes(color: bool | None, *, examples: bool = False) -> None:
    """``--list-codes``: one line per code (code, name, kind, its one-sentence summary), as
    ``ruff rule --all`` lists names; with ``-v`` (``examples``) each code's before/after examples
    too (thousands of lines: the long form)."""
    output = Output(sys.stdout, color)
    for line in codes_listing(code_docs(), examples=examples):
        output.print((line, None))


def explain(code: str, color: bool | None) -> None:
    """``--explain CODE`` (or its name, ``--explain metrics``): the code's why and examples,
    generated from its rule."""
    wanted = code.strip()
    doc = next((doc for doc in code_docs() if wanted.upper() == doc.code or wanted.lower() == doc.name), None)
    from accel_convert.codemods.engine.registry import code_aliases

    split = code_aliases().get(wanted.upper())
    if doc is None and split is not None:
        names = {doc.code: doc.name for doc in code_docs()}
        listed = ", ".join(f"{new} {names[new]}" for new in split)
        click.echo(
            f"{wanted.upper()} is now one code per reason (--select/--ignore {wanted.upper()} means all): {listed}"
        )
        return
    if doc is None:
        raise UsageProblem(f"--explain {code}: no such code or name (see accel-convert --list-codes)")
    output = Output(sys.stdout, color)
    for line in explain_lines(doc, code_rationales().get(doc.code)):
        output.print((line, None))


@click.command(cls=CommandWithCodes, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("sources", nargs=-1, metavar="[FILES|DIRS|-]...")
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    metavar="OUT",
    help=(
        "Write the converted script to OUT (a directory when there are several inputs, or when OUT ends "
        "with /: a script is written with the local modules it imports)."
    ),
)
@click.option("-i", "--in-place", is_flag=True, help="Rewrite the input files themselves.")
@click.option("--diff", is_flag=True, help="Print a unified diff to stdout; write nothing.")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 when a script would change (with -o: when OUT is missing or stale).",
)
@click.option("--strict", is_flag=True, default=False, help="ACC9xx warnings also make the exit code 1.")
@click.option(
    "--target",
    type=click.Choice(["runtime", "accelerate"]),
    default="runtime",
    show_default=True,
    help="Package the converted script imports the Accelerator from.",
)
@click.option(
    "--oom-retry/--no-oom-retry",
    default=False,
    help="Wrap training in find_executable_batch_size (halve the batch size on out-of-memory).",
)
@click.option(
    "--fsdp/--no-fsdp",
    default=False,
    help="Shard models with FSDP2: Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2)).",
)
@click.option(
    "--split-batches/--no-split-batches",
    default=False,
    help="Keep the original's global batch on any number of processes: Accelerator(split_batches=True).",
)
@click.option(
    "--launcher",
    is_flag=True,
    help=(
        "Notebooks: make training written at the top level one training_function() cell, started by a "
        "notebook_launcher cell (see README)."
    ),
)
@click.option(
    "--num-processes",
    type=click.IntRange(min=1),
    metavar="N",
    help="With --launcher: the notebook_launcher cell starts N processes (default 2).",
)
@click.option("--select", multiple=True, metavar="CODES", help="Run only these code prefixes (comma-separated).")
@click.option("--ignore", multiple=True, metavar="CODES", help="Skip these code prefixes (comma-separated).")
@click.option(
    "--exclude",
    multiple=True,
    metavar="PATTERNS",
    help=(
        "Gitignore-style patterns (comma-separated) of files and folders not searched in folders; "
        "replaces the default list (build/, dist/, venv/, caches; see docs/cli.md)."
    ),
)
@click.option("--extend-exclude", multiple=True, metavar="PATTERNS", help="Patterns excluded besides the default list.")
@click.option(
    "--respect-gitignore/--no-respect-gitignore",
    default=True,
    show_default=True,
    help="Skip what .gitignore and .ignore files ignore when searching folders.",
)
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "github", "sarif"]),
    default="text",
    show_default=True,
    help=(
        "How findings are printed. json: one JSON array at the end ([] when none), an object per finding "
        "with exactly the fields code, message, filename, line, column, end_line, end_column (1-based) and "
        "fixed (true: an automatic rewrite); files that fail are reported on stderr only. sarif: one "
        "SARIF 2.1.0 log (rules, results, failed files as notifications). github: workflow annotations. "
        "json/sarif/github go to stdout when it carries no script or diff."
    ),
)
@click.option("--statistics", is_flag=True, help="Count findings per code at the end (instead of a line per finding).")
@click.option(
    "--warnings-only", is_flag=True, help="Show only what needs a person (ACC9xx), not the automatic rewrites."
)
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only errors, files failing --check, and json/sarif/github findings."
)
@click.option("-v", "--verbose", is_flag=True, help="Also name every file and its status.")
@click.option("--color/--no-color", default=None, help="Force colour on or off (default: only on a terminal).")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Convert N files at a time in worker processes (default: the machine's cores); same output as 1.",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help=(
        "With --check: neither read nor write the cache of results of unchanged files "
        "($ACCEL_CONVERT_CACHE_DIR, else $XDG_CACHE_HOME/accel-convert or ~/.cache/accel-convert)."
    ),
)
@click.option("--stdin-filename", metavar="NAME", help="Name for stdin in messages and config lookup.")
@click.option("--list-codes", is_flag=True, help="List every code, one line each (-v: with examples), then exit.")
@click.option(
    "--explain",
    metavar="CODE|NAME",
    help="Explain one code (ACC113, or its name: metrics): why, before and after; then exit.",
)
@click.version_option(package_name="accel-convert")
@click.pass_context
def main(ctx: click.Context, **flags: Any) -> None:
    """Convert single-GPU PyTorch training scripts into multi-GPU, multi-node ones.

    \b
    One FILE without -o: the converted script goes to stdout; findings and
    messages go to stderr. Flags default to the [tool.accel-convert] table
    of the nearest pyproject.toml above the first input.

    \b
    Examples:
      accel-convert train.py -o train_ddp.py
      accel-convert --diff train.py
      accel-convert --check src/            (CI, pre-commit)
      accel-convert --check train.py -o train_ddp.py   (is the committed copy stale?)
    """
    with sigterm_raises():
        code = run_command(ctx, flags)
    if code == EXIT_TERMINATED and not OWN_PROCESS.get():
        # Run inside another program (a test runner, a library caller): the signal was meant
        # for that process. Its own handler, restored above, now gets it — for the default one,
        # the process ends — instead of a return code it would carry on after.
        signal.raise_signal(signal.SIGTERM)
    ctx.exit(code)


def run_command(ctx: click.Context, flags: dict[str, Any]) -> int:
    """The whole command; returns its exit code. Ctrl-C and SIGTERM end it with their own codes
    (click's default would be exit 1, the code ``--check`` uses for pending rewrites) after the
    write in progress has removed its temporary file."""
    try:
        if flags["list_codes"]:
            list_codes(flags["color"], examples=flags["verbose"])
            return EXIT_OK
        try:
            if flags["explain"] is not None:
                explain(flags["explain"], flags["color"])
                return EXIT_OK
            exclusions = apply_config(ctx, flags, config_start(flags["sources"], flags["stdin_filename"]))
            plan = build_plan(ctx, flags, exclusions)
        except UsageProblem as problem:
            click.echo(f"accel-convert: error: {problem}", err=True)
            return EXIT_USAGE
        except NothingToConvert as nothing:
            click.echo(f"accel-convert: warning: {nothing}", err=True)
            return EXIT_OK
        return run_plan(plan, flags)
    except KeyboardInterrupt:
        return stopped("interrupted", EXIT_INTERRUPTED)
    except Terminated:
        return stopped("terminated", EXIT_TERMINATED)
    except (OutputClosed, BrokenPipeError):
        silence_closed_streams()
        return EXIT_OUTPUT_CLOSED


def stopped(how: str, code: int) -> int:
    """One line saying the run was stopped and how many files it had written; the exit code for it."""
    written = WrittenFiles.count
    files = f"{written} file{'' if written == 1 else 's'} written"
    try:
        click.echo(f"accel-convert: {how}; {files}, each complete; no file is half-written", err=True)
    except OSError:
        pass
    return code


def silence_closed_streams() -> None:
    """Point stdout and stderr at /dev/null: the interpreter flushes them at exit, and a flush
    into a closed pipe prints 'Exception ignored ... BrokenPipeError'."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # not a real file (a test's capture): nothing to flush there
            pass
    os.close(devnull)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While the command runs, SIGTERM raises :class:`Terminated` (as SIGINT raises
    KeyboardInterrupt), so that a write in progress deletes its temporary file. SIGKILL cannot
    be caught: a ``.NAME.XXXX.tmp`` file may then remain beside the target."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_plan(plan: Plan, flags: dict[str, Any]) -> int:
    """Set up the consoles and the reporter, run every job, return the exit code."""
    color = flags["color"]
    messages = Output(sys.stderr, color)
    stdout_busy = plan.to_stdout or plan.diff
    verbosity = int(flags["verbose"]) - int(flags["quiet"])
    cache = check_cache(plan, flags)
    reporter = Reporter(
        output_format=flags["output_format"],
        check=plan.check,
        verbosity=verbosity,
        messages=messages,
        findings_stream=messages if stdout_busy else Output(sys.stdout, color),
        writes=plan.writes,
        warnings_only=flags["warnings_only"],
        statistics=flags["statistics"],
        checks_without_rewrites=selects_no_rewrite(plan.options),
        snippets=is_terminal(sys.stderr),
        helps=cache.code_helps,
    )
    # A bar only where a person watches stderr, only for text (machine formats and diffs may
    # share the terminal through stdout), and only for runs long enough to wonder about.
    progress = (
        flags["output_format"] == "text"
        and verbosity >= 0
        and not stdout_busy
        and len(plan.jobs) >= PROGRESS_MIN_FILES
        and is_terminal(sys.stderr)
    )
    with start_up_objects_left_out_of_collections():
        found = cache.prepare(plan.jobs)  # files found in the cache need no worker
        conversions = parallel.start(flags["jobs"], [job for job in plan.jobs if id(job) not in found], plan.options)
        return Runner(plan, reporter, wants_colour(sys.stdout, color), progress, conversions, cache).run()


def selects_no_rewrite(options: Options) -> bool:
    """``--select`` given, and no rewrite's own code (ACC1xx) among what it switches on."""
    if not options.select:
        return False
    from accel_convert.codemods.engine.registry import all_rules

    return not any(options.enabled(rule.code) for rule in all_rules() if not rule.reports_only())


def check_cache(plan: Plan, flags: dict[str, Any]) -> NoCache:
    """``--check`` keeps its results in the user's cache folder (converter.cache), unless ``--no-cache``."""
    if not plan.check or flags.get("no_cache"):
        return NoCache()
    return CheckCache(cache_folder(), plan.options, tool_version())


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty (a test's capture) or a closed stream
        return False


@contextmanager
def start_up_objects_left_out_of_collections() -> Iterator[None]:
    """Keep the garbage collector off the objects that exist before the first conversion.

    Why: they are the imported modules (libcst alone is some 35,000 objects), which live until
    the process ends, yet the first full collection a conversion triggers walks them all: about
    30 ms, a tenth of a ``--check`` run. ``gc.freeze`` moves them to a generation that
    collections skip; ``gc.unfreeze`` afterwards hands them back, so that running the command
    in-process (tests, other tools) leaves the caller's collector as it was.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


if __name__ == "__main__":  # pragma: no cover - `python -m accel_convert.converter.cli`
    sys.exit(main())
