"""Models: trained by hand, and the calls that copy a model (the device rule's ``copied_models`` and
the checkpoint rule's ``model_copiers`` are drawn from them)."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.syntax import (
    dotted,
)
from accel_convert.codemods.engine.torch_names import (
    MODEL_COPIES,
)
from accel_convert.codemods.model.calls import stepped
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.roles import optimizer_wrappers
from accel_convert.codemods.model.state import Analysis


@provider(needs=("optimizers", "loop_backward"), refines=("models",))
def models_trained_by_hand(a: Analysis) -> None:
    """Without an optimizer (``for p in model.parameters(): p.data.add_(...)`` after
    ``model.zero_grad()``), the model is what a training loop reads parameters of or zeroes
    the gradients of."""
    facts = a.facts
    if facts.optimizers:
        return
    # ``optimizer.zero_grad()`` ... ``optimizer.step()`` in a helper that receives the
    # optimizer: what steps is an optimizer, not a model trained by hand; nor is a wrapper built
    # around an optimizer (``ScheduledOptim(optim.Adam(...))``, whose ``zero_grad`` is the
    # optimizer's).
    not_models = stepped(a) | optimizer_wrappers(a)
    for call in a.r.calls:
        func = call.node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value in ("parameters", "zero_grad")
            and isinstance(func.value, cst.Name)
            and func.value.value not in not_models
            and any(loop.has_backward for loop in call.loops)
        ):
            facts.models.add(func.value.value)


@provider(provides=("model_copy_calls",))
def model_copy_calls(a: Analysis) -> None:
    """Calls that copy what they are given (``copy.deepcopy``, ``AveragedModel``, timm's EMA, or a
    class of the file whose ``__init__`` deep-copies that parameter)."""
    copying_classes = _classes_copying_a_parameter(a)
    for call in a.r.calls:
        func = call.node.func
        local = func.value if isinstance(func, cst.Name) else None
        if a.qualified(call) in MODEL_COPIES or local in copying_classes:
            a.model_copy_calls.append(call)


def _classes_copying_a_parameter(a: Analysis) -> set[str]:
    """Classes of the file whose ``__init__`` passes one of its parameters to ``copy.deepcopy``
    (a hand-written ``ModelEMA(model)``)."""
    found = set()
    for call in a.r.calls:
        if len(call.scope) != 2 or call.scope[1] != "__init__" or a.qualified(call) not in MODEL_COPIES:
            continue
        owner = a.r.classes.get(call.scope[0])
        params = set(owner.init_params or ()) if owner is not None else set()
        if any(dotted(arg.value) in params for arg in call.node.args):
            found.add(call.scope[0])
    return found
