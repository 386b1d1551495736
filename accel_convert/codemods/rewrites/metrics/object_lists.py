"""Batches of per-sample objects: lists of per-image dicts (detection-style batches, a
``collate_fn`` returning ``tuple(zip(*batch))``) and values that may be lists of strings (ids,
file names). A tensor gather cannot join them with tensors: each is gathered on its own, as
objects where they are known to be lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import enumerate_index, iterated_name
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.syntax import bound_by, dotted, names_in, nodes_in, root_name
from accel_convert.codemods.engine.torch_names import LIST_GROWING_METHODS
from accel_convert.codemods.engine.walk import variables_read
from accel_convert.codemods.model.locality import adds_up, grown_in, lists_grown_in, run_once_per_batch
from accel_convert.codemods.rewrites.metrics.plan import GatherPlan

#: Calls whose arguments are taken as containers of items, whatever the items are (with the
#: methods growing a list): a batch value read only through them may be a list of strings (ids,
#: file names, captions).
_CONTAINER_FUNCTIONS = frozenset({"zip", "list", "enumerate", "tuple"})


def per_sample_lists(
    loop: cst.For,
    statements: Sequence[cst.BaseStatement],
    batch: tuple[str, ...],
    zipped_loaders: set[str],
    builtin: BuiltinOf,
) -> set[str]:
    """Names holding a list (or tuple) of per-sample objects, not a batch tensor: the batch
    of a loader whose ``collate_fn`` returns ``tuple(zip(*batch))`` (torchvision's detection
    references, ``zipped_loaders``), and names the loop rebuilds item by item from themselves
    (``outputs = [{k: v.to("cpu") for k, v in t.items()} for t in outputs]``)."""
    found: set[str] = set()
    if iterated_name(loop.iter, through_any_call=True) in zipped_loaders:
        found.update(batch)
    for node in nodes_in(cst.IndentedBlock(body=list(statements))):
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
            continue
        name = dotted(node.targets[0].target)
        value = node.value
        if isinstance(value, cst.Call) and builtin(value.func) in ("list", "tuple") and value.args:
            value = value.args[0].value
        if (
            name is not None
            and isinstance(value, (cst.ListComp, cst.GeneratorExp))
            and dotted(value.for_in.iter) == name
        ):
            found.add(name)
    return found


def maybe_objects(loop: cst.For, batch: tuple[str, ...], plan: GatherPlan, builtin: BuiltinOf) -> set[str]:
    """Batch values the loop reads only as containers (``ids`` in ``all_ids.extend(ids)``,
    ``zip(batch["id"], preds)``, ``names += paths``), never as a tensor (no method or attribute,
    no operator, no other call): the default collate makes a list of a batch of strings, and
    gathering such a list in one tuple with tensors breaks ``gather_for_metrics`` (it falls back
    to ``gather_object`` for the whole tuple, a flat list of every rank's values). Gathered on its
    own, the same call gathers a tensor as a tensor and a list as a list, in the tensors' order.
    The names (``plan.names``) the values are gathered into."""
    if len(plan.gathered) < 2:
        return set()
    candidates = [
        (expression, name)
        for expression, name in zip(plan.gathered, plan.names)
        if root_name(expression) in batch and isinstance(expression, (cst.Name, cst.Subscript))
    ]
    if not candidates:
        return set()
    nodes = list(nodes_in(loop.body))
    container_uses = {id(argument) for node in nodes for argument in _taken_as_containers(node, builtin)}
    found: set[str] = set()
    for expression, name in candidates:
        uses = [node for node in nodes if type(node) is type(expression) and node.deep_equals(expression)]
        if uses and all(id(node) in container_uses for node in uses):
            found.add(name)
    return found


def _taken_as_containers(node: cst.CSTNode, builtin: BuiltinOf) -> list[cst.BaseExpression]:
    """The values ``node`` takes as containers of items: the arguments of ``x.append(...)``,
    ``zip(...)``..., what ``+=`` adds, what a ``for`` runs over."""
    if isinstance(node, cst.Call):
        func = node.func
        if (isinstance(func, cst.Attribute) and func.attr.value in LIST_GROWING_METHODS) or (
            builtin(func) in _CONTAINER_FUNCTIONS
        ):
            return [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        return []
    if (summed := adds_up(node)) is not None:
        return [summed.value]
    if isinstance(node, cst.For):
        return [node.iter]
    return []


def gather_objects_statement(name: str, facts: ScriptFacts) -> cst.SimpleStatementLine:
    """``outputs = accelerator.gather_for_metrics(outputs, use_gather_object=True)``: every
    process's list of per-sample objects joined into one list, the padding dropped."""
    call = accelerator_call(facts, "gather_for_metrics", cst.Name(name))
    keyword = cst.Arg(
        value=cst.Name("True"),
        keyword=cst.Name("use_gather_object"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    call = call.with_changes(args=[*call.args, keyword])
    return cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=call)])


