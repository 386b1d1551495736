"""``accelerator.profile()``: torch.profiler around a block of training, configured by ``ProfileKwargs``.

Each rank profiles itself; with ``output_trace_dir`` set, rank ``i`` writes
``profile_{i}.json`` (a Chrome trace: open it in chrome://tracing or Perfetto) when the block
ends, as Accelerate does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from accel_convert.runtime.handlers import KwargsHandler

#: The trace file of rank ``{suffix}`` (Accelerate's name).
PROFILE_FILE_PATTERN = "profile_{suffix}.json"


@dataclass
class ProfileKwargs(KwargsHandler):
    """Keyword arguments for :class:`torch.profiler.profile` (Accelerate's ``ProfileKwargs``).

    ``activities``: ``"cpu"`` and/or ``"cuda"`` (None: torch's default, every available one).
    ``schedule_option``: keyword arguments of :func:`torch.profiler.schedule` (``wait``,
    ``warmup``, ``active``, ``repeat``, ``skip_first``); call ``prof.step()`` each iteration.
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable[..., Any] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def _activity(self, name: str) -> torch.profiler.ProfilerActivity:
        known = {"cpu": torch.profiler.ProfilerActivity.CPU, "cuda": torch.profiler.ProfilerActivity.CUDA}
        if hasattr(torch.profiler.ProfilerActivity, "XPU"):
            known["xpu"] = torch.profiler.ProfilerActivity.XPU
        if name not in known:
            raise ValueError(f"ProfileKwargs: unknown profiler activity {name!r}; choose from {sorted(known)}")
        return known[name]

    def build(self) -> torch.profiler.profile:
        """The (not yet started) profiler this configuration describes."""
        activities = None if self.activities is None else [self._activity(name) for name in self.activities]
        schedule = None if self.schedule_option is None else torch.profiler.schedule(**self.schedule_option)
        return torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            with_modules=self.with_modules,
        )


@contextlib.contextmanager
def profile_block(
    handler: ProfileKwargs, process_index: int, wait_for_everyone: Callable[[], None]
) -> Iterator[torch.profiler.profile]:
    """Profile the block; then write this rank's trace if ``output_trace_dir`` is set and wait
    for the other ranks (so the folder is complete when any rank goes on)."""
    with handler.build() as profiler:
        yield profiler
    if handler.output_trace_dir is None:
        return
    os.makedirs(handler.output_trace_dir, exist_ok=True)
    profiler.export_chrome_trace(
        os.path.join(handler.output_trace_dir, PROFILE_FILE_PATTERN.format(suffix=process_index))
    )
    wait_for_everyone()


__all__ = ["PROFILE_FILE_PATTERN", "ProfileKwargs", "profile_block"]
