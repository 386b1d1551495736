"""per-batch-files (ACC936): an evaluation that writes a file per batch, named by the batch index
or a per-batch counter, keeps its loader unprepared (every rank runs it whole, the main process
writes every file the original writes); over a loader a training loop iterates too, which stays
prepared, each process writes its own batches' files under the original's index (ACC126) where
the loop keeps nothing across batches (a counter of its own naming the files, read nowhere after
the loop, is followed too), and the write is reported otherwise. Files named otherwise, files opened for reading and loops over
loaders nothing prepares are not reported. Also: a write after the gathered forward keeps its own
position for every rule that runs after the gather."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import os
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 2)), batch_size=64)
test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
for x, y in train_loader:
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
model.eval()
n = 0
with torch.no_grad():
    for {target} in {loop}:
        out = model(x.to(device))
        n += 1
        {write}
print(f"{{n}} batches")
"""

WRITE_LINE = 24


def changes(target: str, loop: str, write: str) -> list[Change]:
    source = SCRIPT.format(target=target, loop=loop, write=write)
    return list(convert_source(source.encode(), Options(), path="evaluate.py").changes)


def converted(target: str, loop: str, write: str) -> str:
    source = SCRIPT.format(target=target, loop=loop, write=write)
    return convert_source(source.encode(), Options(), path="evaluate.py").output.decode()


WRITES = {
    "torch-save-f-string": 'torch.save(out.cpu(), f"preds/batch_{i}.pt")',
    "joined-path": 'np.save(os.path.join("preds", str(i) + ".npy"), out.cpu().numpy())',
    "open-for-writing": 'with open(f"preds_{i}.txt", "w") as f: f.write(str(out.tolist()))',
    "counter": 'np.save(f"preds_{n}.npy", out.cpu().numpy())',
}
PER_BATCH_WRITES = pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))


@PER_BATCH_WRITES
def test_an_evaluation_writing_a_file_per_batch_runs_unsharded_and_writes_on_the_main_process(write: str) -> None:
    assert not [change for change in changes("i, (x,)", "enumerate(test_loader)", write) if change.code == "ACC936"]
    text = converted("i, (x,)", "enumerate(test_loader)", write)
    assert "model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)" in text
    assert "gather" not in text  # every rank sees every batch: nothing to gather
    assert "out = model(x.to(device))" in text  # its batches are not moved by a prepared loader
    # The main process writes: accelerator.save does, other writes go under its guard.
    saved = write.replace("torch.save", "accelerator.save")
    assert f"        {saved}" in text if saved != write else f"is_main_process:\n            {write}" in text


@PER_BATCH_WRITES
def test_a_file_per_batch_of_a_loader_training_iterates_too_is_reported_at_the_write(write: str) -> None:
    # The loop counts its batches by hand too (``n += 1``) and the count is printed after it: each
    # process would print its own, so it cannot write its batches under the original's index
    # (ACC126); the write is reported.
    found = [change for change in changes("i, (x, _)", "enumerate(train_loader)", write) if change.code == "ACC936"]
    assert [(change.line, change.fixed) for change in found] == [(WRITE_LINE, False)]


@pytest.mark.parametrize(
    ("target", "loop", "write"),
    [
        ("i, (x,)", "enumerate(test_loader)", 'torch.save(out.cpu(), "preds/last.pt")'),
        ("i, (x,)", "enumerate(test_loader)", 'print(open(f"preds_{i}.txt").read())'),
        (
            "i, (x,)",
            "enumerate(DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4))",
            'torch.save(out, f"p{i}.pt")',
        ),
    ],
    ids=["fixed-name", "read-only", "unprepared-loader"],
)
def test_other_writes_are_not(target: str, loop: str, write: str) -> None:
    assert not [change for change in changes(target, loop, write) if change.code == "ACC936"]


def test_a_save_after_the_gathered_forward_is_reported_where_it_stands() -> None:
    # The gather rebuilds the statements after the forward; the checkpoint rule, which runs
    # later, reported their saves at 1:1 before the positions were carried over.
    found = changes("i, (x, _)", "enumerate(train_loader)", 'torch.save(out.cpu(), f"preds/batch_{i}.pt")')
    assert any(change.code == "ACC113" for change in found), "the evaluation is gathered"
    saves = [change for change in found if change.code == "ACC114"]
    assert [(change.line, change.column) for change in saves] == [(WRITE_LINE, 8)]


