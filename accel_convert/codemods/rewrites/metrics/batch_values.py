"""What the loop makes from its batch around the forward: names unpacked from the batch (tensors
gathered with the outputs), Python values made from it (row counts and lists computed again after
the gather, or values no gather can join), sizes read before the forward and summed after it,
outputs stored at positions made from the batch index, and targets that are positions within the
batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.syntax import (
    dotted,
    expression_code,
    is_host_number,
    names_in,
    nodes_in,
    python_value,
    root_name,
    rows_counted,
    target_names,
)
from accel_convert.codemods.engine.walk import variables_read
from accel_convert.codemods.model.locality import adds_up, rows_added, run_once_per_batch
from accel_convert.codemods.rewrites.metrics.nodes import contains
from accel_convert.records import record


def stored_by_batch_index(statements: Sequence[cst.CSTNode], index: str | None, gathered: set[str]) -> str | None:
    """The target of ``preds[i * batch_size:(i + 1) * batch_size] = logits...`` (a subscript
    computed from the loop's ``enumerate`` index ``i``, given a value read from what would be
    gathered) after the forward, as code; None when there is none."""
    if index is None:
        return None
    for statement in statements:
        for node in nodes_in(statement):
            if not isinstance(node, cst.Assign) or not names_in(node.value) & gathered:
                continue
            for target in node.targets:
                subscript = target.target
                if isinstance(subscript, cst.Subscript) and any(
                    index in names_in(element.slice) for element in subscript.slice
                ):
                    return expression_code(subscript)
    return None


def batch_positions(statements: Sequence[cst.CSTNode], batch: set[str], facts: ScriptFacts) -> str | None:
    """``torch.arange(len(img))`` (or ``arange(logits.size(0))``) after the forward: the targets are
    positions within this batch; the call's code, or None."""
    for statement in statements:
        for node in nodes_in(statement):
            if (
                isinstance(node, cst.Call)
                and facts.qualified_name(node.func) == "torch.arange"
                and any(names_in(arg.value) & batch for arg in node.args if arg.keyword is None)
            ):
                return expression_code(node)
    return None


def indexed_by_outputs(statements: Sequence[cst.CSTNode], outputs: set[str], gathered: set[str]) -> str | None:
    """``y[sort_ind]`` after the forward, ``sort_ind`` one of its outputs and ``y`` a value to
    gather: the output holds positions in this process's batch (the order a model sorted its
    batch by length in); the subscript's code, or None."""
    for statement in statements:
        for node in nodes_in(statement):
            if not isinstance(node, cst.Subscript) or root_name(node.value) not in gathered:
                continue
            for element in node.slice:
                index = element.slice
                if isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and index.value.value in outputs:
                    return expression_code(node)
    return None


@record(eq=False, repr=False)
class Unpacked:
    """What the loop binds from the batch before the forward (see :func:`unpacked_from`)."""

    #: Per-sample tensors (``target = batch[1]``, ``x, y = batch``): gathered with the outputs.
    tensors: list[str] = field(default_factory=list)
    #: Python values made from batch tensors, a row count (``b_size = real.size(0)``) or a list
    #: (``decode_lengths = (caplens - 1).tolist()``) → (the value, the batch tensors it reads): no
    #: tensor to gather, so computed again from the gathered tensors after the gather.
    recomputed: dict[str, tuple[cst.BaseExpression, set[str]]] = field(default_factory=dict)
    #: Python values made from the batch that cannot be computed again (bound by unpacking):
    #: one entry per sample of this process, which no tensor gather can join.
    python_values: list[str] = field(default_factory=list)
    #: ``total += labels.size(0)`` before the forward → the tensor counted: moved after the
    #: gather, where it counts every process's rows.
    summed_counts: dict[int, tuple[cst.SimpleStatementLine, str]] = field(default_factory=dict)


def unpacked_from(
    statements: Sequence[cst.BaseStatement], forward: cst.CSTNode, batch: tuple[str, ...], builtin: BuiltinOf
) -> Unpacked:
    """Names assigned, before the forward, from expressions made from the batch names
    (``target = batch[1]``, ``x, y = batch``, ``labels = batch["labels"].to(device)``), by kind:
    tensors, row counts, other Python values. ``builtin``: what a name denotes where the
    statements stand (``len`` the builtin, not a parameter of that name)."""
    found = Unpacked()
    known = set(batch)
    for statement in _lines_before(statements, forward):
        counted = _rows_summed(statement, known, builtin) or _recomputed_summed(statement, found)
        # Only a line of the loop's own body is moved after the gather (not one inside an ``if``).
        if counted is not None and any(statement is own for own in statements):
            found.summed_counts[id(statement)] = (statement, counted)
        for small in statement.body:
            pairs = _assigned_pairs(small)
            for bound, source in pairs:
                _note_bound(found, known, batch, (bound, source), builtin, alone=len(pairs) == 1)
    return found


