"""DDP communication hooks: what travels in the gradient all-reduce (Accelerate's ``comm_hook``).

``DistributedDataParallelKwargs(comm_hook=..., comm_wrapper=..., comm_state_option=...)`` picks a
hook from torch's own library (``torch.distributed.algorithms.ddp_comm_hooks``):

* ``fp16`` / ``bf16``: gradients are cast to half precision for the all-reduce and back after it,
  halving the bytes on the wire at the cost of precision in the averaged gradient;
* ``power_sgd`` / ``batched_power_sgd``: low-rank compression (PowerSGD); ``comm_state_option``
  goes to ``PowerSGDState`` (``matrix_approximation_rank``, ``start_powerSGD_iter``, ...);
* ``comm_wrapper="fp16"|"bf16"`` additionally casts what a PowerSGD hook sends.

The hook is registered on the DDP wrapper ``prepare`` creates, once, before the first backward.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any


class DDPCommunicationHookType(str, Enum):
    """Accelerate's hook names. A ``str`` enum, so ``comm_hook="fp16"`` and
    ``comm_hook=DDPCommunicationHookType.FP16`` are the same, and ``str()`` gives the value."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"

    def __str__(self) -> str:
        return self.value


_POWER_SGD_HOOKS = (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
_WRAPPERS = (DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16)


def _hook_type(value: Any, argument: str, allowed: tuple[DDPCommunicationHookType, ...]) -> DDPCommunicationHookType:
    try:
        hook = DDPCommunicationHookType(str(getattr(value, "value", value)))
    except ValueError:
        hook = None
    if hook not in allowed:
        names = ", ".join(repr(member.value) for member in allowed)
        raise ValueError(f"DistributedDataParallelKwargs({argument}={value!r}) is not supported; use one of {names}")
    return hook


def _torch_hook(hook: DDPCommunicationHookType) -> Callable[..., Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks: dict[DDPCommunicationHookType, Callable[..., Any]] = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
        DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
        DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
    }
    return hooks[hook]


def _torch_wrapper(wrapper: DDPCommunicationHookType) -> Callable[..., Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if wrapper == DDPCommunicationHookType.FP16:
        return default_hooks.fp16_compress_wrapper
    return default_hooks.bf16_compress_wrapper


def register_comm_hook(
    ddp: Any, comm_hook: Any = "no", comm_wrapper: Any = "no", comm_state_option: dict[str, Any] | None = None
) -> DDPCommunicationHookType:
    """Register the chosen hook on a ``DistributedDataParallel`` model; returns the hook type.

    Unknown names, a wrapper without a hook, or state options for a hook that takes none raise
    ``ValueError`` (Accelerate ignores the latter two silently).
    """
    hook = _hook_type(comm_hook, "comm_hook", tuple(DDPCommunicationHookType))
    wrapper = _hook_type(comm_wrapper, "comm_wrapper", _WRAPPERS)
    options = dict(comm_state_option or {})
    if hook == DDPCommunicationHookType.NO:
        if wrapper != DDPCommunicationHookType.NO or options:
            raise ValueError("DistributedDataParallelKwargs: comm_wrapper and comm_state_option need a comm_hook")
        return hook
    if options and hook not in _POWER_SGD_HOOKS:
        raise ValueError(
            f"DistributedDataParallelKwargs(comm_state_option=...) only applies to PowerSGD hooks, "
            f"not comm_hook={hook.value!r}"
        )
    state: Any = None
    if hook in _POWER_SGD_HOOKS:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=None, **options)
    function = _torch_hook(hook)
    if wrapper != DDPCommunicationHookType.NO:
        function = _torch_wrapper(wrapper)(function)
    ddp.register_comm_hook(state=state, hook=function)
    return hook


__all__ = ["DDPCommunicationHookType", "register_comm_hook"]
