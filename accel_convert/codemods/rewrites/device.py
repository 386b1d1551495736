"""ACC102 device: the accelerator picks the device; moves that ``prepare`` makes redundant go.

The device variable (``torch.device("cuda" if ... else "cpu")``, ``"cuda:0"``,
``torch.accelerator.current_accelerator()``) becomes ``accelerator.device``, which is this process's
own GPU. ``.to(device)`` / ``.cuda()`` on prepared models and on batches from prepared loaders are
removed (``prepare`` places them); other ``.cuda()`` calls become ``.to(accelerator.device)``;
``.to(dtype)``, ``.float()``, ``.cpu()`` and moves of tensors the script creates itself stay (they now
go to ``accelerator.device``). ``torch.cuda.set_device`` is removed, and so is a
``CUDA_VISIBLE_DEVICES`` the script sets (every process would see the same GPUs; the launch
chooses them). A block left empty goes too:
``if args.cuda: model.cuda()`` disappears as a whole.

A fixed GPU named elsewhere would be the same GPU on every rank: a ``device="cuda"`` keyword
(``torch.zeros(3, device="cuda")``) and the index the script gave ``torch.cuda.set_device``
(``device=args.gpu``, ``.to(args.gpu)``) become ``accelerator.device``; where no accelerator is
reachable they are reported (ACC904). That index passed on to another call (``Net(args.gpu)``,
which may make a device of it) is reported (ACC924): what the callee does with it is not visible.

A device picked as a string (``device = "cuda" if torch.cuda.is_available() else "cpu"``) is a
``torch.device`` once it is ``accelerator.device``. Where the script read it as a string, it reads
``device.type``: as a device type (``torch.autocast(device_type=device)``,
``torch.autocast(device, ...)``, which raise ``ValueError`` for a ``torch.device``), compared with
a device type (``device == "cuda"``, ``device in ("cuda", "mps")``, ``"cuda" in device``: a
``torch.device`` equals no string, and ``in`` raises ``TypeError``; ``str(device) == "cuda"`` too,
since the process's own GPU is ``cuda:1``), or with a method of ``str``
(``device.startswith("cuda")``). Every other read keeps the ``torch.device``: moves and
``device=`` keywords take it, and printing it (``f"Using {device}"``) shows ``cpu`` as before,
``cuda:1`` for the process's own GPU.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.accelerator_creation import creates_accelerator
from accel_convert.codemods.engine.devices import names_device
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options, Site
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, Example, Rule
from accel_convert.codemods.engine.syntax import (
    as_statement,
    assigned_in,
    binds_name,
    calls_in,
    dotted,
    expression,
    expression_code,
    is_docstring,
    names_in,
    nodes_in,
    parameter_names,
    root_name,
    target_names,
)
from accel_convert.codemods.engine.torch_names import DEVICE_TYPE_KEYWORD, DEVICE_TYPE_PARAMETERS, DEVICE_TYPES
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of
from accel_convert.codemods.engine.walk import module_nodes

#: The environment variable choosing which GPUs a process sees.
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
#: The GPU index given to the removed ``torch.cuda.set_device`` passed on to a call.
GPU_INDEX_PASSED_ON = "ACC924"
#: Calls that only show or convert a value: the GPU index given to them names no device.
SHOWING_CALLS = frozenset(
    {"print", "str", "int", "repr", "info", "debug", "warning", "error", "log", "write", "set_description"}
)
#: Methods of ``str``: called on a device name, they read the string the device was.
STRING_METHODS = frozenset(name for name in dir(str) if not name.startswith("_"))
#: ``x.to(device, non_blocking=True)``: keywords that only make sense with a device.
DEVICE_ONLY_KEYWORDS = {"device", "non_blocking", "copy"}


class _Device(RuleTransformer):
    def __init__(
        self,
        facts: ScriptFacts,
        accelerator: str,
        gpu_indices: set[str] | None = None,
        device_functions: frozenset[str] = frozenset(),
        module_functions: frozenset[str] = frozenset(),
    ) -> None:
        #: What the script gives ``torch.cuda.set_device`` (``args.gpu``): a GPU index, the same
        #: one on every rank once the accelerator picks the GPU; a device given as that index
        #: becomes the accelerator's.
        self.gpu_indices = gpu_indices or set()
        #: The file's functions that pick a device (d2l's ``try_gpu()``: ``cuda:0`` on every rank).
        self.device_functions = device_functions
        #: The file's module-level functions: a device selected in their call's arguments
        #: (``train_ch6(net, ..., try_gpu())``) is where they put the model and the batches.
        self.module_functions = module_functions
        sites = [
            *facts.call_sites.get(".to", ()),
            *facts.call_sites.get(".cuda", ()),
            *facts.call_sites.get("torch.cuda.set_device", ()),
            *facts.call_sites.get("torch.cuda.device", ()),
            *facts.call_sites.get("torch.set_default_device", ()),
            *(site for name in facts.device_names for site in facts.assign_sites.get(name, ())),
        ]
        # Statements comparing the device with a string (``if device == "cuda":``).
        compared = facts.lines_mentioning(facts.device_names)
        # Calls given ``device=`` (a factory ``torch.zeros(3, device="cuda")``, an iterator).
        keywords = facts.lines_mentioning({"device", "map_location", *self.gpu_indices, *device_functions})
        # ``os.environ["CUDA_VISIBLE_DEVICES"] = "0"``.
        environment = facts.lines_mentioning({"environ"})
        super().__init__(facts, lines_of(sites) | compared | keywords | environment)
        self.facts = facts
        self.device_expr = f"{accelerator}.device"
        #: Names bound by comprehensions over batch data (``v`` in ``{k: v.to(d) for k, v in batch.items()}``).
        self.comprehension_batches: list[set[str]] = []
        #: Targets of the assignment being visited (``model`` in ``model = Net().to(device)``).
        self.assign_targets: list[set[str]] = []
        self.stripped_here = False
        #: ``elif`` nodes (an ``If`` in another's ``orelse``), by identity.
        self._elifs: set[int] = set()

    # -- what is what ---------------------------------------------------------------------------

    def batch_names(self) -> set[str]:
        names = set(self.facts.batch_names_by_function.get(self.function, ()))
        for extra in self.comprehension_batches:
            names |= extra
        return names

    def placed_by_prepare(self, receiver: cst.BaseExpression) -> bool:
        """Whether ``receiver`` is a prepared model or batch data from a prepared loader."""
        name = dotted(receiver)
        if self._rebuilt_model(receiver, name):
            return False  # a model built again after training is not the prepared one
        models = self.facts.models - self.facts.cpu_models - self.facts.copied_models
        if name is not None and name in models:
            return True
        # A copy (an EMA) made before prepare() must find the model on the device already.
        built = self.facts.models - self.facts.copied_models
        if isinstance(receiver, cst.Call) and self.assign_targets and self.assign_targets[-1] & built:
            # ``model = Net().to(device)``: the constructor's result, where the model is prepared
            # (elsewhere, an ``inference()`` building a model of the same name keeps its move).
            return name is None and self._prepares_here()
        root = root_name(receiver)
        return root is not None and root in self.batch_names() and not _calls_model(receiver, self.facts.models)

    def _prepares_here(self) -> bool:
        """Whether the models built in the function being walked are the ones ``prepare`` takes:
        the home block, the function creating the accelerator, or a training class."""
        if self.in_training_class() or self.facts.home_kind == "library":
            return True
        return self.function in {self.facts.home_function, self.facts.creating_function}

    def _rebuilt_model(self, receiver: cst.BaseExpression, name: str | None) -> bool:
        """A model built (again) in the home block after training started: ``model =
        Net().to(device)``, or a move of a model name bound again after that point."""
        start = self.facts.training_start_line()
        if start is None or self.function != self.facts.home_function or not self._anchors:
            return False
        site = self.facts.origins.site(self._anchors[-1])
        if site is None or site.line <= start:
            return False
        if isinstance(receiver, cst.Call) and self.assign_targets:
            return bool(self.assign_targets[-1] & self.facts.models)
        return name in self.facts.models and any(
            start < where.line <= site.line for where in self.facts.assign_sites.get(name, ())
        )

    # -- comprehensions over batches ---------------------------------------------------------------

    def _enter_comprehension(self, node: cst.BaseComp | cst.DictComp) -> None:
        loop = node.for_in
        root = root_name(loop.iter)
        derived = set(target_names(loop.target)) if root in self.batch_names() else set()
        self.comprehension_batches.append(derived)

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self._enter_comprehension(node)

    def leave_DictComp(self, original_node: cst.DictComp, updated_node: cst.DictComp) -> cst.BaseExpression:
        self.comprehension_batches.pop()
        return updated_node

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._enter_comprehension(node)

    def leave_GeneratorExp(self, original_node: cst.GeneratorExp, updated_node: cst.GeneratorExp) -> cst.BaseExpression:
        self.comprehension_batches.pop()
        return updated_node

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._enter_comprehension(node)

    def leave_ListComp(self, original_node: cst.ListComp, updated_node: cst.ListComp) -> cst.BaseExpression:
        self.comprehension_batches.pop()
        return updated_node

    # -- moves ---------------------------------------------------------------------------------------

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        updated_node = self._string_reads(original_node, updated_node)
        func = updated_node.func
        if isinstance(func, cst.Name) and func.value in self.module_functions:
            updated_node = self._device_arguments(original_node, updated_node)
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda")):
            updated_node = self._device_keyword(original_node, updated_node)
            self._report_gpu_index_passed_on(original_node, updated_node)
        if not isinstance(func, cst.Attribute):
            return updated_node
        if func.attr.value == "to":
            return self._move(original_node, updated_node, func.value)
        if func.attr.value == "cuda":
            return self._cuda(original_node, updated_node, func.value)
        return updated_node

    def _device_arguments(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``train_ch6(net, train_iter, test_iter, num_epochs, lr, try_gpu())``: a device selected
        right in the arguments of a function of the file (a call of its device function, or
        ``torch.device("cuda" ...)``) is the same GPU on every rank; the function moves the model
        and the batches there. It becomes this process's ``accelerator.device``."""
        args = list(call.args)
        for index, arg in enumerate(args):
            value = arg.value
            if not isinstance(value, cst.Call):
                continue
            picks = (isinstance(value.func, cst.Name) and value.func.value in self.device_functions) or (
                self.qualified_name(value.func) == "torch.device" and _names_cuda(value)
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
            self.report(original, Device.code, f"device selection → {self.device_expr}")
            args[index] = arg.with_changes(value=expression(self.device_expr))
        return call.with_changes(args=args)

    def _move(self, original: cst.Call, call: cst.Call, receiver: cst.BaseExpression) -> cst.BaseExpression:
        device_args = [arg for arg in call.args if self._is_device_arg(arg, call)]
        if not device_args:
            return call
        if self.placed_by_prepare(receiver):
            rest = [a for a in call.args if a not in device_args and not _device_only(a)]
            self.report(original, Device.code, "move made by prepare removed", header_only=True)
            self.stripped_here = True
            if not rest:
                return receiver
            return call.with_changes(args=_without_trailing_comma(rest))
        # A fixed GPU: a device string, or the index given to torch.cuda.set_device.
        indices = [a for a in device_args if dotted(a.value) in self.gpu_indices]
        literal = [a for a in device_args if a not in indices and self._fixed_gpu(a.value)]
        if (literal or indices) and self.accelerator_reachable():
            if indices:
                message = f"GPU index {expression_code(indices[0].value)} → {self.device_expr}"
            else:
                message = "device string → accelerator.device"
            self.report(original, Device.code, message, header_only=True)
            literal += indices
            replacement = expression(self.device_expr)
            return call.with_changes(args=[a.with_changes(value=replacement) if a in literal else a for a in call.args])
        return call

    def _device_keyword(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``torch.zeros(3, device="cuda")``, ``BucketIterator(..., device=args.gpu)``,
        ``torch.load(path, map_location="cuda:0")``: a fixed GPU (the first, or the index once
        given to ``torch.cuda.set_device``, which is gone), so the same GPU on every rank; it
        becomes this process's ``accelerator.device``."""
        fixed = [arg for arg in call.args if _device_keyword(arg) and self._fixed_gpu(arg.value)]
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
        self.report(original, Device.code, f"device={written} → {self.device_expr}", header_only=True)
        replacement = expression(self.device_expr)
        return call.with_changes(args=[a.with_changes(value=replacement) if a in fixed else a for a in call.args])

    def _report_gpu_index_passed_on(self, original: cst.Call, call: cst.Call) -> None:
        """``Seq2Seq(encoder, decoder, args.gpu)``: what the callee does with the index (a device
        for its tensors?) is not visible here; left, and reported."""
        callee = (dotted(call.func) or "").rpartition(".")[2]
        if not self.gpu_indices or callee in SHOWING_CALLS or self.qualified_name(call.func) == "torch.cuda.set_device":
            return
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                continue  # rewritten (_device_keyword) or reported there
            written = dotted(arg.value)
            if written in self.gpu_indices:
                self.report(
                    original,
                    GPU_INDEX_PASSED_ON,
                    f"{written}, the GPU given to the removed torch.cuda.set_device, is passed on here: used "
                    f"as a device it is the same GPU on every process (pass {self.device_expr} instead)",
                    False,
                    header_only=True,
                )
                return

    def _fixed_gpu(self, value: cst.BaseExpression) -> bool:
        """``"cuda"``, ``"cuda:0"``, ``torch.device("cuda", 0)``, or the index given to
        ``set_device``: the same GPU on every rank."""
        if isinstance(value, cst.SimpleString):
            written = value.evaluated_value
            return isinstance(written, str) and written.startswith("cuda")
        if isinstance(value, cst.Call) and self.qualified_name(value.func) == "torch.device" and value.args:
            return isinstance(value.args[0].value, cst.SimpleString) and self._fixed_gpu(value.args[0].value)
        return dotted(value) in self.gpu_indices

    def _is_device_arg(self, arg: cst.Arg, call: cst.Call) -> bool:
        if arg.keyword is not None:
            return arg.keyword.value == "device" and names_device(
                arg.value, self.facts, also={self.device_expr, *self.gpu_indices}
            )
        return (
            arg is call.args[0]
            and not arg.star
            and names_device(arg.value, self.facts, also={self.device_expr, *self.gpu_indices})
        )

    def _cuda(self, original: cst.Call, call: cst.Call, receiver: cst.BaseExpression) -> cst.BaseExpression:
        if self.qualified_name(receiver) is not None:
            return call  # torch.cuda(...)-style module attribute, not a tensor's .cuda()
        if self.placed_by_prepare(receiver):
            self.report(original, Device.code, ".cuda() made redundant by prepare removed", header_only=True)
            self.stripped_here = True
            return receiver
        if not self.accelerator_reachable():
            self.report(
                original,
                NO_ACCELERATOR_ACCESS,
                ".cuda() where no accelerator is reachable: left as it was",
                False,
                header_only=True,
            )
            return call
        self.report(original, Device.code, ".cuda() → .to(accelerator.device)", header_only=True)
        return call.with_changes(
            func=call.func.with_changes(attr=cst.Name("to")),
            args=[cst.Arg(expression(self.device_expr))],
        )

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.BaseExpression:
        """``model.cuda() if use_cuda else model`` became ``model if use_cuda else model``."""
        code = cst.Module([]).code_for_node
        if self.stripped_here and code(updated_node.body) == code(updated_node.orelse):
            return updated_node.body.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node

    # -- statements --------------------------------------------------------------------------------

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.stripped_here = False

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assign_targets.append({n for t in node.targets for n in target_names(t.target)})

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign):
        targets = self.assign_targets.pop()
        if any(self._is_visible_devices(target.target) for target in original_node.targets):
            return self._without_visible_devices(original_node)
        if targets and targets <= self.facts.device_names and self._selects_device(original_node.value):
            if not self.accelerator_reachable():
                settings = {*self.facts.settings_devices.values(), *self.facts.settings_devices_unreached}
                if self.scope and f"{self.scope[0]}.{next(iter(targets))}" in settings:
                    return updated_node  # rebound or reported by _rebind_settings_devices
                if self.scope and self.scope[0] not in self.facts.training_classes and _names_cuda(original_node.value):
                    # A model class picking "cuda" for itself: GPU 0 on every rank, while each
                    # rank's copy of the model lives on its own GPU.
                    self.report(
                        original_node,
                        NO_ACCELERATOR_ACCESS,
                        f"device chosen inside {self.scope[0]}, which the accelerator does not reach: "
                        "GPU 0 on every rank; use the input's or a parameter's device instead",
                        False,
                        header_only=True,
                    )
                return updated_node
            self.report(original_node, Device.code, f"device selection → {self.device_expr}", header_only=True)
            return updated_node.with_changes(value=expression(self.device_expr))
        if self.stripped_here and _is_identity(updated_node):
            return cst.RemoveFromParent()
        return updated_node

    def _selects_device(self, value: cst.BaseExpression) -> bool:
        """A device expression, not a plain alias (``DEV = device`` stays); a command-line
        option (``device = args.device``) is a selection."""
        if isinstance(value, cst.Attribute) and dotted(value.value) in self.facts.parsed_arguments:
            return True
        return dotted(value) is None

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

    def _without_visible_devices(self, statement: cst.CSTNode) -> cst.RemovalSentinel:
        """Pinning the visible GPUs in the script gives every process the same GPU (with one
        visible, the second process cannot open ``cuda:1``): the launcher's environment chooses."""
        self.report(
            statement,
            Device.code,
            f"{VISIBLE_DEVICES} set in the script removed: every process would see the same GPUs "
            f"(choose them for the launch: {VISIBLE_DEVICES}=0,1 torchrun ...)",
            header_only=True,
        )
        return cst.RemoveFromParent()

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr):
        value = original_node.value
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "setdefault"
            and self.qualified_name(value.func.value) == "os.environ"
            and value.args
            and isinstance(value.args[0].value, cst.SimpleString)
            and value.args[0].value.evaluated_value == VISIBLE_DEVICES
        ):
            return self._without_visible_devices(original_node)
        if isinstance(value, cst.Call) and self.qualified_name(value.func) == "torch.cuda.set_device":
            self.report(
                value, Device.code, "torch.cuda.set_device removed (the accelerator picks the GPU)", header_only=True
            )
            return cst.RemoveFromParent()
        if (
            isinstance(value, cst.Call)
            and isinstance(updated_node.value, cst.Call)
            and self.qualified_name(value.func) == "torch.set_default_device"
            and value.args
            and self._names_a_gpu(value.args[0].value)
        ):
            # ``torch.set_default_device("cuda")``: new tensors on GPU 0 on every rank.
            if not self.accelerator_reachable():
                self.report(
                    value,
                    NO_ACCELERATOR_ACCESS,
                    "torch.set_default_device before the accelerator exists: GPU 0 on every rank; "
                    f"call it with {self.device_expr} once the accelerator is created",
                    False,
                    header_only=True,
                )
                return updated_node
            self.report(value, Device.code, f"default device → {self.device_expr}", header_only=True)
            call = updated_node.value
            first = call.args[0].with_changes(value=expression(self.device_expr))
            return updated_node.with_changes(value=call.with_changes(args=[first, *call.args[1:]]))
        if self.stripped_here and isinstance(value, cst.Call) and dotted(updated_node.value) is not None:
            return cst.RemoveFromParent()  # ``model.cuda()`` as a statement: nothing left to do
        return updated_node

    def _names_a_gpu(self, value: cst.BaseExpression) -> bool:
        """``"cuda"``, ``"cuda:0"``, a device name or the index given to ``set_device``."""
        if isinstance(value, cst.SimpleString):
            text = value.evaluated_value
            return isinstance(text, str) and text.startswith("cuda")
        name = dotted(value)
        return name is not None and (name in self.facts.device_names or name in self.gpu_indices)

    def leave_With(
        self, original_node: cst.With, updated_node: cst.With
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """``with torch.cuda.device(args.gpu):`` makes that GPU current on every rank: the
        accelerator already made each rank's own GPU current, so the ``with`` goes (its body
        stays)."""
        if not _has_statements(updated_node.body):
            updated_node = updated_node.with_changes(body=_with_pass(updated_node.body))
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
            Device.code,
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
            statements[0] = first.with_changes(leading_lines=[*updated_node.leading_lines, *first.leading_lines])
        return cst.FlattenSentinel(statements)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine):
        if not updated_node.body:
            return cst.RemoveFromParent()
        return updated_node

    # -- blocks left empty ------------------------------------------------------------------------

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        """A block whose first statement was removed must not start with a blank line."""
        body = updated_node.body
        if not body or len(body) >= len(original_node.body) or not hasattr(body[0], "leading_lines"):
            return updated_node
        first = body[0]
        if first.leading_lines and not any(line.comment for line in first.leading_lines):
            removed_first = self.origins.site(original_node.body[0]) != self.origins.site(first)
            if removed_first:
                return updated_node.with_changes(body=[first.with_changes(leading_lines=()), *body[1:]])
        return updated_node

    # -- the device read as the string it was ---------------------------------------------------

    def _now_a_torch_device(self, node: cst.BaseExpression) -> bool:
        """A device name where it now holds ``accelerator.device``, a ``torch.device``."""
        return dotted(node) in self.facts.device_names and self.accelerator_reachable()

    def _its_type(self, original: cst.CSTNode, node: cst.BaseExpression, read: str) -> cst.BaseExpression:
        """``device`` → ``device.type``: the string the script read (``"cuda"``, ``"cpu"``)."""
        name = dotted(node)
        message = f"{name} {read}: {name}.type, the string it was ({self.device_expr} is a torch.device)"
        self.report(original, Device.code, message, header_only=True)
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
                if _is_device_type_literal(other) and self._now_a_torch_device(_unless_str(operands[device])):
                    read[device] = True
        if not any(read):
            return updated_node
        new = [
            self._its_type(original_node, _unless_str(operand), "compared with a string") if typed else operand
            for operand, typed in zip(operands, read)
        ]
        comparisons = [
            target.with_changes(comparator=value) for target, value in zip(updated_node.comparisons, new[1:])
        ]
        return updated_node.with_changes(left=new[0], comparisons=comparisons)

    def _string_reads(self, original: cst.Call, call: cst.Call) -> cst.Call:
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

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def leave_If(self, original_node: cst.If, updated_node: cst.If):
        if id(original_node) in self._elifs:
            # An ``elif`` stands where only an ``If`` may stand: the ``if`` that owns it decides
            # (``_same_branches`` reads the whole chain); an emptied branch gets ``pass``.
            if _has_statements(updated_node.body):
                return updated_node
            return updated_node.with_changes(body=_with_pass(updated_node.body))
        same = _same_branches(updated_node)
        if same is not None:
            # ``if available: device = A else: device = B`` now reads ``device = accelerator.device``
            # in both branches: one statement says it.
            first = same[0].with_changes(leading_lines=updated_node.leading_lines)
            return cst.FlattenSentinel([first, *same[1:]])
        if _has_statements(updated_node.body):
            if isinstance(updated_node.orelse, cst.Else) and not _has_statements(updated_node.orelse.body):
                return updated_node.with_changes(orelse=None)
            return updated_node
        orelse = updated_node.orelse
        if orelse is None:
            return cst.RemoveFromParent()
        if isinstance(orelse, cst.Else) and _has_statements(orelse.body):
            # ``if cuda: <nothing> else: x`` → ``if not cuda: x``
            return updated_node.with_changes(
                test=cst.UnaryOperation(cst.Not(), _parenthesized(updated_node.test)),
                body=orelse.body,
                orelse=None,
            )
        return updated_node.with_changes(body=_with_pass(updated_node.body))

    def leave_For(self, original_node: cst.For, updated_node: cst.For):
        return (
            updated_node
            if _has_statements(updated_node.body)
            else updated_node.with_changes(body=_with_pass(updated_node.body))
        )

    def leave_While(self, original_node: cst.While, updated_node: cst.While):
        return (
            updated_node
            if _has_statements(updated_node.body)
            else updated_node.with_changes(body=_with_pass(updated_node.body))
        )

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        updated = updated_node
        return updated if _has_statements(updated.body) else updated.with_changes(body=_with_pass(updated.body))


