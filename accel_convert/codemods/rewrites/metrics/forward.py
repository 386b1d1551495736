"""Recognising an evaluation loop over a loader and the forward in it: the names the loop binds
per batch, the model calls (a forward on its own line, one hoisted out of a larger expression,
forwards averaged row by row), a model run inside another call, and the statements that run
after the forward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import TypeGuard, cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import is_accelerator_method, seen_through_unwrap
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import iterated_name, loop_batch_names
from accel_convert.codemods.engine.syntax import (
    dotted,
    expression_code,
    nodes_in,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    MODULE_NOT_RUNNING_METHODS,
    ROW_WISE_FUNCTIONS,
)
from accel_convert.codemods.engine.walk import walk

#: The forward's line (``outputs = model(x)``) and the names it binds.
Forward = tuple[cst.SimpleStatementLine, tuple[str, ...]]


def loop_over_loader(node: cst.For, facts: ScriptFacts) -> tuple[str, ...] | None:
    """The per-sample names a loop over a loader binds (``enumerate``'s index left out), or None.
    Through any call (``progress(test_loader)``), as the analysis finds evaluation loops."""
    if loader_iterated(node, facts) not in facts.loaders:
        return None
    return loop_batch_names(node, facts.names, through_any_call=True, plain=True)


def loader_iterated(node: cst.For, facts: ScriptFacts) -> str | None:
    """The loader the loop iterates: under its wrappers (``enumerate(tqdm(test_loader))``), or the
    one the analysis found behind a progress bar bound to a name first (SRGAN's ``val_bar =
    tqdm(val_loader)`` then ``for ... in val_bar``)."""
    named = iterated_name(node.iter, facts.names, through_any_call=True)
    if named in facts.loaders:
        return named
    site = facts.origins.site(node)
    loops = (*facts.eval_loops, *facts.train_loops) if site is not None else ()
    return next((loop.loader for loop in loops if site is not None and loop.site.line == site.line), named)


def is_gather(node: cst.CSTNode, facts: ScriptFacts) -> bool:
    return is_accelerator_method(node, facts, "gather_for_metrics", "gather", "reduce", "gather_object")


def model_passed_to_call(loop: cst.For, facts: ScriptFacts) -> tuple[str, cst.Call] | None:
    """The function a model of the script is handed to in the loop (``greedy_decode(model, src)``),
    or the model's own method it calls (``model.generate(src)``, also as
    ``accelerator.unwrap_model(model).generate(src)``), where the forward runs out of the rule's
    sight, and that call; None when there is none."""
    models = evaluated_models(facts)
    for node in nodes_in(loop.body):
        if not isinstance(node, cst.Call):
            continue
        if any(dotted(arg.value) in models for arg in node.args):
            return dotted(node.func) or expression_code(node.func), node
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value in MODULE_NOT_RUNNING_METHODS:
            continue
        owner = seen_through_unwrap(func.value, facts)
        if dotted(owner) in models:
            return f"{dotted(owner)}.{func.attr.value}", node
    return None


def block_holding_forward(statements: Sequence[cst.BaseStatement], facts: ScriptFacts) -> cst.CSTNode | None:
    """The statement of a loop body (looking into ``with`` blocks, as :func:`find_forward` does)
    in a block of which the first model call sits, when that is not a line of the loop's own: a
    branch of an ``if`` (``if opt.ctc: preds = model(x)`` / ``else: ...``), a ``try`` block, a
    loop inside the loop. None when the first model call is on a line of the loop's own (nested in
    a larger expression there) or there is none."""
    for statement in statements:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        if not any(is_model_call(node, facts) for node in nodes_in(statement)):
            continue
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            return block_holding_forward(list(statement.body.body), facts)
        return None if isinstance(statement, cst.SimpleStatementLine) else statement
    return None


def is_model_call(node: cst.CSTNode, facts: ScriptFacts) -> TypeGuard[cst.Call]:
    return isinstance(node, cst.Call) and dotted(node.func) in evaluated_models(facts)


def evaluated_models(facts: ScriptFacts) -> AbstractSet[str]:
    """The models whose forward an evaluation may run: the trained ones, and those only moved to
    the device (a model rebuilt from a checkpoint to be tested, no optimizer built over it)."""
    return facts.models | facts.frozen_models


def find_forward(statements: Sequence[cst.BaseStatement], facts: ScriptFacts) -> Forward | None:
    """The first ``outputs = model(...)`` line of the loop body (also inside ``with`` blocks)."""
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            assign = statement.body[0]
            if isinstance(assign, cst.Assign) and is_model_call(assign.value, facts):
                names = [n for t in assign.targets for n in target_names(t.target, plain=True)]
                if len(assign.targets) == 1 and names:
                    return statement, tuple(names)
        elif isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            found = find_forward(list(statement.body.body), facts)
            if found:
                return found
    return None


#: Methods applied to each member's output that keep one row per sample (their dim is never 0).
ROW_WISE_METHODS = frozenset({"softmax", "log_softmax", "sigmoid", "float", "detach"})


def find_averaged_forwards(statements: Sequence[cst.BaseStatement], facts: ScriptFacts) -> Forward | None:
    """The first ``logits = (model(x) + model(flip(x))) / 2`` line of the loop body (also inside
    ``with`` blocks): forwards of known models joined by ``+ - * /`` with one another and with
    numbers only, so the result has the outputs' shape, one row per sample, and is gathered as a
    single forward's output is."""
    for statement in statements:
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            found = find_averaged_forwards(list(statement.body.body), facts)
            if found:
                return found
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        assign = statement.body[0]
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and isinstance(assign.value, cst.BinaryOperation)
            and _is_forward_arithmetic(assign.value, facts)
        ):
            return statement, (assign.targets[0].target.value,)
    return None


