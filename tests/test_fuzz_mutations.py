"""A seeded mutation fuzzer over the fixture scripts: whatever the bytes, the converter gives a
parseable, idempotent conversion or one error line, never a crash.

Each mutant is a fixture script with one to three random edits of the kinds that break tools:
bytes deleted, flipped or inserted (null bytes, BOMs, lone CRs, bytes no encoding decodes), lines
duplicated, swapped, re-indented or cut, brackets and keywords dropped in, deep nesting, line
endings changed. The seed is fixed, so a failure always reproduces (the test names the mutant's
seed and edits). hypothesmith (generated programs) is not installed here and is not used.

Most mutants run in-process through the pipeline (fast); a sample goes through the real command.
"""

from __future__ import annotations

import ast
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from accel_convert.codemods import Options
from accel_convert.converter.pipeline import ConversionError, convert_source
from tests.launching import REPO_ROOT, base_env

FIXTURES = sorted((REPO_ROOT / "fixtures" / "cases").glob("*.py"))
SEED = 20261201
MUTANTS = 600
CLI_SAMPLE = 24

#: Pieces a mutation drops into a script.
INSERTS = [
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b":",
    b",",
    b"=",
    b"\\",
    b"'",
    b'"',
    b'"""',
    b"#",
    b"\t",
    b" ",
    b"\x00",
    b"\xef\xbb\xbf",
    b"\r",
    b"\r\n",
    b"\xff",
    b"\xe9",
    b"\x0c",
    b"lambda: ",
    b"not ",
    b"await ",
    b"yield ",
    b"**",
    b"@",
    b"->",
    b"return ",
    b"async ",
    b"del ",
    b"global torch\n",
    b"\n    ",
    b"\ndef f(:\n",
    b"(" * 250,
    b"-" * 600 + b"x",
    b"x" + b"[0]" * 300,
    b"a" + b" + a" * 700,
    b"loss.backward()\n",
    b"import torch\n",
    b"model.cuda()\n",
    b"torch.cuda.amp.GradScaler()",
]


def mutate(source: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """``source`` with one to three random edits, and what they were."""
    edits: list[str] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(list(EDITS))
        source = EDITS[kind](source, rng)
        edits.append(kind)
    return source, edits


def _position(source: bytes, rng: random.Random) -> int:
    return rng.randrange(len(source) + 1)


def _lines(source: bytes) -> list[bytes]:
    return source.splitlines(keepends=True) or [b""]


def insert(source: bytes, rng: random.Random) -> bytes:
    at = _position(source, rng)
    return source[:at] + rng.choice(INSERTS) + source[at:]


def delete(source: bytes, rng: random.Random) -> bytes:
    at = _position(source, rng)
    return source[:at] + source[at + rng.randint(1, 40) :]


def flip(source: bytes, rng: random.Random) -> bytes:
    if not source:
        return source
    at = rng.randrange(len(source))
    return source[:at] + bytes([source[at] ^ (1 << rng.randrange(8))]) + source[at + 1 :]


def duplicate_line(source: bytes, rng: random.Random) -> bytes:
    lines = _lines(source)
    at = rng.randrange(len(lines))
    return b"".join(lines[: at + 1] + [lines[at]] + lines[at + 1 :])


def swap_lines(source: bytes, rng: random.Random) -> bytes:
    lines = _lines(source)
    first, second = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[first], lines[second] = lines[second], lines[first]
    return b"".join(lines)


def reindent(source: bytes, rng: random.Random) -> bytes:
    lines = _lines(source)
    at = rng.randrange(len(lines))
    lines[at] = rng.choice([b"", b" ", b"    ", b"\t"]) + lines[at].lstrip(b" \t")
    return b"".join(lines)


def truncate(source: bytes, rng: random.Random) -> bytes:
    return source[: _position(source, rng)]


def line_endings(source: bytes, rng: random.Random) -> bytes:
    ending = rng.choice([b"\r\n", b"\r"])
    if rng.random() < 0.5:
        return source.replace(b"\n", ending)
    lines = _lines(source)
    at = rng.randrange(len(lines))
    lines[at] = lines[at].rstrip(b"\r\n") + ending
    return b"".join(lines)


EDITS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "insert": insert,
    "delete": delete,
    "flip": flip,
    "duplicate_line": duplicate_line,
    "swap_lines": swap_lines,
    "reindent": reindent,
    "truncate": truncate,
    "line_endings": line_endings,
}


