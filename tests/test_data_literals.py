"""Large constant-only literals kept out of libcst's tree: the conversion is the same, byte for
byte and position for position, as converting the file with every literal in the tree."""

from __future__ import annotations

import random

import pytest

from accel_convert.codemods import Options
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.converter import pipeline
from accel_convert.converter.data_literals import MIN_FILE_BYTES, elide_data_literals
from accel_convert.converter.pipeline import convert_source


def numbers(count: int, rng: random.Random) -> str:
    return ", ".join(f"{rng.random():.4f}" if index % 3 else str(-rng.randrange(1000)) for index in range(count))


def big_script(ending: str) -> bytes:
    rng = random.Random(7)
    table_rows = "".join(f'    "row{index}": ({numbers(40, rng)}),{ending}' for index in range(60))
    lines = [
        "import torch",
        f"DATA = [{numbers(6000, rng)}]",
        "TABLE = {",
        table_rows + "}",
        "model = torch.nn.Linear(4, 2).cuda()",
        f"weights = torch.tensor([{numbers(900, rng)}]).cuda()",
        f"extra = [{numbers(900, rng)}]; loss = model(weights[:4]).sum()",
        "name = f'{[1, 2, 3]}'",
        "loss.backward()",
        "optimizer.step()",
        "",
    ]
    return ending.join(lines).encode()


@pytest.mark.parametrize("ending", ["\n", "\r\n"], ids=["LF", "CRLF"])
def test_eliding_large_literals_changes_nothing_in_the_result(ending: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = big_script(ending)
    assert len(source) > MIN_FILE_BYTES
    elided = elide_data_literals(source, python_ast(source))
    assert elided is not None and len(elided.literals) == 4  # DATA, TABLE, the tensor's list, extra
    assert len(elided.source.splitlines()) == len(source.splitlines())
    data_line = elided.source.splitlines()[1]
    assert data_line.startswith(b"DATA = (__accel_convert_data_0__ ") and data_line.endswith(b" )")
    assert len(data_line) == len(source.splitlines()[1]), "positions after a literal must not move"

    fast = convert_source(source, Options(), path="big.py")
    monkeypatch.setattr(pipeline, "elide_data_literals", lambda source, tree: None)
    full = convert_source(source, Options(), path="big.py")
    assert fast.output == full.output and fast.changes == full.changes
    assert {"ACC105"} <= {change.code for change in fast.changes} and b"accelerator.backward(loss)" in fast.output


def test_a_placeholder_a_pass_copies_or_drops_falls_back_to_the_whole_file() -> None:
    source = big_script("\n")
    elided = elide_data_literals(source, python_ast(source))
    assert elided is not None
    first_placeholder = elided.literals[0][0]
    assert elided.restore(elided.source) == source
    assert elided.restore(elided.source + first_placeholder) is None
    assert elided.restore(elided.source.replace(first_placeholder, b"[]")) is None


def test_small_files_and_other_encodings_are_left_alone() -> None:
    small = b"import torch\nDATA = [" + b"1, " * 2000 + b"]\n"
    assert elide_data_literals(small, python_ast(small)) is None
    latin = b"# -*- coding: latin-1 -*-\n" + big_script("\n")
    assert elide_data_literals(latin, python_ast(latin)) is None
