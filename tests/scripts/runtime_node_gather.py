"""One worker of a two-node run: report the state and a gather across nodes (rank 0 prints)."""

from __future__ import annotations

import json
import os

import torch

from accel_convert.runtime import Accelerator

accelerator = Accelerator()
gathered = accelerator.gather(torch.tensor([accelerator.process_index * 10 + 1]))
hosts = accelerator.gather_object([os.environ.get("GROUP_RANK", "?")])
if accelerator.is_main_process:
    print(
        "NODES "
        + json.dumps(
            {
                "num_processes": accelerator.num_processes,
                "distributed_type": accelerator.distributed_type.value,
                "gathered": gathered.tolist(),
                "node_ranks": hosts,
            }
        ),
        flush=True,
    )
accelerator.end_training()
