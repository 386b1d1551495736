"""Wrapping a model in DistributedDataParallel, including models that leave parameters unused.

How DDP works: every rank holds a full copy of the model. During ``backward`` DDP's reducer
all-reduces (averages) gradients bucket by bucket as soon as every parameter in a bucket has its
gradient, overlapping communication with the rest of the backward pass. After backward all ranks
hold the same averaged gradient, so the identical optimizer steps keep the copies identical.

The unused-parameter problem: a parameter that takes no part in the loss (BERT's pooler when the
head reads ``last_hidden_state[:, 0]``) never gets a gradient, so its bucket never becomes ready,
the reduction never finishes, and the next forward fails with DDP's bare "Expected to have
finished reduction in the prior iteration". Accelerate leaves the user to discover
``find_unused_parameters=True``, which walks the autograd graph after *every* forward.

Our choice: when the script sets neither ``find_unused_parameters`` nor ``static_graph``, wrap
with ``static_graph=True``. A static graph lets DDP learn, during the first iteration, which
parameters are used and in which order gradients arrive; from the second iteration on, unused
parameters are marked ready up front and buckets are rebuilt in arrival order, so it handles
unused parameters without any per-step graph walk (benchmarks/ddp_unused_params.py measures the
per-step cost against plain DDP on a model that uses all its parameters). Two consequences:

- The first iteration must synchronise: DDP cannot record its graph inside ``no_sync()``
  (torch hits an internal assert). :class:`RuntimeDDP` therefore ignores ``no_sync`` until one
  synced forward has run; averaging is linear, so syncing that step early gives the same
  accumulated gradient.
- A model whose set of used parameters *changes* between iterations cannot use a static graph.
  That still fails, but with an error that names the parameters and the fix
  (``DistributedDataParallelKwargs(find_unused_parameters=True)``).
"""

from __future__ import annotations

import contextlib
import re
import weakref
from typing import Any, Iterator

import torch
from torch.nn.parallel import DistributedDataParallel

_UNFINISHED_REDUCTION = "Expected to have finished reduction"
_UNUSED_INDICES = re.compile(r"Parameter indices which did not receive grad for rank \d+:\s*([\d ]+)")


class UnusedParametersError(RuntimeError):
    """DDP could not finish reducing gradients because some parameters got none."""


def ddp_options(user_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The handler's DDP kwargs, with ``static_graph=True`` unless the user chose how to handle
    unused parameters themselves."""
    options = {key: value for key, value in user_kwargs.items() if not key.startswith("comm_")}
    if "find_unused_parameters" not in options and "static_graph" not in options:
        options["static_graph"] = True
    return options


def unused_parameter_names(ddp: DistributedDataParallel, message: str) -> list[str]:
    """Map the parameter indices in DDP's error message to the module's parameter names."""
    match = _UNUSED_INDICES.search(message)
    if not match:
        return []
    names = {id(param): name for name, param in ddp.module.named_parameters()}
    reducer_params = getattr(ddp, "_module_parameters", None) or [
        param for param in ddp.module.parameters() if param.requires_grad
    ]
    indices = [int(index) for index in match.group(1).split()]
    return [names.get(id(reducer_params[i]), f"#{i}") for i in indices if i < len(reducer_params)]


def explain_unfinished_reduction(ddp: DistributedDataParallel, error: RuntimeError) -> UnusedParametersError:
    """A readable version of DDP's unfinished-reduction error: which parameters, and what to do."""
    names = unused_parameter_names(ddp, str(error))
    which = ", ".join(names) if names else "(names unavailable; set TORCH_DISTRIBUTED_DEBUG=DETAIL)"
    return UnusedParametersError(
        f"these parameters received no gradient in the previous step: {which}. "
        "The model leaves different parameters unused from one step to the next, which DDP's "
        "static graph cannot follow. Fix: Accelerator(kwargs_handlers=[DistributedDataParallelKwargs("
        "find_unused_parameters=True)]), or make every parameter take part in the loss "
        "(or set requires_grad=False on the ones you never train)."
    )


#: Every wrapper this process made, so that the exit handler can let go of their process group.
_live_wrappers: "weakref.WeakSet[DistributedDataParallel]" = weakref.WeakSet()


def release_process_group_references() -> None:
    """Drop the C++ reducer and logger of every live wrapper: they hold the process group.

    A script's model often lives in a module global until the interpreter tears everything down;
    a Gloo group still referenced then is destroyed in arbitrary order with its worker threads
    and the process dies with "terminate called without an active exception". The wrappers are
    unusable afterwards, which is fine: this only runs at exit.
    """
    for wrapper in list(_live_wrappers):
        for attribute in ("reducer", "logger"):
            wrapper.__dict__.pop(attribute, None)


class RuntimeDDP(DistributedDataParallel):
    """DistributedDataParallel that records its static graph on a synced step and explains
    unused-parameter failures (it is a plain DDP for ``isinstance`` and ``.module``)."""

    def __init__(self, module: torch.nn.Module, **kwargs: Any) -> None:
        _live_wrappers.add(self)
        super().__init__(module, **kwargs)
        self._graph_recorded = not kwargs.get("static_graph", False)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        try:
            outputs = super().forward(*inputs, **kwargs)
        except RuntimeError as error:
            if _UNFINISHED_REDUCTION in str(error):
                raise explain_unfinished_reduction(self, error) from error
            raise
        if torch.is_grad_enabled() and self.require_backward_grad_sync:
            self._graph_recorded = True
        return outputs

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """DDP's ``no_sync``, except before the static graph's first (recording) iteration."""
        if not self._graph_recorded:
            yield
            return
        with super().no_sync():
            yield


def wrap_in_ddp(model: torch.nn.Module, device: torch.device, user_kwargs: dict[str, Any]) -> RuntimeDDP:
    """Wrap a model already on its device; GPU models pin DDP to their local device."""
    options = ddp_options(user_kwargs)
    if device.type == "cuda":
        options.setdefault("device_ids", [device.index])
        options.setdefault("output_device", device.index)
    return RuntimeDDP(model, **options)


def register_comm_hook(ddp: DistributedDataParallel, user_kwargs: dict[str, Any]) -> None:
    """Apply ``comm_hook="fp16"|"bf16"`` (compress gradients for the all-reduce), as Accelerate does."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook_name = user_kwargs.get("comm_hook", "no")
    hooks = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
    if hook_name == "no":
        return
    if hook_name not in hooks:
        raise ValueError(f"DistributedDataParallelKwargs(comm_hook={hook_name!r}) is not supported; use fp16 or bf16")
    ddp.register_comm_hook(state=None, hook=hooks[hook_name])
