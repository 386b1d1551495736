"""Copies and traces of the prepared model take the unwrapped one: ``copy.deepcopy(model)``,
``AveragedModel(model)`` (a copy of the wrapper carries DDP's ``module.`` keys),
``torch.onnx.export``/``torch.jit.trace`` and TensorBoard's ``writer.add_graph(model, x)`` (the
tracer cannot follow DDP's process-group calls), and ``type(model)`` (the user's class, not
DDP's)."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import unwrap_model
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.torch_names import MODEL_EXPORTS
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.model.plan import PreparesAhead
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.codemods.rewrites.checkpoint.codes import CHECKPOINT


@rule_provider(needs=("model_copy_calls",))
def model_copiers(a: Analysis) -> frozenset[str]:
    """Local names of calls that copy a model (``copy.deepcopy``, ``deepcopy``, ``AveragedModel``,
    a class of the file deep-copying what it is given): after prepare, they get the unwrapped one."""
    return frozenset(dotted(call.node.func) or "" for call in a.model_copy_calls)


def type_of_model(call: cst.Call, facts: ScriptFacts) -> bool:
    """``type(model)`` (the builtin, one argument) of a model."""
    return (
        facts.is_builtin(call.func, "type")
        and len(call.args) == 1
        and call.args[0].keyword is None
        and not call.args[0].star
        and dotted(call.args[0].value) in facts.models
    )


def graph_of_tracker(call: cst.Call, facts: ScriptFacts) -> str | None:
    """``writer.add_graph`` for ``writer.add_graph(...)`` of a TensorBoard writer (an experiment
    tracker); None for any other call."""
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "add_graph":
        return None
    writer = dotted(call.func.value)
    return f"{writer}.add_graph" if writer in facts.trackers else None


class CopiesAndExportsUnwrapped(RuleTransformer):
    """The checkpoint rewriter's copies, traces and ``type()`` of a prepared model (see the module)."""

    #: Per function frame: whether its ``prepare`` line is still ahead (the model not yet wrapped).
    _prepare_pending: list[PreparesAhead]

    def _copy_or_export_of_unwrapped(self, original: cst.Call, call: cst.Call) -> cst.Call | None:
        """The call rewritten when it copies, traces or takes the type of a model; None when it
        does none of those."""
        if dotted(call.func) in self.facts.of(model_copiers):
            return self._copy_of_unwrapped(original, call)
        callee = self.facts.callee_name(call.func)
        if callee in MODEL_EXPORTS:
            return self._export_of_unwrapped(original, call, callee)
        graph = graph_of_tracker(call, self.facts)
        if graph is not None:
            return self._export_of_unwrapped(original, call, graph)
        if type_of_model(call, self.facts):
            return self._type_of_unwrapped(original, call)
        return None

    def _export_of_unwrapped(self, original: cst.Call, call: cst.Call, callee: str) -> cst.Call:
        """``torch.onnx.export(model, ...)`` after prepare exports the unwrapped model: tracing the
        DDP wrapper on the main process alone runs a forward the other ranks never join."""
        args = list(call.args)
        model = dotted(args[0].value) if args and args[0].keyword is None else None
        if model not in self.facts.models or self._prepare_pending[-1].ahead(model) or not self.accelerator_reachable():
            return call
        self.report(
            original, CHECKPOINT, f"{callee}({model}, ...) → {callee}(accelerator.unwrap_model({model}), ...)", True
        )
        args[0] = args[0].with_changes(value=unwrap_model(self.facts, args[0].value))
        return call.with_changes(args=args)

    def _type_of_unwrapped(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``type(model).__name__`` after prepare names the user's class, not DDP's wrapper
        (pytorch-template records it as the checkpoint's ``arch``)."""
        model = dotted(call.args[0].value) or ""
        if self._prepare_pending[-1].ahead(model) or not self.accelerator_reachable():
            return call
        if not model.isidentifier() and not self.facts.is_prepared(model):
            return call  # a model held in another attribute is not prepared: nothing to unwrap
        self.report(original, CHECKPOINT, f"type({model}) → type(accelerator.unwrap_model({model}))", True)
        return call.with_changes(args=[call.args[0].with_changes(value=unwrap_model(self.facts, call.args[0].value))])

    def _copy_of_unwrapped(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``copy.deepcopy(model)`` after prepare → ``copy.deepcopy(accelerator.unwrap_model(model))``:
        a copy of the wrapper would carry DDP's ``module.`` prefix into its state dict."""
        args = list(call.args)
        model = dotted(args[0].value) if args and args[0].keyword is None else None
        if model not in self.facts.models or self._prepare_pending[-1].ahead(model) or not self.accelerator_reachable():
            return call
        self.report(original, CHECKPOINT, f"copy of {model} → copy of accelerator.unwrap_model({model})", True)
        args[0] = args[0].with_changes(value=unwrap_model(self.facts, args[0].value))
        return call.with_changes(args=args)