def mutants(count: int, seed: int) -> list[tuple[str, bytes, list[str]]]:
    rng = random.Random(seed)
    found = []
    for index in range(count):
        fixture = rng.choice(FIXTURES)
        source, edits = mutate(fixture.read_bytes(), rng)
        found.append((f"mutant{index:03}_{fixture.stem}.py", source, edits))
    return found


def cpython_parses(source: bytes) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def test_every_mutant_converts_idempotently_or_fails_in_one_line() -> None:
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    for name, source, edits in mutants(MUTANTS, SEED):
        where = f"{name} (seed {SEED}, edits {edits})"
        try:
            conversion = convert_source(source, Options(), path=name)
        except ConversionError as error:
            line = str(error)
            if "\n" in line or "\r" in line or not line.startswith(f"{name}:"):
                problems.append(f"{where}: error is not one line: {line!r}")
            if "internal error" in line:
                problems.append(f"{where}: {line}")
            outcomes["refused"] += 1
            continue
        except Exception as error:  # noqa: BLE001 - the very thing this test looks for
            problems.append(f"{where}: crashed with {type(error).__name__}: {error}")
            continue
        outcomes["converted" if conversion.changed else "unchanged"] += 1
        if cpython_parses(source) and not cpython_parses(conversion.output):
            problems.append(f"{where}: the output does not parse")
        again = convert_source(conversion.output, Options(), path=name).output
        if again != conversion.output:
            problems.append(f"{where}: converting the printed output changes it again")
    print(f"mutants: {MUTANTS}, outcomes: {dict(outcomes)}")
    assert not problems, "\n".join(problems)
    # The fuzzer must reach both sides: mutants that still convert, and mutants refused.
    assert outcomes["converted"] > MUTANTS // 5 and outcomes["refused"] > MUTANTS // 5, outcomes


FINDING_OR_ERROR = re.compile(r"^(?P<path>\S+\.py):\d+:\d+: ")


def test_a_sample_of_mutants_through_the_command(tmp_path: Path) -> None:
    sample = mutants(CLI_SAMPLE, SEED + 1)
    for name, source, _ in sample:
        (tmp_path / name).write_bytes(source)
    expected_failures = set()
    for name, source, _ in sample:
        try:
            convert_source(source, Options(), path=name)
        except ConversionError:
            expected_failures.add(name)
    result = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", "--check", *[name for name, _, _ in sample]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=base_env(),
        timeout=300,
        check=False,
    )
    assert result.returncode == (123 if expected_failures else 1), result.stderr
    assert "Traceback" not in result.stderr
    *lines, summary = result.stderr.splitlines()
    # Findings, their help lines and each converted file's status line (``PATH: would convert (N
    # rewrites)``) aside.
    error_lines = [
        line
        for line in lines
        if not re.search(
            r"^\S+:\d+:\d+: (ACC\d+|stale-output) |^\S+\.py: would convert \(\d+ rewrites?\)$|^  help: ", line
        )
    ]
    assert all(FINDING_OR_ERROR.match(line) for line in error_lines), error_lines
    failed = Counter(FINDING_OR_ERROR.match(line)["path"] for line in error_lines)  # type: ignore[index]
    assert failed == Counter(expected_failures), "exactly one line per failed file"
    assert summary.endswith(f"{len(expected_failures)} failed") or f"{len(expected_failures)} failed (" in summary, (
        summary
    )
