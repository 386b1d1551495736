"""Text findings as ruff shows them: a ``help:`` line under every ``ACC9xx`` finding (none under
a rewrite), and on a terminal the finding's source line with carets under its span, never in a
log or a pipe.

The command runs in-process (CliRunner); "on a terminal" is ``cli.is_terminal`` answering yes,
as it does for a real terminal on stderr.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_convert.converter import cli
from accel_convert.converter.cli import main
from accel_convert.converter.report import (
    SNIPPET_WIDTH,
    Finding,
    Output,
    Reporter,
    code_helps,
    first_sentence,
    snippet_lines,
)
from tests.launching import base_env

#: ACC901 on the last line (no final newline), rewrites (ACC101, ACC103, ACC105) before it.
LAST_LINE = b"""import torch


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        loss = model(data).sum()
        loss.backward()"""

#: ACC903 on line 1, mid-line (column 35).
FIRST_LINE = b'import torch.distributed as dist; dist.init_process_group("gloo")\n'

#: ACC901 on a tab-indented line: ``\t\tloss.backward()``, column 3.
TABS = LAST_LINE.replace(b"\n    ", b"\n\t").replace(b"\t    ", b"\t\t") + b"\n"

FINDING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<column>\d+): (?P<code>ACC\d{3}) ")


def run(tmp_path: Path, name: str, source: bytes, *args: str) -> list[str]:
    """``accel-convert --check -v`` on one file; the lines on stderr."""
    (tmp_path / name).write_bytes(source)
    result = CliRunner().invoke(main, ["--check", "-v", "--no-cache", *args, str(tmp_path / name)])
    assert result.exit_code == 1, result.stderr
    return result.stderr.splitlines()


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "is_terminal", lambda stream: True)


def blocks(lines: list[str]) -> dict[str, list[str]]:
    """Each finding's code → the lines printed under it, up to the next finding or status line."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        match = FINDING.match(line)
        if match:
            current = found.setdefault(match["code"], [])
        elif current is not None and re.match(r" |\d+ \|", line):
            current.append(line)
        else:
            current = None
    return found


def test_a_help_line_under_each_warning_and_none_under_rewrites(tmp_path: Path) -> None:
    lines = run(tmp_path, "train.py", LAST_LINE)
    under = blocks(lines)
    assert set(under) == {"ACC901", "ACC101", "ACC103", "ACC105"}
    assert under["ACC901"] == [f"  help: {code_helps()['ACC901']}"], "not on a terminal: no source line"
    assert all(under[code] == [] for code in ("ACC101", "ACC103", "ACC105"))
    assert code_helps()["ACC901"].startswith("Build the training data as a `torch.utils.data.DataLoader`")


def test_every_report_code_has_a_one_line_help_and_no_rewrite_has_one() -> None:
    from accel_convert.codemods.engine.registry import code_docs

    helps = code_helps()
    for doc in code_docs():
        if doc.fixed:
            assert doc.code not in helps
        else:
            assert "\n" not in helps[doc.code] and "``" not in helps[doc.code], doc.code
            assert " ".join(doc.fix.replace("``", "`").split()).startswith(helps[doc.code]), doc.code


def test_first_sentence_ignores_full_stops_in_code_and_abbreviations() -> None:
    assert first_sentence("Call `x.y()`, e.g. `a.b`.  Then more.\nAnd more.") == "Call `x.y()`, e.g. `a.b`."
    assert first_sentence("One sentence only") == "One sentence only"


def test_on_a_terminal_the_source_line_and_carets_sit_between_finding_and_help(tmp_path: Path, terminal: None) -> None:
    lines = run(tmp_path, "train.py", LAST_LINE)
    assert blocks(lines)["ACC901"] == [
        "  |",
        "8 |         loss.backward()",
        "  |         ^^^^^^^^^^^^^^^",
        "  |",
        f"  help: {code_helps()['ACC901']}",
    ], "the last line, which has no newline"
    assert blocks(lines)["ACC105"] == ["  |", "8 |         loss.backward()", "  |         ^^^^^^^^^^^^^^^", "  |"]


def test_a_finding_on_line_one_mid_line(tmp_path: Path, terminal: None) -> None:
    lines = run(tmp_path, "first.py", FIRST_LINE, "--strict")
    assert any(
        line.endswith(":1:35: ACC903 init_process_group already distributes this script: nothing converted")
        for line in lines
    )
    snippet = blocks(lines)["ACC903"][:4]
    assert snippet[1] == '1 | import torch.distributed as dist; dist.init_process_group("gloo")'
    assert snippet[2] == "  | " + " " * 34 + "^" * len('dist.init_process_group("gloo")')


def test_a_tab_indented_line_shows_spaces_and_the_caret_under_the_code(tmp_path: Path, terminal: None) -> None:
    assert b"\n\t\tloss.backward()\n" in TABS
    lines = run(tmp_path, "tabs.py", TABS)
    assert any(re.match(r".*tabs\.py:8:3: ACC901 ", line) for line in lines)
    assert blocks(lines)["ACC901"][1:3] == ["8 |         loss.backward()", "  |         ^^^^^^^^^^^^^^^"]


