"""FSDP2 behind Accelerate's API, on 2 CPU processes (Gloo).

Two launches of tests/scripts/fsdp_checks.py shared by every multi-process test here: one on 2
ranks runs every scenario (DDP vs FSDP trajectories, mixed precision, both checkpoint forms,
save_model to safetensors and to sharded .bin files), one on 1 rank loads the 2-rank sharded
checkpoint. The plugin's configuration (fields, environment, refusals) and the choice of units
are checked in-process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from accel_convert.runtime.fsdp import FullyShardedDataParallelPlugin, ParameterSwaps, _units_bottom_up, unit_selector
from tests.launching import free_port, run_command, torchrun

SCRIPT = Path(__file__).parent / "scripts" / "fsdp_checks.py"
STEPS = 20


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("fsdp")
    # Large freed blocks go straight back to the system: the RSS follows the live tensors (meta_memory).
    torchrun(SCRIPT, "train", str(out), timeout=300, env={"MALLOC_MMAP_THRESHOLD_": "65536"}).check()
    # The second launch goes through accel-launch: its --fsdp options configure the plugin.
    accel_launch = [sys.executable, "-m", "accel_convert.runtime.launch", "--nnodes", "1", "--nproc-per-node", "1"]
    rendezvous = ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    fsdp_options = [
        "--fsdp",
        "--fsdp_auto_wrap_policy",
        "TRANSFORMER_BASED_WRAP",
        "--fsdp_reshard_after_forward",
        "false",
        "--fsdp-transformer-layer-cls-to-wrap",
        "TransformerEncoderLayer",
        "--fsdp_activation_checkpointing",
        "true",
    ]
    run_command([*accel_launch, *rendezvous, *fsdp_options, str(SCRIPT), "reshard", str(out)], timeout=150).check()
    return {
        "out": out,
        "train": [json.loads((out / f"train_rank{rank}.json").read_text()) for rank in (0, 1)],
        "reshard": json.loads((out / "reshard_rank0.json").read_text()),
    }


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_fsdp_follows_the_ddp_loss_trajectory_over_20_steps(launched, kind: str) -> None:
    runs = launched["train"][0]["trajectories"][kind]
    ddp, fsdp = runs["ddp"], runs["fsdp"]
    assert len(ddp["losses"]) == len(fsdp["losses"]) == STEPS
    assert fsdp["losses"] == pytest.approx(ddp["losses"], rel=1e-5, abs=1e-6)
    assert fsdp["grad_norms"] == pytest.approx(ddp["grad_norms"], rel=1e-5, abs=1e-6)
    assert ddp["losses"][-1] < ddp["losses"][0]  # it trains: the comparison is not between two flat lines
    # Really sharded: units beyond the root, each rank holds half of every parameter, and the
    # optimizer (created before prepare for the MLP, after it for the transformer) updates the shards.
    assert fsdp["distributed_type"] == "FSDP"
    assert fsdp["sharded_units"] == (3 if kind == "mlp" else 4)  # MLP: 2 layers >= 1000 params; 3 encoder layers
    shards = [report["trajectories"][kind]["fsdp"]["local_numel"] for report in launched["train"]]
    assert sum(shards) == fsdp["global_numel"]  # every element on exactly one rank
    assert max(shards) < 0.55 * fsdp["global_numel"]  # about half each (rows split unevenly)
    assert fsdp["optimizer_params_are_dtensors"]
    if kind == "mlp":  # accumulation over 2 batches: every other step skips the reduce-scatter
        assert fsdp["grads_set_on_non_sync_steps"] == [False] * (STEPS // 2)
        assert ddp["grads_set_on_non_sync_steps"] == [True] * (STEPS // 2)


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_rank0_weights_on_meta_built_ranks_train_as_ordinary_fsdp(launched, kind: str) -> None:
    runs = launched["train"][0]["trajectories"][kind]
    # Rank 1 built its model under init_empty_weights; prepare filled its shards from rank 0.
    assert runs["fsdp_meta"]["losses"] == runs["fsdp"]["losses"]  # bit-identical
    assert runs["fsdp_meta"]["grad_norms"] == runs["fsdp"]["grad_norms"]
    assert runs["fsdp_meta"]["optimizer_params_are_dtensors"]
    shards = [report["trajectories"][kind]["fsdp_meta"]["local_numel"] for report in launched["train"]]
    assert shards == [report["trajectories"][kind]["fsdp"]["local_numel"] for report in launched["train"]]


def test_cpu_ram_efficient_loading_keeps_a_non_zero_rank_below_the_model_size(launched) -> None:
    rank0, rank1 = (report["meta_memory"] for report in launched["train"])
    model = rank1["model_mib"]  # 384 MiB of float32 weights
    # Measured on 2 processes: rank 1 grows by its half (192 MiB) + one tensor in flight (16 MiB)
    # ~ 0.54 x the model; ordinary FSDP: the full model + its shards ~ 1.5 x.
    assert rank1["efficient"]["peak_growth_mib"] < 0.75 * model
    assert rank1["ordinary"]["peak_growth_mib"] > model  # the measurement sees the full copy it avoids
    assert rank1["efficient"]["local_shard_mib"] == rank1["ordinary"]["local_shard_mib"] == model / 2
    # The same weights either way: rank 0's, seeded alike.
    assert rank0["efficient"]["checksum"] == rank0["ordinary"]["checksum"] == rank1["efficient"]["checksum"]


def test_both_ranks_report_the_same_trajectory(launched) -> None:
    first, second = (report["trajectories"] for report in launched["train"])
    for kind in first:
        for engine in ("ddp", "fsdp", "fsdp_meta"):
            assert first[kind][engine]["losses"] == second[kind][engine]["losses"]
            assert first[kind][engine]["grad_norms"] == second[kind][engine]["grad_norms"]


def test_bf16_mixed_precision_policy_computes_in_bf16_and_keeps_fp32_shards(launched) -> None:
    run = launched["train"][0]["mixed_precision"]
    assert run["compute_dtypes"] == ["torch.bfloat16"]
    assert run["shard_dtypes"] == ["torch.float32"]
    reference = launched["train"][0]["trajectories"]["mlp"]["ddp"]["losses"][:6]
    assert run["losses"] == pytest.approx(reference, rel=5e-2)  # bf16 rounding, the same training


@pytest.mark.parametrize("form", ["resume_sharded", "resume_full"])
def test_load_state_resumes_exactly(launched, form: str) -> None:
    for report in launched["train"]:
        run = report[form]
        assert run["resumed"] == run["continued"]  # exact, not approximate
        assert len(run["continued"]) == STEPS // 2
    assert launched["train"][0][form]["identical_weights"]
    assert launched["train"][0][form]["gathered_tensors"] > 0
    assert launched["train"][1][form]["gathered_tensors"] == 0  # the full state dict lives on rank 0 only


def test_checkpoint_layout_is_one_dcp_shard_per_rank_or_one_gathered_file(launched) -> None:
    sharded = launched["train"][0]["resume_sharded"]["files"]
    for folder in ("pytorch_model_fsdp_0", "optimizer_0"):
        assert {f"{folder}/.metadata", f"{folder}/__0_0.distcp", f"{folder}/__1_0.distcp"} <= set(sharded)
    assert "pytorch_model.bin" not in sharded
    full = launched["train"][0]["resume_full"]["files"]
    assert {"pytorch_model_fsdp_0.bin", "optimizer_0.bin", "checkpoint.json"} <= set(full)
    manifest = json.loads((launched["out"] / "checkpoint_sharded_state_dict" / "checkpoint.json").read_text())
    assert "pytorch_model_fsdp_0/__1_0.distcp" in manifest["files"]  # shard files carry digests too


def test_sharded_checkpoint_loads_onto_another_world_size(launched) -> None:
    out, report = launched["out"], launched["reshard"]
    assert report["num_processes"] == 1
    assert report["distributed_type"] == "FSDP"
    assert report["plugin"] == ["transformer_based_wrap", ["TransformerEncoderLayer"], True, False]  # from accel-launch
    saved = torch.load(out / "reference.pt", weights_only=True)
    loaded = torch.load(out / "reshard.pt", weights_only=True)
    assert saved["model"].keys() == loaded["model"].keys()
    assert all(torch.equal(saved["model"][key], loaded["model"][key]) for key in saved["model"])
    saved_state, loaded_state = saved["optimizer"]["state"], loaded["optimizer"]["state"]
    assert saved_state.keys() == loaded_state.keys() and saved_state
    assert all(torch.equal(saved_state[p][k], loaded_state[p][k]) for p in saved_state for k in saved_state[p])
    assert any("saved by 2 processes, loaded by 1" in warning for warning in report["warnings"])


def test_corrupt_shard_file_is_refused_with_its_name(launched) -> None:
    refusal = launched["reshard"]["refusal"]
    assert refusal is not None and "pytorch_model_fsdp_0/__1_0.distcp: corrupt" in refusal


def test_save_model_writes_the_full_weights_once(launched) -> None:
    rank0, rank1 = (report["save_model"] for report in launched["train"])
    assert rank0["file_matches"] and rank0["loads_into_plain_model"] and rank0["shards_match"]
    assert rank0["state_keys"] == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]
    assert rank1["state_keys"] == []
    # 2.weight (16,384 bytes) is past the limit: a file of its own, the first one closed; the
    # other five (4,868 bytes) fill the second (huggingface_hub's plan, as Accelerate's).
    shards = [f"pytorch_model-0000{i}-of-00002.bin" for i in (1, 2)]
    expected = {
        "saved_model": ["model.safetensors"],
        "saved_model_bin": sorted([*shards, "pytorch_model.bin.index.json"]),
    }
    assert rank0["files"] == rank1["files"] == expected


def _tiny_transformer() -> torch.nn.Module:
    import importlib.util

    spec = importlib.util.spec_from_file_location("fsdp_checks", SCRIPT)
    assert spec is not None and spec.loader is not None
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    return checks.TinyTransformer()


def test_merge_fsdp_weights_gives_the_unsharded_weights(launched, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from accel_convert.runtime import merge_fsdp_weights
    from accel_convert.runtime.utils import merge_fsdp_weights as from_utils

    assert from_utils is merge_fsdp_weights
    out = launched["out"]
    reference = torch.load(out / "reference.pt", weights_only=True)["model"]  # gathered at the checkpoint
    # The save_state folder (its one sharded model is found) -> model.safetensors.
    written = merge_fsdp_weights(out / "checkpoint_sharded_state_dict", tmp_path / "safe")
    assert written == tmp_path / "safe" / "model.safetensors"
    merged = load_file(written)
    assert merged.keys() == reference.keys()
    assert all(torch.equal(merged[key], reference[key]) for key in reference)
    plain = _tiny_transformer()
    plain.load_state_dict(merged)  # strict: every key, full shapes
    # Merged by every rank of the 2-process run (rank 0 writes, the other waits): the same tensors.
    in_run = torch.load(out / "merged_in_run" / "pytorch_model.bin", weights_only=True)
    assert in_run.keys() == reference.keys() and all(torch.equal(in_run[k], reference[k]) for k in reference)


def test_merge_weights_command_and_refusals(launched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accel_convert.runtime import merge_fsdp_weights

    out = launched["out"]
    command = [sys.executable, "-m", "accel_convert.runtime.launch", "merge-weights"]
    model_folder = out / "checkpoint_sharded_state_dict" / "pytorch_model_fsdp_0"
    run = run_command([*command, str(model_folder), str(tmp_path / "cli"), "--unsafe_serialization"], timeout=120)
    assert run.returncode == 0, run.stderr
    merged = torch.load(tmp_path / "cli" / "pytorch_model.bin", weights_only=True)
    reference = torch.load(out / "reference.pt", weights_only=True)["model"]
    assert all(torch.equal(merged[key], reference[key]) for key in reference)
    # The corrupted copy of the reshard launch: refused by the manifest's digests, by name.
    run = run_command([*command, str(out / "corrupt_copy"), str(tmp_path / "bad")], timeout=120)
    assert run.returncode == 2 and "pytorch_model_fsdp_0/__1_0.distcp: corrupt" in run.stderr
    assert not (tmp_path / "bad").exists()
    with pytest.raises(ValueError, match="holds a sharded optimizer but no sharded model"):
        merge_fsdp_weights(_optimizer_only(out, tmp_path), tmp_path / "x")
    # Without the safetensors package the runtime writes the format all the same.
    with_package = merge_fsdp_weights(model_folder, tmp_path / "safe")
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    without = merge_fsdp_weights(model_folder, tmp_path / "none")
    monkeypatch.undo()
    assert without.read_bytes() == with_package.read_bytes()
    assert merge_fsdp_weights(model_folder, tmp_path / "bin", safe_serialization=False).name == "pytorch_model.bin"


def test_merge_reads_accelerates_layout_too(tmp_path: Path) -> None:
    """Accelerate saves ``{"model": state_dict}``; the merged file has the model's own keys."""
    import torch.distributed.checkpoint as dcp

    from accel_convert.runtime import merge_fsdp_weights

    state = {"0.weight": torch.randn(3, 2), "block.norm.bias": torch.arange(4.0)}
    dcp.save({"model": state}, checkpoint_id=str(tmp_path / "pytorch_model_fsdp_0"), no_dist=True)
    written = merge_fsdp_weights(tmp_path / "pytorch_model_fsdp_0", tmp_path / "out", safe_serialization=False)
    merged = torch.load(written, weights_only=True)
    assert merged.keys() == state.keys() and all(torch.equal(merged[k], state[k]) for k in state)