def _same_branches(node: cst.If) -> list[cst.BaseStatement] | None:
    """The statements of an if/elif/else whose branches are now all the same code (None
    otherwise): ``if cuda: device = A elif mps: device = B else: device = C`` after each became
    ``device = accelerator.device``."""
    blocks: list[cst.BaseSuite] = [node.body]
    orelse = node.orelse
    while isinstance(orelse, cst.If):
        blocks.append(orelse.body)
        orelse = orelse.orelse
    if not isinstance(orelse, cst.Else):
        return None
    blocks.append(orelse.body)
    if not all(isinstance(block, cst.IndentedBlock) and block.body for block in blocks):
        return None
    assert isinstance(node.body, cst.IndentedBlock)
    code = cst.Module([]).code_for_node
    body = [code(statement) for statement in node.body.body]
    if any(body != [code(statement) for statement in block.body] for block in blocks[1:]):
        return None
    if not all(dotted(_assigned_value(statement)) is not None for statement in node.body.body):
        return None  # only assignments of a name: never collapse branches doing work
    return list(node.body.body)


def _assigned_value(statement: cst.BaseStatement) -> cst.BaseExpression | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign):
            return small.value
    return None


def _calls_model(node: cst.BaseExpression, models: set[str]) -> bool:
    """``model(x)`` anywhere in an attribute/call chain: the result is computed, not loaded."""
    while True:
        if isinstance(node, cst.Call):
            if dotted(node.func) in models:
                return True
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return False


