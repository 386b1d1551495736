"""The reports (ACC901 no-dataloader, ACC902 rank-dependent-break, ACC903 already-distributed,
ACC918 keyboard-interrupt): the spot is reported and left as it was; the rest is converted."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from tests.codemods.support import HEADER, code, convert, in_loop

REPORTS = {
    # One comparison: the processes agree through the trigger (ACC123).
    "loss threshold": ("if loss.item() < 1e-3:\n    break", "ACC123"),
    "value derived from the model": ("acc = (model(batch[0]) > 0).float().mean()\nif acc > 0.9:\n    break", "ACC123"),
    # Not one comparison, or not the end of the if's own body: reported, left as it was.
    "two bounds": ("if loss.item() < 1e-3 or loss.item() > 1e3:\n    break", "ACC902"),
    "in an else": ("if loss.item() > 1e-3:\n    pass\nelse:\n    break", "ACC902"),
    "a flag": ("done = loss.item() < 1e-3\nif done:\n    break", "ACC902"),
    "command-line flag": ("if args.dry_run:\n    break", None),
    "step counter": ("if step >= 3:\n    break", None),
}


@pytest.mark.parametrize(("snippet", "code"), REPORTS.values(), ids=REPORTS.keys())
def test_rank_dependent_breaks_are_reported(snippet: str, code: str | None) -> None:
    body = in_loop("loss = model(batch[0]).sum()\nloss.backward()\n" + snippet).replace(
        "def main():", "def main(args, step=0):"
    )
    converted, lines = convert(body)
    assert ("#ACC902" in lines) == (code == "ACC902")
    assert ("#ACC123" in lines) == (code == "ACC123")
    assert "break" in lines, "the loop is left as it was"
    assert ("accelerator.check_trigger()" in converted) == (code == "ACC123")


EARLY_STOPPING = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def train_epoch(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * x.size(0)
    return total / len(loader.dataset)


def main():
    loader = DataLoader(list(range(8)), batch_size=4)
    val_loader = DataLoader(list(range(8)), batch_size=4)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    best, bad, best_val = float("inf"), 0, float("inf")
    for epoch in range(50):
        train_loss = train_epoch(model, loader, optimizer)
        val_loss = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                val_loss += nn.functional.mse_loss(model(x), y, reduction="sum").item()
        if val_loss < best_val:
            best_val = val_loss
        else:
            break  # VALIDATION
        if train_loss < best - 1e-3:
            best = train_loss
            bad = 0
        else:
            bad += 1
        if bad >= 3:
            break  # TRAINING
"""


def test_early_stopping_on_this_process_training_loss_is_reported_not_on_the_gathered_validation() -> None:
    # The training loss is summed over this process's batches (returned by the epoch function);
    # the patience counter it decides differs between processes, so one leaves the epoch loop
    # first and the others hang. The validation sum is computed from gathered outputs: no report.
    outcome = convert_module(cst.parse_module(EARLY_STOPPING), Options(), EARLY_STOPPING)
    lines = EARLY_STOPPING.splitlines()
    reported = [lines[change.line - 1].strip() for change in outcome.changes if change.code in ("ACC902", "ACC123")]
    # A comparison every process reaches: made to agree (ACC123) rather than reported.
    assert reported == ["if bad >= 3:"]
    assert "        if accelerator.check_trigger():\n            break  # TRAINING" in outcome.module.code


STOPPER_FED = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.counter, self.best, self.early_stop = patience, 0, None, False

    def __call__(self, value):
        if self.best is not None and value >= self.best:
            self.counter += 1
            self.early_stop = self.counter >= self.patience
        else:
            self.best, self.counter = value, 0


def main():
    loader = DataLoader(list(range(8)), batch_size=4)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stopper = EarlyStopping(3)
    for epoch in range(50):
        running = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            running += loss.item()
        stopper(running)
        if stopper.early_stop:
            break
"""


def test_early_stopping_by_a_helper_object_fed_this_process_training_loss_is_reported() -> None:
    outcome = convert_module(cst.parse_module(STOPPER_FED), Options(), STOPPER_FED)
    lines = STOPPER_FED.splitlines()
    reported = [lines[change.line - 1].strip() for change in outcome.changes if change.code == "ACC902"]
    assert reported == ["break"]


PLATEAU_ON = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def main():
    loader = DataLoader(list(range(8)), batch_size=4)
    val_loader = DataLoader(list(range(8)), batch_size=4)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    for epoch in range(5):
        running = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            running += loss.item()
        train_loss = running / len(loader)
        val_loss = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                val_loss += nn.functional.mse_loss(model(x), y, reduction="sum").item()
        scheduler.step({metric})
"""


