"""The checks that need a CUDA GPU, in one prepared run (CI has no GPU; run this when one is lent).

    torchrun --nproc_per_node 1 benchmarks/gpu_checks.py      # NCCL, CUDA OOM retry, fp16/bf16
    python benchmarks/runtime_overhead.py --gpu                # the GPU rows of the Performance table

Each check prints one ``CHECK name: ok|FAILED detail`` line (``NOT RUN (why)`` where it cannot run
here) and the script exits 1 if any failed:

- ``nccl``: under torchrun the runtime picks NCCL and ``cuda:LOCAL_RANK``; gather and reduce work.
- ``cuda_oom_retry``: ``find_executable_batch_size`` meets a *real* CUDA out-of-memory error
  (a batch that cannot fit in the GPU's memory), frees the cache and settles on a smaller size.
- ``fp16_grad_scaler``: ``mixed_precision="fp16"`` autocasts the forward to fp16, returns fp32
  outputs, uses a CUDA GradScaler, and an inf gradient skips the step and says so.
- ``bf16``: inner activations in bf16, outputs in fp32, no scaler.
- ``safe_saving``: ``save(state_dict, safe_serialization=True)`` and ``save_model`` (safetensors
  shards with an index, and ``pytorch_model.bin``) of a model on the GPU, with a tied weight and a
  bf16 layer, then ``save_model`` of an FSDP2-sharded model: the files hold the device's values
  (read with ``safetensors.torch.load_file`` where installed, else by a few lines here).
- ``verify_cuda``: ``accel-convert verify --device cuda --nproc 2`` on a shipped example
  (``fixtures/cases/accelerator_device.py``, which takes whatever accelerator exists): its
  verdicts on one process and, with two GPUs or more, on two (each rank on its own GPU, NCCL);
  with one GPU the 2-process part says ``NOT RUN (needs 2 GPUs)`` and only the 1-process verdicts
  decide. Run by rank 0 only, without the launcher's variables (verify's runs inherit the
  environment, and its 1-process runs would join this launch's group).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from accel_convert.runtime import (  # noqa: E402
    Accelerator,
    AcceleratorState,
    FullyShardedDataParallelPlugin,
    find_executable_batch_size,
)
from accel_convert.runtime.weight_files import SAFETENSORS_DTYPES  # noqa: E402


def check_nccl() -> str:
    accelerator = Accelerator()
    assert accelerator.device.type == "cuda", accelerator.device
    assert torch.distributed.get_backend() == "nccl", torch.distributed.get_backend()
    value = torch.tensor([accelerator.process_index + 1.0], device=accelerator.device)
    gathered = accelerator.gather(value)
    summed = accelerator.reduce(value, "sum")
    assert gathered.numel() == accelerator.num_processes and summed.item() == gathered.sum().item()
    return f"device {accelerator.device}, {accelerator.num_processes} rank(s), gather {gathered.tolist()}"


def check_cuda_oom_retry() -> str:
    accelerator = Accelerator()
    free_bytes, _ = torch.cuda.mem_get_info()
    # Rows of 256 MiB each: the starting size needs several times the free memory.
    row_elements = 64 * 1024 * 1024
    start = 1
    while start * row_elements * 4 < 4 * free_bytes:
        start *= 2
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=start)
    def allocate(batch_size: int) -> int:
        accelerator.free_memory()
        tried.append(batch_size)
        block = torch.empty(batch_size, row_elements, device=accelerator.device)
        block.fill_(1.0)
        return batch_size

    settled = allocate()
    assert tried[0] == start and settled < start and len(tried) >= 2, tried
    return f"free {free_bytes / 2**30:.1f} GiB; tried {tried}, settled on {settled}"


def check_fp16_grad_scaler() -> str:
    accelerator = Accelerator(mixed_precision="fp16")
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert accelerator.scaler is not None and "cuda" in str(getattr(accelerator.scaler, "_device", "cuda"))
    inputs = torch.randn(8, 64, device=accelerator.device)
    output = model(inputs)
    assert seen[-1] == torch.float16 and output.dtype == torch.float32, (seen, output.dtype)
    accelerator.backward(output.float().pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    clean_step_skipped = accelerator.optimizer_step_was_skipped
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(inputs).sum() * float("inf"))
    optimizer.step()
    optimizer.zero_grad()
    after = list(model.parameters())
    assert accelerator.optimizer_step_was_skipped and not clean_step_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    return "fp16 inner activations, fp32 output; inf step skipped and reported, parameters unchanged"


def check_bf16() -> str:
    accelerator = Accelerator(mixed_precision="bf16")
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 2))
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    model = accelerator.prepare(model)
    output = model(torch.randn(4, 32, device=accelerator.device))
    assert seen[-1] == torch.bfloat16 and output.dtype == torch.float32 and accelerator.scaler is None
    return "bf16 inner activations, fp32 output, no scaler"


class TiedModel(nn.Module):
    def __init__(self, half_layer: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 32)
        self.body = nn.Linear(32, 32).to(torch.bfloat16) if half_layer else nn.Linear(32, 32)
        self.head = nn.Linear(32, 64, bias=False)
        self.head.weight = self.embed.weight  # tied: written once in safetensors


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError:  # the format by hand: header length, JSON header, the tensors' bytes
        raw = path.read_bytes()
        length = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + length])
        header.pop("__metadata__", None)
        body = bytearray(raw[8 + length :])
        dtypes = {code: dtype for dtype, code in SAFETENSORS_DTYPES.items()}
        return {
            name: torch.frombuffer(
                body[entry["data_offsets"][0] : entry["data_offsets"][1]], dtype=dtypes[entry["dtype"]]
            )
            .reshape(entry["shape"])
            .clone()
            for name, entry in header.items()
        }
    return load_file(path)


def _load_weights_folder(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor ``save_model`` wrote into ``folder``, through the index when it is sharded."""
    indexes = list(folder.glob("*.index.json"))
    files = sorted(set(json.loads(indexes[0].read_text())["weight_map"].values())) if indexes else None
    files = files or [path.name for path in folder.iterdir() if path.suffix in (".safetensors", ".bin")]
    state: dict[str, torch.Tensor] = {}
    for file in files:
        path = folder / file
        state.update(_load_safetensors(path) if path.suffix == ".safetensors" else torch.load(path, weights_only=True))
    return state


