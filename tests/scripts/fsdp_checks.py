"""Every FSDP scenario of tests/test_fsdp.py in one launch (each launch costs seconds).

``fsdp_checks.py train OUT_DIR`` (2 ranks): for an MLP (size-based units, optimizer created
*before* prepare, accumulation over 2 batches, gradient clipping) and a small transformer
(one unit per encoder layer, activation checkpointing, optimizer created *after* prepare), 20
steps under DDP and under FSDP from the same weights and batches; a bf16 mixed-precision
policy; save_state / load_state in both state-dict forms, resumed in fresh objects; save_model;
``merge_fsdp_weights`` called by every rank on the sharded checkpoint (OUT_DIR/merged_in_run/).
Also ``cpu_ram_efficient_loading`` with rank 1 building on the meta device: the same trajectories
as ordinary FSDP, and each rank's peak RSS growth while a ~400 MB model is built and prepared,
with and without it (launched with ``MALLOC_MMAP_THRESHOLD_=65536``, so that freed tensors go back
to the system at once and the RSS follows the live tensors; the peak is reset through
/proc/self/clear_refs before each).
Rank r writes OUT_DIR/train_rank<r>.json; rank 0 also OUT_DIR/reference.pt (the full model and
optimizer state at the sharded checkpoint).

``accel-launch --fsdp ... fsdp_checks.py reshard OUT_DIR`` (any other number of ranks, the
plugin from the launcher's options): load that 2-rank sharded
checkpoint, report the full states it gives (OUT_DIR/reshard.pt, rank 0) and what loading a
copy with a corrupted shard file raised (OUT_DIR/reshard_rank<r>.json).
"""

from __future__ import annotations

import contextlib
import gc
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from accel_convert.runtime import Accelerator, FullyShardedDataParallelPlugin, init_empty_weights, merge_fsdp_weights
from accel_convert.runtime.checkpoint import CheckpointError
from accel_convert.runtime.state_objects import AcceleratorState

STEPS, RESUME_AT = 20, 10
BATCH, FEATURES, VOCAB, SEQUENCE = 8, 16, 32, 12


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    )


class TinyTransformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 32)
        layer = torch.nn.TransformerEncoderLayer(32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def batch(kind: str, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of step ``step``: the same in every run, different on every rank."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    if kind == "mlp":
        inputs = torch.randn(BATCH, FEATURES, generator=generator)
        return inputs, inputs.sum(dim=1, keepdim=True).sin()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQUENCE + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(kind: str, model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    outputs = model(inputs)
    if kind == "mlp":
        return torch.nn.functional.mse_loss(outputs, targets)
    return torch.nn.functional.cross_entropy(outputs.reshape(-1, VOCAB), targets.reshape(-1))


def plugin_for(kind: str, **extra: Any) -> FullyShardedDataParallelPlugin:
    if kind == "mlp":
        return FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap", min_num_params=1000, **extra)
    return FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["TransformerEncoderLayer"],
        activation_checkpointing=True,
        **extra,
    )


def fresh_accelerator(plugin: FullyShardedDataParallelPlugin | None, **kwargs: Any) -> Accelerator:
    AcceleratorState._reset_state()
    return Accelerator(fsdp_plugin=plugin, **kwargs)


def build(kind: str, plugin: FullyShardedDataParallelPlugin | None, seed: int = 0, **kwargs: Any):
    """Model, optimizer and Accelerator; the MLP's optimizer is created before prepare, the
    transformer's after (both ways must update the shards). With ``cpu_ram_efficient_loading``
    the ranks other than 0 build the model on the meta device."""
    accumulation = 2 if kind == "mlp" else 1
    accelerator = fresh_accelerator(plugin, gradient_accumulation_steps=accumulation, **kwargs)
    torch.manual_seed(seed)
    on_meta = plugin is not None and plugin.cpu_ram_efficient_loading and accelerator.process_index != 0
    with init_empty_weights() if on_meta else contextlib.nullcontext():
        model = mlp() if kind == "mlp" else TinyTransformer()
    assert on_meta == next(model.parameters()).is_meta
    if kind == "mlp":
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=3e-3))
    return accelerator, model, optimizer


def train(kind: str, accelerator: Accelerator, model, optimizer, steps: range) -> dict[str, list[float]]:
    """Train on ``steps``; the mean loss over ranks and the clipped gradient norm per step."""
    losses, norms, reduced_early = [], [], []
    for step in steps:
        with accelerator.accumulate(model):
            loss = loss_of(kind, model, *batch(kind, step, accelerator.process_index))
            accelerator.backward(loss)
            if not accelerator.sync_gradients:
                # FSDP without sync keeps the micro-step's gradient unsharded inside FSDP, so the
                # parameters' (sharded) .grad stays unset until the reducing backward; DDP's local
                # gradients are always in .grad.
                reduced_early.append(any(param.grad is not None for param in model.parameters()))
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 1.0)))
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), "mean")))
    return {"losses": losses, "grad_norms": norms, "grads_set_on_non_sync_steps": reduced_early}