@pytest.mark.parametrize(("metric", "reported"), [("train_loss", True), ("loss.item()", True), ("val_loss", False)])
def test_a_plateau_scheduler_stepped_with_this_process_training_loss_is_reported(metric: str, reported: bool) -> None:
    source = PLATEAU_ON.format(metric=metric)
    outcome = convert_module(cst.parse_module(source), Options(), source)
    lines = source.splitlines()
    found = [lines[change.line - 1].strip() for change in outcome.changes if change.code == "ACC930"]
    assert found == ([f"scheduler.step({metric})"] if reported else [])


INTERRUPTS = {
    "alone": ("except KeyboardInterrupt:", 1),
    "in a tuple, twice": ("except (SystemExit, KeyboardInterrupt):\n    pass\nexcept KeyboardInterrupt as stop:", 2),
    "other exceptions": ("except (ValueError, RuntimeError):", 0),
}


@pytest.mark.parametrize(("handler", "count"), INTERRUPTS.values(), ids=INTERRUPTS.keys())
def test_keyboard_interrupt_handlers_are_reported_where_they_start(handler: str, count: int) -> None:
    training = "loss = model(batch[0]).sum()\nloss.backward()\noptimizer.step()"
    body = in_loop(training).replace("    for batch in loader:", "    try:\n     for batch in loader:")
    body += textwrap.indent(handler + "\n    pass\n", "    ")
    source = HEADER + textwrap.dedent(body)
    outcome = convert_module(cst.parse_module(source), Options(), source)
    reports = [change for change in outcome.changes if change.code == "ACC918"]
    lines = source.splitlines()
    assert len(reports) == count
    for report in reports:
        assert lines[report.line - 1][report.column :].startswith("except") and not report.fixed
    assert "accelerator.backward(loss)" in outcome.module.code  # the script is still converted


def test_keyboard_interrupt_in_a_script_that_trains_nothing_is_not_reported() -> None:
    source = HEADER + "try:\n    x = torch.zeros(3)\nexcept KeyboardInterrupt:\n    pass\n"
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert outcome.changes == []


def test_data_without_a_dataloader_is_reported_not_sharded() -> None:
    body = (
        "def main():\n    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    data = torch.randn(8, 4)\n    for i in range(0, 8, 2):\n        loss = model(data[i:i + 2]).sum()\n"
        "        loss.backward()\n        optimizer.step()\n"
    )
    code, lines = convert(body)
    assert "#ACC901" in lines
    assert "accelerator.backward(loss)" in lines
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in lines


def test_two_loaders_zipped_in_the_training_loop_are_not_reported() -> None:
    """Multi-task training over ``zip(cls_loader, reg_loader)``: both loaders are prepared, so the
    data is sharded; "does not come from a DataLoader" (ACC901) was a false alarm."""
    body = (
        "def main():\n    a = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    b = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for (x,), (z,) in zip(a, b):\n        loss = model(x).sum() + model(z).sum()\n"
        "        loss.backward()\n        optimizer.step()\n"
    )
    code, lines = convert(body)
    assert "#ACC901" not in lines
    assert "model, optimizer, a, b = accelerator.prepare(model, optimizer, a, b)" in lines


def test_a_dict_of_dataloaders_is_prepared_not_reported() -> None:
    """The transfer-learning tutorial's ``dataloaders = {x: DataLoader(...) for x in ...}`` built
    in the home function: its loaders are prepared there, by their values (the prepare rule, ACC103:
    the loaders owner knows the dict), after the model's prepare."""
    body = (
        "def main():\n    datasets = {x: TensorDataset(torch.randn(8, 4)) for x in ['train', 'val']}\n"
        "    dataloaders = {x: DataLoader(datasets[x], batch_size=2) for x in ['train', 'val']}\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for phase in ['train', 'val']:\n        for (x,) in dataloaders[phase]:\n"
        "            loss = model(x).sum()\n            loss.backward()\n            optimizer.step()\n"
    )
    outcome = convert_module(cst.parse_module(HEADER + body), Options())
    assert "ACC901" not in {change.code for change in outcome.changes}
    assert any(change.code == "ACC103" and "dataloaders" in change.message for change in outcome.changes)
    lines = [line.strip() for line in outcome.module.code.splitlines()]
    prepared = lines.index("dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}")
    assert lines[prepared - 1] == "model, optimizer = accelerator.prepare(model, optimizer)"


