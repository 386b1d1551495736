"""runtime.weight_files against the libraries whose files it writes, in this process: the
safetensors package reads every file it writes and refuses the same inputs, and its shards are
those huggingface_hub plans (``split_torch_state_dict_into_shards``, which Accelerate's
``save_model`` calls)."""

from __future__ import annotations

import io
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from accel_convert.runtime import weight_files
from accel_convert.runtime.weight_files import (
    SAFETENSORS_DTYPES,
    check_safetensors_input,
    parse_shard_size,
    plan_shards,
    without_shared_tensors,
    write_safetensors,
    write_weights,
)


def _sample(dtype: torch.dtype) -> torch.Tensor:
    """Distinct values of ``dtype`` (float8 kinds through their bytes: few ops exist for them)."""
    if dtype.is_floating_point and dtype.itemsize == 1:
        return torch.arange(8, 20, dtype=torch.uint8).view(dtype).reshape(3, 4)
    if dtype == torch.bool:
        return torch.tensor([[True, False], [False, True]])
    if dtype.is_complex:
        return torch.complex(torch.arange(6.0), -torch.arange(6.0)).to(dtype).reshape(2, 3)
    return torch.arange(12).to(dtype).reshape(3, 4)


def test_every_dtype_is_read_back_by_safetensors(tmp_path: Path) -> None:
    tensors = {f"t_{str(dtype).split('.')[-1]}": _sample(dtype) for dtype in SAFETENSORS_DTYPES}
    tensors["scalar"] = torch.tensor(2.5)
    tensors["empty"] = torch.zeros(0, 3)
    write_safetensors(tensors, tmp_path / "all.safetensors")
    loaded = load_file(tmp_path / "all.safetensors")
    assert loaded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and loaded[name].shape == tensor.shape, name
        assert torch.equal(loaded[name].reshape(-1).view(torch.uint8), tensor.reshape(-1).view(torch.uint8)), name
    # A dtype the format has no name for is refused before anything is written.
    with pytest.raises(TypeError, match="complex128"):
        write_safetensors({"c": torch.zeros(2, dtype=torch.complex128)}, tmp_path / "c.safetensors")
    assert not (tmp_path / "c.safetensors").exists()


def _storage() -> torch.Tensor:
    return torch.arange(12.0)


REFUSED: dict[str, Any] = {
    "list": [torch.ones(2)],
    "tensor": torch.ones(2),
    "non-tensor value": {"w": torch.ones(2), "step": 3},
    "integer key": {1: torch.ones(2)},
    "sparse": {"s": torch.eye(2).to_sparse()},
    "one tensor twice": (lambda w: {"a": w, "b": w})(_storage()),
    "overlapping views": (lambda w: {"a": w[:6], "b": w[4:]})(_storage()),
    "view inside a view": (lambda w: {"a": w, "b": w[2:4]})(_storage()),
    "non-contiguous": {"t": torch.ones(3, 4).t()},
}


@pytest.mark.parametrize("case", REFUSED)
def test_refuses_what_safetensors_refuses_with_its_exception_type(case: str, tmp_path: Path) -> None:
    with pytest.raises(Exception) as theirs:
        save_file(REFUSED[case], str(tmp_path / "theirs.safetensors"))
    with pytest.raises(theirs.type):
        check_safetensors_input(REFUSED[case])
    with pytest.raises(theirs.type):
        write_safetensors(REFUSED[case], tmp_path / "ours.safetensors")
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # nothing written, no temporary left


def test_accepts_what_safetensors_accepts(tmp_path: Path) -> None:
    storage = _storage()
    accepted = {
        "disjoint slices of one storage": {"low": storage[:6], "high": storage[6:]},
        "a slice of a larger storage": {"part": torch.arange(100.0)[10:14]},
        "empty tensors": {"a": torch.zeros(0), "b": torch.zeros(0, 2)},
        "nothing": {},
    }
    for case, tensors in accepted.items():
        save_file(tensors, str(tmp_path / "theirs.safetensors"))
        write_safetensors(tensors, tmp_path / "ours.safetensors")
        theirs, ours = load_file(tmp_path / "theirs.safetensors"), load_file(tmp_path / "ours.safetensors")
        assert theirs.keys() == ours.keys(), case
        assert all(torch.equal(theirs[name], ours[name]) for name in theirs), case
    with pytest.raises(TypeError):  # written by name only, as safetensors writes
        write_safetensors({"w": torch.ones(2)}, io.BytesIO())  # type: ignore[arg-type]


def test_a_failed_write_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "model.safetensors"
    write_safetensors({"w": torch.ones(2)}, target)
    before = target.read_bytes()

    def fail(tensor: torch.Tensor) -> bytes:
        raise OSError("disk full")

    monkeypatch.setattr(weight_files, "_tensor_bytes", fail)
    with pytest.raises(OSError, match="disk full"):
        write_safetensors({"w": torch.zeros(2)}, target)
    assert target.read_bytes() == before
    assert [path.name for path in tmp_path.iterdir()] == ["model.safetensors"]


def test_without_shared_tensors_keeps_the_first_name_of_each_storage(caplog: pytest.LogCaptureFixture) -> None:
    embed, other = torch.randn(4, 3), torch.randn(3, 4)
    state = OrderedDict(embed=embed, head=embed, other=other.t(), tail=embed[1:], empty=torch.zeros(0))
    state["empty2"] = torch.zeros(0)
    with caplog.at_level("WARNING"):
        kept = without_shared_tensors(state)
    assert list(kept) == ["embed", "other", "empty", "empty2"]  # empty tensors share no storage
    assert kept["other"].is_contiguous() and torch.equal(kept["other"], other.t())
    assert list(state) == ["embed", "head", "other", "tail", "empty", "empty2"]  # the caller's dict is untouched
    assert "['head', 'tail']" in caplog.text
    check_safetensors_input(kept)  # what is left can be written