def _device_only(arg: cst.Arg) -> bool:
    return arg.keyword is not None and arg.keyword.value in DEVICE_ONLY_KEYWORDS


def _without_trailing_comma(args: list[cst.Arg]) -> list[cst.Arg]:
    if args and args[-1].comma is not cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


def _is_identity(assign: cst.Assign) -> bool:
    """``x = x``, ``a, b = a, b``, ``batch = {k: v for k, v in batch.items()}``,
    ``batch = tuple(t for t in batch)``: statements that no longer do anything."""
    if len(assign.targets) != 1:
        return False
    target, value = assign.targets[0].target, assign.value
    written = cst.Module([]).code_for_node
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
        return [written(e.value) for e in target.elements] == [written(e.value) for e in value.elements]
    target_code = written(target)
    if written(value) == target_code:
        return True
    if isinstance(value, cst.Call) and dotted(value.func) in {"tuple", "list"} and len(value.args) == 1:
        value = value.args[0].value
    if isinstance(value, (cst.GeneratorExp, cst.ListComp)):
        loop = value.for_in
        return (
            loop.inner_for_in is None
            and not loop.ifs
            and written(loop.target) == written(value.elt)
            and written(loop.iter) == target_code
        )
    if isinstance(value, cst.DictComp):
        loop = value.for_in
        return (
            loop.inner_for_in is None
            and not loop.ifs
            and written(loop.target).replace(" ", "")
            in {f"{written(value.key)},{written(value.value)}", f"({written(value.key)},{written(value.value)})"}
            and written(loop.iter) in {f"{target_code}.items()"}
        )
    return False


