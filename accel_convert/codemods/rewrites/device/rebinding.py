"""What the passes that rebind a device once the accelerator exists share (``module_device``,
``settings_devices``): the function creating the accelerator in the converted module and the
statement rebinding a name to its device (the creation itself is found with the plan's
``creation_index``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import libcst as cst


class CreatingFunction(NamedTuple):
    """The module-level function creating the accelerator, in the converted module."""

    #: Its index in the module's body.
    position: int
    function: cst.FunctionDef
    #: Its body's statements (a copy to edit; :meth:`edited` puts them back).
    statements: list[cst.BaseStatement]

    def edited(self) -> cst.FunctionDef:
        """The function with :attr:`statements` as its body."""
        assert isinstance(self.function.body, cst.IndentedBlock)
        return self.function.with_changes(body=self.function.body.with_changes(body=self.statements))


def creating_function(body: Sequence[cst.BaseStatement], name: str) -> CreatingFunction | None:
    """The module-level function ``name`` (the one creating the accelerator) in ``body``; None
    when there is none or its body is on the line of its ``def``."""
    index = next((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == name), None)
    if index is None:
        return None
    function = body[index]
    assert isinstance(function, cst.FunctionDef)
    if not isinstance(function.body, cst.IndentedBlock):
        return None
    return CreatingFunction(index, function, list(function.body.body))


def rebinding(target: str, accelerator: str) -> cst.BaseStatement:
    """``target = accelerator.device``."""
    return cst.parse_statement(f"{target} = {accelerator}.device")