def trajectories() -> dict[str, Any]:
    """DDP, FSDP and FSDP from rank 0's weights (the others built on meta) over the same 20 steps, per model."""
    report: dict[str, Any] = {}
    plugins = {
        "ddp": lambda kind: None,
        "fsdp": plugin_for,
        "fsdp_meta": lambda kind: plugin_for(kind, cpu_ram_efficient_loading=True),
    }
    for kind in ("mlp", "transformer"):
        report[kind] = {}
        for engine, plugin in plugins.items():
            accelerator, model, optimizer = build(kind, plugin(kind))
            run = train(kind, accelerator, model, optimizer, range(STEPS))
            if engine != "ddp":
                run["distributed_type"] = accelerator.distributed_type.value
                run["sharded_units"] = sum(1 for m in model.modules() if type(m).__name__.startswith("FSDP"))
                run["local_numel"] = sum(p.to_local().numel() for p in model.parameters())
                run["optimizer_params_are_dtensors"] = all(
                    type(p).__name__ == "DTensor" for group in optimizer.param_groups for p in group["params"]
                )
            run["global_numel"] = sum(p.numel() for p in model.parameters())
            report[kind][engine] = run
    return report


def mixed_precision() -> dict[str, Any]:
    """A bf16 policy: weights gathered in bf16 for compute, shards and optimizer stay fp32."""
    accelerator, model, optimizer = build("mlp", plugin_for("mlp", mixed_precision_policy="bf16"))
    seen: list[str] = []
    model[2].register_forward_pre_hook(lambda module, args: seen.append(str(module.weight.dtype)))
    run = train("mlp", accelerator, model, optimizer, range(6))
    run["compute_dtypes"] = sorted(set(seen))
    run["shard_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    return run


def resume(out: Path, state_dict_type: str) -> dict[str, Any]:
    """Train 10 steps, save_state, train 10 more; then fresh objects (other seed), load_state,
    the same 10 steps: identical losses and weights. Under SHARDED_STATE_DICT, rank 0 also
    keeps the full states at the checkpoint for the reshard launch."""
    plugin = plugin_for("transformer", state_dict_type=state_dict_type)
    checkpoint = out / f"checkpoint_{state_dict_type.lower()}"
    accelerator, model, optimizer = build("transformer", plugin)
    train("transformer", accelerator, model, optimizer, range(RESUME_AT))
    accelerator.save_state(str(checkpoint))
    if state_dict_type == "SHARDED_STATE_DICT":
        # Every rank calls it, as in Accelerate: rank 0 merges, the others wait.
        merge_fsdp_weights(str(checkpoint), str(out / "merged_in_run"), safe_serialization=False)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full_optimizer = get_optimizer_state_dict(
            model, optimizer.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        full_model = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            torch.save({"model": full_model, "optimizer": full_optimizer}, out / "reference.pt")
    continued = train("transformer", accelerator, model, optimizer, range(RESUME_AT, STEPS))
    final = accelerator.get_state_dict(model)

    accelerator, model, optimizer = build("transformer", plugin, seed=123)
    accelerator.load_state(str(checkpoint))
    resumed = train("transformer", accelerator, model, optimizer, range(RESUME_AT, STEPS))
    resumed_final = accelerator.get_state_dict(model)
    same = all(torch.equal(final[name], resumed_final[name]) for name in final) and final.keys() == resumed_final.keys()
    saved = sorted(p.relative_to(checkpoint).as_posix() for p in checkpoint.rglob("*") if p.is_file())
    return {
        "continued": continued["losses"],
        "resumed": resumed["losses"],
        "identical_weights": same,
        "gathered_tensors": len(final),
        "files": saved,
    }


def save_model(out: Path) -> dict[str, Any]:
    """``save_model`` of the sharded MLP: the full weights gathered to rank 0, written as
    ``model.safetensors`` and as ``pytorch_model.bin`` shards (10 KB each at most) with an index."""
    from safetensors.torch import load_file

    accelerator, model, optimizer = build("mlp", plugin_for("mlp"))
    train("mlp", accelerator, model, optimizer, range(2))
    state = accelerator.get_state_dict(model)
    accelerator.save_model(model, out / "saved_model")
    accelerator.save_model(model, out / "saved_model_bin", max_shard_size="10KB", safe_serialization=False)
    # save_model returns once the files are written: every rank sees them.
    report: dict[str, Any] = {
        "state_keys": sorted(state),
        "files": {name: sorted(p.name for p in (out / name).iterdir()) for name in ("saved_model", "saved_model_bin")},
    }
    if accelerator.is_main_process:
        written = load_file(out / "saved_model" / "model.safetensors")
        report["file_matches"] = written.keys() == state.keys() and all(
            torch.equal(written[k], state[k]) for k in state
        )
        plain = mlp()
        plain.load_state_dict(written)  # loads into the unsharded model class: full shapes
        report["loads_into_plain_model"] = True
        index = json.loads((out / "saved_model_bin" / "pytorch_model.bin.index.json").read_text())
        shards: dict[str, torch.Tensor] = {}
        for file in sorted(set(index["weight_map"].values())):
            shards.update(torch.load(out / "saved_model_bin" / file, weights_only=True))
        report["shards_match"] = shards.keys() == state.keys() and all(torch.equal(shards[k], state[k]) for k in state)
        mlp().load_state_dict(shards)
    return report


# ------------------------------------------------------------------ peak memory while preparing
BIG_LAYERS, BIG_HIDDEN = 24, 2048  # 24 x 4.2M float32 parameters: 403 MB, 17 MB per tensor


def rss_mib(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process, from /proc."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> None:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")


def prepare_growth(efficient: bool) -> dict[str, float]:
    """Peak RSS growth (MiB) from before building the big model to the end of prepare."""
    gc.collect()
    reset_peak_rss()
    before = rss_mib("VmRSS")
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="size_based_wrap", min_num_params=BIG_HIDDEN * BIG_HIDDEN, cpu_ram_efficient_loading=efficient
    )
    accelerator = fresh_accelerator(plugin)
    torch.manual_seed(0)
    with init_empty_weights() if efficient and accelerator.process_index != 0 else contextlib.nullcontext():
        model = torch.nn.Sequential(*[torch.nn.Linear(BIG_HIDDEN, BIG_HIDDEN, bias=False) for _ in range(BIG_LAYERS)])
    model = accelerator.prepare(model)
    accelerator.wait_for_everyone()
    growth = rss_mib("VmHWM") - before
    local = sum(p.to_local().numel() * 4 for p in model.parameters()) / 2**20
    checksum = float(sum(p.full_tensor().double().sum() for p in model.parameters()))
    del model
    return {"peak_growth_mib": growth, "local_shard_mib": local, "checksum": checksum}


def meta_memory() -> dict[str, Any]:
    return {
        "model_mib": BIG_LAYERS * BIG_HIDDEN * BIG_HIDDEN * 4 / 2**20,
        "efficient": prepare_growth(True),
        "ordinary": prepare_growth(False),
    }


def train_phase(out: Path) -> None:
    report = {
        "trajectories": trajectories(),  # first: it also pays the one-time costs (imports) meta_memory should not see
        "meta_memory": meta_memory(),
        "mixed_precision": mixed_precision(),
        "resume_sharded": resume(out, "SHARDED_STATE_DICT"),
        "resume_full": resume(out, "FULL_STATE_DICT"),
        "save_model": save_model(out),
    }
    (out / f"train_rank{dist.get_rank()}.json").write_text(json.dumps(report))


def reshard_phase(out: Path) -> None:
    """Load the 2-rank sharded checkpoint on this launch's number of ranks. Started by
    ``accel-launch --fsdp ...``: the plugin comes from the launcher's FSDP_* variables."""
    accelerator, model, optimizer = build("transformer", None, seed=7)
    plugin = accelerator.fsdp_plugin
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator.load_state(str(out / "checkpoint_sharded_state_dict"))
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full_optimizer = get_optimizer_state_dict(
        model, optimizer.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    full_model = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        torch.save({"model": full_model, "optimizer": full_optimizer}, out / "reshard.pt")
        corrupt = out / "corrupt_copy"
        shutil.rmtree(corrupt, ignore_errors=True)
        shutil.copytree(out / "checkpoint_sharded_state_dict", corrupt)
        shard = corrupt / "pytorch_model_fsdp_0" / "__1_0.distcp"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    accelerator.wait_for_everyone()
    try:
        accelerator.load_state(str(out / "corrupt_copy"))
        refusal = None
    except CheckpointError as error:
        refusal = str(error)
    report = {
        "warnings": [str(w.message) for w in caught],
        "refusal": refusal,
        "num_processes": accelerator.num_processes,
        "distributed_type": accelerator.distributed_type.value,
        "plugin": None
        if plugin is None
        else [
            plugin.auto_wrap_policy,
            plugin.transformer_cls_names_to_wrap,
            plugin.activation_checkpointing,
            plugin.reshard_after_forward,
        ],
        "local_numel": sum(p.to_local().numel() for p in model.parameters()),
    }
    (out / f"reshard_rank{accelerator.process_index}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    phase, out_dir = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    {"train": train_phase, "reshard": reshard_phase}[phase](out_dir)
