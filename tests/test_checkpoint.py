"""save_state / load_state in one process: round trip, naming, atomic writes, refusing bad checkpoints."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from accel_convert.runtime import checkpoint
from accel_convert.runtime.accelerator import Accelerator, PreparedObjects
from accel_convert.runtime.checkpoint import MANIFEST, CheckpointError
from accel_convert.runtime.handlers import ProjectConfiguration
from tests.scripts import accelerate_checkpoint


class Tally:
    def __init__(self, value: object = 0) -> None:
        self.value = value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


class NotATensor:
    """Something ``weights_only=True`` must refuse to unpickle."""


def make_training(project_dir: Path | None = None, **config) -> dict:
    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=str(project_dir) if project_dir else None, **config)
    )
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    loader = torch.utils.data.DataLoader(torch.randn(12, 3), batch_size=4, shuffle=True)
    tally = Tally()
    accelerator.register_for_checkpointing(tally)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    return dict(
        accelerator=accelerator, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader, tally=tally
    )


def train(t: dict, epochs: int = 1) -> None:
    for _ in range(epochs):
        for batch in t["loader"]:
            loss = t["model"](batch).pow(2).mean()
            t["optimizer"].zero_grad()
            t["accelerator"].backward(loss)
            t["optimizer"].step()
            t["scheduler"].step()
            t["tally"].value += 1


def snapshot(t: dict) -> dict:
    return {
        "parameters": [p.detach().clone() for p in t["model"].parameters()],
        "adam": [s["exp_avg"].clone() for s in t["optimizer"].optimizer.state.values()],
        "lr": t["scheduler"].get_last_lr(),
        "tally": t["tally"].value,
        "draws": (random.random(), torch.rand(3).tolist()),
    }


def assert_same(a: dict, b: dict) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a["parameters"], b["parameters"]))
    assert all(torch.equal(x, y) for x, y in zip(a["adam"], b["adam"]))
    assert (a["lr"], a["tally"], a["draws"]) == (b["lr"], b["tally"], b["draws"])


@pytest.mark.parametrize("safe_serialization", [True, False])
def test_round_trip_restores_weights_optimizer_scheduler_custom_objects_and_rngs(
    tmp_path: Path, safe_serialization: bool
) -> None:
    t = make_training()
    train(t)
    t["accelerator"].save_state(tmp_path / "ckpt", safe_serialization=safe_serialization)
    expected = snapshot(t)
    train(t, epochs=2)  # move everything on, then come back
    t["accelerator"].load_state(tmp_path / "ckpt")
    assert_same(snapshot(t), expected)
    saved_keys = read_model_file(tmp_path / "ckpt").keys()
    assert sorted(saved_keys) == ["0.bias", "0.weight", "2.bias", "2.weight"]  # no "module." prefix


def read_model_file(folder: Path) -> dict[str, torch.Tensor]:
    """The one model file of a checkpoint, read by the safetensors package or ``torch.load``."""
    (path,) = [p for p in folder.iterdir() if p.name in ("model.safetensors", "pytorch_model.bin")]
    return load_file(path) if path.suffix == ".safetensors" else torch.load(path, weights_only=True)


def test_layout_and_manifest(tmp_path: Path) -> None:
    t = make_training()
    folder = Path(t["accelerator"].save_state(tmp_path / "ckpt"))
    assert sorted(p.name for p in folder.iterdir()) == [
        MANIFEST,
        "custom_checkpoint_0.pkl",
        "model.safetensors",
        "optimizer.bin",
        "random_states_0.pkl",
        "scheduler.bin",
    ]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["world_size"] == 1
    assert sorted(manifest["files"]) == sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no staging folder left behind


@pytest.mark.parametrize(
    ("safe_serialization", "names"),
    [(True, ["model.safetensors", "model_1.safetensors"]), (False, ["pytorch_model.bin", "pytorch_model_1.bin"])],
)
def test_models_are_safetensors_files_unless_not_safe_as_in_accelerate(
    tmp_path: Path, safe_serialization: bool, names: list[str]
) -> None:
    accelerator = Accelerator()
    models = accelerator.prepare(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    folder = Path(accelerator.save_state(tmp_path / "ckpt", safe_serialization=safe_serialization))
    assert sorted(p.name for p in folder.iterdir() if "model" in p.name) == names
    for model, name in zip(models, names):
        path = folder / name
        saved = load_file(path) if safe_serialization else torch.load(path, weights_only=True)
        assert saved.keys() == model.state_dict().keys()
        assert all(torch.equal(saved[key], value) for key, value in model.state_dict().items())


class TiedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 4)
        self.head = torch.nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight


def test_a_tied_weight_is_stored_once_and_comes_back_tied(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(TiedModel())
    expected = model.embed.weight.detach().clone()
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    assert list(load_file(folder / "model.safetensors")) == ["embed.weight"]  # as Accelerate stores it
    with torch.no_grad():
        model.embed.weight.zero_()
    accelerator.load_state(folder)
    assert torch.equal(model.head.weight, expected) and model.head.weight is model.embed.weight


def test_a_safetensors_model_file_is_loaded_as_strictly_as_a_bin(saved: Path) -> None:
    other = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Linear(8, 1))  # "1.weight", not "2.weight"
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    loader = torch.utils.data.DataLoader(torch.randn(12, 3), batch_size=4, shuffle=True)
    other.register_for_checkpointing(Tally())
    other.prepare(model, optimizer, scheduler, loader)
    with pytest.raises(RuntimeError, match=r"missing keys \['1\.weight', '1\.bias'\], unexpected keys \['2\.weight'"):
        other.load_state(saved)


def test_a_model_file_that_is_no_safetensors_is_refused_by_name_even_with_a_forged_manifest(saved: Path) -> None:
    path = saved / "model.safetensors"
    path.write_bytes((10**6).to_bytes(8, "little") + b"{}")
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["files"]["model.safetensors"] = {
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a safetensors file \(the header claims"):
        make_training()["accelerator"].load_state(saved)


def test_automatic_naming_keeps_the_newest_and_loads_the_latest(tmp_path: Path) -> None:
    t = make_training(tmp_path, automatic_checkpoint_naming=True, total_limit=2)
    saved = []
    for _ in range(3):
        train(t)
        saved.append(t["accelerator"].save_state())
    expected = snapshot(t)
    assert [Path(p).name for p in saved] == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_1", "checkpoint_2"]
    resumed = make_training(tmp_path, automatic_checkpoint_naming=True, total_limit=2)
    resumed["accelerator"].load_state()
    assert_same(snapshot(resumed), expected)
    assert resumed["accelerator"].project_configuration.iteration == 3


def test_automatic_naming_refuses_to_overwrite(tmp_path: Path) -> None:
    t = make_training(tmp_path, automatic_checkpoint_naming=True)
    t["accelerator"].save_state()
    t["accelerator"].project_configuration.iteration = 0
    with pytest.raises(ValueError, match="checkpoint_0 already exists"):
        t["accelerator"].save_state()


def test_saving_over_a_folder_replaces_it_whole(tmp_path: Path) -> None:
    t = make_training()
    t["accelerator"].save_state(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "stray.txt").write_text("from before")
    train(t)
    t["accelerator"].save_state(tmp_path / "ckpt")
    expected = snapshot(t)
    assert not (tmp_path / "ckpt" / "stray.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    train(t)
    t["accelerator"].load_state(tmp_path / "ckpt")
    assert_same(snapshot(t), expected)


def crash_on_write(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Make the (after+1)-th checkpoint file write fail, as a full disk or a killed process would."""
    real_write = checkpoint._write
    writes = []

    def write(path: Path, content: object) -> None:
        writes.append(path)
        if len(writes) > after:
            raise OSError(28, "No space left on device")
        real_write(path, content)

    monkeypatch.setattr(checkpoint, "_write", write)


