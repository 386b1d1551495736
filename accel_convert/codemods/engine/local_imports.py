"""Which modules a module's imports name: the resolver of a program's local modules (see
:mod:`codemods.engine.program` and ``converter.project``) starts here.

Its own module, light to import (the standard library's ``ast`` and the cached CPython parse):
``accel-convert --check`` resolves every file's local modules to look the file up in its cache
before anything is converted, and must not load the codemods for that.

Example: ``from .engine import train`` inside ``pkg.main`` names ``pkg``, ``pkg.engine`` and
``pkg.engine.train`` (``train`` may be a submodule); ``import os.path`` names ``os`` and ``os.path``.
"""

from __future__ import annotations

import ast

from accel_convert.codemods.engine.positions import python_ast


def local_imports(source: str | bytes, name: str, is_package: bool) -> set[str]:
    """Absolute module names a module's imports could refer to (``engine``, ``mylib.utils``,
    relative ones resolved against ``name``): the caller keeps those that are files of the program.
    ``from pkg import x`` yields both ``pkg`` and ``pkg.x`` (``x`` may be a submodule)."""
    tree = python_ast(source)
    if tree is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            base = absolute_module(node.module, node.level, name, is_package)
            if base is None:
                continue
            if base:
                parts = base.split(".")
                found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
            found.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*")
    return found


def absolute_module(module: str | None, level: int, name: str, is_package: bool) -> str | None:
    """The absolute module ``from <level dots><module> import`` names, inside module ``name``."""
    if level == 0:
        return module
    package = name.split(".") if is_package else name.split(".")[:-1]
    if level - 1 > len(package):
        return None
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])