def _is_forward_arithmetic(value: cst.BaseExpression, facts: ScriptFacts) -> bool:
    """Whether ``value`` is model calls and numbers joined by ``+ - * /``, with a model call in it."""
    if isinstance(value, cst.BinaryOperation):
        if not isinstance(value.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)):
            return False
        left, right = value.left, value.right
        sides = [side for side in (left, right) if not isinstance(side, (cst.Integer, cst.Float))]
        return bool(sides) and all(_is_forward_arithmetic(side, facts) for side in sides)
    # ``model(x).softmax(1)``, ``F.softmax(model(x), dim=1)``: still one row per sample.
    while isinstance(value, cst.Call) and not mentions_dim_zero(value.args):
        if facts.qualified_name(value.func) in ROW_WISE_FUNCTIONS:  # before the method form: ``torch.softmax``
            if not value.args or value.args[0].keyword is not None:
                break
            value = value.args[0].value
        elif isinstance(value.func, cst.Attribute) and value.func.attr.value in ROW_WISE_METHODS:
            value = value.func.value
        else:
            break
    return is_model_call(value, facts)


def mentions_dim_zero(args: Sequence[cst.Arg]) -> bool:
    return any(isinstance(arg.value, cst.Integer) and arg.value.value == "0" for arg in args)


def hoist_forward(
    statements: Sequence[cst.BaseStatement], facts: ScriptFacts, new_name: Callable[[], str]
) -> list[cst.BaseStatement] | None:
    """``correct += (model(x).argmax(1) == y).sum().item()`` → ``output = model(x)`` on its own
    line first, then the statement reads ``output``: the forward gets a name to gather. Only for
    the first line holding exactly one forward (models chained, ``decoder(encoder(x))``, count as
    one), outside lambdas, comprehensions and conditional
    expressions (where moving it would change what runs)."""
    result = list(statements)
    for index, statement in enumerate(result):
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            inner = hoist_forward(list(statement.body.body), facts, new_name)
            if inner is not None:
                result[index] = statement.with_changes(body=statement.body.with_changes(body=inner))
                return result
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        finder = _ForwardCalls(facts)
        walk(statement, finder)
        if not finder.calls:
            continue
        # ``decoder(encoder(x))``: a forward fed by another is one forward, the outer call.
        nested = {id(node) for call in finder.calls for node in nodes_in(call) if node is not call}
        outermost = [call for call in finder.calls if id(call) not in nested]
        if len(outermost) != 1 or finder.guarded:
            return None
        call = outermost[0]
        name = new_name()
        forward_line = cst.SimpleStatementLine(
            body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=call)],
            leading_lines=statement.leading_lines,
        )
        # Replacing one expression leaves the line a line.
        rewritten = cast(cst.SimpleStatementLine, statement.visit(_ReplaceNode(call, cst.Name(name)))).with_changes(
            leading_lines=()
        )
        result[index : index + 1] = [forward_line, rewritten]
        return result
    return None


class _ForwardCalls(cst.CSTVisitor):
    """Model calls in one statement, and whether any sits where hoisting would change what runs.
    Local: it reads a statement of the evaluation loop being rewritten."""

    CONDITIONAL = (
        cst.Lambda,
        cst.ListComp,
        cst.SetComp,
        cst.DictComp,
        cst.GeneratorExp,
        cst.IfExp,
        cst.BooleanOperation,
    )

    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.calls: list[cst.Call] = []
        self.guarded = False
        self._conditional_depth = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.CONDITIONAL):
            self._conditional_depth += 1
        if is_model_call(node, self.facts):
            self.calls.append(node)
            self.guarded = self.guarded or self._conditional_depth > 0
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, self.CONDITIONAL):
            self._conditional_depth -= 1


class _ReplaceNode(cst.CSTTransformer):
    def __init__(self, target: cst.CSTNode, replacement: cst.CSTNode) -> None:
        super().__init__()
        self.target, self.replacement = target, replacement

    def on_leave(self, original_node, updated_node):
        return self.replacement if original_node is self.target else updated_node


def statements_after(statements: Sequence[cst.BaseStatement], forward: cst.CSTNode) -> list[cst.CSTNode]:
    """Every statement that runs after the forward in one iteration, in source order."""
    after: list[cst.CSTNode] = []
    _collect_after(list(statements), forward, after)
    return after


def _collect_after(statements: list[cst.BaseStatement], forward: cst.CSTNode, after: list[cst.CSTNode]) -> bool:
    for index, statement in enumerate(statements):
        if statement is forward:
            after.extend(statements[index + 1 :])
            return True
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            if _collect_after(list(statement.body.body), forward, after):
                after.extend(statements[index + 1 :])
                return True
    return False
