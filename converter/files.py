"""Finding the scripts to convert and writing results without ever leaving a half-written file.

Discovery follows black and ruff: a file named on the command line is always taken, a folder is
searched for ``*.py`` files, skipping hidden folders, virtual environments and ``__pycache__``
(converting a venv's site-packages is never what the user meant). A link that cannot be followed
(a loop, a dangling link) is reported as a problem with that one path, never a crash of the run.

Writing follows editors and black: a symbolic link is written through (the file it points to
gets the new text, the link stays a link), and a read-only file is refused, not replaced.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Folder names never searched, whatever they contain.
SKIPPED_DIR_NAMES = frozenset({"__pycache__", "node_modules", "site-packages"})


def is_virtual_env(folder: Path) -> bool:
    """Whether ``folder`` is a virtual environment (venv/virtualenv write ``pyvenv.cfg``, conda
    writes ``conda-meta``), whatever it is called."""
    return (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir()


def is_skipped_dir(folder: Path) -> bool:
    """Whether folder discovery should not descend into ``folder``."""
    return folder.name.startswith(".") or folder.name in SKIPPED_DIR_NAMES or is_virtual_env(folder)


#: What folder discovery converts: scripts and Jupyter notebooks.
CONVERTED_SUFFIXES = (".py", ".ipynb")


def python_files_under(root: Path) -> Iterator[Path]:
    """Every ``*.py`` script and ``*.ipynb`` notebook below ``root``, in a stable (sorted) order."""
    for current, dirnames, filenames in os.walk(root):
        here = Path(current)
        # Pruning ``dirnames`` in place is how os.walk is told not to descend.
        dirnames[:] = sorted(name for name in dirnames if not is_skipped_dir(here / name))
        for name in sorted(filenames):
            if name.endswith(CONVERTED_SUFFIXES) and not name.startswith("."):
                yield here / name


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


def discover(sources: Iterable[Path]) -> list[tuple[Path, Path, str | None]]:
    """Expand files and folders into ``(file, root, problem)`` triples, each file once.

    ``root`` is the argument the file came from (the folder, or the file itself); ``-o DIR`` uses
    it to mirror a folder's layout inside DIR. ``problem`` says why a file cannot be read (a
    symbolic link loop), so that the run reports it in one line and goes on with the rest.
    """
    seen: set[str] = set()
    found: list[tuple[Path, Path, str | None]] = []
    for source in sources:
        files = python_files_under(source) if source.is_dir() else [source]
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


def atomic_write(target: Path, data: bytes, *, mode_like: Path | None = None, refuse_read_only: bool = False) -> None:
    """Write ``data`` to ``target`` so that readers see the old file or the new one, never a mix.

    The bytes go to a temporary file in the target's own folder (``os.replace`` is atomic only
    within one filesystem), which then replaces the target. The new file gets the permission bits
    of ``mode_like`` (the script it was converted from), so an executable script stays executable.
    A symbolic link is written through: the file it points to is replaced, the link kept. Missing
    folders above the target are created. With ``refuse_read_only`` (rewriting a file in place),
    a read-only target raises :class:`ReadOnlyFile`.
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
            temp.flush()
            os.fsync(temp.fileno())
        os.chmod(temp_name, permission_bits(target, mode_like))
        os.replace(temp_name, target)
    except BaseException:
        # Whatever went wrong (disk full, Ctrl-C), leave no temporary file behind.
        Path(temp_name).unlink(missing_ok=True)
        raise


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
    except BaseException:
        for temp_name, _ in staged:
            Path(temp_name).unlink(missing_ok=True)
        raise
