"""One rank of the saving differential run: the same body under Accelerate or our runtime.

    torchrun --nproc_per_node 2 save_differential.py {accelerate|runtime} OUT_DIR

Prepares one seeded model (a tied embedding/head, a float64 layer, an integer buffer: every
case safetensors treats specially) and saves it every way ``Accelerator.save`` and
``save_model`` offer, into ``OUT_DIR/<case>/``. What each rank raised goes to
``OUT_DIR/rank<r>.json`` (the exception's type name, or null), with whether ``save`` left the
caller's state dict as it was; the test reads the files.
"""

from __future__ import annotations

import io
import json
import sys
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn


class TiedModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 8)  # 1024 bytes: larger than the smallest shard size below
        self.body = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
        self.head = nn.Linear(8, 32, bias=False)
        self.head.weight = self.embed.weight  # tied: one storage under two names
        self.wide = nn.Linear(4, 4).double()
        self.register_buffer("steps", torch.tensor(3))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens)))


def import_accelerator(framework: str):
    if framework == "accelerate":
        from accelerate import Accelerator
    else:
        from accel_convert.runtime import Accelerator
    return Accelerator


def main(framework: str, out: Path) -> None:
    accelerator = import_accelerator(framework)(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = accelerator.prepare(TiedModel())

    def state() -> OrderedDict[str, torch.Tensor]:  # model.state_dict(): tied weights shared
        return accelerator.unwrap_model(model).state_dict()

    kept_by_save = state()
    shared = torch.arange(6.0)
    cases = {
        "save_model_default": lambda: accelerator.save_model(model, out / "save_model_default"),
        "save_model_bin": lambda: accelerator.save_model(model, out / "save_model_bin", safe_serialization=False),
        "save_model_sharded_safe": lambda: accelerator.save_model(model, out / "save_model_sharded_safe", 600),
        "save_model_sharded_bin": lambda: accelerator.save_model(
            model, out / "save_model_sharded_bin", max_shard_size="1KB", safe_serialization=False
        ),
        # Each rank names its own folder: only the main process's gets files.
        "save_model_per_rank": lambda: accelerator.save_model(model, out / "save_model_per_rank" / f"rank{rank}"),
        "save_model_into_a_file": lambda: accelerator.save_model(model, out / "a_file"),
        "save_state_dict": lambda: accelerator.save(
            kept_by_save, out / "save_state_dict.safetensors", safe_serialization=True
        ),
        "save_per_rank": lambda: accelerator.save(
            {"x": torch.ones(2)}, out / f"save_per_rank{rank}.safetensors", safe_serialization=True
        ),
        "save_disjoint_slices": lambda: accelerator.save(
            {"low": shared[:3], "high": shared[3:]}, out / "save_disjoint_slices.safetensors", safe_serialization=True
        ),
        "refuse_list": lambda: accelerator.save([torch.ones(2)], out / "refuse_list", safe_serialization=True),
        "refuse_non_tensor": lambda: accelerator.save(
            {"w": torch.ones(2), "step": 3}, out / "refuse_non_tensor", safe_serialization=True
        ),
        "refuse_shared_in_plain_dict": lambda: accelerator.save(
            dict(state()), out / "refuse_shared_in_plain_dict", safe_serialization=True
        ),
        "refuse_non_contiguous": lambda: accelerator.save(
            {"t": torch.ones(3, 4).t()}, out / "refuse_non_contiguous", safe_serialization=True
        ),
        "refuse_file_object": lambda: accelerator.save({"w": torch.ones(2)}, io.BytesIO(), safe_serialization=True),
        "transposed_in_ordered_dict": lambda: accelerator.save(
            OrderedDict(t=torch.arange(12.0).reshape(3, 4).t()),
            out / "transposed_in_ordered_dict.safetensors",
            safe_serialization=True,
        ),
    }
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "a_file").write_text("not a folder")
    accelerator.wait_for_everyone()
    raised: dict[str, str | None] = {}
    for name, case in cases.items():
        try:
            case()
            raised[name] = None
        except Exception as error:  # the type is what is compared
            raised[name] = type(error).__name__
        accelerator.wait_for_everyone()  # Accelerate's save_model has no barrier of its own
    report = {
        "raised": raised,
        "world": accelerator.num_processes,
        # Whether save(OrderedDict, safe_serialization=True) left the caller's dict as it was.
        "caller_dict_kept": list(kept_by_save) == list(state()),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
