"""ACC118 batch-to-numpy: a batch tensor read as a NumPy array is copied to the CPU first.

A prepared loader puts every tensor of a batch on the accelerator's device, also those the
original script left on the CPU: a script that moved only its inputs (``images.to(device)``) and
read its labels with ``labels.numpy()`` for scikit-learn worked on one GPU, but after the
conversion ``labels`` is a CUDA tensor and ``.numpy()`` raises ``TypeError``. ``labels.cpu()``
first is a no-op on the CPU and the copy the original made implicitly on a GPU. Only names bound
per batch by a loop over a prepared loader (and names taken out of them without a call) are
rewritten; a chain that already goes through ``.cpu()`` or ``.to(...)`` is left alone.

The same holds for batch tensors collected in a list that is then made a NumPy array
(``labels.append(yb)`` ... ``torch.cat(labels).numpy()``, ``np.concatenate(labels)``): in the
original the list held CPU tensors (or the conversion would have failed on a GPU), so the append
becomes ``labels.append(yb.cpu())``, which keeps the list where the original had it.

And a batch tensor combined with a tensor the script copied to the CPU (``_, predicted =
torch.max(outputs.cpu(), 1)`` then ``(predicted == labels).sum()``): the original compared two
CPU tensors; converted, ``labels`` is on the device and the comparison raises on a GPU ("Expected
all tensors to be on the same device"), so it reads ``labels.cpu()``. So does a batch tensor handed
to NumPy, scikit-learn, SciPy, pandas or Matplotlib (``accuracy_score(labels, preds)``), which
read the tensor's memory on the host.

A size read off a batch tensor is a Python number, not a tensor: ``n = imgs.shape[0]``, ``b, c =
imgs.shape``, ``imgs.size(0)``, ``len(imgs)``, ``loss.item()`` (:func:`syntax.is_host_number`,
which the analysis asks too before it counts a name as batch data). ``np.random.randint(0, 8, n)``
is left alone: ``n.cpu()`` would raise ``AttributeError`` on the first batch.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import dotted, is_host_number, nodes_in
from accel_convert.codemods.engine.torch_names import (
    ARRAYS_FROM_LISTS,
    DEVICE_MOVE_METHODS,
    HOST_LIBRARIES,
    TENSOR_JOINS,
)
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of

#: Tensor methods combining the tensor with another, which must be on the same device
#: (``pred.cpu().eq(target)``).
_COMPARING_METHODS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "equal", "add", "sub", "mul", "div"})


class _CopyToCpu(RuleTransformer):
    def __init__(self, facts: ScriptFacts) -> None:
        sites = [*facts.call_sites.get(".numpy", ()), *facts.call_sites.get(".append", ())]
        lines = lines_of(sites)
        if ".cpu" in facts.call_sites or _host_library_calls(facts):
            # Comparisons with a CPU copy: in the loops over loaders, where batch names live.
            for loop in [*facts.train_loops, *facts.eval_loops]:
                lines.update(range(loop.site.line, loop.site.end_line + 1))
        super().__init__(facts, lines)
        #: Per function (by identity): the lists it makes NumPy arrays of, and the names it binds
        #: to a copy on the CPU.
        self._reads_of: dict[int, tuple[set[str], set[str]]] = {}
        self._functions: list[cst.FunctionDef | cst.Module] = []

    def visit_Module(self, node: cst.Module) -> None:
        self._functions.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated_node

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.Comparison:
        operands = [updated_node.left, *(target.comparator for target in updated_node.comparisons)]
        if not any(self._on_cpu(operand) for operand in operands):
            return updated_node
        left = self._copied_if_batch(original_node, updated_node.left)
        comparisons = [
            target.with_changes(comparator=self._copied_if_batch(original_node, target.comparator))
            for target in updated_node.comparisons
        ]
        return updated_node.with_changes(left=left, comparisons=comparisons)

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BinaryOperation:
        left, right = updated_node.left, updated_node.right
        if self._on_cpu(left):
            return updated_node.with_changes(right=self._copied_if_batch(original_node, right))
        if self._on_cpu(right):
            return updated_node.with_changes(left=self._copied_if_batch(original_node, left))
        return updated_node

    def _copied_if_batch(
        self, anchor: cst.CSTNode, operand: cst.BaseExpression, meets: str = "meets a copy on the CPU"
    ) -> cst.BaseExpression:
        """``labels`` → ``labels.cpu()`` for a batch tensor met next to a CPU copy."""
        batch = _batch_root(operand, self.builtin)
        if batch is None or batch not in self.facts.batch_names_by_function.get(self.function, ()):
            return operand
        if not isinstance(operand, (cst.Name, cst.Attribute, cst.Subscript)):
            return operand  # a call on it (``labels.float()``): its result, not the batch name
        self.report(
            anchor,
            BatchToNumpy.code,
            f"{batch} comes from a prepared loader, on the accelerator's device, and {meets}: .cpu() as in the original",
            header_only=True,
        )
        return cst.Call(
            cst.Attribute(operand.with_changes(lpar=(), rpar=()), cst.Name("cpu")), lpar=operand.lpar, rpar=operand.rpar
        )

    def _on_cpu(self, operand: cst.BaseExpression) -> bool:
        """A tensor the script copied to the CPU: ``outputs.argmax(1).cpu()``, or a name bound to
        such a copy in this function (``predicted`` of ``_, predicted = torch.max(outputs.cpu(), 1)``),
        read through attributes and method calls (``predicted.view(-1)``)."""
        node: cst.BaseExpression = operand
        while True:
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                if node.func.attr.value == "cpu":
                    return True
                if node.func.attr.value in ("to", "cuda"):
                    return False
                node = node.func.value
            elif isinstance(node, (cst.Attribute, cst.Subscript)):
                node = node.value
            elif isinstance(node, cst.Name):
                return node.value in self._cpu_names()
            else:
                return False

    def _cpu_names(self) -> set[str]:
        """Names the enclosing function binds to a copy on the CPU (``_, predicted =
        torch.max(outputs.cpu(), 1)``)."""
        return self._function_reads()[1]

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "append" and len(updated_node.args) == 1:
            return self._append_on_cpu(original_node, updated_node, func)
        if isinstance(func, cst.Attribute) and func.attr.value in _COMPARING_METHODS and len(updated_node.args) == 1:
            return self._compared_on_cpu(original_node, updated_node, func)
        if (self.facts.qualified_name(func) or "").startswith(HOST_LIBRARIES):
            # ``accuracy_score(labels, preds)``, ``np.array(labels)``: the library reads the
            # tensor's memory on the host.
            library = (self.facts.qualified_name(func) or "").partition(".")[0]
            meets = f"is read on the host by {library}"
            args = [
                arg.with_changes(value=self._copied_if_batch(original_node, arg.value, meets))
                for arg in updated_node.args
            ]
            return updated_node.with_changes(args=args)
        if not (isinstance(func, cst.Attribute) and func.attr.value == "numpy") or updated_node.args:
            return updated_node
        batch = _batch_root(func.value, self.builtin)
        if batch is None or batch not in self.facts.batch_names_by_function.get(self.function, ()):
            return updated_node
        self.report(
            original_node,
            BatchToNumpy.code,
            f"{batch} comes from a prepared loader, on the accelerator's device: .cpu() before .numpy()",
            header_only=True,
        )
        on_cpu = cst.Call(cst.Attribute(func.value, cst.Name("cpu")))
        return updated_node.with_changes(func=func.with_changes(value=on_cpu))

    def _compared_on_cpu(self, original_node: cst.Call, updated_node: cst.Call, func: cst.Attribute) -> cst.Call:
        """``pred.cpu().eq(target)`` → ``pred.cpu().eq(target.cpu())`` (and the other way round):
        the method form of a comparison with a CPU copy."""
        arg = updated_node.args[0]
        if self._on_cpu(func.value):
            return updated_node.with_changes(
                args=[arg.with_changes(value=self._copied_if_batch(original_node, arg.value))]
            )
        if self._on_cpu(arg.value):
            return updated_node.with_changes(
                func=func.with_changes(value=self._copied_if_batch(original_node, func.value))
            )
        return updated_node

    def _append_on_cpu(self, original_node: cst.Call, updated_node: cst.Call, func: cst.Attribute) -> cst.Call:
        """``labels.append(yb)`` of a batch tensor into a list the function makes an array of."""
        collected = dotted(func.value)
        value = updated_node.args[0].value
        batch = _batch_root(value, self.builtin)
        if (
            collected is None
            or batch is None
            or batch not in self.facts.batch_names_by_function.get(self.function, ())
            or collected not in self._lists_made_arrays()
        ):
            return updated_node
        self.report(
            original_node,
            BatchToNumpy.code,
            f"{batch} comes from a prepared loader, on the accelerator's device, and {collected} becomes a NumPy "
            "array: .cpu() before it is collected",
            header_only=True,
        )
        on_cpu = cst.Call(cst.Attribute(value, cst.Name("cpu")))
        return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=on_cpu)])

    def _lists_made_arrays(self) -> set[str]:
        """Lists the enclosing function (or module-level code) turns into a NumPy array:
        ``torch.cat(labels).numpy()``, ``np.concatenate(labels)``."""
        return self._function_reads()[0]

    def _function_reads(self) -> tuple[set[str], set[str]]:
        """The enclosing function's lists made arrays and names bound to CPU copies, read in one
        walk of it (cached per function)."""
        function = self._functions[-1]
        found = self._reads_of.get(id(function))
        if found is not None:
            return found
        arrays: set[str] = set()
        cpu_names: set[str] = set()
        for node in nodes_in(function):
            if type(node) is cst.Assign:
                cpu_names.update(_cpu_copies_bound(node))
            elif type(node) is cst.Call:
                arrays.update(self._lists_made_array(node))
        found = self._reads_of[id(function)] = (arrays, cpu_names)
        return found

    def _lists_made_array(self, call: cst.Call) -> list[str]:
        """The list ``call`` turns into a NumPy array (``np.concatenate(labels)``,
        ``torch.cat(labels).numpy()``), as a name ("" when it is no name); none for other calls."""
        made: list[str] = []
        if call.args and (self.facts.callee_name(call.func) or "") in ARRAYS_FROM_LISTS:
            made.append(dotted(call.args[0].value) or "")
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "numpy"
            and isinstance(func.value, cst.Call)
            and func.value.args
            and (self.facts.callee_name(func.value.func) or "") in TENSOR_JOINS
        ):
            made.append(dotted(func.value.args[0].value) or "")
        return made


def _cpu_copies_bound(assign: cst.Assign) -> set[str]:
    """The names ``x = y.cpu()`` binds to a copy on the CPU (not moved back, nor made a NumPy
    array or Python value in the same line)."""
    methods = {
        call.func.attr.value
        for call in nodes_in(assign.value)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    }
    if "cpu" not in methods or methods & {"to", "cuda", "numpy", "tolist", "item"}:
        return set()
    return {name.value for target in assign.targets for name in nodes_in(target.target) if isinstance(name, cst.Name)}


def _host_library_calls(facts: ScriptFacts) -> bool:
    return any(name.startswith(HOST_LIBRARIES) for name in facts.called)


def _batch_root(receiver: cst.BaseExpression, builtin: BuiltinOf) -> str | None:
    """The name at the root of ``labels``, ``labels.data``, ``batch["y"].detach()``; None when
    the chain places the tensor itself (``.cpu()``, ``.to(...)``), reads a Python number off it
    (``labels.shape[0]``, ``len(labels)``: on the host already), or is not rooted in a name."""
    node = receiver
    while True:
        if is_host_number(node, builtin):
            return None
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in DEVICE_MOVE_METHODS:
                return None
            if not isinstance(node.func, cst.Attribute):
                return None  # a function's result, not the batch itself
            node = node.func.value
        elif isinstance(node, cst.Attribute):
            node = node.value
        elif isinstance(node, cst.Subscript):
            node = node.value
        else:
            return None


class BatchToNumpy(Rule):
    code = "ACC118"
    name = "batch-to-numpy"
    examples = (
        # A copy of the labels taken before the move (pytorch-playground's ``indx_target``),
        # compared with a CPU copy of the predictions in the method form.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)
                model = nn.Linear(8, 2).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                correct = 0
                for data, target in loader:
                    indx_target = target.clone()
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    output = model(data)
                    nn.functional.cross_entropy(output, target).backward()
                    optimizer.step()
                    correct += output.argmax(1).cpu().eq(indx_target).sum().item()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                accelerator = Accelerator()

                device = accelerator.device
                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                correct = 0
                for data, target in loader:
                    indx_target = target.clone()
                    optimizer.zero_grad()
                    output = model(data)
                    accelerator.backward(nn.functional.cross_entropy(output, target))
                    optimizer.step()
                    correct += output.argmax(1).cpu().eq(indx_target.cpu()).sum().item()
            """,
        ),
        Example(
            before="""
                import numpy as np
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                torch.manual_seed(0)
                data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
                loader = DataLoader(data, batch_size=8)
                model = nn.Linear(8, 2).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                seen = np.zeros(2, dtype=int)
                for inputs, labels in loader:
                    optimizer.zero_grad()
                    logits = model(inputs.to(device))
                    nn.functional.cross_entropy(logits, labels.to(device)).backward()
                    optimizer.step()
                    seen += np.bincount(labels.numpy(), minlength=2)
                    n = labels.shape[0]
                    flips = np.random.randint(0, 2, n) ^ np.random.randint(0, 2, len(labels))
            """,
            after="""
                import numpy as np
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                accelerator = Accelerator()

                device = accelerator.device
                torch.manual_seed(0)
                data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
                loader = DataLoader(data, batch_size=8)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                seen = np.zeros(2, dtype=int)
                for inputs, labels in loader:
                    optimizer.zero_grad()
                    logits = model(inputs)
                    accelerator.backward(nn.functional.cross_entropy(logits, labels))
                    optimizer.step()
                    seen += np.bincount(labels.cpu().numpy(), minlength=2)
                    n = labels.shape[0]
                    flips = np.random.randint(0, 2, n) ^ np.random.randint(0, 2, len(labels))
            """,
        ),
        # Batch tensors that already go through .cpu() before .numpy(), and a size read off one
        # (labels.size(0), a Python number): left as written.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from sklearn.metrics import accuracy_score
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        outputs = model(images)
                        loss = nn.functional.cross_entropy(outputs, labels)
                        loss.backward()
                        optimizer.step()
                        predicted = outputs.argmax(dim=1)
                        print("batch accuracy:", accuracy_score(labels.cpu().numpy(), predicted.cpu().numpy()), "of", labels.size(0))


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from sklearn.metrics import accuracy_score
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        outputs = model(images)
                        loss = nn.functional.cross_entropy(outputs, labels)
                        accelerator.backward(loss)
                        optimizer.step()
                        predicted = outputs.argmax(dim=1)
                        accelerator.print("batch accuracy:", accuracy_score(labels.cpu().numpy(), predicted.cpu().numpy()), "of", labels.size(0))


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return (
            facts.has_accelerator
            and bool(facts.batch_names)
            and (".numpy" in facts.call_sites or ".cpu" in facts.call_sites or _host_library_calls(facts))
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _CopyToCpu(facts)
        return module.visit(transformer), transformer.changes(module)
