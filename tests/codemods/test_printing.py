"""print-progress (ACC107): print once, progress bars on one process per machine."""

from __future__ import annotations

import pytest

from tests.codemods.support import check_expectations, in_loop

REWRITES = {
    "tqdm on the local main process": (
        in_loop("model(batch[0])", prelude="from tqdm import tqdm\n").replace("in loader:", "in tqdm(loader):"),
        ["for batch in tqdm(loader, disable=not accelerator.is_local_main_process):"],
    ),
    "tqdm disable merged": (
        in_loop("model(batch[0])", prelude="from tqdm.auto import tqdm\n").replace(
            "in loader:", "in tqdm(loader, disable=quiet):"
        ),
        ["for batch in tqdm(loader, disable=quiet or not accelerator.is_local_main_process):"],
    ),
    "print after the accelerator exists": (in_loop('print("step")'), ['accelerator.print("step")']),
    "a print from rich is not the builtin": (
        in_loop('print("step")', prelude="from rich import print\n"),
        ['print("step")'],
    ),
}


@pytest.mark.parametrize(("body", "expectations"), REWRITES.values(), ids=REWRITES.keys())
def test_rewrites(body: str, expectations: list[str]) -> None:
    check_expectations(body, expectations)