def _same_values(saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], left_out: set[str]) -> None:
    assert set(expected) - left_out <= set(saved) <= set(expected), (sorted(saved), sorted(expected))
    for name, tensor in saved.items():
        assert tensor.dtype == expected[name].dtype and torch.equal(tensor, expected[name].cpu()), name


def check_safe_saving() -> str:
    folder = Path(tempfile.mkdtemp(prefix="gpu_checks_save_"))
    shards: list[str] = []  # read on the main process
    try:
        accelerator = Accelerator()
        torch.manual_seed(0)
        model = accelerator.prepare(TiedModel(half_layer=True))
        state = accelerator.unwrap_model(model).state_dict()
        assert state["embed.weight"].device.type == accelerator.device.type
        accelerator.save(state, folder / "state.safetensors", safe_serialization=True)
        accelerator.save_model(model, folder / "safe_shards", max_shard_size="5KB")
        accelerator.save_model(model, folder / "bin", safe_serialization=False)
        if accelerator.is_main_process:
            _same_values(_load_safetensors(folder / "state.safetensors"), state, {"head.weight"})
            shards = sorted(path.name for path in (folder / "safe_shards").iterdir())
            assert "model.safetensors.index.json" in shards and len(shards) > 2, shards
            _same_values(_load_weights_folder(folder / "safe_shards"), state, {"head.weight"})
            _same_values(_load_weights_folder(folder / "bin"), state, set())
        AcceleratorState._reset_state()
        sharding = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())
        torch.manual_seed(0)
        expected = TiedModel(half_layer=False).state_dict()
        torch.manual_seed(0)
        sharded = sharding.prepare(TiedModel(half_layer=False))
        sharding.save_model(sharded, folder / "fsdp")
        if sharding.is_main_process:
            _same_values(_load_weights_folder(folder / "fsdp"), expected, {"head.weight"})
        return f"{len(shards) - 1} safetensors shards, .bin, FSDP2 save_model: read back equal on the main process"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: The shipped example ``verify_cuda`` verifies, and its arguments (one epoch: a short run).