def _optimizer_only(out: Path, tmp_path: Path) -> Path:
    import shutil

    folder = tmp_path / "optimizer_only"
    shutil.copytree(out / "checkpoint_sharded_state_dict" / "optimizer_0", folder / "optimizer_0")
    return folder


def test_merge_weights_help_loads_no_torch() -> None:
    code = (
        "import sys\nfrom accel_convert.runtime.launch import main\n"
        "try:\n    main(['merge-weights', '--help'])\nexcept SystemExit as end:\n    assert end.code == 0\n"
        "assert 'torch' not in sys.modules\n"
    )
    run = run_command([sys.executable, "-c", code], timeout=60)
    assert run.returncode == 0, run.stderr
    assert "--unsafe_serialization" in run.stdout and "model.safetensors" in run.stdout


# ---------------------------------------------------------------------------------- in-process


def test_plugin_reads_the_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP")
    monkeypatch.setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", "Block,Layer")
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")
    monkeypatch.setenv("FSDP_OFFLOAD_PARAMS", "true")
    monkeypatch.setenv("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    monkeypatch.setenv("FSDP_ACTIVATION_CHECKPOINTING", "true")
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.auto_wrap_policy == "transformer_based_wrap"
    assert plugin.transformer_cls_names_to_wrap == ["Block", "Layer"]
    assert plugin.reshard_after_forward is False and plugin.cpu_offload is True
    assert plugin.state_dict_type == "FULL_STATE_DICT" and plugin.activation_checkpointing is True
    # What the script passes wins over the environment.
    assert FullyShardedDataParallelPlugin(reshard_after_forward=True).reshard_after_forward is True


def test_plugin_maps_fsdp1_spellings_and_refuses_what_fsdp2_lacks() -> None:
    assert FullyShardedDataParallelPlugin(sharding_strategy="SHARD_GRAD_OP").reshard_after_forward is False
    assert FullyShardedDataParallelPlugin(fsdp_version=1, sharding_strategy="FULL_SHARD").reshard_after_forward is True
    with pytest.raises(ValueError, match="NO_SHARD"):
        FullyShardedDataParallelPlugin(sharding_strategy="NO_SHARD")
    with pytest.raises(ValueError, match="forward_prefetch"):
        FullyShardedDataParallelPlugin(forward_prefetch=True)
    with pytest.raises(ValueError, match="auto_wrap_policy"):
        FullyShardedDataParallelPlugin(auto_wrap_policy="by_magic")
    with pytest.raises(ValueError, match="LOCAL_STATE_DICT"):
        FullyShardedDataParallelPlugin(state_dict_type="LOCAL_STATE_DICT")


def test_cpu_ram_efficient_loading_comes_from_the_field_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert FullyShardedDataParallelPlugin().cpu_ram_efficient_loading is False
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    assert FullyShardedDataParallelPlugin().cpu_ram_efficient_loading is True
    assert FullyShardedDataParallelPlugin(cpu_ram_efficient_loading=False).cpu_ram_efficient_loading is False


def test_init_empty_weights_puts_parameters_on_meta_and_keeps_buffers() -> None:
    from accel_convert.runtime import init_empty_weights

    register = torch.nn.Module.register_parameter
    with init_empty_weights():
        norm = torch.nn.BatchNorm1d(4)
        frozen = torch.nn.Linear(3, 3)
        frozen.bias.requires_grad_(False)
    assert torch.nn.Module.register_parameter is register  # put back on leaving the block
    assert norm.weight.is_meta and norm.weight.shape == (4,) and isinstance(norm.weight, torch.nn.Parameter)
    assert not norm.running_mean.is_meta  # buffers stay real unless include_buffers=True
    assert frozen.weight.requires_grad and not frozen.bias.requires_grad
    with init_empty_weights(include_buffers=True):
        norm = torch.nn.BatchNorm1d(4)
    assert norm.weight.is_meta and norm.running_mean.is_meta
    assert not torch.nn.Linear(2, 2).weight.is_meta


def test_a_meta_model_without_rank0_loading_is_refused() -> None:
    from accel_convert.runtime.fsdp import shard_model

    with torch.device("meta"):
        model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="cpu_ram_efficient_loading=True"):
        shard_model(model, FullyShardedDataParallelPlugin(), "no", torch.device("cpu"))


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(32, 32)  # 1056 parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(_Block(), _Block(), torch.nn.Linear(32, 2))