def test_a_crash_mid_save_leaves_no_checkpoint_that_looks_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_training(tmp_path, automatic_checkpoint_naming=True)
    t["accelerator"].save_state()
    expected = snapshot(t)
    train(t)
    with monkeypatch.context() as patch:
        crash_on_write(patch, after=2)
        with pytest.raises(OSError, match="No space left"):
            t["accelerator"].save_state()
    checkpoints = tmp_path / "checkpoints"
    assert not (checkpoints / "checkpoint_1").exists()
    assert (checkpoints / ".checkpoint_1.incomplete").is_dir()  # the debris is clearly named
    resumed = make_training(tmp_path, automatic_checkpoint_naming=True)
    resumed["accelerator"].load_state()  # picks checkpoint_0, the last complete one
    assert_same(snapshot(resumed), expected)
    resumed["accelerator"].save_state()  # a later save clears the debris
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_0", "checkpoint_1"]


def test_a_crash_while_replacing_a_folder_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_training()
    t["accelerator"].save_state(tmp_path / "ckpt")
    expected = snapshot(t)
    train(t)
    with monkeypatch.context() as patch:
        crash_on_write(patch, after=0)
        with pytest.raises(OSError):
            t["accelerator"].save_state(tmp_path / "ckpt")
    t["accelerator"].load_state(tmp_path / "ckpt")
    assert_same(snapshot(t), expected)