def _has_statements(block: cst.BaseSuite) -> bool:
    if isinstance(block, cst.IndentedBlock):
        return bool(block.body)
    return bool(block.body)  # SimpleStatementSuite


def _with_pass(block: cst.BaseSuite) -> cst.BaseSuite:
    if isinstance(block, cst.IndentedBlock):
        return block.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
    return block.with_changes(body=[cst.Pass()])


def _parenthesized(test: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(test, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return test
    return test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class Device(Rule):
    code = "ACC102"
    name = "device"
    extra_codes = {
        GPU_INDEX_PASSED_ON: "gpu-index: the GPU index once given to torch.cuda.set_device, passed on "
        "where it may name a device (the same GPU on every process)",
    }
    examples = (
        Example(
            # On the process's own GPU str(device) is "cuda:1": the comparison reads the type.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                loader = DataLoader(dataset, batch_size=8, pin_memory=str(device) == "cuda")
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(data), target).backward()
                    optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                accelerator = Accelerator()

                device = accelerator.device
                dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                loader = DataLoader(dataset, batch_size=8, pin_memory=device.type == "cuda")
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for data, target in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(data), target))
                    optimizer.step()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1).to(device)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        data, target = data.to(device), target.to(device)
                        noise = torch.randn(len(data), 8).cuda()
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data + noise), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        noise = torch.randn(len(data), 8).to(accelerator.device)
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data + noise), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                device = "cuda" if torch.cuda.is_available() else "cpu"
                print(f"Using {device} device")
                use_amp = device == "cuda"
                if device.startswith("cuda"):
                    torch.backends.cudnn.benchmark = True
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    with torch.autocast(device_type=device, enabled=False):
                        loss = nn.functional.mse_loss(model(data + torch.randn(8, device=device)), target)
                    loss.backward()
                    optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                accelerator = Accelerator()

                device = accelerator.device
                accelerator.print(f"Using {device} device")
                use_amp = device.type == "cuda"
                if device.type.startswith("cuda"):
                    torch.backends.cudnn.benchmark = True
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for data, target in loader:
                    optimizer.zero_grad()
                    with torch.autocast(device_type=device.type, enabled=False):
                        loss = nn.functional.mse_loss(model(data + torch.randn(8, device=device)), target)
                    accelerator.backward(loss)
                    optimizer.step()
            """,
        ),
        Example(
            code=GPU_INDEX_PASSED_ON,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Denoiser(nn.Module):
                    def __init__(self, gpu):
                        super().__init__()
                        self.gpu = gpu
                        self.linear = nn.Linear(8, 8)

                    def forward(self, x):
                        return self.linear(x + torch.randn(x.shape, device=self.gpu))


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--gpu", type=int, default=0)
                    args = parser.parse_args()
                    torch.cuda.set_device(args.gpu)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
                    model = Denoiser(args.gpu).cuda()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for (x,) in loader:
                        x = x.cuda(args.gpu)
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(x), x)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message="args.gpu, the GPU given to the removed torch.cuda.set_device, is passed on here: used as a "
            "device it is the same GPU on every process (pass accelerator.device instead)",
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(
            facts.device_names or facts.models or facts.batch_names or facts.call_sites.get(".cuda")
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        functions = frozenset(s.name.value for s in module.body if isinstance(s, cst.FunctionDef))
        transformer = _Device(
            facts,
            facts.existing_accelerator or facts.accelerator_name,
            _gpu_indices(module, facts),
            _device_functions(module, facts),
            functions,
        )
        converted = module.visit(transformer)
        converted, rebound = _rebind_module_device(module, converted, facts)
        converted, settings = _rebind_settings_devices(module, converted, facts)
        return converted, transformer.changes(module) + rebound + settings


def _rebind_settings_devices(
    original: cst.Module, converted: cst.Module, facts: ScriptFacts
) -> tuple[cst.Module, list[Change]]:
    """``class Config: device = "cuda" if ... else "cpu"``, read as ``Config.device`` /
    ``cfg.device``: chosen at import, GPU 0 on every rank. Right after the accelerator is created,
    the class attribute is rebound (``Config.device = accelerator.device``), which every instance
    of a plain class reads too; a dataclass instance (its own copy) is rebound once both it and
    the accelerator exist (``cfg.device = accelerator.device``), where it is built at module level
    or in the statements of the function creating the accelerator. What cannot be rebound is
    reported (ACC904)."""
    wanted = facts.settings_devices
    if not wanted and not facts.settings_devices_unreached:
        return converted, []
    accelerator = accelerator_name(facts)
    body: list[cst.BaseStatement] = list(converted.body)
    home = facts.creating_function if facts.home_kind == "function" else None
    index = None
    statements = body
    if home is not None:
        index = next((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == home), None)
        function = body[index] if index is not None else None
        if not isinstance(function, cst.FunctionDef) or not isinstance(function.body, cst.IndentedBlock):
            return converted, []
        statements = list(function.body.body)
    created = next((i for i, s in enumerate(statements) if creates_accelerator(s, facts)), None)
    if created is None:
        return converted, []
    module_level = [s for s in original.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
    after: dict[int, list[str]] = {}
    unreached = set(facts.settings_devices_unreached)
    for target in sorted(wanted):
        holder = target.rsplit(".", 1)[0]
        if holder == wanted[target].rsplit(".", 1)[0]:
            after.setdefault(created, []).append(target)  # the class attribute itself
            continue
        built = [i for i, s in enumerate(statements) if binds_name([s], holder)]
        if home is not None and binds_name(module_level, holder) and not built:
            after.setdefault(created, []).append(target)  # a module-level instance
        elif len(built) == 1 and isinstance(statements[built[0]], cst.SimpleStatementLine):
            after.setdefault(max(created, built[0]), []).append(target)
        else:
            unreached.add(wanted[target])
    for position in sorted(after, reverse=True):
        rebinds = [cst.parse_statement(f"{target} = {accelerator}.device") for target in after[position]]
        statements[position + 1 : position + 1] = rebinds
    if home is not None and index is not None:
        function = body[index]
        assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
        body[index] = function.with_changes(body=function.body.with_changes(body=statements))
    changes = []
    for target in sorted({t for targets in after.values() for t in targets}):
        owner, attribute = wanted[target].split(".", 1)
        site = _class_attribute_site(original, owner, attribute, facts)
        if site is not None:
            message = f"device chosen in class {owner} → {target} = {accelerator}.device once the accelerator exists"
            changes.append(report_at(site, Device.code, message, fixed=True))
    for name in sorted(unreached):
        owner, attribute = name.split(".", 1)
        site = _class_attribute_site(original, owner, attribute, facts)
        if site is not None:
            message = (
                f"device chosen inside {owner}, which the accelerator does not reach: GPU 0 on every rank "
                f"(its instances may hold their own); set it to {accelerator}.device once the accelerator exists"
            )
            changes.append(report_at(site, NO_ACCELERATOR_ACCESS, message))
    return converted.with_changes(body=body), changes


def _class_attribute_site(module: cst.Module, owner: str, attribute: str, facts: ScriptFacts) -> Site | None:
    """Where class ``owner``'s body assigns ``attribute`` (``device = ...``, ``device: str = ...``)."""
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and statement.name.value == owner:
            for line in statement.body.body:
                if isinstance(line, cst.SimpleStatementLine) and attribute in assigned_in(line):
                    return facts.origins.site(line)
    return None


