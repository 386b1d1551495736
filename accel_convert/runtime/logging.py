"""``get_logger``: a standard ``logging`` logger that logs once, not once per rank.

Accelerate's ``accelerate.logging.get_logger``, with its behaviour: records are emitted on the
main process only unless a call says ``main_process_only=False``; ``in_order=True`` lets every
rank log in turn (rank 0 first), which costs a barrier per rank. Level, handlers and formatting
stay the standard library's (``logging.basicConfig`` as usual). Before any process group exists
(or on one process) every call logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any


class MultiProcessAdapter(logging.LoggerAdapter):
    """A ``LoggerAdapter`` that decides per call which ranks emit the record."""

    @staticmethod
    def _should_log(main_process_only: bool) -> bool:
        from accel_convert.runtime.state_objects import PartialState

        if not main_process_only:
            return True
        if not PartialState._shared_state:
            # No state yet: torchrun's RANK tells the main process apart without joining anything.
            return int(os.environ.get("RANK", "0")) == 0
        return PartialState().is_main_process

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Log on the main process (``main_process_only=True``, the default) or on every rank;
        ``in_order=True`` makes the ranks log one after the other."""
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        if in_order:
            from accel_convert.runtime.state_objects import PartialState

            state = PartialState()
            for rank in range(state.num_processes):
                if rank == state.process_index:
                    msg_, kwargs_ = self.process(msg, kwargs)
                    self.logger.log(level, msg_, *args, **kwargs_)
                state.wait_for_everyone()
            return
        if self._should_log(main_process_only):
            processed, processed_kwargs = self.process(msg, kwargs)
            self.logger.log(level, processed, *args, **processed_kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return msg, kwargs

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning``, but each distinct message only the first time."""
        key = (args, tuple(sorted(kwargs.items())))
        if key in _warned:
            return
        _warned.add(key)
        kwargs.setdefault("stacklevel", 3)  # one frame more than warning(): point at our caller
        self.warning(*args, **kwargs)


_warned: set[Any] = set()


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """The logger ``name`` (``logging.getLogger``), logging on the main process by default.

    ``log_level`` (or the ``ACCELERATE_LOG_LEVEL`` environment variable) sets the logger's level.
    """
    if log_level is None:
        log_level = os.environ.get("ACCELERATE_LOG_LEVEL")
    logger = logging.getLogger(name)
    if log_level is not None:
        logger.setLevel(log_level.upper())
        logger.root.setLevel(log_level.upper())
    return MultiProcessAdapter(logger, {})


__all__ = ["MultiProcessAdapter", "get_logger"]
