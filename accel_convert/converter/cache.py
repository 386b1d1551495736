"""``--check``'s cache: the result of a file converted before is read back instead of converted again.

As black and ruff do, a second ``accel-convert --check`` of a folder nobody changed answers from a
user cache folder: ``$ACCEL_CONVERT_CACHE_DIR``, else ``$XDG_CACHE_HOME/accel-convert``, else
``~/.cache/accel-convert``; ``--no-cache`` neither reads nor writes it.

An entry is found by a key that holds everything the result depends on: the bytes of the file (of
every file of a program), its name as shown, accel-convert's version and code, the options (``--target``,
``--split-batches``, ``--select``, ...), the project's import sorting and black settings, and the
bytes of every local module the file imports (found by :func:`converter.project.program_files`,
the resolver the conversion itself uses). Any change to one of them is a new key, so a stale entry
is never found. An entry holds what ``--check`` reports (the findings, whether the file changes,
the converted bytes when it does), so a run from the cache prints the same lines and exits with
the same code as a run without it. Only files that convert are stored (a failure is converted,
and reported, again); notebooks are not cached.

An entry is written to a temporary file beside it and renamed into place (``os.replace``), so a
concurrent run (another ``--check``, ``--jobs`` workers) reads a whole entry or none. An entry
that cannot be trusted (truncated, corrupt, written by another version, its digest wrong, its
key not the one asked for) is a miss: the file is converted and the entry written again.

Beside the entries, ``helps-VERSION`` holds every code's ``help:`` line (report.code_helps),
written by the first run of a version: reading the rules for them would cost a warm run more
than the rest of it.

Example: ``accel-convert --check src/`` twice; the second run reads every result from the cache.
``ACCEL_CONVERT_CACHE_DIR=/tmp/c accel-convert --check src/`` keeps it in ``/tmp/c``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel_convert.converter.files import atomic_write

if TYPE_CHECKING:
    from accel_convert.codemods.engine.model import Options
    from accel_convert.converter.pipeline import Conversion
    from accel_convert.converter.project import ProgramFile

#: Where the cache lives when set (tests, CI caches).
CACHE_DIR_VARIABLE = "ACCEL_CONVERT_CACHE_DIR"
#: The layout of an entry; a new layout is a new folder, older entries are never read.
ENTRY_FORMAT = 1


def cache_folder() -> Path:
    """``$ACCEL_CONVERT_CACHE_DIR``, else ``$XDG_CACHE_HOME/accel-convert`` (an absolute one, as
    the XDG specification asks), else ``~/.cache/accel-convert``."""
    chosen = os.environ.get(CACHE_DIR_VARIABLE)
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "accel-convert"


#: The installed package (``accel_convert/``), whose modules' stamps are part of every key.
PACKAGE = Path(__file__).resolve().parent.parent


def tool_version() -> str:
    """accel-convert's version and its code as installed: a new version's rewrites may differ, so
    its entries do; so may a checkout's edits between versions (an editable install)."""
    from accel_convert import __version__

    return f"{__version__}+{code_stamp(PACKAGE)}"


def code_stamp(package: Path) -> str:
    """The sizes and modification times of the package's modules, hashed (a ``stat`` each, no read)."""
    stamps = sorted(
        f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}"
        for path in package.rglob("*.py")
        for stat in [path.stat()]
    )
    return _digest("\n".join(stamps).encode())[:16]


def _digest(data: bytes) -> str:
    import hashlib  # only a cached --check needs it: OpenSSL is not loaded at start-up

    return hashlib.sha256(data).hexdigest()


class NoCache:
    """No cache (``--no-cache``, or a run that writes): every file is converted."""

    def prepare(self, jobs: Sequence[Any]) -> set[int]:
        """Look up every job now; the ids of the jobs found (those need no worker)."""
        return set()

    def found(self, job: Any, sources: Sequence[bytes]) -> list[Conversion] | None:
        """The stored conversions of ``job`` (one per file), when ``sources`` are the bytes looked up."""
        return None

    def store(self, job: Any, sources: Sequence[bytes], conversions: Sequence[Conversion]) -> None:
        """Keep ``job``'s conversions for the next run."""

    def code_helps(self) -> Mapping[str, str]:
        """Code → the ``help:`` line under its findings (:func:`converter.report.code_helps`)."""
        from accel_convert.converter.report import code_helps

        return code_helps()


