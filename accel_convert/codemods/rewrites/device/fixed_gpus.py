"""Fixed GPUs: a GPU named outside the device variable, the same GPU on every rank.

``.to("cuda:0")``, a ``device="cuda"`` / ``map_location="cuda:0"`` keyword, the index the script
gave ``torch.cuda.set_device`` (``device=args.gpu``, ``.to(args.gpu)``) and a device picked right
in the arguments of a function of the file (``train(net, try_gpu())``) become
``accelerator.device``; where no accelerator is reachable they are reported (ACC904). That index
passed on to another call (``Net(args.gpu)``) is reported (ACC924). A GPU the script fixed and the
analysis followed to the call taking it (``codemods/model/devices.py``: ``self.gpu_id`` given
``device = 0``, or across modules ``Trainer(model, gpu_id=0)`` and ``engine.validate(..., args.gpu)``)
is such an index; one that is that GPU from some callers and something else from others is
reported at the call (ACC924). An index handed to a function of another module of the program is
followed there and not reported at the call that hands it over. Also what the walk needs to
know of the file beforehand: the indices given to ``set_device`` and the file's functions that
pick a GPU.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import (
    DEVICE_KEYWORDS,
    UNFOLLOWED_INDEX,
    chooses_device,
    chooses_gpu,
    element_name,
    held_name,
    names_fixed_gpu,
)
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS
from accel_convert.codemods.engine.syntax import dotted, expression, expression_code, nodes_in
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.rewrites.device.state import DEVICE, GPU_INDEX_PASSED_ON, DeviceWalkState

#: Builtins that only show or convert a value: the GPU index given to them names no device.
SHOWING_BUILTINS = frozenset({"print", "str", "int", "repr"})
#: Library functions that only show a value.
SHOWING_FUNCTIONS = frozenset({"rich.print", "pprint.pprint", "logging.info", "logging.debug", "logging.warning"})
#: Methods that only show a value (a logger's, a progress bar's, ``accelerator.print``), called
#: on objects the converter has no qualified name for: known by their name alone.
SHOWING_METHODS = frozenset({"print", "info", "debug", "warning", "error", "log", "write", "set_description"})


class FixedGpus(DeviceWalkState):
    def device_arguments(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``train_ch6(net, train_iter, test_iter, num_epochs, lr, try_gpu())``: a device selected
        right in the arguments of a function of the file (a call of its device function, or
        ``torch.device("cuda" ...)``) is the same GPU on every rank; the function moves the model
        and the batches there. It becomes this process's ``accelerator.device``."""
        args = list(call.args)
        for index, arg in enumerate(args):
            value = arg.value
            if not isinstance(value, cst.Call):
                continue
            picks = (isinstance(value.func, cst.Name) and value.func.value in self.device_functions) or chooses_gpu(
                value, self.facts, self.scope
            )
            if not picks:
                continue
            if not self.accelerator_reachable():
                self.report(
                    original,
                    NO_ACCELERATOR_ACCESS,
                    f"device {expression_code(value)} passed where the accelerator is not reachable: "
                    "the same GPU on every rank",
                    False,
                )
                continue
            self.report(original, DEVICE, f"device selection → {self.device_expr}")
            args[index] = arg.with_changes(value=expression(self.device_expr))
        return call.with_changes(args=args)

    def moved_to_fixed_gpu(self, original: cst.Call, call: cst.Call, device_args: list[cst.Arg]) -> cst.Call:
        """``x.to("cuda:0")``, ``x.to(args.gpu)``: a move (of something ``prepare`` does not
        place) to a fixed GPU, a device string or the index given to ``torch.cuda.set_device``."""
        indices = [a for a in device_args if held_name(a.value, indexed=True) in self.gpu_indices]
        literal = [
            a
            for a in device_args
            if a not in indices
            and (names_fixed_gpu(a.value, self.facts, self.scope, self.gpu_indices) or self.picks_fixed_gpu(a.value))
        ]
        if indices and not self.accelerator_reachable():
            self.report_unreached_gpu(original, indices[0].value)
        elif (literal or indices) and self.accelerator_reachable():
            if indices:
                message = f"GPU index {expression_code(indices[0].value)} → {self.device_expr}"
            else:
                message = "device string → accelerator.device"
            self.report(original, DEVICE, message, header_only=True)
            literal += indices
            replacement = expression(self.device_expr)
            return call.with_changes(args=[a.with_changes(value=replacement) if a in literal else a for a in call.args])
        return call

    def report_unreached_gpu(self, original: cst.Call, value: cst.BaseExpression) -> None:
        """``x.to(self.gpu)`` in a class the accelerator does not reach (a model's own
        ``forward``): the same GPU on every process, left and reported."""
        self.report(
            original,
            NO_ACCELERATOR_ACCESS,
            f"device {expression_code(value)}, a fixed GPU, where no accelerator is reachable: "
            "the same GPU on every rank",
            False,
            header_only=True,
        )

    def report_unfollowed_device(self, original: cst.Call) -> None:
        """``x.to(where)`` where ``where`` is a GPU the script fixed from some callers and
        something else from others (``"cpu"``), or one of several (``gpus[i]``): left as it was,
        and reported."""
        names = [
            (written, arg.value)
            for arg in original.args
            if (arg.keyword is None or arg.keyword.value in DEVICE_KEYWORDS)
            and (written := held_name(arg.value, indexed=True) or element_name(arg.value) or "")
            in self.facts.devices_unfollowed
        ]
        if not names:
            return
        written, value = names[0]
        if written.endswith(UNFOLLOWED_INDEX):
            message = (
                f"{expression_code(value)} is one of several fixed GPUs (each the same on every process), "
                "at an index not followed"
            )
        else:
            message = (
                f"{written} is a fixed GPU (the same on every process) from some callers and something else from others"
            )
        self.report(
            original,
            GPU_INDEX_PASSED_ON,
            f"{message}: left as it was (pass {self.device_expr} where it is the GPU)",
            False,
            header_only=True,
        )

    def device_keyword(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``torch.zeros(3, device="cuda")``, ``BucketIterator(..., device=args.gpu)``,
        ``torch.load(path, map_location="cuda:0")``: a fixed GPU (the first, or the index once
        given to ``torch.cuda.set_device``, which is gone), so the same GPU on every rank; it
        becomes this process's ``accelerator.device``."""
        fixed = [
            arg
            for arg in call.args
            if _is_device_keyword(arg) and names_fixed_gpu(arg.value, self.facts, self.scope, self.gpu_indices)
        ]
        if not fixed:
            return call
        written = expression_code(fixed[0].value)
        if not self.accelerator_reachable():
            self.report(
                original,
                NO_ACCELERATOR_ACCESS,
                f"device={written} where no accelerator is reachable: the same GPU on every rank",
                False,
                header_only=True,
            )
            return call
        self.report(original, DEVICE, f"device={written} → {self.device_expr}", header_only=True)
        replacement = expression(self.device_expr)
        return call.with_changes(args=[a.with_changes(value=replacement) if a in fixed else a for a in call.args])

    def report_gpu_index_passed_on(self, original: cst.Call, call: cst.Call) -> None:
        """``Seq2Seq(encoder, decoder, args.gpu)``: what the callee does with the index (a device
        for its tensors?) is not visible here; left, and reported. A function of another module
        of the program that takes the index as a device follows it there (``engine.validate(model,
        loader, args.gpu)``: its ``target.to(gpu)`` is the accelerator's device): not reported."""
        seeds = self.facts.program
        indices = self.set_device_indices
        if (
            not indices
            or any(self.device_choices)  # spells the device a call around it makes
            or self.builtin(call.func) in SHOWING_BUILTINS
            or self.qualified_name(call.func) in SHOWING_FUNCTIONS
            or (isinstance(call.func, cst.Attribute) and call.func.attr.value in SHOWING_METHODS)
            or self.qualified_name(call.func) == "torch.cuda.set_device"
            or (seeds is not None and program_callee(self.facts, original.func, self.scope) in seeds.gpu_index_callees)
        ):
            return
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                continue  # rewritten (device_keyword) or reported there
            written = dotted(arg.value)
            if written in indices:
                self.report(
                    original,
                    GPU_INDEX_PASSED_ON,
                    f"{written}, the GPU given to the removed torch.cuda.set_device, is passed on here: used "
                    f"as a device it is the same GPU on every process (pass {self.device_expr} instead)",
                    False,
                    header_only=True,
                )
                return


def _is_device_keyword(arg: cst.Arg) -> bool:
    """``device=`` of a factory or an iterator, ``map_location=`` of ``torch.load``."""
    return arg.keyword is not None and arg.keyword.value in DEVICE_KEYWORDS


def gpu_indices(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """What the script passes to ``torch.cuda.set_device`` (``args.gpu``, ``local_rank``), when a
    name: elsewhere it names the same GPU, which the accelerator now picks per rank."""
    if not facts.call_sites.get("torch.cuda.set_device"):
        return set()
    return {
        name
        for call in module_nodes(module)
        if isinstance(call, cst.Call)
        and call.args
        and facts.qualified_name(call.func) == "torch.cuda.set_device"
        and (name := dotted(call.args[0].value)) is not None
    }


def device_functions(module: cst.Module, facts: ScriptFacts) -> frozenset[str]:
    """Module-level functions of the file whose every ``return`` hands back ``torch.device(...)``
    and one of which names a GPU (d2l's ``try_gpu(i=0)``: ``torch.device(f"cuda:{i}")`` or the
    CPU)."""
    found = set()
    # Only functions that call ``torch.device`` can return one: the others are not walked.
    device_lines = sorted(
        {site.line for callee in ("torch.device", "device", ".device") for site in facts.call_sites.get(callee, ())}
    )
    if not device_lines:
        return frozenset()
    for statement in module.body:
        if not isinstance(statement, cst.FunctionDef) or skips_statement(statement, device_lines, facts.origins):
            continue
        values = [node.value for node in nodes_in(statement.body) if type(node) is cst.Return]
        scope = (statement.name.value,)
        devices = [value for value in values if isinstance(value, cst.Call) and chooses_device(value, facts, scope)]
        if values and len(devices) == len(values) and any(chooses_gpu(value, facts, scope) for value in devices):
            found.add(statement.name.value)
    return frozenset(found)
