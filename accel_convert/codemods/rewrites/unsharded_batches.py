"""ACC127 unsharded-batches: a loop over a loader left unsharded moves its batch to the model's device.

Some evaluation loaders stay unprepared, so that every process runs every batch: a loop writing a
file per batch (:func:`~codemods.model.file_flow.per_batch_file_loaders`), an evaluation whose
result decides what the processes do next (:func:`~codemods.model.locality.deciding_evaluations`),
one joining its rows (:func:`~codemods.model.loaders.joined_rows_loaders`). Such a loader puts
its batches where the original's did — on the CPU. A script written for the CPU never moves them,
and its model ran on the CPU too; converted, the model is prepared, so on the accelerator's
device, and on a GPU its first forward meets a CPU batch ("Expected all tensors to be on the same
device"). So the loop's first statement moves the batch there, as ``prepare`` would have:
``x, y = send_to_device((x, y), accelerator.device)`` (any nesting of tuples, lists and dicts of
tensors; anything else is left as it is). The loop's names are then batch names like a prepared
loader's: read on the host (``labels.numpy()``) they are copied back first (ACC118).

A loop that moves anything itself (``x.to(device)``: the original chose where its batches go,
and that move is converted) and a loop calling no model (dataset statistics) are left alone. On
the CPU the move does nothing. Where the accelerator is not reachable the loop is left as it is
and reported (ACC904).
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import BATCH_MOVER
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imports import add_utils_import
from accel_convert.codemods.engine.iteration import batch_target
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, Example, Rule
from accel_convert.codemods.engine.syntax import dotted, statement
from accel_convert.codemods.engine.transformers import RuleTransformer

MESSAGE = "the batch of a loader left unsharded moves to the prepared model's device, as prepare would move it"
UNREACHABLE = (
    "a loader left unsharded feeds a prepared model where the accelerator is not reachable: batches stay on the CPU"
)
#: Prints expressions into the lines made.
_CODE = cst.Module([])


class _BatchesMoved(RuleTransformer):
    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__(facts, facts.unsharded_batches_moved)
        self.moved = False

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        site = self.origins.site(original_node)
        if site is None or site.line not in self.facts.unsharded_batches_moved or _moves_first(updated_node):
            return updated_node
        batch = batch_target(original_node, self.facts.names, self.scope)
        if batch is None:
            return updated_node
        if not self.accelerator_reachable():
            self.report(original_node, NO_ACCELERATOR_ACCESS, UNREACHABLE, False, header_only=True)
            return updated_node
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        plain = batch.with_changes(lpar=(), rpar=())
        if isinstance(batch, cst.Tuple) and len(batch.elements) == 1:
            plain = batch.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # ``(x,)``
        written = _CODE.code_for_node(plain)
        moved = f"({written})" if isinstance(batch, cst.Tuple) and len(batch.elements) > 1 else written
        line = statement(f"{written} = {BATCH_MOVER}({moved}, {_CODE.code_for_node(accelerator)}.device)")
        body = updated_node.body
        if isinstance(body, cst.IndentedBlock):
            block = body.with_changes(body=[line, *body.body])
        else:  # ``for x in loader: use(x)`` on one line
            block = cst.IndentedBlock([line, cst.SimpleStatementLine(cast(cst.SimpleStatementSuite, body).body)])
        self.moved = True
        self.report(original_node, UnshardedBatches.code, MESSAGE, header_only=True)
        return updated_node.with_changes(body=block)


def _moves_first(loop: cst.For) -> bool:
    """Whether the loop's first statement already moves its batch (a converted script, converted again)."""
    body = loop.body
    first = body.body[0] if isinstance(body, cst.IndentedBlock) and body.body else None
    small = first.body[0] if isinstance(first, cst.SimpleStatementLine) and first.body else None
    return (
        isinstance(small, cst.Assign) and isinstance(small.value, cst.Call) and dotted(small.value.func) == BATCH_MOVER
    )


class UnshardedBatches(Rule):
    code = "ACC127"
    name = "unsharded-batches"
    examples = (
        # A CPU script whose evaluation writes a file per batch: its loader stays unprepared
        # (every process runs every batch, the main process writes every file), and the model it
        # feeds is on the accelerator's device.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=16)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=16)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (x,) in enumerate(test_loader):
                        torch.save(model(x), f"pred_{i}.pt")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from accel_convert.runtime.utils import send_to_device
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=16)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=16)
                for x, y in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (x,) in enumerate(test_loader):
                        (x,) = send_to_device((x,), accelerator.device)
                        accelerator.save(model(x), f"pred_{i}.pt")
            """,
        ),
        # The same loop written for a GPU moves its batch itself: that move is converted, and
        # nothing is added.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                device = torch.device("cuda")
                model = nn.Linear(8, 2).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=16)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=16)
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (inputs,) in enumerate(test_loader):
                        inputs = inputs.to(device)
                        torch.save(model(inputs), f"pred_{i}.pt")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                device = accelerator.device
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 2)), batch_size=16)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=16)
                for x, y in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (inputs,) in enumerate(test_loader):
                        inputs = inputs.to(device)
                        accelerator.save(model(inputs), f"pred_{i}.pt")
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(facts.unsharded_batches_moved)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _BatchesMoved(facts)
        changed = module.visit(transformer)
        if transformer.moved:
            changed = add_utils_import(changed, BATCH_MOVER, options)
        return changed, transformer.changes(module)
