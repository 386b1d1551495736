"""print-progress (ACC107): print once, progress bars on one process per machine."""

from __future__ import annotations

import libcst as cst
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
    "a message above tqdm's bars": (
        in_loop('tqdm.write(f"step {step}")', prelude="from tqdm import tqdm\n"),
        ["if accelerator.is_main_process:", 'tqdm.write(f"step {step}")'],
    ),
    "a progress line written by hand": (
        in_loop('sys.stdout.write("\\r%d" % step)\nsys.stdout.flush()', prelude="import sys\n"),
        ["if accelerator.is_main_process:", 'sys.stdout.write("\\r%d" % step)'],
    ),
    "a print from rich is not the builtin": (
        in_loop('print("step")', prelude="from rich import print\n"),
        ['print("step")'],
    ),
}


@pytest.mark.parametrize(("body", "expectations"), REWRITES.values(), ids=REWRITES.keys())
def test_rewrites(body: str, expectations: list[str]) -> None:
    check_expectations(body, expectations)


GUARD_PRINT_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(epochs):
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        nn.functional.mse_loss(model(data), target).backward()
        optimizer.step()


if __name__ == "__main__":
    print("config:", 3)
    main(3)
    print("done")
"""


def test_a_print_before_the_function_creating_the_accelerator_runs_on_the_first_process_only() -> None:
    from accel_convert.codemods import convert_module
    from accel_convert.codemods.engine.model import Options

    once = convert_module(cst.parse_module(GUARD_PRINT_SCRIPT), Options()).module.code
    guard = '    if int(os.environ.get("RANK", "0")) == 0:\n'
    assert f'{guard}        print("config:", 3)\n    main(3)\n{guard}        print("done")\n' in once
    assert once.splitlines()[0] == "import os" or "\nimport os\n" in once
    # Converting again leaves the guarded prints (and everything else) alone.
    assert convert_module(cst.parse_module(once), Options()).module.code == once
