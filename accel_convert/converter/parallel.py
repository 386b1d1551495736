"""``--jobs N``: the files of a run converted in worker processes, the rest as with one worker.

Only the conversion (reading a file, analysing and rewriting it) runs in a worker; the command's
own process asks for each job's result in the plan's order, then writes and reports it as it
always does. The output, the order of messages, the exit code and the written files are therefore
those of one worker, and a Ctrl-C or SIGTERM meets the one process that writes (its write in
progress removes its temporary file; workers write nothing and are ended).

A worker's result is used only for the very bytes the command reads (a file edited in between is
converted again here), and a worker that fails for any reason other than a ConversionError
(an internal error, a worker that died) leaves the file to be converted here too, where the
failure is reported exactly as with one worker.

The workers are forked from the command's process (on Linux, where no other thread runs), after it
has imported the engine and every rule: they start at once and import nothing themselves. Elsewhere
they fork from a server that imports the same modules once.

Example: ``accel-convert src/ -o out/ --jobs 4`` converts four files at a time; ``--jobs 1`` (or a
run of one file) converts everything in the command's own process.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.cache import sources_digest
from accel_convert.converter.pipeline import Conversion, ConversionError, convert_source
from accel_convert.converter.project import ProgramFile, convert_program_files

if TYPE_CHECKING:
    import multiprocessing.context
    from concurrent.futures import Future, ProcessPoolExecutor

# multiprocessing and concurrent.futures are imported where workers start: a run of one worker,
# or one whose every file is in the --check cache, starts none.

#: A worker's answer: the digest of the bytes it converted, then ("ok", conversions) or ("error",
#: ConversionError's fields); None where the command must convert the file itself.
Outcome = tuple[str, tuple[str, Any]] | None


def default_jobs() -> int:
    """The machine's cores (those this process may use), as black and ruff default to."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Conversions:
    """No answers (``--jobs 1``): the command converts each file itself."""

    def file(self, key: int, source: bytes) -> Conversion | None:
        """The worker's conversion of ``source`` (ConversionError raised as the worker met it),
        or None: the command converts it itself."""
        return None

    def program(self, key: int, sources: Sequence[bytes]) -> list[Conversion] | None:
        """The same for a program's files (``sources`` as the command read them)."""
        return None

    def close(self, stopped: bool) -> None:
        """The run is over (``stopped``: by an exception, Ctrl-C or SIGTERM among them)."""


class ParallelConversions(Conversions):
    """Every task submitted at once to ``workers`` processes; each answer taken in plan order."""

    def __init__(
        self,
        workers: int,
        options: Options,
        files: dict[int, tuple[Path, str]],
        programs: dict[int, Sequence[ProgramFile]],
    ) -> None:
        from concurrent.futures import ProcessPoolExecutor

        context = _context()
        self.executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker)
        self.semaphores = _semaphore_names(self.executor)
        self.futures: dict[int, Future[Outcome]] = {}
        # Programs first: the command converts them all before any single file.
        for key, program in programs.items():
            self.futures[key] = self.executor.submit(_convert_program, program, options)
        for key, (path, shown) in files.items():
            self.futures[key] = self.executor.submit(_convert_file, path, shown, options)

    def answer(self, key: int, sources: Sequence[bytes]) -> list[Conversion] | None:
        future = self.futures.pop(key, None)
        if future is None:
            return None
        try:
            outcome = future.result()
        except Exception:  # noqa: BLE001 - a worker that died: convert here, report as one worker
            return None
        if outcome is None or outcome[0] != sources_digest(sources):
            return None
        kind, payload = outcome[1]
        if kind == "error":
            raise ConversionError(*payload)
        return list(payload)

    def file(self, key: int, source: bytes) -> Conversion | None:
        answer = self.answer(key, [source])
        return None if answer is None else answer[0]

    def program(self, key: int, sources: Sequence[bytes]) -> list[Conversion] | None:
        return self.answer(key, sources)

    def close(self, stopped: bool) -> None:
        if stopped:
            # Ctrl-C, SIGTERM: end now. Workers write nothing, so ending them loses nothing.
            processes = list(getattr(self.executor, "_processes", {}).values())
            manager = getattr(self.executor, "_executor_manager_thread", None)
            self.executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            # shutdown(wait=False) lets go of the pool's manager thread without joining it; left
            # running, it closes its wake-up pipe while the interpreter's exit hook writes to it
            # (Python 3.11: "OSError: Bad file descriptor" printed at exit). Wait for it here.
            if manager is not None:
                manager.join(timeout=60)
        self.executor.shutdown(wait=True)
        self.futures.clear()
        if stopped:
            _release_semaphores(self.semaphores)