def _lines_before(statements: Sequence[cst.BaseStatement], forward: cst.CSTNode) -> list[cst.SimpleStatementLine]:
    """The simple statements the batch runs before the forward, in order (:func:`run_once_per_batch`
    of the loop's statements above the one holding it): those of the ``if``/``elif``/``else``,
    ``with`` and ``try`` blocks among them too (``if task == "plain": target = label.clone()`` /
    ``elif ...: target = 1 - label``: a target chosen per batch)."""
    head = []
    for statement in statements:
        if statement is forward or contains(statement, lambda node: node is forward):
            break
        head.append(statement)
    return run_once_per_batch(head)


def _rows_summed(statement: cst.SimpleStatementLine, known: set[str], builtin: BuiltinOf) -> str | None:
    """The batch tensor ``total += labels.size(0)`` counts the rows of; None for any other line."""
    first, counted = adds_up(statement.body[0]), rows_added(statement.body[0], builtin)
    if len(statement.body) == 1 and first is not None and _running_total(first.target) and counted in known:
        return counted
    return None


def _recomputed_summed(statement: cst.SimpleStatementLine, found: Unpacked) -> str | None:
    """A batch tensor behind ``total += b_size`` (``total = total + b_size``), ``b_size`` a value
    computed again from the batch after the gather (``b_size = x.size(0)`` above it:
    deep-text-recognition's ``length_of_data = length_of_data + batch_size``); None for any other
    line."""
    summed = adds_up(statement.body[0]) if len(statement.body) == 1 else None
    if summed is None or not _running_total(summed.target):
        return None
    reads = variables_read(summed.value)
    if not reads or not reads <= set(found.recomputed):
        return None
    tensors = sorted(tensor for name in reads for tensor in found.recomputed[name][1])
    return tensors[0] if tensors else None


def _running_total(target: cst.BaseExpression) -> bool:
    """A name, an attribute or a dictionary entry under a constant key (``total``, ``self.total``,
    ``results["batch_sizes"]``, SRGAN's ``valing_results['batch_sizes']``): one total across
    batches, not an entry the batch picks."""
    if isinstance(target, cst.Subscript):
        index = target.slice[0].slice if len(target.slice) == 1 else None
        constant = isinstance(index, cst.Index) and isinstance(index.value, (cst.SimpleString, cst.Integer))
        return constant and dotted(target.value) is not None
    return dotted(target) is not None


def _assigned_pairs(small: cst.BaseSmallStatement) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of an assignment to one target, element by element for ``a, b = x, y``."""
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return []
    target, value = small.targets[0].target, small.value
    if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements):
        return [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
    return [(target, value)]


def _note_bound(
    found: Unpacked,
    known: set[str],
    batch: tuple[str, ...],
    assigned: tuple[cst.BaseExpression, cst.BaseExpression],
    builtin: BuiltinOf,
    alone: bool,
) -> None:
    """Files what ``bound = source`` (``assigned``) makes from the batch under its kind in
    ``found``; names bound to tensors join ``known``."""
    bound, source = assigned
    names = [name for name in target_names(bound, plain=True) if name not in batch]
    counted = rows_counted(source, builtin)
    reads = variables_read(source)
    if counted in known or (python_value(source, builtin) and reads & (known | set(found.recomputed))):
        tensors = {counted} if counted in known else reads & known
        for name in reads & set(found.recomputed):  # ``n = len(lengths)`` of a recomputed list
            tensors |= found.recomputed[name][1]
        if isinstance(bound, cst.Name) and alone:
            found.recomputed[bound.value] = (source, tensors)
        else:
            found.python_values.extend(names)
    elif is_host_number(source, builtin):
        # A size (``n, _ = x.shape``): a Python number, not a row to gather; a sum of it after
        # the gather is reported (sizes_summed_after).
        return
    elif root_name(source) in known:
        found.tensors.extend(names)
        known.update(names)


def sizes_summed_after(
    statements: Sequence[cst.BaseStatement], forward: cst.CSTNode, batch: set[str], builtin: BuiltinOf
) -> list[tuple[str, str]]:
    """``(n, total)`` for ``n, _ = x.shape`` (``n = len(x)``, ``n = x.size(0)``) of a batch name
    bound before the forward and added to ``total`` after it."""
    sizes: set[str] = set()
    found: list[tuple[str, str]] = []
    before = True
    for statement in statements:
        if statement is forward or contains(statement, lambda node: node is forward):
            before = False
        for node in nodes_in(statement):
            if (
                before
                and isinstance(node, cst.Assign)
                and is_host_number(node.value, builtin)
                and names_in(node.value) & batch
            ):
                sizes.update(name for target in node.targets for name in target_names(target.target, plain=True))
            elif not before and (summed := adds_up(node)) is not None:
                read = sorted(names_in(summed.value) & sizes)
                if read:
                    found.append((read[0], expression_code(summed.target)))
    return found