def test_transformer_policy_makes_each_named_layer_a_unit() -> None:
    model = _model()
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap="_Block"
    )
    assert _units_bottom_up(model, unit_selector(plugin, model)) == [model[1], model[0]]
    missing = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap="Nope"
    )
    with pytest.raises(ValueError, match="no layer class Nope"):
        unit_selector(missing, model)


def test_size_policy_counts_only_parameters_not_yet_in_a_unit() -> None:
    model = _model()
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap", min_num_params=1000)
    # Each Linear(32, 32) becomes a unit; its _Block wrapper then holds nothing new and is skipped.
    assert _units_bottom_up(model, unit_selector(plugin, model)) == [model[1].inner, model[0].inner]


def test_torch_wrap_policies_are_accepted() -> None:
    import functools

    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    model = _model()
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={_Block})
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy=policy)
    assert _units_bottom_up(model, unit_selector(plugin, model)) == [model[1], model[0]]


def test_parameter_swaps_repoint_only_the_very_same_parameters() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(list(model.parameters()) + [torch.nn.Parameter(torch.ones(1))], lr=0.1)
    before = ParameterSwaps.names_of(model)
    model.weight = torch.nn.Parameter(model.weight.detach().clone())  # what fully_shard does to each parameter
    swaps = ParameterSwaps()
    swaps.record(before, model)
    swaps.repoint(optimizer)
    params = optimizer.param_groups[0]["params"]
    assert params[0] is model.weight and params[1] is model.bias and params[2].shape == (1,)


