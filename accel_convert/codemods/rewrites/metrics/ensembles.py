"""Ensembles: ``torch.stack([m(x)... for m in models]).mean(0)`` is a forward with one row per
sample when every member of ``models`` is prepared. Which names hold a list of prepared models
(members handed to a function that prepares its model parameter, and the parameters such lists
are passed to), and the averaged stack the loop gathers as a single model's output."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import (
    argument_for,
    calls_in,
    nodes_in,
    parameter_names,
)
from accel_convert.codemods.model.plan import prepare_assignments, prepared_arguments
from accel_convert.codemods.rewrites.metrics.forward import ROW_WISE_METHODS, Forward, mentions_dim_zero


def find_ensemble_forward(
    statements: Sequence[cst.BaseStatement], facts: ScriptFacts, model_lists: set[str], batch: tuple[str, ...]
) -> Forward | None:
    """The first ``probs = torch.stack([m(x)... for m in models]).mean(0)`` line of the loop body
    (also inside ``with`` blocks), ``models`` a list of prepared models: the members' outputs on
    the batch stacked along a new first dimension and averaged (or summed) over it again, so the
    result has one row per sample, as a single model's output has."""
    if not model_lists:
        return None
    for statement in statements:
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            found = find_ensemble_forward(list(statement.body.body), facts, model_lists, batch)
            if found:
                return found
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        assign = statement.body[0]
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and _is_ensemble_average(assign.value, facts, model_lists, batch)
        ):
            return statement, (assign.targets[0].target.value,)
    return None


def _is_ensemble_average(
    value: cst.BaseExpression, facts: ScriptFacts, model_lists: set[str], batch: tuple[str, ...]
) -> bool:
    """``torch.stack(<members>).mean(0)`` (or ``.sum(0)``, ``dim=0``) where ``<members>`` is
    ``[m(x)... for m in models]`` over a list of prepared models, called on the batch."""
    members = _stacked_members(_averaged_over_dim_zero(value), facts)
    if not (
        isinstance(members, (cst.ListComp, cst.GeneratorExp))
        and members.for_in.inner_for_in is None
        and not members.for_in.ifs
        and isinstance(members.for_in.target, cst.Name)
        and isinstance(members.for_in.iter, cst.Name)
        and members.for_in.iter.value in model_lists
    ):
        return False
    return _member_called_on_batch(members.elt, members.for_in.target.value, batch)


def _averaged_over_dim_zero(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """``x`` of ``x.mean(0)`` (``.sum(0)``, ``dim=0``); None for anything else."""
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("mean", "sum")
        and _is_dim_zero(value.args)
    ):
        return value.func.value
    return None


def _stacked_members(stacked: cst.BaseExpression | None, facts: ScriptFacts) -> cst.BaseExpression | None:
    """``members`` of ``torch.stack(members)`` (``dim=0``); None for anything else."""
    if (
        isinstance(stacked, cst.Call)
        and facts.qualified_name(stacked.func) == "torch.stack"
        and stacked.args
        and stacked.args[0].keyword is None
        and (len(stacked.args) == 1 or _is_dim_zero(stacked.args[1:]))
    ):
        return stacked.args[0].value
    return None


def _member_called_on_batch(output: cst.BaseExpression, member: str, batch: tuple[str, ...]) -> bool:
    """``m(x)`` (through row-wise methods, ``m(x).softmax(-1)``): the member called on batch names only."""
    while (
        isinstance(output, cst.Call)
        and isinstance(output.func, cst.Attribute)
        and output.func.attr.value in ROW_WISE_METHODS
        and not mentions_dim_zero(output.args)
    ):
        output = output.func.value
    return (
        isinstance(output, cst.Call)
        and isinstance(output.func, cst.Name)
        and output.func.value == member
        and bool(output.args)
        and all(
            arg.keyword is None and not arg.star and isinstance(arg.value, cst.Name) and arg.value.value in batch
            for arg in output.args
        )
    )


def _is_dim_zero(args: Sequence[cst.Arg]) -> bool:
    """``(0)`` or ``(dim=0)``."""
    return (
        len(args) == 1
        and (args[0].keyword is None or args[0].keyword.value == "dim")
        and isinstance(args[0].value, cst.Integer)
        and args[0].value.value == "0"
    )


