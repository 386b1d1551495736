"""Output that passes the project's black and import sorter: a script black left as it is stays
that way, and an import a rewrite adds follows the project's ruff or isort settings.

The rewrites print new code in libcst's layout (an argument appended to a call on several lines,
a ``prepare(...)`` line longer than the project's limit). A project that formats with black says
so in its ``pyproject.toml`` (a ``[tool.black]`` table, as black itself looks for it); there,
when black is installed and the original file is exactly what black makes of it, the converted
file is formatted with black under the project's settings, so ``black --check`` passes on it as
it passed on the original. A file black would already change is the user's own layout: it is
written as converted, untouched by black.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from accel_convert.codemods.engine.model import ImportStyle, Options
from accel_convert.converter.config import ConfigError, read_toml
from accel_convert.converter.layout import formatter_layout


def formatter_clean(original: bytes, output: bytes, path: str, encoding: str) -> bytes:
    """``output`` as the project's formatter would leave it where ``original`` was formatted:
    black itself for a project with ``[tool.black]`` where it is installed, else the
    converter's own layout of the lines it changed (``converter.layout``: black's defaults and
    ``ruff format``, the line length of ``[tool.ruff]`` or ``[tool.black]`` when given)."""
    formatted = black_formatted(original, output, path, encoding)
    if formatted is not output or output == original or not _plain_utf8(output, encoding):
        return formatted
    try:
        before, after = original.decode("utf-8"), output.decode("utf-8")
    except UnicodeDecodeError:
        return output
    laid_out = formatter_layout(before, after, formatter_line_length(Path(os.path.abspath(path))))
    return output if laid_out == after else laid_out.encode("utf-8")


def _plain_utf8(output: bytes, encoding: str) -> bool:
    return encoding.replace("_", "-").lower() in ("utf-8", "utf8") and b"\r" not in output


def formatter_line_length(path: Path) -> int:
    """``line-length`` of ``[tool.ruff]`` (unless its ``exclude``/``extend-exclude`` leaves
    ``path`` out of ruff's formatting), else of ``[tool.black]``, in the nearest
    ``pyproject.toml`` above ``path``; 88, both formatters' default, otherwise (and for a name
    that is no file: a test's ``train.py``, ``<stdin>``, which belongs to no project)."""
    if not path.is_file():
        return 88
    for candidate in path.parents:
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                tool = read_toml(pyproject).get("tool", {})
            except ConfigError:
                return 88
            tool = tool if isinstance(tool, dict) else {}
            relative = path.relative_to(candidate).as_posix()
            for name in ("ruff", "black"):
                table = tool.get(name)
                if isinstance(table, dict) and "line-length" in table and not _excluded(table, relative):
                    return _length(table["line-length"], 88)
            return 88
    return 88


def _excluded(table: dict[str, Any], relative: str) -> bool:
    patterns = [*table.get("exclude", []), *table.get("extend-exclude", [])]
    return any(
        relative == p or relative.startswith(f"{p.rstrip('/')}/") or fnmatch.fnmatch(relative, p)
        for p in patterns
        if isinstance(p, str)
    )


def black_formatted(original: bytes, output: bytes, path: str, encoding: str) -> bytes:
    """``output`` formatted with the project's black when the project uses black and
    ``original`` is black-formatted; else ``output`` as it is."""
    if output == original or encoding.replace("_", "-").lower() not in ("utf-8", "utf8") or b"\r" in output:
        return output
    settings = black_settings(Path(os.path.abspath(path)).parent)
    if settings is None:
        return output
    try:
        import black
    except ImportError:  # the project formats with black, but it is not installed here
        return output
    mode = black.Mode(
        line_length=int(settings.get("line-length", black.DEFAULT_LINE_LENGTH)),
        string_normalization=not settings.get("skip-string-normalization", False),
        magic_trailing_comma=not settings.get("skip-magic-trailing-comma", False),
        target_versions={black.TargetVersion[v.upper()] for v in settings.get("target-version", [])},
    )
    try:
        before = original.decode("utf-8")
        if black.format_str(before, mode=mode) != before:
            return output
        return black.format_str(output.decode("utf-8"), mode=mode).encode("utf-8")
    except Exception:  # noqa: BLE001 - black refusing a file leaves it as converted
        return output


@cache
def black_settings(folder: Path) -> dict[str, Any] | None:
    """The ``[tool.black]`` table of the nearest ``pyproject.toml`` at or above ``folder`` (black
    stops at the first pyproject.toml it finds, as here), or None when it has none."""
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                table = read_toml(pyproject).get("tool", {}).get("black")
            except ConfigError:
                return None
            return table if isinstance(table, dict) else None
    return None


# -- the project's import sorting ----------------------------------------------------------------

#: isort's profiles that change what an added import looks like: (line length, wrap, single line).
ISORT_PROFILES: dict[str, tuple[int, str, bool]] = {
    "black": (88, "vertical", False),
    "google": (1000, "grid", True),
}
#: isort's ``multi_line_output`` values meaning ruff's (and black's) vertical hanging indent.
VERTICAL_HANGING_INDENT = (3, "3", "VERTICAL_HANGING_INDENT")


def with_import_style(options: Options, path: str) -> Options:
    """``options`` with the import settings of the project ``path`` belongs to (unless given);
    a name that is no file (a test's ``train.py``, ``<stdin>``) belongs to no project."""
    if options.import_style is not None or not os.path.isfile(path):
        return options
    style = import_style(Path(os.path.abspath(path)).parent)
    return options if style is None else replace(options, import_style=style)


@cache
def import_style(folder: Path) -> ImportStyle | None:
    """The import sorting of the nearest ``pyproject.toml`` at or above ``folder``: ruff's
    (``[tool.ruff.lint.isort]`` or ``[tool.ruff.isort]``, ``line-length`` of ``[tool.ruff]``)
    or isort's (``[tool.isort]``: ``profile``, ``force_single_line``, ``known_first_party``,
    ``line_length``, ``multi_line_output``); None when it configures neither (defaults kept)."""
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                tool = read_toml(pyproject).get("tool", {})
            except ConfigError:
                return None
            return _style_of(tool) if isinstance(tool, dict) else None
    return None


def _style_of(tool: dict[str, Any]) -> ImportStyle | None:
    ruff, isort = tool.get("ruff"), tool.get("isort")
    ruff_isort: Any = None
    if isinstance(ruff, dict):
        lint = ruff.get("lint")
        ruff_isort = (lint.get("isort") if isinstance(lint, dict) else None) or ruff.get("isort")
    if isinstance(ruff, dict) and (isinstance(ruff_isort, dict) or not isinstance(isort, dict)):
        table = ruff_isort if isinstance(ruff_isort, dict) else {}
        return ImportStyle(
            force_single_line=bool(table.get("force-single-line", False)),
            known_first_party=_names(table.get("known-first-party")),
            line_length=_length(ruff.get("line-length"), 88),
            wrap="vertical",
        )
    if isinstance(isort, dict):
        length, wrap, single = ISORT_PROFILES.get(str(isort.get("profile", "")), (79, "grid", False))
        if "multi_line_output" in isort:
            wrap = "vertical" if isort["multi_line_output"] in VERTICAL_HANGING_INDENT else "grid"
        return ImportStyle(
            force_single_line=bool(isort.get("force_single_line", single)),
            known_first_party=_names(isort.get("known_first_party")),
            line_length=_length(isort.get("line_length"), length),
            wrap="vertical" if wrap == "vertical" else "grid",
        )
    return None


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # isort also takes "a,b"
        value = value.split(",")
    return tuple(str(name).strip() for name in value) if isinstance(value, list | tuple) else ()


def _length(value: Any, default: int) -> int:
    return value if isinstance(value, int) and value > 0 else default
