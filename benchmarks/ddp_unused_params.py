"""Per-step cost of our DDP default (find_unused_parameters for the first step, then plain DDP when
every parameter is used) against plain DDP, ``static_graph=True`` and ``find_unused_parameters=True``,
on a model that uses all its parameters (2 CPU ranks, Gloo).

    python benchmarks/ddp_unused_params.py [--steps 60] [--hidden 512] [--layers 6]

Prints the median and the fastest step time per mode and their ratios to plain DDP. The modes
are interleaved in rounds so that load from other processes on the machine hits them alike; on a
busy machine the fastest step is the steadier estimate of a mode's own cost.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from accel_convert.runtime.ddp import wrap_in_ddp

#: The handler kwargs each mode starts from ({} is a script that sets nothing: the runtime's default).
MODES = {
    "plain DDP": {"static_graph": False},
    "runtime default": {},
    "static_graph=True": {"static_graph": True},
    "find_unused_parameters=True": {"find_unused_parameters": True},
}


def make_model(hidden: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU()) for _ in range(layers)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(hidden, 1))


def time_steps(model: torch.nn.Module, steps: int, hidden: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(64, hidden)
    timings = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        model(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        timings.append(time.perf_counter() - start)
    return timings


def worker(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    models = {
        name: wrap_in_ddp(make_model(args.hidden, args.layers), torch.device("cpu"), options)
        for name, options in MODES.items()
    }
    for model in models.values():
        time_steps(model, 5, args.hidden)  # warm-up: first iterations record graphs, rebuild buckets
    samples: dict[str, list[float]] = {name: [] for name in MODES}
    for _ in range(args.rounds):
        for name, model in models.items():
            samples[name] += time_steps(model, args.steps // args.rounds, args.hidden)
    if rank == 0:
        baseline = statistics.median(samples["plain DDP"])
        fastest_baseline = min(samples["plain DDP"])
        print(
            f"{args.layers} x Linear({args.hidden}) all parameters used, 2 ranks (gloo, 1 thread each), "
            f"{args.steps} steps per mode"
        )
        for name, timings in samples.items():
            median, fastest = statistics.median(timings), min(timings)
            print(
                f"{name:32s} median {median * 1e3:6.2f} ms (x{median / baseline:5.3f})   "
                f"fastest {fastest * 1e3:6.2f} ms (x{fastest / fastest_baseline:5.3f})"
            )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(worker, args=(2, port, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
