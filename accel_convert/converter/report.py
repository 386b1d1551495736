"""Everything the CLI shows: findings (text, JSON, SARIF, GitHub annotations), diffs, the
summary line, statistics, a progress bar, and the documentation of codes.

Streams: the converted script and diffs own stdout. Human-readable text always goes to stderr.
Machine-readable findings (``json``, ``sarif``, ``github``) go to stdout when it carries nothing
else, so ``accel-convert --check --output-format json src/ > findings.json`` works, and to
stderr when stdout carries a script or a diff.

Positions are shown 1-based (line and column), as editors, compilers and GitHub count them;
codemods record libcst's 0-based columns, converted here.
"""

from __future__ import annotations

import builtins
import inspect
import json
import os
import re
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

import click

from accel_convert.codemods import Change
from accel_convert.records import record

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.text import Text

    from accel_convert.codemods.engine.registry import CodeDoc
    from accel_convert.converter.pipeline import Conversion, ConversionError

OutputFormat = Literal["text", "json", "github", "sarif"]

#: Code used for a ``-o`` output that is missing or no longer matches its source (``--check``).
STALE_OUTPUT = "stale-output"


@record(frozen=True)
class Finding:
    """One line of the report: a change or warning from a codemod, or a stale output."""

    code: str
    message: str
    filename: str
    line: int
    column: int
    end_line: int
    end_column: int
    fixed: bool

    @classmethod
    def from_change(cls, filename: str, change: Change) -> Finding:
        cell = getattr(change, "cell", None)  # a notebook's: ``path:cell N:line:col``, as ruff shows them
        if cell:
            filename = f"{filename}:cell {cell}"
        return cls(
            change.code,
            change.message,
            filename,
            change.line,
            change.column + 1,
            change.end_line,
            change.end_column + 1,
            change.fixed,
        )

    @property
    def is_warning(self) -> bool:
        """ACC9xx: left for a person."""
        return not self.fixed and self.code != STALE_OUTPUT

    def as_json(self, fix: str | None = None) -> dict[str, object]:
        """The finding as ``--output-format json`` prints it (fields documented in docs/cli.md);
        ``fix``: its help line (:meth:`Reporter.help_of`)."""
        return {
            "code": self.code,
            "message": self.message,
            "filename": self.filename,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "fixed": self.fixed,
            "help": fix,
        }


@cache
def code_helps() -> dict[str, str]:
    """Code → the first sentence of the rule's "How to fix" text (``Rule.fixes``), on one line;
    ``--explain CODE`` shows the whole of it. Importing every rule costs a warm ``--check`` more
    than its own run: the check cache keeps this table (``CheckCache.code_helps``)."""
    from accel_convert.codemods.engine.registry import all_rules

    return {code: first_sentence(plain_prose(text)) for rule in all_rules() for code, text in rule.fixes.items()}


#: A code span (a full stop inside one, ``e.g.`` or ``x.y``, ends no sentence), or a full stop
#: followed by a space and a capital letter: the end of a sentence.
SENTENCE_PART = re.compile(r"`[^`]*`|(?P<stop>\.)\s+(?=[A-Z])")


def first_sentence(text: str) -> str:
    """The first sentence of ``text``, its whitespace (line breaks too) made single spaces."""
    text = " ".join(text.split())
    for match in SENTENCE_PART.finditer(text):
        if match.group("stop"):
            return text[: match.end("stop")]
    return text


def stale_output_finding(output_name: str, source_name: str, *, missing: bool) -> Finding:
    """``--check -o OUT``: OUT is missing, or no longer what converting its source gives."""
    state = "missing" if missing else f"stale: differs from converting {source_name}"
    message = f"{state}; run `accel-convert {source_name} -o {output_name}`"
    return Finding(STALE_OUTPUT, message, output_name, 1, 1, 1, 1, False)


#: A piece of a printed line: its text and a rich style (None: unstyled).
Piece = tuple[str, "str | None"]


