"""Devices and moves: the one answer to "is this a device" and "is this a move to one".

A device is a name the analysis found holding the script's device (``device``, ``args.device``,
``self.device``; :attr:`ScriptFacts.device_names`) or the accelerator's own
``accelerator.device``. A move is a call of one of :data:`DEVICE_MOVE_METHODS` on a value
(``model.to(device)``, ``x.cuda()``, ``t.cpu()``); peeling the moves off an expression gives what
was moved (``Net().to(device)`` is a construction of ``Net``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.torch_names import DEVICE_CONSTRUCTORS, DEVICE_MOVE_METHODS


def names_device(node: cst.BaseExpression, facts: ScriptFacts, also: Collection[str] = ()) -> bool:
    """Whether ``node`` is a device: a name holding the script's device, ``accelerator.device``
    (or one of ``also``, names a rule knows hold one), a ``"cuda..."`` string, or
    ``torch.device(...)``."""
    name = dotted(node)
    if name is not None:
        return name in facts.device_names or name == f"{accelerator_name(facts)}.device" or name in also
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return isinstance(value, str) and value.startswith("cuda")
    if isinstance(node, cst.Call):
        return facts.qualified_name(node.func) in DEVICE_CONSTRUCTORS
    return False


def is_move(node: cst.CSTNode) -> bool:
    """``X.to(...)``, ``X.cuda(...)``, ``X.cpu()``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in DEVICE_MOVE_METHODS
    )


def peel_moves(
    value: cst.BaseExpression, to_device: Callable[[cst.BaseExpression], bool] | None = None
) -> cst.BaseExpression:
    """``model.to(device).cuda()`` → ``model``: the value under its moves. With ``to_device``,
    ``.to(x)`` counts only when its one argument is a device by that test (``.to(torch.half)``
    converts, it does not move)."""
    while is_move(value):
        assert isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
        if value.func.attr.value == "to" and to_device is not None:
            if len(value.args) != 1 or not to_device(value.args[0].value):
                break
        value = value.func.value
    return value
