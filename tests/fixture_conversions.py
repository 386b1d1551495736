"""Conversions of fixture scripts, computed once per test session.

Several test files convert every fixture script with the same options through the CLI's own code
path (``convert_source``): the targeted-walk comparison (tests/codemods/test_targeting.py) and
the end-to-end runs (tests/test_end_to_end.py). Each conversion costs a tenth of a second or more,
two hundred of them several seconds; here each is computed once and shared (a ``Conversion`` is
frozen). A conversion that raises is not kept: every caller gets its own error.
"""

from __future__ import annotations

import functools
from pathlib import Path

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import Conversion, convert_source


def converted_fixture(script: Path, options: Options) -> Conversion:
    """``convert_source`` of the script's bytes as they are now, with ``options``."""
    return _convert(script.read_bytes(), options, str(script))


@functools.cache
def _convert(source: bytes, options: Options, path: str) -> Conversion:
    return convert_source(source, options, path=path)
