"""What a model reads and writes through ``accelerator.unwrap_model``: its custom methods and
attributes (``model.decode(z)``, ``model.init_hidden(bs)``), which the DDP wrapper does not have;
nn.Module's own stay on the wrapper. A write goes to the model too (``model.hidden =
model.init_hidden(bs)``, an LSTM tagger's state reset before each batch): set on the wrapper, it
would never reach the ``self.hidden`` the model's ``forward`` reads. A custom method that runs
the model in training goes through ``accelerator.as_forward`` instead (the runtime), or is
reported (ACC921). Where no accelerator is reachable, such a read is reported (ACC914). A model
a function or a class that does not train builds or loads for itself (an inference path, called
by the training or not: the plan's ``own_models``) is no wrapper: its reads stay as they are."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call, unwrap_model
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.torch_names import MODULE_OWN_ATTRIBUTES
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.model.plan import PreparesAhead, plan_of
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.codemods.rewrites.checkpoint.codes import CHECKPOINT


@rule_provider(needs=("models", "loop_backward", "backward_methods", "training_backward_sites", "model_parts"))
def training_method_calls(a: Analysis) -> frozenset[str]:
    """``model.compute_loss``-style calls in training of a model method that runs the model
    itself (``self(x)``, ``self.forward``, a submodule), and calls of a part of the model its
    ``forward`` runs (``model.extractor(imgs)``, of this module's model classes or, through the
    seeds, of the program's: faster-rcnn's trainer runs ``self.faster_rcnn.extractor``, ``.rpn``
    and ``.head`` one by one): DDP averages gradients only for what runs inside its forward.
    In training: in a loop running the backward (the innermost around the call), or in a training
    step (a function or method running the backward outside any loop, and the methods it calls on
    its instance: the trainer's ``forward`` that ``train_step`` calls)."""
    running = _methods_running_the_model(a) | _parts_of_models(a)
    steps = _training_steps(a)
    found = set()
    for call in a.r.calls:
        func = call.node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in running:
            continue
        owner = dotted(func.value)
        if owner not in a.facts.models:
            continue
        # The innermost loop: an evaluation loop nested in the epoch loop does not train.
        if (call.loops and call.loops[-1].has_backward) or call.scope[:2] in steps:
            found.add(f"{owner}.{func.attr.value}")
    return frozenset(found)


def _parts_of_models(a: Analysis) -> set[str]:
    """Attributes that are parts a model class's ``forward`` runs (``facts.model_parts``), of
    this module's classes and, through the seeds, of the program's model classes."""
    found = {qualified.rpartition(".")[2] for qualified in a.facts.model_parts}
    if a.seeds is not None:
        found |= {
            attribute
            for owner, _, attribute in (qualified.rpartition(".") for qualified in a.seeds.model_parts)
            if owner in a.seeds.model_classes
        }
    return found


def _training_steps(a: Analysis) -> set[tuple[str, ...]]:
    """Scopes (``(function,)``, ``(class, method)``) running a training backward outside any loop
    (a ``train_step``), and the methods of the class they call on the instance, directly or not
    (``self.forward(...)``)."""
    sites = a.facts.training_backward_sites
    steps = {call.scope[:2] for call in a.r.calls if not call.loops and a.site(call.node) in sites}
    pending = [scope for scope in steps if len(scope) == 2 and scope[0] in a.r.classes]
    while pending:
        owner, method = pending.pop()
        for callee in a.r.classes[owner].method_calls.get(method, set()):
            if (owner, callee) not in steps:
                steps.add((owner, callee))
                pending.append((owner, callee))
    return steps


def _methods_running_the_model(a: Analysis) -> set[str]:
    """Methods of the file's classes (other than ``forward`` and dunders) that call the instance
    (``self(x)``, ``self.forward(x)``) or a submodule it holds (``self.encoder(x)``), themselves
    or through another method of theirs (a BiLSTM-CRF's ``neg_log_likelihood`` calls
    ``self._get_lstm_features(x)``, which runs the LSTM)."""
    direct = _methods_calling_the_model(a)
    found = set()
    for name, owner in a.r.classes.items():
        running = {method for method in owner.self_names if (name, method) in direct}
        callers = {method: calls & set(owner.self_names) for method, calls in owner.method_calls.items()}
        while grown := {method for method, calls in callers.items() if calls & running} - running:
            running |= grown
        found |= {method for method in running if method != "forward" and not method.startswith("__")}
    return found


def _methods_calling_the_model(a: Analysis) -> set[tuple[str, str]]:
    """(class, method) of the methods that call their instance or a submodule it holds directly."""
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
        if instance is None:
            continue
        callee = dotted(call.node.func) or ""
        head, _, attribute = callee.partition(".")
        if head == instance and (attribute in ("", "forward") or attribute in held.get(owner, set())):
            found.add((owner, method))
    return found


class UnwrapsModelAttributes(RuleTransformer):
    """The checkpoint rewriter's reads of a prepared model's attributes (see the module)."""

    #: The runtime's ``accelerator.as_forward`` exists (not Accelerate's API).
    runtime: bool
    #: Per function frame: whether its ``prepare`` line is still ahead (the model not yet wrapped).
    _prepare_pending: list[PreparesAhead]

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        owner = dotted(updated_node.value)
        if owner is None or owner not in self.facts.models or updated_node.attr.value in MODULE_OWN_ATTRIBUTES:
            return updated_node
        if not owner.isidentifier() and not self.facts.is_prepared(owner):
            return updated_node  # a model held in another attribute is not prepared: nothing to unwrap
        if self._prepare_pending[-1].ahead(owner):
            return updated_node
        if owner in plan_of(self.facts).own_models(self.scope):
            return updated_node  # the function's own model, which no prepare wraps
        attribute = updated_node.attr.value
        if not self.accelerator_reachable():
            self.report(
                original_node,
                "ACC914",
                f"{owner}.{attribute} after prepare needs accelerator.unwrap_model({owner}), "
                "but the accelerator is not reachable here",
                False,
            )
            return updated_node
        if f"{owner}.{attribute}" in self.facts.of(training_method_calls):
            if self.runtime:
                message = f"{owner}.{attribute} runs the model: accelerator.as_forward({owner}).{attribute}, so DDP averages its gradients"
                self.report(original_node, CHECKPOINT, message, True)
                return updated_node.with_changes(value=accelerator_call(self.facts, "as_forward", updated_node.value))
            self.report(
                original_node,
                "ACC921",
                f"{owner}.{attribute} runs the model outside forward(): DDP will not average its gradients; "
                f"compute the loss from {owner}(...) or convert with --target runtime",
                False,
            )
        self.report(
            original_node,
            CHECKPOINT,
            f"{owner}.{attribute} → accelerator.unwrap_model({owner}).{attribute}",
            True,
        )
        return updated_node.with_changes(value=unwrap_model(self.facts, updated_node.value))