def test_a_dict_of_dataloaders_built_before_any_accelerator_is_reported_as_such() -> None:
    """A module-level dict that a ``main()`` creating the accelerator trains on: nothing can prepare
    it where it is built, so the report names the dict and says how to prepare it, not "does not
    come from a DataLoader"."""
    body = (
        "datasets = {x: TensorDataset(torch.randn(8, 4)) for x in ['train', 'val']}\n"
        "dataloaders = {x: DataLoader(datasets[x], batch_size=2) for x in ['train', 'val']}\n\n"
        "def main():\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for phase in ['train', 'val']:\n        for (x,) in dataloaders[phase]:\n"
        "            loss = model(x).sum()\n            loss.backward()\n            optimizer.step()\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    outcome = convert_module(cst.parse_module(HEADER + body), Options())
    messages = [change.message for change in outcome.changes if change.code == "ACC901"]
    assert len(messages) == 1
    assert "DataLoaders held in the dict dataloaders" in messages[0]
    assert "accelerator.prepare(v) for k, v in dataloaders.items()" in messages[0]
    assert "ACC119" not in {change.code for change in outcome.changes}


def test_existing_distributed_script_is_reported_and_left_alone() -> None:
    body = (
        "import torch.multiprocessing as mp\nimport torch.distributed as dist\n\n"
        "def worker(rank):\n    dist.init_process_group('gloo', rank=rank, world_size=2)\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model(torch.ones(4)).sum().backward()\n\n"
        "if __name__ == '__main__':\n    mp.spawn(worker, nprocs=2)\n"
    )
    source = HEADER + body
    outcome = convert_module(cst.parse_module(source), Options())
    assert outcome.module.code == source
    assert {change.code for change in outcome.changes} == {"ACC903"}
    assert all(not change.fixed for change in outcome.changes)


def test_existing_ddp_is_reported_and_untouched() -> None:
    source = code(
        """
        import torch.multiprocessing as mp
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        def worker(rank, world_size):
            model = DDP(Net().to(rank), device_ids=[rank])
            model = nn.DataParallel(model)

        mp.spawn(worker, args=(2,), nprocs=2)
        """
    )
    outcome = convert_module(cst.parse_module(source), Options())
    assert outcome.module.code == source
    assert [(c.code, c.line, c.fixed) for c in outcome.changes] == [("ACC903", 6, False), ("ACC903", 9, False)]
    assert all(c.message.endswith("nothing converted") for c in outcome.changes)


def test_a_distributed_sampler_is_reported_and_the_rest_converted() -> None:
    source = code(
        """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        def main():
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(data, sampler=DistributedSampler(data))
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """
    )
    outcome = convert_module(cst.parse_module(source), Options())
    reported = [(c.code, c.line, c.message) for c in outcome.changes if not c.fixed]
    assert reported == [
        ("ACC903", 7, "DistributedSampler already distributes this script: left as it is, the rest converted")
    ]
    assert "accelerator.backward(loss)" in outcome.module.code
    assert "DistributedSampler(data)" in outcome.module.code


RANDOM_MODULE = """\
import numpy as np
{before}
target = {draw}
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if __name__ == "__main__":
    extra = torch.rand(3)
    for step in range(10):
        x = torch.randn(8, 4)
        optimizer.zero_grad()
        ((model(x) - x @ target) ** 2).mean().backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    ("before", "draw", "agreed"),
    [
        ("", "torch.randn(4, 1) * 5", [9, 13]),
        ("", "torch.from_numpy(np.random.randn(4, 1)).float()", [9, 13]),
        ("torch.manual_seed(0)", "torch.randn(4, 1)", []),
        # NumPy's seed leaves torch's generator as it was.
        ("np.random.seed(0)", "torch.randn(4, 1)", [9, 13]),
        ("g = torch.Generator().manual_seed(1)", "torch.randn(4, 1, generator=g)", [13]),
        ("set_seed(42)", "torch.randn(4, 1)", []),
        ("", "torch.ones(4, 1)", [13]),
    ],
)
def test_module_level_random_data_drawn_before_any_seed_is_agreed(before: str, draw: str, agreed: list[int]) -> None:
    """Every process draws its own ``target``: each would fit another function. Draws after a
    seed of their generator, or from a seeded generator of their own, are the same everywhere;
    the others run after the accelerator, created above them, has every process take rank 0's
    generators (ACC124), so none is left to report (ACC923). The fresh batches drawn in the loop
    (data per process, like a shard) are not among them."""
    source = HEADER + RANDOM_MODULE.format(before=before, draw=draw)
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert [change.line for change in outcome.changes if change.code == "ACC124"] == agreed
    assert [change for change in outcome.changes if change.code == "ACC923"] == []
    assert f"target = {draw}" in outcome.module.code, "left as it was"
    assert ("accelerator.agree_random_state()" in outcome.module.code) == bool(agreed)


ON_IMPORT = """
import torch
import torch.nn as nn
{imports}
target = torch.randn(4, 1)


def main():
    {create}model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x = torch.randn(8, 4)
        optimizer.zero_grad()
        ((model(x) - x @ target) ** 2).mean().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_a_module_level_draw_in_a_script_that_trains_in_main_is_agreed_on_import() -> None:
    """Drawn on import, before main() can create the accelerator: every process takes rank 0's
    generators right above it (ACC124), joining the process group there; nothing left to report."""
    source = ON_IMPORT.format(imports="", create="")
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert [(c.code, c.line) for c in outcome.changes if c.code in ("ACC923", "ACC124")] == [("ACC124", 5)]
    assert "\nPartialState().agree_random_state()\ntarget = torch.randn(4, 1)\n" in outcome.module.code


def test_a_script_with_its_own_accelerator_gets_its_module_level_draws_reported() -> None:
    """With the script's own accelerator nothing is agreed: the draw the locality owner says the
    processes share is reported (ACC923)."""
    source = ON_IMPORT.format(
        imports="from accelerate import Accelerator\n", create="accelerator = Accelerator()\n    "
    )
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert [(c.code, c.line) for c in outcome.changes if c.code in ("ACC923", "ACC124")] == [("ACC923", 6)]
    assert "agree_random_state" not in outcome.module.code


NEXT_BATCH = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=8)
    batches = iter(loader)
    for step in range(20):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_batches_drawn_with_next_from_a_loader_are_sharded_data() -> None:
    # The loader is prepared, so ``next(iter(loader))`` yields this rank's shard: no ACC901.
    source = code(NEXT_BATCH)
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert "optimizer, loader = accelerator.prepare(" in outcome.module.code
    assert "ACC901" not in {change.code for change in outcome.changes}