def test_a_file_decoded_by_its_coding_cookie_and_crlf_endings(tmp_path: Path, terminal: None) -> None:
    source = b"# -*- coding: latin-1 -*-\r\n" + LAST_LINE.replace(b"\n", b"\r\n") + b"  # r\xe9sum\xe9\r\n"
    lines = run(tmp_path, "latin.py", source)
    assert blocks(lines)["ACC901"][1:3] == ["9 |         loss.backward()  # résumé", "  |         ^^^^^^^^^^^^^^^"]


def test_quiet_and_statistics_print_neither_help_nor_source(tmp_path: Path, terminal: None) -> None:
    for flag in ("-q", "--statistics"):
        (tmp_path / "train.py").write_bytes(LAST_LINE)
        result = CliRunner().invoke(main, ["--check", flag, "--no-cache", str(tmp_path / "train.py")])
        assert "help:" not in result.stderr and " |" not in result.stderr, result.stderr


def test_a_notebook_gets_help_but_no_source_line(tmp_path: Path, terminal: None) -> None:
    cell: dict[str, object] = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebook = {
        "cells": [{**cell, "source": LAST_LINE.decode().splitlines(keepends=True)}],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    lines = run(tmp_path, "train.ipynb", json.dumps(notebook).encode())
    under = [line for line in lines if re.match(r" |\d+ \|", line)]
    assert under == [f"  help: {code_helps()['ACC901']}"], lines


def finding(line: int, column: int, end_column: int, end_line: int | None = None) -> Finding:
    return Finding("ACC901", "message", "x.py", line, column, end_line or line, end_column, False)


def test_a_long_line_is_cut_around_the_finding() -> None:
    line = "x = [" + "1, " * 100 + "loss.backward()" + ", 2" * 100 + "]\n"
    column = line.index("loss") + 1
    rows = snippet_lines([line], finding(1, column, column + len("loss.backward()")), "yellow")
    shown, carets = rows[1][1][0][1:], rows[2][1][0][1:] + rows[2][2][0]
    assert shown.startswith("…") and shown.endswith("…") and len(shown) == SNIPPET_WIDTH + 2
    assert carets.index("^") == shown.index("loss.backward()"), "the caret under the finding's column"
    assert carets.strip() == "^" * len("loss.backward()")


def test_odd_lines_never_crash() -> None:
    lines = ["a\x0cb = 1\n", "\n", "short\n"]
    rows = snippet_lines(lines, finding(1, 1, 6), "yellow")
    assert rows[1][1][0] == " a\N{REPLACEMENT CHARACTER}b = 1", "a form feed shown as one character"
    assert snippet_lines(lines, finding(2, 1, 1), "yellow")[2][2][0] == "^", "an empty line: one caret"
    assert snippet_lines(lines, finding(3, 40, 50), "yellow")[2][1][0] == " " * 6, "past the end: after it"
    assert snippet_lines(lines, finding(3, 2, 3, end_line=9), "yellow")[2][2][0] == "^", "over several lines"
    assert snippet_lines(lines, finding(4, 1, 2), "yellow") == [], "no such line: no snippet"
    assert snippet_lines([], finding(1, 1, 2), "yellow") == []
    wide = 'x = "日本"; y = 1\n'  # each of 日本 takes two cells of a terminal
    assert snippet_lines([wide], finding(1, 11, 12), "yellow")[2][1][0] == " " * (1 + 12), "under the y"


def test_the_reporter_prints_snippets_only_when_told_it_writes_to_a_terminal() -> None:
    source = "import torch\nloss.backward()\n"
    warning = Finding("ACC901", "message", "x.py", 2, 1, 2, 16, False)
    for snippets in (True, False):
        stream = io.StringIO()
        messages = Output(stream, False)
        reporter = Reporter(
            output_format="text",
            check=True,
            verbosity=0,
            messages=messages,
            findings_stream=messages,
            snippets=snippets,
        )
        reporter.file_done("x.py", [warning], changed=False, source=source)
        assert ("2 | loss.backward()" in stream.getvalue()) is snippets
        assert "  help: " in stream.getvalue()


#: Runs ``accel-convert ARGS`` in this process, then says whether any rule module was imported.
RULES_IMPORTED = """
import sys
from accel_convert.converter.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(any(name.startswith("accel_convert.codemods.engine.registry") for name in sys.modules), file=sys.stderr)
"""


def test_a_warm_check_prints_the_help_lines_without_importing_the_rules(tmp_path: Path) -> None:
    """The check cache keeps the help lines: a second ``--check`` of unchanged files answers from
    it, and importing every rule for their help would cost more than the whole warm run."""
    (tmp_path / "train.py").write_bytes(LAST_LINE)
    env = {**base_env(), "ACCEL_CONVERT_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [sys.executable, "-c", RULES_IMPORTED, "--check", "train.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
            check=False,
        )
        for _ in range(2)
    ]
    cold, warm = (run.stderr.splitlines() for run in runs)
    assert cold[-1] == "True" and warm[-1] == "False", (cold, warm)
    assert cold[:-1] == warm[:-1] and f"  help: {code_helps()['ACC901']}" in warm
    helps = list((tmp_path / "cache").rglob("helps-*"))
    assert len(helps) == 1
    helps[0].write_bytes(b"[1, 2]")  # a spoiled table is computed and written again
    again = subprocess.run(
        [sys.executable, "-c", RULES_IMPORTED, "--check", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert again.stderr.splitlines()[:-1] == warm[:-1]
    assert json.loads(helps[0].read_bytes())["ACC901"] == code_helps()["ACC901"]
