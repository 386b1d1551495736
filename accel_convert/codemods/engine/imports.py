"""Adding an import a rewrite needs (``from accel_convert.runtime import Accelerator``, ``import os``)
where isort and ruff would put it."""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Sequence
from typing import cast

import libcst as cst
from libcst.helpers import get_full_name_for_node

from accel_convert.codemods.engine.model import ImportStyle, Options
from accel_convert.codemods.engine.syntax import first_statement_index, statement


def accelerate_import(options: Options, name: str = "Accelerator") -> cst.SimpleStatementLine:
    """``from accel_convert.runtime import Accelerator`` (or ``from accelerate import ...`` for that target)."""
    built = statement(f"from {options.accelerate_module} import {name}")
    assert isinstance(built, cst.SimpleStatementLine)
    return built


def with_accelerate_import(module: cst.Module, options: Options, name: str = "Accelerator") -> cst.Module:
    """``module`` importing ``name`` from the target's package (as it was, where it already does)."""
    if imports_from(module, options.accelerate_module, name):
        return module
    return add_import(module, accelerate_import(options, name), options.import_style)


def imports_from(module: cst.Module, package: str, name: str) -> bool:
    """Whether the module already has ``from <package> import <name>`` at its top level."""
    for line in module.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if (
                isinstance(small, cst.ImportFrom)
                and small.module is not None
                and get_full_name_for_node(small.module) == package
                and not isinstance(small.names, cst.ImportStar)
                and any(alias.evaluated_name == name for alias in small.names)
            ):
                return True
    return False


def add_utils_import(module: cst.Module, name: str, options: Options) -> cst.Module:
    """``from <target>.utils import <name>`` (``accel_convert.runtime.utils`` or
    ``accelerate.utils``) added where isort would put it (see :func:`add_import`)."""
    line = cast(cst.SimpleStatementLine, cst.parse_statement(f"from {options.accelerate_module}.utils import {name}"))
    return add_import(module, line, options.import_style)


def add_import(module: cst.Module, line: cst.SimpleStatementLine, style: ImportStyle | None = None) -> cst.Module:
    """Add ``line`` (one import) where isort and ruff's ``I001`` would put it, so that a script
    whose imports were sorted stays sorted: into the ``from X import ...`` of the same module
    when there is one on a single line; else at its sorted place in the group of imports that
    holds torch's (the third-party section: ``import`` lines first, then ``from`` lines, each by
    module name). Imports not sorted that way get it after the module's leading imports.

    ``style``, the project's own settings: with ``force_single_line`` nothing is merged (one
    name a line, sorted by module then name); a module of ``known_first_party`` goes into the
    first-party section (a new one after torch's when there is none); the line written (new or
    merged) is wrapped as the project wraps imports when longer than ``line_length``."""
    body: list[cst.BaseStatement] = list(module.body)
    new = line.body[0]
    merged = None if style is not None and style.force_single_line else _merged_into_existing(body, new, style)
    if merged is not None:
        return module.with_changes(body=merged)
    line = _wrapped(line, style)
    root = _module_name(cast(cst.Import | cst.ImportFrom, new)).split(".")[0]
    group: range | None = None
    if style is not None and root in style.known_first_party:
        first_party = style.known_first_party
        group = _import_group(body, lambda name: name.split(".")[0] in first_party)
        if group is None:
            return _new_section(module, body, line)
    elif root in sys.stdlib_module_names:
        group = _import_group(body, _is_standard_library)
        if group is None and _starts_with_import(body):
            return module.with_changes(body=_as_first_section(body, line))
    group = group or _import_group(body, _is_torch)
    if group is not None and _is_sorted(body[group.start : group.stop], style):
        return module.with_changes(body=_inserted_in_order(body, group, line, _sort_key(new, style), style))
    return module.with_changes(body=_inserted_after_leading_imports(body, line))


def _starts_with_import(body: Sequence[cst.BaseStatement]) -> bool:
    """Whether the module's first statement (after its docstring and ``__future__`` imports) is an import."""
    start = first_statement_index(body)
    return start < len(body) and _is_import_line(body[start])


