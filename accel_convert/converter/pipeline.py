"""Convert one script's bytes: read → parse once → codemods → verify → bytes.

Working on bytes end to end is what keeps a file's encoding (a ``# -*- coding: latin-1 -*-``
cookie, a UTF-8 BOM), its newlines (CRLF) and its comments: libcst decodes and re-encodes with
what it found, and a file with nothing to convert comes back byte for byte.

CPython's own parser is the judge of what is Python (:func:`judge_with_cpython`): bytes it
refuses (a null byte, a stray BOM, nesting past its limits) are refused here too, never written.

Verification follows black: the output must parse and compile, and converting it again must
change nothing (:func:`verify_stable`). A result that fails either check is never written; it is
an internal error naming the file.
"""

from __future__ import annotations

import ast
import gc
import io
import os
import sys
import threading
import tokenize
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import field, replace

import libcst as cst

from accel_convert import codemods
from accel_convert.codemods import Change, ConversionOutcome, Options
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.converter.data_literals import elide_data_literals
from accel_convert.converter.formatting import formatter_clean, with_import_style
from accel_convert.records import record


class ConversionError(Exception):
    """A file that could not be converted, with the position to show the user."""

    def __init__(self, path: str, line: int, column: int, message: str) -> None:
        message = one_line(message)  # one line per failed file, whatever a parser's message holds
        super().__init__(f"{path}:{line}:{column}: {message}")
        self.path = path
        #: 1-based line and column, as editors and compilers print them.
        self.line = line
        self.column = column
        self.message = message


@record(frozen=True)
class Conversion:
    """The result of converting one file."""

    path: str
    source: bytes
    output: bytes
    changes: tuple[Change, ...] = field(default=())
    #: The encoding the file was decoded with (its coding cookie or BOM, else UTF-8).
    encoding: str = "utf-8"
    #: The training loader's batch size where the converter read it, and whether the script
    #: trains from a loader at all (for the summary's sentence on batch size per process).
    #: (Keyword-only: subclasses such as NotebookConversion add positional fields.)
    batch_size: int | None = field(default=None, kw_only=True)
    has_loader: bool = field(default=False, kw_only=True)

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
    """Convert one file's bytes: a Jupyter notebook (``.ipynb``, see converter.notebook_dispatch)
    or a script (:func:`convert_script`)."""
    with collector_paused():
        if path.lower().endswith(".ipynb"):
            from accel_convert.converter.notebook_dispatch import convert_notebook  # nbformat: notebooks only

            return convert_notebook(source, options, path=path)
        return convert_script(source, options, path=path)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while one file is converted, as before where it was off.

    Why: a conversion allocates some hundred thousand objects (two libcst trees, two CPython
    trees, the facts), and each allocation burst triggers collections that walk every young
    object to find cycles the trees do not have (libcst nodes hold no parent links): 3–5% of a
    conversion. What is freed is freed by reference counting as before; the few cycles made
    (frames in tracebacks) wait for the next collection after the file.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def convert_script(source: bytes, options: Options, *, path: str) -> Conversion:
    """Convert one script's bytes; ``path`` is only used in messages.

    Raises :class:`ConversionError` for a syntax error, undecodable bytes, nesting deeper than
    the parser takes, a codemod failure, or an output that does not parse or is not stable under
    a second conversion.
    """
    conversion = _converted_script(source, with_import_style(options, path), path)
    # A formatter-clean script stays formatter-clean (converter.formatting).
    output = formatter_clean(source, conversion.output, path, conversion.encoding)
    return conversion if output is conversion.output else replace(conversion, output=output)


def _converted_script(source: bytes, options: Options, path: str) -> Conversion:
    if not mentions_torch(source):
        judge_unconverted(source, path)
        return Conversion(path, source, source)
    with quiet_compiler_warnings():
        judge_with_cpython(source, path)
        elided = elide_data_literals(source, python_ast(source))
    if elided is not None:
        # CPython's tree of the whole file is the largest thing left: let it go now.
        python_ast.cache_clear()
        # Large constant-only literals stay out of libcst's tree (see converter.data_literals).
        conversion = convert_guarded(elided.source, options, path)
        output = elided.restore(conversion.output)
        if output is not None:
            return replace(conversion, source=source, output=output)
    return convert_guarded(source, options, path)


