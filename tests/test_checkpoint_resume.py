"""Resume on 2 ranks: "train k, save, train m" and "load, train m" see the same batches and end on
the same parameters, exactly (shuffled loader, dropout, AdamW, StepLR, a registered object).

Two launches of tests/scripts/checkpoint_resume.py (one per phase), shared by every test here,
and two more of the same script under Hugging Face Accelerate for the comparison docs/runtime.md makes
(the two pairs run side by side).
The "resume" launch also resumes from a checkpoint taken mid-epoch (``load_state`` +
``skip_first_batches``), on the same objects after its own run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from accel_convert.runtime.accelerator import Accelerator
from accel_convert.runtime.checkpoint import MANIFEST, CheckpointError
from tests.launching import torchrun
from tests.scripts.checkpoint_resume import MID_STEP

SCRIPT = Path(__file__).parent / "scripts" / "checkpoint_resume.py"


def _runtime_phases(work: Path) -> dict:
    checkpoint = work / "ckpt"
    for phase in ("full", "resume"):
        torchrun(SCRIPT, phase, str(checkpoint), str(work), timeout=150).check()
    reports = {
        (phase, rank): json.loads((work / f"runtime_{phase}_rank{rank}.json").read_text())
        for phase in ("full", "resume")
        for rank in (0, 1)
    }
    return {"reports": reports, "checkpoint": checkpoint}


def _accelerate_phases(work: Path) -> dict:
    for phase in ("full", "resume"):
        torchrun(
            SCRIPT, phase, str(work / "ckpt"), str(work), "accelerate", env={"ACCELERATE_USE_CPU": "1"}, timeout=150
        ).check()
    return {
        (phase, rank): json.loads((work / f"accelerate_{phase}_rank{rank}.json").read_text())
        for phase in ("full", "resume")
        for rank in (0, 1)
    }


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict[str, Future]]:
    """The runtime's two launches and Accelerate's two, as two chains running side by side (one
    fills the other's waiting: start-up, rendezvous); each launch keeps its own timeout. Only the
    chains the selected tests need are started."""
    needed = {
        name
        for item in request.session.items
        if item.module is request.module
        for name in ("phases", "accelerate_phases")
        if name in getattr(item, "fixturenames", ())
    }
    starts = {"accelerate_phases": _accelerate_phases, "phases": _runtime_phases}
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {
            name: pool.submit(start, tmp_path_factory.mktemp(name)) for name, start in starts.items() if name in needed
        }


@pytest.fixture(scope="module")
def phases(chains: dict[str, Future]) -> dict:
    return chains["phases"].result()


@pytest.fixture(scope="module")
def accelerate_phases(chains: dict[str, Future]) -> dict:
    return chains["accelerate_phases"].result()


@pytest.mark.parametrize("rank", [0, 1])
def test_resumed_run_sees_the_same_batches(phases, rank: int) -> None:
    full, resumed = phases["reports"]["full", rank], phases["reports"]["resume", rank]
    assert [e["batches"] for e in resumed["epochs"]] == [e["batches"] for e in full["epochs"]]
    # The loader reshuffles every epoch (so the sampler's generator state mattered).
    assert full["epochs"][0]["batches"] != full["epochs"][1]["batches"]


@pytest.mark.parametrize("rank", [0, 1])
def test_resumed_run_ends_on_identical_parameters_and_states(phases, rank: int) -> None:
    full, resumed = phases["reports"]["full", rank], phases["reports"]["resume", rank]
    assert resumed["parameters"] == full["parameters"]  # exact, not approximate
    assert resumed["counter_at_start"] == full["counter_at_start"] == 8  # 64 samples / 2 ranks / 4
    assert resumed["lr_at_start"] == full["lr_at_start"]
    assert [(e["python"], e["numpy"]) for e in resumed["epochs"]] == [(e["python"], e["numpy"]) for e in full["epochs"]]


@pytest.mark.parametrize("rank", [0, 1])
def test_mid_epoch_resume_sees_the_rest_of_that_epoch_then_the_same_next_epoch(phases, rank: int) -> None:
    """A checkpoint taken MID_STEP batches into an epoch, then Accelerate's resume recipe
    (load_state, skip_first_batches): exactly the batches, draws and parameters of the
    uninterrupted run. Before the epoch-start generator state was saved, the skipped loader
    shuffled with the *next* epoch's order."""
    full, mid = phases["reports"]["full", rank], phases["reports"]["resume", rank]["mid_epoch"]
    interrupted = full["epochs"][0]["batches"]
    assert mid["counter_at_start"] == full["counter_at_start"] + MID_STEP
    assert mid["epochs"][0]["batches"] == interrupted[MID_STEP:] and len(interrupted) > MID_STEP
    assert mid["epochs"][1]["batches"] == full["epochs"][1]["batches"]
    assert [(e["python"], e["numpy"]) for e in mid["epochs"]] == [(e["python"], e["numpy"]) for e in full["epochs"]]
    assert mid["parameters"] == full["parameters"]  # exact
    # The skipped copy finished the epoch for the loader it came from.
    assert mid["loader_iteration"] == full["loader_iteration"] == 3
    assert mid["counter"] == full["counter"]


def test_ranks_trained_on_different_samples(phases) -> None:
    first = {i for batch in phases["reports"]["full", 0]["epochs"][0]["batches"] for i in batch}
    second = {i for batch in phases["reports"]["full", 1]["epochs"][0]["batches"] for i in batch}
    assert not first & second and len(first | second) == 64


def test_checkpoint_holds_every_ranks_random_state_and_an_unprefixed_model(phases) -> None:
    folder: Path = phases["checkpoint"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        MANIFEST,
        "custom_checkpoint_0.pkl",
        "model.safetensors",
        "optimizer.bin",
        "random_states_0.pkl",
        "random_states_1.pkl",
        "scheduler.bin",
    ]
    assert json.loads((folder / MANIFEST).read_text())["world_size"] == 2
    state = load_file(folder / "model.safetensors")
    assert not any(key.startswith("module.") for key in state)


def test_a_two_rank_checkpoint_is_refused_by_one_process(phases) -> None:
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(4, 1))
    with pytest.raises(CheckpointError, match=r"checkpoint\.json: saved by 2 processes, this run has 1"):
        accelerator.load_state(phases["checkpoint"])


@pytest.mark.parametrize("rank", [0, 1])
def test_accelerate_resumes_with_other_batches_where_runtime_is_exact(phases, accelerate_phases, rank: int) -> None:
    """Accelerate 1.15 does not save the loaders' shuffling generator: its resumed run draws
    another order, and so ends on other parameters. The same script on runtime is exact."""
    full, resumed = accelerate_phases["full", rank], accelerate_phases["resume", rank]
    assert resumed["counter_at_start"] == full["counter_at_start"] == 8  # the checkpoint itself loaded
    assert [e["batches"] for e in resumed["epochs"]] != [e["batches"] for e in full["epochs"]]
    assert resumed["parameters"] != full["parameters"]
    ours = phases["reports"]
    assert ours["resume", rank]["parameters"] == ours["full", rank]["parameters"]