def test_fsdp_plugin_is_a_constructor_argument_of_the_accelerator() -> None:
    from accel_convert.runtime import Accelerator

    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())
    assert accelerator.fsdp_plugin is not None
    assert not accelerator.is_fsdp2  # one process without a launcher: nothing to shard across
    with pytest.raises(ValueError, match="FullyShardedDataParallelPlugin"):
        Accelerator(fsdp_plugin={"auto_wrap_policy": "no_wrap"})


def test_accel_launch_turns_fsdp_options_into_the_variables_accelerate_uses() -> None:
    from accel_convert.runtime.launch import split_command_line

    argv = ["--nproc-per-node", "2", "--fsdp", "--fsdp_state_dict_type=FULL_STATE_DICT", "train.py", "--fsdp", "1"]
    line = split_command_line(argv)
    assert line.fsdp == {"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}
    assert line.torchrun == ["--nproc-per-node", "2"]
    assert line.script == ["train.py", "--fsdp", "1"]  # the script keeps its own --fsdp
    assert split_command_line(["--fsdp-min-num-params", "100", "x.py"]).fsdp == {
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_MIN_NUM_PARAMS": "100",
    }
    assert split_command_line(["--fsdp_cpu_ram_efficient_loading", "true", "x.py"]).fsdp == {
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    }
    assert split_command_line(["train.py", "--fsdp"]).fsdp == {}


def test_accel_launch_refuses_a_bad_fsdp_option_in_one_line() -> None:
    run = run_command(
        [sys.executable, "-m", "accel_convert.runtime.launch", "--fsdp_auto_wrap_policy", "weird", "x.py"], timeout=60
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "accel-launch: error: auto_wrap_policy 'weird': use one of transformer_based_wrap, size_based_wrap, no_wrap"
    ]