def judge_unconverted(source: bytes, path: str) -> None:
    """A file that never says ``torch`` is left as it is, but only if it is Python: bytes that
    are not (a syntax error, a null byte, random bytes) are refused as for any other file, so
    that ``--check`` fails on them as black and ruff do. CPython's parse is the fast path;
    libcst is asked only where CPython refuses (it reads syntax newer than this interpreter,
    and reports a real syntax error with CPython's wording)."""
    with quiet_compiler_warnings():
        judge_with_cpython(source, path)
        if python_ast(source) is None:
            parse(source, path)
    # The tree of a file that is not converted is not read again.
    python_ast.cache_clear()


def convert_guarded(source: bytes, options: Options, path: str) -> Conversion:
    """:func:`convert_parsed`, retried on a deep stack where the default one is too shallow."""
    with quiet_compiler_warnings():
        try:
            return convert_parsed(source, options, path)
        except RecursionError:
            pass
        except MemoryError:
            raise ConversionError(path, 1, 1, "not enough memory to convert this file") from None
        # Valid code nested deeper than the default recursion limit lets libcst walk (a chain
        # of a few hundred ``+``): once more, on a thread with a stack big enough for it, unless
        # it is so deep that libcst's parser alone would take seconds and gigabytes.
        depth = nesting_depth(python_ast(source))
    if depth > MAX_CONVERTED_DEPTH:
        raise ConversionError(
            path,
            1,
            1,
            f"syntax error: {NESTED_TOO_DEEPLY} ({depth} levels; at most {MAX_CONVERTED_DEPTH} are converted)",
        )
    return on_deep_stack(lambda: convert_parsed(source, options, path), path)


#: Deeper expressions are refused: libcst's parser takes time and memory that grow with the
#: square of the depth (a 2,500-deep lambda chain: 3.6 s and 1.2 GB to parse).
MAX_CONVERTED_DEPTH = 1200


def convert_parsed(source: bytes, options: Options, path: str) -> Conversion:
    """Parse, codemods, printing and verification.

    The input's tree is let go of as soon as the output is printed and judged sound
    (converter.guard): two libcst trees of a large file alive at once would double the peak
    memory (some 500 bytes per byte of a long list literal each); the verification converts the
    converted tree again, which shares every unchanged node with it.
    """
    from accel_convert.converter.guard import Attempt, guarded

    with quiet_compiler_warnings():
        module, codec = parse(source, path)
        parsed = [module]  # a holder, emptied once the guard is done with it
        del module
        batches: list[tuple[int | None, bool]] = []  # what the first attempt read of the batch

        def attempt_with(chosen: Options) -> Attempt:
            outcome = run_codemods(parsed[0], chosen, path, source)
            batches.append((outcome.batch_size, outcome.has_loader))
            return Attempt([codec.generate(outcome.module)], [outcome.changes], [outcome.module], chosen)

        first = attempt_with(options)
        # Nothing is written that reads a name before binding it (see converter.guard).
        attempt = guarded(attempt_with, first, [source], lambda _, tree: codec.generate(tree))
        parsed.clear()
        del first
        output, found, options, converted = attempt.outputs[0], attempt.changes[0], attempt.options, attempt.modules[0]
        del attempt
        if output != source:
            verify_stable(output, options, path, source, converted, codec)
    # Warnings of switched-off codes are dropped; a rewrite that was made is always reported,
    # whatever the flags said, so that no change to the file goes unmentioned.
    changes = tuple(change for change in found if change.fixed or options.enabled(change.code))
    batch_size, has_loader = batches[0]
    return Conversion(path, source, output, changes, codec.encoding, batch_size=batch_size, has_loader=has_loader)


def nesting_depth(tree: ast.AST | None) -> int:
    """How deep CPython's tree of the script goes (0 when CPython could not read it), walked
    without recursion: only scripts too deep for recursion get here."""
    if tree is None:
        return 0
    deepest = 0
    pending: list[tuple[ast.AST, int]] = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


