"""oom_retry (ACC117): the training code retried by ``find_executable_batch_size``."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.oom_retry import OomRetryCodemod
from tests.codemods.support import apply, assert_rewrites, code, make_facts
from tests.fixture_conversions import converted_fixture

RETRY = Options(oom_retry=True)

FUNCTION_SCRIPT = """
from torch.utils.data import DataLoader
from accel_convert.runtime import Accelerator


def main():
    args = parser.parse_args()
    accelerator = Accelerator()
    train_set = make_data()
    best = 0.0

    # data
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    for data, _ in train_loader:
        recon = model(data)
        grid = recon.view(args.batch_size, 1, 28, 28)
        best = max(best, grid.mean().item())
    return best
"""

FUNCTION_SCRIPT_RETRIED = """
from torch.utils.data import DataLoader
from accel_convert.runtime import Accelerator, find_executable_batch_size


def main():
    args = parser.parse_args()
    accelerator = Accelerator()
    train_set = make_data()
    best = 0.0

    @find_executable_batch_size(starting_batch_size=args.batch_size)
    def inner_training_loop(batch_size):
        nonlocal best
        accelerator.free_memory()
        accelerator.print(f"Training with batch size {batch_size}")
        # data
        train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
        model = VAE()
        optimizer = torch.optim.Adam(model.parameters())
        model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
        for data, _ in train_loader:
            recon = model(data)
            grid = recon.view(batch_size, 1, 28, 28)
            best = max(best, grid.mean().item())
        return best

    return inner_training_loop()
"""

MODULE_SCRIPT = """
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator

BATCH = 32
args = parser.parse_args()
accelerator = Accelerator()
losses = []
train_loader = DataLoader(dataset, batch_size=BATCH)
model = Net()
model, train_loader = accelerator.prepare(model, train_loader)


def train(epoch):
    for x in train_loader:
        losses.append(model(x).sum().item())


def report():
    print(len(losses), model.training)


if __name__ == "__main__":
    for epoch in range(2):
        train(epoch)
"""

MODULE_SCRIPT_RETRIED = """
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator, find_executable_batch_size

BATCH = 32
args = parser.parse_args()
accelerator = Accelerator()
losses = []


@find_executable_batch_size(starting_batch_size=BATCH)
def inner_training_loop(batch_size):
    accelerator.free_memory()
    accelerator.print(f"Training with batch size {batch_size}")
    train_loader = DataLoader(dataset, batch_size=batch_size)
    model = Net()
    model, train_loader = accelerator.prepare(model, train_loader)

    def train(epoch):
        for x in train_loader:
            losses.append(model(x).sum().item())

    def report():
        print(len(losses), model.training)

    for epoch in range(2):
        train(epoch)


if __name__ == "__main__":
    inner_training_loop()
"""


@pytest.mark.parametrize(
    "before, after, options, batch_size_expr",
    [
        pytest.param(FUNCTION_SCRIPT, FUNCTION_SCRIPT_RETRIED, RETRY, "args.batch_size", id="main-function"),
        pytest.param(
            MODULE_SCRIPT,
            MODULE_SCRIPT_RETRIED,
            Options(oom_retry=True, target="accelerate"),
            None,
            id="module-level-with-main-guard",
        ),
    ],
)
def test_training_code_is_retried(before: str, after: str, options: Options, batch_size_expr: str | None) -> None:
    changes = assert_rewrites(OomRetryCodemod(), before, after, None, options, preamble="")
    assert [(c.code, c.fixed) for c in changes] == [("ACC117", True)]


def test_off_unless_asked_for() -> None:
    facts = analyse(cst.parse_module(code(FUNCTION_SCRIPT)))
    assert not OomRetryCodemod().applies(facts, Options())
    assert OomRetryCodemod().applies(facts, RETRY)


def test_batch_size_used_by_other_functions_is_reported_where_it_is_read() -> None:
    source = code(
        FUNCTION_SCRIPT
        + """

