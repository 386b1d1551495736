"""Programs of several modules: find the local modules an entry script imports, and convert the
set as one program (:mod:`codemods.engine.program`).

An entry script's local modules are the ``.py`` files (and packages) of its own folder that it
imports, transitively: ``python train.py`` puts that folder first on ``sys.path``, so ``import
engine`` and ``from data import get_dataloaders`` load ``engine.py`` and ``data.py`` from there,
and ``from mylib.utils import save`` loads ``mylib/utils.py`` (and ``mylib/__init__.py``).
Relative imports inside a package resolve against the package.

A folder holds programs too: its entry scripts are the files with an ``if __name__ ==
"__main__":`` block or that no other file of the folder imports; the other files are their
libraries. A library two entries import is converted once for each; when the two conversions
differ, the library cannot serve both and the programs are reported, not guessed.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods import Options
from accel_convert.codemods.engine.local_imports import local_imports
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.converter.formatting import with_import_style
from accel_convert.converter.pipeline import (
    Codec,
    Conversion,
    ConversionError,
    first_differing_line,
    judge_with_cpython,
    one_line,
    parse,
    quiet_compiler_warnings,
    verifies_printed_text,
)
from accel_convert.records import record

if TYPE_CHECKING:
    from accel_convert.converter.guard import Attempt

# The conversion's own modules (codemods.engine.program, converter.guard) are imported where a
# program is converted: planning a run (and --check answering from its cache) needs only the
# resolution of imports above.


@record(frozen=True)
class ProgramFile:
    """One file of a program: where it is, and the module name the entry script imports it by."""

    path: Path
    module: str
    is_package: bool = False


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """``mylib/utils.py`` under ``root`` → (``mylib.utils``, False); ``mylib/__init__.py`` →
    (``mylib``, True)."""
    parts = list(Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def module_file(name: str, root: Path) -> Path | None:
    """The file ``import name`` loads from ``root`` (a module or a package), if there is one."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=256)
def importable_names(root: Path) -> frozenset[bytes]:
    """Names of the modules and packages directly in ``root`` (``engine``, ``mylib``)."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return frozenset()
    names = set()
    for entry in entries:
        if entry.name.endswith(".py"):
            names.add(entry.name[:-3].encode())
        elif entry.is_dir() and not entry.name.startswith("."):
            names.add(entry.name.encode())
    return frozenset(names)


#: A run of identifier characters (UTF-8's multi-byte letters are bytes from 0x80 on).
IDENTIFIER = re.compile(rb"[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*")


def may_import_locally(source: bytes, roots: Sequence[Path]) -> bool:
    """A cheap test before parsing: the file names one of the modules of the folders imports
    start from (or imports relatively). Most files of a folder of independent scripts do not.
    An absolute import names its module's first part as a whole word (``import engine``, ``from
    mylib.utils import``): the file's words, collected in one pass, are compared with the modules
    (one search per module was 170 passes over each file of a folder of 170 scripts)."""
    if b"from ." in source:
        return True
    names = [importable_names(root) for root in roots]
    if not any(names):
        return False
    words = set(IDENTIFIER.findall(source))
    return any(not words.isdisjoint(found) for found in names)


def package_root(folder: Path) -> Path | None:
    """The folder above the outermost package that ``folder`` is part of (``yolo/`` for
    ``yolo/pkg/`` holding an ``__init__.py``); None when ``folder`` is no package."""
    if not (folder / "__init__.py").is_file():
        return None
    package = folder.absolute()
    while (package.parent / "__init__.py").is_file() and package.parent != package:
        package = package.parent
    # Written as ``folder`` is (relative to the working folder or not), as the files' paths are shown.
    return package.parent if folder.is_absolute() else Path(os.path.relpath(package.parent))


def import_roots(entry: Path) -> tuple[Path, ...]:
    """The folders an entry script's absolute imports load local modules from: its own folder
    (``python pkg/train.py`` puts it first on ``sys.path``), and, when that folder is a package,
    the folder above the package: ``python -m pkg.train`` starts there, and a YOLO-style script
    appends it to ``sys.path`` so that ``from pkg.test import evaluate`` loads ``pkg/test.py``."""
    above = package_root(entry.parent)
    return (entry.parent,) if above is None else (entry.parent, above)


def entry_module(entry: Path) -> str:
    """The name an entry script's own relative imports start from: ``pkg.train`` for
    ``pkg/train.py`` in a package (run as ``python -m pkg.train``), else the file's stem."""
    above = package_root(entry.parent)
    return entry.stem if above is None else module_name(entry, above)[0]


