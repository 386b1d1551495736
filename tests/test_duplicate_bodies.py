"""No function body of ``accel_convert`` is a copy of another module's: one owner per answer.

A copied body drifts: ``loader_dict._mean_reduction`` was ``syntax.mean_reduced`` verbatim until
one of them would have learnt ``reduction="sum"`` and the other not. Names do not give a copy
away (it is renamed on the way), so the bodies are compared by structure: each function's body,
its docstring dropped and its parameters and locals renamed by the order they first appear in
(``_0``, ``_1``...), becomes a sequence of tokens (node types, the names it reads from outside,
attributes and constants). Two functions of different modules are refused when

- their sequences are identical and at least :data:`IDENTICAL_MIN_NODES` nodes long, or
- at least :data:`NEAR_MIN_NODES` nodes long and alike to :data:`NEAR_RATIO` or more
  (``difflib``'s ratio: a line or two changed in a body of ten).

A pair may stay only in :data:`ALLOWED`, each with why. Put the answer in one owner and call it
from the other module instead (a shared base class for a pair of methods).

Run as a script for every pair, allowed or not::

    python -m tests.test_duplicate_bodies
"""

from __future__ import annotations

import ast
import difflib
import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "accel_convert"

#: A body this many AST nodes long or more must not appear twice (a one-line ``return`` of a
#: comparison is about 10: those are written, not copied).
IDENTICAL_MIN_NODES = 25
#: Bodies this long or more are compared for near copies ...
NEAR_MIN_NODES = 40
#: ... and refused from this likeness up. Unrelated functions of one shape (two ``isinstance``
#: chains over different node types) reach about 0.91; copies with a name or a constant changed
#: reach 0.94 and up.
NEAR_RATIO = 0.93
#: Token k-grams shared by more functions than this say nothing about a pair (``isinstance(x,
#: cst.Call) and``): only rarer ones nominate candidates.
COMMON_SHINGLE = 30
SHINGLE = 8

#: ``module:function`` pairs (sorted) that may stay alike, each with why (an entry need not match
#: today: one mended elsewhere stays harmless until it is dropped).
ALLOWED: dict[tuple[str, str], str] = {
    ("converter/cache.py:atomic_write", "converter/files.py:atomic_write"): "mended on main",
}


@dataclass(frozen=True)
class Body:
    """One function's body, normalised."""

    module: str
    name: str
    line: int
    nodes: int
    tokens: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"


def _own_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """The function's parameters, then the names it binds, each to its position (``_0``...)."""
    names: dict[str, str] = {}
    arguments = function.args
    for argument in [
        *arguments.posonlyargs,
        *arguments.args,
        *([arguments.vararg] if arguments.vararg else []),
        *arguments.kwonlyargs,
        *([arguments.kwarg] if arguments.kwarg else []),
    ]:
        names.setdefault(argument.arg, f"_{len(names)}")
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.setdefault(node.id, f"_{len(names)}")
        elif isinstance(node, ast.arg):
            names.setdefault(node.arg, f"_{len(names)}")
    return names


def _tokens(node: ast.AST, names: dict[str, str]) -> Iterator[str]:
    """Pre-order: each node's type, then its fields (names through ``names``)."""
    yield type(node).__name__
    if isinstance(node, ast.Name):
        yield names.get(node.id, node.id)
        return
    if isinstance(node, ast.arg):
        yield names.get(node.arg, node.arg)
        return
    for _, value in ast.iter_fields(node):
        if isinstance(value, ast.expr_context):
            continue
        if isinstance(value, ast.AST):
            yield from _tokens(value, names)
        elif isinstance(value, list):
            yield "["
            for item in value:
                yield from _tokens(item, names) if isinstance(item, ast.AST) else (repr(item),)
            yield "]"
        elif value is not None:
            yield repr(value)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


def bodies(source: str, module: str) -> list[Body]:
    """Every function of ``source`` (methods and nested functions included), normalised."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = _own_names(node)
            statements = _without_docstring(node.body)
            tokens = tuple(token for statement in statements for token in _tokens(statement, names))
            size = sum(1 for statement in statements for _ in ast.walk(statement))
            found.append(Body(module, node.name, node.lineno, size, tokens))
    return found


def package_bodies(package: Path) -> list[Body]:
    return [
        body
        for path in sorted(package.rglob("*.py"))
        for body in bodies(path.read_text(encoding="utf-8"), path.relative_to(package).as_posix())
    ]


def _candidates(big: list[Body]) -> Iterator[tuple[Body, Body]]:
    """Pairs of different modules sharing at least half of the rarer's uncommon k-grams."""
    shingles = [{hash(body.tokens[i : i + SHINGLE]) for i in range(len(body.tokens) - SHINGLE + 1)} for body in big]
    holders: dict[int, list[int]] = defaultdict(list)
    for index, held in enumerate(shingles):
        for shingle in held:
            holders[shingle].append(index)
    uncommon = [sum(1 for shingle in held if len(holders[shingle]) <= COMMON_SHINGLE) for held in shingles]
    shared: dict[tuple[int, int], int] = defaultdict(int)
    for indices in holders.values():
        if len(indices) <= COMMON_SHINGLE:
            for pair in itertools.combinations(indices, 2):
                shared[pair] += 1
    for (first, second), count in shared.items():
        if big[first].module != big[second].module and count * 2 >= min(uncommon[first], uncommon[second]):
            yield big[first], big[second]


