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
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

#: Statements whose bodies run after their header, in the order they stand.
_BLOCKS = ("body", "handlers", "orelse", "finalbody")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: Statements evaluating nothing themselves: their blocks' statements are asked one by one.
_NO_HEADER = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()), *_DEFINITIONS)


def next_read(chain: ast.If, later: Sequence[ast.stmt], name: str) -> ast.stmt | None:
    """The statement of the next read of ``name`` in ``later`` (the statements after ``chain`` in its
    block), at whatever depth, when it decides nothing by the value ``chain`` chose ``name`` by:
    none of the ``if``/``while`` tests around it (inside ``later``) reads a value ``chain``'s tests
    read. None where ``later`` binds ``name`` again before reading it, reads it under such a
    test, or never reads it. Definitions are skipped (their bodies run when called)."""
    chosen_by = _tested_values(_chain_tests(chain))
    for statement, tests in _in_order(later, ()):
        if _reads(statement, name):
            return None if _tested_values(tests) & chosen_by else statement
        if name in _stored_by_header(statement):
            return None
    return None


def next_reads_after_chains(body: Sequence[ast.stmt], name: str) -> list[ast.stmt]:
    """:func:`next_read` of every ``if`` chain binding ``name`` in ``body`` or in the blocks of its
    compound statements (the ``if __name__ == "__main__":`` block), with the statements after the
    chain in its own block; definitions aside (their bodies are scopes of their own)."""
    found: list[ast.stmt] = []
    blocks: list[Sequence[ast.stmt]] = [body]
    while blocks:
        block = blocks.pop()
        for index, statement in enumerate(block):
            if isinstance(statement, _DEFINITIONS):
                continue
            if isinstance(statement, ast.If) and name in _stored_anywhere_in(statement):
                read = next_read(statement, block[index + 1 :], name)
                if read is not None:
                    found.append(read)
            for field in _BLOCKS:
                parts = getattr(statement, field, [])
                if field == "handlers":
                    blocks.extend(handler.body for handler in parts)
                elif parts:
                    blocks.append(parts)
    return found


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


def _in_order(
    statements: Sequence[ast.stmt], tests: tuple[ast.expr, ...]
) -> Iterator[tuple[ast.stmt, tuple[ast.expr, ...]]]:
    """Each statement with the tests guarding it, in source order: a compound statement (its own
    header) before the statements of its blocks."""
    for statement in statements:
        if isinstance(statement, _DEFINITIONS):
            continue
        yield statement, tests
        inner = (*tests, statement.test) if isinstance(statement, (ast.If, ast.While)) else tests
        for field in _BLOCKS:
            for part in getattr(statement, field, ()):
                if isinstance(part, ast.ExceptHandler):
                    yield from _in_order(part.body, inner)
                else:
                    yield from _in_order([part], inner)


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
