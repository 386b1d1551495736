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

Our choice, when the script sets neither ``find_unused_parameters`` nor ``static_graph``: plain
DDP, and on the first forward that builds a graph the runtime walks that graph once to see which
parameters it reaches (before backward, so nothing has been reduced yet). The ranks agree with
one one-int all-reduce. If every rank uses every parameter, nothing changes: plain DDP, no
per-step graph walk, and ``no_sync`` really skips the all-reduce. If some parameter is unused,
the reducer is rebuilt right there with ``find_unused_parameters=True`` and the forward's output
is prepared for it, before the backward that needs it: unused parameters need no flag, and
``no_sync`` still skips the all-reduce. Outputs can reach parameters the loss does not (InfoGAN's
discriminator returns three heads and its adversarial loss reads one: ``validity, _, _ = D(x)``):
so the first loss given to ``accelerator.backward`` that reaches the model is walked too, before
its backward, and switches the reducer the same way. A graph holding a reentrant activation checkpoint
(``checkpoint(block, x)``, ``use_reentrant=True`` by default) hides the block's parameters until
backward recomputes it: plain DDP then, which is what such a model needs. (The former default,
``static_graph=True``, all-reduced on the first micro-step of every accumulation whatever
``no_sync`` said, and cannot follow a graph that changes.)

A model that uses every parameter in its first iteration and leaves some unused later still
fails, as with plain DDP, but with an error that names the parameters and the fix
(``DistributedDataParallelKwargs(find_unused_parameters=True)``).

A script that asks for ``static_graph=True`` itself gets it; DDP cannot record its graph inside
``no_sync()`` (torch hits an internal assert), so :class:`RuntimeDDP` ignores ``no_sync`` until
one synced forward has run; averaging is linear, so syncing that step early gives the same
accumulated gradient.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

_UNFINISHED_REDUCTION = "Expected to have finished reduction"
_UNUSED_INDICES = re.compile(r"Parameter indices which did not receive grad for rank \d+:\s*([\d ]+)")


class UnusedParametersError(RuntimeError):
    """DDP could not finish reducing gradients because some parameters got none."""


