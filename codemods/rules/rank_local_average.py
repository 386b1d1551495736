"""ACC919 rank-local-average: a training loss or accuracy summed over this process's batches only.

``running_loss += loss.item()`` inside the training loop adds up the losses of the batches this
process trained on: after the conversion that is one shard of the epoch. Printed or logged as the
epoch's loss (``running_loss / len(train_loader)``), it is the main process's share, not the
epoch's: the number differs from the one-process run. Reduce it across processes first
(``accelerator.reduce(torch.tensor(running_loss, device=accelerator.device), "sum")``, with the
batch count reduced the same way), or say in the log that it is one process's value.

The same holds for a training accuracy counted in the training loop (``correct += (pred ==
target).sum().item()``, printed as ``correct / total`` per epoch): each process counts the
predictions on its own shard, so the printed accuracy is the main process's. It is reported too:
gathering every training batch's predictions would add a collective per step, and a reduce of the
counts would count the padding of the last uneven batch.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import names_in, nodes_in
from accel_convert.codemods.engine.transformers import RuleTransformer

MESSAGE = "a loss summed over this process's batches only: reduce it across processes before reporting it"
ACCURACY_MESSAGE = (
    "training predictions counted over this process's batches only: the accuracy printed from it is "
    "one process's (reduce the counts across processes, or say it is the main process's)"
)


class RankLocalAverage(Rule):
    code = "ACC919"
    name = "rank-local-average"
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    running = 0.0
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        running += loss.item()
                    print(f"train loss {running / len(loader):.4f}")


                if __name__ == "__main__":
                    main()
            """,
            message=MESSAGE,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.train_loops)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        # Whole training loops: a sum may read the loss through another name
        # (``loss_value = loss.item()`` ... ``running += loss_value * n``).
        lines = {line for loop in facts.train_loops for line in range(loop.site.line, loop.site.end_line + 1)}
        finder = _LossSums(facts, facts.lines_mentioning(facts.loss_names) | lines)
        module.visit(finder)
        return module, finder.changes(module)


class _LossSums(RuleTransformer):
    """``total += loss.item()`` (or ``+= loss``, ``losses.append(loss)``, ``meter.update(loss.item(),
    n)``, or a sum of a name bound from the loss) inside a loop over a prepared training loader."""

    def __init__(self, facts: ScriptFacts, lines: set[int]) -> None:
        super().__init__(facts, lines)
        self._training_loops = 0
        self._evaluations = 0
        #: The losses, and names a training loop binds from them (``loss_value = loss.item()``).
        self._losses = set(facts.loss_names)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._in_training and names_in(node.value) & self._losses:
            self._losses.update(name for target in node.targets for name in names_in(target.target))

    def visit_For(self, node: cst.For) -> None:
        if self._is_training_loop(node):
            self._training_loops += 1
        elif self._is_evaluation_loop(node):
            # A validation run every few steps, nested in the training loop: what it counts is
            # gathered by the metrics rule, not this process's training.
            self._evaluations += 1

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if self._is_training_loop(original_node):
            self._training_loops -= 1
        elif self._is_evaluation_loop(original_node):
            self._evaluations -= 1
        return updated_node

    def _is_evaluation_loop(self, node: cst.For) -> bool:
        site = self.facts.origins.site(node)
        return site is not None and any(loop.site.line == site.line for loop in self.facts.eval_loops)

    @property
    def _in_training(self) -> bool:
        return self._training_loops > 0 and not self._evaluations

    def _is_training_loop(self, node: cst.For) -> bool:
        site = self.facts.origins.site(node)
        batches = self.facts.batch_names_by_function.get(self.function, set())
        return site is not None and any(
            loop.site.line == site.line and set(loop.targets) & batches for loop in self.facts.train_loops
        )

    def visit_Call(self, node: cst.Call) -> None:
        # ``train_losses.append(loss)``, averaged after the loop.
        # ``meter.update(loss.item(), n)``: an AverageMeter's running sum, the same thing.
        if (
            self._in_training
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in ("append", "update")
            and any(names_in(arg.value) & self._losses for arg in node.args)
        ):
            self.report(node, RankLocalAverage.code, MESSAGE, False)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if not self._in_training or not isinstance(node.operator, cst.AddAssign):
            return
        if names_in(node.value) & self._losses:
            self.report(node, RankLocalAverage.code, MESSAGE, False)
        elif _counts_matches(node.value):
            self.report(node, RankLocalAverage.code, ACCURACY_MESSAGE, False)


def _counts_matches(value: cst.BaseExpression) -> bool:
    """``(pred == target).sum().item()``, ``pred.eq(target).sum()``, ``torch.sum(preds == y)``:
    a count of predictions equal to their targets."""
    for node in nodes_in(value):
        if isinstance(node, cst.Comparison) and any(isinstance(c.operator, cst.Equal) for c in node.comparisons):
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "eq":
            return True
    return False
