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


HELPER_CLASS_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.counter, self.best = patience, 0, None

    def __call__(self, value):
        if self.best is not None and value >= self.best:
            self.counter += 1
            print(f"counter {self.counter} of {self.patience}")
        else:
            self.best, self.counter = value, 0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        print("forward", x.shape)
        return self.fc(x)


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stopper = EarlyStopping(2)
    for data, target in loader:
        loss = nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
        stopper(loss.item())
"""


def test_a_print_in_a_helper_class_runs_on_the_first_process_only_and_a_model_print_is_left() -> None:
    from accel_convert.codemods import convert_module
    from accel_convert.codemods.engine.model import Options

    once = convert_module(cst.parse_module(HELPER_CLASS_SCRIPT), Options()).module.code
    guard = '            if int(os.environ.get("RANK", "0")) == 0:\n'
    assert f'{guard}                print(f"counter {{self.counter}} of {{self.patience}}")\n' in once
    assert '        print("forward", x.shape)\n' in once  # the model's own print: left as it was
    assert "import os" in once.splitlines()
    assert convert_module(cst.parse_module(once), Options()).module.code == once


LOGGING_SCRIPT = """\
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

logger = logging.getLogger(__name__)


def main(epochs):
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        nn.functional.mse_loss(model(data), target).backward()
        optimizer.step()
    logger.info("done")


if __name__ == "__main__":
    logging.basicConfig(level="DEBUG")
    main(3)
"""


def test_the_configured_logging_level_applies_on_the_main_process_only() -> None:
    # U-Net, early stopping, SimCLR: ``logging.info`` / ``logger.info`` would log once per rank.
    from accel_convert.codemods import convert_module
    from accel_convert.codemods.engine.model import Options

    once = convert_module(cst.parse_module(LOGGING_SCRIPT), Options()).module.code
    assert (
        'logging.basicConfig(level=logging.INFO if accelerator.is_main_process else logging.WARNING, format="%(levelname)s %(message)s")'
        in once
    )
    # Before the accelerator exists, the launcher's RANK tells the main process.
    assert 'logging.basicConfig(level="DEBUG" if int(os.environ.get("RANK", "0")) == 0 else "WARNING")' in once
    assert "import os" in once.splitlines()
    assert convert_module(cst.parse_module(once), Options()).module.code == once
    quiet = LOGGING_SCRIPT.replace('level="DEBUG"', "level=logging.ERROR")
    assert "level=logging.ERROR)" in convert_module(cst.parse_module(quiet), Options()).module.code


def test_the_rank_chosen_level_logs_info_once_and_warnings_everywhere() -> None:
    # What the rewritten configuration does on each rank (the standard library's logging).
    import subprocess
    import sys

    program = (
        "import logging, os\n"
        'logging.basicConfig(level=logging.INFO if int(os.environ.get("RANK", "0")) == 0 else logging.WARNING)\n'
        'logging.getLogger("engine").info("progress")\n'
        'logging.warning("careful")\n'
    )
    logged = {}
    for rank in ("0", "1"):
        env = {"PATH": "/usr/bin:/bin", "RANK": rank}
        run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=30)
        logged[rank] = run.stderr.splitlines()
    assert logged == {"0": ["INFO:engine:progress", "WARNING:root:careful"], "1": ["WARNING:root:careful"]}


def test_a_logger_given_its_own_level_logs_it_on_the_main_process_only() -> None:
    """``logger = logging.getLogger(__name__); logger.setLevel(logging.INFO)`` logged INFO on every
    rank while ``basicConfig(level=...)`` was already per process: the same rule for both. A
    level from a variable, or a ``setLevel`` of something that is not a logger, is left."""
    from accel_convert.codemods import convert_module
    from accel_convert.codemods.engine.model import Options

    script = LOGGING_SCRIPT.replace(
        "logger = logging.getLogger(__name__)\n",
        "logger = logging.getLogger(__name__)\nlogger.setLevel(logging.INFO)\n",
    ).replace(
        '    logger.info("done")\n',
        '    logger.info("done")\n    logging.getLogger("engine").setLevel(logging.DEBUG)\n'
        "    model.setLevel(logging.INFO)\n    logger.setLevel(level)\n",
    )
    once = convert_module(cst.parse_module(script), Options()).module.code
    # Module level runs before the accelerator exists: the launcher's RANK decides.
    assert 'logger.setLevel(logging.INFO if int(os.environ.get("RANK", "0")) == 0 else logging.WARNING)' in once
    assert (
        'logging.getLogger("engine").setLevel(logging.DEBUG if accelerator.is_main_process else logging.WARNING)'
        in once
    )
    assert "    logger.setLevel(level)\n" in once
    assert "accelerator.unwrap_model(model).setLevel(logging.INFO)\n" in once  # a model method, not a logger
    assert convert_module(cst.parse_module(once), Options()).module.code == once
