"""Every field a script sets on a kwargs handler reaches the object it configures, also at its
default value; fields never set leave the choice to the runtime (and torch).

The DDP cases wrap a model on a one-rank Gloo group in this process: enough for DDP to record
its options, and no launch needed.
"""

from __future__ import annotations

import copy
import datetime
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from accel_convert.runtime.ddp import wrap_in_ddp
from accel_convert.runtime.handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from tests.launching import free_port


@pytest.fixture(scope="module")
def one_rank_group() -> Iterator[None]:
    store = dist.TCPStore("127.0.0.1", free_port(), 1, True, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def wrapped(handler: DistributedDataParallelKwargs) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates broadcast_buffers/check_reduction
        return wrap_in_ddp(torch.nn.Linear(3, 2), torch.device("cpu"), handler.to_kwargs())


#: field, a value the script sets (the default first, then another), and how DDP exposes it.
DDP_FIELDS = [
    ("dim", 0, lambda ddp: ddp.dim),
    ("dim", 1, lambda ddp: ddp.dim),
    ("broadcast_buffers", True, lambda ddp: ddp.broadcast_buffers),
    ("broadcast_buffers", False, lambda ddp: ddp.broadcast_buffers),
    ("bucket_cap_mb", 25, lambda ddp: ddp.bucket_bytes_cap // (1024 * 1024)),
    ("bucket_cap_mb", 7, lambda ddp: ddp.bucket_bytes_cap // (1024 * 1024)),
    ("find_unused_parameters", False, lambda ddp: ddp.find_unused_parameters),
    ("find_unused_parameters", True, lambda ddp: ddp.find_unused_parameters),
    ("gradient_as_bucket_view", False, lambda ddp: ddp.gradient_as_bucket_view),
    ("gradient_as_bucket_view", True, lambda ddp: ddp.gradient_as_bucket_view),
    ("static_graph", False, lambda ddp: ddp.static_graph),
    ("static_graph", True, lambda ddp: ddp.static_graph),
]


@pytest.mark.parametrize(("name", "value", "read"), DDP_FIELDS)
def test_each_ddp_field_set_by_the_script_reaches_ddp(one_rank_group: None, name: str, value: Any, read: Any) -> None:
    assert read(wrapped(DistributedDataParallelKwargs(**{name: value}))) == value
    assigned = DistributedDataParallelKwargs()
    setattr(assigned, name, value)  # set after construction: just as explicit
    assert read(wrapped(assigned)) == value


def test_explicit_static_graph_false_gives_plain_ddp(one_rank_group: None) -> None:
    # The case Accelerate's (and formerly our) default-comparison dropped.
    ddp = wrapped(DistributedDataParallelKwargs(static_graph=False))
    assert ddp.static_graph is False and ddp.find_unused_parameters is False


def test_fields_never_set_are_not_forwarded() -> None:
    assert DistributedDataParallelKwargs().to_kwargs() == {}
    assert GradScalerKwargs().to_kwargs() == {}
    assert AutocastKwargs().to_kwargs() == {}
    assert InitProcessGroupKwargs().to_kwargs() == {}


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (GradScalerKwargs(init_scale=65536.0), {"init_scale": 65536.0}),
        (GradScalerKwargs(65536.0, 2.0), {"init_scale": 65536.0, "growth_factor": 2.0}),
        (GradScalerKwargs(growth_interval=10), {"growth_interval": 10}),
        (AutocastKwargs(enabled=True), {"enabled": True}),
        (AutocastKwargs(cache_enabled=False), {"cache_enabled": False}),
        (InitProcessGroupKwargs(timeout=None), {"timeout": None}),
        (InitProcessGroupKwargs(backend="gloo"), {"backend": "gloo"}),
        # "nccl" is the default backend, picked only where GPUs are (Accelerate's rule, documented).
        (
            InitProcessGroupKwargs(backend="nccl", timeout=datetime.timedelta(seconds=9)),
            {"timeout": datetime.timedelta(seconds=9)},
        ),
    ],
)
def test_other_handlers_forward_what_was_set(handler: Any, expected: dict[str, Any]) -> None:
    assert handler.to_kwargs() == expected


def test_explicit_fields_survive_copies_and_pickling() -> None:
    handler = DistributedDataParallelKwargs(static_graph=False)
    assert copy.deepcopy(handler).to_kwargs() == {"static_graph": False}
    assert pickle.loads(pickle.dumps(handler)).to_kwargs() == {"static_graph": False}
    assert handler == DistributedDataParallelKwargs()  # equality still compares values only