def _rebind_module_device(
    original: cst.Module, converted: cst.Module, facts: ScriptFacts
) -> tuple[cst.Module, list[Change]]:
    """A module-level ``device = torch.device("cuda" ...)`` read by the model's code and helpers,
    with the accelerator created in ``main()``: that device is GPU 0 on every rank. The function
    creating the accelerator rebinds the global (``global device`` / ``device =
    accelerator.device``), so everything run after it uses this rank's device."""
    home = facts.creating_function if facts.home_kind == "function" else None
    if home is None:
        return converted, []
    selections = {}
    for statement in original.body:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        assign = statement.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and dotted(assign.value) is None:
            name = dotted(assign.targets[0].target)
            if name in facts.device_names and name not in selections:
                selections[name] = statement
    body = list(converted.body)
    index = next((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == home), None)
    if not selections or index is None:
        return converted, []
    function = body[index]
    assert isinstance(function, cst.FunctionDef)
    if not isinstance(function.body, cst.IndentedBlock):
        return converted, []
    statements: list[cst.BaseStatement] = list(function.body.body)
    local = set(parameter_names(function))
    names = [name for name in selections if name not in local and not binds_name(statements, name)]
    created = next((i for i, s in enumerate(statements) if creates_accelerator(s, facts)), None)
    if not names or created is None:
        return converted, []
    accelerator = accelerator_name(facts)
    rebinds = [cst.parse_statement(f"{name} = {accelerator}.device") for name in names]
    # Prepared models are placed by prepare (their moves are removed): not moved here.
    moved = _moves_at_import(original, set(names), selections, statements, created, local | facts.models)
    rebinds += [cst.parse_statement(f"{target} = {target}.to({device})") for target, (_, device) in moved.items()]
    statements[created + 1 : created + 1] = rebinds
    docstring = 1 if statements and is_docstring(statements[0]) else 0
    first = statements[docstring]
    declaration = cst.SimpleStatementLine(
        [cst.Global([cst.NameItem(cst.Name(name)) for name in [*names, *moved]])],
        leading_lines=as_statement(first).leading_lines,
    )
    statements[docstring] = as_statement(first).with_changes(leading_lines=())
    statements.insert(docstring, declaration)
    body[index] = function.with_changes(body=function.body.with_changes(body=statements))
    changes = []
    for name in names:
        site = facts.origins.site(selections[name])
        if site is not None:
            message = (
                f"module-level {name} → {accelerator}.device once {home}() creates the accelerator (global {name})"
            )
            changes.append(report_at(site, Device.code, message, fixed=True))
    for target, (statement, device) in moved.items():
        site = facts.origins.site(statement)
        if site is not None:
            message = f"module-level {target} moved to this process's {device} once {home}() creates the accelerator"
            changes.append(report_at(site, Device.code, message, fixed=True))
    changes.extend(_placed_at_import(original, set(names), selections, facts, set(moved)))
    # Module-level statements the device pass left as they were: found again by their code.
    without_moves = {expression_code(statement): _without_move(statement) for statement, _ in moved.values()}
    body = [without_moves.get(expression_code(statement), statement) for statement in body]
    return converted.with_changes(body=body), changes


