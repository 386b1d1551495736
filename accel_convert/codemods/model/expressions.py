"""Small questions about one expression that several providers ask."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import is_move


def is_prepare(value: cst.BaseExpression) -> bool:
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value
        in {"prepare", "prepare_model", "prepare_optimizer", "prepare_data_loader", "prepare_scheduler"}
    )


def moves_a_construction(value: cst.BaseExpression) -> bool:
    """``Net().to(device)``, ``Net().cuda()``: a construction moved where it is made."""
    return is_move(value) and isinstance(value.func.value, cst.Call)  # type: ignore[attr-defined]
