"""Rank 0's state of every global random generator, taken by all processes.

A script that draws before it seeds (or never seeds) draws its learning rate, its split or its
checkpoint's name from generators each process seeded on its own: Python's ``random`` and NumPy
from the operating system, torch from a fresh random seed. Once the processes exist, taking rank
0's state of each makes every later draw the same on every process, as on one process; on one
process nothing is read or set, so what it computes does not change.

NumPy's state is agreed only when the script imported NumPy (the runtime never imports it); a
CUDA generator only for the device this process computes on, when it is a CUDA device. Generators
a script makes itself (``torch.Generator()``, a DataLoader's worker seeds derived from its own
generator) are not global and stay as they are.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import torch

from accel_convert.runtime.collectives import broadcast_object_list, is_distributed


def _numpy_random() -> Any:
    """``numpy.random`` when the script imported NumPy, else None."""
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "random", None)


def _states(device: torch.device) -> list[Any]:
    numpy_random = _numpy_random()
    return [
        random.getstate(),
        numpy_random.get_state() if numpy_random is not None else None,
        torch.get_rng_state(),
        torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    ]


def agree_random_state(device: torch.device, from_process: int = 0) -> None:
    """Give this process ``from_process``'s state of Python's, NumPy's and torch's (CPU and
    ``device``'s CUDA) global generators; nothing at all on one process."""
    if not is_distributed():
        return
    python_state, numpy_state, torch_state, cuda_state = broadcast_object_list(_states(device), from_process)
    random.setstate(python_state)
    numpy_random = _numpy_random()
    if numpy_random is not None and numpy_state is not None:
        numpy_random.set_state(numpy_state)
    torch.set_rng_state(torch_state)
    if cuda_state is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda_state, device)
