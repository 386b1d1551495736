"""Adding an import a rewrite needs (``from runtime import Accelerator``, ``import os``) after the
module's own imports."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.syntax import first_statement_index


def imports_from(module: cst.Module, package: str, name: str) -> bool:
    """Whether the module already has ``from <package> import <name>`` at its top level."""
    for line in module.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if (
                isinstance(small, cst.ImportFrom)
                and isinstance(small.module, cst.Name)
                and small.module.value == package
                and not isinstance(small.names, cst.ImportStar)
                and any(alias.evaluated_name == name for alias in small.names)
            ):
                return True
    return False


def add_import(module: cst.Module, line: cst.SimpleStatementLine) -> cst.Module:
    """Insert ``line`` after the module's leading block of imports (docstring, __future__ first)."""
    body = list(module.body)
    index = first_statement_index(body)
    last_import = None
    for position in range(index, len(body)):
        node = body[position]
        if not (
            isinstance(node, cst.SimpleStatementLine)
            and all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in node.body)
        ):
            break
        last_import = position
    insert_at = last_import + 1 if last_import is not None else index
    body.insert(insert_at, line)
    return module.with_changes(body=body)


def imports_module(module: cst.Module, name: str) -> bool:
    """Whether the module has a top-level ``import <name>`` (binding ``name`` itself)."""
    for line in module.body:
        if isinstance(line, cst.SimpleStatementLine):
            for small in line.body:
                if isinstance(small, cst.Import) and any(
                    alias.asname is None and alias.evaluated_name == name for alias in small.names
                ):
                    return True
    return False