def _moves_at_import(
    original: cst.Module,
    names: set[str],
    selections: dict[str, cst.SimpleStatementLine],
    statements: list[cst.BaseStatement],
    created: int,
    local: set[str],
) -> dict[str, tuple[cst.SimpleStatementLine, str]]:
    """Module-level ``featurizer = LogMel().to(device)`` (a fixed filterbank module, a constant
    tensor) after the device selection: at import it lands on GPU 0 on every rank, while each
    rank's batches are on its own GPU. Where nothing else at module level reads the name and the
    home function neither binds it nor reads it before creating the accelerator, the move goes
    to the home function, right after the device is rebound: built on the CPU at import, then
    ``featurizer = featurizer.to(device)`` (a module moves itself, a tensor is a new one: the
    assignment covers both). Not prepared: it trains nothing (DDP refuses a module without
    trainable parameters). Target → (its original statement, the device name)."""
    selected = {id(statement) for statement in selections.values()}
    found: dict[str, tuple[cst.SimpleStatementLine, str]] = {}
    later_mentions: set[str] = set()
    seen = False
    for statement in original.body:
        if id(statement) in selected:
            seen = True
            continue
        if not seen or isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        move = _module_level_move(statement, names)
        if move is not None and move[0] not in found and move[0] not in later_mentions:
            found[move[0]] = (statement, move[1])  # type: ignore[assignment]
            continue
        later_mentions |= names_in(statement)
    read_early = {name for statement in statements[:created] for name in names_in(statement)}
    return {
        target: found[target]
        for target in found
        if target not in later_mentions
        and target not in local
        and target not in read_early
        and not binds_name(statements, target)  # a local of the home function: no global for it
    }


