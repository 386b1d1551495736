"""ACC919 rank-local-average: a training loss, accuracy or printed sample count summed over this process's batches only.

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

A count of the samples trained on (``seen += x.size(0)``, ``len(x)``, ``x.shape[0]``) that the
script prints or logs, as the epoch's samples or a throughput (samples per second), is this process's share (with the
padding of its last batch) for the same reason; it is reported where the loop sums no loss or
accuracy already reported (those reports cover the counts that go with them).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.engine.syntax import dotted, method_call, names_in, nodes_in, root_name
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.model.locality import adds_up, collected_into, rows_added
from accel_convert.codemods.model.loops import sharded_training_loops

MESSAGE = "a loss summed over this process's batches only: reduce it across processes before reporting it"
SAMPLES_MESSAGE = (
    "samples counted over this process's batches only: a sample count or throughput printed from it is "
    "one process's (with the padding of its last batch); reduce it across processes, or say it is per process"
)
ACCURACY_MESSAGE = (
    "training predictions counted over this process's batches only: the accuracy printed from it is "
    "one process's (reduce the counts across processes, or say it is the main process's)"
)


class RankLocalAverage(WalkingCheck):
    code = "ACC919"
    providers = (sharded_training_loops,)
    name = "rank-local-average"
    fixes = {
        "ACC919": (
            'Reduce the sum before printing it: ``total = accelerator.reduce(torch.tensor(running, device=accelerator.device), "sum")`` and the batch or sample count the same way, then print ``total.item() / count.item()`` from the main process; or label the printed value as the main process\'s. The report stays on the line that adds up (it marks the sum, whatever follows): once the printed value is reduced, switch the code off with ``--ignore ACC919``.'
        ),
    }
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
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    print(f"last batch loss {loss.item():.4f}")


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.train_loops)

    def lines(self, facts: ScriptFacts) -> set[int]:
        # Whole training loops: a sum may read the loss through another name
        # (``loss_value = loss.item()`` ... ``running += loss_value * n``).
        lines = {line for loop in facts.train_loops for line in range(loop.site.line, loop.site.end_line + 1)}
        return facts.lines_mentioning(facts.loss_names) | lines

    # ``total += loss.item()`` (or ``+= loss``, ``losses.append(loss)``, ``meter.update(loss.item(),
    # n)``, or a sum of a name bound from the loss) inside a loop over a prepared training loader.
    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        self._module = module
        self._training_loops = 0
        self._evaluations = 0
        #: The losses, and names a training loop binds from them (``loss_value = loss.item()``).
        self._losses = set(facts.loss_names)
        #: Per training loop being walked: the sample counts found in it, and whether a loss or
        #: accuracy sum was reported in it.
        self._sample_counts: list[list[cst.AugAssign]] = []
        self._reported_sums: list[bool] = []
        self._printed_cache: set[str] | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._in_training and names_in(node.value) & self._losses:
            self._losses.update(name for target in node.targets for name in names_in(target.target))

    def visit_For(self, node: cst.For) -> None:
        if self._is_training_loop(node):
            self._training_loops += 1
            self._sample_counts.append([])
            self._reported_sums.append(False)
        elif self.walk.evaluates(node):
            # A validation run every few steps, nested in the training loop: what it counts is
            # gathered by the metrics rule, not this process's training.
            self._evaluations += 1

    def leave_For(self, node: cst.For) -> None:
        if self._is_training_loop(node):
            self._training_loops -= 1
            counts, reported = self._sample_counts.pop(), self._reported_sums.pop()
            if not reported:
                for count in counts:
                    self.walk.report(count, self.code, SAMPLES_MESSAGE, False)
            elif self._reported_sums:
                self._reported_sums[-1] = True
        elif self.walk.evaluates(node):
            self._evaluations -= 1

    @property
    def _printed(self) -> set[str]:
        """Names read in what the script prints or logs (a sample count nobody prints is no
        report); read from the whole file, only once a loop counts samples."""
        if self._printed_cache is None:
            self._printed_cache = _printed_names(self._module)
        return self._printed_cache

    @property
    def _in_training(self) -> bool:
        return self._training_loops > 0 and not self._evaluations

    def _report_sum(self, node: cst.CSTNode, message: str) -> None:
        self.walk.report(node, self.code, message, False)
        if self._reported_sums:
            self._reported_sums[-1] = True

    def _is_training_loop(self, node: cst.For) -> bool:
        # Which loops train on a sharded loader is the loops owner's answer.
        site = self.walk.origins.site(node)
        return site is not None and site.line in self.walk.facts.of(sharded_training_loops)

    def visit_Call(self, node: cst.Call) -> None:
        # ``train_losses.append(loss)``, averaged after the loop.
        # ``meter.update(loss.item(), n)``: an AverageMeter's running sum, the same thing.
        # ``losses.extend(loss.tolist())`` too: the locality owner says what collects a value.
        if self._in_training and collected_into(node, self._losses) is not None:
            self._report_sum(node, MESSAGE)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if not self._in_training or adds_up(node) is None:
            return
        if names_in(node.value) & self._losses:
            self._report_sum(node, MESSAGE)
        elif _counts_matches(node.value):
            self._report_sum(node, ACCURACY_MESSAGE)
        elif (
            self._sample_counts
            and _counts_samples(
                node, self.walk.facts.batch_names_by_function.get(self.walk.function, set()), self.walk.builtin
            )
            and root_name(node.target) in self._printed
        ):
            self._sample_counts[-1].append(node)


def _counts_matches(value: cst.BaseExpression) -> bool:
    """``(pred == target).sum().item()``, ``pred.eq(target).sum()``, ``torch.sum(preds == y)``:
    a count of predictions equal to their targets."""
    for node in nodes_in(value):
        if isinstance(node, cst.Comparison) and any(isinstance(c.operator, cst.Equal) for c in node.comparisons):
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "eq":
            return True
    return False


def _counts_samples(node: cst.AugAssign, batch: AbstractSet[str], builtin: BuiltinOf) -> bool:
    """``seen += x.size(0)`` (the locality owner's :func:`rows_added`) or ``+= y.numel()`` of a
    batch name: the samples of one batch added up."""
    if rows_added(node, builtin) in batch:
        return True
    value = node.value
    return (
        isinstance(value, cst.Call)
        and method_call(value, "numel")
        and isinstance(value.func, cst.Attribute)
        and isinstance(value.func.value, cst.Name)
        and value.func.value.value in batch
    )


#: Calls that show a value to a person: ``print``, ``accelerator.print``, a logger's methods,
#: a tracker's ``log``/``add_scalar``.
_SHOWING_CALLS = frozenset({"print", "info", "debug", "warning", "log", "write", "add_scalar", "set_postfix"})


def _printed_names(module: cst.Module) -> set[str]:
    """Names read in the arguments of calls that print or log."""
    printed: set[str] = set()
    for node in module_nodes(module):
        if isinstance(node, cst.Call) and (dotted(node.func) or "").rpartition(".")[2] in _SHOWING_CALLS:
            for arg in node.args:
                printed |= names_in(arg.value)
    return printed
