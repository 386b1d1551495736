"""Every test runs with its own empty ``--check`` cache folder (converter.cache), never the user's
``~/.cache/accel-convert``: child processes inherit the variable, and no test sees another's results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accel_convert.converter.cache import CACHE_DIR_VARIABLE


@pytest.fixture(autouse=True)
def private_check_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path_factory.mktemp("accel-convert-cache")))
    yield
