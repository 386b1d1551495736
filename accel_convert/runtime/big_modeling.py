"""``init_empty_weights``: build a model without allocating its weights (Accelerate's
``accelerate.init_empty_weights``, same arguments and behaviour).

Inside the block every parameter a module registers is moved to the meta device: it keeps its
shape, dtype and ``requires_grad`` but has no storage, so building a 7B-parameter model takes no
memory and no time for initialisation. Buffers stay real unless ``include_buffers=True`` (they are
small, and often computed in ``__init__``: rotary frequencies, position ids). Such a model cannot
run; under FSDP with ``cpu_ram_efficient_loading`` the ranks other than 0 build it this way and
``prepare`` fills their shards from rank 0's weights (see :mod:`runtime.fsdp`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from accel_convert.runtime.state import env_flag

__all__ = ["init_empty_weights"]

META = torch.device("meta")


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Parameters registered inside the block live on the meta device.

    ``include_buffers=True`` puts buffers (and every tensor created in the block) there too;
    unset, it follows ``ACCELERATE_INIT_INCLUDE_BUFFERS`` (default False), as in Accelerate.
    """
    if include_buffers is None:
        include_buffers = env_flag("ACCELERATE_INIT_INCLUDE_BUFFERS")
    if include_buffers:
        # torch's device context: every factory call in the block (and so every buffer) is meta.
        with META:
            yield
        return
    register_parameter = torch.nn.Module.register_parameter

    def register_on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register_parameter(module, name, param)
        if param is not None:
            # The module's own initialisation (reset_parameters) then runs on meta: nothing computed.
            registered = module._parameters[name]
            assert registered is not None
            extra = dict(registered.__dict__)  # a Parameter subclass's own attributes travel along
            extra["requires_grad"] = param.requires_grad
            module._parameters[name] = type(registered)(registered.to(META), **extra)

    torch.nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