def copies(found: list[Body]) -> list[tuple[Body, Body, float]]:
    """Pairs of bodies in different modules, identical or near-identical, with their likeness."""
    pairs: dict[tuple[str, str], tuple[Body, Body, float]] = {}
    identical: dict[tuple[str, ...], list[Body]] = defaultdict(list)
    for body in found:
        if body.nodes >= IDENTICAL_MIN_NODES:
            identical[body.tokens].append(body)
    for same in identical.values():
        for first, second in itertools.combinations(same, 2):
            if first.module != second.module:
                pairs[tuple(sorted((first.key, second.key)))] = (first, second, 1.0)  # type: ignore[index]
    big = [body for body in found if body.nodes >= NEAR_MIN_NODES]
    for first, second in _candidates(big):
        key = tuple(sorted((first.key, second.key)))
        if key not in pairs:
            ratio = difflib.SequenceMatcher(None, first.tokens, second.tokens, autojunk=False).ratio()
            if ratio >= NEAR_RATIO:
                pairs[key] = (first, second, ratio)  # type: ignore[index]
    return [pairs[key] for key in sorted(pairs)]


def _describe(first: Body, second: Body, ratio: float) -> str:
    return f"{first.module}:{first.line} {first.name} ~ {second.module}:{second.line} {second.name} ({ratio:.2f})"


def refused(found: list[Body]) -> list[str]:
    return [
        _describe(first, second, ratio)
        for first, second, ratio in copies(found)
        if tuple(sorted((first.key, second.key))) not in ALLOWED
    ]


def test_the_package_is_where_this_test_looks() -> None:
    found = package_bodies(PACKAGE)
    modules = {body.module.split("/")[0] for body in found}
    assert {"codemods", "converter", "runtime"} <= modules, modules
    assert any(body.module.startswith("codemods/engine/") for body in found), "engine/ is not read"
    assert len(found) > 1000, "the package moved: this test would check nothing"


def test_every_allowed_pair_says_why() -> None:
    for pair, reason in ALLOWED.items():
        assert pair == tuple(sorted(pair)) and len(reason) > 10, pair


def test_no_function_body_is_a_copy_of_another_module_s() -> None:
    found = refused(package_bodies(PACKAGE))
    assert found == [], "function bodies copied between modules (give the answer one owner):\n" + "\n".join(found)


_OWNER = '''
def mean_reduced(call):
    """A loss without reduction=, or with the mean."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "reduction":
            return isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "mean"
    return True
'''
#: The same body under other names (the copy ``loader_dict._mean_reduction`` was).
_RENAMED_COPY = """
def _mean_reduction(loss_call):
    for argument in loss_call.args:
        if argument.keyword is not None and argument.keyword.value == "reduction":
            return isinstance(argument.value, cst.SimpleString) and argument.value.evaluated_value == "mean"
    return True
"""
#: The same body with one constant changed, and a longer body copied with one name changed.
_NEAR_COPIES = """
def sum_reduced(call):
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "reduction":
            return isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "sum"
    return True


def digest(sources):
    total = hashlib.sha256()
    for source in sources:
        total.update(len(source).to_bytes(8, "big"))
        total.update(source)
        total.update(b"\\0")
    return total.hexdigest()
"""
_OTHER_DIGEST = """
def sources_digest(sources):
    total = hashlib.sha256()
    for source in sources:
        total.update(len(source).to_bytes(8, "big"))
        total.update(source)
        total.update(b"\\0")
    return total.digest()
"""
#: Alike in shape only: a different question.
_UNRELATED = """
def is_docstring(statement):
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
"""


def _package(folder: Path, modules: dict[str, str]) -> Path:
    for name, source in modules.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return folder


def test_a_planted_copy_is_found(tmp_path: Path) -> None:
    """The checker itself, on a package with copies planted in it."""
    package = _package(
        tmp_path,
        {
            "engine/syntax.py": _OWNER + _UNRELATED,
            "rewrites/loader_dict.py": _RENAMED_COPY,
            "rewrites/losses.py": _NEAR_COPIES,
            "converter/cache.py": _OTHER_DIGEST,
        },
    )
    found = refused(package_bodies(package))
    assert found == [
        "converter/cache.py:2 sources_digest ~ rewrites/losses.py:9 digest (0.99)",
        "engine/syntax.py:2 mean_reduced ~ rewrites/loader_dict.py:2 _mean_reduction (1.00)",
        "engine/syntax.py:2 mean_reduced ~ rewrites/losses.py:2 sum_reduced (0.99)",
        "rewrites/loader_dict.py:2 _mean_reduction ~ rewrites/losses.py:2 sum_reduced (0.99)",
    ], found


def test_a_copy_within_one_module_and_an_unrelated_look_alike_pass(tmp_path: Path) -> None:
    package = _package(tmp_path, {"engine/syntax.py": _OWNER + _RENAMED_COPY, "checks/docs.py": _UNRELATED})
    assert refused(package_bodies(package)) == []


def test_a_small_body_may_be_written_twice(tmp_path: Path) -> None:
    small = "def is_cpu(value):\n    return value == 'cpu'\n"
    package = _package(tmp_path, {"engine/devices.py": small, "model/devices.py": small})
    assert refused(package_bodies(package)) == []


if __name__ == "__main__":
    for first, second, ratio in copies(package_bodies(PACKAGE)):
        allowed = ALLOWED.get(tuple(sorted((first.key, second.key))))  # type: ignore[arg-type]
        print(_describe(first, second, ratio) + (f"  [allowed: {allowed}]" if allowed else ""))
