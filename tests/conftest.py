"""Every test runs with its own empty ``--check`` cache folder (converter.cache), never the user's
``~/.cache/accel-convert``: child processes inherit the variable, and no test sees another's results.

The command ends its own process with ``os._exit`` (converter.cli.end_process); called inside the
test process, that would end pytest at once with the command's code (0: a green run that stopped
half-way). There, it raises instead, and the test that reached it fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from accel_convert.converter.cache import CACHE_DIR_VARIABLE

TEST_PROCESS = os.getpid()
REAL_EXIT = os._exit


class ProcessEndedInTest(AssertionError):
    """``os._exit`` was called in the test process itself."""


def exit_outside_the_test_process(code: int) -> NoReturn:
    """``os._exit`` for a forked child (it must end there); an error in the test process."""
    if os.getpid() != TEST_PROCESS:
        REAL_EXIT(code)
    raise ProcessEndedInTest(f"os._exit({code}) called in the test process: it would end pytest")


@pytest.fixture(autouse=True)
def private_check_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path_factory.mktemp("accel-convert-cache")))
    yield


@pytest.fixture(autouse=True)
def no_process_end_in_tests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(os, "_exit", exit_outside_the_test_process)
    yield