def show(recon, args):
    return recon.view(args.batch_size, 1, 28, 28)
"""
    )
    _, changes = apply(OomRetryCodemod(), source, None, RETRY, preamble="")
    warnings = [(c.code, c.line) for c in changes if not c.fixed]
    assert warnings == [("ACC917", len(source.splitlines()))]


LOADER_FACTORY_SCRIPT = """
import torch
from torch.utils.data import DataLoader
from accel_convert.runtime import Accelerator


def get_loaders(train_set, val_set, batch_size):
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    return train_loader, DataLoader(val_set, batch_size=64)


def main():
    args = parser.parse_args()
    accelerator = Accelerator()
    train_loader, val_loader = get_loaders(make_data(), make_data(), args.batch_size)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, train_loader, val_loader = accelerator.prepare(model, optimizer, train_loader, val_loader)
    Trainer(model, optimizer, train_loader, val_loader).fit()
"""


def test_batch_size_a_loader_factory_takes_is_what_the_caller_passes() -> None:
    # The factory's ``batch_size`` parameter names the batch size; the retry starts from what the
    # training code passes for it (``args.batch_size``: the attribute's name is not the variable
    # ``batch_size``, which does not exist in ``main``), and the factory's own parameter, which
    # receives the retried value, is not a stale use.
    output, changes = apply(OomRetryCodemod(), code(LOADER_FACTORY_SCRIPT), None, RETRY, preamble="")
    assert "@find_executable_batch_size(starting_batch_size=args.batch_size)" in output
    assert "get_loaders(make_data(), make_data(), batch_size)" in output
    assert [(c.code, c.fixed) for c in changes] == [("ACC117", True)]


def test_without_prepare_nothing_is_retried() -> None:
    source = code(
        """
        def main():
            accelerator = Accelerator()
            train_loader = DataLoader(data, batch_size=64)
            if args.fast:
                model, train_loader = accelerator.prepare(model, train_loader)
        """
    )
    output, changes = apply(OomRetryCodemod(), source, None, RETRY)
    assert output == source
    assert [(c.code, c.fixed) for c in changes] == [("ACC917", False)]


RUNNABLE = """
class FakeAccelerator:
    def __init__(self):
        self.log = []

    def free_memory(self):
        self.log.append("free")

    def print(self, *values):
        self.log.append(" ".join(str(v) for v in values))

    def prepare(self, *objects):
        return objects


def main(batch_size_arg, fits):
    accelerator = FakeAccelerator()
    seen = []
    loader = list(range(batch_size_arg))
    model = "model"
    model, loader = accelerator.prepare(model, loader)
    if batch_size_arg > fits:
        raise MemoryError("CUDA out of memory.")
    seen.append(batch_size_arg)
    return seen, accelerator.log
"""


def halving_batch_size_finder(starting_batch_size):
    """A stand-in for the runtime's decorator: halve on MemoryError (the retry policy is the
    runtime's business; here only the rewritten script's side is checked)."""

    def decorate(function):
        def run():
            size = starting_batch_size
            while True:
                try:
                    return function(size)
                except MemoryError:
                    size //= 2

        return run

    return decorate


def test_retried_code_runs_and_retries_with_smaller_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Execute the rewritten function: each attempt frees memory, says its batch size, and the
    batch-size expression inside follows the retried value."""
    # Facts built by hand: the script runs with a stand-in accelerator class, which the analysis
    # rightly does not take for an Accelerator.
    facts = make_facts(train_loaders={"loader"}, eval_loaders=set(), batch_size_expr="batch_size_arg")
    output, _ = apply(OomRetryCodemod(), code(RUNNABLE), facts, RETRY)
    assert "from accel_convert.runtime import find_executable_batch_size" in output
    monkeypatch.setitem(
        sys.modules,
        "accel_convert.runtime",
        types.SimpleNamespace(find_executable_batch_size=halving_batch_size_finder),
    )
    namespace: dict[str, object] = {}
    exec(compile(output, "<converted>", "exec"), namespace)  # noqa: S102 - our own generated code
    seen, log = namespace["main"](64, 16)  # type: ignore[operator]
    assert seen == [16]
    assert log == [
        "free",
        "Training with batch size 64",
        "free",
        "Training with batch size 32",
        "free",
        "Training with batch size 16",
    ]