class CheckCache(NoCache):
    """Entries in ``folder`` for one run's options; keyed per job (cli.Job: a file or a program)."""

    def __init__(self, folder: Path, options: Options, version: str) -> None:
        self.folder = folder / f"v{ENTRY_FORMAT}"
        self.version = version
        self.options = dataclasses.asdict(options)
        #: id(job) → (key, digest of the sources looked up, the conversions found or None).
        self.looked_up: dict[int, tuple[str, str, list[Conversion] | None]] = {}
        self._helps: Mapping[str, str] | None = None

    # -- keys ------------------------------------------------------------------------------------

    def key(self, job: Any, sources: Sequence[bytes]) -> str:
        """Everything the conversions of ``job`` from ``sources`` depend on, hashed."""
        files = job_files(job)
        material = {
            "format": ENTRY_FORMAT,
            "version": self.version,
            "options": self.options,
            "project": project_settings(str(files[0][0])),
            "files": [[name, module, _digest(source)] for (name, module), source in zip(files, sources)],
            "imports": local_module_digests(job.local_modules),
        }
        return _digest(json.dumps(material, sort_keys=True, default=str).encode())

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    # -- lookups ---------------------------------------------------------------------------------

    def prepare(self, jobs: Sequence[Any]) -> set[int]:
        hits = set()
        for job in jobs:
            sources = read_sources(job)
            if sources is None:
                continue
            key = self.key(job, sources)
            conversions = self.load(key, job, sources)
            self.looked_up[id(job)] = (key, sources_digest(sources), conversions)
            if conversions is not None:
                hits.add(id(job))
        return hits

    def found(self, job: Any, sources: Sequence[bytes]) -> list[Conversion] | None:
        key, digest, conversions = self.looked_up.get(id(job), ("", "", None))
        if conversions is None or digest != sources_digest(sources):
            return None  # not found, or the file changed since it was looked up
        return conversions

    def load(self, key: str, job: Any, sources: Sequence[bytes]) -> list[Conversion] | None:
        """The entry under ``key``, or None when there is none or it cannot be trusted."""
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        try:
            return decode_entry(data, key, self.version, job_files(job), sources)
        except Exception:  # noqa: BLE001 - whatever is wrong with an entry, it is only a miss
            return None

    # -- writes ----------------------------------------------------------------------------------

    def code_helps(self) -> Mapping[str, str]:
        """The help lines, kept in one file per version beside the entries: read from it, a warm
        run prints them without importing every rule (which would cost more than its own run)."""
        if self._helps is None:
            path = self.folder / f"helps-{_digest(self.version.encode())[:16]}"
            self._helps = read_helps(path)
            if self._helps is None:
                self._helps = super().code_helps()
                try:
                    atomic_write(path, json.dumps(self._helps).encode(), output=False)
                except OSError:  # a read-only home, a full disk: the run goes on without it
                    pass
        return self._helps

    def store(self, job: Any, sources: Sequence[bytes], conversions: Sequence[Conversion]) -> None:
        from accel_convert.converter.pipeline import Conversion

        if any(type(conversion) is not Conversion for conversion in conversions):
            return  # a notebook's conversion (a subclass) holds its cells: not cached
        looked_up = self.looked_up.get(id(job))
        if looked_up is not None and looked_up[1] == sources_digest(sources):
            key = looked_up[0]
        else:
            key = self.key(job, sources)
        try:
            atomic_write(self.path(key), encode_entry(key, self.version, conversions), output=False)
        except OSError:  # a read-only home, a full disk: the run goes on without the cache
            pass


def job_files(job: Any) -> list[tuple[str, str]]:
    """A job's files as (name shown, module name): a program's every file, or the one file."""
    if job.program:
        return [(str(file.path), file.module) for file in job.program]
    return [(job.shown_name, "")]


def read_sources(job: Any) -> list[bytes] | None:
    """The bytes of a job's files; None for stdin, a file found unreadable, or a read failing."""
    if job.problem is not None or job.source is None:
        return None
    paths = [file.path for file in job.program] if job.program else [job.source]
    try:
        return [path.read_bytes() for path in paths]
    except OSError:
        return None