TRAINING_COUNTS = {
    "predictions equal to targets": ("correct += (out.argmax(1) == y).sum().item()", True),
    "eq method": ("correct += out.argmax(1).eq(y).sum().item()", True),
    "torch.sum of a comparison": ("correct += torch.sum(out.argmax(1) == y)", True),
    # A count of samples alone says nothing about one process's predictions.
    "samples only": ("total += y.size(0)", False),
}


@pytest.mark.parametrize(("shown", "reported"), [("print(total)", True), ("", False)], ids=["printed", "unused"])
def test_a_printed_sample_count_of_the_training_loop_is_reported(shown: str, reported: bool) -> None:
    """``total += y.size(0)`` printed after the loop (a throughput, the samples of the epoch)
    counts this process's shard only; a count nobody prints or logs is no report."""
    body = in_loop(
        "x, y = batch\nout = model(x)\nloss = nn.functional.cross_entropy(out, y)\nloss.backward()\n"
        "optimizer.step()\ntotal += y.size(0)",
        prelude="",
    ).replace("def main():", "def main(total=0):")
    outcome = convert_module(cst.parse_module(HEADER + body + textwrap.indent(shown, "    ") + "\n"), Options())
    found = [change for change in outcome.changes if change.code == "ACC919"]
    assert len(found) == int(reported)
    if reported:
        assert found[0].message.startswith("samples counted over this process's batches only")


@pytest.mark.parametrize(("count", "reported"), TRAINING_COUNTS.values(), ids=TRAINING_COUNTS.keys())
def test_a_training_accuracy_counted_per_process_is_reported(count: str, reported: bool) -> None:
    """No loss is summed: the report is the accuracy's alone (ACC919, with its own message)."""
    body = in_loop(
        "x, y = batch\nout = model(x)\nloss = nn.functional.cross_entropy(out, y)\nloss.backward()\n"
        f"optimizer.step()\n{count}",
        prelude="",
    ).replace("def main():", "def main(correct=0, total=0):")
    outcome = convert_module(cst.parse_module(HEADER + body), Options())
    found = [change for change in outcome.changes if change.code == "ACC919"]
    assert len(found) == int(reported)
    if reported:
        assert found[0].message.startswith("training predictions counted over this process's batches only")
        assert not found[0].fixed
        assert count in outcome.module.code, "left as it was"