class Killed(BaseException):
    """The process dies here: nothing of save_state runs after it (not even ``except Exception``)."""


def kill_at_step(patch: pytest.MonkeyPatch, step: int | None) -> list[str]:
    """Make the next save die at ``step`` of moving folders into place: just before a rename, or
    half-way through removing a folder (every file gone but the manifest: the worst moment for
    anything that trusts a manifest's presence). Returns the steps reached; with ``step=None``
    nothing dies and the list is every step of the save."""
    steps: list[str] = []
    real_rename, real_remove = checkpoint._rename, checkpoint._remove

    def reached(what: str) -> None:
        steps.append(what)
        if len(steps) - 1 == step:
            raise Killed(what)

    def rename(source: Path, destination: Path) -> None:
        reached(f"rename {source.name} to {destination.name}")
        real_rename(source, destination)

    def remove(folder: Path) -> None:
        if folder.is_dir():
            for path in folder.rglob("*"):
                if path.is_file() and path.name != MANIFEST:
                    path.unlink()
            reached(f"half-way through removing {folder.name}")
        real_remove(folder)

    patch.setattr(checkpoint, "_rename", rename)
    patch.setattr(checkpoint, "_remove", remove)
    return steps


def same(a: dict, b: dict) -> bool:
    try:
        assert_same(a, b)
    except AssertionError:
        return False
    return True


