"""The converter on bytes a hostile user (or a fuzzer) sends: line endings of every kind, null
bytes, stray BOMs, undecodable bytes in comments, expressions nested thousands deep.

CPython's own parser is the judge: what it refuses is refused (exit 123, one line), what it
accepts is converted, and the printed result converts to itself byte for byte.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings

import pytest

from accel_convert.codemods import Options
from accel_convert.converter.pipeline import ConversionError, convert_source
from tests.launching import REPO_ROOT, base_env

OPTIONS = Options()

TRAINING = [
    b"import torch",
    b"model = torch.nn.Linear(2, 1)",
    b"loss = model(x).sum()",
    b"loss.backward()",
    b"optimizer.step()",
]


def converted_twice(source: bytes) -> tuple[bytes, bytes]:
    """The conversion of ``source`` and the conversion of that printed output."""
    first = convert_source(source, OPTIONS, path="x.py").output
    return first, convert_source(first, OPTIONS, path="x.py").output


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_ending_survives_and_the_printed_output_is_stable(ending: bytes) -> None:
    source = ending.join(TRAINING) + ending
    first, second = converted_twice(source)
    assert b"accelerator.backward(loss)" in first
    assert first == second
    other_endings = {b"\n", b"\r\n", b"\r"} - {ending}
    stripped = first.replace(ending, b"")
    assert not any(other in stripped for other in other_endings), first
    assert first.endswith(ending)


def test_a_file_ending_in_a_lone_cr_keeps_it_when_nothing_changes() -> None:
    """libcst's printer drops a final lone CR: the file would 'convert' on every run."""
    source = b"import torch\rx = 1\r"
    conversion = convert_source(source, OPTIONS, path="x.py")
    assert conversion.output == source and not conversion.changed


def test_mixed_line_endings_come_back_byte_for_byte() -> None:
    lines = [
        b"import torch\r\n",
        b"model = torch.nn.Linear(2, 1)\n",
        b"x = 1\r",
        b"loss = model(x).sum()\r\n",
        b"loss.backward()\r",
        b"optimizer.step()\r",
    ]
    source = b"".join(lines)
    first, second = converted_twice(source)
    assert first == second
    for untouched in (b"model = torch.nn.Linear(2, 1)\n", b"x = 1\r", b"loss = model(x).sum()\r\n"):
        assert untouched in first
    assert b"accelerator.backward(loss)\r" in first and first.endswith(b")\r")
    unchanged = b"import torch\r\n# comment\rx = 1\n\r\n\r"
    assert convert_source(unchanged, OPTIONS, path="x.py").output == unchanged


@pytest.mark.parametrize(
    "source, position, words",
    [
        (b"import torch\n# a \x00 comment\nx = 1\n", (2, 5), "null byte"),
        (b'import torch\n"""doc \x00 string"""\n', (2, 8), "null byte"),
        (b"\xef\xbb\xbf\xef\xbb\xbfimport torch\n", (1, 1), "U+FEFF"),
        (b"import torch\nx = 1\n\xef\xbb\xbfy = 2\n", (3, 1), "U+FEFF"),
    ],
)
def test_bytes_cpython_refuses_are_refused(source: bytes, position: tuple[int, int], words: str) -> None:
    with pytest.raises((ValueError, SyntaxError)):
        compile(source, "x.py", "exec", dont_inherit=True)
    with pytest.raises(ConversionError) as caught:
        convert_source(source, OPTIONS, path="bad.py")
    assert (caught.value.line, caught.value.column) == position, str(caught.value)
    assert words in caught.value.message and "\n" not in str(caught.value)


def test_a_bom_inside_a_comment_or_string_is_kept() -> None:
    source = b"import torch\n# \xef\xbb\xbf in a comment\nname = '\xef\xbb\xbf'\nloss.backward()\noptimizer.step()\n"
    compile(source, "x.py", "exec", dont_inherit=True)
    first, second = converted_twice(source)
    assert first.count(b"\xef\xbb\xbf") == 2 and first == second


@pytest.mark.parametrize("cookie", [b"# -*- coding: utf-8 -*-\n", b"", b"\xef\xbb\xbf"], ids=["cookie", "none", "bom"])
def test_an_undecodable_byte_in_a_comment_is_accepted_as_py_compile_does(cookie: bytes) -> None:
    source = (
        cookie
        + b"import torch\n# caf\xe9 au lait\nmodel = torch.nn.Linear(2, 1)\nloss = model(x).sum()\nloss.backward()\noptimizer.step()\n"
    )
    compile(source, "x.py", "exec", dont_inherit=True)  # CPython takes it: so must we
    first, second = converted_twice(source)
    assert b"# caf\xe9 au lait\n" in first and b"accelerator.backward(loss)" in first
    assert first.startswith(cookie) and first == second


def test_an_undecodable_byte_in_code_is_still_refused() -> None:
    source = b"# -*- coding: utf-8 -*-\nimport torch\nname = 'caf\xe9'\n"
    with pytest.raises(ConversionError, match="cannot decode byte 0xe9"):
        convert_source(source, OPTIONS, path="bad.py")


def chain(kind: str, terms: int) -> bytes:
    expressions = {
        "plus": " + ".join(["a"] * terms),
        "subscript": "a" + "[0]" * terms,
        "unary": "-" * terms + "a",
        "attribute": "a" + ".b" * terms,
        "lambda": "lambda: " * terms + "a",
        "call": "a" + "()" * terms,
    }
    return b"import torch\nvalue = " + expressions[kind].encode() + b"\nloss.backward()\noptimizer.step()\n"


@pytest.mark.parametrize(
    "kind, terms",
    [("plus", 1000), ("subscript", 600), ("unary", 1000), ("attribute", 800), ("lambda", 700), ("call", 500)],
)
def test_long_chains_convert(kind: str, terms: int) -> None:
    """Deeper than the default recursion limit lets libcst walk: converted on a deeper stack."""
    first, second = converted_twice(chain(kind, terms))
    assert b"accelerator.backward(loss)" in first and first == second
    ast.parse(first)


def test_chains_past_the_converted_depth_are_one_error_line() -> None:
    with pytest.raises(ConversionError) as caught:
        convert_source(chain("plus", 2000), OPTIONS, path="deep.py")
    assert "nested too deeply for the parser" in caught.value.message and "\n" not in str(caught.value)


def test_a_syntax_warning_in_the_users_code_is_not_ours_to_print() -> None:
    source = b'import torch\npattern = "\\d+"\nx = 1 is 1\nloss.backward()\noptimizer.step()\n'
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under -W error: would turn valid code into an error
        first = convert_source(source, OPTIONS, path="x.py").output
    assert b"accelerator.backward(loss)" in first


NESTING_PROBE = """
import sys
from accel_convert.codemods import Options
from accel_convert.converter.pipeline import ConversionError, convert_source
depth = int(sys.argv[1])
source = b"import torch\\nx = " + b"[" * depth + b"]" * depth + b"\\n"
try:
    convert_source(source, Options(), path="deep.py")
except ConversionError as error:
    print(error)
"""


@pytest.mark.parametrize("depth", [1500, 3000, 100_000])
def test_thousands_of_nested_brackets_are_one_error_not_a_crash(depth: int) -> None:
    """libcst's native parser dies of a segmentation fault on these: a separate process."""
    probe = subprocess.run(
        [sys.executable, "-c", NESTING_PROBE, str(depth)],
        capture_output=True,
        env=base_env(),
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr.decode()[-2000:]
    assert probe.stdout.decode().strip() == (
        "deep.py:2:205: syntax error: too many nested parentheses (nested too deeply for the parser)"
    )