ENGINE = """\
import torch


def evaluate(model, loader, out_dir):
    model.eval()
    with torch.no_grad():
        for i, (x,) in enumerate(loader):
            torch.save(model(x), f"{out_dir}/batch_{i}.pt")
"""

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from engine import evaluate

model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 2)), batch_size=64)
test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
for x, y in train_loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
evaluate(model, test_loader, "preds")
"""


def convert_train_and_engine(train: str) -> dict[str, str]:
    modules = [
        ProgramModule(name, cst.parse_module(text), text) for name, text in (("train", train), ("engine", ENGINE))
    ]
    outcomes = convert_program(modules, "train", Options())
    reported = [change.line for change in outcomes["engine"].changes if change.code == "ACC936"]
    return {"train": outcomes["train"].module.code, "engine": outcomes["engine"].module.code, "ACC936": str(reported)}


def test_a_loader_handed_to_another_modules_per_batch_writer_stays_unprepared() -> None:
    # engine.evaluate writes a file per batch of the loader it is handed: the entry keeps the
    # loader it builds unprepared, and evaluate runs every batch, ungathered, writing every file.
    converted = convert_train_and_engine(TRAIN)
    assert "model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)" in converted["train"]
    assert "test_loader = accelerator.prepare" not in converted["train"]
    assert "gather_for_metrics" not in converted["engine"]
    assert converted["ACC936"] == "[]"


def test_a_training_loader_handed_to_a_per_batch_writer_stays_prepared_and_each_process_writes_its_batches() -> None:
    # A loader a training loop iterates stays prepared: the module looping over it has each
    # process write its own batches' files under the original's index (ACC126), gathering nothing.
    evaluated_on_training_data = TRAIN.replace("evaluate(model, test_loader,", "evaluate(model, train_loader,")
    converted = convert_train_and_engine(evaluated_on_training_data)
    assert "gather_for_metrics" not in converted["engine"]
    assert "i = i * accelerator.num_processes + accelerator.process_index" in converted["engine"]
    assert "join_uneven_inputs([model], even_batches=False)" in converted["engine"]
    assert 'evaluate(model, train_loader, "preds", accelerator)' in converted["train"]
    assert converted["ACC936"] == "[]"


OWN_BATCHES = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
for x, y in train_loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
model.eval()
total = 0.0
outputs = []
with torch.no_grad():
    for {target} in {loop}:
        out = model(x)
        {kept}
        torch.save(out, f"preds/batch_{{i}}.pt")
"""


def own_batches(
    loop: str, kept: str = "pass", target: str = "i, (x, _)", options: Options | None = None
) -> tuple[str, set[str]]:
    source = OWN_BATCHES.format(target=target, loop=loop, kept=kept)
    result = convert_source(source.encode(), options or Options(), path="evaluate.py")
    return result.output.decode(), {change.code for change in result.changes}


@pytest.mark.parametrize(
    ("loop", "rebound"),
    [
        ("enumerate(train_loader)", "i = i * accelerator.num_processes + accelerator.process_index"),
        ("enumerate(train_loader, 1)", "i = (i - 1) * accelerator.num_processes + accelerator.process_index + 1"),
        ("enumerate(train_loader, start=1)", "i = (i - 1) * accelerator.num_processes + accelerator.process_index + 1"),
        (
            "enumerate(train_loader, len(train_loader) + 1)",
            "i = (i - (len(train_loader) + 1)) * accelerator.num_processes + accelerator.process_index + "
            "(len(train_loader) + 1)",
        ),
    ],
    ids=["from-0", "from-1", "start-keyword", "start-expression"],
)
def test_each_process_writes_its_own_batches_of_a_training_loader_under_the_original_index(
    loop: str, rebound: str
) -> None:
    text, codes = own_batches(loop)
    assert "ACC126" in codes and "ACC936" not in codes
    assert "with accelerator.join_uneven_inputs([model], even_batches=False), accelerator.no_sync(model):" in text
    assert f"            {rebound}\n" in text
    assert '            torch.save(out, f"preds/batch_{i}.pt")' in text  # on every process, not accelerator.save
    assert "is_main_process" not in text and "gather" not in text
    assert text.rstrip().endswith("accelerator.wait_for_everyone()")
    again = convert_source(text.encode(), Options(), path="evaluate.py")
    assert again.output.decode() == text  # a converted script converted again is left as it is


