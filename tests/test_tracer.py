"""The verify tracer (``accel_convert.runtime.tracer``): real runs of small scripts, injected
through the ``sitecustomize`` it writes, asserting on the records each rank leaves.

Launches are shared: each fixture runs once and several tests read its records.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.launching import python, torchrun

#: Seeds nothing itself: equal losses in two runs come from the tracer's seeding alone.
UNSEEDED = """
import os
import random
import signal
import numpy
import torch
from torch import nn

os.kill(os.getpid(), signal.SIGUSR1)  # what verify sends before it kills a hung run
print("user sitecustomize:", os.environ.get("USER_SITECUSTOMIZE_RAN"))
print("draws", random.randint(0, 10**6), numpy.random.randint(10**6))
numpy.save("array", numpy.zeros(3))
numpy.load("array.npy")
handle = open("log.txt", "w")
handle.write("dropped")
del handle  # never closed: reference counting closes it at once, as without the tracer
open("log.txt").read()
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(1000, 4), torch.randn(1000, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
for inputs, targets in loader:
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print("done", end="")


def finish():
    raise ValueError("the end")


finish()
"""

#: Two ranks on the runtime: a prepared model and an unprepared one, a file written by rank 0
#: that rank 1 reads too early, and an evaluation loop whose predictions are gathered.
TWO_RANKS = """
import torch
from torch import nn
from accel_convert.runtime import Accelerator

accelerator = Accelerator()
rank = accelerator.process_index
prepared, alone = nn.Linear(4, 2), nn.Linear(4, 2)
optimizer = torch.optim.SGD(prepared.parameters(), lr=0.1)
alone_optimizer = torch.optim.SGD(alone.parameters(), lr=0.1)
train = torch.utils.data.TensorDataset(torch.randn(1000, 4), torch.randint(0, 2, (1000,)))
evaluation = torch.utils.data.TensorDataset(torch.randn(11, 4), torch.randint(0, 2, (11,)))
train_loader = torch.utils.data.DataLoader(train, batch_size=4)
eval_loader = torch.utils.data.DataLoader(evaluation, batch_size=3)
prepared, optimizer, train_loader, eval_loader = accelerator.prepare(prepared, optimizer, train_loader, eval_loader)
for inputs, labels in train_loader:
    accelerator.backward(nn.functional.cross_entropy(prepared(inputs), labels))
    optimizer.step()
    optimizer.zero_grad()
    nn.functional.cross_entropy(alone(inputs), labels).backward()
    alone_optimizer.step()
    alone_optimizer.zero_grad()
prepared.eval()
with torch.no_grad():
    for inputs, labels in eval_loader:
        predictions = accelerator.gather_for_metrics(prepared(inputs).argmax(-1))
print(f"rank {rank} finished")
if rank == 1:
    try:
        open("shared.txt").read()
    except FileNotFoundError:
        pass
accelerator.wait_for_everyone()
if rank == 0:
    with open("shared.txt", "w") as handle:
        handle.write("from rank 0")
accelerator.wait_for_everyone()
if rank == 1:
    open("shared.txt").read()
"""

#: A script written for GPUs, run on a machine without one.
GPU_SCRIPT = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from accel_convert.runtime import Accelerator

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
first = nn.Linear(2, 2).to(0)
torch.cuda.set_device(local_rank)
second = nn.Linear(2, 2).cuda()
ddp = DistributedDataParallel(second, device_ids=[local_rank])
ddp(torch.ones(1, 2, device="cuda")).sum().backward()
print("cuda", torch.cuda.is_available(), torch.cuda.device_count())
accelerator = Accelerator()
print("device", accelerator.device, accelerator.state.backend)
model = accelerator.prepare(nn.Linear(2, 2))
accelerator.backward(model(torch.ones(3, 2).to(accelerator.device)).sum())
scaler = torch.amp.GradScaler("cuda")
scaler.scale(torch.tensor(2.5, requires_grad=True) * 1).backward()
Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor
print("legacy", Tensor(2, 3).fill_(1.0).sum().item(), torch.zeros(2).type(torch.cuda.LongTensor).dtype)
"""

#: A GAN tutorial's legacy tensor type, with no ``torch.cuda.set_device`` of its own: the runtime's
#: ``Accelerator()`` selects the rank's GPU, on which a legacy constructor then allocates.
LEGACY_TYPES_SCRIPT = """
import torch
from accel_convert.runtime import Accelerator
Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor
before = Tensor(1)
accelerator = Accelerator()
after = Tensor(2, 3).fill_(1.0)
longs = torch.zeros(2).type(torch.cuda.LongTensor)
print("legacy", after.sum().item(), longs.dtype, isinstance(after, torch.cuda.FloatTensor))
"""

USER_SITECUSTOMIZE = """
import os
os.environ["USER_SITECUSTOMIZE_RAN"] = "yes"
"""


def records(folder: Path, rank: int) -> list[dict[str, Any]]:
    with open(folder / f"rank-{rank}.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def of_kind(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record for record in found if record["kind"] == kind]


def traced(tmp: Path, name: str, source: str, variables: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    """The script, its trace folder and the environment that injects the tracer into its run."""
    injection = tmp / "injection"
    if not injection.exists():
        python("-m", "accel_convert.runtime.tracer", "inject", str(injection), timeout=120).check()
    user_site = tmp / "user_site"
    user_site.mkdir(exist_ok=True)
    (user_site / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    work = tmp / name
    work.mkdir()
    script = work / "script.py"
    script.write_text(textwrap.dedent(source))
    repo = Path(__file__).resolve().parent.parent
    env = {
        "PYTHONPATH": os.pathsep.join([str(injection), str(repo), str(user_site)]),
        "ACCEL_CONVERT_TRACE_DIR": str(work / "trace"),
        "ACCEL_CONVERT_QUIET": "1",
        **variables,
    }
    return script, work / "trace", env


@dataclass
class SeededRuns:
    """Two runs of the unseeded script with the same seed: their records, and the stacks the first wrote."""

    runs: list[list[dict[str, Any]]]
    stacks: str


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> SeededRuns:
    tmp = tmp_path_factory.mktemp("seeded")
    runs = []
    for name in ("first", "second"):
        script, trace, env = traced(tmp, name, UNSEEDED, {"ACCEL_CONVERT_TRACE_SEED": "7"})
        env["ACCEL_CONVERT_TRACE_SAMPLES"] = "40"
        run = python(str(script), env=env, cwd=script.parent, timeout=300)
        assert run.returncode == 1 and "ValueError: the end" in run.stderr, run.stderr
        runs.append(records(trace, 0))
        if name == "first":
            stacks = (trace / "rank-0.stacks").read_text()
    return SeededRuns(runs, stacks)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("ranks")
    script, trace, env = traced(tmp, "run", TWO_RANKS, {"ACCEL_CONVERT_TRACE_SEED": "3"})
    env["ACCEL_CONVERT_TRACE_SAMPLES"] = "24"
    torchrun(script, nproc=2, env=env, cwd=script.parent, timeout=400).check()
    return [records(trace, 0), records(trace, 1)]


@pytest.fixture(scope="module")
def gpu_script(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[dict[str, Any]]], str]:
    tmp = tmp_path_factory.mktemp("gpu")
    script, trace, env = traced(tmp, "run", GPU_SCRIPT, {"ACCEL_CONVERT_TRACE_FAKE_CUDA": "1"})
    run = torchrun(script, nproc=2, env=env, cwd=script.parent, timeout=400).check()
    return [records(trace, 0), records(trace, 1)], run.stdout


def test_two_seeded_runs_of_an_unseeded_script_give_the_same_losses(seeded: SeededRuns) -> None:
    first, second = ([record["value"] for record in of_kind(run, "loss")] for run in seeded.runs)
    assert len(first) == 5  # 40 samples in batches of 8: the budget cut the 1000
    assert first == second
    assert [record["index"] for record in of_kind(seeded.runs[0], "step")] == [0, 1, 2, 3, 4]
    digests = [[record["digest"] for record in of_kind(run, "step")] for run in seeded.runs]
    assert digests[0] == digests[1] and len(set(digests[0])) == 5


def test_a_pass_counts_the_samples_within_the_budget(seeded: SeededRuns) -> None:
    (only,) = of_kind(seeded.runs[0], "pass")
    assert only["samples"] == 40 and only["complete"] and only["grad"]
    assert only["loader"] == "script.py:21" and only["gathered"] is None


def test_the_users_sitecustomize_still_runs_and_prints_are_recorded(seeded: SeededRuns) -> None:
    texts = [[record["text"] for record in of_kind(run, "print")] for run in seeded.runs]
    assert texts[0][0] == "user sitecustomize: yes"
    assert texts[0][1].startswith("draws ") and texts[0][2] == "done"  # a partial last line, flushed at exit
    assert texts[0] == texts[1]  # random and NumPy seeded as torch is


def test_sigusr1_writes_every_threads_stack(seeded: SeededRuns) -> None:
    assert 'script.py", line 9 in <module>' in seeded.stacks


def test_file_writes_and_reads_are_recorded(seeded: SeededRuns) -> None:
    records = [record for record in seeded.runs[0] if record["kind"] in ("write", "read")]
    facts = [(record["kind"], record["path"], record["via"], record["size"]) for record in records]
    assert facts == [
        ("write", "array.npy", "numpy.save", 128 + 3 * 8),
        ("read", "array.npy", "numpy.load", 128 + 3 * 8),
        ("write", "log.txt", "open", len("dropped")),
        ("read", "log.txt", "open", len("dropped")),
    ]
    assert records[0]["sha256"] == records[1]["sha256"] and records[2]["sha256"] == records[3]["sha256"]


def test_step_digests_agree_across_ranks_only_for_the_prepared_model(two_ranks: list[list[dict[str, Any]]]) -> None:
    steps = [of_kind(rank, "step") for rank in two_ranks]
    assert len(steps[0]) == len(steps[1]) == 6  # 24 samples, 4 per batch, 2 ranks: 3 batches, 2 optimizers
    prepared = [[record["digest"] for record in rank[0::2]] for rank in steps]
    alone = [[record["digest"] for record in rank[1::2]] for rank in steps]
    assert prepared[0] == prepared[1]
    assert all(one != other for one, other in zip(*alone, strict=True))


def test_each_backward_is_one_loss_record(two_ranks: list[list[dict[str, Any]]]) -> None:
    for rank in two_ranks:
        losses = of_kind(rank, "loss")
        assert [record["index"] for record in losses] == list(range(6))
        assert all(isinstance(record["value"], float) for record in losses)


def test_prints_are_recorded_per_rank(two_ranks: list[list[dict[str, Any]]]) -> None:
    for index, rank in enumerate(two_ranks):
        assert [record["text"] for record in of_kind(rank, "print")] == [f"rank {index} finished"]


def test_a_read_before_the_file_exists_is_recorded(two_ranks: list[list[dict[str, Any]]]) -> None:
    (write,) = of_kind(two_ranks[0], "write")
    assert write["path"] == "shared.txt" and write["size"] == len("from rank 0") and write["via"] == "open"
    early, late = of_kind(two_ranks[1], "read")
    assert early["path"] == "shared.txt" and early["exists"] is False and early["sha256"] is None
    assert late["exists"] is True and late["sha256"] == write["sha256"]
    assert of_kind(two_ranks[1], "write") == [] and of_kind(two_ranks[0], "read") == []


def test_evaluation_passes_count_each_shard_and_the_gathered_total(two_ranks: list[list[dict[str, Any]]]) -> None:
    evaluations = [[record for record in of_kind(rank, "pass") if not record["grad"]] for rank in two_ranks]
    assert [len(passes) for passes in evaluations] == [1, 1]
    shards = [passes[0] for passes in evaluations]
    assert all(shard["gathered"] == 11 and shard["gather_inputs"] == ["Tensor"] for shard in shards)
    assert all(shard["loader"] == "script.py:14" and shard["complete"] for shard in shards)
    assert sum(shard["samples"] for shard in shards) >= 11
    training = [[record for record in of_kind(rank, "pass") if record["grad"]] for rank in two_ranks]
    assert [[(one["samples"], one["loader"]) for one in passes] for passes in training] == [[(12, "script.py:13")]] * 2


def test_fake_cuda_records_the_device_each_rank_asked_for(gpu_script: tuple[list[list[dict[str, Any]]], str]) -> None:
    ranks, _ = gpu_script
    requests = {(record["what"], record["requested"], record["site"]) for record in of_kind(ranks[1], "device")}
    assert ("module", "cuda:0", "script.py:11") in requests  # .to(0) on every rank
    assert ("module", "cuda:1", "script.py:13") in requests  # .cuda() after set_device(local_rank)
    assert ("tensor", "cuda:1", "script.py:15") in requests  # device="cuda" in a factory
    assert all(record["requested"] != "cuda:1" for record in of_kind(ranks[0], "device"))


def test_legacy_cuda_tensor_types_land_on_the_gpu_the_accelerator_selects(tmp_path: Path) -> None:
    """``Tensor = torch.cuda.FloatTensor``: ``Tensor(...)`` allocates on the current GPU, GPU 0 on
    every rank before the accelerator exists and the rank's own once ``Accelerator()`` ran
    ``torch.cuda.set_device`` (runtime/state.py ``pick_device``); the trace records both."""
    script, trace, env = traced(tmp_path, "legacy", LEGACY_TYPES_SCRIPT, {"ACCEL_CONVERT_TRACE_FAKE_CUDA": "1"})
    run = torchrun(script, nproc=2, env=env, cwd=script.parent, timeout=400).check()
    # Both ranks write to one pipe, so their characters may interleave: each rank's own line is
    # read from its trace, and the terminal is checked to hold the characters of both.
    assert Counter(run.stdout) == Counter("legacy 6.0 torch.int64 True\n" * 2), run.stdout
    for rank in (0, 1):
        assert [record["text"] for record in of_kind(records(trace, rank), "print")] == ["legacy 6.0 torch.int64 True"]
        requests = {(record["requested"], record["site"]) for record in of_kind(records(trace, rank), "device")}
        assert requests == {("cuda:0", "script.py:5"), (f"cuda:{rank}", "script.py:7"), (f"cuda:{rank}", "script.py:8")}


def test_fake_cuda_runs_a_gpu_script_and_the_runtime_reports_the_gpu(
    gpu_script: tuple[list[list[dict[str, Any]]], str],
) -> None:
    ranks, stdout = gpu_script
    for index, rank in enumerate(ranks):
        texts = [record["text"] for record in of_kind(rank, "print")]
        # ``torch.cuda.FloatTensor`` and ``.type(torch.cuda.LongTensor)`` answered on the CPU
        assert texts == ["cuda True 2", f"device cuda:{index} gloo", "legacy 6.0 torch.int64"]
        losses = [record["value"] for record in of_kind(rank, "loss")]
        assert len(losses) == 3 and losses[2] == 2.5  # scaler.scale(loss).backward() records the loss
        assert of_kind(rank, "exit")[0]["code"] == 0
    # What the ranks print still reaches the terminal: both ranks write at once, so their lines may
    # interleave character by character; the characters themselves are all there.
    printed = "".join(f"cuda True 2\ndevice cuda:{index} gloo\nlegacy 6.0 torch.int64\n" for index in range(len(ranks)))
    assert Counter(stdout) == Counter(printed), stdout


# ------------------------------------------------------------------ in-process: the small pieces
def test_cuda_requests_name_the_index_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from accel_convert.runtime import tracer

    monkeypatch.setattr(tracer.FakeCuda, "current", 1)
    asked = [0, "cuda", "cuda:3", torch.device("cuda", 2), torch.device("cuda"), "cpu", True, torch.float16]
    assert [tracer.requested_cuda(device) for device in asked] == [
        "cuda:0",
        "cuda:1",  # a bare "cuda" is the current device
        "cuda:3",
        "cuda:2",
        "cuda:1",
        None,
        None,  # a bool is not a device index
        None,
    ]


def test_a_batch_counts_the_first_dim_of_its_first_tensor() -> None:
    import torch

    from accel_convert.runtime.tracer import first_dim

    assert first_dim(torch.zeros(5, 3)) == 5
    assert first_dim((torch.zeros(4, 2), torch.zeros(4))) == 4
    assert first_dim({"input_ids": torch.zeros(6, 9), "labels": torch.zeros(6)}) == 6
    assert first_dim(["a", "b", "c"]) == 3
    assert first_dim(torch.tensor(2.0)) == 1


def test_the_budget_keeps_the_first_samples_and_the_datasets_attributes() -> None:
    import torch

    from accel_convert.runtime.tracer import budget_arguments

    class Numbers(torch.utils.data.Dataset):
        classes = ["even", "odd"]

        def __len__(self) -> int:
            return 1000

        def __getitem__(self, index: int) -> int:
            return index

    (cut,), _ = budget_arguments((Numbers(),), {}, 10)
    assert len(cut) == 10 and list(cut) == list(range(10)) and cut.classes == ["even", "odd"]
    sampler = torch.utils.data.SequentialSampler(range(1000))
    args, kwargs = budget_arguments((Numbers(),), {"sampler": sampler}, 10)
    assert len(args[0]) == 1000 and list(kwargs["sampler"]) == list(range(10))


@pytest.mark.parametrize("kind", ["subset", "weighted"])
def test_a_cut_sampler_yields_as_many_indices_as_its_length_says(kind: str) -> None:
    """The runtime shards and pads a prepared loader by its sampler's ``len``: a budget that kept
    the indices below M of 200 scattered over 1000 (or of draws with replacement) yielded about
    a fifth of them while its ``len`` said 200 (subset_sampler_split's false alarm)."""
    import torch

    from accel_convert.runtime.tracer import budget_arguments

    data = torch.utils.data.TensorDataset(torch.arange(1000))
    scattered = torch.randperm(1000, generator=torch.Generator().manual_seed(3))[:200].tolist()
    sampler = (
        torch.utils.data.SubsetRandomSampler(scattered)
        if kind == "subset"
        else torch.utils.data.WeightedRandomSampler([1.0] * 1000, num_samples=1000)
    )
    _, kwargs = budget_arguments((data,), {"sampler": sampler}, 256)
    cut = kwargs["sampler"]
    for _ in range(3):
        assert len(list(cut)) == len(cut) == min(len(sampler), 256)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("limit", [5, 24, 25, 256])
def test_a_cut_batch_sampler_yields_the_batches_a_cut_sampler_would(limit: int, drop_last: bool) -> None:
    """A loader given its own batch sampler takes the batches the same loader given the plain
    sampler would under the budget: the first M indices drawn, in the same batches. Keeping the
    indices below M of every batch kept scattered fragments of most batches while its ``len``
    said as many batches as the budget has samples."""
    import torch

    from accel_convert.runtime.tracer import budget_arguments

    data = torch.utils.data.TensorDataset(torch.arange(100))
    scattered = torch.randperm(100, generator=torch.Generator().manual_seed(3)).tolist()
    batches = torch.utils.data.BatchSampler(scattered, batch_size=8, drop_last=drop_last)
    _, kwargs = budget_arguments((data,), {"batch_sampler": batches}, limit)
    _, plain = budget_arguments((data,), {"sampler": scattered}, limit)
    expected = list(torch.utils.data.BatchSampler(plain["sampler"], batch_size=8, drop_last=drop_last))
    cut = kwargs["batch_sampler"]
    for _ in range(2):
        assert list(cut) == expected and len(cut) == len(expected)


def test_a_cut_batch_sampler_of_uneven_batches_yields_as_many_as_its_length_says() -> None:
    """Batches of several sizes (a bucketing sampler with no ``batch_size``) stay whole, as many
    as the budget fills at their mean size, and ``len`` counts them."""
    import torch

    from accel_convert.runtime.tracer import budget_arguments

    class Buckets(torch.utils.data.Sampler):
        sampler = range(100)

        def __iter__(self) -> Iterator[list[int]]:
            return iter([list(range(start, start + 4 + start % 3)) for start in range(0, 100, 5)])

        def __len__(self) -> int:
            return 20

    data = torch.utils.data.TensorDataset(torch.arange(100))
    _, kwargs = budget_arguments((data,), {"batch_sampler": Buckets()}, 24)
    cut = kwargs["batch_sampler"]
    assert len(list(cut)) == len(cut) == 5  # 24 samples at 5 a batch
    assert list(cut)[0] == list(range(4))


def test_the_budget_keeps_a_distributed_samplers_shards_even() -> None:
    import torch

    from accel_convert.runtime.tracer import budget_arguments

    data = torch.utils.data.TensorDataset(torch.arange(1000))
    shards = []
    for rank in (0, 1):
        sampler: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            data, num_replicas=2, rank=rank, shuffle=True, seed=5
        )
        args, kwargs = budget_arguments((data,), {"sampler": sampler}, 25)
        assert kwargs["sampler"] is sampler and len(args[0]) == 25
        shards.append(list(sampler))
    assert [len(shard) for shard in shards] == [13, 13]  # 25 padded to 26, as DistributedSampler pads
    assert set(shards[0]) | set(shards[1]) == set(range(25))


@pytest.mark.parametrize(
    ("argv", "launcher"),
    [
        (["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"], True),
        (["python", "/usr/bin/torchrun", "--standalone", "train.py"], True),
        (["python", "-u", "train.py", "--epochs", "1"], False),  # a rank torchrun started
        (["python", "train.py", "torchrun"], False),
    ],
)
def test_only_the_ranks_are_traced_not_their_launcher(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], launcher: bool
) -> None:
    import sys

    from accel_convert.runtime import tracer

    monkeypatch.setattr(sys, "orig_argv", argv)
    assert tracer._is_launcher() is launcher


def test_a_loss_the_accelerator_divides_for_accumulation_is_recorded_divided(monkeypatch: pytest.MonkeyPatch) -> None:
    """``accelerator.backward(loss)`` under ``gradient_accumulation_steps=2`` takes the loss the
    original wrote as ``(loss / 2).backward()``: both runs must record the same value."""
    import torch

    from accel_convert.runtime import tracer

    recorded: list[dict[str, Any]] = []
    monkeypatch.setattr(tracer, "_record", lambda kind, **fields: recorded.append({"kind": kind, **fields}))

    class Accumulating:
        gradient_accumulation_steps = 2

        def backward(self, loss: Any) -> None:
            (loss / self.gradient_accumulation_steps).backward()

    traced = tracer._traced_method_backward(Accumulating.backward)
    weight = torch.tensor(3.0, requires_grad=True)
    traced(Accumulating(), weight * 2)
    assert [record["value"] for record in recorded if record["kind"] == "loss"] == [3.0]
    assert weight.grad is not None and float(weight.grad) == 1.0


def test_a_batch_without_a_tensor_of_its_own_counts_its_samples() -> None:
    """A detection ``collate_fn`` (``tuple(zip(*batch))``) gives tuples of per-sample images and
    target dicts: 3 images of 3 channels are 3 samples, not 3 channels; a gathered list of
    per-image dicts is as many samples as dicts."""
    import torch

    from accel_convert.runtime.tracer import first_dim

    images = tuple(torch.zeros(3, 8, 8) for _ in range(5))
    targets = tuple({"boxes": torch.zeros(1, 4), "labels": torch.zeros(1)} for _ in range(5))
    assert first_dim((images, targets)) == 5
    assert first_dim(list(targets)) == 5
    assert first_dim(((torch.zeros(4, 2), torch.zeros(4, 3)), torch.zeros(4))) == 4  # two inputs and labels


def test_predictions_and_labels_gathered_apart_count_each_batch_once() -> None:
    """Two gathers per batch (predictions at one line, labels at the next) are the same samples;
    a loss gathered per batch at a third is not what the pass counts."""
    from accel_convert.runtime.tracer import Pass

    current = Pass("eval.py:3", per_item=False)
    for gathered in (64, 64, 8):
        current.gather(gathered, "eval.py:7")  # predictions
        current.gather(gathered, "eval.py:8")  # labels
        current.gather(2, "eval.py:9")  # a loss per process
    assert current.gathered == 136


PREFETCHING_LOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from accel_convert.runtime.tracer import note_gather


class Prefetching:
    \"\"\"As Accelerate's DataLoaderShard: iterates its base loader one batch ahead.\"\"\"

    def __init__(self, loader):
        self.base_dataloader = loader

    def __iter__(self):
        batches = iter(self.base_dataloader)
        current = next(batches)
        for following in batches:
            yield current
            current = following
        yield current


with torch.no_grad():
    for (x,) in Prefetching(DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=4)):
        note_gather(x, x)
