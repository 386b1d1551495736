"""Means and sums over batches next to a gathered evaluation loop: a value divided by a count of
batches (``len(loader)``, an ``enumerate`` index, a ``steps += 1`` counter, a list appended once
per batch) and batch-mean losses added up per batch. The gather changes both (a step holds one
batch of every process), and neither can be rebuilt from gathered batches: they are reported,
never rewritten."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.positions import STATEMENT_TYPES
from accel_convert.codemods.engine.syntax import (
    calls_in,
    dotted,
    expression_code,
    nodes_in,
)
from accel_convert.codemods.engine.torch_names import (
    AVERAGING_FUNCTIONS,
    CONCATENATIONS,
)
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import variables_read, walk
from accel_convert.codemods.model.locality import adds_up, locality_of, per_batch_values
from accel_convert.codemods.rewrites.metrics.codes import MEAN_OF_BATCHES, SUMMED_BATCH_MEANS
from accel_convert.records import record


def report_means_over_batches(rule: RuleTransformer, scope: Sequence[cst.CSTNode], loops: list[GatheredLoop]) -> None:
    """A mean over batches where evaluation loops were gathered: a value divided by a count of
    batches (``len(test_loader)``, ``num_val_batches = len(loader)``, ``batch_idx + 1``, a
    ``steps += 1`` counter, ``len(losses)`` of a list appended once per batch) or ``np.mean``
    of such a list. The original weighs each of its batches equally; after the gather each
    per-batch value averages one batch of every process (the last ones ragged or missing),
    so the mean weighs the samples otherwise and prints another number. The one-process
    mean over batches cannot be rebuilt from gathered batches, so it is reported, not
    rewritten: sum per-sample values and divide by the number of samples."""
    if not loops:
        return
    finder = _MeansOverBatches(_batch_counts(loops, scope, rule.facts, rule.builtin), rule.facts, rule.builtin)
    for node in scope:
        walk(node, finder)
    for node, anchor, how in finder.found:
        rule.findings.add(
            node,
            MEAN_OF_BATCHES,
            f"a mean over batches ({how}): the original weighs each of its batches equally; after the "
            "gather a per-batch value averages one batch of every process (the last ones ragged or "
            "missing), one not gathered covers this process's batches only, so the mean differs from "
            'the one-process number; sum per-sample values (reduction="sum", counts) and divide by the '
            "number of samples",
            False,
            anchor,
        )


def report_summed_batch_means(rule: RuleTransformer, loop: cst.For) -> None:
    """``test_loss += criterion(outputs, targets).item()`` with a batch-mean criterion: after the
    gather each term averages the batches of every process, so the sum has N times fewer
    terms and the reported loss shrinks N times. Reported: sum per-sample losses instead. The
    loss may be named first (``loss = criterion(outputs, targets)``, then ``+= loss.item()``)."""
    facts, function = rule.facts, rule.function
    # The locality owner says which values are this process's batch means (the function's own
    # criteria, and the module's it reads as globals).
    found = locality_of(facts)
    losses = found.per_batch_means(loop.body, function, facts)
    for node in nodes_in(loop.body):
        summed = adds_up(node)
        if summed is None or _multiplied(summed.value):
            continue  # ``loss.item() * targets.size(0)``: weighed by the (gathered) batch size, a sum per sample
        if variables_read(summed.value) & losses or any(
            found.averages_batch(call, function, facts) for call in calls_in(summed.value)
        ):
            rule.report(
                node,
                SUMMED_BATCH_MEANS,
                "a batch-mean loss added up per batch: after the gather each term covers one batch of "
                'every process, so the sum shrinks with the process count; use reduction="sum"',
                False,
            )


@record(frozen=True, eq=False, repr=False)
class GatheredLoop:
    """An evaluation loop the rule gathered in: its loader and the original loop."""

    loader: str
    loop: cst.For


@record(eq=False, repr=False)
class _BatchCounts:
    """What counts the batches of gathered evaluation loops in one function (or in the
    module-level code): the loaders (``len(loader)``), names holding a count of batches
    (``num_val_batches = len(loader)``, an ``enumerate`` index, a ``steps += 1`` counter) and
    lists appended once per batch (``losses.append(loss.item())``)."""

    loaders: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    per_batch_lists: set[str] = field(default_factory=set)


def _batch_counts(
    loops: list[GatheredLoop], scope: Sequence[cst.CSTNode], facts: ScriptFacts, builtin: BuiltinOf
) -> _BatchCounts:
    counts = _BatchCounts(loaders={loop.loader for loop in loops})
    for gathered in loops:
        # The locality owner says what a loop counts and keeps once per batch.
        values = per_batch_values(gathered.loop, builtin)
        counts.names |= values.counters
        counts.per_batch_lists |= values.lists
    for node in scope:
        for assign in nodes_in(node):
            if (
                type(assign) is cst.Assign
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
            ):
                _note_assigned(counts, (assign.targets[0].target.value, assign.value), facts, builtin)
    return counts


def _note_assigned(
    counts: _BatchCounts, assigned: tuple[str, cst.BaseExpression], facts: ScriptFacts, builtin: BuiltinOf
) -> None:
    """What ``target = value`` (``assigned``) in the scope of the loops changes in ``counts``."""
    target, value = assigned
    # ``num_val_batches = len(dataloader)``: an alias of the count.
    if any(_is_len_of(call, counts.loaders, builtin) for call in calls_in(value)):
        counts.names.add(target)
    # ``preds = np.concatenate(preds)``: the batches' arrays joined, one entry per sample.
    if (
        isinstance(value, cst.Call)
        and value.args
        and dotted(value.args[0].value) == target
        and facts.qualified_name(value.func) in CONCATENATIONS
    ):
        counts.per_batch_lists.discard(target)


def _is_len_of(call: cst.Call, names: set[str], builtin: BuiltinOf) -> bool:
    """``len(x)`` of one of ``names``, the builtin ``len`` (not a parameter of that name)."""
    return builtin(call.func) == "len" and len(call.args) == 1 and dotted(call.args[0].value) in names


#: What the batch-count survey checks (divisions, ``/=``, calls).
_COUNT_CHECKED = frozenset({cst.BinaryOperation, cst.AugAssign, cst.Call})


class _MeansOverBatches(cst.CSTVisitor):
    """Divisions by a count of batches and averages of per-batch lists, with the statement
    holding each (where a report points). Local: it reads only the function (or module-level
    code) whose evaluation loops this rule just gathered."""

    def __init__(self, counts: _BatchCounts, facts: ScriptFacts, builtin: BuiltinOf) -> None:
        super().__init__()
        self.counts = counts
        self.facts = facts
        #: What a name denotes in the function read (``len`` the builtin).
        self.builtin = builtin
        self.found: list[tuple[cst.CSTNode, cst.CSTNode | None, str]] = []
        self._statements: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind in STATEMENT_TYPES:
            self._statements.append(node)
        if kind not in _COUNT_CHECKED:
            return True  # most nodes: no failed isinstance checks against libcst's ABCs
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
            self._check_denominator(node, node.right)
        elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign):
            self._check_denominator(node, node.value)
        elif isinstance(node, cst.Call):
            averaged = self._averaged_list(node)
            if averaged is not None:
                self.found.append(
                    (node, self._anchor(), f"{expression_code(node.func)} of {averaged}, one value per batch")
                )
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self._statements and self._statements[-1] is original_node:
            self._statements.pop()

    def _anchor(self) -> cst.CSTNode | None:
        return self._statements[-1] if self._statements else None

    def _check_denominator(self, node: cst.CSTNode, denominator: cst.BaseExpression) -> None:
        counts = self.counts
        lengths = counts.loaders | counts.per_batch_lists
        if (
            any(_is_len_of(call, lengths, self.builtin) for call in calls_in(denominator))
            or variables_read(denominator) & counts.names
        ):
            self.found.append((node, self._anchor(), f"divided by {expression_code(denominator)}, a count of batches"))

    def _averaged_list(self, call: cst.Call) -> str | None:
        """The per-batch list ``np.mean(losses)``, ``torch.tensor(losses).mean()`` averages."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "mean" and not call.args:
            inner = func.value
            if (
                isinstance(inner, cst.Call)
                and inner.args
                and dotted(inner.args[0].value) in self.counts.per_batch_lists
            ):
                return dotted(inner.args[0].value)
            return None
        if (self.facts.qualified_name(func) or "") not in AVERAGING_FUNCTIONS or not call.args:
            return None
        argument = call.args[0].value
        if isinstance(argument, cst.Call) and argument.args:  # np.mean(np.array(losses))
            argument = argument.args[0].value
        name = dotted(argument)
        return name if name in self.counts.per_batch_lists else None


def _multiplied(value: cst.BaseExpression) -> bool:
    return any(
        isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) for node in nodes_in(value)
    )
