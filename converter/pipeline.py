"""Convert one script's bytes: read → parse once → codemods → verify → bytes.

Working on bytes end to end is what keeps a file's encoding (a ``# -*- coding: latin-1 -*-``
cookie, a UTF-8 BOM), its newlines (CRLF) and its comments: libcst decodes and re-encodes with
what it found, and a file with nothing to convert comes back byte for byte.

Verification follows black: the output must parse, and converting it again must change nothing.
A result that fails either check is never written; it is an internal error naming the file.
Both checks are made without a second libcst parse (see :func:`verify_stable`), which would cost
as much as the whole rest of the conversion of a typical script.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

import codemods
from codemods import Change, ConversionOutcome, Options
from codemods.engine.positions import python_ast


class ConversionError(Exception):
    """A file that could not be converted, with the position to show the user."""

    def __init__(self, path: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{path}:{line}:{column}: {message}")
        self.path = path
        #: 1-based line and column, as editors and compilers print them.
        self.line = line
        self.column = column
        self.message = message


@dataclass(frozen=True)
class Conversion:
    """The result of converting one file."""

    path: str
    source: bytes
    output: bytes
    changes: tuple[Change, ...] = field(default=())
    #: The encoding the file was decoded with (its coding cookie or BOM, else UTF-8).
    encoding: str = "utf-8"

    @property
    def changed(self) -> bool:
        return self.output != self.source

    @property
    def rewrites(self) -> tuple[Change, ...]:
        """The automatic rewrites (``ACC1xx``)."""
        return tuple(change for change in self.changes if change.fixed)

    @property
    def warnings(self) -> tuple[Change, ...]:
        """The spots left for a person (``ACC9xx``)."""
        return tuple(change for change in self.changes if not change.fixed)


def mentions_torch(source: bytes) -> bool:
    """The cheap test torchfix uses: a script that never says ``torch`` has nothing to convert,
    and skipping the parse makes whole-repository runs fast."""
    return b"torch" in source


def convert_source(source: bytes, options: Options, *, path: str) -> Conversion:
    """Convert one script's bytes; ``path`` is only used in messages.

    Raises :class:`ConversionError` for a syntax error, undecodable bytes, a codemod failure, or
    an output that does not parse or is not stable under a second conversion.
    """
    if not mentions_torch(source):
        return Conversion(path, source, source)
    module = parse(source, path)
    outcome = run_codemods(module, options, path, source)
    output = generate(outcome.module, path)
    if output != source:
        verify_stable(outcome.module, output, options, path, source)
    # Warnings of switched-off codes are dropped; a rewrite that was made is always reported,
    # whatever the flags said, so that no change to the file goes unmentioned.
    changes = tuple(change for change in outcome.changes if change.fixed or options.enabled(change.code))
    return Conversion(path, source, output, changes, module.encoding)


def parse(source: bytes, path: str) -> cst.Module:
    """Parse with libcst, reporting failures as one positioned ConversionError."""
    try:
        return cst.parse_module(source)
    except UnicodeDecodeError as error:
        line, column = byte_position(source, error.start)
        raise ConversionError(
            path, line, column,
            f"cannot decode byte 0x{source[error.start]:02x} as {error.encoding} "
            "(declare the file's encoding with a '# -*- coding: ... -*-' comment)",
        ) from None
    except cst.ParserSyntaxError as error:
        raise syntax_error(source, path, error) from None
    except SyntaxError as error:
        # libcst raises a plain SyntaxError for an unknown coding cookie.
        raise ConversionError(path, error.lineno or 1, 1, f"syntax error: {error.msg}") from None


def syntax_error(source: bytes, path: str, error: cst.ParserSyntaxError) -> ConversionError:
    """Prefer CPython's own message ("'(' was never closed") over the parser's token list; fall
    back to libcst's when CPython accepts the code (syntax newer than libcst's grammar)."""
    if b"\x00" in source:
        # Both parsers put a null byte at line 1; point at the byte itself.
        line, column = byte_position(source, source.index(b"\x00"))
        return ConversionError(path, line, column, "syntax error: source contains a null byte")
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as python_error:
        return ConversionError(
            path, python_error.lineno or error.editor_line, python_error.offset or 1,
            f"syntax error: {python_error.msg}",
        )
    return ConversionError(path, error.editor_line, error.editor_column, f"syntax error: {error.message}")


def byte_position(source: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column of a byte offset."""
    line_start = source.rfind(b"\n", 0, offset) + 1
    return source.count(b"\n", 0, offset) + 1, offset - line_start + 1


def run_codemods(
    module: cst.Module, options: Options, path: str, source: bytes | None = None
) -> ConversionOutcome:
    """Run the codemods; a crash inside one is our bug, reported as an internal error.
    ``source`` is what ``module`` was parsed from: the analysis reads positions from it instead
    of printing the tree once more."""
    try:
        return codemods.convert_module(module, options, source)
    except Exception as error:  # noqa: BLE001 - any codemod crash becomes one error line, exit 123
        raise ConversionError(
            path, 1, 1, f"internal error: conversion failed ({type(error).__name__}: {error})"
        ) from error


def generate(module: cst.Module, path: str) -> bytes:
    """The module's code in its own encoding. libcst prints recursively, so a very long chain
    (``a + b + ... `` over thousands of terms) can exhaust the stack: one error line, not a crash."""
    try:
        return module.bytes
    except RecursionError:
        raise ConversionError(path, 1, 1, "internal error: the script nests too deeply to be printed") from None


def verify_stable(converted: cst.Module, output: bytes, options: Options, path: str, source: bytes) -> None:
    """The output must parse, and converting it again must change nothing.

    ``output`` is ``converted`` printed. The parse check uses CPython's own parser, a twentieth of
    libcst's parse (libcst's only where this Python cannot read the *input* either: syntax newer
    than the interpreter). The second conversion runs on ``converted`` itself, which is the tree a
    libcst parse of ``output`` gives up to which node owns which whitespace — nothing a codemod
    matches on. (The golden tests convert every expected output read back from disk, so a pass
    building a tree that no parse would produce is still caught there.)
    """
    if python_ast(output) is None and (python_ast(source) is not None or not _libcst_parses(output)):
        raise ConversionError(
            path, 1, 1,
            f"internal error: the converted script does not parse ({_syntax_problem(output)}); nothing written",
        )
    again_module = run_codemods(converted, options, path, output).module
    if again_module is converted:
        # No pass changed the tree: it prints back to ``output``.
        return
    again = generate(again_module, path)
    if again != output:
        line = first_differing_line(output, again)
        raise ConversionError(
            path, line, 1,
            "internal error: converting the result again changes it (unstable rewrite); nothing written",
        )


def _syntax_problem(code: bytes) -> str:
    """CPython's complaint about ``code``, with its line in the converted script."""
    try:
        compile(code, "<converted>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except ValueError as error:  # a null byte
        return str(error)
    return "libcst cannot read it"


def _libcst_parses(code: bytes) -> bool:
    try:
        cst.parse_module(code)
    except Exception:  # noqa: BLE001 - any failure means the code does not parse
        return False
    return True


def first_differing_line(first: bytes, second: bytes) -> int:
    """The 1-based line where two texts start to differ."""
    for number, (a, b) in enumerate(zip(first.splitlines(), second.splitlines()), start=1):
        if a != b:
            return number
    return min(len(first.splitlines()), len(second.splitlines())) + 1