print("done")
"""


def test_a_loader_read_one_batch_ahead_counts_what_is_gathered_from_its_last_batch(tmp_path: Path) -> None:
    """Accelerate's loaders fetch the next batch before they yield one: the base loader's
    StopIteration comes before the script gathers the last batch (already_converted's evaluation
    counted 192 of 200)."""
    script, trace, env = traced(tmp_path, "run", PREFETCHING_LOADER, {})
    python(str(script), env=env, cwd=script.parent, timeout=300).check()
    (evaluation,) = of_kind(records(trace, 0), "pass")
    assert (evaluation["samples"], evaluation["gathered"], evaluation["complete"]) == (10, 10, True)


FAKE_GPU_TIMING = """
import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(4, 2).cuda())
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
out = model(torch.zeros(3, 4).cuda())
end.record()
torch.cuda.synchronize()
print("shape", tuple(out.shape), "timed", start.elapsed_time(end) >= 0, "replicas", model.device_ids)
"""


def test_fake_cuda_answers_timing_events_and_data_parallel(tmp_path: Path) -> None:
    """The cuda_timing_memory and dataparallel fixtures could not run under verify: a CPU build
    has no ``torch.cuda.Event``, and DataParallel's GPU path wants the parameters on cuda:0."""
    script, trace, env = traced(tmp_path, "run", FAKE_GPU_TIMING, {"ACCEL_CONVERT_TRACE_FAKE_CUDA": "1"})
    python(str(script), env=env, cwd=script.parent, timeout=300).check()
    assert [record["text"] for record in of_kind(records(trace, 0), "print")] == ["shape (3, 2) timed True replicas []"]


