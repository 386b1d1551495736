"""Batches of per-sample objects: lists of per-image dicts (detection-style batches, a
``collate_fn`` returning ``tuple(zip(*batch))``) and values that may be lists of strings (ids,
file names). A tensor gather cannot join them with tensors: each is gathered on its own, as
objects where they are known to be lists."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import iterated_name
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.syntax import dotted, nodes_in, root_name
from accel_convert.codemods.engine.torch_names import LIST_GROWING_METHODS
from accel_convert.codemods.model.locality import adds_up
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
