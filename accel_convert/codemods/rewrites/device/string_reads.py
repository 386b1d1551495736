"""The device read as the string it was.

A device picked as a string (``device = "cuda" if ... else "cpu"``) is a ``torch.device`` once it
is ``accelerator.device``. Where the script read it as a string it reads ``device.type``: given
as a device type (``torch.autocast(device_type=device)``), compared with a device type
(``device == "cuda"``, ``"cuda" in device``, ``str(device) == "cuda"``) or called with a method
of ``str`` (``device.startswith("cuda")``). Every other read keeps the ``torch.device``.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import holds_device
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.torch_names import DEVICE_TYPE_KEYWORD, DEVICE_TYPE_PARAMETERS, DEVICE_TYPES
from accel_convert.codemods.rewrites.device.state import DEVICE, DeviceWalkState

#: Methods of ``str``: called on a device name, they read the string the device was.
STRING_METHODS = frozenset(name for name in dir(str) if not name.startswith("_"))


class StringReads(DeviceWalkState):
    def _now_a_torch_device(self, node: cst.BaseExpression) -> bool:
        """A device name where it now holds ``accelerator.device``, a ``torch.device``."""
        return holds_device(dotted(node) or "", self.facts, self.scope) and self.accelerator_reachable()

    def _its_type(self, original: cst.CSTNode, node: cst.BaseExpression, read: str) -> cst.BaseExpression:
        """``device`` → ``device.type``: the string the script read (``"cuda"``, ``"cpu"``)."""
        name = dotted(node)
        message = f"{name} {read}: {name}.type, the string it was ({self.device_expr} is a torch.device)"
        self.report(original, DEVICE, message, header_only=True)
        return cst.Attribute(node.with_changes(lpar=(), rpar=()), cst.Name("type"), lpar=node.lpar, rpar=node.rpar)

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        """``device == "cuda"``, ``device in ("cuda", "mps")``, ``"cuda" in device`` compared a
        string; ``accelerator.device`` is a ``torch.device``, which never equals a string (and
        ``in`` raises ``TypeError`` on it): compare its type."""
        operands = [updated_node.left, *(target.comparator for target in updated_node.comparisons)]
        read = [False] * len(operands)
        for index, target in enumerate(updated_node.comparisons):
            if not isinstance(target.operator, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)):
                continue
            left, right = operands[index], operands[index + 1]
            for device, other in ((index, right), (index + 1, left)):
                if _is_device_type_literal(other) and self._now_a_torch_device(
                    _unless_str(operands[device], self.builtin)
                ):
                    read[device] = True
        if not any(read):
            return updated_node
        new = [
            self._its_type(original_node, _unless_str(operand, self.builtin), "compared with a string")
            if typed
            else operand
            for operand, typed in zip(operands, read)
        ]
        comparisons = [
            target.with_changes(comparator=value) for target, value in zip(updated_node.comparisons, new[1:])
        ]
        return updated_node.with_changes(left=new[0], comparisons=comparisons)

    def string_reads(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``torch.autocast(device_type=device)``, ``torch.autocast(device, ...)``,
        ``torch.amp.GradScaler(device)`` take a device type, a string (a ``torch.device`` raises
        ``ValueError`` in autocast), and ``device.startswith("cuda")`` calls a method of the
        string: they read ``device.type``."""
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value in STRING_METHODS
            and self._now_a_torch_device(func.value)
        ):
            typed = self._its_type(original, func.value, f"read with str.{func.attr.value}()")
            return call.with_changes(func=func.with_changes(value=typed))
        parameter = DEVICE_TYPE_PARAMETERS.get(self.qualified_name(func) or "")
        args = list(call.args)
        for index, arg in enumerate(args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            first = keyword is None and not arg.star and index == 0 and parameter is not None
            named = keyword is not None and keyword in (DEVICE_TYPE_KEYWORD, parameter)
            if (first or named) and self._now_a_torch_device(arg.value):
                args[index] = arg.with_changes(value=self._its_type(original, arg.value, "given as a device type"))
        return call.with_changes(args=args)


def _is_device_type_literal(node: cst.BaseExpression) -> bool:
    """``"cuda"``, ``"cpu"``, or a tuple, list or set of them (``("cuda", "mps")``)."""
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return bool(node.elements) and all(_is_device_type_literal(element.value) for element in node.elements)
    return isinstance(node, cst.SimpleString) and node.evaluated_value in DEVICE_TYPES


def _unless_str(node: cst.BaseExpression, builtin: BuiltinOf) -> cst.BaseExpression:
    """``device`` for ``str(device)``; any other expression as it is. Compared with ``"cuda"``,
    ``str(accelerator.device)`` is ``"cuda:0"``: the comparison reads the device's type instead."""
    if (
        isinstance(node, cst.Call)
        and builtin(node.func) == "str"
        and len(node.args) == 1
        and node.args[0].keyword is None
        and not node.args[0].star
    ):
        return node.args[0].value
    return node
