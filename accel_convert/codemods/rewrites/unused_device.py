"""ACC125 unused-device: a function's ``device = accelerator.device`` (or a flag its device selection read) that nothing reads any more.

Once ``prepare`` places the model and the loaders' batches, the moves that read ``device`` are
gone, and the assignment the device rule rewrote (``device = torch.device("cuda")`` →
``device = accelerator.device``) is often left with no reader: a new F841 ("local variable
assigned to but never used") from ruff and flake8 in a script that passed them. Inside a
function, where F841 looks, such an assignment is removed when nothing else in the function
(nested functions included) names the variable; at module level a name may be read from
elsewhere (an import of the script, a notebook cell), so it stays. The flags a replaced device
selection read (``use_cuda = not args.no_cuda and torch.cuda.is_available()``, then ``if
use_cuda: device = ...``) go the same way when the original read them and nothing does now, and
so does a GPU index read out of settings (``gpu = config["gpu"]``, whose moves now take the
accelerator's device); an assignment whose value could do anything else (a call that is not a
device question) stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.devices import held_name
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import body_statements, dotted, name_assigned, names_bound
from accel_convert.codemods.engine.torch_names import DEVICE_AVAILABILITY
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import walk

#: Builtins through which a function may read any of its variables by name.
READS_EVERY_LOCAL = frozenset({"locals", "vars", "eval", "exec"})


class UnusedDevice(Rule):
    code = "ACC125"
    name = "unused-device"
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
                    model = nn.Linear(8, 1).to(device)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in loader:
                        x, y = x.to(device), y.to(device)
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(x), y))
                        optimizer.step()
            """,
        ),
        # Still read (``device.type``): kept.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
                    model = nn.Linear(8, 1).to(device)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    print("training on", device.type)
                    for x, y in loader:
                        x, y = x.to(device), y.to(device)
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    device = accelerator.device
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    accelerator.print("training on", device.type)
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(x), y))
                        optimizer.step()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _DropUnusedDevice(facts, names_bound(module.body))
        converted = module.visit(transformer)
        return converted, transformer.changes(module)


class _DropUnusedDevice(RuleTransformer):
    def __init__(self, facts: ScriptFacts, module_names: set[str]) -> None:
        super().__init__(facts)
        #: The module's names: a function's ``device`` that is not its own (``global device``)
        #: writes the module's, which other code may read.
        self.module_names = module_names

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        statements = list(updated_node.body.body)
        # The cheap questions first: only the few device lines get the function's names read.
        candidates = {id(s): name for s in statements if (name := self._device_line(s)) is not None}
        dropped = {
            key: name
            for key, name in candidates.items()
            if not self._still_read(name, [s for s in body_statements(updated_node) if id(s) != key])
        }
        if not dropped or len(dropped) == len(statements):
            return updated_node
        kept: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []  # the blank lines above a removed line stay
        for statement in statements:
            if id(statement) in dropped:
                message = f"{dropped[id(statement)]} no longer read: its assignment removed"
                self.report(statement, UnusedDevice.code, message, True)
                carried += _leading_lines(statement)
                continue
            if carried and not _leading_lines(statement):
                statement = statement.with_changes(leading_lines=carried)
            carried = []
            kept.append(statement)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=kept))

    def _device_line(self, statement: cst.BaseStatement) -> str | None:
        """``NAME`` of a line ``NAME = accelerator.device``, or of a device flag the original
        read; None for any other line."""
        assigned = name_assigned(statement)
        if assigned is None or (assigned[0] in self.module_names and not self._hides_no_module_device(assigned[0])):
            return None
        name, value = assigned
        if any(line.comment for line in _leading_lines(statement)):
            return None
        if dotted(value) in self._accelerator_devices():
            # Whether the original read it or not, the line is dead code once nothing reads it;
            # deciding on the converted code alone keeps the conversion of its own output unchanged.
            return name
        # A device flag or index: only one the original read (else the unused line is the
        # script's own, and converting the output again must leave it too).
        if len(self.facts.lines_mentioning([name])) <= 1:
            return None
        if _asks_about_devices(value, self.facts):
            return name
        # A GPU index read from settings, or one the script's own function returns (``target =
        # pick_gpu()``): its moves now take the accelerator's device.
        picked = isinstance(value, cst.Call) and dotted(value.func) in self.facts.gpu_index_functions
        if name in self.facts.gpu_index_values and (picked or held_name(value) is not None):
            return name
        return None

    def _hides_no_module_device(self, name: str) -> bool:
        """Whether removing the function's ``name`` leaves the module's ``name`` as it is: the
        function binds it itself, and the module's is no device (a CPU kept on purpose, something
        else: ``device_names_elsewhere``). A function's own line hiding the module's device stays:
        without it, converting the output again would rebind the module's device in the function
        (``global device``)."""
        return self._own(name) and ((), name) in self.facts.device_names_elsewhere

    def _own(self, name: str) -> bool:
        """Whether the function being left binds ``name`` itself (a module's ``device`` of the same
        name is another variable, which the device owner scopes apart: ``binding_scope``), not
        through ``global``/``nonlocal``."""
        names = self.facts.names
        return names is not None and names.binding_scope(name, self.scope) == self.scope

    def _accelerator_devices(self) -> set[str]:
        """How the function being left reads the accelerator's device: ``accelerator.device``,
        and ``self.accelerator.device`` in a training class's method (the device rule's
        ``device = self.accelerator.device`` of a method's own ``device``)."""
        device = f"{accelerator_name(self.facts)}.device"
        instance = self.instance_accelerator()
        return {device} if instance is None else {device, f"{dotted(instance)}.device"}

    def _still_read(self, name: str, others: Sequence[cst.CSTNode]) -> bool:
        mentioned = _names(others)
        # The builtins, not the script's own ``eval`` (an evaluation function) of the same name.
        return name in mentioned or any(self.builtin(cst.Name(word)) for word in mentioned & READS_EVERY_LOCAL)


def _leading_lines(statement: cst.BaseStatement) -> list[cst.EmptyLine]:
    return list(cast(cst.SimpleStatementLine | cst.BaseCompoundStatement, statement).leading_lines)


def _asks_about_devices(value: cst.BaseExpression, facts: ScriptFacts) -> bool:
    """A flag made of names, attributes, ``not``/``and``/``or``, comparisons, literals and
    device questions (``torch.cuda.is_available()``): dropping it runs nothing less."""
    asked = False
    pending: list[cst.CSTNode] = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Call):
            if facts.qualified_name(node.func) not in DEVICE_AVAILABILITY or node.args:
                return False
            asked = True
        elif isinstance(node, cst.Attribute):
            pending.append(node.value)
            continue
        elif not isinstance(
            node,
            (cst.Name, cst.BooleanOperation, cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget)
            + (cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.SimpleString, cst.Integer)
            + (cst.LeftParen, cst.RightParen, cst.SimpleWhitespace, cst.ParenthesizedWhitespace)
            + (cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment),
        ):
            return False
        pending.extend(node.children)
    return asked


def _names(statements: Sequence[cst.CSTNode]) -> set[str]:
    """Every variable the statements name: not an attribute after a dot, not a keyword of a call
    (``device=`` of ``torch.zeros(..., device=accelerator.device)``)."""
    reader = _VariableNames()
    for statement in statements:
        walk(statement, reader)
    return reader.names


class _VariableNames(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False