@contextmanager
def quiet_compiler_warnings() -> Iterator[None]:
    """CPython's parser warns about the *user's* code (``SyntaxWarning: invalid escape
    sequence``); that is not ours to print, and under ``-W error`` it would even turn valid code
    into a SyntaxError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


#: CPython messages that refuse the bytes themselves, whatever the Python version: libcst reads
#: some of these files (it drops a doubled BOM, keeps a null byte in a comment), and what it
#: would write could not run.
REFUSALS_BY_ANY_PYTHON = ("null byte", "invalid non-printable character")
#: CPython's refusals for depth: libcst's native parser crashes (segmentation fault) on some.
REFUSALS_FOR_DEPTH = (
    "too many nested parentheses",
    "too many levels of indentation",
    "too complex",
    "too deeply nested",
)

NESTED_TOO_DEEPLY = "nested too deeply for the parser"


def judge_with_cpython(source: bytes, path: str) -> None:
    """CPython's own parser decides what is Python: what it refuses for the bytes themselves
    (a null byte, a stray BOM) or for depth is refused here with its message, before libcst
    (whose native parser crashes on a few thousand nested brackets) ever sees it.

    Other syntax errors are left to libcst: it reads syntax newer than this interpreter, and
    reports a plain syntax error with CPython's wording anyway (:func:`syntax_error`).
    """
    tree = python_ast(source)  # cached: the analysis reads positions from it
    if tree is not None:
        refusal = compile_error(tree)
        if refusal is not None:
            raise ConversionError(
                path, refusal.lineno or 1, refusal.offset or 1, f"syntax error: {one_line(refusal.msg)}"
            )
        return
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (RecursionError, MemoryError):
        # CPython's parser and AST builder give up at a few thousand levels, with an empty
        # MemoryError or a RecursionError.
        raise ConversionError(path, 1, 1, f"syntax error: {NESTED_TOO_DEEPLY}") from None
    except UnicodeDecodeError:
        return  # the parse reports the undecodable byte with its position
    except ValueError as error:  # Python 3.11: "source code string cannot contain null bytes"
        if b"\x00" in source:
            raise null_byte_error(source, path) from None
        raise ConversionError(path, 1, 1, f"syntax error: {one_line(str(error))}") from None
    except SyntaxError as error:
        if "null byte" in str(error.msg):
            raise null_byte_error(source, path) from None
        message = one_line(error.msg)
        if any(words in message for words in REFUSALS_FOR_DEPTH):
            message = f"{message} ({NESTED_TOO_DEEPLY})"
        elif not any(words in message for words in REFUSALS_BY_ANY_PYTHON):
            return
        raise ConversionError(path, error.lineno or 1, error.offset or 1, f"syntax error: {message}") from None


def compile_error(tree: ast.Module) -> SyntaxError | None:
    """What CPython refuses only when it compiles a tree it parsed: a duplicate argument
    (``def f(a, a)``), ``return`` outside a function, ``nonlocal`` at module level... Such a
    script cannot run, and a conversion of it could not either."""
    try:
        compile(tree, "<script>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return error
    except (ValueError, RecursionError, MemoryError):
        return None  # depth and null bytes are judged elsewhere
    return None


def null_byte_error(source: bytes, path: str) -> ConversionError:
    line, column = byte_position(source, source.index(b"\x00"))
    return ConversionError(path, line, column, "syntax error: source contains a null byte")


def one_line(message: str) -> str:
    """A message as one line: the CLI prints one line per failed file."""
    return " ".join(str(message).split())


def on_deep_stack(convert: Callable[[], Conversion], path: str) -> Conversion:
    """Run ``convert`` on a thread with a large stack and a raised recursion limit.

    Why a thread: the main thread's C stack is fixed (8 MB) and a raised recursion limit on it
    would turn a RecursionError into a segmentation fault; a thread's stack is chosen when it
    starts. Only files that failed at the default limit come here.
    """
    result: list[Conversion] = []
    failure: list[BaseException] = []

    def target() -> None:
        previous_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(previous_limit, DEEP_RECURSION_LIMIT))
        try:
            result.append(convert())
        except BaseException as error:  # noqa: BLE001 - handed to the calling thread
            failure.append(error)
        finally:
            sys.setrecursionlimit(previous_limit)

    try:
        previous_size = threading.stack_size(DEEP_STACK_BYTES)
    except (ValueError, RuntimeError):  # a platform that cannot size thread stacks
        raise ConversionError(path, 1, 1, f"syntax error: {NESTED_TOO_DEEPLY}") from None
    try:
        thread = threading.Thread(target=target, name="accel-convert-deep", daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous_size)
    thread.join()
    if failure:
        if isinstance(failure[0], (RecursionError, MemoryError)):
            raise ConversionError(path, 1, 1, f"syntax error: {NESTED_TOO_DEEPLY}")
        raise failure[0]
    return result[0]


#: What the deep-stack retry allows: room for well over 100 Python frames per nesting level up
#: to MAX_CONVERTED_DEPTH, in a stack that holds them with room to spare (measured: every kind
#: of chain 1,150 deep converts, at most 540 MB resident; the stack is reserved, not touched).
DEEP_RECURSION_LIMIT = 150_000
DEEP_STACK_BYTES = 1024 * 1024 * 1024


@record(frozen=True)
class Codec:
    """How a parsed module is printed back to exactly the bytes it came from.

    ``escaped``: the file holds bytes its encoding cannot decode where CPython ignores them (a
    comment); they travel through libcst as private-use characters and come back as the same
    bytes. ``lone_cr_tail``: the file ends in a lone ``\\r``, which libcst's printer drops.
    """

    encoding: str
    escaped: bool = False
    lone_cr_tail: bool = False

    def generate(self, module: cst.Module) -> bytes:
        """The module's code in its own encoding, byte for byte as parsed where unchanged."""
        if self.escaped:
            output = module.code.translate(FROM_PRIVATE_USE).encode(self.encoding, "surrogateescape")
        else:
            output = module.bytes
        if self.lone_cr_tail:
            output += b"\r"
        return output