def test_a_validation_nested_in_the_training_loop_is_not_a_training_count() -> None:
    """Validation every few steps, inside the loop over the training batches: its counts are
    gathered (metrics rule), so they are not this process's training accuracy."""
    source = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        train_loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
        val_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step, (x, y) in enumerate(train_loader):
            model.train()
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 4 == 0:
                model.eval()
                correct = 0
                with torch.no_grad():
                    for vx, vy in val_loader:
                        correct += (model(vx).argmax(1) == vy).sum().item()
                print(step, correct)
        """
    )
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert "accelerator.gather_for_metrics" in outcome.module.code
    assert "ACC919" not in {change.code for change in outcome.changes}


UPDATE_BN = """\
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader


def main():
    loader = DataLoader(list(range(8)), batch_size=4)
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    swa_model = AveragedModel(model)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    swa_model.update_parameters(model)
    update_bn({source}, swa_model)
"""


@pytest.mark.parametrize(("source", "reported"), [("loader", True), ("[torch.randn(4, 2)]", False)])
def test_update_bn_over_a_prepared_loader_is_reported(source: str, reported: bool) -> None:
    script = UPDATE_BN.format(source=source)
    outcome = convert_module(cst.parse_module(script), Options(), script)
    found = [change.line for change in outcome.changes if change.code == "ACC929"]
    assert found == ([script.splitlines().index(f"    update_bn({source}, swa_model)") + 1] if reported else [])


UPDATE_BN_DICT = """\
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader

dataloaders = {{x: DataLoader(list(range(8)), batch_size=4) for x in ["train", "val"]}}


def train_model(model, optimizer):
    swa_model = AveragedModel(model)
    for x, y in dataloaders["train"]:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    swa_model.update_parameters(model)
    update_bn({source}, swa_model)


model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_model(model, optimizer)
"""


@pytest.mark.parametrize(("source", "reported"), [('dataloaders["train"]', True), ("[torch.randn(4, 2)]", False)])
def test_update_bn_over_a_loader_of_a_prepared_dict_is_reported(source: str, reported: bool) -> None:
    """The re-ID baseline's ``update_bn(dataloaders['train'], swa_model)``: the dict's loaders are
    prepared (the loader-dict rule), so the pass sees one process's shard (before: not reported)."""
    script = UPDATE_BN_DICT.format(source=source)
    outcome = convert_module(cst.parse_module(script), Options(), script)
    assert "accelerator.prepare(loader) for key, loader in dataloaders.items()" in outcome.module.code
    found = [change.line for change in outcome.changes if change.code == "ACC929"]
    assert found == ([script.splitlines().index(f"    update_bn({source}, swa_model)") + 1] if reported else [])


def test_with_the_agreement_switched_off_the_break_is_reported() -> None:
    """``--ignore ACC123``: the comparison's break stays as written and is reported (ACC902)."""
    body = in_loop("loss = model(batch[0]).sum()\nloss.backward()\nif loss.item() < 1e-3:\n    break")
    source = HEADER + textwrap.dedent(body)
    outcome = convert_module(cst.parse_module(source), Options(ignore=("ACC123",)), source)
    assert "check_trigger" not in outcome.module.code
    assert [change.code for change in outcome.changes if change.code in ("ACC123", "ACC902")] == ["ACC902"]


WHILE_TRUE = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def main():
    loader = DataLoader(list(range(8)), batch_size=4)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    while {test}:
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        if loss.item() < 1e-3:
            break
"""


@pytest.mark.parametrize(("test", "code"), [("True", "ACC123"), ("not done", "ACC902")])
def test_a_break_leaving_a_while_loop_is_made_to_agree_in_while_true(test: str, code: str) -> None:
    """The break leaves the ``while`` (which holds the backward), not a ``for``: ``while True``
    runs alike on every rank, so the comparison is made to agree; under another ``while`` test
    no collective can go there, so it is reported."""
    source = WHILE_TRUE.format(test=test)
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert [change.code for change in outcome.changes if change.code in ("ACC123", "ACC902")] == [code]
    assert ("accelerator.check_trigger()" in outcome.module.code) == (code == "ACC123")
