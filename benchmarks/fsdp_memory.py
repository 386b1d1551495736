"""Parameter + gradient + optimizer-state memory per rank under FSDP against DDP, in the same run.

    python benchmarks/fsdp_memory.py [--nproc 2] [--layers 8] [--hidden 1024]

Each rank prepares the same model (``layers`` x Linear(hidden, hidden), one FSDP unit per layer)
with AdamW through ``runtime.Accelerator``, first without a plugin (DDP), then with
``FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap")``, and trains one step. Right
after ``backward`` (parameters, gradients and the optimizer's moments all alive: the peak of the
persistent training state), it adds up the bytes of every tensor this rank holds for them (the
local shard of a DTensor). FSDP also gathers one unit's full weights (and its full gradient) at a
time during forward/backward; that transient is reported separately, computed from the largest
unit. On a GPU the allocator's peak (``torch.cuda.max_memory_allocated``) over the step is printed
too; on the CPU there is no allocator peak to read, so only the tensor count is reported.

Expected: FSDP/DDP about 1/N for the persistent state (each rank keeps 1/N of every tensor).

    python benchmarks/fsdp_memory.py --peak-rss [--procs 1,2,4] [--layers 12] [--hidden 2048]

Peak resident memory (RSS) per rank, the process's real footprint rather than a tensor count:
for each number of processes, three fresh launches (DDP; FSDP; FSDP with
``cpu_ram_efficient_loading``, the ranks other than 0 building the model under
``init_empty_weights``) of ``layers`` x Linear(hidden, hidden) without bias (default 12 x 2048:
50M float32 parameters, 192 MiB). Each rank first prepares and trains a tiny model the same way
(imports and first-use allocations are paid there), then resets its peak (``VmHWM``, through
/proc/self/clear_refs) and reports by how much the peak rose above the RSS before building the
model: once after ``prepare`` and once after two AdamW steps. Workers run with
``MALLOC_MMAP_THRESHOLD_=65536`` so that a freed tensor goes back to the system at once and the
RSS follows the live tensors (glibc would otherwise keep freed blocks and hide later growth).

Expected, in units of the model's size M: DDP prepare 1 M, training ~4 M (weights, gradients,
two moments); FSDP prepare 1 M + M/N (the full model, then the shards), training ~4 M/N + one
gathered unit; FSDP-meta prepare on ranks > 0 M/N + one tensor in flight (rank 0 still 1 M + M/N).

    python benchmarks/fsdp_memory.py --gpu-cap [--layers 8] [--hidden 8192]

One GPU, one rank: caps the process at half of what the unsharded training state needs
(``torch.cuda.set_per_process_memory_fraction``), then trains the same model without a plugin
(expected: out of memory) and with FSDP units per layer and ``cpu_offload=True`` (shards and
optimizer state in host memory, one layer gathered on the GPU at a time; expected: trains, with
``max_memory_allocated`` under the cap). Prepared for a lent GPU; not run yet.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import socket
import tempfile
from typing import Any

import torch
import torch.multiprocessing as mp


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes this rank stores for ``tensor`` (its own shard for a DTensor)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def training_state_bytes(model: torch.nn.Module, optimizer: Any) -> dict[str, int]:
    parameters = list(model.parameters())
    moments = [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]
    return {
        "parameters": sum(tensor_bytes(p) for p in parameters),
        "gradients": sum(tensor_bytes(p.grad) for p in parameters if p.grad is not None),
        "optimizer": sum(tensor_bytes(m) for m in moments),
    }


def make_model(layers: int, hidden: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(hidden, hidden) for _ in range(layers)], torch.nn.Linear(hidden, 1))


def measure(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    from accel_convert.runtime import Accelerator, FullyShardedDataParallelPlugin
    from accel_convert.runtime.state_objects import AcceleratorState

    AcceleratorState._reset_state()
    plugin = (
        FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap", min_num_params=args.hidden * args.hidden)
        if engine == "fsdp"
        else None
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = make_model(args.layers, args.hidden)
    unit_bytes = (args.hidden * args.hidden + args.hidden) * 4  # one Linear's full fp32 weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    cuda = accelerator.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    batch = torch.randn(8, args.hidden, device=accelerator.device)
    for _ in range(2):  # the second step has the optimizer's moments
        accelerator.backward(model(batch).square().mean())
        counted = training_state_bytes(model, optimizer.optimizer)
        optimizer.step()
        optimizer.zero_grad()
    result: dict[str, Any] = {**counted, "total": sum(counted.values())}
    result["transient"] = 2 * unit_bytes if engine == "fsdp" else 0  # one gathered unit + its full gradient
    if cuda:
        result["cuda_peak"] = torch.cuda.max_memory_allocated()
    return result


def worker(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    results = {engine: measure(engine, args) for engine in ("ddp", "fsdp")}
    if rank == 0:
        ddp, fsdp = results["ddp"], results["fsdp"]
        mib = 1 << 20
        print(f"{args.layers} x Linear({args.hidden}) + head, AdamW, {world_size} ranks; bytes on rank 0")
        for part in ("parameters", "gradients", "optimizer", "total"):
            print(
                f"{part:12s} DDP {ddp[part] / mib:9.2f} MiB   FSDP {fsdp[part] / mib:9.2f} MiB   ratio {fsdp[part] / ddp[part]:.3f}"
            )
        peak = fsdp["total"] + fsdp["transient"]
        print(f"FSDP + one gathered unit and its gradient: {peak / mib:.2f} MiB (ratio {peak / ddp['total']:.3f})")
        if "cuda_peak" in ddp:
            print(f"CUDA allocator peak  DDP {ddp['cuda_peak'] / mib:.2f} MiB   FSDP {fsdp['cuda_peak'] / mib:.2f} MiB")
    from accel_convert.runtime.state import shut_down_process_group

    shut_down_process_group()


def rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or its peak since the last reset (``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")  # VmHWM := VmRSS (Linux >= 4.0)


def rss_run(engine: str, layers: int, hidden: int) -> dict[str, float]:
    """Build, prepare and train two steps under ``engine``; peak RSS growth (MiB) after each."""
    from accel_convert.runtime import Accelerator, FullyShardedDataParallelPlugin, init_empty_weights
    from accel_convert.runtime.state_objects import AcceleratorState

    AcceleratorState._reset_state()
    plugin = (
        FullyShardedDataParallelPlugin(
            auto_wrap_policy="size_based_wrap",
            min_num_params=hidden * hidden,
            cpu_ram_efficient_loading=engine == "fsdp_meta",
        )
        if engine != "ddp"
        else None
    )
    gc.collect()
    reset_peak_rss()
    before = rss_mib()
    accelerator = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    empty = engine == "fsdp_meta" and accelerator.process_index != 0
    with init_empty_weights() if empty else contextlib.nullcontext():
        model = torch.nn.Sequential(*[torch.nn.Linear(hidden, hidden, bias=False) for _ in range(layers)])
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    accelerator.wait_for_everyone()
    prepared = rss_mib("VmHWM") - before
    batch = torch.randn(8, hidden)
    for _ in range(2):
        accelerator.backward(model(batch).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    accelerator.wait_for_everyone()
    return {"prepare": prepared, "train": rss_mib("VmHWM") - before}


def rss_worker(rank: int, world_size: int, port: int, engine: str, args: argparse.Namespace, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    rss_run(engine, 2, 64)  # warm-up: imports and first-use allocations are not the model's
    result = rss_run(engine, args.layers, args.hidden)
    with open(os.path.join(out, f"{engine}_{world_size}_{rank}.json"), "w", encoding="ascii") as file:
        json.dump(result, file)
    from accel_convert.runtime.state import shut_down_process_group

    shut_down_process_group()


def peak_rss(args: argparse.Namespace) -> None:
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # read by glibc in each spawned worker
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    model_mib = args.layers * args.hidden * args.hidden * 4 / 2**20
    print(f"{args.layers} x Linear({args.hidden}, bias=False): {model_mib:.0f} MiB float32; AdamW")
    print("peak RSS growth per rank (MiB; x = multiple of the model's size), rank 0 | the other ranks' largest")
    print(f"{'N':>2} {'engine':10s} {'after prepare':>30s} {'after 2 steps':>30s}")
    with tempfile.TemporaryDirectory() as out:
        for world_size in args.procs:
            for engine in ("ddp", "fsdp", "fsdp_meta"):
                mp.spawn(rss_worker, args=(world_size, free_port(), engine, args, out), nprocs=world_size, join=True)
                ranks = [read_json(os.path.join(out, f"{engine}_{world_size}_{r}.json")) for r in range(world_size)]
                cells = []
                for phase in ("prepare", "train"):
                    first = ranks[0][phase]
                    cell = f"{first:6.0f} ({first / model_mib:.2f}x)"
                    if world_size > 1:
                        other = max(rank[phase] for rank in ranks[1:])
                        cell += f" | {other:6.0f} ({other / model_mib:.2f}x)"
                    cells.append(cell)
                print(f"{world_size:>2} {engine:10s} {cells[0]:>30s} {cells[1]:>30s}", flush=True)


def read_json(path: str) -> dict[str, float]:
    with open(path, encoding="ascii") as file:
        return json.load(file)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gpu_cap_worker(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    from accel_convert.runtime import Accelerator, FullyShardedDataParallelPlugin
    from accel_convert.runtime.state import shut_down_process_group
    from accel_convert.runtime.state_objects import AcceleratorState

    parameters = args.layers * (args.hidden * args.hidden + args.hidden) + args.hidden + 1
    needed = 16 * parameters  # fp32 weights, gradients and AdamW's two moments
    cap = needed // 2
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
    mib = 1 << 20
    print(f"{parameters / 1e9:.2f}B parameters need {needed / mib:.0f} MiB to train unsharded; cap {cap / mib:.0f} MiB")
    for name, plugin in (
        ("unsharded", None),
        (
            "FSDP + cpu_offload",
            FullyShardedDataParallelPlugin(
                auto_wrap_policy="size_based_wrap", min_num_params=args.hidden * args.hidden, cpu_offload=True
            ),
        ),
    ):
        AcceleratorState._reset_state()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            accelerator = Accelerator(fsdp_plugin=plugin)
            model = make_model(args.layers, args.hidden)
            model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
            batch = torch.randn(4, args.hidden, device=accelerator.device)
            for _ in range(2):
                accelerator.backward(model(batch).square().mean())
                optimizer.step()
                optimizer.zero_grad()
            print(f"{name:20s} trained; peak {torch.cuda.max_memory_allocated() / mib:.0f} MiB")
        except torch.OutOfMemoryError:
            print(f"{name:20s} out of memory (peak {torch.cuda.max_memory_allocated() / mib:.0f} MiB)")
        accelerator = model = optimizer = None  # free the attempt before the next one
        gc.collect()
    shut_down_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--layers", type=int, help="default 8 (12 with --peak-rss)")
    parser.add_argument("--hidden", type=int, help="default 1024 (2048 with --peak-rss)")
    parser.add_argument("--gpu-cap", action="store_true", help="the one-GPU memory-cap check (see above)")
    parser.add_argument("--peak-rss", action="store_true", help="peak RSS per rank: DDP, FSDP, FSDP-meta (see above)")
    parser.add_argument("--procs", default="1,2,4", help="--peak-rss: the numbers of processes to run")
    args = parser.parse_args()
    args.layers = args.layers or (12 if args.peak_rss else 8)
    args.hidden = args.hidden or (2048 if args.peak_rss else 1024)
    if args.peak_rss:
        args.procs = [int(n) for n in args.procs.split(",")]
        peak_rss(args)
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    if args.gpu_cap:
        mp.spawn(gpu_cap_worker, args=(1, port, args), nprocs=1, join=True)
        return
    mp.spawn(worker, args=(args.nproc, port, args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