def _as_first_section(body: list[cst.BaseStatement], line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """A standard-library import where the module has no standard-library section: it becomes
    the first section, a blank line above the rest."""
    start = first_statement_index(body)
    first = cast(cst.SimpleStatementLine, body[start])
    body.insert(start, line.with_changes(leading_lines=first.leading_lines))
    body[start + 1] = first.with_changes(leading_lines=[cst.EmptyLine()])
    return body


def _inserted_in_order(
    body: list[cst.BaseStatement],
    group: range,
    line: cst.SimpleStatementLine,
    key: tuple[int, str, tuple[int, str]],
    style: ImportStyle | None,
) -> list[cst.BaseStatement]:
    """``line`` at its sorted place (``key``) in a sorted group of import lines."""
    keys = [_sort_key(cast(cst.SimpleStatementLine, body[i]).body[0], style) for i in group]
    insert_at = group.start + bisect.bisect_right(keys, key)
    if insert_at == group.start:  # the group's blank line above now goes above the new line
        first = cast(cst.SimpleStatementLine, body[insert_at])
        line = line.with_changes(leading_lines=first.leading_lines)
        body[insert_at] = first.with_changes(leading_lines=[])
    body.insert(insert_at, line)
    return body


def _inserted_after_leading_imports(
    body: list[cst.BaseStatement], line: cst.SimpleStatementLine
) -> list[cst.BaseStatement]:
    """``line`` after the import lines the module starts with (where its first statement is, without any)."""
    index = first_statement_index(body)
    last_import = None
    for position in range(index, len(body)):
        if not _is_import_line(body[position]):
            break
        last_import = position
    body.insert(last_import + 1 if last_import is not None else index, line)
    return body


def _is_torch(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


def _new_section(module: cst.Module, body: list[cst.BaseStatement], line: cst.SimpleStatementLine) -> cst.Module:
    """A first-party import where the module has no first-party section: a section of its own,
    a blank line above, after the third-party section (torch's), else after the leading imports."""
    group = _import_group(body, _is_torch)
    if group is None:
        start = first_statement_index(body)
        end = start
        while end < len(body) and _is_import_line(body[end]):
            end += 1
        group = range(start, end)
    if not group:
        body.insert(group.start, line)
        return module.with_changes(body=body)
    body.insert(group.stop, line.with_changes(leading_lines=[cst.EmptyLine()]))
    return module.with_changes(body=body)


def _wrapped(line: cst.SimpleStatementLine, style: ImportStyle | None) -> cst.SimpleStatementLine:
    """A one-line ``from`` import longer than the project's line length, wrapped as its import
    sorter wraps it (ruff and isort's black profile: a name a line with a trailing comma; isort's
    default grid: names filled in after the parenthesis)."""
    node = line.body[0]
    if style is None or not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
        return line
    code = cst.Module(body=[line]).code.rstrip("\n")
    if len(code) <= style.line_length or node.lpar is not None or node.relative or node.module is None:
        return line
    names = [alias.evaluated_name + (f" as {alias.evaluated_alias}" if alias.asname else "") for alias in node.names]
    head = f"from {_module_name(node)} import ("
    if style.wrap == "vertical":
        text = head + "\n" + "".join(f"    {name},\n" for name in names) + ")"
    else:
        rows: list[str] = []
        for name in names:
            if rows and len(rows[-1]) + len(", ") + len(name) + 1 <= style.line_length:
                rows[-1] += f", {name}"
            else:
                rows.append((head if not rows else " " * len(head)) + name)
        text = ",\n".join(rows) + ")"
    wrapped = cst.parse_statement(text + "\n")
    assert isinstance(wrapped, cst.SimpleStatementLine)
    return wrapped.with_changes(leading_lines=line.leading_lines)


def _is_import_line(node: cst.BaseStatement) -> bool:
    return isinstance(node, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in node.body
    )


def _module_name(node: cst.Import | cst.ImportFrom) -> str:
    if isinstance(node, cst.Import):
        return get_full_name_for_node(node.names[0].name) or ""
    if node.relative or node.module is None:
        return ""
    return get_full_name_for_node(node.module) or ""


def _sort_key(node: cst.BaseSmallStatement, style: ImportStyle | None = None) -> tuple[int, str, tuple[int, str]]:
    """isort's and ruff's default order within a section: ``import`` lines before ``from``
    lines, each by module name, case-insensitively (with ``force_single_line``, one ``from``
    line per name: then by the name too)."""
    assert isinstance(node, (cst.Import, cst.ImportFrom))
    name = (0, "")
    if (
        style is not None
        and style.force_single_line
        and isinstance(node, cst.ImportFrom)
        and not isinstance(node.names, cst.ImportStar)
    ):
        name = _name_key(node.names[0].evaluated_name)
    return (0 if isinstance(node, cst.Import) else 1, _module_name(node).lower(), name)


def _name_key(name: str) -> tuple[int, str]:
    """ruff's ``order-by-type`` for the names of one ``from`` import: CONSTANTS, Classes, the rest."""
    if len(name) > 1 and name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def _is_standard_library(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names


def _import_group(body: Sequence[cst.BaseStatement], wanted: Callable[[str], bool]) -> range | None:
    """The blank-line-separated run of top-level import lines (isort's section) that imports a
    module ``wanted`` accepts, as indexes into ``body``."""
    start = index = first_statement_index(body)
    groups: list[range] = []
    while index < len(body) and _is_import_line(body[index]):
        line = cast(cst.SimpleStatementLine, body[index])
        if index > start and any(empty.comment is None for empty in line.leading_lines):
            groups.append(range(start, index))
            start = index
        index += 1
    groups.append(range(start, index))
    for group in groups:
        for i in group:
            name = _module_name(cast(cst.Import | cst.ImportFrom, cast(cst.SimpleStatementLine, body[i]).body[0]))
            if wanted(name):
                return group
    return None


def _is_sorted(lines: Sequence[cst.BaseStatement], style: ImportStyle | None = None) -> bool:
    keys = []
    for line in lines:
        statement = cast(cst.SimpleStatementLine, line)
        if len(statement.body) != 1:
            return False
        small = statement.body[0]
        if isinstance(small, cst.Import) and len(small.names) != 1:
            return False  # ``import os, sys``: isort would split it first
        if isinstance(small, cst.ImportFrom) and (small.relative or isinstance(small.names, cst.ImportStar)):
            return False
        keys.append(_sort_key(small, style))
    return keys == sorted(keys)


def _merged_into_existing(
    body: list[cst.BaseStatement], new: cst.BaseSmallStatement, style: ImportStyle | None = None
) -> list[cst.BaseStatement] | None:
    """``body`` with ``new``'s names added to a one-line ``from`` import of the same module
    (isort merges them), or None when there is none to add them to."""
    if not isinstance(new, cst.ImportFrom) or isinstance(new.names, cst.ImportStar):
        return None
    for index, line in enumerate(body):
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
            continue
        old = line.body[0]
        if (
            not isinstance(old, cst.ImportFrom)
            or isinstance(old.names, cst.ImportStar)
            or old.lpar is not None
            or old.relative
            or _module_name(old) != _module_name(new)
        ):
            continue
        names = [alias.evaluated_name for alias in old.names]
        if names != sorted(names, key=_name_key) or any(alias.asname for alias in old.names):
            return None  # not isort's order: leave that line as it is
        combined = sorted({*names, *(alias.evaluated_name for alias in new.names)}, key=_name_key)
        aliases = [
            cst.ImportAlias(
                name=cst.Name(name),
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                if i < len(combined) - 1
                else cst.MaybeSentinel.DEFAULT,
            )
            for i, name in enumerate(combined)
        ]
        body[index] = _wrapped(line.with_changes(body=[old.with_changes(names=aliases)]), style)
        return body
    return None


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
