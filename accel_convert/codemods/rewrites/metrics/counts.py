"""Counts summed across processes, for evaluation loops that cannot gather per sample.

An evaluation that takes gradients for its inputs (an FGSM attack: ``data.requires_grad = True``,
``loss.backward()``, ``data.grad``, a second forward on the perturbed input) needs each process's
own batch between its forwards: gathering the first forward's outputs would hand the backward and
``.item()`` every process's rows. What it counts in Python numbers (``correct += 1``) is summed
over the processes right after the loop instead, so the count covers the whole evaluation set."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.syntax import bound_by, nodes_in
from accel_convert.codemods.model.locality import adds_up


def counted_names(loop: cst.For, scope: cst.CSTNode) -> list[str]:
    """Names the loop adds to with ``name += ...`` that ``scope`` (the function or module holding
    the loop) does not sum across processes already (a script converted before). Not a value the
    loop binds afresh each batch (``loss = criterion(...)`` then ``loss += penalty``): no running
    sum."""
    found: list[str] = []
    rebound: set[str] = set()
    for node in nodes_in(loop.body):
        summed = adds_up(node)
        if summed is not None and isinstance(summed.target, cst.Name) and summed.target.value not in found:
            found.append(summed.target.value)
        elif summed is None and isinstance(node, (cst.Assign, cst.AnnAssign, cst.For)):
            rebound.update(bound_by(node))
    return [name for name in found if name not in _summed_already(scope) and name not in rebound]


def _summed_already(scope: cst.CSTNode) -> set[str]:
    """Names ``scope`` sums with ``accelerator.reduce(torch.tensor(name, ...), ...)``."""
    summed = set()
    for node in nodes_in(scope):
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "reduce"
            and node.args
            and isinstance(node.args[0].value, cst.Call)
            and node.args[0].value.args
            and isinstance(node.args[0].value.args[0].value, cst.Name)
        ):
            summed.add(node.args[0].value.args[0].value.value)
    return summed


def summed_across_processes(name: str, accelerator: cst.BaseExpression) -> cst.SimpleStatementLine:
    """``name = accelerator.reduce(torch.tensor(name, device=accelerator.device), "sum").item()``."""
    tensor = cst.Call(
        func=cst.Attribute(cst.Name("torch"), cst.Name("tensor")),
        args=[
            cst.Arg(cst.Name(name)),
            cst.Arg(
                cst.Attribute(accelerator, cst.Name("device")),
                keyword=cst.Name("device"),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            ),
        ],
    )
    reduced = cst.Call(
        func=cst.Attribute(accelerator, cst.Name("reduce")),
        args=[cst.Arg(tensor), cst.Arg(cst.SimpleString('"sum"'))],
    )
    value = cst.Call(func=cst.Attribute(reduced, cst.Name("item")))
    return cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], value)])


def batches_counted(scope: cst.CSTNode, loader: str | None, builtin: BuiltinOf) -> bool:
    """Whether ``scope`` reads ``len(loader)`` (the builtin ``len``, as ``builtin`` answers in
    ``scope``): this process's batches once prepared."""
    return loader is not None and any(
        isinstance(node, cst.Call)
        and builtin(node.func) == "len"
        and len(node.args) == 1
        and isinstance(node.args[0].value, cst.Name)
        and node.args[0].value.value == loader
        for node in nodes_in(scope)
    )
