"""Finding the scripts to convert and writing results without ever leaving a half-written file.

Discovery follows black and ruff: a file named on the command line is always taken, a folder is
searched for ``*.py`` files, skipping

* hidden folders, virtual environments (whatever their name) and the folders in
  :data:`DEFAULT_EXCLUDE` (caches, build output, ``site-packages``): converting a venv's packages
  or a build copy is never what the user meant;
* what ``.gitignore`` and ``.ignore`` files say, in the searched folder, below it, and above it up
  to the repository's root (git's rules: the deepest file with a matching pattern decides, ``!``
  re-includes);
* what ``--exclude`` / ``--extend-exclude`` (and their ``[tool.accel-convert]`` keys) say:
  gitignore-style patterns; ``--exclude`` replaces :data:`DEFAULT_EXCLUDE`, ``--extend-exclude``
  adds to it.

Pattern matching is pathspec's implementation of git's own rules, not globbing written here. A
link that cannot be followed (a loop, a dangling link) is reported as a problem with that one
path, never a crash of the run.

Writing follows editors and black: a symbolic link is written through (the file it points to
gets the new text, the link stays a link), and a read-only file is refused, not replaced.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from accel_convert.records import record

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

#: Folders (gitignore patterns) not searched unless ``--exclude`` replaces the list: caches,
#: build output and installed packages, as black and ruff skip them. Hidden folders and virtual
#: environments are skipped whatever this says.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    "__pycache__/",
    "__pypackages__/",
    "_build/",
    "buck-out/",
    "build/",
    "dist/",
    "node_modules/",
    "site-packages/",
    "venv/",
    "*.egg-info/",
)
#: Files read in every searched folder (and its parents up to the repository root).
IGNORE_FILES = (".gitignore", ".ignore")


@record(frozen=True)
class Patterns:
    """Gitignore-style patterns and the folder they are relative to (a pattern with a slash,
    like ``src/legacy``, is anchored there; one without matches at any depth)."""

    base: Path
    lines: tuple[str, ...]

    @classmethod
    def of(cls, base: Path, lines: Sequence[str]) -> Patterns:
        return cls(Path(os.path.abspath(base)), tuple(lines))

    @cached_property
    def spec(self) -> GitIgnoreSpec:
        # Compiled (and pathspec imported) on the first folder searched: a run over named files
        # never pays for it.
        from pathspec import GitIgnoreSpec

        return GitIgnoreSpec.from_lines(self.lines)

    def decides(self, path: Path, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a ``!`` pattern; None: no pattern matches."""
        absolute = Path(os.path.abspath(path))
        try:
            relative = absolute.relative_to(self.base).as_posix()
        except ValueError:
            # Outside the patterns' folder: only patterns that match at any depth (no slash but a
            # trailing one, like ``build/`` or ``*_old.py``) can match, and do on the whole path.
            relative = absolute.as_posix().lstrip("/")
        return self.spec.check_file(relative + "/" if is_dir else relative).include


@record(frozen=True)
class Exclusions:
    """What folder searches leave out besides hidden folders and virtual environments."""

    #: ``--exclude`` / ``--extend-exclude`` patterns (and the defaults), by the folder they are
    #: relative to.
    patterns: tuple[Patterns, ...] = field(default_factory=lambda: (Patterns.of(Path.cwd(), DEFAULT_EXCLUDE),))
    #: Read ``.gitignore`` and ``.ignore`` files.
    ignore_files: bool = True

    def excludes(self, path: Path, is_dir: bool) -> bool:
        return any(patterns.decides(path, is_dir) for patterns in self.patterns)


def read_ignore_file(folder: Path) -> Patterns | None:
    """The patterns of ``folder``'s ``.gitignore`` and ``.ignore`` together (None: neither)."""
    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (folder / name).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:  # absent (the usual case) or unreadable: nothing to respect
            continue
    return Patterns.of(folder, lines) if lines else None