def _module_level_move(statement: cst.CSTNode, names: set[str]) -> tuple[str, str] | None:
    """``name = <expression>.to(device)`` with ``device`` one of ``names``: (name, device)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target, value = assign.targets[0].target, assign.value
    if not isinstance(target, cst.Name) or not isinstance(value, cst.Call) or len(value.args) != 1:
        return None
    func, arg = value.func, value.args[0]
    if not isinstance(func, cst.Attribute) or func.attr.value != "to" or arg.keyword is not None or arg.star:
        return None
    device = dotted(arg.value)
    if device not in names or target.value in names_in(func.value):
        return None
    return target.value, device


def _without_move(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """``featurizer = LogMel().to(device)`` → ``featurizer = LogMel()``."""
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)
    assert isinstance(assign.value.func, cst.Attribute)
    return statement.with_changes(body=[assign.with_changes(value=assign.value.func.value)])


def _placed_at_import(
    original: cst.Module,
    names: set[str],
    selections: dict[str, cst.SimpleStatementLine],
    facts: ScriptFacts,
    moved: set[str],
) -> list[Change]:
    """Module-level statements after the device selection that put tensors on that device
    (a diffusion schedule's ``alpha_bar = torch.cumprod(alphas, 0).to(device)``): they run at
    import, before the accelerator exists, so on GPU 0 on every rank, where the global is not yet
    rebound; the other ranks' batches meet them on their own GPU. Reported (ACC904)."""
    changes: list[Change] = []
    selected = {id(statement) for statement in selections.values()}
    seen = False
    for statement in original.body:
        if id(statement) in selected:
            seen = True
            continue
        if not seen or not isinstance(statement, cst.SimpleStatementLine):
            continue
        if (_module_level_move(statement, names) or ("",))[0] in moved:
            continue  # moved to the home function instead (_moves_at_import)
        placed = [
            name
            for call in calls_in(statement)
            for name in names
            if any(dotted(arg.value) == name and _places_on(call, arg) for arg in call.args)
        ]
        site = facts.origins.site(statement)
        if placed and site is not None:
            changes.append(
                report_at(
                    site,
                    NO_ACCELERATOR_ACCESS,
                    f"tensor placed on module-level {placed[0]} at import, before the accelerator picks this "
                    f"process's device: GPU 0 on every rank (move it after the accelerator is created, or to "
                    f"the device of the batch that uses it)",
                )
            )
    return changes


def _gpu_indices(module: cst.Module, facts: ScriptFacts) -> set[str]:
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


def _is_device_type_literal(node: cst.BaseExpression) -> bool:
    """``"cuda"``, ``"cpu"``, or a tuple, list or set of them (``("cuda", "mps")``)."""
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return bool(node.elements) and all(_is_device_type_literal(element.value) for element in node.elements)
    return isinstance(node, cst.SimpleString) and node.evaluated_value in DEVICE_TYPES


def _device_keyword(arg: cst.Arg) -> bool:
    """``device=`` of a factory or an iterator, ``map_location=`` of ``torch.load``."""
    return arg.keyword is not None and arg.keyword.value in ("device", "map_location")


def _names_cuda(value: cst.BaseExpression) -> bool:
    """Whether the expression mentions the string "cuda" ("cuda", "cuda:0", f"cuda:{i}" ...)."""
    return any(
        (isinstance(node, cst.SimpleString) and "cuda" in node.value)
        or (isinstance(node, cst.FormattedStringText) and "cuda" in node.value)
        for node in nodes_in(value)
    )


def _device_functions(module: cst.Module, facts: ScriptFacts) -> frozenset[str]:
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
        values = [node.value for node in nodes_in(statement.body) if isinstance(node, cst.Return)]
        devices = [
            value
            for value in values
            if isinstance(value, cst.Call) and dotted(value.func) in ("torch.device", "device")
        ]
        if values and len(devices) == len(values) and any(_names_cuda(value) for value in devices):
            found.add(statement.name.value)
    return frozenset(found)


def _places_on(call: cst.Call, arg: cst.Arg) -> bool:
    """Whether ``arg`` is where ``call`` puts a tensor: ``x.to(arg)`` or ``device=arg``."""
    if arg.keyword is not None:
        return arg.keyword.value == "device"
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"


def _unless_str(node: cst.BaseExpression) -> cst.BaseExpression:
    """``device`` for ``str(device)``; any other expression as it is. Compared with ``"cuda"``,
    ``str(accelerator.device)`` is ``"cuda:0"``: the comparison reads the device's type instead."""
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "str"
        and len(node.args) == 1
        and node.args[0].keyword is None
        and not node.args[0].star
    ):
        return node.args[0].value
    return node
