"""``accelerator.save`` writes exactly the bytes ``torch.save`` writes (a converted script's
checkpoint files compare equal to the original's), atomically, leaving nothing behind.

With ``safe_serialization=True``, ``save`` and ``save_model`` are compared with Hugging Face
Accelerate on 2 CPU processes (tests/scripts/save_differential.py, one launch per framework,
shared by the tests below): the same files under the same names with the same tensors (read back
with ``safetensors.torch.load_file`` and ``torch.load(weights_only=True)``), the same refusals,
written by the main process only.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from accel_convert.runtime.utils import atomic_torch_save
from tests.launching import REPO_ROOT, torchrun


def test_atomic_save_writes_the_bytes_torch_save_writes(tmp_path: Path) -> None:
    state = {"weight": torch.arange(12.0).reshape(3, 4), "step": 7}
    (tmp_path / "direct").mkdir()
    (tmp_path / "atomic").mkdir()
    torch.save(state, tmp_path / "direct" / "model.pt")
    atomic_torch_save(state, tmp_path / "atomic" / "model.pt")
    assert (tmp_path / "atomic" / "model.pt").read_bytes() == (tmp_path / "direct" / "model.pt").read_bytes()
    assert sorted(p.name for p in (tmp_path / "atomic").iterdir()) == ["model.pt"]


def test_a_failed_save_keeps_the_previous_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    atomic_torch_save({"version": 1}, target)
    before = target.read_bytes()

    class Unpicklable:
        def __reduce__(self) -> tuple[object, ...]:
            raise RuntimeError("cannot pickle this")

    try:
        atomic_torch_save({"bad": Unpicklable()}, target)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the save should have failed")
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


# ------------------------------------------------------------------ against Accelerate, 2 processes
SCRIPT = REPO_ROOT / "tests" / "scripts" / "save_differential.py"
FRAMEWORKS = ("accelerate", "runtime")


def _launch(framework: str, out: Path) -> dict:
    env = {"ACCELERATE_USE_CPU": "1"} if framework == "accelerate" else None
    torchrun(SCRIPT, framework, str(out), nproc=2, env=env, timeout=240).check()
    ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [report["world"] for report in ranks] == [2, 2]
    return {"out": out, "ranks": ranks}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """{"accelerate": {"out": folder, "ranks": [rank reports]}, "runtime": {...}}: two launches,
    side by side (much of a launch is start-up waiting, which the other one fills)."""
    root = tmp_path_factory.mktemp("save_differential")
    with ThreadPoolExecutor(max_workers=2) as pool:
        launches = {framework: pool.submit(_launch, framework, root / framework) for framework in FRAMEWORKS}
        return {framework: launch.result() for framework, launch in launches.items()}


def _files(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


def _read(path: Path) -> Any:
    """A written file's content: tensors (with the safetensors metadata), or the index's JSON."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata()
        return {"metadata": metadata, "tensors": load_file(path)}
    if path.suffix == ".bin":
        return {"tensors": torch.load(path, weights_only=True)}
    return json.loads(path.read_text())


def _assert_same_content(theirs: Any, ours: Any, where: str) -> None:
    if isinstance(theirs, dict) and "tensors" in theirs:
        assert theirs.get("metadata") == ours.get("metadata"), where
        assert set(theirs["tensors"]) == set(ours["tensors"]), where
        for name, tensor in theirs["tensors"].items():
            assert ours["tensors"][name].dtype == tensor.dtype, f"{where}: {name}"
            assert torch.equal(ours["tensors"][name], tensor), f"{where}: {name}"
    else:
        assert ours == theirs, where