#: Undecodable bytes 0x80–0xFF ↔ private-use characters U+F780–U+F7FF (via the surrogates
#: ``surrogateescape`` gives them, which libcst's native parser cannot take).
TO_PRIVATE_USE = {0xDC00 + byte: 0xF700 + byte for byte in range(0x80, 0x100)}
FROM_PRIVATE_USE = {0xF700 + byte: 0xDC00 + byte for byte in range(0x80, 0x100)}


def ends_in_lone_cr(source: bytes) -> bool:
    return source.endswith(b"\r")


def parse(source: bytes, path: str) -> tuple[cst.Module, Codec]:
    """Parse with libcst, reporting failures as one positioned ConversionError."""
    lone_cr_tail = ends_in_lone_cr(source)
    try:
        module = cst.parse_module(source)
    except UnicodeDecodeError as error:
        escaped = parse_escaped(source, lone_cr_tail)
        if escaped is not None:
            return escaped
        line, column = byte_position(source, error.start)
        raise ConversionError(
            path,
            line,
            column,
            f"cannot decode byte 0x{source[error.start]:02x} as {error.encoding} "
            "(declare the file's encoding with a '# -*- coding: ... -*-' comment)",
        ) from None
    except cst.ParserSyntaxError as error:
        raise syntax_error(source, path, error) from None
    except SyntaxError as error:
        # libcst raises a plain SyntaxError for an unknown coding cookie.
        raise ConversionError(path, error.lineno or 1, 1, f"syntax error: {one_line(error.msg)}") from None
    return module, Codec(module.encoding, lone_cr_tail=lone_cr_tail)


def parse_escaped(source: bytes, lone_cr_tail: bool) -> tuple[cst.Module, Codec] | None:
    """Parse a file with bytes its encoding cannot decode, where CPython accepts it (py_compile
    takes a non-UTF-8 byte in a comment); None where CPython refuses it too."""
    if python_ast(source) is None:
        return None
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    text = source.decode(encoding, "surrogateescape")
    if any(0xF780 <= ord(character) <= 0xF7FF for character in text):
        return None  # the private-use characters are taken: no safe round trip
    try:
        module = cst.parse_module(text.translate(TO_PRIVATE_USE))
    except Exception:  # noqa: BLE001 - no parse this way either: report the decode error
        return None
    # The printed text is encoded by the Codec: the BOM comes back through ``utf-8-sig``.
    return module, Codec(encoding, escaped=True, lone_cr_tail=lone_cr_tail)


def syntax_error(source: bytes, path: str, error: cst.ParserSyntaxError) -> ConversionError:
    """Prefer CPython's own message ("'(' was never closed") over the parser's token list; fall
    back to libcst's when CPython accepts the code (syntax newer than libcst's grammar)."""
    if b"\x00" in source:
        # Both parsers put a null byte at line 1; point at the byte itself.
        return null_byte_error(source, path)
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as python_error:
        return ConversionError(
            path,
            python_error.lineno or error.editor_line,
            python_error.offset or 1,
            f"syntax error: {one_line(python_error.msg)}",
        )
    except (ValueError, RecursionError, MemoryError):
        pass
    return ConversionError(path, error.editor_line, error.editor_column, f"syntax error: {one_line(error.message)}")