def test_a_pass_says_whether_it_trained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradients on when the batch is fetched but ``torch.no_grad()`` entered inside the loop: an
    evaluation all the same, since no backward and no optimizer step ran during it."""
    from accel_convert.runtime import tracer

    monkeypatch.setattr(tracer, "_writer", tracer.RecordWriter(str(tmp_path / "rank-0.jsonl"), 0))
    training = tracer.Pass("train.py:5", per_item=False)
    evaluation = tracer.Pass("train.py:9", per_item=False)  # inside the training pass
    evaluation.grad = True
    evaluation.end(True)
    tracer.TrainingWork.done += 1  # a backward
    training.end(True)
    passes = of_kind(records(tmp_path, 0), "pass")
    assert [(record["loader"], record["trained"]) for record in passes] == [("train.py:9", False), ("train.py:5", True)]


def test_the_budget_keeps_a_sized_iterable_datasets_length() -> None:
    """The runtime reads a sized stream's length to drop the padding of its last batches: hidden
    by the budget, 256 samples were gathered for 200 (streaming_eval_sized)."""
    import torch

    from accel_convert.runtime.tracer import budget_dataset

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[int]:
            return iter(range(200))

    class SizedStream(Stream):
        def __len__(self) -> int:
            return 200

    assert len(budget_dataset(SizedStream(), 256)) == 200
    assert len(budget_dataset(SizedStream(), 64)) == 64 and list(budget_dataset(SizedStream(), 64)) == list(range(64))
    with pytest.raises(TypeError):
        len(budget_dataset(Stream(), 256))
