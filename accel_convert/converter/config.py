"""Defaults for the command-line flags from ``[tool.accel-convert]`` in pyproject.toml.

As ruff does, the nearest ``pyproject.toml`` above the (first) input that has a
``[tool.accel-convert]`` table wins; flags given on the command line override it. Keys are the
long flag names (``oom-retry``; ``oom_retry`` is accepted too)::

    [tool.accel-convert]
    target = "accelerate"
    oom-retry = true
    ignore = ["ACC9"]
    extend-exclude = ["legacy/", "*_old.py"]

``exclude`` and ``extend-exclude`` patterns are relative to the folder of the pyproject.toml
that sets them (those given on the command line: to the current folder).
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from accel_convert.records import record

TABLE = "accel-convert"

#: Setting name → the Python type its TOML value must have, and allowed values where limited.
SETTINGS: dict[str, tuple[type, tuple[str, ...]]] = {
    "target": (str, ("runtime", "accelerate")),
    "oom-retry": (bool, ()),
    "fsdp": (bool, ()),
    "split-batches": (bool, ()),
    "select": (list, ()),
    "ignore": (list, ()),
    "strict": (bool, ()),
    "output-format": (str, ("text", "json", "github", "sarif")),
    "color": (bool, ()),
    "exclude": (list, ()),
    "extend-exclude": (list, ()),
    "respect-gitignore": (bool, ()),
}


class ConfigError(Exception):
    """A pyproject.toml that cannot be used; the message names the file and what is wrong."""


@record(frozen=True)
class Config:
    """Settings found in one pyproject.toml, keyed by click parameter name (``oom_retry``)."""

    path: Path | None
    values: dict[str, Any]


def find_pyproject(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest pyproject.toml at or above ``start`` holding a ``[tool.accel-convert]`` table,
    with that table."""
    folder = Path(os.path.realpath(start))  # realpath: a symbolic link loop does not raise
    if not folder.is_dir():
        folder = folder.parent
    for candidate_dir in (folder, *folder.parents):
        candidate = candidate_dir / "pyproject.toml"
        if candidate.is_file():
            table = read_toml(candidate).get("tool", {}).get(TABLE)
            if table is not None:
                return candidate, table
    return None


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning every failure into one ConfigError line.

    A run asks the project's pyproject.toml four things (this command's table, black's, the
    line length, the import sorting): the file is read each time, and its text parsed once
    (the pure-Python parser takes about a millisecond for a 6 KB file). The tables returned are
    shared between those readers: read them, never change them.
    """
    toml = _toml()
    try:
        with path.open("rb") as handle:
            return _parsed_toml(handle.read())
    except toml.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None


@lru_cache(maxsize=4)
def _parsed_toml(content: bytes) -> dict[str, Any]:
    """The tables of a TOML file's ``content`` (what ``tomllib.load`` makes of the same bytes)."""
    return _toml().loads(content.decode())


def _toml() -> ModuleType:
    """The TOML parser, imported only once a pyproject.toml is found (the import compiles a
    dozen patterns): ``tomllib``, published as ``tomli`` for Python 3.10 (a dependency there)."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    return tomli


def validated(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    """Check every key and value of the table; return them keyed by click parameter name."""
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        if key not in SETTINGS:
            known = ", ".join(sorted(SETTINGS))
            raise ConfigError(f"{path}: [tool.{TABLE}] unknown key {raw_key!r} (known: {known})")
        expected, choices = SETTINGS[key]
        if not isinstance(value, expected) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            wanted = "a list of strings" if expected is list else f"a {expected.__name__}"
            raise ConfigError(f"{path}: [tool.{TABLE}] {raw_key} must be {wanted}, got {value!r}")
        if choices and value not in choices:
            raise ConfigError(f"{path}: [tool.{TABLE}] {raw_key} must be one of {', '.join(choices)}, got {value!r}")
        values[key.replace("-", "_")] = tuple(value) if isinstance(value, list) else value
    return values


def load_config(start: Path) -> Config:
    """The settings that apply to files at ``start`` (empty when no pyproject.toml sets any)."""
    found = find_pyproject(start)
    if found is None:
        return Config(None, {})
    path, table = found
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.{TABLE} must be a table")
    return Config(path, validated(path, table))