def sources_digest(sources: Sequence[bytes]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for source in sources:
        digest.update(len(source).to_bytes(8, "big"))
        digest.update(source)
    return digest.hexdigest()


def local_module_digests(modules: Sequence[ProgramFile]) -> list[list[str]]:
    """The local modules a file converted alone imports (found while planning, by
    :func:`converter.project.program_files`, as the conversion finds them), each with the digest
    of its bytes: a module that changes makes a new key."""
    digests = []
    for module in modules:
        try:
            digests.append([str(module.path), module.module, _digest(module.path.read_bytes())])
        except OSError:
            digests.append([str(module.path), module.module, "unreadable"])
    return digests


def project_settings(path: str) -> list[Any]:
    """What the project around ``path`` adds to the options: its import sorting, its black
    settings and, when it uses black, black's version (black formats the output)."""
    from accel_convert.converter.formatting import black_settings, import_style

    folder = Path(os.path.abspath(path)).parent
    black = black_settings(folder)
    return [repr(import_style(folder)), black, black_version() if black is not None else None]


def black_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("black")
    except PackageNotFoundError:
        return None


# -- entries -------------------------------------------------------------------------------------


def encode_entry(key: str, version: str, conversions: Sequence[Conversion]) -> bytes:
    """An entry: the digest of its body on the first line, then the body (JSON)."""
    body = json.dumps(
        {
            "format": ENTRY_FORMAT,
            "version": version,
            "key": key,
            "files": [encode_conversion(conversion) for conversion in conversions],
        },
        sort_keys=True,
    ).encode()
    return _digest(body).encode() + b"\n" + body


def encode_conversion(conversion: Conversion) -> dict[str, Any]:
    from base64 import b64encode

    return {
        "output": b64encode(conversion.output).decode() if conversion.changed else None,
        "changes": [dataclasses.astuple(change) for change in conversion.changes],
        "encoding": conversion.encoding,
        "batch_size": conversion.batch_size,
        "has_loader": conversion.has_loader,
    }


def decode_entry(
    data: bytes, key: str, version: str, files: Sequence[tuple[str, str]], sources: Sequence[bytes]
) -> list[Conversion] | None:
    """The conversions an entry holds, or None unless it is whole, of this format and version,
    and for ``key``; a malformed body raises (the caller treats that as a miss too)."""
    digest, _, body = data.partition(b"\n")
    if digest.decode("ascii") != _digest(body):
        return None
    entry = json.loads(body)
    if entry["format"] != ENTRY_FORMAT or entry["version"] != version or entry["key"] != key:
        return None
    if len(entry["files"]) != len(sources):
        return None
    return [
        decode_conversion(stored, name, source) for stored, (name, _), source in zip(entry["files"], files, sources)
    ]


def read_helps(path: Path) -> dict[str, str] | None:
    """The help lines kept at ``path``: None where the file is missing or not a table of strings."""
    try:
        table = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(table, dict) or not all(isinstance(value, str) for value in table.values()):
        return None
    return table


def decode_conversion(stored: dict[str, Any], name: str, source: bytes) -> Conversion:
    from base64 import b64decode

    from accel_convert.codemods.engine.model import Change
    from accel_convert.converter.pipeline import Conversion

    output = source if stored["output"] is None else b64decode(stored["output"], validate=True)
    changes = []
    for code, message, line, column, end_line, end_column, fixed in stored["changes"]:
        numbers = (line, column, end_line, end_column)
        if not (isinstance(code, str) and isinstance(message, str) and isinstance(fixed, bool)):
            raise ValueError("a change of the wrong shape")
        if not all(type(number) is int for number in numbers):
            raise ValueError("a position of the wrong type")
        changes.append(Change(code, message, line, column, end_line, end_column, fixed))
    batch_size, has_loader, encoding = stored["batch_size"], stored["has_loader"], stored["encoding"]
    if not (batch_size is None or type(batch_size) is int) or type(has_loader) is not bool:
        raise ValueError("a batch size of the wrong type")
    if not isinstance(encoding, str):
        raise ValueError("an encoding of the wrong type")
    return Conversion(name, source, output, tuple(changes), encoding, batch_size=batch_size, has_loader=has_loader)
