"""Where the training loop is: which prepared loader is running, whether it is on its last batch,
and whether this step synchronises gradients.

Three features read the same few facts, so they live in one small object that the
:class:`~runtime.accelerator.Accelerator` owns and hands to every loader it prepares:

- ``gather_for_metrics`` drops the samples that even batching duplicated on the last batch, and
  needs to know that the batch *is* the last one (``end_of_dataloader``) and how many real samples
  the last global batch holds (``remainder``).
- ``accumulate()`` forces a gradient sync on a loader's last batch, even mid-accumulation.
- the optimizer and scheduler wrappers only step when ``sync_gradients`` is True.

Unlike Accelerate's process-wide ``GradientState``, each ``Accelerator`` owns its own: a second
``Accelerator`` (or a test) starts from a clean state instead of inheriting a half-finished
accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GradientState:
    #: Steps per optimizer update (``Accelerator(gradient_accumulation_steps=...)``).
    num_steps: int = 1
    #: Counter of batches since the last sync, as ``accumulate()`` counts them.
    step: int = 0
    #: Whether the current step reduces gradients across ranks and lets the optimizer step.
    sync_gradients: bool = True
    #: Prepared loaders currently being iterated, innermost last (evaluation inside training nests).
    active_dataloaders: list[Any] = field(default_factory=list)
    #: True while the innermost active loader is yielding its final batch.
    end_of_dataloader: bool = False
    #: Real samples in the innermost loader's last global batch; 0 when it divides evenly,
    #: -1 when unknown (no ``len``, or ``drop_last``) and nothing may be dropped.
    remainder: int = -1
    #: ``accumulate()`` forces a sync on a loader's last batch (GradientAccumulationPlugin option).
    sync_with_dataloader: bool = True
    #: Reduce gradients on every batch even while accumulating (GradientAccumulationPlugin option).
    sync_each_batch: bool = False

    @classmethod
    def _reset_state(cls) -> None:
        """Accelerate's test hook, which forgets its process-wide GradientState. Here each
        ``Accelerator`` owns a fresh one, so there is nothing shared to forget."""

    @property
    def active_dataloader(self) -> Any | None:
        return self.active_dataloaders[-1] if self.active_dataloaders else None

    @property
    def in_dataloader(self) -> bool:
        return bool(self.active_dataloaders)

    def begin_loader(self, loader: Any, remainder: int) -> None:
        """A prepared loader starts an epoch (called from its ``__iter__``)."""
        self.active_dataloaders.append(loader)
        self.end_of_dataloader = False
        self.remainder = remainder

    def mark_last_batch(self) -> None:
        """The loader is about to yield its final batch of the epoch."""
        self.end_of_dataloader = True

    def end_loader(self, loader: Any) -> None:
        """The loader finished its epoch; the enclosing loader (if any) becomes active again."""
        if loader in self.active_dataloaders:
            self.active_dataloaders.remove(loader)
        outer = self.active_dataloader
        self.end_of_dataloader = False
        self.remainder = getattr(outer, "remainder", -1) if outer is not None else -1