def make_console(stream: IO[str], color: bool) -> Console:
    """A rich console that never wraps or guesses highlights, styled exactly when ``color``."""
    from rich.console import Console

    return Console(
        file=stream,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=True,
        markup=False,
        emoji=False,
    )


def wants_colour(stream: IO[str], flag: bool | None) -> bool:
    """The one decision on colour, for findings (rich) and diffs (click) alike: ``--color`` /
    ``--no-color`` first, then the ``NO_COLOR`` and ``FORCE_COLOR`` conventions (a non-empty
    value counts; NO_COLOR wins when both are set), then whether ``stream`` is a terminal."""
    if flag is not None:
        return flag
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if hasattr(builtins, "get_ipython"):
        return True  # a notebook: rich renders styles as HTML there
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream: no terminal
        return False


def is_plain(text: str) -> bool:
    """Text that rich prints unchanged when it does not style: no tab (expanded to columns), no
    control character (some stripped) and nothing else unprintable; newlines are fine."""
    return all(line.isprintable() for line in text.split("\n"))


class Output:
    """One stream the CLI prints whole lines to, through rich only when rich is needed.

    Why not always rich: importing ``rich.console`` is about a tenth of a ``--check`` run's
    start-up, and on a pipe or CI log (no colour) rich writes the text as it is. So rich is
    imported on the first line that could come out differently: styled output, or text with a
    tab or a control character (rich expands or strips those). The bytes are the same either way.
    """

    def __init__(self, stream: IO[str], color: bool | None) -> None:
        self.stream = stream
        self.color = wants_colour(stream, color)
        self.styled = self.color
        self._console: Console | None = None

    def print(self, *pieces: Piece) -> None:
        """Print one line made of ``pieces`` (and a newline)."""
        if not self.styled and all(is_plain(text) for text, _ in pieces):
            try:
                self.stream.write("".join(text for text, _ in pieces) + "\n")
                self.stream.flush()
                return
            except UnicodeEncodeError:
                pass  # rich has its own answer (a hint on the encoding); a BrokenPipeError ends the run
        if self._console is None:
            self._console = make_console(self.stream, self.color)
        self._console.print(rich_text(pieces))

    @contextmanager
    def above(self, console: Console) -> Iterator[None]:
        """While a progress bar is live on this stream, print through its console, which puts
        each line above the bar instead of through it."""
        saved = self._console, self.styled
        self._console, self.styled = console, True
        try:
            yield
        finally:
            self._console, self.styled = saved


def rich_text(pieces: Sequence[Piece]) -> Text:
    """The pieces as one rich Text, each with its style (a single piece styles the whole Text,
    as a ``Text(line, style=...)`` does)."""
    from rich.text import Text

    if len(pieces) == 1:
        ((piece, style),) = pieces
        return Text(piece, style=style or "")
    text = Text()
    for piece, style in pieces:
        text.append(piece, style=style)
    return text


def escape_github(value: str, *, is_property: bool = False) -> str:
    """Escape a value for a GitHub workflow command (the runner's own encoding rules)."""
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if is_property:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


#: Said under the summary when ``--select`` leaves out every rewrite: the checks then judge the
#: script as written, and report what a conversion would settle (an accelerator it would create).
CHECKS_WITHOUT_REWRITES = (
    "note: --select switched every rewrite off, so the checks judged the scripts as written, not as "
    "converted (a conversion settles some of what they report: run without --select to see its own)"
)


#: The colour of a finding's code (and of the caret under it) by :meth:`Reporter.severity`.
SEVERITY_STYLES = {"warning": "yellow", "error": "red", "notice": "green"}

#: The most characters of a source line a snippet shows: a longer line (minified code, a long
#: literal) is cut to this many around the finding's column, the cut ends marked with "…".
SNIPPET_WIDTH = 100
#: Columns a tab advances to the next multiple of, in a snippet (ruff shows tabs as 4 spaces).
TAB_WIDTH = 4
GUTTER_STYLE = "bold blue"


