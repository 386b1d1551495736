"""Fully sharded data parallel (FSDP2): train models whose weights and optimizer state do not fit
on one device, behind Accelerate's ``FullyShardedDataParallelPlugin``.

How it differs from DDP: under DDP every rank holds the whole model, its gradients and its
optimizer state, and all-reduces the gradients. Under FSDP each rank holds only ``1/N`` of every
parameter (a ``DTensor`` shard) and therefore ``1/N`` of the gradients and of the optimizer's
moments. A sharded *unit* (a transformer layer, say) gathers its full weights just before its
forward (all-gather), frees them after it (``reshard_after_forward``), gathers them again for its
backward, and reduce-scatters the gradients so that each rank receives the averaged gradient of
its own shard. The optimizer then updates only the local shard. Per rank, parameters + gradients
+ optimizer state shrink to about ``1/N``; the price is one extra all-gather per unit and step.

The engine is torch's own ``torch.distributed.fsdp.fully_shard``; this module only translates
the plugin's fields into its arguments:

- *which units* (``auto_wrap_policy``): each transformer layer class named, or every module
  holding at least ``min_num_params`` parameters not already in a unit, or a torch wrap policy;
  the root model is always a unit (it holds what is left).
- ``reshard_after_forward``, ``mixed_precision_policy`` (compute dtype of the gathered weights,
  dtype of the gradient reduction), ``cpu_offload`` (shards and their optimizer state live in
  host memory), ``ignored_modules``.
- ``activation_checkpointing``: each unit's forward runs under ``torch.utils.checkpoint``, so its
  activations are recomputed in backward instead of kept.

``fully_shard`` replaces the model's parameters by new ``DTensor`` parameters, so an optimizer
built before ``prepare`` points at parameters the model no longer uses: :class:`ParameterSwaps`
remembers which new parameter replaced which old one and re-points such optimizers (whether they
are prepared before, with or after the model).

Building big models (``cpu_ram_efficient_loading``): normally every rank builds the whole model
in host memory and ``fully_shard`` keeps only its shard, so each rank needs one full copy for a
moment. With the option, only rank 0 needs real weights: the other ranks may build the model on
the meta device (``init_empty_weights`` or ``torch.device("meta")``: shapes, no storage). Every
rank then moves the model to meta, shards it there (nothing is allocated), allocates only its own
shards (``to_empty``) and receives them from rank 0's full state dict, one tensor at a time
(torch's ``set_model_state_dict(..., broadcast_from_rank0=True)``). Peak per rank: its shards plus
one full tensor in flight; rank 0 also holds the full model until the broadcast ends.

Checkpoints go through ``torch.distributed.checkpoint`` (see :func:`write_model_and_optimizers`).

Deliberate differences from Accelerate: ``fsdp_version=1`` is accepted and runs FSDP2 as well
(``sharding_strategy`` maps to ``reshard_after_forward``); the size-based policy counts the
parameters not yet in a unit (torch's rule; Accelerate counts a module's total, so every
ancestor of a large layer becomes a unit too); activation checkpointing preserves the RNG state,
so dropout draws the same mask when recomputing; ``mixed_precision="bf16"|"fp16"`` without a
policy reduces gradients in fp32 (Accelerate reduces in the low precision); options FSDP2 has
no counterpart for raise instead of being dropped with a warning; a model with meta tensors but
without ``cpu_ram_efficient_loading`` is refused at ``prepare`` (it has no values to train).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from accel_convert.runtime.state import env_flag

__all__ = [
    "FullyShardedDataParallelPlugin",
    "ParameterSwaps",
    "full_state_dict",
    "is_sharded",
    "load_model_and_optimizers",
    "plugin_from_environment",
    "shard_model",
    "write_model_and_optimizers",
]

ENV_PREFIX = "FSDP_"
STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT")
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
#: FSDP1 sharding strategies and what they mean for FSDP2's ``reshard_after_forward``.
_STRATEGY_RESHARDS = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}
_LOW_PRECISION = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


# --------------------------------------------------------------------------------------------
# The plugin: Accelerate's field names; values the script leaves unset come from FSDP_* variables
# (what ``accel-launch --fsdp``/``accelerate launch --use_fsdp`` export).
# --------------------------------------------------------------------------------------------


def _env(name: str) -> str | None:
    value = os.environ.get(ENV_PREFIX + name)
    return value if value not in (None, "") else None


def _as_bool(value: Any, field: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on", "y"}:
        return True
    if text in {"0", "false", "no", "off", "n"}:
        return False
    raise ValueError(f"FullyShardedDataParallelPlugin({field}={value!r}): expected true or false")


def _enum_name(value: Any) -> str:
    """``"full_shard"``, ``ShardingStrategy.FULL_SHARD`` or ``StateDictType.FULL_STATE_DICT`` -> upper name."""
    return str(getattr(value, "name", value)).upper()


@dataclass
class FullyShardedDataParallelPlugin:
    """Accelerate's FSDP configuration, run on torch's FSDP2 (``fully_shard``).

    Args:
        fsdp_version: 1 or 2 (both run FSDP2 here); env ``FSDP_VERSION``.
        sharding_strategy: FSDP1's spelling: ``"FULL_SHARD"`` (reshard after forward) or
            ``"SHARD_GRAD_OP"`` (keep gathered weights until backward).
        reshard_after_forward: free each unit's gathered weights after its forward (default
            True: least memory; False: one all-gather less per step); env ``FSDP_RESHARD_AFTER_FORWARD``.
        mixed_precision_policy: ``"bf16"``/``"fp16"``/``"fp32"``, a dict with ``param_dtype``/
            ``reduce_dtype``/``output_dtype``, or a ``torch.distributed.fsdp.MixedPrecisionPolicy``.
            None follows ``Accelerator(mixed_precision=...)``.
        auto_wrap_policy: ``"transformer_based_wrap"`` (with ``transformer_cls_names_to_wrap``, or
            the model's ``_no_split_modules``), ``"size_based_wrap"`` (with ``min_num_params``),
            ``"no_wrap"``, or a torch wrap policy ``policy(module, recurse, nonwrapped_numel)``;
            env ``FSDP_AUTO_WRAP_POLICY``, ``FSDP_TRANSFORMER_CLS_TO_WRAP``, ``FSDP_MIN_NUM_PARAMS``.
        cpu_offload: keep shards (and so the optimizer's state) in host memory; env ``FSDP_OFFLOAD_PARAMS``.
        ignored_modules: modules (or a regex on module names) left unsharded and unsynchronised.
        state_dict_type: ``"SHARDED_STATE_DICT"`` (default: ``save_state`` writes one DCP shard
            per rank) or ``"FULL_STATE_DICT"`` (gathered on rank 0); env ``FSDP_STATE_DICT_TYPE``.
        activation_checkpointing: recompute each unit's activations in backward; env
            ``FSDP_ACTIVATION_CHECKPOINTING`` (``..._OFFLOAD``: keep the saved inputs in host memory).
        cpu_ram_efficient_loading: rank 0's weights are the model's; the other ranks may build it
            on the meta device and only ever allocate their shards; env
            ``FSDP_CPU_RAM_EFFICIENT_LOADING`` (``transformers``' ``from_pretrained`` reads it too,
            with ``ACCELERATE_USE_FSDP``, to load real weights on rank 0 only). Accelerate's plugin
            also writes the variable, so that later plugins inherit the value; this one does not.

    Accepted without effect, as FSDP2 needs no setting for them: ``use_orig_params`` (FSDP2 always
    trains the original parameters), ``limit_all_gathers``,
    ``backward_prefetch`` (FSDP2 prefetches the next unit in backward by itself), and
    ``sync_module_states`` (rank 0's weights are broadcast only with ``cpu_ram_efficient_loading``).
    ``state_dict_config``/``optim_state_dict_config`` are accepted when they ask for what runtime
    does (full state dicts gathered on rank 0, in CPU memory). ``param_init_fn`` and
    ``forward_prefetch`` raise.
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: Any = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Any = None
    cpu_offload: Any = None
    ignored_modules: Any = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Any = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | str | None = None
    min_num_params: int | None = None

    def __post_init__(self) -> None:
        self.fsdp_version = int(self.fsdp_version if self.fsdp_version is not None else _env("VERSION") or 2)
        if self.fsdp_version not in (1, 2):
            raise ValueError(f"FullyShardedDataParallelPlugin(fsdp_version={self.fsdp_version}): use 1 or 2")
        self.reshard_after_forward = self._resolve_reshard()
        self.cpu_offload = self._resolve_offload()
        self.state_dict_type = self._resolve_state_dict_type()
        self.auto_wrap_policy = self._resolve_wrap_policy()
        self.activation_checkpointing = _as_bool(
            self.activation_checkpointing
            if self.activation_checkpointing is not None
            else _env("ACTIVATION_CHECKPOINTING") or False,
            "activation_checkpointing",
        )
        self.activation_checkpointing_offload = _as_bool(
            self.activation_checkpointing_offload
            if self.activation_checkpointing_offload is not None
            else _env("ACTIVATION_CHECKPOINTING_OFFLOAD") or False,
            "activation_checkpointing_offload",
        )
        if self.activation_checkpointing_offload and not self.activation_checkpointing:
            raise ValueError("activation_checkpointing_offload=True needs activation_checkpointing=True")
        if self.ignored_modules is None:
            self.ignored_modules = _env("IGNORED_MODULES")
        self.cpu_ram_efficient_loading = _as_bool(
            self.cpu_ram_efficient_loading
            if self.cpu_ram_efficient_loading is not None
            else _env("CPU_RAM_EFFICIENT_LOADING") or False,
            "cpu_ram_efficient_loading",
        )
        self._reject_what_fsdp2_lacks()

    # Each field, resolved to one canonical form.
    def _resolve_reshard(self) -> bool | int:
        if self.reshard_after_forward is None and self.sharding_strategy is not None:
            return self._reshard_from_strategy(self.sharding_strategy)
        value = self.reshard_after_forward
        if value is None and _env("RESHARD_AFTER_FORWARD") is None and _env("SHARDING_STRATEGY") is not None:
            return self._reshard_from_strategy(_env("SHARDING_STRATEGY"))
        if value is None:
            value = _env("RESHARD_AFTER_FORWARD") or True
        if isinstance(value, int):  # bool is an int: True/False, or the size of a smaller shard group
            return value
        if _enum_name(value) in _STRATEGY_RESHARDS or _enum_name(value) in {"NO_SHARD", "HYBRID_SHARD"}:
            return self._reshard_from_strategy(value)
        return _as_bool(value, "reshard_after_forward")

    @staticmethod
    def _reshard_from_strategy(strategy: Any) -> bool:
        name = _enum_name(strategy)
        if name not in _STRATEGY_RESHARDS:
            raise ValueError(
                f"sharding_strategy {name}: runtime shards fully (FULL_SHARD or SHARD_GRAD_OP); "
                "for NO_SHARD use DDP (no fsdp_plugin), hybrid sharding is not supported"
            )
        return _STRATEGY_RESHARDS[name]

    def _resolve_offload(self) -> bool:
        value = self.cpu_offload
        if value is None:
            return _as_bool(_env("OFFLOAD_PARAMS") or False, "cpu_offload")
        if isinstance(value, bool):
            return value
        # torch's CPUOffloadPolicy (FSDP2) or CPUOffload(offload_params=...) (FSDP1)
        return bool(getattr(value, "offload_params", True))

    def _resolve_state_dict_type(self) -> str:
        name = _enum_name(self.state_dict_type or _env("STATE_DICT_TYPE") or "SHARDED_STATE_DICT")
        if name not in STATE_DICT_TYPES:
            raise ValueError(f"state_dict_type {name}: use one of {', '.join(STATE_DICT_TYPES)}")
        return name

    def _resolve_wrap_policy(self) -> str | Callable[..., Any] | None:
        policy = self.auto_wrap_policy if self.auto_wrap_policy is not None else _env("AUTO_WRAP_POLICY")
        if callable(policy):
            return policy
        name = str(policy or "NO_WRAP").upper()
        if name not in WRAP_POLICIES:
            raise ValueError(f"auto_wrap_policy {policy!r}: use one of {', '.join(w.lower() for w in WRAP_POLICIES)}")
        if name == "TRANSFORMER_BASED_WRAP":
            names = self.transformer_cls_names_to_wrap or _env("TRANSFORMER_CLS_TO_WRAP")
            if isinstance(names, str):
                names = [part.strip() for part in names.split(",") if part.strip()]
            self.transformer_cls_names_to_wrap = list(names) if names else None
        if name == "SIZE_BASED_WRAP":
            minimum = self.min_num_params if self.min_num_params is not None else _env("MIN_NUM_PARAMS") or 0
            if isinstance(minimum, bool) or int(minimum) < 0:
                raise ValueError(f"min_num_params must be a number of parameters, got {minimum!r}")
            self.min_num_params = int(minimum)
        return None if name == "NO_WRAP" else name.lower()

    def _reject_what_fsdp2_lacks(self) -> None:
        refused = {
            "param_init_fn": self.param_init_fn is not None,
            "forward_prefetch": bool(self.forward_prefetch),
        }
        for name, is_set in refused.items():
            if is_set:
                raise ValueError(f"FullyShardedDataParallelPlugin({name}): not supported by runtime's FSDP2")
        for name, config in (
            ("state_dict_config", self.state_dict_config),
            ("optim_state_dict_config", self.optim_state_dict_config),
        ):
            # A full state dict is always gathered to rank 0 and moved to the CPU here.
            if config is not None and not (
                getattr(config, "offload_to_cpu", True) and getattr(config, "rank0_only", True)
            ):
                raise ValueError(f"{name}: runtime gathers full state dicts on rank 0 in CPU memory only")


def plugin_from_environment() -> FullyShardedDataParallelPlugin | None:
    """A plugin read from ``FSDP_*`` variables when the launcher asked for FSDP
    (``ACCELERATE_USE_FSDP=true``), else None."""
    return FullyShardedDataParallelPlugin() if env_flag("ACCELERATE_USE_FSDP") else None


# --------------------------------------------------------------------------------------------
# Choosing the units
# --------------------------------------------------------------------------------------------


def _classes_named(model: torch.nn.Module, names: Iterable[str]) -> tuple[type, ...]:
    by_name = {type(module).__name__: type(module) for module in model.modules()}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise ValueError(f"transformer_cls_names_to_wrap: the model has no layer class {', '.join(missing)}")
    return tuple(by_name[name] for name in names)


def unit_selector(
    plugin: FullyShardedDataParallelPlugin, model: torch.nn.Module
) -> Callable[[torch.nn.Module, int], bool] | None:
    """``selects(module, unwrapped_numel)``: should this module become its own sharded unit?

    ``unwrapped_numel`` counts the module's parameters that no unit below it holds yet.
    """
    policy = plugin.auto_wrap_policy
    if policy is None:
        return None
    if policy == "transformer_based_wrap":
        names = plugin.transformer_cls_names_to_wrap or list(getattr(model, "_no_split_modules", None) or [])
        if not names:
            raise ValueError(
                "auto_wrap_policy='transformer_based_wrap' needs transformer_cls_names_to_wrap "
                "(or FSDP_TRANSFORMER_CLS_TO_WRAP) naming the layer class"
            )
        classes = _classes_named(model, names)
        return lambda module, numel: isinstance(module, classes)
    if policy == "size_based_wrap":
        minimum = plugin.min_num_params or 0
        return lambda module, numel: numel > 0 and numel >= minimum
    # A torch (FSDP1-style) policy: asked, as torch does, about one module without recursing.
    return lambda module, numel: bool(policy(module=module, recurse=False, nonwrapped_numel=numel))


def _units_bottom_up(
    model: torch.nn.Module, selects: Callable[[torch.nn.Module, int], bool] | None
) -> list[torch.nn.Module]:
    """Modules (root excluded) the policy makes units, each listed after every unit inside it."""
    if selects is None:
        return []
    claimed: set[int] = set()  # parameters already in a unit below
    units = []
    for module in reversed(list(model.modules())[1:]):  # reversed pre-order: children first
        own = [param for param in module.parameters() if id(param) not in claimed]
        if selects(module, sum(param.numel() for param in own)):
            units.append(module)
            claimed.update(id(param) for param in own)
    return units


# --------------------------------------------------------------------------------------------
# Sharding
# --------------------------------------------------------------------------------------------


def _mixed_precision_policy(plugin: FullyShardedDataParallelPlugin, mixed_precision: str) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = plugin.mixed_precision_policy
    if isinstance(policy, MixedPrecisionPolicy):
        return policy
    if isinstance(policy, dict):
        allowed = {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"}
        unknown = set(policy) - allowed - {"buffer_dtype"}  # FSDP1's buffer_dtype: buffers are not cast in FSDP2
        if unknown:
            raise ValueError(f"mixed_precision_policy: unknown key(s) {', '.join(sorted(unknown))}")
        return MixedPrecisionPolicy(**{key: value for key, value in policy.items() if key in allowed})
    name = policy if policy is not None else mixed_precision
    if name in (None, "no"):
        return MixedPrecisionPolicy()
    if name not in _LOW_PRECISION:
        raise ValueError(f"mixed_precision_policy {name!r}: use bf16, fp16, fp32, a dict or a MixedPrecisionPolicy")
    # Weights are gathered and computed in the low precision; gradients are averaged in fp32
    # (summing N low-precision gradients loses bits that the fp32 shards would keep).
    return MixedPrecisionPolicy(param_dtype=_LOW_PRECISION[name], reduce_dtype=torch.float32)


def _ignored_parameters(
    plugin: FullyShardedDataParallelPlugin, model: torch.nn.Module
) -> set[torch.nn.Parameter] | None:
    ignored = plugin.ignored_modules
    if ignored is None:
        return None
    if isinstance(ignored, str):
        pattern = re.compile(ignored)
        modules = [module for name, module in model.named_modules() if pattern.fullmatch(name)]
    else:
        modules = list(ignored)
    return {param for module in modules for param in module.parameters()}


def fully_shard_options(
    plugin: FullyShardedDataParallelPlugin, mixed_precision: str, model: torch.nn.Module
) -> dict[str, Any]:
    """The keyword arguments every ``fully_shard`` call gets."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if plugin.cpu_offload else OffloadPolicy()
    options: dict[str, Any] = {
        "reshard_after_forward": plugin.reshard_after_forward,
        "mp_policy": _mixed_precision_policy(plugin, mixed_precision),
        "offload_policy": offload,
    }
    ignored = _ignored_parameters(plugin, model)
    if ignored:
        options["ignored_params"] = ignored
    return options


def checkpoint_activations(module: torch.nn.Module, offload: bool = False) -> None:
    """Run ``module``'s forward under non-reentrant ``torch.utils.checkpoint``: its activations
    are recomputed in backward. The forward is replaced on the instance (no wrapper module), so
    parameter names and state-dict keys stay as they were."""
    inner = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        saved_on_host = (
            torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())
            if offload
            else contextlib.nullcontext()
        )
        with saved_on_host:
            return torch.utils.checkpoint.checkpoint(inner, *args, use_reentrant=False, **kwargs)

    module.forward = functools.wraps(inner)(forward)


def is_sharded(model: Any) -> bool:
    """True for a model ``fully_shard`` has sharded."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def device_mesh(device: torch.device) -> Any:
    """All ranks of the default group, on ``device``'s type. torch's own default follows the
    machine (CUDA whenever present), which would be wrong for ``Accelerator(cpu=True)`` on a GPU
    machine (a Gloo group and CPU tensors)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def shard_model(
    model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin, mixed_precision: str, device: torch.device
) -> torch.nn.Module:
    """Shard ``model`` in place across the default process group and return it.

    The units the policy selects are sharded first (innermost first), then the root. The model
    need not be on the device: each rank keeps only its shard, moved to the device (or, with
    ``cpu_offload``, kept in host memory), so the full model never has to fit on one device.
    """
    from torch.distributed.fsdp import fully_shard

    if is_sharded(model):
        return model
    if plugin.cpu_ram_efficient_loading:
        from_rank0 = take_rank0_weights(model)
    elif on_meta_device(model):
        raise ValueError(
            "prepare: the model has tensors on the meta device (no values); build it with real weights, "
            "or on rank 0 only with FullyShardedDataParallelPlugin(cpu_ram_efficient_loading=True)"
        )
    options = {**fully_shard_options(plugin, mixed_precision, model), "mesh": device_mesh(device)}
    units = _units_bottom_up(model, unit_selector(plugin, model))
    if plugin.activation_checkpointing:
        if not units:
            raise ValueError("activation_checkpointing needs an auto_wrap_policy: it checkpoints each unit")
        for unit in units:
            checkpoint_activations(unit, offload=bool(plugin.activation_checkpointing_offload))
    for unit in units:
        fully_shard(unit, **options)
    # The root's own leftovers are gathered at the start of forward and needed again at the start
    # of backward: torch's default for the root keeps them (reshard_after_forward unset).
    fully_shard(model, **{key: value for key, value in options.items() if key != "reshard_after_forward"})
    if plugin.cpu_ram_efficient_loading:
        load_rank0_weights(model, from_rank0, device)
    return model


# --------------------------------------------------------------------------------------------
# cpu_ram_efficient_loading: shard on the meta device, then fill the shards from rank 0
# --------------------------------------------------------------------------------------------


def on_meta_device(model: torch.nn.Module) -> bool:
    """Whether any parameter or buffer of ``model`` is a meta tensor (a shape without storage)."""
    return any(tensor.is_meta for tensor in itertools.chain(model.parameters(), model.buffers()))


def _non_persistent_buffer_names(model: torch.nn.Module) -> list[str]:
    # Buffers registered with persistent=False are not in the state dict, so the broadcast of
    # the state dict does not carry them (rotary frequencies, BERT's position_ids...).
    return [
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        for name in sorted(module._non_persistent_buffers_set)
        if module._buffers.get(name) is not None
    ]


def tied_parameter_names(model: torch.nn.Module) -> list[list[str]]:
    """Groups of names under which one parameter is registered (an embedding and an LM head)."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def retie(model: torch.nn.Module, tied: list[list[str]]) -> None:
    """Register the first name's parameter under the others again. Moving a module between
    devices (``to``, ``to_empty``) converts each registration on its own, which can leave a tied
    pair as two separate parameters."""
    for first, *others in tied:
        shared = model.get_parameter(first)
        for name in others:
            owner, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(owner), leaf, shared)


@dataclass
class Rank0Weights:
    """What rank 0 keeps of its model while every rank's copy goes to the meta device: the
    full state dict and the non-persistent buffers (the very tensors, not copies); empty on the
    other ranks. ``tied``: the model's tied parameters (every rank)."""

    state_dict: dict[str, Any]
    buffers: dict[str, torch.Tensor]
    tied: list[list[str]]


def take_rank0_weights(model: torch.nn.Module) -> Rank0Weights:
    """Every rank: keep rank 0's real weights aside, then move the model to the meta device, so
    that sharding allocates nothing and each rank later allocates only its own shards."""
    import torch.distributed as dist

    weights = Rank0Weights({}, {}, tied_parameter_names(model))
    if dist.get_rank() == 0:
        if on_meta_device(model):
            raise ValueError(
                "cpu_ram_efficient_loading: rank 0's model is on the meta device, but its weights are "
                "the ones every rank receives; build it with real weights on rank 0 (other ranks may use "
                "init_empty_weights)"
            )
        weights.state_dict = model.state_dict()
        weights.buffers = {name: model.get_buffer(name) for name in _non_persistent_buffer_names(model)}
    model.to(torch.device("meta"))
    retie(model, weights.tied)  # before sharding: FSDP must see one parameter, not two
    return weights


def load_rank0_weights(model: torch.nn.Module, weights: Rank0Weights, device: torch.device) -> None:
    """Every rank: allocate the sharded model's storage on ``device`` (its shards, and the
    buffers whole), then fill it from rank 0. torch's ``set_model_state_dict`` broadcasts rank 0's
    full tensors one at a time and each rank keeps the slice its shard covers.

    With ``cpu_offload``, FSDP moves the shards to host memory at the first forward, as when the
    model is sharded from real weights."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model.to_empty(device=device)
    retie(model, weights.tied)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, weights.state_dict, options=options)
    for name in _non_persistent_buffer_names(model):
        buffer = model.get_buffer(name)
        if dist.get_rank() == 0:
            buffer.copy_(weights.buffers[name])
        dist.broadcast(buffer, src=0)
    weights.state_dict.clear()  # rank 0 lets go of its full copy
    weights.buffers.clear()


@contextlib.contextmanager
def gradient_sync_paused(model: torch.nn.Module) -> Iterator[None]:
    """FSDP's ``no_sync``: backward accumulates local (unsharded) gradients without the
    reduce-scatter; the first backward outside the block reduces the sum."""
    model.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]


def as_plain_tensor(value: torch.Tensor) -> torch.Tensor:
    """A DTensor result (e.g. the gradient norm over shards) as an ordinary, replicated tensor."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value


def clip_grad_norm_(parameters: list[torch.Tensor], max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` that also takes sharded and unsharded gradients mixed
    (a model with ``ignored_modules``), returning the total norm as an ordinary tensor.

    Sharded gradients are DTensors: their norm is reduced across ranks. torch refuses lists that
    mix them with plain tensors, so each kind gets its own norm, the two are combined (the
    p-norm of the parts' p-norms is the p-norm of the whole), and both kinds are scaled alike.
    """
    from torch.distributed.tensor import DTensor

    with_grads = [param for param in parameters if param.grad is not None]
    sharded = [param for param in with_grads if isinstance(param.grad, DTensor)]
    plain = [param for param in with_grads if not isinstance(param.grad, DTensor)]
    if not (sharded and plain):
        return as_plain_tensor(torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type))
    parts = [
        as_plain_tensor(torch.nn.utils.get_total_norm([p.grad for p in group], norm_type)) for group in (sharded, plain)
    ]
    total = torch.nn.utils.get_total_norm(parts, norm_type)
    scale = min(1.0, max_norm / (float(total) + 1e-6))
    if scale < 1.0:
        for param in with_grads:
            param.grad.mul_(scale)
    return total


# --------------------------------------------------------------------------------------------
# Optimizers built on the parameters the model had before sharding
# --------------------------------------------------------------------------------------------


class ParameterSwaps:
    """Which sharded parameter replaced which original one, for optimizers built before ``prepare``.

    Both sides are held weakly: the sharded model no longer needs the originals' full-size
    storage (an optimizer that held them lets go once re-pointed), and a model freed later must
    not be kept alive by this record. Each entry checks identity, so an address reused by a later
    object is never mistaken for a swapped parameter.
    """

    def __init__(self) -> None:
        self._swaps: dict[int, tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor]]] = {}

    @staticmethod
    def names_of(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
        """The model's parameters by name, before sharding (pass the result to :meth:`record`)."""
        return dict(model.named_parameters(remove_duplicate=False))

    def record(self, before: dict[str, torch.nn.Parameter], model: torch.nn.Module) -> None:
        """Pair each original parameter with the sharded one now under the same name."""
        after = dict(model.named_parameters(remove_duplicate=False))
        for name, original in before.items():
            if name in after and after[name] is not original:
                self._swaps[id(original)] = (weakref.ref(original), weakref.ref(after[name]))

    def _replacement(self, param: torch.Tensor) -> torch.Tensor:
        entry = self._swaps.get(id(param))
        replacement = entry[1]() if entry is not None and entry[0]() is param else None
        return param if replacement is None else replacement

    def repoint(self, optimizer: torch.optim.Optimizer) -> None:
        """Make ``optimizer`` update the sharded parameters instead of the originals."""
        for group in optimizer.param_groups:
            replaced = [self._replacement(param) for param in group["params"]]
            if any(new is not old for new, old in zip(replaced, group["params"])) and any(
                old in optimizer.state for old in group["params"]
            ):
                raise ValueError(
                    "an optimizer that has already stepped cannot follow its model into FSDP "
                    "(its state is full-size); prepare model and optimizer before training"
                )
            group["params"] = replaced


# --------------------------------------------------------------------------------------------
# State dicts and checkpoints (torch.distributed.checkpoint)
# --------------------------------------------------------------------------------------------


def full_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """The whole model's state dict on rank 0, in CPU memory (an empty dict on other ranks).

    Every rank must call it: each contributes its shards to the gather.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def owning_model(optimizer: torch.optim.Optimizer, models: Iterable[torch.nn.Module]) -> torch.nn.Module | None:
    """The sharded model whose parameters ``optimizer`` updates (None: not a sharded model's)."""
    first = next((param for group in optimizer.param_groups for param in group["params"]), None)
    for model in models:
        if is_sharded(model) and any(param is first for param in model.parameters()):
            return model
    return None


def model_entry(index: int, full: bool) -> str:
    """``pytorch_model_fsdp_<i>.bin`` (full) or ``pytorch_model_fsdp_<i>/`` (DCP, Accelerate's name
    too; for a full state dict Accelerate 1.15 writes ``pytorch_model_fsdp.bin`` for model 0)."""
    return f"pytorch_model_fsdp_{index}{'.bin' if full else ''}"


def optimizer_entry(index: int, full: bool) -> str:
    """``optimizer_<i>.bin`` (full) or ``optimizer_<i>/`` (DCP)."""
    return f"optimizer_{index}{'.bin' if full else ''}"


def _state_options(full: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=full)


def write_model_and_optimizers(
    folder: Path,
    models: list[tuple[int, torch.nn.Module]],
    optimizers: list[tuple[int, torch.optim.Optimizer, torch.nn.Module]],
    full: bool,
) -> dict[str, Any]:
    """Every rank: save the sharded models and their optimizers into ``folder``.

    Sharded (``SHARDED_STATE_DICT``): one DCP folder per object, every rank writing its own
    shard file (``__<rank>_0.distcp``) and rank 0 the ``.metadata`` that maps global tensor
    regions to files; DCP can load it onto another number of ranks. Full: the gathered state
    dicts are returned (non-empty on rank 0 only), for the caller to write as ordinary files.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    options = _state_options(full)
    gathered: dict[str, Any] = {}
    for index, model in models:
        state = get_model_state_dict(model, options=options)
        if full:
            gathered[model_entry(index, True)] = state
        else:
            dcp.save(state, checkpoint_id=str(folder / model_entry(index, False)))
    for index, optimizer, model in optimizers:
        state = get_optimizer_state_dict(model, optimizer, options=options)
        if full:
            gathered[optimizer_entry(index, True)] = state
        else:
            dcp.save(state, checkpoint_id=str(folder / optimizer_entry(index, False)))
    return {name: state for name, state in gathered.items() if state}


def load_model_and_optimizers(
    folder: Path,
    models: list[tuple[int, torch.nn.Module]],
    optimizers: list[tuple[int, torch.optim.Optimizer, torch.nn.Module]],
    full: bool,
    read_file: Callable[[str], Any],
    strict: bool = True,
) -> None:
    """Every rank: the inverse of :func:`write_model_and_optimizers`.

    Sharded: each rank asks DCP for exactly the regions its shards cover (whatever the number
    of ranks that wrote them). Full: every rank reads the verified file (``read_file``) and keeps
    its own shard of each tensor.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    for index, model in models:
        if full:
            state = read_file(model_entry(index, True))
        else:
            state = get_model_state_dict(model)
            dcp.load(state, checkpoint_id=str(folder / model_entry(index, False)))
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=full, strict=strict))
    for index, optimizer, model in optimizers:
        if full:
            state = read_file(optimizer_entry(index, True))
        else:
            # The optimizer's state must exist to be loaded into: an empty optimizer gets it
            # initialised (one zero-learning-rate step) by get_optimizer_state_dict.
            state = get_optimizer_state_dict(model, optimizer)
            dcp.load(state, checkpoint_id=str(folder / optimizer_entry(index, False)))
        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=full))