def prepared_model_lists(module: cst.Module, facts: ScriptFacts) -> dict[str, set[str]]:
    """Module-level function (``"<module>"`` for module-level code) → names there holding a list
    of prepared models: ``for m in models: train(m, loader)`` where ``train`` prepares its model
    parameter (``model, optimizer = accelerator.prepare(model, optimizer)``, written by the
    prepare rule), and parameters every caller fills with such a list (``evaluate(models, ...)``)."""
    if "stack" not in facts.word_lines:
        return {}  # no ``torch.stack`` of members' outputs to gather: spare the walks
    functions = {node.name.value: node for node in module.body if isinstance(node, cst.FunctionDef)}
    preparing = _parameters_prepared(functions, facts)
    if not preparing:
        return {}
    # Module-level code (the ``__main__`` block included, definitions left out), then each function.
    top = cst.IndentedBlock(
        body=[node for node in module.body if not isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    )
    scopes: list[tuple[str, cst.CSTNode]] = [("<module>", top), *functions.items()]
    found: dict[str, set[str]] = {}
    for scope, node in scopes:
        for loop in nodes_in(node):
            models = _list_prepared_by_member(loop, preparing)
            if models is not None:
                found.setdefault(scope, set()).add(models)
    _add_parameters_every_caller_fills(found, functions, scopes)
    return found


def _parameters_prepared(functions: dict[str, cst.FunctionDef], facts: ScriptFacts) -> dict[str, list[tuple[int, str]]]:
    """Function → (index, name) of the parameters its body prepares."""
    preparing: dict[str, list[tuple[int, str]]] = {}
    for name, function in functions.items():
        params = parameter_names(function)
        prepared = {
            arg_name
            for _, call in prepare_assignments(function, facts)
            for arg_name in prepared_arguments(call)
            if arg_name in params
        }
        if prepared:
            preparing[name] = [(index, param) for index, param in enumerate(params) if param in prepared]
    return preparing


def _list_prepared_by_member(loop: cst.CSTNode, preparing: dict[str, list[tuple[int, str]]]) -> str | None:
    """``models`` for ``for m in models: train(m, ...)``, a loop whose body hands each member to a
    parameter a function prepares; None for any other node."""
    if not (isinstance(loop, cst.For) and isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Name)):
        return None
    member = loop.target.value
    if any(
        isinstance(call.func, cst.Name) and _fills(call, preparing.get(call.func.value, []), member)
        for call in calls_in(loop.body)
    ):
        return loop.iter.value
    return None


def _add_parameters_every_caller_fills(
    found: dict[str, set[str]], functions: dict[str, cst.FunctionDef], scopes: list[tuple[str, cst.CSTNode]]
) -> None:
    """Adds to ``found`` the parameters every caller of their function fills with a list of
    prepared models, until no more are found (a list handed on through several functions)."""
    callers = {
        name: [
            (scope, call)
            for scope, node in scopes
            for call in calls_in(node)
            if isinstance(call.func, cst.Name) and call.func.value == name
        ]
        for name in functions
    }
    changed = True
    while changed:
        changed = False
        for name, function in functions.items():
            calls = callers[name]
            for index, param in enumerate(parameter_names(function) if calls else ()):
                if param in found.get(name, set()):
                    continue
                if all(
                    (passed := _name_passed(call, index, param)) is not None and passed in found.get(scope, set())
                    for scope, call in calls
                ):
                    found.setdefault(name, set()).add(param)
                    changed = True


def _fills(call: cst.Call, prepared: list[tuple[int, str]], member: str) -> bool:
    """Whether ``call`` passes ``member`` to one of the ``prepared`` parameters."""
    return any(_name_passed(call, index, param) == member for index, param in prepared)


def _name_passed(call: cst.Call, index: int, param: str) -> str | None:
    """The plain name a call passes for the parameter at ``index`` named ``param``, if any."""
    argument = argument_for(call, index, param)
    return argument.value.value if argument is not None and isinstance(argument.value, cst.Name) else None