def ddp_options(user_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The handler's DDP kwargs (the ``comm_*`` fields are applied after wrapping)."""
    return {key: value for key, value in user_kwargs.items() if not key.startswith("comm_")}


def runtime_chooses_strategy(user_kwargs: dict[str, Any]) -> bool:
    """True when the script set neither ``find_unused_parameters`` nor ``static_graph``."""
    return "find_unused_parameters" not in user_kwargs and "static_graph" not in user_kwargs


def parameters_reached(outputs: Any) -> set[int] | None:
    """``id()`` of every leaf tensor the autograd graph behind ``outputs`` accumulates into;
    None when the graph holds a reentrant activation checkpoint (``checkpoint(block, x)``, whose
    default is ``use_reentrant=True``): its block's parameters join the graph only when backward
    recomputes the block, so they cannot be seen from the forward's output."""
    roots = [tensor.grad_fn for tensor in _tensors_in(outputs) if tensor.grad_fn is not None]
    seen: set[Any] = set()
    reached: set[int] = set()
    while roots:
        node = roots.pop()
        if node in seen:
            continue
        seen.add(node)
        if _recomputes_in_backward(node):
            return None
        variable = getattr(node, "variable", None)  # AccumulateGrad: the parameter it feeds
        if variable is not None:
            reached.add(id(variable))
        roots.extend(next_node for next_node, _ in node.next_functions if next_node is not None)
    return reached


def _recomputes_in_backward(node: Any) -> bool:
    """Whether ``node`` is the backward of ``torch.utils.checkpoint``'s reentrant function."""
    from torch.utils.checkpoint import CheckpointFunction

    forward_class = getattr(node, "_forward_cls", None)  # a custom autograd.Function's backward
    return isinstance(forward_class, type) and issubclass(forward_class, CheckpointFunction)


def _tensors_in(outputs: Any) -> Iterator[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        yield outputs
    elif isinstance(outputs, dict):
        for value in outputs.values():
            yield from _tensors_in(value)
    elif isinstance(outputs, (list, tuple)):
        for value in outputs:
            yield from _tensors_in(value)
    elif hasattr(outputs, "__dataclass_fields__") or hasattr(outputs, "to_tuple"):  # ModelOutput-like
        for value in vars(outputs).values():
            yield from _tensors_in(value)


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


#: How many forwards before one backward the unused-parameter search covers together (a
#: multi-task step calls the model once per task head).
_PENDING_FORWARDS = 8

#: Every wrapper this process made, so that the exit handler can let go of their process group.
_live_wrappers: weakref.WeakSet[DistributedDataParallel] = weakref.WeakSet()


#: Wrappers whose first loss has yet to confirm plain DDP, in the order of their first forward
#: (the same on every rank: each asks its question with a collective).
_awaiting_a_loss: list[weakref.ref[RuntimeDDP]] = []

#: How many synced backwards a model kept on plain DDP waits for a loss that reaches it before
#: the question is dropped (plain DDP stays, as its first forward's outputs chose).
_LOSSES_AWAITED = 8


def confirm_strategies(loss: torch.Tensor) -> None:
    """Let the first loss of each model kept on plain DDP confirm that choice or switch it
    (:meth:`RuntimeDDP.confirm_by_loss`); called with every loss, before its backward."""
    for reference in list(_awaiting_a_loss):
        wrapper = reference()
        if wrapper is not None and wrapper._confirm_at_backward:
            wrapper.confirm_by_loss(loss)
        if wrapper is None or not wrapper._confirm_at_backward:
            _awaiting_a_loss.remove(reference)


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
    """DistributedDataParallel that picks its unused-parameter strategy after the first iteration
    (when the script left it to us) and explains unused-parameter failures (it is a plain DDP for
    ``isinstance`` and ``.module``)."""

    def __init__(self, module: torch.nn.Module, choose_strategy: bool = False, **kwargs: Any) -> None:
        _live_wrappers.add(self)
        super().__init__(module, **kwargs)
        self._graph_recorded = not kwargs.get("static_graph", False)
        self._ddp_kwargs = dict(kwargs)
        self._runtime_comm_hooks: list[tuple[Any, Any]] = []
        self._strategy_chosen = not choose_strategy
        #: The runtime switched to ``find_unused_parameters=True`` (the script did not ask for it).
        self._chose_unused_search = False
        #: Plain DDP was kept because the first forward's outputs reach every parameter; the
        #: first loss computed from them may still leave some out (see :meth:`confirm_by_loss`).
        self._confirm_at_backward = False
        #: Synced backwards asked about this model so far (see :meth:`confirm_by_loss`).
        self._losses_awaited = 0
        #: Outputs of the synced forwards no backward has reached yet. Held strongly: a script
        #: that reads ``criterion(model(x), y)`` keeps no reference to the output itself. At most
        #: :data:`_PENDING_FORWARDS` forwards' worth, so forwards never followed by a backward
        #: (evaluation with gradients on) cannot keep their graphs alive without bound.
        self._pending_outputs: list[list[torch.Tensor]] = []

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        try:
            outputs = super().forward(*inputs, **kwargs)
        except RuntimeError as error:
            if _UNFINISHED_REDUCTION in str(error):
                raise explain_unfinished_reduction(self, error) from error
            raise
        if torch.is_grad_enabled():
            if self.require_backward_grad_sync:
                self._graph_recorded = True
            if not self._strategy_chosen:
                outputs = self._choose_strategy(outputs)
            elif self._chose_unused_search and self.require_backward_grad_sync:
                self._prepare_for_every_pending_forward(outputs)
        return outputs

    def _prepare_for_every_pending_forward(self, outputs: Any) -> None:
        """Several forwards before one backward (a multi-task model called once per head, each call
        leaving the other head unused): DDP's unused-parameter search prepares the reducer for the
        last forward's graph only, so a parameter that graph leaves unused is marked ready, then
        gets its gradient from an earlier forward ("Expected to mark a variable ready only once").
        The reducer is prepared again for the union of the graphs, which plain DDP (what the script
        asked for by asking nothing) would have reduced without complaint."""
        earlier = [tensor for forward in self._pending_outputs for tensor in forward]
        current = self._track_until_backward(outputs)
        if earlier and current:
            self.reducer.prepare_for_backward([*earlier, *current])

    def _track_until_backward(self, outputs: Any) -> list[torch.Tensor]:
        """Remember the tensors of ``outputs`` that carry a graph until a backward reaches one."""
        tensors = [tensor for tensor in _tensors_in(outputs) if tensor.requires_grad and tensor.grad_fn is not None]
        for tensor in tensors:
            tensor.register_hook(self._backward_reached_an_output)
        if tensors:
            self._pending_outputs = [*self._pending_outputs[-(_PENDING_FORWARDS - 1) :], tensors]
        return tensors

    def _backward_reached_an_output(self, grad: torch.Tensor) -> None:
        self._pending_outputs = []

    def _choose_strategy(self, outputs: Any) -> Any:
        """After the first forward with a graph: keep plain DDP if every rank's graph reaches every
        parameter, else switch to ``find_unused_parameters=True`` before this forward's backward."""
        self._strategy_chosen = True
        reached = parameters_reached(outputs)
        # Behind a reentrant checkpoint the parameters cannot be seen: plain DDP, as Accelerate
        # would run it (switching to find_unused_parameters would mark the checkpointed blocks'
        # parameters ready as unused, then again when backward recomputes them, and DDP fails).
        all_used = reached is None or all(
            id(param) in reached for param in self.module.parameters() if param.requires_grad
        )
        (every_rank_uses_all,) = self._all_ranks_agree(all_used)
        if every_rank_uses_all:
            if reached is not None:
                self._confirm_at_backward = True
                _awaiting_a_loss.append(weakref.ref(self))
            return outputs
        self._switch_to_unused_search()
        outputs = self._post_forward(outputs)
        if self.require_backward_grad_sync:
            self._track_until_backward(outputs)
        return outputs

    def confirm_by_loss(self, loss: torch.Tensor) -> None:
        """Before the first backward after plain DDP was kept: a loss that reaches some of this
        model's parameters but not all (``validity, _, _ = discriminator(x)``, whose other heads
        the forward computed) would leave their buckets unreduced, and the next forward would
        fail. Then the reducer switches to the unused-parameter search for this very backward,
        prepared from the loss. A loss that reaches none of them is not this model's: the
        question waits for the next one, at most :data:`_LOSSES_AWAITED` synced backwards (a
        teacher whose outputs are detached is never reached, and each question costs a walk of
        the loss's graph and a collective). Every rank calls this at each backward, in step."""
        if not self.require_backward_grad_sync:
            return  # no reduction in this backward: the next synced one decides
        reached = parameters_reached(loss)
        if reached is None:
            trained = [True]  # behind a reentrant checkpoint: cannot tell, plain DDP as forward chose
        else:
            trained = [id(param) in reached for param in self.module.parameters() if param.requires_grad]
        reaches_some, reaches_all = self._all_ranks_agree(any(trained), all(trained))
        self._losses_awaited += 1
        if not reaches_some and self._losses_awaited < _LOSSES_AWAITED:
            return
        self._confirm_at_backward = False
        if reaches_some and not reaches_all:
            self._switch_to_unused_search()
            self.reducer.prepare_for_backward([loss])

    def _all_ranks_agree(self, *answers: bool) -> tuple[bool, ...]:
        """Each of ``answers`` and-ed over every rank (one all-reduce of as many integers)."""
        import torch.distributed as dist

        flags = torch.tensor([int(answer) for answer in answers], dtype=torch.int64)
        if self.device_ids:
            flags = flags.to(torch.device("cuda", self.device_ids[0]))
        dist.all_reduce(flags, op=dist.ReduceOp.MIN, group=self.process_group)
        return tuple(bool(flag) for flag in flags.tolist())

    def _switch_to_unused_search(self) -> None:
        """A reducer built with ``find_unused_parameters=True``, prepared for the forward that
        just ran (as DDP's forward would have: count the iteration); the caller lets it find that
        graph's unused parameters."""
        self._rebuild(find_unused_parameters=True)
        self._chose_unused_search = True
        if not self._lazy_init_ran:
            self._lazy_init()
        if self.require_backward_grad_sync:
            self.reducer.prepare_for_forward()

    def _rebuild(self, **changes: Any) -> None:
        """Replace the reducer by one built with ``changes`` (same module, parameters, comm hooks)."""
        # init_sync=False: the weights are equal on every rank already, and this forward's graph
        # holds them (an in-place broadcast now would break its backward).
        options = {**self._ddp_kwargs, **changes, "process_group": self.process_group, "init_sync": False}
        fresh = DistributedDataParallel(self.module, **options)
        keep = {
            "_modules",
            "_parameters",
            "_buffers",
            "training",
            "require_backward_grad_sync",
            "require_forward_param_sync",
        }
        for name, value in vars(fresh).items():
            if name not in keep and not name.endswith("_hooks") and "hooks_" not in name:
                self.__dict__[name] = value
        self._ddp_kwargs = {**self._ddp_kwargs, **changes}
        for state, hook in self._runtime_comm_hooks:
            super().register_comm_hook(state, hook)

    def register_comm_hook(self, state: object, hook: Any) -> None:
        """DDP's ``register_comm_hook``, remembered so that a rebuilt reducer gets it too."""
        self._runtime_comm_hooks.append((state, hook))
        super().register_comm_hook(state, hook)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """DDP's ``no_sync``, except before a static graph's first (recording) iteration."""
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
    return RuntimeDDP(model, choose_strategy=runtime_chooses_strategy(user_kwargs), **options)


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


class _MethodsAsForward:
    """``accelerator.as_forward(model).compute_loss(batch)``: each method of the wrapped module
    runs as the wrapper's forward, so DDP prepares the reducer and averages its gradients.

    DDP averages gradients only for graphs built inside its own ``forward``: a loss computed by a
    custom method (``model.module.compute_loss(batch)`` calling ``self(x)`` inside) leaves every
    rank with its own gradients and the copies drift apart without an error. Here the module's
    ``forward`` is swapped, for one call, for a function that restores the real ``forward`` (which
    the method may call as ``self(x)``) and then runs the method.
    """

    def __init__(self, wrapper: DistributedDataParallel) -> None:
        self._wrapper = wrapper

    def __getattr__(self, name: str) -> Any:
        wrapper = self._wrapper
        module = wrapper.module
        method = getattr(module, name)
        if not callable(method):
            return method

        def through_forward(*args: Any, **kwargs: Any) -> Any:
            def run_once(*inner_args: Any, **inner_kwargs: Any) -> Any:
                del module.forward  # the class's own forward again, for ``self(x)`` inside
                return method(*inner_args, **inner_kwargs)

            module.forward = run_once
            try:
                return wrapper(*args, **kwargs)
            finally:
                module.__dict__.pop("forward", None)

        return through_forward


def as_forward(model: torch.nn.Module) -> Any:
    """``model`` itself unless DDP wraps it; then an object whose methods run as its forward."""
    return _MethodsAsForward(model) if isinstance(model, DistributedDataParallel) else model
