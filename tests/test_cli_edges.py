"""Edges of the command line, each run as users run it: the installed console script in a real
process (see tests/test_cli_process.py)."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli_process import accel_convert

#: Files that are not Python, none of which says "torch": each is refused, never echoed back.
NOT_PYTHON = {
    "syntax.py": (b"x = 1\ndef f(:\n    pass\n", "syntax.py:2:7: syntax error"),
    "null.py": (b"x = 1\x00\n", "null.py:1:6: syntax error: source contains a null byte"),
    "random.py": (bytes(range(256)) * 2, "random.py:1:"),
}


def test_file_that_is_not_python_is_refused_whether_or_not_it_mentions_torch(tmp_path: Path) -> None:
    for name, (source, _) in NOT_PYTHON.items():
        (tmp_path / name).write_bytes(source)
    (tmp_path / "valid.py").write_bytes(b"x = 1\n")
    (tmp_path / "torch_syntax.py").write_bytes(b"import torch\ndef f(:\n")
    names = [*NOT_PYTHON, "torch_syntax.py", "valid.py"]

    alone = accel_convert("syntax.py", cwd=tmp_path)
    assert alone.returncode == 123, alone.stderr.decode()
    assert alone.stdout == b""  # the file's bytes are not echoed back as "unchanged"
    assert alone.stderr.decode().splitlines()[0].startswith(NOT_PYTHON["syntax.py"][1])

    diff = accel_convert("--diff", *names, cwd=tmp_path)
    assert diff.returncode == 123, diff.stderr.decode()
    lines = diff.stderr.decode().splitlines()
    for _, expected in NOT_PYTHON.values():
        assert sum(line.startswith(expected) for line in lines) == 1, lines
    assert any(line.startswith("torch_syntax.py:2:7: syntax error") for line in lines), lines
    assert lines[-1] == "0 would convert, 1 unchanged, 4 failed", lines

    check = accel_convert("--check", *names, cwd=tmp_path)
    assert check.returncode == 123, check.stderr.decode()
    assert check.stderr.decode().splitlines()[-1] == "0 would convert, 1 unchanged, 4 failed"
