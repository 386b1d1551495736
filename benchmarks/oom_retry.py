"""How long from one rank's out-of-memory error until every rank trains again at the smaller size.

``python benchmarks/oom_retry.py [--repeats N]`` starts 2 ranks with torchrun (Gloo, CPU) and runs a
small DDP training under ``runtime.find_executable_batch_size`` several times. In each run rank 1
raises a simulated ``torch.OutOfMemoryError`` at step 3 at batch size 32, either before its forward
pass (rank 0 then waits in the gradient all-reduce) or inside its backward pass. The figure is the
time from that raise until the last rank has finished its first step at batch size 16: the vote
through the store, releasing and rebuilding the process group, and re-creating the model, optimizer
and loader (the decorated function starts over, as in Accelerate).

With ``--hold-models`` the script keeps every DDP model referenced from outside the function, so
the failing rank cannot free its process group: its peer is then released by the collective bound
(``--bound``), which is the worst case.

For comparison, Accelerate's decorator has no cross-rank step: rank 0 would stay in the all-reduce
until Gloo's timeout (30 minutes by default) and then fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def worker(out_dir: str, repeats: int, hold_models: bool) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    sys.path.insert(0, str(REPO))
    from accel_convert.runtime.memory import find_executable_batch_size

    class FailInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, armed):  # type: ignore[override]
            ctx.armed = armed
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            if ctx.armed:
                marks["oom"] = time.time()
                raise torch.OutOfMemoryError("CUDA out of memory. (simulated)")
            return grad, None

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = torch.nn.Linear(8, 32), torch.nn.Linear(32, 1)
            self.fail_backward = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # Between the layers: the failing rank never finishes its gradients, so its peer
            # waits in DDP's all-reduce for a bucket that never comes.
            return self.second(FailInBackward.apply(torch.relu(self.first(x)), self.fail_backward))

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    inputs = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    dataset = torch.utils.data.TensorDataset(inputs, inputs.sum(1, keepdim=True))
    results = []
    kept = []  # --hold-models: references from outside the decorated function
    for where in ["forward", "backward"] * repeats:
        marks: dict[str, float] = {}

        @find_executable_batch_size(starting_batch_size=32)
        def train(batch_size: int) -> None:
            net = Net()
            model = DistributedDataParallel(net)
            if hold_models:
                kept.append(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=0)
            loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler)
            for step, (x, y) in enumerate(loader):
                failing = rank == 1 and batch_size > 16 and step == 3
                if failing and where == "forward":
                    marks["oom"] = time.time()
                    raise torch.OutOfMemoryError("CUDA out of memory. (simulated)")
                net.fail_backward = failing and where == "backward"
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if batch_size == 16 and step == 0:
                    marks["first_reduced_step"] = time.time()

        train()
        results.append({"where": where, **marks})
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def launch(repeats: int, bound_s: int, hold_models: bool) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as out_dir:
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            TORCH_CPP_LOG_LEVEL="ERROR",
            ACCEL_CONVERT_OOM_COLLECTIVE_TIMEOUT=str(bound_s),
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                "2",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                str(_free_port()),
                __file__,
                "--worker",
                out_dir,
                "--repeats",
                str(repeats),
                *(["--hold-models"] if hold_models else []),
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=900,
        )
        ranks = [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in (0, 1)]
    seconds: dict[str, list[float]] = {"forward": [], "backward": []}
    for run0, run1 in zip(*ranks):
        resumed = max(run0["first_reduced_step"], run1["first_reduced_step"])
        seconds[run1["where"]].append(resumed - run1["oom"])
    return seconds


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bound", type=int, default=300, help="collective bound in seconds (the default)")
    parser.add_argument(
        "--hold-models",
        action="store_true",
        help="keep every DDP model referenced from outside (the bound then frees the peer)",
    )
    parser.add_argument("--worker", metavar="OUT_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.repeats, args.hold_models)
        return
    started = time.time()
    seconds = launch(args.repeats, args.bound, args.hold_models)
    held = ", models held outside the call" if args.hold_models else ""
    print(
        f"find_executable_batch_size, 2 ranks (Gloo, CPU), collective bound {args.bound} s{held}, "
        f"{args.repeats} runs per case ({time.time() - started:.0f} s in all):"
    )
    for where, values in seconds.items():
        print(
            f"  OOM in rank 1's {where:<8} pass -> every rank training at the smaller size: "
            f"median {statistics.median(values):.2f} s, max {max(values):.2f} s"
        )


if __name__ == "__main__":
    main()
