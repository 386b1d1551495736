"""Output that passes the project's black: a script black left as it is stays that way.

The rewrites print new code in libcst's layout (an argument appended to a call on several lines,
a ``prepare(...)`` line longer than the project's limit). A project that formats with black says
so in its ``pyproject.toml`` (a ``[tool.black]`` table, as black itself looks for it); there,
when black is installed and the original file is exactly what black makes of it, the converted
file is formatted with black under the project's settings, so ``black --check`` passes on it as
it passed on the original. A file black would already change is the user's own layout: it is
written as converted, untouched by black.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from accel_convert.converter.config import ConfigError, read_toml


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