def _hub_split(state: dict[str, Any], max_shard_size: int | str, safe: bool) -> dict[str, Any]:
    from huggingface_hub import split_torch_state_dict_into_shards

    pattern = "model{suffix}.safetensors" if safe else "pytorch_model{suffix}.bin"
    split = split_torch_state_dict_into_shards(state, filename_pattern=pattern, max_shard_size=max_shard_size)
    return {
        "files": split.filename_to_tensors,
        "sharded": split.is_sharded,
        "index": {"metadata": split.metadata, "weight_map": split.tensor_to_filename},
    }


def _states() -> dict[str, dict[str, Any]]:
    torch.manual_seed(0)
    tied = torch.randn(64, 8)  # 2048 bytes
    base = torch.randn(40)
    return {
        "mixed sizes": {f"layer{i}.weight": torch.randn(i + 1, 16) for i in range(12)},
        "tied and a view": {
            "embed": tied,
            "small": torch.randn(3),
            "big": torch.randn(600),
            "head": tied,
            "bias": torch.randn(5, dtype=torch.float64),
            "view": base[5:10],  # counts its whole storage, as huggingface_hub counts it
            "base": base,
        },
        "strings (bitsandbytes) are left out": {"w": torch.randn(10), "quant_state": "nf4", "v": torch.randn(300)},
        "empty": {},
        "one oversized tensor": {"huge": torch.randn(5000)},
    }


@pytest.mark.parametrize("max_shard_size", [100, 500, "1KB", "2.5kb", " 0.004MB ", "10GB"])
@pytest.mark.parametrize("safe", [True, False])
def test_shards_are_planned_as_huggingface_hub_plans_them(max_shard_size: int | str, safe: bool) -> None:
    for case, state in _states().items():
        plan = plan_shards(state, max_shard_size, safe)
        expected = _hub_split(state, max_shard_size, safe)
        ours = {"files": plan.files, "sharded": plan.sharded, "index": plan.index()}
        assert ours == expected, case
        assert [list(names) for names in ours["files"].values()] == [list(v) for v in expected["files"].values()]


@pytest.mark.parametrize("text", ["10GB", "1.5mb", " 3 KB", "2TB", "0.5GB", "5GiB", "GB", "ten MB", "100"])
def test_shard_sizes_are_read_as_huggingface_hub_reads_them(text: str) -> None:
    from huggingface_hub.serialization._base import parse_size_to_int

    try:
        expected: int | type[Exception] = parse_size_to_int(text)
    except ValueError:
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(ValueError):
            parse_shard_size(text)
    else:
        assert parse_shard_size(text) == expected


@pytest.mark.parametrize("safe", [True, False])
def test_a_new_save_removes_the_earlier_saves_files_it_does_not_replace(tmp_path: Path, safe: bool) -> None:
    state = {f"w{i}": torch.full((100,), float(i)) for i in range(5)}  # 400 bytes each
    other_format = "pytorch_model.bin" if safe else "model.safetensors"
    (tmp_path / other_format).write_bytes(b"kept: the other format")
    (tmp_path / "notes-00001-of-00002.txt").write_text("kept: not a weights file")
    first = write_weights(state, tmp_path, 1000, safe)
    assert first.sharded and len(first.files) == 3
    index_name = "model.safetensors.index.json" if safe else "pytorch_model.bin.index.json"
    assert json.loads((tmp_path / index_name).read_text()) == first.index()
    second = write_weights(state, tmp_path, 1200, safe)  # two files now: the third would be stale
    files = sorted(path.name for path in tmp_path.iterdir())
    assert files == sorted([*second.files, index_name, other_format, "notes-00001-of-00002.txt"])
    write_weights(state, tmp_path, "10GB", safe)  # one file: every shard and the index go
    single = "model.safetensors" if safe else "pytorch_model.bin"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [single, other_format, "notes-00001-of-00002.txt"]
    )
    loaded = load_file(tmp_path / single) if safe else torch.load(tmp_path / single, weights_only=True)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)


def test_shards_of_a_sharded_model_are_refused_with_what_to_save(tmp_path: Path) -> None:
    """A DTensor's storage is only this rank's part; safetensors fails reading it, so do we, saying why."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        shard = distribute_tensor(torch.arange(6.0).reshape(2, 3), init_device_mesh("cpu", (1,)), [Shard(0)])
        with pytest.raises(RuntimeError) as theirs:
            save_file({"w": shard}, str(tmp_path / "theirs.safetensors"))
        with pytest.raises(theirs.type, match=r"\['w'\] are shards .* accelerator.get_state_dict\(model\)"):
            write_safetensors({"w": shard}, tmp_path / "ours.safetensors")
    finally:
        dist.destroy_process_group()


def test_a_refused_state_leaves_the_earlier_save_whole(tmp_path: Path) -> None:
    state = {f"w{i}": torch.full((100,), float(i)) for i in range(5)}
    first = write_weights(state, tmp_path, 1000, True)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    refused = {"w0": torch.ones(10), "t": torch.ones(3, 4).t()}  # one file now, but not writable
    with pytest.raises(ValueError, match="not contiguous"):
        write_weights(refused, tmp_path, "10GB", True)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
    assert len(before) == len(first.files) + 1
