"""``PartialState()`` on import, then ``Accelerator(cpu=True)``, on a machine that *seems* to have
GPUs: ``torch.cuda`` answers two devices and ``init_process_group(backend="nccl")`` is recorded
and served by Gloo (this machine has no NCCL), ``dist.get_backend()`` answering what was asked for.
Each rank writes what both state objects report, the backends asked for and a gather's result to
``OUT/result_rank<N>.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

asked: list[str] = []
_init_process_group = dist.init_process_group


def _init_recorded(*args: Any, backend: str | None = None, **kwargs: Any) -> None:
    asked.append(str(backend))
    _init_process_group(*args, backend="gloo", **kwargs)


torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2
torch.cuda.set_device = lambda device: None
dist.init_process_group = _init_recorded
dist.get_backend = lambda group=None: asked[-1]

from accel_convert.runtime import Accelerator, PartialState  # noqa: E402

on_import = PartialState()
on_import_facts = [on_import.device.type, on_import.backend]


def main() -> None:
    out = Path(sys.argv[1])
    accelerator = Accelerator(cpu=True)
    gathered = accelerator.gather(torch.tensor([accelerator.process_index]))
    partial = PartialState()
    result = {
        "on_import": on_import_facts,
        "accelerator": [accelerator.device.type, accelerator.state.backend, str(accelerator.distributed_type)],
        "partial_state": [partial.device.type, partial.backend],
        "asked": asked,
        "gathered": gathered.tolist(),
    }
    (out / f"result_rank{accelerator.process_index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
