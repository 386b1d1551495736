"""Optimizer and scheduler wrappers that make gradient accumulation and fp16 invisible to the script.

Under ``accumulate()``, ``optimizer.step()`` and ``optimizer.zero_grad()`` are called on every batch
but must only act on *sync* steps (when the accumulated gradient is complete). Under fp16 the
step goes through the ``GradScaler``, which may skip it when gradients overflowed; the scheduler
must then not advance either.

Scheduler stepping follows Accelerate's rule: a prepared loader is ``num_processes`` times
shorter, so a schedule written for one process would end ``num_processes`` times too late;
each optimizer step therefore advances the scheduler ``num_processes`` times (once with
``split_batches``, where the loader keeps its length; always once per call with
``step_scheduler_with_optimizer=False``).

``ReduceLROnPlateau`` is the exception, stepped once per call, whatever the process count: it
counts the evaluations it is given (``scheduler.step(val_loss)``), not optimizer steps, so
stepping it ``num_processes`` times would spend its patience that many times faster (on 2
processes, ``patience=2`` cut the learning rate after the first epoch without improvement
instead of the third). Accelerate steps it ``num_processes`` times like any other scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel_convert.runtime.gradient_state import GradientState


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer: steps and zeroes only on sync steps, through the GradScaler under fp16.

    It is an ``Optimizer`` (schedulers built after ``prepare`` accept it) whose ``param_groups``,
    ``state`` and ``defaults`` are the wrapped optimizer's own objects. ``.optimizer`` is the inner one.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_state: GradientState,
        scaler: torch.amp.GradScaler | None = None,
        move_state: bool = False,
    ) -> None:
        # Optimizer.__init__ is deliberately not called: this object owns no parameters itself.
        self.optimizer = optimizer
        self.gradient_state = gradient_state
        self.scaler = scaler
        #: True when the GradScaler found inf/NaN gradients and skipped the last sync step.
        self.step_was_skipped = False
        self._grads_unscaled = False
        if move_state and optimizer.state:
            # load_state_dict casts state tensors to their parameter's device (the model moved).
            optimizer.load_state_dict(optimizer.state_dict())

    # The wrapped optimizer's data, shared (not copied) so in-place edits reach it.
    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, state: Any) -> None:
        self.optimizer.state = state

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, defaults: dict[str, Any]) -> None:
        self.optimizer.defaults = defaults

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group to the wrapped optimizer."""
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped object's ``state_dict()``."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped object."""
        self.optimizer.load_state_dict(state_dict)

    def train(self) -> None:
        """Forwarded for optimizers with train/eval modes (schedule-free optimizers)."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        """Forwarded for optimizers with train/eval modes."""
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Clear gradients (to None by default), but only once the accumulated gradient has been
        used (sync steps)."""
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=True if set_to_none is None else set_to_none)

    def unscale_gradients(self) -> None:
        """Divide the gradients by the loss scale, at most once per optimizer step."""
        if self.scaler is not None and not self._grads_unscaled:
            self.scaler.unscale_(self.optimizer)
            self._grads_unscaled = True

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Apply the update on sync steps; under fp16 let the GradScaler decide (it skips on inf/NaN)."""
        if not self.gradient_state.sync_gradients:
            return None
        if self.scaler is None:
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        result = self._scaled_step(closure)
        self._grads_unscaled = False
        return result

    def _scaled_step(self, closure: Callable[[], Any] | None) -> Any:
        # GradScaler.step silently skips optimizer.step on overflow; record whether it was called.
        inner_step = self.optimizer.step
        patched_before = self.optimizer.__dict__.get("step")  # schedulers may patch step too
        called = []

        def recording_step(*args: Any, **kwargs: Any) -> Any:
            called.append(True)
            return inner_step(*args, **kwargs)

        self.optimizer.step = recording_step
        try:
            result = self.scaler.step(self.optimizer, closure) if closure else self.scaler.step(self.optimizer)
            self.scaler.update()
        finally:
            if patched_before is None:
                del self.optimizer.step
            else:
                self.optimizer.step = patched_before
        self.step_was_skipped = not called
        return result

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


class AcceleratedScheduler:
    """Wraps an LR scheduler: advances only after a real optimizer step, ``num_processes`` times."""

    def __init__(
        self,
        scheduler: Any,
        optimizers: list[AcceleratedOptimizer],
        gradient_state: GradientState,
        num_processes: int,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers
        self.gradient_state = gradient_state
        self.num_processes = num_processes
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance the schedule as many times as the optimizers really stepped (see module doc)."""
        if not self.step_with_optimizer or isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            return
        if any(optimizer.step_was_skipped for optimizer in self.optimizers):
            return
        for _ in range(1 if self.split_batches else self.num_processes):
            if self._schedule_exhausted():
                break
            self.scheduler.step(*args, **kwargs)

    def _schedule_exhausted(self) -> bool:
        # OneCycleLR-style schedulers raise when stepped past total_steps.
        total_steps = getattr(self.scheduler, "total_steps", None)
        return total_steps is not None and getattr(self.scheduler, "_step_count", 0) > total_steps

    def get_last_lr(self) -> list[float]:
        """The wrapped scheduler's last learning rates."""
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped object's ``state_dict()``."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped object."""
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> Any:
        """The wrapped scheduler's ``get_lr()``."""
        return self.scheduler.get_lr()

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped scheduler's ``print_lr(...)``."""
        return self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found normally (last_epoch, base_lrs, ...).
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