def snippet_lines(lines: Sequence[str], finding: Finding, style: str) -> list[tuple[Piece, ...]]:
    """ruff's snippet under a finding: its source line, numbered, and a caret under the span
    (its first line where the span runs over several); nothing where the line does not exist."""
    if not 1 <= finding.line <= len(lines):
        return []
    line = lines[finding.line - 1].rstrip("\r\n")
    end = finding.end_column if finding.end_line == finding.line else finding.column + 1
    text, start, width = snippet_text(line, finding.column - 1, max(end - 1, finding.column))
    gutter = " " * len(str(finding.line)) + " |"
    return [
        ((gutter, GUTTER_STYLE),),
        ((f"{finding.line} |", GUTTER_STYLE), (f" {text}" if text else "", None)),
        ((gutter, GUTTER_STYLE), (" " + " " * start, None), ("^" * width, style)),
        ((gutter, GUTTER_STYLE),),
    ]


def snippet_text(line: str, start: int, stop: int) -> tuple[str, int, int]:
    """``line`` as a terminal shows it, and where the caret goes under characters ``start`` to
    ``stop`` (0-based, end excluded) of the original: (text, cells before the caret, carets).
    Tabs become spaces, other unprintable characters "�" (rich would strip or expand them and
    move the caret); a line over :data:`SNIPPET_WIDTH` characters is cut around ``start``."""
    from rich.cells import cell_len  # wide characters (CJK) take two cells

    start = min(max(start, 0), len(line))
    stop = min(max(stop, start + 1), len(line) + 1)
    before, through = len(line[:start].expandtabs(TAB_WIDTH)), len(line[:stop].expandtabs(TAB_WIDTH))
    shown = "".join(char if char.isprintable() else "\N{REPLACEMENT CHARACTER}" for char in line.expandtabs(TAB_WIDTH))
    left, right = snippet_window(len(shown), before)
    text = ("…" if left else "") + shown[left:right] + ("…" if right < len(shown) else "")
    head = ("…" if left else "") + shown[left:before]
    return text, cell_len(head), max(1, cell_len(shown[before : min(through, right)]))