@pytest.mark.parametrize(
    "kept",
    ["total += out.sum().item()", "outputs.append(out)", "n += 1"],
    ids=["sum", "list", "another-counter"],
)
def test_a_loop_keeping_something_across_batches_is_still_reported(kept: str) -> None:
    # A sum, a list bound before the loop, or a counter of its own: each process would keep its
    # share of them, so the loop is gathered (or reported) as before, and the write reported.
    text, codes = own_batches("enumerate(train_loader)", kept)
    assert "ACC936" in codes and "ACC126" not in codes
    assert "join_uneven_inputs" not in text


def test_each_process_prints_its_own_batches_lines() -> None:
    # Each line printed per batch is printed once: by the process that ran the batch.
    text, codes = own_batches("enumerate(train_loader)", 'print(f"saved batch {i}")')
    assert "ACC126" in codes
    assert '        print(f"saved batch {i}")' in text and "accelerator.print" not in text


def test_a_list_of_one_batch_keeps_nothing_across_batches() -> None:
    # StarGAN's ``x_fake_list = [x_real]`` then ``x_fake_list.append(G(x_real, c))`` per batch.
    text, codes = own_batches("enumerate(train_loader)", "parts = [x]; parts.append(out)")
    assert "ACC126" in codes and "ACC936" not in codes


@pytest.mark.parametrize("options", [Options(fsdp=True), Options(split_batches=True)], ids=["fsdp", "split-batches"])
def test_where_processes_get_no_whole_batches_the_write_is_reported(options: Options) -> None:
    # --split-batches gives each process part of every batch; FSDP's forwards need every process
    # alike: neither has a process run whole batches of its own.
    text, codes = own_batches("enumerate(train_loader)", options=options)
    assert "ACC936" in codes and "ACC126" not in codes
    assert "join_uneven_inputs" not in text