VERIFY_EXAMPLE = REPO_ROOT / "fixtures" / "cases" / "accelerator_device.py"
VERIFY_EXAMPLE_ARGS = ("--epochs", "1")
#: Seconds each of verify's runs may take (a 2-rank run that hangs costs the lent GPU this long).
VERIFY_RUN_TIMEOUT = 240
#: What torchrun tells the process running these checks: verify's runs inherit the environment,
#: and its 1-process runs would join this launch's group (its ``MASTER_PORT``) instead of running alone.
LAUNCHER_VARIABLES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
NEEDS_TWO_GPUS = "NOT RUN (needs 2 GPUs)"


def verify_cuda_command(script: Path, script_args: tuple[str, ...]) -> list[str]:
    """``accel-convert verify SCRIPT --device cuda`` on 2 processes, its report as JSON."""
    return [
        sys.executable,
        "-m",
        "accel_convert.converter",
        "verify",
        str(script),
        "--device",
        "cuda",
        "--nproc",
        "2",
        "--timeout",
        str(VERIFY_RUN_TIMEOUT),
        "--output-format",
        "json",
        "--",
        *script_args,
    ]


def verify_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the launcher's variables, with this checkout first on the path."""
    env = {
        name: value
        for name, value in environ.items()
        if name not in LAUNCHER_VARIABLES and not name.startswith("TORCHELASTIC_")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), environ.get("PYTHONPATH")]))
    return env


def verify_cuda_verdict(report: dict[str, Any], gpus: int) -> str:
    """One line from verify's JSON report; AssertionError naming the verdicts that fail. With fewer
    than 2 GPUs the 2-process verdicts are not judged: two ranks would share one GPU."""
    one, many = report["one_process"], report["n_processes"]
    failed = [f"1 process: {item['key']}: {item['evidence']}" for item in one if not item["holds"]]
    parts = [f"1 process: {len(one) - len(failed)}/{len(one)} verdicts hold"]
    if gpus < 2:
        parts.append(f"2 processes: {NEEDS_TWO_GPUS}")
    else:
        failed_many = [f"2 processes: {item['key']}: {item['evidence']}" for item in many if not item["holds"]]
        parts.append(f"2 processes: {len(many) - len(failed_many)}/{len(many)} verdicts hold")
        failed += failed_many
    assert not failed, "; ".join(parts + failed)
    return "; ".join(parts)


class NotRun(Exception):
    """A check that cannot run here (reported as ``NOT RUN (why)``, not as a failure)."""


def run_verify(script: Path, script_args: tuple[str, ...], environ: Mapping[str, str]) -> dict[str, Any]:
    """verify's JSON report on ``script``, copied alone into a scratch folder (each of verify's
    runs copies the working folder)."""
    folder = Path(tempfile.mkdtemp(prefix="gpu_checks_verify_"))
    try:
        shutil.copy2(script, folder / script.name)
        run = subprocess.run(
            verify_cuda_command(Path(script.name), script_args),
            cwd=folder,
            env=verify_environment(environ),
            capture_output=True,
            text=True,
            timeout=4 * VERIFY_RUN_TIMEOUT,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if run.returncode not in (0, 1):  # 0: every verdict holds, 1: one does not; else the tool failed
        raise AssertionError(f"verify exited {run.returncode}: {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout)


def check_verify_cuda() -> str:
    if int(os.environ.get("RANK", "0")) != 0:
        raise NotRun("verify runs on rank 0 of the launch only")
    if not torch.cuda.is_available():
        raise NotRun("no CUDA device")
    report = run_verify(VERIFY_EXAMPLE, VERIFY_EXAMPLE_ARGS, os.environ)
    return verify_cuda_verdict(report, torch.cuda.device_count())


CHECKS: dict[str, Callable[[], str]] = {
    "nccl": check_nccl,
    "cuda_oom_retry": check_cuda_oom_retry,
    "fp16_grad_scaler": check_fp16_grad_scaler,
    "bf16": check_bf16,
    "safe_saving": check_safe_saving,
    "verify_cuda": check_verify_cuda,
}


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: these checks need a GPU", file=sys.stderr)
        return 2
    failed = 0
    for name, check in CHECKS.items():
        try:
            print(f"CHECK {name}: ok {check()}", flush=True)
        except NotRun as why:
            print(f"CHECK {name}: NOT RUN ({why})", flush=True)
        except Exception as error:  # report every check, then fail at the end
            failed += 1
            print(f"CHECK {name}: FAILED {error!r}", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
