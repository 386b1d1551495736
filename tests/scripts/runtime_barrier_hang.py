"""A barrier only rank 0 reaches (the classic bug: ``wait_for_everyone`` inside ``if is_main_process``).

``runtime_barrier_hang.py OUT_DIR``: rank 1 goes on to a collective of its own, so both ranks
wait, at different lines, for a partner that never comes. OUT_DIR/start holds the time the ranks
part ways.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from accel_convert.runtime import Accelerator

accelerator = Accelerator(cpu=True)
accelerator.wait_for_everyone()  # a good one first: barriers that meet still pass
if accelerator.is_main_process:
    Path(sys.argv[1], "start").write_text(repr(time.time()))
    accelerator.wait_for_everyone()  # RANK0_BARRIER
else:
    accelerator.reduce(torch.ones(1))  # RANK1_COLLECTIVE
print("passed", accelerator.process_index, flush=True)
