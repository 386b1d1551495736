"""A name chosen by an ``if`` chain, and the read after it that fails where no branch bound it.

YOLOv3's training script chooses its optimizer by a setting::

    if cfg == "adam":
        optimizer = torch.optim.Adam(params)
    elif cfg == "sgd":
        optimizer = torch.optim.SGD(params)
    else:
        print("Unknown optimizer")
    for epoch in range(epochs):
        for imgs, targets in loader:
            ...
            if batches_done % subdivisions == 0:
                optimizer.step()

Where no branch binds ``optimizer`` the original fails at its next read, whatever the loops and
``if`` statements around that read; a statement reading it right after the chain (``model,
optimizer = accelerator.prepare(model, optimizer)``) then fails no more often than the original.
Not so where the read waits for a test of the value the chain chose by (``if args.scheduler !=
"none": scheduler.step()`` after a chain on ``args.scheduler``): the name is left unbound on
purpose there, and a read right after the chain would fail where the original runs.

:func:`next_read` is the one answer the conversion plan (where ``prepare`` may go,
:mod:`codemods.model.plan`) and the name-flow guard (whether a ``prepare`` it finds reading the
name first is one the original's next read makes safe, :mod:`codemods.engine.name_flow`) both
ask. It reads CPython's trees (the guard's); the plan hands it the code of its statements.

:func:`statements_in_order` is the one walk of a scope's blocks of statements (bodies, ``except``
handlers, ``else`` and ``finally`` blocks, ``match`` cases) that both ask: :func:`next_read` for
the tests around each statement, the guard for where each statement stands.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import NamedTuple

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: Statements evaluating nothing themselves: their blocks' statements are asked one by one.
_NO_HEADER = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()), *_DEFINITIONS)


def next_read(chain: ast.If, later: Sequence[ast.stmt], name: str) -> ast.stmt | None:
    """The statement of the next read of ``name`` in ``later`` (the statements after ``chain`` in its
    block), at whatever depth, when it decides nothing by the value ``chain`` chose ``name`` by:
    none of the ``if``/``while`` tests and ``match`` subjects around it (inside ``later``) reads a
    value ``chain``'s tests read. None where ``later`` binds ``name`` again before reading it,
    reads it under such a test, or never reads it. Definitions are skipped (their bodies run when
    called)."""
    chosen_by = _tested_values(_chain_tests(chain))
    for path in statements_in_order(later):
        statement = path[-1].statement
        if isinstance(statement, _DEFINITIONS):
            continue
        if _reads(statement, name):
            return None if _tested_values(_tests_around(path)) & chosen_by else statement
        if name in _stored_by_header(statement):
            return None
    return None


def next_reads_after_chains(body: Sequence[ast.stmt], name: str) -> list[ast.stmt]:
    """:func:`next_read` of every ``if`` chain binding ``name`` in ``body`` or in the blocks of its
    compound statements (the ``if __name__ == "__main__":`` block), with the statements after the
    chain in its own block; definitions aside (their bodies are scopes of their own)."""
    found: list[ast.stmt] = []
    for path in statements_in_order(body):
        statement, block, index = path[-1]
        if isinstance(statement, ast.If) and name in _stored_anywhere_in(statement):
            read = next_read(statement, block[index + 1 :], name)
            if read is not None:
                found.append(read)
    return found


class Placed(NamedTuple):
    """A statement and where it stands: the block holding it and its index there (``at``)."""

    statement: ast.stmt
    block: Sequence[ast.stmt]
    at: int


def statements_in_order(body: Sequence[ast.stmt]) -> Iterator[tuple[Placed, ...]]:
    """Every statement of ``body`` and of the blocks nested in it (:func:`blocks_of`), in source
    order (a compound statement before the statements of its blocks), each as its path from
    ``body``: the statements around it, outermost first, then itself. Definitions are yielded but
    not entered: their bodies run when they are called."""
    pending: list[tuple[Placed, ...]] = []
    _push_block(pending, body, ())
    while pending:
        path = pending.pop()
        yield path
        statement = path[-1].statement
        if not isinstance(statement, _DEFINITIONS):
            for block in reversed(blocks_of(statement)):
                _push_block(pending, block, path)


def _push_block(pending: list[tuple[Placed, ...]], block: Sequence[ast.stmt], outer: tuple[Placed, ...]) -> None:
    """Put ``block``'s statements on ``pending`` (a stack) so that the first comes off first."""
    pending.extend((*outer, Placed(statement, block, index)) for index, statement in reversed(list(enumerate(block))))


def blocks_of(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks of statements ``statement`` holds, in source order: its body, its ``except``
    handlers' bodies, its ``else`` and ``finally`` blocks, its ``match`` cases' bodies (none for a
    simple statement)."""
    blocks: list[list[ast.stmt]] = [getattr(statement, "body", [])]
    blocks += [handler.body for handler in getattr(statement, "handlers", ())]
    blocks += [getattr(statement, "orelse", []), getattr(statement, "finalbody", [])]
    blocks += [case.body for case in getattr(statement, "cases", ())]
    return [block for block in blocks if block]


def _stored_anywhere_in(statement: ast.stmt) -> set[str]:
    """Names stored anywhere in ``statement`` (CPython's tree: the syntax owner reads libcst's)."""
    return {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _chain_tests(chain: ast.If) -> list[ast.expr]:
    tests: list[ast.expr] = []
    current: ast.stmt | None = chain
    while isinstance(current, ast.If):
        tests.append(current.test)
        current = current.orelse[0] if len(current.orelse) == 1 else None
    return tests


def _tests_around(path: Sequence[Placed]) -> list[ast.expr]:
    """What decides whether the last statement of ``path`` runs: the tests of the ``if`` and
    ``while`` statements around it and the subjects of the ``match`` statements around it."""
    tests: list[ast.expr] = []
    for outer, _, _ in path[:-1]:
        if isinstance(outer, (ast.If, ast.While)):
            tests.append(outer.test)
        elif isinstance(outer, ast.Match):
            tests.append(outer.subject)
    return tests


def _header(statement: ast.stmt) -> list[ast.AST]:
    """What a statement evaluates itself: all of a simple statement, a compound one's header."""
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in statement.items]
    if isinstance(statement, ast.Match):
        return [statement.subject]
    if isinstance(statement, _NO_HEADER):
        return []
    return [statement]


def _reads(statement: ast.stmt, name: str) -> bool:
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        for part in _header(statement)
        for node in ast.walk(part)
    )


def _stored_by_header(statement: ast.stmt) -> set[str]:
    """Names a statement stores itself (a compound one in its header: a loop's target, ``as``)."""
    targets: list[ast.AST]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        targets = [statement.target]
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in statement.items if item.optional_vars is not None]
    else:
        targets = _header(statement)
    return {
        node.id
        for part in targets
        for node in ast.walk(part)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    }


def _tested_values(tests: Sequence[ast.expr]) -> set[str]:
    """The values ``tests`` read, each as the longest name, attribute or constant subscript
    standing for it (``args.scheduler``, ``model.hyperparams['optimizer']``, ``cfg``)."""
    found: set[str] = set()
    pending: list[ast.AST] = list(tests)
    while pending:
        node = pending.pop()
        if _is_value_path(node):
            found.add(ast.dump(node, annotate_fields=False, include_attributes=False).replace("Load()", ""))
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _is_value_path(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _is_value_path(node.value)
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and _is_value_path(node.value)
    return False
