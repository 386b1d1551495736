"""Accelerate's process-wide state objects: ``PartialState`` and ``AcceleratorState``.

Scripts and libraries ask "who am I?" without holding an ``Accelerator``: ``PartialState()`` for
inference (``with state.split_between_processes(prompts) as mine``), ``AcceleratorState()`` for
process info, ``AcceleratorState._reset_state()`` between tests. As in Accelerate, every instance
of a class shares one state (the first call reads the environment and joins the process group;
later calls see the same facts), and an ``Accelerator``'s ``state`` is the ``AcceleratorState``.

Debug mode (``ACCELERATE_DEBUG_MODE=1``, or ``state.debug = True`` at any time) makes the
collectives of :mod:`runtime.operations` compare the ranks' tensor shapes first and raise a
:class:`~runtime.operations.DistributedOperationException` naming each rank's shapes, instead of
hanging or returning garbage.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from accel_convert.runtime.state import DistributedType, ProcessState, detect_state, env_flag

#: What ``PartialState`` copies from the detected :class:`~runtime.state.ProcessState`.
_PROCESS_FACTS = ("distributed_type", "num_processes", "process_index", "local_process_index", "device", "backend")


class ProcessGuards:
    """Running code on some processes only: what the Accelerator and the state objects share.
    Subclasses provide the process facts (``process_index``, ``is_main_process``...)."""

    process_index: int
    local_process_index: int
    is_main_process: bool
    is_local_main_process: bool
    is_last_process: bool

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each machine's main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def _only_if(self, runs_here: bool, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if runs_here else None

        return guarded

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the function runs on the main process only."""
        return self._only_if(self.is_main_process, function)

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the function runs on each machine's main process only."""
        return self._only_if(self.is_local_main_process, function)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the function runs on the last process only."""
        return self._only_if(self.is_last_process, function)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int = 0) -> Any:
        """Decorator: the function runs on process ``process_index`` only."""
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return self._only_if(self.process_index == process_index, function)

    def on_local_process(self, function: Callable[..., Any] | None = None, local_process_index: int = 0) -> Any:
        """Decorator: the function runs on local process ``local_process_index`` of each machine only."""
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_if(self.local_process_index == local_process_index, function)


class _ProcessView(ProcessGuards):
    """What both state objects answer: the process facts (held by each class's shared dict), the
    facts derived from them, and process control."""

    # The facts, held in the shared dict of the concrete class (declared for type checkers).
    distributed_type: DistributedType
    num_processes: int
    process_index: int
    local_process_index: int
    device: torch.device
    backend: str | None

    # -- derived facts ------------------------------------------------------------------------
    @property
    def use_distributed(self) -> bool:
        """True when gradients and metrics must travel between processes."""
        return self.distributed_type != DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        """True on global rank 0."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """True on each machine's local rank 0."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """True on the last global rank."""
        return self.process_index == self.num_processes - 1

    @property
    def default_device(self) -> torch.device:
        """The device this process computes on (same as ``device``)."""
        return self.device

    # -- process control ----------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Barrier across all ranks (no-op on one process)."""
        if self.use_distributed and dist.is_initialized():
            dist.barrier()

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager:
        """Run the body on the main process first, then on the others."""
        return self._first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager:
        """Run the body on each machine's main process first, then on the others."""
        return self._first(self.is_local_main_process)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This rank's contiguous share of a list/tuple/tensor/dict (the first ranks get one extra)."""
        from accel_convert.runtime.utils import split_for_process

        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)

    def destroy_process_group(self, group: Any = None) -> None:
        """Leave the process group (``group`` defaults to the default one)."""
        if dist.is_initialized():
            dist.destroy_process_group(group)

    def _describe(self) -> str:
        backend = f"  Backend: {self.backend}" if self.backend else ""
        return (
            f"Distributed environment: {self.distributed_type}{backend}\n"
            f"Num processes: {self.num_processes}\nProcess index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\nDevice: {self.device}\n"
        )