def lists_gathered_after(
    loop: cst.For, scope: cst.CSTNode, enclosing: Sequence[cst.CSTNode], builtin: BuiltinOf
) -> list[str]:
    """The lists an evaluation loop keeps per sample, to gather as Python objects after the loop
    (where its outputs cannot be gathered after the forward: a Python value the forward makes, an
    order it sorted the batch in), in the order the loop first grows them; empty where any of them
    cannot be followed. Each one is:

    * grown in the loop (``references.append(caption)`` in a loop over the batch's images,
      ``hypotheses.extend(preds)``) and bound empty (``[]``, ``list()``) outside it in ``scope``,
      within every loop of ``enclosing`` (the statements between ``scope`` and ``loop``) that holds
      ``loop``: each run of the evaluation starts it afresh;
    * read in the loop only where it grows, or in an ``assert``;
    * grown with values made from the batch, the model's outputs and names the loop does not
      change (through the loop's assignments and lists of its own, as ``temp_preds``): not the
      batch index, a running sum, another kept list, nor a per-batch ``.item()`` (a mean over the
      batch).

    A loop that stops early (``break``, ``return``) keeps nothing: the processes would stop at
    different samples; nor one growing a list held elsewhere (``self.history.append(...)``). Each process's lists then hold its real samples once (the loop iterates
    ``accelerator.without_padding(loader)``), in the order of its batches; gathered, the lists of
    every process are joined in process order, so the i-th items of two lists stay a pair."""
    if not isinstance(loop.body, cst.IndentedBlock):
        return []
    body = list(nodes_in(loop.body))
    if any(isinstance(node, (cst.Break, cst.Return, cst.Yield)) or _grows_other_list(node) for node in body):
        return []
    grown = lists_grown_in(loop.body)
    bound_inside = {name for node in nodes_in(loop) for name in bound_by(node)}
    kept = [name for name in grown if name not in bound_inside]
    if not kept or not all(_started_empty(name, scope, loop, enclosing, builtin) for name in kept):
        return []
    if _read_elsewhere(body, kept, grown) or not _followed(loop, kept, grown, builtin):
        return []
    return kept


def _read_elsewhere(body: Sequence[cst.CSTNode], kept: Sequence[str], grown: dict[str, list[cst.Call]]) -> bool:
    """Whether the loop (its nodes, ``body``) reads one of the ``kept`` lists other than where it
    grows it or in an ``assert``."""
    allowed = {id(cast(cst.Attribute, call.func).value) for name in kept for call in grown[name]}
    allowed |= {id(inner) for node in body if isinstance(node, cst.Assert) for inner in nodes_in(node)}
    return any(isinstance(node, cst.Name) and node.value in kept and id(node) not in allowed for node in body)


def _followed(loop: cst.For, kept: Sequence[str], grown: dict[str, list[cst.Call]], builtin: BuiltinOf) -> bool:
    """Whether the values the loop grows the ``kept`` lists with read neither the batch index, a
    running sum nor a kept list, and none is a per-batch ``.item()``."""
    running = {name for summed in grown_in(loop.body) for name in names_in(summed.target)}
    index = enumerate_index(loop, builtin)
    unfollowed = running | set(kept) | ({index} if index is not None else set())
    values = [call.args[0].value for name in kept for call in grown[name]]
    return not (unfollowed & _read_through(values, loop.body, grown) or _batch_means_kept(loop, kept))


