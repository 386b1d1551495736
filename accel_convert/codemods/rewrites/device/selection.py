"""The script choosing its device, which the accelerator now does for each rank.

The device variable (``device = torch.device("cuda" if ... else "cpu")``, ``device =
args.device``) becomes ``accelerator.device`` (a model class picking ``"cuda"`` for itself,
where no accelerator is reachable, is reported: ACC904); ``torch.set_default_device("cuda")``
takes ``accelerator.device``; ``torch.cuda.set_device(...)``, ``with torch.cuda.device(...):``
and a ``CUDA_VISIBLE_DEVICES`` the script sets are removed. A device a settings class or the
module holds is rebound after the accelerator exists (``settings_devices``, ``module_device``).
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import holds_device, mentions_cuda, names_fixed_gpu, selects_device
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS
from accel_convert.codemods.engine.syntax import dotted, expression
from accel_convert.codemods.rewrites.device.emptied_blocks import has_statements, with_pass
from accel_convert.codemods.rewrites.device.settings_devices import settings_class_devices
from accel_convert.codemods.rewrites.device.state import DEVICE, DeviceWalkState

#: The environment variable choosing which GPUs a process sees.
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class Selection(DeviceWalkState):
    # -- the device variable -----------------------------------------------------------------------

    def is_device_selection(self, assign: cst.Assign, targets: set[str]) -> bool:
        """``device = torch.device(...)``, ``device = args.device``: an assignment of only
        device names whose value is a device expression, not a plain alias (``DEV = device``
        stays); a command-line option is a selection."""
        return (
            bool(targets)
            and all(holds_device(target, self.facts, self.scope) for target in targets)
            and selects_device(assign.value, self.facts)
        )

    def selected_device(self, original: cst.Assign, updated: cst.Assign, targets: set[str]) -> cst.Assign:
        """``device = ...`` → ``device = accelerator.device`` where the accelerator is reachable."""
        if self.accelerator_reachable():
            self.report(original, DEVICE, f"device selection → {self.device_expr}", header_only=True)
            return updated.with_changes(value=expression(self.device_expr))
        found = self.facts.of(settings_class_devices)
        settings = {*found.rebound.values(), *found.unreached}
        if self.scope and f"{self.scope[0]}.{next(iter(targets))}" in settings:
            return updated  # rebound or reported by rebind_settings_devices
        if self.scope and self.scope[0] not in self.facts.training_classes and mentions_cuda(original.value):
            # A model class picking "cuda" for itself: GPU 0 on every rank, while each
            # rank's copy of the model lives on its own GPU.
            self.report(
                original,
                NO_ACCELERATOR_ACCESS,
                f"device chosen inside {self.scope[0]}, which the accelerator does not reach: "
                "GPU 0 on every rank; use the input's or a parameter's device instead",
                False,
                header_only=True,
            )
        return updated

    # -- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------------

    def sets_visible_devices(self, assign: cst.Assign) -> bool:
        """``os.environ["CUDA_VISIBLE_DEVICES"] = ...``."""
        return any(self._is_visible_devices(target.target) for target in assign.targets)

    def _is_visible_devices(self, node: cst.BaseExpression) -> bool:
        """``os.environ["CUDA_VISIBLE_DEVICES"]``."""
        return (
            isinstance(node, cst.Subscript)
            and self.qualified_name(node.value) == "os.environ"
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.SimpleString)
            and node.slice[0].slice.value.evaluated_value == VISIBLE_DEVICES
        )

    def defaults_visible_devices(self, call: cst.Call) -> bool:
        """``os.environ.setdefault("CUDA_VISIBLE_DEVICES", ...)``."""
        return (
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "setdefault"
            and self.qualified_name(call.func.value) == "os.environ"
            and bool(call.args)
            and isinstance(call.args[0].value, cst.SimpleString)
            and call.args[0].value.evaluated_value == VISIBLE_DEVICES
        )

    def without_visible_devices(self, statement: cst.CSTNode) -> cst.RemovalSentinel:
        """Pinning the visible GPUs in the script gives every process the same GPU (with one
        visible, the second process cannot open ``cuda:1``): the launcher's environment chooses."""
        self.report(
            statement,
            DEVICE,
            f"{VISIBLE_DEVICES} set in the script removed: every process would see the same GPUs "
            f"(choose them for the launch: {VISIBLE_DEVICES}=0,1 torchrun ...)",
            header_only=True,
        )
        return cst.RemoveFromParent()

    # -- torch.cuda.set_device, torch.set_default_device -------------------------------------------

    def without_set_device(self, call: cst.Call) -> cst.RemovalSentinel:
        self.report(call, DEVICE, "torch.cuda.set_device removed (the accelerator picks the GPU)", header_only=True)
        return cst.RemoveFromParent()

    def sets_default_gpu(self, call: cst.Call) -> bool:
        """``torch.set_default_device("cuda")`` (a fixed GPU, or the device variable):
        new tensors on GPU 0 on every rank."""
        if self.qualified_name(call.func) != "torch.set_default_device" or not call.args:
            return False
        value = call.args[0].value
        return names_fixed_gpu(value, self.facts, self.scope, self.gpu_indices) or holds_device(
            dotted(value) or "", self.facts, self.scope
        )

    def default_device(self, original: cst.Call, updated: cst.Expr) -> cst.Expr:
        """``torch.set_default_device("cuda")`` → ``torch.set_default_device(accelerator.device)``."""
        if not self.accelerator_reachable():
            self.report(
                original,
                NO_ACCELERATOR_ACCESS,
                "torch.set_default_device before the accelerator exists: GPU 0 on every rank; "
                f"call it with {self.device_expr} once the accelerator is created",
                False,
                header_only=True,
            )
            return updated
        self.report(original, DEVICE, f"default device → {self.device_expr}", header_only=True)
        call = updated.value
        assert isinstance(call, cst.Call)
        first = call.args[0].with_changes(value=expression(self.device_expr))
        return updated.with_changes(value=call.with_changes(args=[first, *call.args[1:]]))

    # -- with torch.cuda.device(...) ---------------------------------------------------------------

    def leave_With(
        self, original_node: cst.With, updated_node: cst.With
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """``with torch.cuda.device(args.gpu):`` makes that GPU current on every rank: the
        accelerator already made each rank's own GPU current, so the ``with`` goes (its body
        stays)."""
        if not has_statements(updated_node.body):
            updated_node = updated_node.with_changes(body=with_pass(updated_node.body))
        kept = [
            item
            for item in updated_node.items
            if not (
                isinstance(item.item, cst.Call)
                and self.qualified_name(item.item.func) == "torch.cuda.device"
                and item.asname is None
            )
        ]
        if len(kept) == len(updated_node.items):
            return updated_node
        self.report(
            original_node,
            DEVICE,
            "with torch.cuda.device(...) removed (the accelerator picks the GPU)",
            header_only=True,
        )
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated_node.with_changes(items=kept)
        body = updated_node.body
        if not isinstance(body, cst.IndentedBlock):
            return updated_node.with_changes(items=[cst.WithItem(expression("contextlib.nullcontext()"))])
        statements = list(body.body)
        first = statements[0]
        if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            statements[0] = self.origins.relined(first, [*updated_node.leading_lines, *first.leading_lines])
        return cst.FlattenSentinel(statements)