def byte_position(source: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column of a byte offset."""
    line_start = source.rfind(b"\n", 0, offset) + 1
    return source.count(b"\n", 0, offset) + 1, offset - line_start + 1


def run_codemods(
    module: cst.Module, options: Options, path: str, source: bytes | None = None, *, tree_only: bool = False
) -> ConversionOutcome:
    """Run the codemods; a crash inside one is our bug, reported as an internal error (a
    RecursionError is left to :func:`convert_source`, which retries on a deeper stack).
    ``source`` is what ``module`` was parsed from: the analysis reads positions from it instead
    of printing the tree once more. ``tree_only``: see ``codemods.convert_module``."""
    try:
        return codemods.convert_module(module, options, source, tree_only=tree_only)
    except (RecursionError, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - any codemod crash becomes one error line, exit 123
        raise ConversionError(
            path, 1, 1, f"internal error: conversion failed ({type(error).__name__}: {one_line(str(error))})"
        ) from error


def verify_stable(
    output: bytes,
    options: Options,
    path: str,
    source: bytes,
    converted: cst.Module | None = None,
    codec: Codec | None = None,
) -> None:
    """The output must parse and compile, and converting it again must change nothing.

    CPython judges the bytes that would be written (a twentieth of libcst's parse); where this
    Python cannot read the *input* either (syntax newer than the interpreter), libcst's parse
    alone decides. The second conversion runs on ``converted``, the tree ``output`` was printed
    from (with ``codec``), its positions read from CPython's tree of ``output``: what a user's
    second run would parse, less libcst's parse of the printed text, which is the largest part
    of this check (``benchmarks/README.md``). With ``ACCEL_CONVERT_VERIFY=printed`` (the test
    suite's golden, fuzz and hostile-bytes tests) or without the tree, the printed output is
    parsed afresh and converted, as a user's second run would; ``tests/test_verification.py``
    holds the two to the same verdict on every fixture.
    """
    if python_ast(output) is None and python_ast(source) is not None:
        raise ConversionError(
            path,
            1,
            1,
            f"internal error: the converted script does not parse ({_syntax_problem(output)}); nothing written",
        )
    converted_tree = python_ast(output)
    refusal = compile_error(converted_tree) if converted_tree is not None else None
    if refusal is not None:
        raise ConversionError(
            path,
            refusal.lineno or 1,
            1,
            f"internal error: CPython cannot compile the converted script ({one_line(refusal.msg)}); nothing written",
        )
    if converted is not None and codec is not None and not verifies_printed_text():
        module = converted
    else:
        module, codec = _parsed_output(output, path)
    # Only the tree matters here: the rules that can only report cannot change it.
    again_module = run_codemods(module, options, path, output, tree_only=True).module
    if again_module is module:
        # No pass changed the tree ``output`` was printed from (or read from it): it prints
        # back to ``output`` (libcst's round trip, with the Codec's repairs where libcst's
        # printer loses bytes).
        return
    again = codec.generate(again_module)
    if again != output:
        line = first_differing_line(output, again)
        raise ConversionError(
            path,
            line,
            1,
            "internal error: converting the result again changes it (unstable rewrite); nothing written",
        )


def verifies_printed_text() -> bool:
    """Whether the verification parses the printed output afresh (``ACCEL_CONVERT_VERIFY=printed``)
    instead of converting the tree it was printed from again."""
    return os.environ.get("ACCEL_CONVERT_VERIFY") == "printed"


def _parsed_output(output: bytes, path: str) -> tuple[cst.Module, Codec]:
    try:
        return parse(output, path)
    except ConversionError as error:
        raise ConversionError(
            path,
            1,
            1,
            f"internal error: the converted script does not parse ({error.message}); nothing written",
        ) from None


def _syntax_problem(code: bytes) -> str:
    """CPython's complaint about ``code``, with its line in the converted script."""
    try:
        compile(code, "<converted>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except ValueError as error:  # a null byte
        return str(error)
    return "libcst cannot read it"


def first_differing_line(first: bytes, second: bytes) -> int:
    """The 1-based line where two texts start to differ."""
    for number, (a, b) in enumerate(zip(first.splitlines(), second.splitlines()), start=1):
        if a != b:
            return number
    return min(len(first.splitlines()), len(second.splitlines())) + 1