FIXTURE_SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "cases").glob("*.py"))


def test_retrying_changes_no_report_but_its_own() -> None:
    """Moving the training code into the retried function must not hide it from the rules that
    run after the retry: every fixture gets, with --oom-retry, exactly the changes and reports
    (code, position, message) it gets without, besides the retry's own ACC117/ACC917. Before the
    moved statements kept their positions and the module's facts, seven fixtures lost their
    ACC919 (a loss summed per process) and four reports stood at 1:1. A module-level device line
    below the loaders (device_after_loaders_module.py) stays at module level: moved, it became a
    local of the retried function, which ACC125 removed where the plain conversion keeps it."""

    def changes(script: Path, options: Options) -> set[tuple[object, ...]]:
        return {
            (c.code, c.line, c.column, c.end_line, c.end_column, c.message, c.fixed)
            for c in converted_fixture(script, options).changes
            if c.code not in ("ACC117", "ACC917") and not _retry_left_out(c)
        }

    retried = 0
    for script in FIXTURE_SCRIPTS:
        with_retry = converted_fixture(script, Options(oom_retry=True))
        retried += any(change.code == "ACC117" for change in with_retry.changes)
        assert changes(script, Options(oom_retry=True)) == changes(script, Options()), script.name
    assert retried > len(FIXTURE_SCRIPTS) // 2, "the retry was added to most fixtures"
    # The guard never has to leave the retry out of a fixture: the retried code starts after the
    # line that sets the batch size (``batch_size = 32``), a helper's own ``bs`` parameter is not
    # the batch size it reads (``get_data(ds, bs)``: its caller's ``args.bs`` is), and the check
    # reads a ``global``/``nonlocal`` the retry declares as the variable it is.
    # TCN's layout (optimizer_chosen_by_name.py: module-level functions read the loaders the
    # retried code builds, as globals) and vision-transformers-cifar10's (net_choice_chain.py: an
    # optimizer bound only under an if/elif chain, as unbound in the original as after the move)
    # were left out before the guard read names bound through ``global`` and moved code's reads
    # as the original's.
    left_out = [
        s.name
        for s in FIXTURE_SCRIPTS
        if any(map(_retry_left_out, converted_fixture(s, Options(oom_retry=True)).changes))
    ]
    assert left_out == []


def _retry_left_out(change: object) -> bool:
    return getattr(change, "code", "") == "ACC937" and getattr(change, "message", "").startswith("ACC117 ")


LOCALS_NAMED_LIKE_THE_LOOP = """
import torch
from torch.utils.data import DataLoader
from accel_convert.runtime import Accelerator

accelerator = Accelerator()


class Net(torch.nn.Module):
    def forward(self, x):
        return x * 2


def make_data(n):
    x = torch.randn(n, 4)
    return [(x, y) for x, y in zip(x, x)]


scale = lambda x: x / 2
train_loader = DataLoader(make_data(64), batch_size=16)
model = Net()
model, train_loader = accelerator.prepare(model, train_loader)
for x, y in train_loader:
    total = model(scale(x)).sum()
print(total)
"""


def test_a_functions_own_names_are_not_declared_global() -> None:
    # ``x`` is a parameter of ``forward`` and of the lambda, a local of ``make_data`` and a
    # comprehension variable there: none reads the module's ``x``, which the retried loop binds.
    output, _ = apply(OomRetryCodemod(), code(LOCALS_NAMED_LIKE_THE_LOOP), None, RETRY, preamble="")
    assert "inner_training_loop(batch_size):\n    accelerator.free_memory()" in output
    assert "global" not in output