def test_saved_files_have_accelerates_names_and_contents(saved: dict[str, dict]) -> None:
    theirs, ours = saved["accelerate"]["out"], saved["runtime"]["out"]
    expected = _files(theirs)
    assert _files(ours) == expected
    compared = 0
    for name in expected:
        if name.endswith((".safetensors", ".bin", ".index.json")):
            _assert_same_content(_read(theirs / name), _read(ours / name), name)
            compared += 1
    assert compared == 13  # every weights file and index of every case
    # The tied weight is written once in safetensors, under its first name; both names in .bin.
    default = _read(ours / "save_model_default" / "model.safetensors")["tensors"]
    assert "embed.weight" in default and "head.weight" not in default
    assert {"embed.weight", "head.weight"} <= set(_read(ours / "save_model_bin" / "pytorch_model.bin")["tensors"])
    index = json.loads((ours / "save_model_sharded_safe" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_saved_weights_load_into_the_model_class(saved: dict[str, dict]) -> None:
    from safetensors.torch import load_file

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from save_differential import TiedModel
    finally:
        sys.path.remove(str(SCRIPT.parent))
    out = saved["runtime"]["out"]
    reference = torch.load(out / "save_model_bin" / "pytorch_model.bin", weights_only=True)
    for folder, load in (("save_model_sharded_safe", load_file), ("save_model_sharded_bin", _torch_load)):
        index_name = "model.safetensors.index.json" if load is load_file else "pytorch_model.bin.index.json"
        index = json.loads((out / folder / index_name).read_text())
        state: dict[str, torch.Tensor] = {}
        for file in sorted(set(index["weight_map"].values())):
            state.update(load(out / folder / file))
        assert set(state) == set(index["weight_map"])
        model = TiedModel()
        # strict: every key but a tied one (the model ties it again itself)
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected and set(missing) <= {"head.weight"}
        assert all(torch.equal(model.state_dict()[name], reference[name]) for name in reference)


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def test_refusals_raise_what_accelerate_raises_on_the_main_process(saved: dict[str, dict]) -> None:
    theirs, ours = (saved[framework]["ranks"] for framework in FRAMEWORKS)
    main_theirs, main_ours = theirs[0]["raised"], ours[0]["raised"]
    refusals = {name: kind for name, kind in main_theirs.items() if kind is not None}
    assert refusals == {
        "refuse_list": "ValueError",
        "refuse_non_tensor": "ValueError",
        "refuse_shared_in_plain_dict": "RuntimeError",
        "refuse_non_contiguous": "ValueError",
        "refuse_file_object": "TypeError",
    }
    assert main_ours == main_theirs
    # Deliberate differences: the caller's OrderedDict is left as it was (Accelerate deletes the
    # tied names from it, so the caller's own state dict changes under it) ...
    assert [rank["caller_dict_kept"] for rank in theirs] == [False, False]
    assert [rank["caller_dict_kept"] for rank in ours] == [True, True]
    # ... and every rank raises (Accelerate's other ranks return, to wait in the next collective).
    assert all(kind is None for kind in theirs[1]["raised"].values())
    assert ours[1]["raised"] == main_ours


def test_only_the_main_process_writes(saved: dict[str, dict]) -> None:
    for framework in FRAMEWORKS:
        out = saved[framework]["out"]
        assert _files(out / "save_model_per_rank") == ["rank0/model.safetensors"], framework
        assert (out / "save_model_per_rank" / "rank1").is_dir(), framework  # created by every rank
        assert (out / "save_per_rank0.safetensors").is_file() and not (out / "save_per_rank1.safetensors").exists()
        assert (out / "a_file").read_text() == "not a folder"  # save_model into a file: nothing written


# ------------------------------------------------------------------ which process writes, in this process
@pytest.mark.parametrize("save_on_each_node", [False, True])
def test_another_nodes_local_main_writes_only_with_save_on_each_node(
    save_on_each_node: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process plays rank 0 of a second machine: local main, not the main process."""
    from accel_convert.runtime import Accelerator, ProjectConfiguration
    from accel_convert.runtime.state_objects import AcceleratorState

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state()
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(save_on_each_node=save_on_each_node))
    monkeypatch.setattr(Accelerator, "is_main_process", property(lambda self: False))
    monkeypatch.setattr(Accelerator, "is_local_main_process", property(lambda self: True))
    model = torch.nn.Linear(3, 2)
    accelerator.save({"w": torch.ones(2)}, tmp_path / "plain.pt")
    accelerator.save({"w": torch.ones(2)}, tmp_path / "safe.safetensors", safe_serialization=True)
    accelerator.save_model(model, tmp_path / "model")
    written = sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file())
    expected = ["model/model.safetensors", "plain.pt", "safe.safetensors"] if save_on_each_node else []
    assert written == expected
    assert (tmp_path / "model").is_dir()  # created on every process, as Accelerate does
    AcceleratorState._reset_state()
