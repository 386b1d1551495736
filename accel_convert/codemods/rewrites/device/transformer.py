"""The one walk of the device rule: its parts put together, and the hooks several parts share.

A call may be a move (``moves``), a move to or a keyword naming a fixed GPU (``fixed_gpus``) and a
read of the device as a string (``string_reads``) at once; an assignment may set
``CUDA_VISIBLE_DEVICES`` or select the device (``selection``), or be left doing nothing by a
removed move (``moves``); an expression statement may be a call ``selection`` removes or a move
that is gone. The hooks here decide, in that order, which part answers.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import chooses_device
from accel_convert.codemods.engine.syntax import dotted, target_names
from accel_convert.codemods.rewrites.device.emptied_blocks import EmptiedBlocks
from accel_convert.codemods.rewrites.device.fixed_gpus import FixedGpus
from accel_convert.codemods.rewrites.device.moves import Moves, is_identity
from accel_convert.codemods.rewrites.device.selection import Selection
from accel_convert.codemods.rewrites.device.string_reads import StringReads


class DeviceTransformer(Moves, FixedGpus, Selection, StringReads, EmptiedBlocks):
    def visit_Call(self, node: cst.Call) -> None:
        self.device_choices.append(chooses_device(node, self.facts, self.scope))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self.device_choices.pop()
        updated_node = self.string_reads(original_node, updated_node)
        self.report_unfollowed_device(original_node)
        func = updated_node.func
        if isinstance(func, cst.Name) and func.value in self.module_functions:
            updated_node = self.device_arguments(original_node, updated_node)
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda")):
            updated_node = self.device_keyword(original_node, updated_node)
            self.report_gpu_index_passed_on(original_node, updated_node)
        if not isinstance(func, cst.Attribute):
            return updated_node
        if func.attr.value == "to":
            return self._to(original_node, updated_node, func.value)
        if func.attr.value == "cuda":
            return self.cuda(original_node, updated_node, func.value)
        return updated_node

    def _to(self, original: cst.Call, call: cst.Call, receiver: cst.BaseExpression) -> cst.BaseExpression:
        """``x.to(...)``: removed where ``prepare`` places ``x``; a fixed GPU becomes the accelerator's."""
        device_args = self.device_args(call)
        if not device_args:
            return call
        if self.placed_by_prepare(receiver):
            return self.without_move(original, call, receiver, device_args)
        return self.moved_to_fixed_gpu(original, call, device_args)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assign_targets.append({n for t in node.targets for n in target_names(t.target)})

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign):
        targets = self.assign_targets.pop()
        if self.sets_visible_devices(original_node):
            return self.without_visible_devices(original_node)
        if self.is_device_selection(original_node, targets):
            return self.selected_device(original_node, updated_node, targets)
        if self.stripped_here and is_identity(updated_node, self.builtin):
            return cst.RemoveFromParent()
        return updated_node

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr):
        value = original_node.value
        if not isinstance(value, cst.Call):
            return updated_node
        if self.defaults_visible_devices(value):
            return self.without_visible_devices(original_node)
        if self.qualified_name(value.func) == "torch.cuda.set_device":
            return self.without_set_device(value)
        if isinstance(updated_node.value, cst.Call) and self.sets_default_gpu(value):
            return self.default_device(value, updated_node)
        if self.stripped_here and dotted(updated_node.value) is not None:
            return cst.RemoveFromParent()  # ``model.cuda()`` as a statement: nothing left to do
        return updated_node
