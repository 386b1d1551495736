"""Mixed precision: run the forward pass in fp16/bf16 under ``torch.autocast``, keep outputs fp32.

- ``bf16`` has fp32's range, so autocast alone is enough.
- ``fp16`` has a narrow range: small gradients underflow to zero. A ``GradScaler`` multiplies the
  loss before ``backward`` and divides the gradients before the optimizer step; when it finds
  inf/NaN gradients it skips that step and lowers the scale.

Prepared models get their ``forward`` wrapped so that the script's own loss computation (outside
the model) sees fp32 tensors, as with Accelerate.

Deliberate difference from Accelerate: ``mixed_precision="fp16"`` on CPU really autocasts and
scales (torch has CPU fp16 autocast and ``GradScaler("cpu")``); Accelerate silently does nothing
there. A device type without fp16 autocast gets a clear error instead of a silent no-op.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch

PRECISIONS = ("no", "fp16", "bf16")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_mixed_precision(value: str | None) -> str:
    """``None`` means ``ACCELERATE_MIXED_PRECISION`` (set by launchers) or ``"no"``; validated."""
    if value is None:
        value = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    value = str(value).lower()
    if value == "fp8":
        raise ValueError("mixed_precision='fp8' is not supported by runtime; use 'bf16' or 'fp16'")
    if value not in PRECISIONS:
        raise ValueError(f"mixed_precision={value!r} is not one of {', '.join(PRECISIONS)}")
    return value


def check_device_supports(mixed_precision: str, device: torch.device) -> None:
    """Fail now, not silently later, when the device cannot autocast to the requested dtype."""
    if mixed_precision == "no":
        return
    if not torch.amp.is_autocast_available(device.type):
        raise ValueError(f"mixed_precision={mixed_precision!r}: torch has no autocast for device {device}")
    if mixed_precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"mixed_precision='bf16' is not supported by this GPU ({device})")


def autocast_context(
    device: torch.device, mixed_precision: str, autocast_kwargs: dict[str, Any] | None = None
) -> AbstractContextManager:
    """``torch.autocast`` for the precision, or a do-nothing context for ``"no"``."""
    if mixed_precision == "no":
        return contextlib.nullcontext()
    kwargs = dict(autocast_kwargs or {})
    return torch.autocast(device_type=device.type, dtype=_DTYPES[mixed_precision], **kwargs)


def outputs_to_fp32(data: Any) -> Any:
    """Cast every fp16/bf16 tensor in a nested output to fp32; other leaves are kept as they are."""
    if isinstance(data, torch.Tensor):
        return data.float() if data.dtype in (torch.float16, torch.bfloat16) else data
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(outputs_to_fp32(item) for item in data))
    if isinstance(data, (list, tuple)):
        return type(data)(outputs_to_fp32(item) for item in data)
    if isinstance(data, Mapping):
        return type(data)({key: outputs_to_fp32(value) for key, value in data.items()})
    return data


class AutocastForward:
    """A model's original ``forward`` run under autocast, with fp32 outputs.

    ``__wrapped__`` points at the original so ``unwrap_model(keep_fp32_wrapper=False)`` can undo it.
    """

    def __init__(self, forward: Callable[..., Any], make_context: Callable[[], AbstractContextManager]) -> None:
        self.__wrapped__ = forward
        self.make_context = make_context
        functools.update_wrapper(self, forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.make_context():
            outputs = self.__wrapped__(*args, **kwargs)
        return outputs_to_fp32(outputs)


def patch_forward(model: torch.nn.Module, make_context: Callable[[], AbstractContextManager]) -> None:
    """Replace ``model.forward`` (on the instance) by its autocast version, once."""
    if isinstance(model.__dict__.get("forward"), AutocastForward):
        return
    model._original_forward = model.forward
    model.forward = AutocastForward(model.forward, make_context)


def remove_forward_patch(model: torch.nn.Module) -> None:
    """Undo :func:`patch_forward`: the instance falls back to its class's ``forward``."""
    if isinstance(model.__dict__.get("forward"), AutocastForward):
        original = model.__dict__["forward"].__wrapped__
        # A bound method of the class is what attribute lookup gives anyway: just drop the patch.
        if getattr(original, "__func__", None) is type(model).forward:
            del model.forward
        else:
            model.forward = original


def make_grad_scaler(
    mixed_precision: str, device: torch.device, scaler_kwargs: dict[str, Any] | None = None
) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 on the device's type; None for bf16 and full precision."""
    if mixed_precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type, **(scaler_kwargs or {}))
