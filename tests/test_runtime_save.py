"""``accelerator.save`` writes exactly the bytes ``torch.save`` writes (a converted script's
checkpoint files compare equal to the original's), atomically, leaving nothing behind."""

from __future__ import annotations

from pathlib import Path

import torch

from accel_convert.runtime.utils import atomic_torch_save


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