def _grows_other_list(node: cst.CSTNode) -> bool:
    """``self.history.append(...)``, ``logs["preds"].extend(...)``: a list the loop grows that is
    not a name of its scope, whose reads the rule cannot follow."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in LIST_GROWING_METHODS
        and not isinstance(node.func.value, cst.Name)
    )


def _started_empty(
    name: str, scope: cst.CSTNode, loop: cst.For, enclosing: Sequence[cst.CSTNode], builtin: BuiltinOf
) -> bool:
    """Whether ``scope`` binds ``name`` to an empty list outside ``loop``, inside every loop of
    ``enclosing`` that holds ``loop``."""
    starts = [node for node in nodes_in(scope) if isinstance(node, cst.Assign) and _binds_empty(node, name, builtin)]
    inside_loop = {id(node) for node in nodes_in(loop)}
    starts = [start for start in starts if id(start) not in inside_loop]
    outer_loops = [node for node in enclosing if isinstance(node, (cst.For, cst.While)) and node is not loop]
    return bool(starts) and all(
        any(id(start) in {id(node) for node in nodes_in(outer.body)} for start in starts) for outer in outer_loops
    )


def _binds_empty(node: cst.Assign, name: str, builtin: BuiltinOf) -> bool:
    """Whether ``node`` binds ``name`` to an empty list: ``name = []``, ``name = list()``, ``a,
    name = [], []``."""
    for target in node.targets:
        if isinstance(target.target, cst.Name) and target.target.value == name:
            return _empty_list(node.value, builtin)
        if isinstance(target.target, (cst.Tuple, cst.List)) and isinstance(node.value, (cst.Tuple, cst.List)):
            pairs = zip(target.target.elements, node.value.elements)
            if len(target.target.elements) == len(node.value.elements) and any(
                isinstance(element.value, cst.Name)
                and element.value.value == name
                and _empty_list(value.value, builtin)
                for element, value in pairs
            ):
                return True
    return False


def _empty_list(value: cst.BaseExpression, builtin: BuiltinOf) -> bool:
    """``[]`` or ``list()`` (the builtin)."""
    if isinstance(value, cst.List):
        return not value.elements
    return isinstance(value, cst.Call) and builtin(value.func) == "list" and not value.args


def _read_through(
    values: Sequence[cst.BaseExpression], body: cst.BaseSuite, grown: dict[str, list[cst.Call]]
) -> set[str]:
    """The names ``values`` read, directly or through what ``body`` binds them to (its
    assignments, ``for`` targets, the lists it grows of its own)."""
    sources: dict[str, list[cst.CSTNode]] = {}
    for node in nodes_in(body):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            for name in bound_by(node):
                sources.setdefault(name, []).append(node.value)
        elif isinstance(node, cst.For):
            for name in bound_by(node):
                sources.setdefault(name, []).append(node.iter)
    for name, calls in grown.items():
        sources.setdefault(name, []).extend(call.args[0].value for call in calls)
    read: set[str] = set()
    pending: list[cst.CSTNode] = list(values)
    while pending:
        for name in variables_read(pending.pop()) - read:
            read.add(name)
            pending.extend(sources.get(name, ()))
    return read


def _batch_means_kept(loop: cst.For, kept: Sequence[str]) -> bool:
    """Whether the loop appends a ``.item()`` to a kept list once per batch (a batch's mean)."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    for line in run_once_per_batch(body):
        for node in nodes_in(line):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and isinstance(node.func.value, cst.Name)
                and node.func.value.value in kept
                and any(
                    isinstance(inner, cst.Call)
                    and isinstance(inner.func, cst.Attribute)
                    and inner.func.attr.value == "item"
                    for arg in node.args
                    for inner in nodes_in(arg.value)
                )
            ):
                return True
    return False


def gather_object_statement(name: str, accelerator: cst.BaseExpression) -> cst.SimpleStatementLine:
    """``name = accelerator.gather_object(name)``: every process's list in one, in process order."""
    call = cst.Call(func=cst.Attribute(accelerator, cst.Name("gather_object")), args=[cst.Arg(cst.Name(name))])
    return cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=call)])
