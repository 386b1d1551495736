"""No function in the codemods is worse than radon's rank C (cyclomatic complexity above 20).

A function that complex answers several questions at once, and its branches are where the one
owner of a concept gets a second, diverging answer. Bring one down by extracting helpers that
each answer one question, dispatching on node type through a table, returning early (see
``radon cc -s -n D accel_convert/codemods/`` for the same list from the command line).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from radon.complexity import cc_rank, cc_visit

import accel_convert.codemods as codemods_package

CODEMODS = Path(codemods_package.__file__).parent
#: The worst rank allowed: C is 11–20 decision points, D 21–30.
WORST_RANK = "C"


def blocks(found: Iterable[Any]) -> Iterator[Any]:
    """Every block radon found, with those it keeps inside another: the closures (functions
    nested in a function or method, which radon scores apart and lists only under their outer
    function: ``name_flow._read_function``'s ``collect`` was D22 there) and classes in classes."""
    for block in found:
        yield block
        yield from blocks([*getattr(block, "closures", ()), *getattr(block, "inner_classes", ())])


def too_complex(source: str) -> list[str]:
    """``name: rank (complexity)`` for each function, method, closure or class of ``source``
    ranked worse than :data:`WORST_RANK`."""
    return [
        f"{block.fullname}:{block.lineno}: {cc_rank(block.complexity)} ({block.complexity})"
        for block in blocks(cc_visit(source))
        if cc_rank(block.complexity) > WORST_RANK
    ]


def test_the_codemods_are_where_this_test_looks() -> None:
    assert len(list(CODEMODS.rglob("*.py"))) > 40, "the codemods moved: this test would check nothing"


def test_a_function_worse_than_c_is_found() -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(25))
    assert too_complex(f"def many(x):\n{branches}    return None\n") == ["many:1: D (26)"]
    assert too_complex("def few(x):\n    return x if x else None\n") == []


def test_a_closure_worse_than_c_is_found() -> None:
    """A nested function counts on its own (radon scores it apart from the function around it)."""
    branches = "".join(f"        if x == {i}:\n            return {i}\n" for i in range(25))
    source = f"def outer(y):\n    def inner(x):\n{branches}        return None\n    return inner(y)\n"
    assert too_complex(source) == ["inner:2: D (26)"]
    in_method = "".join(f"            if x == {i}:\n                return {i}\n" for i in range(25))
    method = f"class Walk:\n    def run(self, y):\n        def inner(x):\n{in_method}            return None\n"
    assert too_complex(method + "        return inner(y)\n") == ["inner:3: D (26)"]


def test_no_function_in_the_codemods_is_worse_than_c() -> None:
    found = [
        f"{path.relative_to(CODEMODS.parent)}:{problem}"
        for path in sorted(CODEMODS.rglob("*.py"))
        for problem in too_complex(path.read_text(encoding="utf-8"))
    ]
    assert found == [], (
        "functions worse than radon's rank C (split them by the question each part answers):\n" + "\n".join(found)
    )