def find_module(name: str, roots: Sequence[Path]) -> tuple[Path, str, bool] | None:
    """The file ``import name`` loads from the first of ``roots`` that has it, with its module
    name there and whether it is a package."""
    for root in roots:
        path = module_file(name, root)
        if path is not None:
            return (path, *module_name(path, root))
    return None


def program_files(entry: Path) -> list[ProgramFile]:
    """The entry script and every local module it imports, transitively (the entry first, the
    rest sorted by path). Files that cannot be read are left to the conversion to report."""
    roots = import_roots(entry)
    entry_name = entry_module(entry)
    found: dict[Path, ProgramFile] = {entry.resolve(): ProgramFile(entry, entry_name)}
    pending = [found[entry.resolve()]]
    while pending:
        current = pending.pop()
        try:
            source = current.path.read_bytes()
        except OSError:
            continue
        if not may_import_locally(source, roots):
            continue
        for name in sorted(local_imports(source, current.module, current.is_package)):
            module = find_module(name, roots)
            if module is None or module[0].resolve() in found or module[1] == entry_name:
                continue
            path = module[0]
            found[path.resolve()] = ProgramFile(path, module[1], module[2])
            pending.append(found[path.resolve()])
    entry_file = found.pop(entry.resolve())
    return [entry_file, *sorted(found.values(), key=lambda file: str(file.path))]


def has_main_block(source: bytes) -> bool:
    """Whether a script has an ``if __name__ == "__main__":`` block at its top level."""
    if b"__main__" not in source:
        return False
    tree = python_ast(source)
    if tree is None:
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            if any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and any(
                isinstance(n, ast.Constant) and n.value == "__main__" for n in names
            ):
                return True
    return False


def folder_entries(
    files: Sequence[Path], programs: dict[Path, list[ProgramFile]] | None = None
) -> dict[Path, list[ProgramFile]]:
    """The entry scripts among a folder's files (those with a ``__main__`` block, or that no
    other file of the set imports as a local module of its own folder), each with its program;
    not one another entry's program converts as its module (:func:`_converted_by_an_importer`).
    ``programs``: every file's :func:`program_files`, when the caller has them already."""
    if programs is None:
        programs = {file: program_files(file) for file in files}
    imported = {other.path.resolve() for program in programs.values() for other in program[1:]}
    entries = {}
    for file in files:
        if file.resolve() in imported:
            try:
                main_block = has_main_block(file.read_bytes())
            except OSError:
                main_block = False
            if not main_block:
                continue
        entries[file] = programs[file]
    libraries = {entry: {file.path.resolve() for file in files[1:]} for entry, files in entries.items()}
    return {entry: files for entry, files in entries.items() if not _converted_by_an_importer(entry, libraries)}


def _converted_by_an_importer(entry: Path, libraries: dict[Path, set[Path]]) -> bool:
    """Whether another entry's program converts ``entry`` as one of its modules (YOLOv3's
    ``test.py``, a script of its own that ``train.py`` imports), and ``entry`` does not import
    that one in turn: its conversion there also serves its own ``__main__`` block (what that block
    calls creates an accelerator where it is given none), so it is no program of its own, whose
    conversion of the modules they share would differ."""
    real = entry.resolve()
    return any(
        real in others and importer.resolve() not in libraries[entry]
        for importer, others in libraries.items()
        if importer != entry
    )


