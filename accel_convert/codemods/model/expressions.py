"""Small questions about one expression that several providers ask."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import is_move


def moves_a_construction(value: cst.BaseExpression) -> bool:
    """``Net().to(device)``, ``Net().cuda()``: a construction moved where it is made."""
    return is_move(value) and isinstance(value.func.value, cst.Call)  # type: ignore[attr-defined]