COUNTED = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
for x, y in train_loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
model.eval()
n = 0
with torch.no_grad():
    for {target} in {loop}:
        out = model(x)
{body}
{after}"""

SAVED = 'torch.save(out, f"preds/batch_{n}.pt")'


def counted(body: list[str], after: str = "", loop: str = "train_loader", target: str = "x, _") -> tuple[str, set[str]]:
    lines = "\n".join(" " * 8 + line for line in body)
    source = COUNTED.format(target=target, loop=loop, body=lines, after=after)
    result = convert_source(source.encode(), Options(), path="evaluate.py")
    return result.output.decode(), {change.code for change in result.changes}


STARTED = "        n += accelerator.process_index - (accelerator.num_processes - 1)\n"
STEPPED = "            n += accelerator.num_processes - 1\n"


@pytest.mark.parametrize(
    "body",
    [[SAVED, "n += 1"], ["n += 1", SAVED], ["n = n + 1", SAVED]],
    ids=["named-then-counted", "counted-then-named", "n-plus-one"],
)
def test_a_counter_of_the_loops_own_follows_the_original_on_each_process(body: list[str]) -> None:
    # Process p's k-th batch is the original's batch k * P + p: its counter starts at the
    # original's value there and steps over the other processes' batches before each of its own.
    text, codes = counted(body)
    assert "ACC126" in codes and "ACC936" not in codes
    assert "with accelerator.join_uneven_inputs([model], even_batches=False), accelerator.no_sync(model):" in text
    assert f"{STARTED}        for x, _ in train_loader:\n{STEPPED}" in text
    assert f"            {SAVED}\n" in text  # on every process
    assert "gather" not in text and "is_main_process" not in text
    again = convert_source(text.encode(), Options(), path="evaluate.py")
    assert again.output.decode() == text
    assert "ACC936" not in {change.code for change in again.changes}


def test_a_counter_beside_the_enumerate_index_follows_the_original_too() -> None:
    text, codes = counted(
        ['torch.save(out, f"preds/{i}_{n}.pt")', "n += 1"], loop="enumerate(train_loader)", target="i, (x, _)"
    )
    assert "ACC126" in codes and "ACC936" not in codes
    assert (
        f"{STARTED}        for i, (x, _) in enumerate(train_loader):\n"
        f"            i = i * accelerator.num_processes + accelerator.process_index\n{STEPPED}"
    ) in text
    assert convert_source(text.encode(), Options(), path="evaluate.py").output.decode() == text


@pytest.mark.parametrize(
    ("body", "after"),
    [
        ([SAVED, "n += 1"], 'print(f"{n} files")\n'),
        ([SAVED, "n = n + 1"], 'print(f"{n} files")\n'),
        ([SAVED, "n += 1"], "\n\ndef written():\n    return n\n"),
        ([SAVED, "if out.sum() > 0:", "    n += 1"], ""),
        (["if out.sum() > 1e9:", "    continue", SAVED, "n += 1"], ""),
        ([SAVED, "n += 1", "n += 1"], ""),
    ],
    ids=[
        "read-after-the-loop",
        "n-plus-one-read-after-the-loop",
        "read-by-a-function",
        "under-an-if",
        "after-a-continue",
        "grown-twice",
    ],
)
def test_a_counter_the_processes_cannot_share_out_is_still_reported(body: list[str], after: str) -> None:
    # Read after the loop (a total: each process would have its own), or grown on some batches
    # only: each process's count cannot be told from its batches, so the write is reported.
    text, codes = counted(body, after)
    assert "ACC936" in codes and "ACC126" not in codes
    assert "join_uneven_inputs" not in text


def test_a_global_counter_of_a_function_is_still_reported() -> None:
    # ``global n`` in the function: another function may read the count after the loop.
    source = COUNTED.format(target="x, _", loop="train_loader", body=f"        {SAVED}\n        n += 1", after="")
    head, loop = source.split("n = 0\n")
    indented = "".join(f"    {line}\n" for line in loop.splitlines())
    source = f"{head}\n\ndef evaluate():\n    global n\n    n = 0\n{indented}\n\nevaluate()\n"
    result = convert_source(source.encode(), Options(), path="evaluate.py")
    assert "ACC936" in {change.code for change in result.changes}
    assert "join_uneven_inputs" not in result.output.decode()


def test_a_counter_bound_outside_an_enclosing_loop_is_still_reported() -> None:
    # Bound once before the epochs: the second evaluation starts from what the first left.
    source = COUNTED.format(target="x, _", loop="train_loader", body=f"        {SAVED}\n        n += 1", after="")
    source = source.replace("with torch.no_grad():\n    for", "for epoch in range(2):\n    for")
    result = convert_source(source.encode(), Options(), path="evaluate.py")
    assert "ACC936" in {change.code for change in result.changes}
    assert "join_uneven_inputs" not in result.output.decode()


SOLVER = """\
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Solver:
    def __init__(self):
        self.model = nn.Linear(8, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)

    def train(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()

    def test(self):
        self.count = 0
        with torch.no_grad():
            for x, _ in self.loader:
                np.save(f"{{self.count}}-preds.npy", self.model(x).numpy())
                self.count += 1
{after}

solver = Solver()
solver.train()
solver.test()
"""


@pytest.mark.parametrize(
    ("after", "followed"),
    [("", True), ('        print("abca".count("a"))', True), ("        print(self.count)", False)],
    ids=["kept", "method-of-that-name", "read"],
)
def test_an_attribute_counting_the_batches_is_followed_unless_read_after_the_loop(after: str, followed: bool) -> None:
    result = convert_source(SOLVER.format(after=after).encode(), Options(), path="solver.py")
    text, codes = result.output.decode(), {change.code for change in result.changes}
    assert ("ACC126" in codes, "ACC936" in codes) == (followed, not followed)
    started = "self.count += self.accelerator.process_index - (self.accelerator.num_processes - 1)"
    assert (started in text) == followed
