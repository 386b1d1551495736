"""How much does ``runtime.Accelerator`` add to every training step?

The same model, data and optimizer are trained by

1. a plain single-process PyTorch loop (1 process only),
2. a hand-written ``DistributedDataParallel`` loop with ``DistributedSampler`` (2+ processes; also
   with ``static_graph=True``, the runtime's default, to tell that choice's cost from the runtime's),
3. ``runtime.Accelerator``,
4. Hugging Face Accelerate,

interleaved in rounds inside one launch (the variants share the process group, the data and the
machine's state at that moment), and the median per-step time of each is reported together with
the ratios docs/performance.md quotes: (3)/(1) on one process, (3)/(2) on several, and (3)/(4) everywhere.
A ratio is the median of the per-round ratios (the variants of a round run back to back, so slow
drifts of a shared machine cancel), with a distribution-free 95% interval for that median.
Each round is one full epoch over a fixed synthetic dataset, so every variant runs the same
number of steps per round and every prepared loader finishes its epoch cleanly.

Data loading throughput is measured the same way, batches per second with the same workers: a
prepared loader against what a hand-written script iterates (the plain ``DataLoader`` on one
process; ``DataLoader`` + ``DistributedSampler`` on several, so both yield one rank's share),
each timed epoch starting from a barrier (see ``loader_throughput``).

Usage::

    python benchmarks/runtime_overhead.py                  # CPU: 1 and 2 processes (Gloo)
    python benchmarks/runtime_overhead.py --gpu            # one process on a CUDA GPU
    python benchmarks/runtime_overhead.py --quick          # smoke run, tiny sizes
    python benchmarks/runtime_overhead.py --loader-only    # data-loading throughput only (seconds)
    python benchmarks/runtime_overhead.py --accumulation 4 --nproc 2 --models mlp --precisions fp32
        # gradient accumulation over 4 micro-steps: DDP with no_sync on the 3 that do not step,
        # runtime and Accelerate with accumulate(); times are per micro-step

Sizes: the MLP is 512→1024→1024→10 with batch 256 everywhere. The transformer is 6 layers, width
512, sequence 256, batch 32 on a GPU; on CPU a full step of that takes seconds per step on two
cores, so CPU mode uses sequence 64 and batch 8 (same layers and width).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))


# --------------------------------------------------------------------------------------------
# Worker side: runs inside each process of a launch.
# --------------------------------------------------------------------------------------------


def build_model(kind: str, width: int):
    import torch
    from torch import nn

    if kind == "mlp":
        return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))

    class TinyTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(width, nhead=8, dim_feedforward=4 * width, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
            self.head = nn.Linear(width, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x).mean(dim=1))

    return TinyTransformer()


def build_data(kind: str, batch: int, seq: int, width: int, steps: int, world: int):
    """A dataset of exactly ``steps`` global batches, so each round is one whole epoch."""
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    n = steps * batch * world
    if kind == "mlp":
        inputs = torch.randn(n, 512, generator=generator)
    else:
        inputs = torch.randn(n, seq, width, generator=generator)
    targets = torch.randint(0, 10, (n,), generator=generator)
    return TensorDataset(inputs, targets)


def make_variants(args, device, world: int, rank: int) -> dict[str, Callable[[], float]]:
    """Each variant: a closure that trains one epoch and returns its seconds per step."""
    import torch
    from torch.nn import functional as F
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    dtype = torch.bfloat16 if args.precision == "bf16" else None
    dataset = build_data(args.model, args.batch, args.seq, args.width, args.steps, world)

    def timed_epoch(loader, step_fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        count = 0
        for inputs, targets in loader:
            step_fn(inputs, targets)
            count += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / max(count, 1)

    def autocast():
        return (
            torch.autocast(device.type, dtype=dtype)
            if dtype is not None
            else torch.autocast(device.type, enabled=False)
        )

    variants: dict[str, Callable[[], float]] = {}

    if world == 1:
        torch.manual_seed(0)
        plain_model = build_model(args.model, args.width).to(device)
        plain_opt = torch.optim.SGD(plain_model.parameters(), lr=1e-3)
        plain_loader = DataLoader(dataset, batch_size=args.batch, shuffle=True)

        def plain_step(x, y):
            x, y = x.to(device), y.to(device)
            with autocast():
                loss = F.cross_entropy(plain_model(x).float(), y)
            loss.backward()
            plain_opt.step()
            plain_opt.zero_grad(set_to_none=True)

        variants["plain"] = lambda: timed_epoch(plain_loader, plain_step)
    else:
        from torch.nn.parallel import DistributedDataParallel

        def ddp_variant(static_graph: bool) -> Callable[[], float]:
            """The hand-written loop: DDP, DistributedSampler re-seeded every epoch."""
            torch.manual_seed(0)
            ddp_model = DistributedDataParallel(
                build_model(args.model, args.width).to(device),
                static_graph=static_graph,
                device_ids=[device.index] if device.type == "cuda" else None,
            )
            ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=1e-3)
            sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
            ddp_loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)
            epoch = [0]

            micro_steps = [0]

            def ddp_step(x, y):
                x, y = x.to(device), y.to(device)
                micro_steps[0] += 1
                syncs = micro_steps[0] % args.accumulation == 0
                # The hand-written accumulation loop: no all-reduce on the micro-steps that do not step.
                with contextlib.nullcontext() if syncs else ddp_model.no_sync():
                    with autocast():
                        loss = F.cross_entropy(ddp_model(x).float(), y)
                    (loss / args.accumulation if args.accumulation > 1 else loss).backward()
                if syncs:
                    ddp_opt.step()
                    ddp_opt.zero_grad(set_to_none=True)

            def ddp_epoch() -> float:
                sampler.set_epoch(epoch[0])
                epoch[0] += 1
                return timed_epoch(ddp_loader, ddp_step)

            return ddp_epoch

        variants["ddp"] = ddp_variant(static_graph=False)
        # The same loop with DDP's static_graph=True, which runtime.Accelerator sets by default
        # (what lets unused parameters work with no flag): splits the gap to (3) into what that
        # choice costs and what the runtime's own code costs.
        if args.accumulation == 1:  # torch asserts when a static graph's first iteration is in no_sync
            variants["ddp_static_graph"] = ddp_variant(static_graph=True)

    def accelerator_variant(accelerator):
        torch.manual_seed(0)
        model = build_model(args.model, args.width)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = DataLoader(dataset, batch_size=args.batch, shuffle=True)
        model, opt, loader = accelerator.prepare(model, opt, loader)

        def step(x, y):
            with accelerator.accumulate(model) if args.accumulation > 1 else contextlib.nullcontext():
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()

        return lambda: timed_epoch(loader, step)

    from accel_convert import runtime

    precision = "no" if args.precision == "fp32" else args.precision
    steps = args.accumulation
    variants["runtime"] = accelerator_variant(
        runtime.Accelerator(mixed_precision=precision, gradient_accumulation_steps=steps)
    )
    if not args.skip_accelerate:
        import accelerate

        variants["accelerate"] = accelerator_variant(
            accelerate.Accelerator(
                mixed_precision=precision, cpu=device.type == "cpu", gradient_accumulation_steps=steps
            )
        )
    return variants


def loader_throughput(args, world: int, rank: int) -> dict[str, float]:
    """Batches per second through the loader a hand-written script would use (a plain shuffled
    DataLoader on one process, DataLoader + DistributedSampler on several) and through a plain
    shuffled DataLoader prepared by the runtime: both yield this rank's share of the epoch.

    With several processes every timed epoch starts from a barrier. The prepared loader agrees on
    its shuffling generator with a broadcast at each epoch start, which waits for the slowest
    rank; without the barrier, rank 0's timer for it would also hold however far the other rank
    had fallen behind in the unsynchronised plain epoch before (in training, the per-step
    all-reduce keeps ranks in step, so that lag never builds up). The order of the two loaders
    alternates between rounds, and each gets one untimed warm-up epoch.
    """
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from accel_convert import runtime

    dataset = build_data("mlp", args.batch, args.seq, args.width, args.steps * 4, world)
    if world == 1:
        plain = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=0)
    else:
        plain = DataLoader(
            dataset,
            batch_size=args.batch,
            num_workers=0,
            sampler=DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True),
        )
    prepared = runtime.Accelerator().prepare(DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=0))
    aligned = world > 1 and dist.is_initialized()

    def rate(loader) -> float:
        if aligned:
            dist.barrier()  # outside the timer: start both ranks together (see above)
        start = time.perf_counter()
        count = sum(1 for _ in loader)
        return count / (time.perf_counter() - start)

    loaders = {"plain_loader": plain, "prepared_loader": prepared}
    for loader in loaders.values():
        rate(loader)
    samples: dict[str, list[float]] = {name: [] for name in loaders}
    for round_index in range(args.rounds):
        order = list(loaders) if round_index % 2 == 0 else list(reversed(loaders))
        for name in order:
            samples[name].append(rate(loaders[name]))
    return {name: statistics.median(values) for name, values in samples.items()}


def watcher_cpu_seconds() -> float | None:
    """CPU time (user + system) the runtime's failure watcher thread has used, from
    /proc/self/task/<tid>/stat; None without one (one process) or without /proc."""
    import threading

    watcher = next((t for t in threading.enumerate() if t.name == "accel-convert-failure-watcher"), None)
    if watcher is None or watcher.native_id is None:
        return None
    try:
        fields = Path(f"/proc/self/task/{watcher.native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of stat)


def worker(args) -> None:
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    from accel_convert import runtime

    state_device = runtime.Accelerator().device  # initialises the process group under torchrun
    device = torch.device(state_device)
    if args.loader_only:
        result = {
            "model": args.model,
            "precision": args.precision,
            "world": world,
            "step_seconds": {},
            "loader_batches_per_second": loader_throughput(args, world, rank),
        }
        if rank == 0:
            print("RESULT " + json.dumps(result), flush=True)
        return
    variants = make_variants(args, device, world, rank)
    names = list(variants)
    for name in names:  # warm-up epoch for each
        variants[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    watcher_before, started = watcher_cpu_seconds(), time.perf_counter()
    for round_index in range(args.rounds):
        # Rotate the order so no variant always runs first (caches, clocks).
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            times[name].append(variants[name]())
    watcher_after, elapsed = watcher_cpu_seconds(), time.perf_counter() - started
    result = {
        "model": args.model,
        "precision": args.precision,
        "world": world,
        # CPU seconds the failure watcher thread (runtime.job_failure) used per second of the
        # timed rounds, on rank 0: what it can take from the training step at most.
        "watcher_cpu_per_second": (
            None if watcher_before is None or watcher_after is None else (watcher_after - watcher_before) / elapsed
        ),
        "accumulation": args.accumulation,
        "step_seconds": {name: statistics.median(values) for name, values in times.items()},
        "round_seconds": times,
    }
    if args.model == "mlp" and args.precision == "fp32":
        result["loader_batches_per_second"] = loader_throughput(args, world, rank)
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


# --------------------------------------------------------------------------------------------
# Driver side: launches workers and prints the table.
# --------------------------------------------------------------------------------------------


def launch(worker_args: list[str], nproc: int) -> list[dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // nproc)))
    env["ACCELERATE_USE_CPU"] = "1" if "--gpu" not in worker_args else env.get("ACCELERATE_USE_CPU", "")
    if nproc == 1:
        cmd = [sys.executable, __file__, "--worker", *worker_args]
    else:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            __file__,
            "--worker",
            *worker_args,
        ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed ({' '.join(cmd)}):\n{proc.stdout}\n{proc.stderr}")
    return [json.loads(line[len("RESULT ") :]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3f}" if a and b else "—"


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics x(k) and x(n+1-k) with
    the largest k for which the chance that fewer than k values fall below the median (a
    Binomial(n, 1/2) tail) stays within (1 - confidence) / 2. Needs 6 or more values at 95%."""
    ordered = sorted(values)
    n = len(ordered)
    tail, k = 0.0, 0
    while True:
        tail += math.comb(n, k) / 2**n  # P(exactly k values below the median)
        if tail > (1 - confidence) / 2:
            break
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def paired_ratio(row: dict, numerator: str, denominator: str) -> str:
    """Median of the per-round ratios (the variants of one round ran back to back, so the
    machine's slow drifts cancel) with its 95% interval."""
    rounds = row.get("round_seconds", {})
    if numerator not in rounds or denominator not in rounds:
        return "—"
    ratios = [a / b for a, b in zip(rounds[numerator], rounds[denominator])]
    low, high = median_interval(ratios)
    return f"{statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="mlp", choices=["mlp", "transformer"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--gpu", action="store_true", help="one process on a CUDA GPU")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: a smoke run")
    parser.add_argument("--nproc", type=int, nargs="+", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch (one round)")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--skip-accelerate", action="store_true")
    parser.add_argument(
        "--accumulation",
        type=int,
        default=1,
        help="micro-steps per optimizer step (DDP: no_sync; runtime/Accelerate: accumulate())",
    )
    parser.add_argument(
        "--loader-only",
        action="store_true",
        help="only the data-loading throughput (MLP data, fp32): no training variants",
    )
    parser.add_argument("--models", nargs="+", default=["mlp", "transformer"], choices=["mlp", "transformer"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    args = parser.parse_args()

    if args.worker:
        worker(args)
        return

    nprocs = args.nproc or ([1] if args.gpu else [1, 2])
    rounds = args.rounds or (1 if args.quick else 7)
    rows = []
    models, precisions = (["mlp"], ["fp32"]) if args.loader_only else (args.models, args.precisions)
    for model in models:
        if model == "mlp":
            batch, seq, steps = args.batch or 256, 0, args.steps or (2 if args.quick else 20)
        else:
            batch = args.batch or (32 if args.gpu else 8)
            seq = args.seq or (256 if args.gpu else 64)
            steps = args.steps or (2 if args.quick else (20 if args.gpu else 4))
        for precision in precisions:
            for nproc in nprocs:
                worker_args = [
                    "--model",
                    model,
                    "--precision",
                    precision,
                    "--rounds",
                    str(rounds),
                    "--steps",
                    str(steps),
                    "--batch",
                    str(batch),
                    "--seq",
                    str(seq),
                    "--width",
                    str(args.width if not args.quick else 64),
                ]
                if args.gpu:
                    worker_args.append("--gpu")
                if args.skip_accelerate:
                    worker_args.append("--skip-accelerate")
                if args.accumulation > 1:
                    worker_args += ["--accumulation", str(args.accumulation)]
                if args.loader_only:
                    worker_args.append("--loader-only")
                for result in launch(worker_args, nproc):
                    rows.append(result)
                    print(json.dumps(result), file=sys.stderr, flush=True)

    print_step_table([row for row in rows if row["step_seconds"]])
    for row in rows:
        if "ddp_static_graph" in row.get("round_seconds", {}):
            print(
                f"\n{row['model']} {row['precision']}, {row['world']} processes: DDP with static_graph=True / DDP = "
                f"{paired_ratio(row, 'ddp_static_graph', 'ddp')}; runtime / DDP with static_graph=True = "
                f"{paired_ratio(row, 'runtime', 'ddp_static_graph')}"
            )
    for row in rows:
        if row.get("watcher_cpu_per_second") is not None:
            print(
                f"\n{row['model']} {row['precision']}, {row['world']} processes: the failure watcher thread used "
                f"{row['watcher_cpu_per_second']:.2e} CPU seconds per second of training (rank 0)"
            )
    for row in rows:
        if "loader_batches_per_second" in row:
            rates = row["loader_batches_per_second"]
            print(
                f"\nData loading, {row['world']} process(es): prepared/plain throughput = "
                f"{ratio(rates['prepared_loader'], rates['plain_loader'])} "
                f"({rates['prepared_loader']:.0f} vs {rates['plain_loader']:.0f} batches/s)"
            )


def print_step_table(rows: list[dict]) -> None:
    """The per-step table docs/performance.md quotes (nothing when only the loaders were measured)."""
    if not rows:
        return
    print(
        "| model | precision | processes (accumulation) | reference | reference s/step | runtime s/step | runtime / reference "
        "(per-round median [95% interval]) | accelerate s/step | runtime / accelerate (per-round) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        times = row["step_seconds"]
        reference = "plain" if row["world"] == 1 else "ddp"
        steps = row.get("accumulation", 1)
        print(
            f"| {row['model']} | {row['precision']} | {row['world']}{f' (k={steps})' if steps > 1 else ''} | {reference} | {times[reference]:.5f} "
            f"| {times['runtime']:.5f} | {paired_ratio(row, 'runtime', reference)} "
            f"| {times.get('accelerate', 0):.5f} | {paired_ratio(row, 'runtime', 'accelerate')} |"
        )


if __name__ == "__main__":
    main()
