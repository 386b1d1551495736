"""Moves: ``.to(device)`` and ``.cuda()``.

On a prepared model or on batch data from a prepared loader a move is removed (``prepare``
places them), with what it leaves behind: an assignment that no longer does anything
(``x = x``), ``model if use_cuda else model``. Any other ``.cuda()`` becomes
``.to(accelerator.device)``. Whether an argument is a device is asked of
``engine/devices.py``; a move to a fixed GPU (``.to("cuda:0")``) is ``fixed_gpus``'s.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.devices import names_device, peel_self_returning
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS
from accel_convert.codemods.engine.syntax import dotted, expression, root_name, target_names
from accel_convert.codemods.model.plan import plan_of
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.codemods.rewrites.device.state import DEVICE, DeviceWalkState

#: ``x.to(device, non_blocking=True)``: keywords that only make sense with a device.
DEVICE_ONLY_KEYWORDS = {"device", "non_blocking", "copy"}


@rule_provider(needs=("models",))
def cpu_models(a: Analysis) -> frozenset[str]:
    """Models the script moves back to the CPU (``model.eval().cpu()``): their later moves to the
    device must stay."""
    found = set()
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cpu":
            moved = dotted(peel_self_returning(func.value))
            if moved in a.facts.models:
                found.add(moved)
    return frozenset(found)


@rule_provider(needs=("models", "model_copy_calls"))
def copied_models(a: Analysis) -> frozenset[str]:
    """Models handed whole to a call that copies them, whose result is kept under another name
    (``ema = copy.deepcopy(model)``, ``swa = AveragedModel(model)``): the copy lands where the
    model is then, so the model's own move to the device must stay."""
    found = set()
    for call in a.model_copy_calls:
        for arg in call.node.args:
            value = arg.value
            if isinstance(value, cst.Call) and (dotted(value.func) or "").endswith(".unwrap_model") and value.args:
                value = value.args[0].value  # converted already: a copy of the unwrapped model
            if isinstance(value, cst.Name) and value.value in a.facts.models:
                found.add(value.value)
    return frozenset(found)


