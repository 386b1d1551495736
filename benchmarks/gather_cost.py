"""What one ``gather_for_metrics`` call costs, ``runtime`` against Hugging Face Accelerate.

Run under torchrun (CPU, Gloo)::

    torchrun --nproc_per_node 2 benchmarks/gather_cost.py [--calls 200] [--rounds 5]

Each round times ``--calls`` calls of ``gather_for_metrics`` on a (64, 10) float tensor and on a
dict of three tensors (logits, labels, a mask), first with ``runtime.Accelerator`` then with
Accelerate's (both share the process group Accelerate's state creates), outside any loader so no
remainder is dropped. Rank 0 prints the median milliseconds per call of each and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


def _payloads(rank: int) -> dict[str, Any]:
    logits = torch.full((64, 10), float(rank))
    return {
        "tensor (64,10)": logits,
        "dict of 3": {"logits": logits, "labels": torch.arange(64), "mask": torch.ones(64, dtype=torch.bool)},
    }


def _time_calls(gather: Callable[[Any], Any], payload: Any, calls: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        gather(payload)
    dist.barrier()
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import accelerate  # creates the process group both sides use

    theirs = accelerate.Accelerator(cpu=True)
    from accel_convert.runtime.accelerator import Accelerator

    ours = Accelerator(cpu=True)
    payloads = _payloads(ours.process_index)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, payload in payloads.items():
            for side, accelerator in (("runtime", ours), ("accelerate", theirs)):
                elapsed = _time_calls(accelerator.gather_for_metrics, payload, args.calls)
                times.setdefault((name, side), []).append(elapsed)
    if ours.is_main_process:
        print(f"{ours.num_processes} ranks, {args.calls} calls x {args.rounds} rounds, median ms per call")
        for name in payloads:
            mine = statistics.median(times[name, "runtime"])
            other = statistics.median(times[name, "accelerate"])
            print(f"  {name:15s} runtime {mine:.3f}  accelerate {other:.3f}  ratio {mine / other:.2f}")
    dist.barrier()
    dist.destroy_process_group()  # leave no rank behind at exit


if __name__ == "__main__":
    main()