def snippet_window(length: int, caret: int) -> tuple[int, int]:
    """The characters ``[left, right)`` of a shown line that fit :data:`SNIPPET_WIDTH`, with the
    caret's character a third of the way in where the line must be cut."""
    if length <= SNIPPET_WIDTH:
        return 0, length
    left = max(0, min(caret - SNIPPET_WIDTH // 3, length - SNIPPET_WIDTH))
    return left, left + SNIPPET_WIDTH


class Reporter:
    """Collects and prints findings in the chosen format; counts files for the summary line.

    ``writes``: whether the run writes its results (a file, ``-o``, stdout); under ``--check``
    and ``--diff`` nothing is written, and every line says "would convert", never "converted".
    ``warnings_only``: show only what needs a person (ACC9xx, a stale ``-o`` output), not the
    rewrites. ``statistics``: in text format, a count per code at the end instead of a line per
    finding. In text format, a file's warnings come before its rewrites.
    ``checks_without_rewrites``: ``--select`` switched every rewrite off (a note says what that means).
    ``helps``: gives code → help line (:func:`code_helps`, or the check cache's copy of it).
    ``snippets``: the text goes to a terminal, where each finding shows its source line with a
    caret under its column (:func:`snippet_lines`), as ruff does; never in a log or a pipe.
    """

    def __init__(
        self,
        *,
        output_format: OutputFormat,
        check: bool,
        verbosity: int,
        messages: Output,
        findings_stream: Output,
        writes: bool | None = None,
        warnings_only: bool = False,
        statistics: bool = False,
        checks_without_rewrites: bool = False,
        snippets: bool = False,
        helps: Callable[[], Mapping[str, str]] = code_helps,
    ) -> None:
        self.output_format = output_format
        self.checks_without_rewrites = checks_without_rewrites
        self.check = check
        self.writes = not check if writes is None else writes
        self.verbosity = verbosity
        self.messages = messages
        self.findings_stream = findings_stream
        self.warnings_only = warnings_only
        self.statistics = statistics
        self.snippets = snippets
        self.helps = helps
        #: Every finding, shown or not (the exit code and the counts use them all).
        self.collected: list[Finding] = []
        #: Files that failed, for the machine-readable formats that report them (SARIF).
        self.errors: list[ConversionError] = []
        self.converted = self.unchanged = self.failed = self.skipped_count = 0
        #: Local modules converted with their entry script (counted in ``converted`` too).
        self.local_modules = 0

    # -- per file -----------------------------------------------------------------------------

    def file_done(
        self, shown_name: str, findings: Sequence[Finding], *, changed: bool, batch: str = "", source: str | None = None
    ) -> None:
        """Report one file: its findings, and a status line when verbose (or, under ``--check``,
        when quiet: the files that fail the check are always named). ``changed``: the file (or
        its ``-o`` output) was or would be rewritten; ``batch``: what its batch size comes to on
        several processes (:func:`batch_sentence`), said on its status line; ``source``: the
        file's text, for the snippets under its findings (None: no snippets, as for a notebook,
        whose positions count within a cell)."""
        if changed:
            self.converted += 1
        else:
            self.unchanged += 1
        lines = source_lines(source) if self.snippets and source is not None else []
        # Warnings first: what needs a person is not buried among a file's rewrites.
        for finding in sorted(findings, key=lambda finding: not finding.is_warning):
            self.finding(finding, lines)
        if self.output_format != "text":
            return
        if changed and self.verbosity >= 0 and not self.statistics:
            # One line per file says what the rewrites (shown with -v) came to.
            rewrites = sum(1 for finding in findings if finding.fixed)
            count = f" ({rewrites} rewrite{'s' if rewrites != 1 else ''})" if rewrites else ""
            said = f"; {batch}" if batch else ""
            self.messages.print((f"{shown_name}: {self.converted_word}{count}{said}", None))
        elif self.verbosity > 0 or (self.verbosity < 0 and self.check and changed):
            status = (self.converted_word if changed else "unchanged") if self.verbosity > 0 else "would convert"
            self.messages.print((f"{shown_name}: {status}", "dim" if self.verbosity > 0 else None))

    @property
    def converted_word(self) -> str:
        return "converted" if self.writes else "would convert"

    def shown(self, finding: Finding) -> bool:
        return not (self.warnings_only and finding.fixed)

    def shown_as_text(self, finding: Finding) -> bool:
        """A text line by default only for what needs a person (ACC9xx, a rewrite ``--check``
        finds pending that was not made); every rewrite with ``-v``, as ruff shows only
        problems. The JSON, SARIF and GitHub formats always carry every finding."""
        if self.verbosity < 0 or self.statistics or not self.shown(finding):
            return False
        return self.verbosity > 0 or not finding.fixed

    def finding(self, finding: Finding, lines: Sequence[str] = ()) -> None:
        """Print (text, github) or keep (json, sarif, statistics) one finding; ``lines``: its
        file's source lines, for a snippet (empty: none)."""
        self.collected.append(finding)
        if not self.shown(finding):
            return
        if self.output_format == "github":
            self.findings_stream.print((self.github_line(finding), None))
        elif self.output_format == "text" and self.shown_as_text(finding):
            self.print_text(finding, lines)

    def help_of(self, finding: Finding) -> str | None:
        """The ``help:`` line under a finding: how a person fixes it (ACC9xx only)."""
        if not finding.is_warning:
            return None
        return self.helps().get(finding.code)

    def print_text(self, finding: Finding, lines: Sequence[str]) -> None:
        """The finding's line; on a terminal its source line with a caret under the column;
        for a warning, a ``help:`` line saying how to fix it (as ruff prints them)."""
        self.messages.print(*self.text_line(finding))
        style = SEVERITY_STYLES[self.severity(finding)]
        if finding.code != STALE_OUTPUT:  # a stale output's position is in another file
            for row in snippet_lines(lines, finding, style):
                self.messages.print(*row)
        fix = self.help_of(finding)
        if fix:
            self.messages.print(("  ", None), ("help", "bold"), (f": {fix}", None))

    def severity(self, finding: Finding) -> str:
        """``warning`` for ACC9xx, ``error`` for what ``--check`` fails on, ``notice`` for a
        rewrite that was made."""
        if finding.is_warning:
            return "warning"
        return "error" if self.check or not finding.fixed else "notice"

    def text_line(self, finding: Finding) -> tuple[Piece, ...]:
        """``path:line:col: CODE message``, the form editors and CI logs turn into links."""
        style = SEVERITY_STYLES[self.severity(finding)]
        return (
            (f"{finding.filename}:{finding.line}:{finding.column}:", "bold"),
            (" ", None),
            (finding.code, style),
            (f" {finding.message}", None),
        )

    def github_line(self, finding: Finding) -> str:
        """A GitHub Actions annotation at the finding's :meth:`severity` level."""
        level = self.severity(finding)
        properties = ",".join(
            [
                f"file={escape_github(finding.filename, is_property=True)}",
                f"line={finding.line}",
                f"col={finding.column}",
                f"endLine={finding.end_line}",
                f"endColumn={finding.end_column}",
                f"title={finding.code}",
            ]
        )
        return f"::{level} {properties}::{escape_github(f'{finding.code} {finding.message}')}"

    def skipped(self, shown_name: str, reason: str) -> None:
        """A file found in a folder that cannot be read (a symbolic link loop): one line, and
        the run goes on, as black and ruff do."""
        self.skipped_count += 1
        if self.verbosity >= 0:
            self.messages.print((f"{shown_name}: skipped: {reason}", "yellow"))

    def error(self, error: ConversionError) -> None:
        """A file that failed: one line on stderr (and an annotation for GitHub)."""
        self.failed += 1
        self.errors.append(error)
        self.messages.print((str(error), "red"))
        if self.output_format == "github":
            self.findings_stream.print(
                (
                    f"::error file={escape_github(error.path, is_property=True)},line={error.line},"
                    f"col={error.column}::{escape_github(error.message)}",
                    None,
                )
            )

    # -- at the end ---------------------------------------------------------------------------

    def finish(self) -> None:
        """Print the JSON array (json) or SARIF log (sarif), the statistics (``--statistics``)
        and the summary line (unless quiet)."""
        shown = [finding for finding in self.collected if self.shown(finding)]
        if self.output_format == "json":
            found = [finding.as_json(self.help_of(finding)) for finding in shown]
            self.findings_stream.print((json.dumps(found, indent=2), None))
        elif self.output_format == "sarif":
            log = sarif_log(shown, self.errors)
            self.findings_stream.print((json.dumps(log, indent=2), None))
        if self.statistics:
            for line in statistics_lines(shown):
                self.messages.print((line, None))
        if self.verbosity >= 0:
            self.messages.print((self.summary_line(), "bold"))
            if self.checks_without_rewrites and self.output_format == "text":
                self.messages.print((CHECKS_WITHOUT_REWRITES, None))

    def summary_line(self) -> str:
        """``3 converted, 1 unchanged, 1 failed`` (``would convert`` when nothing is written:
        --check, --diff), plus the number of warnings left for a person."""
        line = f"{self.converted} {self.converted_word}, {self.unchanged} unchanged, {self.failed} failed"
        if self.skipped_count:
            line += f", {self.skipped_count} skipped"
        if self.local_modules:
            modules = "module" if self.local_modules == 1 else "modules"
            line += f" ({self.local_modules} local {modules} converted with {'its' if self.local_modules == 1 else 'their'} entry script)"
        warnings = self.warning_count
        if warnings:
            line += f" ({warnings} warnings need a person)" if warnings > 1 else " (1 warning needs a person)"
        return line

    @property
    def warning_count(self) -> int:
        return sum(1 for finding in self.collected if finding.is_warning)


def statistics_lines(findings: Sequence[Finding]) -> list[str]:
    """``--statistics``: one line per code, most frequent first (ties by code), as ruff prints
    them: the count, the code, whether it is an automatic rewrite, the code's name."""
    counts = Counter(finding.code for finding in findings)
    names = {doc.code: doc.name for doc in registry_docs()}
    fixed = {finding.code: finding.fixed for finding in findings}
    width = max((len(str(count)) for count in counts.values()), default=1)
    return [
        f"{count:>{width}}  {code:<7} {'[rewrite]' if fixed[code] else '[person] '} {names.get(code, code)}"
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]


class ProgressBar:
    """A transient bar on stderr counting files, for runs long enough to wonder about; findings
    and messages printed meanwhile appear above it. Only on a terminal: the caller decides."""

    def __init__(self, messages: Output, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.messages = messages
        self.progress: Progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=make_console(messages.stream, messages.color),
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.task = self.progress.add_task("converting", total=total)

    @contextmanager
    def running(self) -> Iterator[ProgressBar]:
        with self.progress, self.messages.above(self.progress.console):
            yield self

    def advance(self) -> None:
        self.progress.advance(self.task)


def batch_sentence(batch_size: int | None, has_loader: bool, split_batches: bool) -> str:
    """What a converted script's batch comes to on several processes (two as the example), for
    its status line: every process takes a whole batch, unless ``--split-batches`` splits it."""
    if not has_loader:
        return ""
    if split_batches:
        if batch_size is None:
            return "each batch split across processes: the global batch is the original's"
        return f"batch {batch_size} in all, split across processes: {batch_size / 2:g} each on 2 processes"
    if batch_size is None:
        return "each process takes a whole batch: the global batch grows with the number of processes (--split-batches keeps the original's)"
    return (
        f"batch {batch_size} per process: {2 * batch_size} on 2 processes (--split-batches keeps {batch_size} in all)"
    )


# --------------------------------------------------------------------------------------------
# Documentation of codes: --list-codes, --explain, SARIF rules (all from the rules themselves)
# --------------------------------------------------------------------------------------------


def registry_docs() -> list[CodeDoc]:
    """The codemods' self-documentation; imported late so plain runs never pay for it."""
    from accel_convert.codemods.engine.registry import code_docs

    return code_docs()


def code_rationales() -> dict[str, tuple[str, str]]:
    """Code → (the code of the rule that reports it, the why: the rule module's docstring after
    its headline). A rule's extra codes share its docstring."""
    from accel_convert.codemods.engine.registry import all_rules

    rationales: dict[str, tuple[str, str]] = {}
    for rule in all_rules():
        doc = inspect.cleandoc(inspect.getdoc(inspect.getmodule(rule)) or "")
        _, _, body = doc.partition("\n\n")
        for code in (rule.code, *rule.extra_codes):
            rationales[code] = (rule.code, body.strip())
    return rationales


def explain_lines(doc: CodeDoc, rationale: tuple[str, str] | None) -> list[str]:
    """``--explain CODE``: the code's headline, why the rule exists (its module's docstring) and
    its examples, before and after."""
    kind = "automatic rewrite" if doc.fixed else "reported, left for a person"
    lines = [f"{doc.code} {doc.name} ({kind})", "", plain_prose(doc.summary)]
    if rationale is not None:
        owner, why = rationale
        if why:
            lines.append("")
            if owner != doc.code:
                lines.append(f"Reported by the {owner} rule:")
            lines.extend(plain_prose(why).splitlines())
    if doc.examples:
        lines.append("")
        lines.extend(example_lines(doc))
    if doc.fix:
        lines += ["", "How to fix:", *plain_prose(doc.fix).splitlines()]
    return lines


def plain_prose(text: str) -> str:
    """Docstring prose for a terminal: reStructuredText's ````code```` shown as Markdown's `code`."""
    return text.replace("``", "`")


def example_lines(doc: CodeDoc) -> list[str]:
    """A code's examples: each script before, and the converted script or the message reported."""
    lines: list[str] = []
    for example in doc.examples:
        if example.leaves_alone:
            lines.append(f"    Left alone ({doc.code} is not reported):")
        for title, code in (("Before", example.before), ("After", example.after)):
            if code:
                lines.append(f"    {title}:")
                lines.extend(f"        {row}" if row else "" for row in code.splitlines())
        if example.message:
            flag = f" (with --target {example.target})" if example.target != "runtime" else ""
            lines.append(f"    Reported{flag}: {doc.code} {example.message}")
    return lines


# --------------------------------------------------------------------------------------------
# SARIF 2.1.0 (code-scanning tools: GitHub code scanning, VS Code's SARIF viewer, ...)
# --------------------------------------------------------------------------------------------

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: What the stale-output finding of ``--check -o`` is, as a SARIF rule.
STALE_OUTPUT_RULE = ("converted copy missing or out of date", "the -o output differs from converting its source now")


def sarif_level(finding: Finding) -> str:
    """``warning`` for ACC9xx, ``note`` for an ACC1xx rewrite, ``error`` for a stale ``-o``
    output under ``--check`` (what fails the check)."""
    if finding.code == STALE_OUTPUT:
        return "error"
    return "note" if finding.fixed else "warning"


def sarif_uri(filename: str) -> str:
    """A file's path as a SARIF artifact URI: relative paths stay relative (to the folder the
    command ran in), absolute ones become ``file://`` URIs; characters a URI cannot hold are
    percent-encoded."""
    path = Path(filename)
    if path.is_absolute():
        return path.as_uri()
    return urllib.parse.quote(path.as_posix())


def sarif_region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def sarif_rules(docs: Sequence[CodeDoc], rationales: dict[str, tuple[str, str]]) -> list[dict[str, object]]:
    """``tool.driver.rules``: every code of the registry (and the stale-output check)."""
    rules: list[dict[str, object]] = []
    for doc in docs:
        why = rationales.get(doc.code, ("", ""))[1]
        rules.append(
            {
                "id": doc.code,
                "name": doc.name,
                "shortDescription": {"text": plain_prose(doc.summary)},
                "fullDescription": {"text": plain_prose(" ".join(why.split()) or doc.summary)},
                "help": {"text": "\n".join(explain_lines(doc, rationales.get(doc.code)))},
                "defaultConfiguration": {"level": "note" if doc.fixed else "warning"},
                "properties": {"kind": "rewrite" if doc.fixed else "report"},
            }
        )
    name, summary = STALE_OUTPUT_RULE
    rules.append(
        {
            "id": STALE_OUTPUT,
            "name": STALE_OUTPUT,
            "shortDescription": {"text": name},
            "fullDescription": {"text": summary},
            "defaultConfiguration": {"level": "error"},
        }
    )
    return rules


def sarif_log(findings: Sequence[Finding], errors: Sequence[ConversionError]) -> dict[str, object]:
    """One SARIF 2.1.0 log with one run: the tool and its rules, a result per finding, and the
    files that could not be converted as error notifications of the invocation."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        tool_version = version("accel-convert")
    except PackageNotFoundError:  # run from a source tree that was never installed
        tool_version = "0+unknown"
    rules = sarif_rules(registry_docs(), code_rationales())
    index = {rule["id"]: number for number, rule in enumerate(rules)}
    results = [
        {
            "ruleId": finding.code,
            "ruleIndex": index[finding.code],
            "level": sarif_level(finding),
            "message": {"text": finding.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": sarif_uri(finding.filename)},
                        "region": sarif_region(finding.line, finding.column, finding.end_line, finding.end_column),
                    }
                }
            ],
        }
        for finding in findings
        if finding.code in index
    ]
    notifications = [
        {
            "level": "error",
            "message": {"text": error.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": sarif_uri(error.path)},
                        "region": {"startLine": max(error.line, 1), "startColumn": max(error.column, 1)},
                    }
                }
            ],
        }
        for error in errors
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "accel-convert",
                        "version": tool_version,
                        "rules": rules,
                    }
                },
                "invocations": [
                    {"executionSuccessful": not errors, "toolExecutionNotifications": notifications},
                ],
                "results": results,
            }
        ],
    }


#: A Python source line with its ending: CPython ends lines at LF, CRLF and a lone CR only (not
#: at the form feeds and Unicode separators ``str.splitlines`` also splits on).
SOURCE_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")

NO_NEWLINE_AT_END = "\\ No newline at end of file\n"


def source_lines(text: str) -> list[str]:
    """``text`` split into lines that keep their own endings."""
    return SOURCE_LINE.findall(text)


def diff_path(name: str) -> str:
    """A path as a diff header names it: relative to the working folder where it lies inside it
    (what ``git apply`` run there expects), else without its leading ``/`` as git writes one."""
    path = Path(name)
    if path.is_absolute():
        try:
            return path.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return path.as_posix().lstrip("/")
    return path.as_posix()


def unified_diff(conversion: Conversion, new_name: str | None = None) -> list[str]:
    """The diff from the original to the converted script, as ``git diff`` writes it: headers
    ``a/PATH`` and ``b/PATH`` (``git apply`` and ``patch -p1`` strip the first component), each
    line with its own ending (CRLF stays CRLF), and git's marker after a last line without one."""
    import difflib  # only --diff needs it

    cell_diffs = getattr(conversion, "cell_diffs", None)
    if cell_diffs is not None:  # a notebook: one diff per changed code cell (converter.notebooks)
        return cell_diffs(new_name)
    old = source_lines(conversion.source.decode(conversion.encoding, errors="replace"))
    new = source_lines(conversion.output.decode(conversion.encoding, errors="replace"))
    lines: list[str] = []
    diff = difflib.unified_diff(
        old,
        new,
        fromfile=f"a/{diff_path(conversion.path)}",
        tofile=f"b/{diff_path(new_name or conversion.path)}",
        lineterm="",
    )
    for number, line in enumerate(diff):
        # The two file headers come first; a content line starts with " ", "-" or "+".
        if number < 2 or line.startswith("@@"):
            lines.append(line + "\n")
        elif line.endswith(("\n", "\r")):
            lines.append(line)
        else:
            lines.extend((line + "\n", NO_NEWLINE_AT_END))
    return lines


#: Diff line prefix → colour (the first match wins; "+++"/"---" headers before "+"/"-").
DIFF_COLOURS = (("+++", "bright_white"), ("---", "bright_white"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def print_diff(lines: Sequence[str], color: bool) -> None:
    """Print a unified diff to stdout, coloured when ``color`` (see :func:`wants_colour`).

    Written with click rather than rich: rich expands tabs, and a diff must keep the file's
    characters (and line endings) exactly so that it still applies as a patch.
    """
    for line in lines:
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        colour = next((fg for prefix, fg in DIFF_COLOURS if body.startswith(prefix)), None)
        click.echo((click.style(body, fg=colour) if colour else body) + ending, color=color, nl=False)


def codes_listing(docs: Sequence[CodeDoc], *, examples: bool) -> list[str]:
    """The list of codes, generated from the rules' docstrings and examples (never written twice):
    for each example its script before, and the converted script or the message reported."""
    lines: list[str] = []
    for doc in docs:
        kind = "rewrite" if doc.fixed else "report"
        lines.append(f"{doc.code}  {doc.name} ({kind}): {plain_prose(doc.summary)}")
        if examples:
            lines.extend(example_lines(doc))
            lines.append("")
    return lines
