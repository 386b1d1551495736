"""Models: trained by hand, copied, moved back to the CPU, trained through a method that runs the
model itself."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import peel_self_returning
from accel_convert.codemods.engine.syntax import (
    dotted,
)
from accel_convert.codemods.engine.torch_names import (
    MODEL_COPIES,
)
from accel_convert.codemods.model.provider import provider
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
    # optimizer: what steps is an optimizer, not a model trained by hand.
    stepped = {
        func.value.value
        for call in a.r.calls
        if isinstance(func := call.node.func, cst.Attribute)
        and func.attr.value == "step"
        and isinstance(func.value, cst.Name)
    }
    for call in a.r.calls:
        func = call.node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value in ("parameters", "zero_grad")
            and isinstance(func.value, cst.Name)
            and func.value.value not in stepped
            and any(loop.has_backward for loop in call.loops)
        ):
            facts.models.add(func.value.value)


@provider(needs=("models",), provides=("copied_models", "model_copiers"))
def copied_models(a: Analysis) -> None:
    """Models passed to a call that copies them (``copy.deepcopy``, ``AveragedModel``, timm's
    EMA, or a class of the file whose ``__init__`` deep-copies that parameter)."""
    facts = a.facts
    copying_classes = _classes_copying_a_parameter(a)
    for call in a.r.calls:
        qualified = a.qualified(call)
        func = call.node.func
        local = func.value if isinstance(func, cst.Name) else None
        if qualified not in MODEL_COPIES and local not in copying_classes:
            continue
        facts.model_copiers.add(dotted(func) or "")
        for arg in call.node.args:
            value = arg.value
            if isinstance(value, cst.Call) and (dotted(value.func) or "").endswith(".unwrap_model") and value.args:
                value = value.args[0].value  # converted already: a copy of the unwrapped model
            if isinstance(value, cst.Name) and value.value in facts.models:
                facts.copied_models.add(value.value)


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


@provider(needs=("models", "loop_backward"), provides=("training_method_calls",))
def training_method_calls(a: Analysis) -> None:
    """``model.compute_loss``-style calls in training loops of a method that runs the model itself."""
    running = _methods_running_the_model(a)
    for call in a.r.calls:
        func = call.node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in running:
            continue
        owner = dotted(func.value)
        if owner in a.facts.models and any(loop.has_backward for loop in call.loops):
            a.facts.training_method_calls.add(f"{owner}.{func.attr.value}")


def _methods_running_the_model(a: Analysis) -> set[str]:
    """Methods of the file's classes (other than ``forward`` and dunders) that call the instance
    (``self(x)``, ``self.forward(x)``) or a submodule it holds (``self.encoder(x)``)."""
    held: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        if len(assign.scope) == 2 and assign.scope[0] in a.r.classes and isinstance(assign.value, cst.Call):
            instance = a.r.classes[assign.scope[0]].self_names.get(assign.scope[1])
            prefix = f"{instance}."
            held.setdefault(assign.scope[0], set()).update(
                target[len(prefix) :] for target in assign.targets if instance and target.startswith(prefix)
            )
    found = set()
    for call in a.r.calls:
        if len(call.scope) != 2 or call.scope[0] not in a.r.classes:
            continue
        owner, method = call.scope
        instance = a.r.classes[owner].self_names.get(method)
        if instance is None or method == "forward" or method.startswith("__"):
            continue
        callee = dotted(call.node.func) or ""
        head, _, attribute = callee.partition(".")
        if head == instance and (attribute in ("", "forward") or attribute in held.get(owner, set())):
            found.add(method)
    return found


@provider(needs=("models",), provides=("cpu_models",))
def cpu_models(a: Analysis) -> None:
    """Models the script moves back to the CPU (``model.eval().cpu()``)."""
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cpu":
            moved = dotted(peel_self_returning(func.value))
            if moved in a.facts.models:
                a.facts.cpu_models.add(moved)