class Moves(DeviceWalkState):
    # -- what prepare places --------------------------------------------------------------------

    def batch_names(self) -> set[str]:
        names = set(self.facts.batch_names_by_function.get(self.function, ()))
        for extra in self.comprehension_batches:
            names |= extra
        return names

    def placed_by_prepare(self, receiver: cst.BaseExpression) -> bool:
        """Whether ``receiver`` is a prepared model or batch data from a prepared loader."""
        name = dotted(receiver)
        if self._rebuilt_model(receiver, name):
            return False  # a model built again after training is not the prepared one
        models = self.facts.models - self.facts.of(cpu_models) - self.facts.of(copied_models)
        # A function's own model (``predict()`` building ``model`` itself): no prepare places it.
        models = models - plan_of(self.facts).own_models(self.scope)
        if name is not None and name in models:
            return True
        # A copy (an EMA) made before prepare() must find the model on the device already.
        built = self.facts.models - self.facts.of(copied_models)
        if isinstance(receiver, cst.Call) and self.assign_targets and self.assign_targets[-1] & built:
            # ``model = Net().to(device)``: the constructor's result, where the model is prepared
            # (elsewhere, an ``inference()`` building a model of the same name keeps its move).
            return name is None and self._prepares_here()
        root = root_name(receiver)
        return root is not None and root in self.batch_names() and not _calls_model(receiver, self.facts.models)

    def _prepares_here(self) -> bool:
        """Whether the models built in the function being walked are the ones ``prepare`` takes:
        the home block, the function creating the accelerator, or a training class; in a
        library, code the accelerator reaches. A library class it does not reach (an
        ``Experiment`` that the entry script only runs) keeps its moves: nothing prepares what
        it builds, so without them its model would stay on the CPU."""
        if self.in_training_class():
            return True
        if self.facts.home_kind == "library":
            return self.accelerator_reachable()
        return self.function in {self.facts.home_function, self.facts.creating_function}

    def _rebuilt_model(self, receiver: cst.BaseExpression, name: str | None) -> bool:
        """A model built (again) in the home block after training started: ``model =
        Net().to(device)``, or a move of a model name bound again after that point."""
        start = plan_of(self.facts).training_start_line
        if start is None or self.function != self.facts.home_function or not self._anchors:
            return False
        site = self.facts.origins.site(self._anchors[-1])
        if site is None or site.line <= start:
            return False
        if isinstance(receiver, cst.Call) and self.assign_targets:
            return bool(self.assign_targets[-1] & self.facts.models)
        return (
            name is not None
            and name in self.facts.models
            and any(start < where.line <= site.line for where in self.facts.assign_sites.get(name, ()))
        )

    # -- comprehensions over batches ---------------------------------------------------------------

    def _enter_comprehension(self, node: cst.BaseComp | cst.DictComp) -> None:
        loop = node.for_in
        root = root_name(loop.iter)
        derived = set(target_names(loop.target)) if root in self.batch_names() else set()
        self.comprehension_batches.append(derived)

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self._enter_comprehension(node)

    def leave_DictComp(self, original_node: cst.DictComp, updated_node: cst.DictComp) -> cst.BaseExpression:
        self.comprehension_batches.pop()
        return updated_node

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._enter_comprehension(node)

    def leave_GeneratorExp(self, original_node: cst.GeneratorExp, updated_node: cst.GeneratorExp) -> cst.BaseExpression:
        self.comprehension_batches.pop()
        return updated_node

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._enter_comprehension(node)

    def leave_ListComp(self, original_node: cst.ListComp, updated_node: cst.ListComp) -> cst.BaseExpression:
        self.comprehension_batches.pop()
        return updated_node

    # -- the moves -----------------------------------------------------------------------------------

    def device_args(self, call: cst.Call) -> list[cst.Arg]:
        """The arguments of ``x.to(...)`` that are a device (``engine/devices.py`` says what is)."""
        return [arg for arg in call.args if self._is_device_arg(arg, call)]

    def _is_device_arg(self, arg: cst.Arg, call: cst.Call) -> bool:
        if arg.keyword is not None and arg.keyword.value != "device":
            return False
        if arg.keyword is None and (arg is not call.args[0] or arg.star):
            return False
        also = {self.device_expr, *self.gpu_indices}
        return names_device(arg.value, self.facts, also, self.scope) or self.picks_fixed_gpu(arg.value)

    def without_move(
        self, original: cst.Call, call: cst.Call, receiver: cst.BaseExpression, device_args: list[cst.Arg]
    ) -> cst.BaseExpression:
        """``model.to(device)`` → ``model``, ``x.to(device, torch.half)`` → ``x.to(torch.half)``:
        a move of what ``prepare`` places."""
        rest = [a for a in call.args if a not in device_args and not _device_only(a)]
        self.report(original, DEVICE, "move made by prepare removed", header_only=True)
        self.stripped_here = True
        if not rest:
            return receiver
        return call.with_changes(args=_without_trailing_comma(rest))

    def cuda(self, original: cst.Call, call: cst.Call, receiver: cst.BaseExpression) -> cst.BaseExpression:
        """``x.cuda()``: removed where ``prepare`` places ``x``, else ``x.to(accelerator.device)``."""
        if self.qualified_name(receiver) is not None:
            return call  # torch.cuda(...)-style module attribute, not a tensor's .cuda()
        if self.placed_by_prepare(receiver):
            self.report(original, DEVICE, ".cuda() made redundant by prepare removed", header_only=True)
            self.stripped_here = True
            return receiver
        if not self.accelerator_reachable():
            self.report(
                original,
                NO_ACCELERATOR_ACCESS,
                ".cuda() where no accelerator is reachable: left as it was",
                False,
                header_only=True,
            )
            return call
        self.report(original, DEVICE, ".cuda() → .to(accelerator.device)", header_only=True)
        return call.with_changes(
            func=call.func.with_changes(attr=cst.Name("to")),
            args=[cst.Arg(expression(self.device_expr))],
        )

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.BaseExpression:
        """``model.cuda() if use_cuda else model`` became ``model if use_cuda else model``."""
        code = cst.Module([]).code_for_node
        if self.stripped_here and code(updated_node.body) == code(updated_node.orelse):
            return updated_node.body.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.stripped_here = False


def _calls_model(node: cst.BaseExpression, models: AbstractSet[str]) -> bool:
    """``model(x)`` anywhere in an attribute/call chain: the result is computed, not loaded."""
    while True:
        if isinstance(node, cst.Call):
            if dotted(node.func) in models:
                return True
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return False


def _device_only(arg: cst.Arg) -> bool:
    return arg.keyword is not None and arg.keyword.value in DEVICE_ONLY_KEYWORDS


def _without_trailing_comma(args: list[cst.Arg]) -> list[cst.Arg]:
    if args and args[-1].comma is not cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


def is_identity(assign: cst.Assign, builtin: BuiltinOf) -> bool:
    """``x = x``, ``a, b = a, b``, ``batch = {k: v for k, v in batch.items()}``,
    ``batch = tuple(t for t in batch)`` (the builtin ``tuple``: ``builtin`` answers where the
    statement stands): statements that no longer do anything."""
    if len(assign.targets) != 1:
        return False
    target, value = assign.targets[0].target, assign.value
    written = cst.Module([]).code_for_node
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
        return [written(e.value) for e in target.elements] == [written(e.value) for e in value.elements]
    target_code = written(target)
    if written(value) == target_code:
        return True
    if isinstance(value, cst.Call) and builtin(value.func) in {"tuple", "list"} and len(value.args) == 1:
        value = value.args[0].value
    if isinstance(value, (cst.GeneratorExp, cst.ListComp)):
        loop = value.for_in
        return (
            loop.inner_for_in is None
            and not loop.ifs
            and written(loop.target) == written(value.elt)
            and written(loop.iter) == target_code
        )
    if isinstance(value, cst.DictComp):
        loop = value.for_in
        return (
            loop.inner_for_in is None
            and not loop.ifs
            and written(loop.target).replace(" ", "")
            in {f"{written(value.key)},{written(value.value)}", f"({written(value.key)},{written(value.value)})"}
            and written(loop.iter) in {f"{target_code}.items()"}
        )
    return False
