"""``Accelerator.agree_random_state()`` in one launch: each rank first draws from generators its
process seeded on its own, then agrees, then draws again; every rank writes what it drew (and
whether agreeing changed anything on one process) to ``OUT/result_rank<N>.json``."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

from accel_convert.runtime import Accelerator


def draws() -> list[float]:
    return [random.random(), float(np.random.rand()), float(torch.rand(()))]


def main() -> None:
    out = Path(sys.argv[1])
    accelerator = Accelerator()
    before = draws()
    states = (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist())
    accelerator.agree_random_state()
    unchanged = states == (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist())
    result = {"before": before, "after": draws(), "unchanged": unchanged, "processes": accelerator.num_processes}
    (out / f"result_rank{accelerator.process_index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