def convert_program_files(files: Sequence[ProgramFile], sources: Sequence[bytes], options: Options) -> list[Conversion]:
    """Convert the files of one program (``files[0]`` is the entry) together; one Conversion per
    file, in the same order. Raises ConversionError naming the file at fault (a syntax error),
    or the entry script (an internal failure): then nothing of the program may be written."""
    from accel_convert.converter.guard import Attempt, guarded

    options = with_import_style(options, str(files[0].path))  # the entry's project sorts them all
    with quiet_compiler_warnings():
        parsed: list[tuple[cst.Module, Codec]] = []
        for file, source in zip(files, sources):
            judge_with_cpython(source, str(file.path))
            parsed.append(parse(source, str(file.path)))
        modules = [module for module, _ in parsed]

        def attempt_with(chosen: Options) -> Attempt:
            outcomes = _convert(files, modules, sources, chosen)
            printed = [codec.generate(outcome.module) for (_, codec), outcome in zip(parsed, outcomes)]
            return Attempt(printed, [o.changes for o in outcomes], [o.module for o in outcomes], chosen)

        # Nothing is written that reads a name before binding it, or calls a function of the
        # program without the argument the conversion gave it (see converter.guard).
        attempt = guarded(
            attempt_with,
            attempt_with(options),
            sources,
            lambda index, tree: parsed[index][1].generate(tree),
            [file.module for file in files],
            frozenset(file.module for file in files if file.is_package),
        )
        options = attempt.options
        # As for one script: a program left as written (nothing to convert, or the guard found
        # no sound conversion) is what converting it gives, so there is nothing to check; its
        # unguarded conversion, which the check would run, is the one the guard refused.
        if any(output != source for output, source in zip(attempt.outputs, sources)):
            _verify_stable(files, attempt.outputs, sources, options, attempt.modules)
    return [
        Conversion(
            str(file.path),
            source,
            output,
            tuple(change for change in changes if change.fixed or options.enabled(change.code)),
            codec.encoding,
        )
        for file, source, output, changes, (_, codec) in zip(files, sources, attempt.outputs, attempt.changes, parsed)
    ]


def _convert(files: Sequence[ProgramFile], modules: Sequence[cst.Module], sources: Sequence[bytes], options: Options):
    from accel_convert.codemods.engine.program import ProgramModule, convert_program

    program = [
        ProgramModule(file.module, module, source, file.is_package)
        for file, module, source in zip(files, modules, sources)
    ]
    try:
        outcomes = convert_program(program, files[0].module, options)
    except (RecursionError, MemoryError):
        raise ConversionError(str(files[0].path), 1, 1, "internal error: the program is too deep to convert") from None
    except Exception as error:  # noqa: BLE001 - any codemod crash becomes one error line, exit 123
        raise ConversionError(
            str(files[0].path),
            1,
            1,
            f"internal error: conversion of the program failed ({type(error).__name__}: {one_line(str(error))})",
        ) from error
    return [outcomes[file.module] for file in files]


def _verify_stable(
    files: Sequence[ProgramFile],
    printed: Sequence[bytes],
    sources: Sequence[bytes],
    options: Options,
    converted: Sequence[cst.Module | None] = (),
) -> None:
    """Every output parses, and converting the converted program again changes nothing (the
    program's own idempotence: a library alone would be converted differently). As for one
    script (``pipeline.verify_stable``), the second conversion runs on the trees the outputs were
    printed from (``converted``), unless ``ACCEL_CONVERT_VERIFY=printed`` asks for a fresh parse of
    the printed files."""
    trees = list(converted) if converted and not verifies_printed_text() else [None] * len(files)
    modules = []
    for file, output, source, tree in zip(files, printed, sources, trees):
        if tree is not None and (output == source or python_ast(output) is not None):
            modules.append(tree)
            continue
        if output == source:
            modules.append(parse(output, str(file.path))[0])
            continue
        if python_ast(output) is None and python_ast(source) is not None:
            raise ConversionError(
                str(file.path), 1, 1, "internal error: the converted script does not parse; nothing written"
            )
        try:
            modules.append(parse(output, str(file.path))[0])
        except ConversionError as error:
            raise ConversionError(
                str(file.path),
                1,
                1,
                f"internal error: the converted script does not parse ({error.message}); nothing written",
            ) from None
    again = _convert(files, modules, printed, options)
    for file, module, outcome, output in zip(files, modules, again, printed):
        if outcome.module is module:
            continue
        regenerated = outcome.module.bytes
        if regenerated != output:
            raise ConversionError(
                str(file.path),
                first_differing_line(output, regenerated),
                1,
                "internal error: converting the result again changes it (unstable rewrite); nothing written",
            )