class PartialState(_ProcessView):
    """This process's place in the job: rank, world size, device, backend (shared by all instances).

    ``PartialState(cpu=True)`` or with ``init_process_group`` keyword arguments only matters on the
    first call, which joins the process group when launched with several ranks.
    """

    _shared_state: ClassVar[dict[str, Any]] = {}
    #: Debug mode: collectives check the ranks' shapes first (ACCELERATE_DEBUG_MODE).
    debug: bool

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        if not self.initialized:
            self._adopt(detect_state(cpu=cpu, init_kwargs=kwargs))
            self.debug = env_flag("ACCELERATE_DEBUG_MODE")

    def _adopt(self, facts: ProcessState) -> None:
        for name in _PROCESS_FACTS:
            setattr(self, name, getattr(facts, name))

    @classmethod
    def _refresh(cls, facts: ProcessState) -> PartialState:
        """Take freshly detected facts (each new ``Accelerator`` detects them; a debug flag set
        earlier stays)."""
        state = cls.__new__(cls)
        state.__dict__ = cls._shared_state
        state._adopt(facts)
        if "debug" not in cls._shared_state:
            state.debug = env_flag("ACCELERATE_DEBUG_MODE")
        return state

    @staticmethod
    def _reset_state() -> None:
        """Forget the shared state (tests): the next ``PartialState()`` detects everything again."""
        PartialState._shared_state.clear()

    @property
    def initialized(self) -> bool:
        """Whether the shared state has been set up in this process."""
        return "device" in self._shared_state

    def agree_random_state(self) -> None:
        """Every process takes the main process's state of Python's, NumPy's and torch's global
        generators (runtime.random_state), with no ``Accelerator`` yet: what a script draws on
        import, before its ``main()`` creates one (``PartialState().agree_random_state()``);
        nothing changes on one process."""
        from accel_convert.runtime.random_state import agree_random_state

        agree_random_state(self.device)

    def __repr__(self) -> str:
        return self._describe()


class AcceleratorState(_ProcessView):
    """``PartialState``'s facts plus the training configuration (mixed precision), shared by all
    instances; ``accelerator.state`` is one.

    The facts are copied from the shared :class:`PartialState` (as Accelerate does), so a script
    may overwrite ``distributed_type`` here without touching ``PartialState()``; ``debug`` is
    ``PartialState``'s. The last ``Accelerator`` created sets ``mixed_precision`` here (Accelerate
    refuses a second, different one instead); each ``Accelerator`` keeps computing with its own.
    The engines runtime does not provide read as None, for libraries that check them.
    """

    _shared_state: ClassVar[dict[str, Any]] = {}
    mixed_precision: str
    deepspeed_plugin: Any = None
    fsdp_plugin: Any = None
    megatron_lm_plugin: Any = None
    torch_tp_plugin: Any = None
    dynamo_plugin: Any = None

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        partial = PartialState(cpu, **kwargs)
        if not self.initialized:
            from accel_convert.runtime.precision import resolve_mixed_precision

            self.__dict__.update({name: partial.__dict__[name] for name in _PROCESS_FACTS})
            self.mixed_precision = resolve_mixed_precision(None)
        if mixed_precision is not None:
            self.mixed_precision = mixed_precision

    @classmethod
    def _for_accelerator(cls, facts: ProcessState) -> AcceleratorState:
        """The shared state as a new ``Accelerator`` found the process (facts just detected)."""
        PartialState._refresh(facts)
        cls._shared_state.clear()
        return cls(mixed_precision=facts.mixed_precision)

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        """Forget the shared state (tests); ``reset_partial_state=True`` also forgets the process facts."""
        AcceleratorState._shared_state.clear()
        if reset_partial_state:
            PartialState._reset_state()

    @property
    def initialized(self) -> bool:
        """Whether the shared state has been set up in this process."""
        return "mixed_precision" in self._shared_state

    @property
    def debug(self) -> bool:
        """Debug mode (``PartialState``'s flag: the collectives read it there)."""
        return bool(PartialState._shared_state.get("debug", False))

    @debug.setter
    def debug(self, value: bool) -> None:
        PartialState._shared_state["debug"] = value

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the shared state does not hold.
        if not name.startswith("__") and not self._shared_state:
            # Accelerate's message: an Accelerator created before _reset_state() holds a dead state.
            raise AttributeError(
                f"`AcceleratorState` object has no attribute `{name}`. This happens if "
                "`AcceleratorState._reset_state()` was called and an `Accelerator` or `PartialState` "
                "was not reinitialized."
            )
        raise AttributeError(f"'AcceleratorState' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"{self._describe()}Mixed precision type: {self.mixed_precision}\n"


__all__ = ["AcceleratorState", "PartialState"]