def start(jobs: int | None, plan_jobs: Sequence[Any], options: Options) -> Conversions:
    """Worker processes for the plan's jobs (cli.Job: a file, or a program) when ``jobs`` (None:
    the machine's cores) is over 1 and there are two files or programs to convert; else
    conversion in this process. Answers are keyed by ``id(job)``."""
    jobs = default_jobs() if jobs is None else jobs
    files = {
        id(job): (job.source, job.shown_name)
        for job in plan_jobs
        if not job.program and job.problem is None and job.source is not None
    }
    programs = {id(job): job.program for job in plan_jobs if job.program}
    tasks = len(files) + len(programs)
    if jobs <= 1 or tasks < 2:
        return Conversions()
    return ParallelConversions(min(jobs, tasks), options, files, programs)


#: What every conversion imports beyond this module (the engine and every rule, the name-flow
#: guard, the program model): loaded once before the workers start, not once in each of them.
CONVERSION_MODULES = (
    "accel_convert.codemods.engine.registry",
    "accel_convert.codemods.engine.analysis",
    "accel_convert.codemods.engine.program",
    "accel_convert.converter.guard",
)


def _context() -> multiprocessing.context.BaseContext:
    """fork on Linux while this process runs no other thread: a worker starts at once, with
    everything a conversion needs already imported here. Else forkserver where there is one
    (the workers fork from a server that imports it once), else spawn. Never fork beside a
    thread (a caller's: the lock it may hold would stay held in the worker)."""
    import multiprocessing
    import threading

    if sys.platform.startswith("linux") and threading.active_count() == 1:
        _load_conversion_modules()
        # Unwritten output would be written once more by each worker as it exits.
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        return multiprocessing.get_context("fork")
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *CONVERSION_MODULES])
    return context


def _load_conversion_modules() -> None:
    """Import what conversions use, every rule among it (the registry loads them when asked)."""
    import importlib

    for name in CONVERSION_MODULES:
        importlib.import_module(name)
    from accel_convert.codemods.engine.registry import all_rules

    all_rules()


def _semaphore_names(executor: ProcessPoolExecutor) -> set[str]:
    """The names of the semaphores of the pool's two queues (their locks)."""
    queues = (getattr(executor, "_call_queue", None), getattr(executor, "_result_queue", None))
    locks = [lock for queue in queues for lock in getattr(queue, "__dict__", {}).values()]
    return {lock._semlock.name for lock in locks if getattr(getattr(lock, "_semlock", None), "name", None)}


def _release_semaphores(names: set[str]) -> None:
    """Run now the finalizers that release the pool's semaphores (multiprocessing runs them at
    a normal exit): a SIGTERM handed back to an in-process caller's default handler ends the
    process without one, and multiprocessing's resource tracker would warn about leaked ones."""
    import multiprocessing.util

    for finalizer in list(getattr(multiprocessing.util, "_finalizer_registry", {}).values()):
        arguments = getattr(finalizer, "_args", None) or (None,)
        if isinstance(arguments[0], str) and arguments[0] in names:
            finalizer()


def _start_worker() -> None:
    # What the worker holds on starting (the modules it was forked with or imported) lives as
    # long as it does: its collections need not walk it.
    gc.freeze()
    # Ctrl-C reaches the whole process group: the command's own process handles it and ends the
    # workers, which would otherwise each print a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker has the command's SIGTERM handler (raise, to remove a temporary file):
    # the worker writes nothing, and is ended by SIGTERM when the command stops.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _guarded(sources: list[bytes], convert: Any) -> Outcome:
    try:
        return sources_digest(sources), ("ok", convert())
    except ConversionError as error:
        return sources_digest(sources), ("error", (error.path, error.line, error.column, error.message))
    except Exception:  # noqa: BLE001 - converted again by the command, which reports it
        return None


def _convert_file(path: Path, shown: str, options: Options) -> Outcome:
    try:
        source = path.read_bytes()
    except OSError:  # the command reads it again and reports it
        return None
    return _guarded([source], lambda: [convert_source(source, options, path=shown)])


def _convert_program(files: Sequence[ProgramFile], options: Options) -> Outcome:
    try:
        sources = [file.path.read_bytes() for file in files]
    except OSError:  # the command reads them again and reports it
        return None
    return _guarded(sources, lambda: convert_program_files(files, sources, options))