def save_killed_at(t: dict, folder: Path, step: int | None, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    with monkeypatch.context() as patch:
        steps = kill_at_step(patch, step)
        if step is None:
            t["accelerator"].save_state(folder)
        else:
            with pytest.raises(Killed):
                t["accelerator"].save_state(folder)
    return steps


def load_and_save_again(case: Path, candidates: dict[str, dict]) -> str:
    """Load ``case/ckpt`` in a new run: which candidate came back. Then a save into it must work,
    leave no hidden folder, and load back."""
    resumed = make_training()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "a save over it was interrupted": asserted elsewhere
        resumed["accelerator"].load_state(case / "ckpt")
    loaded = snapshot(resumed)
    matches = [name for name, expected in candidates.items() if same(loaded, expected)]
    assert len(matches) == 1, f"{case}: loaded a state that is none of {list(candidates)}"
    train(resumed)
    resumed["accelerator"].save_state(case / "ckpt")
    expected = snapshot(resumed)
    assert [path.name for path in case.iterdir()] == ["ckpt"], f"{case}: hidden folders left"
    again = make_training()
    again["accelerator"].load_state(case / "ckpt")
    assert_same(snapshot(again), expected)
    return matches[0]


OVERWRITE_STEPS = [
    "rename ckpt to .ckpt.replaced",
    "rename .ckpt.incomplete to ckpt",
    "half-way through removing .ckpt.replaced",
]


def test_a_save_over_a_folder_killed_at_any_step_leaves_the_old_or_the_new_checkpoint_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_training()
    t["accelerator"].save_state(tmp_path / "dry" / "ckpt")
    assert save_killed_at(t, tmp_path / "dry" / "ckpt", None, monkeypatch) == OVERWRITE_STEPS
    outcomes = []
    for step in range(len(OVERWRITE_STEPS)):
        case = tmp_path / f"killed_at_{step}"
        t = make_training()
        train(t)
        t["accelerator"].save_state(case / "ckpt")
        old = snapshot(t)
        train(t)
        save_killed_at(t, case / "ckpt", step, monkeypatch)
        new = snapshot(t)
        outcomes.append(load_and_save_again(case, {"old": old, "new": new}))
    # Before the first rename the old checkpoint is the folder; from the moment it is moved
    # aside (the folder's name missing) the new complete one is what loads.
    assert outcomes == ["old", "new", "new"], outcomes


def test_a_save_after_an_interrupted_overwrite_killed_at_any_step_still_leaves_one_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the two renames, then the next save (which first puts the hidden complete
    checkpoint back) killed at each of its own steps."""
    between_the_renames = OVERWRITE_STEPS.index("rename .ckpt.incomplete to ckpt")

    def interrupted(case: Path) -> tuple[dict, dict, dict]:
        t = make_training()
        t["accelerator"].save_state(case / "ckpt")
        train(t)
        save_killed_at(t, case / "ckpt", between_the_renames, monkeypatch)
        first = snapshot(t)
        train(t)
        return t, first, snapshot(t)

    t, _, _ = interrupted(tmp_path / "dry")
    steps = save_killed_at(t, tmp_path / "dry" / "ckpt", None, monkeypatch)
    assert steps == ["rename .ckpt.incomplete to ckpt", "half-way through removing .ckpt.replaced", *OVERWRITE_STEPS]
    outcomes = []
    for step in range(len(steps)):
        case = tmp_path / f"killed_at_{step}"
        t, first, _ = interrupted(case)
        save_killed_at(t, case / "ckpt", step, monkeypatch)
        second = snapshot(t)
        outcomes.append(load_and_save_again(case, {"first": first, "second": second}))
    assert outcomes == ["first", "first", "first", "second", "second"], outcomes


def test_an_interrupted_overwrite_whose_new_copy_is_damaged_loads_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_training()
    t["accelerator"].save_state(tmp_path / "ckpt")
    old = snapshot(t)
    train(t)
    save_killed_at(t, tmp_path / "ckpt", OVERWRITE_STEPS.index("rename .ckpt.incomplete to ckpt"), monkeypatch)
    damaged = tmp_path / ".ckpt.incomplete" / "model.safetensors"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    resumed = make_training()
    with pytest.warns(UserWarning, match=r"ckpt: missing, a save over it was interrupted; .*\.ckpt\.replaced"):
        resumed["accelerator"].load_state(tmp_path / "ckpt")
    assert_same(snapshot(resumed), old)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    t = make_training()
    train(t)
    return Path(t["accelerator"].save_state(tmp_path / "ckpt"))


def test_missing_file_is_refused_by_name(saved: Path) -> None:
    (saved / "optimizer.bin").unlink()
    with pytest.raises(CheckpointError, match=r"optimizer\.bin: missing from the checkpoint"):
        make_training()["accelerator"].load_state(saved)


def test_corrupt_file_is_refused_by_name(saved: Path) -> None:
    path = saved / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt"):
        make_training()["accelerator"].load_state(saved)


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin", "random_states_0.pkl"])
def test_truncated_file_is_refused_by_name(saved: Path, name: str) -> None:
    path = saved / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=rf"{re.escape(name)}: corrupt"):
        make_training()["accelerator"].load_state(saved)


def test_folder_with_neither_manifest_nor_accelerates_random_states_is_not_a_checkpoint(saved: Path) -> None:
    (saved / MANIFEST).unlink()
    (saved / "random_states_0.pkl").unlink()
    with pytest.raises(CheckpointError, match=r"checkpoint\.json: missing, so .* is not a complete checkpoint"):
        make_training()["accelerator"].load_state(saved)


def test_a_folder_without_manifest_loads_as_accelerates_checking_only_that_files_are_there(tmp_path: Path) -> None:
    t = make_training()
    train(t)
    folder = Path(t["accelerator"].save_state(tmp_path / "ckpt"))
    expected = snapshot(t)
    (folder / MANIFEST).unlink()
    train(t)
    with pytest.warns(
        UserWarning, match=r"ckpt: no checkpoint\.json, loading it as a checkpoint Hugging Face Accelerate"
    ):
        t["accelerator"].load_state(folder)
    loaded = snapshot(t)
    assert all(torch.equal(x, y) for x, y in zip(loaded["parameters"], expected["parameters"]))
    assert all(torch.equal(x, y) for x, y in zip(loaded["adam"], expected["adam"]))
    assert (loaded["lr"], loaded["tally"]) == (expected["lr"], expected["tally"])
    assert loaded["draws"] != expected["draws"]  # the random states are Accelerate's, not restored
    (folder / "scheduler.bin").unlink()
    with (
        pytest.raises(CheckpointError, match=r"scheduler\.bin: missing from the checkpoint"),
        pytest.warns(UserWarning),
    ):
        t["accelerator"].load_state(folder)


def test_other_world_size_is_refused(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["world_size"] = 4
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="saved by 4 processes, this run has 1"):
        make_training()["accelerator"].load_state(saved)


@pytest.mark.parametrize("world_size", ["2", None, 1.0, True, 0, [1]])
def test_malformed_world_size_is_called_a_malformed_manifest(saved: Path, world_size: object) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["world_size"] = world_size
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"checkpoint\.json: malformed manifest \(world_size is "):
        make_training()["accelerator"].load_state(saved)


def test_a_file_without_size_and_digest_is_called_a_malformed_manifest(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["files"]["model.safetensors"] = {"bytes": 1}
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"malformed manifest \(no size and digest for model\.safetensors\)"):
        make_training()["accelerator"].load_state(saved)


def test_a_corrupt_file_is_refused_before_anything_is_restored(saved: Path) -> None:
    # Every file is checked before any is applied: a bad random-state file must not leave the
    # model already overwritten with the checkpoint's weights.
    t = make_training()
    before = [param.detach().clone() for param in t["model"].parameters()]
    rng_file = saved / "random_states_0.pkl"
    data = bytearray(rng_file.read_bytes())
    data[-3] ^= 0xFF
    rng_file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"random_states_0\.pkl: corrupt"):
        t["accelerator"].load_state(saved)
    assert all(torch.equal(a, b) for a, b in zip(before, t["model"].parameters()))


def test_different_objects_are_refused(saved: Path) -> None:
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(3, 1))
    with pytest.raises(CheckpointError, match="holds 1 optimizers, this run prepared 0"):
        accelerator.load_state(saved)


def test_loading_runs_no_pickled_code(tmp_path: Path) -> None:
    t = make_training()
    t["tally"].value = NotATensor()
    t["accelerator"].save_state(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0\.pkl: cannot be loaded with weights_only=True"):
        make_training()["accelerator"].load_state(tmp_path / "ckpt")


def test_argument_errors(tmp_path: Path) -> None:
    accelerator = make_training()["accelerator"]
    with pytest.raises(ValueError, match="save_state needs output_dir"):
        accelerator.save_state()
    with pytest.raises(ValueError, match="load_state needs input_dir"):
        accelerator.load_state()
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        accelerator.load_state(tmp_path / "nowhere")
    accelerator.save_state(tmp_path / "ckpt")
    with pytest.raises(TypeError, match="Unsupported map_location 'gpu'"):
        accelerator.load_state(tmp_path / "ckpt", map_location="gpu")


def test_gradient_scaler_state_comes_back(tmp_path: Path) -> None:
    t = make_training()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    t["accelerator"].scaler = scaler
    scaler.scale(torch.ones(()))  # a scaler holds its scale only once it has scaled something
    t["accelerator"].save_state(tmp_path / "ckpt")
    scaler.update(new_scale=8.0)
    assert scaler.get_scale() == 8.0
    t["accelerator"].load_state(tmp_path / "ckpt")
    assert scaler.get_scale() == 1024.0
    assert "scaler.pt" in json.loads((tmp_path / "ckpt" / MANIFEST).read_text())["files"]


def test_a_rank_file_the_main_process_cannot_see_is_an_error(tmp_path: Path) -> None:
    """What a folder that is not shared looks like to the main process: rank 1's file is absent."""
    staging = tmp_path / ".ckpt.incomplete"
    staging.mkdir()
    (staging / "random_states_0.pkl").write_bytes(b"rank 0")
    nothing_prepared = PreparedObjects((), (), (), (), ())
    two_ranks = SimpleNamespace(num_processes=2, prepared_objects=lambda: nothing_prepared, scaler=None)
    with pytest.raises(CheckpointError, match=r"random_states_1\.pkl: rank 1 wrote it but the main process"):
        checkpoint._write_manifest(staging, two_ranks)
    assert not (staging / MANIFEST).exists()


# ------------------------------------------------------------------ against Accelerate
# Accelerate's side runs in its own process (tests/scripts/accelerate_checkpoint.py, no launch);
# ours runs the same body here.
ACCELERATE_SIDE = Path(__file__).parent / "scripts" / "accelerate_checkpoint.py"


def run_accelerate(mode: str, folder: Path, state: Path) -> dict:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1"}
    command = [sys.executable, str(ACCELERATE_SIDE), mode, str(folder), str(state)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    return torch.load(state, weights_only=True)


@pytest.fixture(scope="module")
def accelerates(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Accelerate trained and saved: {"folder": its checkpoint, "state": what it held then}."""
    root = tmp_path_factory.mktemp("accelerate_checkpoint")
    return {"folder": root / "ckpt", "state": run_accelerate("save", root / "ckpt", root / "state.pt")}


def assert_same_training_state(a: dict, b: dict) -> None:
    assert a["parameters"].keys() == b["parameters"].keys()
    assert all(torch.equal(tensor, b["parameters"][name]) for name, tensor in a["parameters"].items())
    assert a["tied"] and b["tied"]
    assert len(a["adam"]) == len(b["adam"])
    for ours, theirs in zip(a["adam"], b["adam"]):
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
    assert (a["lr"], a["tally"]) == (b["lr"], b["tally"])


def test_our_checkpoint_has_accelerates_files_and_model_file(tmp_path: Path, accelerates: dict) -> None:
    t = accelerate_checkpoint.build(Accelerator(), seed=0)
    accelerate_checkpoint.train(t)
    ours = Path(t["accelerator"].save_state(tmp_path / "ckpt"))
    assert sorted(p.name for p in ours.iterdir() if p.name != MANIFEST) == sorted(
        p.name for p in accelerates["folder"].iterdir()
    )
    assert_same_training_state(accelerate_checkpoint.training_state(t), accelerates["state"])  # same training
    theirs = load_file(accelerates["folder"] / "model.safetensors")
    mine = load_file(ours / "model.safetensors")
    assert sorted(mine) == sorted(theirs) == ["body.bias", "body.weight", "embed.weight"]  # the tied head once
    assert all(torch.equal(mine[name], theirs[name]) and mine[name].dtype == theirs[name].dtype for name in mine)


def test_accelerate_loads_our_checkpoint(tmp_path: Path) -> None:
    t = accelerate_checkpoint.build(Accelerator(), seed=0)
    accelerate_checkpoint.train(t)
    ours = t["accelerator"].save_state(tmp_path / "ckpt")
    loaded = run_accelerate("load", Path(ours), tmp_path / "loaded.pt")
    assert_same_training_state(loaded, accelerate_checkpoint.training_state(t))


def test_we_load_accelerates_checkpoint(accelerates: dict) -> None:
    t = accelerate_checkpoint.build(Accelerator(), seed=1)
    assert not torch.equal(t["model"].embed.weight, accelerates["state"]["parameters"]["embed.weight"])
    with pytest.warns(UserWarning, match="no checkpoint.json, loading it as a checkpoint Hugging Face Accelerate"):
        t["accelerator"].load_state(accelerates["folder"])
    assert_same_training_state(accelerate_checkpoint.training_state(t), accelerates["state"])