def ignore_files_above(folder: Path) -> list[Patterns]:
    """Ignore files in the folders above ``folder``, up to the repository's root (the folder
    holding ``.git``), nearest last; none when ``folder`` is not in a repository."""
    found: list[Patterns] = []
    for parent in Path(os.path.abspath(folder)).parents:
        patterns = read_ignore_file(parent)
        if patterns is not None:
            found.append(patterns)
        if (parent / ".git").exists():
            return found[::-1]
    return []


def ignored_by_files(path: Path, is_dir: bool, stack: Sequence[Patterns]) -> bool:
    """Git's rule: the deepest ignore file with a pattern matching ``path`` decides."""
    for patterns in reversed(stack):
        decision = patterns.decides(path, is_dir)
        if decision is not None:
            return decision
    return False


def is_virtual_env(folder: Path) -> bool:
    """Whether ``folder`` is a virtual environment (venv/virtualenv write ``pyvenv.cfg``, conda
    writes ``conda-meta``), whatever it is called."""
    return (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir()


def is_skipped_dir(folder: Path, exclusions: Exclusions | None = None) -> bool:
    """Whether folder discovery should not descend into ``folder`` (ignore files aside)."""
    return (
        folder.name.startswith(".")
        or is_virtual_env(folder)
        or (exclusions or Exclusions()).excludes(folder, is_dir=True)
    )


#: What folder discovery converts: scripts and Jupyter notebooks.
CONVERTED_SUFFIXES = (".py", ".ipynb")


def python_files_under(root: Path, exclusions: Exclusions | None = None) -> Iterator[Path]:
    """Every ``*.py`` script and ``*.ipynb`` notebook below ``root`` that is not excluded, in a
    stable (sorted) order."""
    exclusions = exclusions or Exclusions()
    above = ignore_files_above(root) if exclusions.ignore_files else []
    # Ignore files in effect per folder walked (each folder's own after its parents').
    stacks: dict[str, list[Patterns]] = {}
    for current, dirnames, filenames in os.walk(root):
        here = Path(current)
        parent_stack = stacks.get(os.path.dirname(current), above) if current != str(root) else above
        own = read_ignore_file(here) if exclusions.ignore_files else None
        stack = [*parent_stack, own] if own is not None else parent_stack
        stacks[current] = stack
        # Pruning ``dirnames`` in place is how os.walk is told not to descend.
        dirnames[:] = sorted(
            name
            for name in dirnames
            if not is_skipped_dir(here / name, exclusions) and not ignored_by_files(here / name, True, stack)
        )
        for name in sorted(filenames):
            path = here / name
            if (
                name.endswith(CONVERTED_SUFFIXES)
                and not name.startswith(".")
                and not exclusions.excludes(path, is_dir=False)
                and not ignored_by_files(path, False, stack)
            ):
                yield path


def unfollowable_link(path: Path) -> str | None:
    """Why ``path``, a symbolic link, cannot be followed (None when it can, or is no link)."""
    try:
        path.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "symbolic link loop"
        if path.is_symlink():
            return "symbolic link to a missing file"
        return error.strerror or str(error)
    return None


def discover(sources: Iterable[Path], exclusions: Exclusions | None = None) -> list[tuple[Path, Path, str | None]]:
    """Expand files and folders into ``(file, root, problem)`` triples, each file once.

    ``root`` is the argument the file came from (the folder, or the file itself); ``-o DIR`` uses
    it to mirror a folder's layout inside DIR. ``problem`` says why a file cannot be read (a
    symbolic link loop), so that the run reports it in one line and goes on with the rest. A
    file named in ``sources`` is always taken, excluded or not (as black and ruff do).
    """
    seen: set[str] = set()
    found: list[tuple[Path, Path, str | None]] = []
    for source in sources:
        files = python_files_under(source, exclusions) if source.is_dir() else [source]
        for file in files:
            problem = unfollowable_link(file)
            # realpath, unlike Path.resolve, never raises on a loop.
            key = os.path.realpath(file)
            if key not in seen:
                seen.add(key)
                found.append((file, source, problem))
    return found


def same_file(first: Path, second: Path) -> bool:
    """Whether two paths name one file (through links, ``..`` and case-insensitive filesystems)."""
    try:
        return first.samefile(second)
    except OSError:
        return os.path.realpath(first) == os.path.realpath(second)


def is_read_only(path: Path) -> bool:
    """Whether ``path`` exists and must not be rewritten: no write permission for us, or (as
    root, whom permissions do not stop) no write bit for anyone, the mark of a file someone made
    read-only on purpose."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not os.access(path, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


class ReadOnlyFile(OSError):
    """A target that is read-only: refused rather than replaced behind its owner's back."""


def permission_bits(target: Path, mode_like: Path | None) -> int:
    """The mode a written file gets: that of ``mode_like``, else of the file it replaces, else
    what a plain ``open(..., "w")`` would give under the current umask (mkstemp's 0600 would
    silently make the file private)."""
    for model in (mode_like, target):
        if model is not None and model.exists():
            return stat.S_IMODE(model.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class WrittenFiles:
    """How many files this process has written into place, for the line a run stopped by Ctrl-C
    or SIGTERM prints (those files are complete; the one being written was removed)."""

    count = 0


def atomic_write(
    target: Path,
    data: bytes,
    *,
    mode_like: Path | None = None,
    refuse_read_only: bool = False,
    output: bool = True,
) -> None:
    """Write ``data`` to ``target`` so that readers see the old file or the new one, never a mix.

    The bytes go to a temporary file in the target's own folder (``os.replace`` is atomic only
    within one filesystem), which then replaces the target. The new file gets the permission bits
    of ``mode_like`` (the script it was converted from), so an executable script stays executable.
    A symbolic link is written through: the file it points to is replaced, the link kept. Missing
    folders above the target are created. With ``refuse_read_only`` (rewriting a file in place),
    a read-only target raises :class:`ReadOnlyFile`.

    ``output=False`` is for the tool's own files (cache entries): losing one costs only a
    recomputation, so it is not synced to disk, keeps the private permission bits of a temporary
    file, and is not counted among the files written for the user.
    """
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if refuse_read_only and is_read_only(target):
        raise ReadOnlyFile(errno.EACCES, "the file is read-only", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            if output:
                temp.flush()
                os.fsync(temp.fileno())
        if output:
            os.chmod(temp_name, permission_bits(target, mode_like))
        os.replace(temp_name, target)
    except BaseException:
        # Whatever went wrong (disk full, Ctrl-C), leave no temporary file behind.
        Path(temp_name).unlink(missing_ok=True)
        raise
    if output:
        WrittenFiles.count += 1


def write_if_different(
    target: Path, data: bytes, *, mode_like: Path | None = None, refuse_read_only: bool = False
) -> bool:
    """Atomically write ``data`` unless ``target`` already holds exactly it; True if written.

    Leaving an up-to-date file alone keeps its modification time, so build tools that watch it
    do not rerun for nothing.
    """
    if target.is_file() and target.read_bytes() == data:
        return False
    atomic_write(target, data, mode_like=mode_like, refuse_read_only=refuse_read_only)
    return True


def write_set(writes: Iterable[tuple[Path, bytes, Path | None, bool]]) -> None:
    """Write several files as one: ``(target, data, mode_like, refuse_read_only)`` each. Every
    file goes to a temporary file beside its target first; only when all are written do they
    replace their targets, so a failure (a read-only target, a full disk, Ctrl-C) leaves every
    target as it was. Targets already holding their data are not touched."""
    staged: list[tuple[str, Path]] = []
    try:
        for target, data, mode_like, refuse_read_only in writes:
            if target.is_symlink():
                target = Path(os.path.realpath(target))
            if target.is_file() and target.read_bytes() == data:
                continue
            if refuse_read_only and is_read_only(target):
                raise ReadOnlyFile(errno.EACCES, "the file is read-only", str(target))
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            staged.append((temp_name, target))
            with os.fdopen(handle, "wb") as temp:
                temp.write(data)
                temp.flush()
                os.fsync(temp.fileno())
            os.chmod(temp_name, permission_bits(target, mode_like))
        while staged:
            temp_name, target = staged[0]
            os.replace(temp_name, target)
            staged.pop(0)
            WrittenFiles.count += 1
    except BaseException:
        for temp_name, _ in staged:
            Path(temp_name).unlink(missing_ok=True)
        raise
