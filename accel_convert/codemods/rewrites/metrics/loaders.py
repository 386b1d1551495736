"""Loaders whose batches a gather cannot take as they come, found once per file with the
parameters they are passed to: over an ``IterableDataset`` of the file without ``__len__`` (the
padding of the last batches cannot be dropped), collated into per-sample lists
(``tuple(zip(*batch))``), or padded per batch to their own longest sample (gathered sequences of
different lengths)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.syntax import (
    argument_for,
    calls_in,
    dotted,
    nodes_in,
    parameter_filled,
    positional_parameter_names,
)
from accel_convert.codemods.engine.torch_names import (
    DATA_LOADERS,
    ITERABLE_DATASETS,
    PADDING_COLLATORS,
    SEQUENCE_PADDERS,
)
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.rewrites.metrics.plan import GatherPlan


def loaders_over_streams(module: cst.Module, facts: ScriptFacts) -> dict[str, str]:
    """Loaders (names, and parameters of the file's functions called with them) over an
    ``IterableDataset`` subclass of the file that has no ``__len__`` → that class's name.
    File-wide names, as the analysis's roles are: a parameter given such a loader at any call
    counts."""
    unsized = _unsized_streams(module, facts)
    if not unsized:
        return {}
    nodes = module_nodes(module)
    datasets = {name: dotted(call.func) or "" for name, call in _named_calls(nodes) if dotted(call.func) in unsized}
    loaders: dict[str, str] = {}
    for name, call in _named_calls(nodes):
        if facts.qualified_name(call.func) not in DATA_LOADERS:
            continue
        dataset = _dataset_argument(call)
        if isinstance(dataset, cst.Call) and dotted(dataset.func) in unsized:
            loaders[name] = dotted(dataset.func) or ""
        elif dotted(dataset) in datasets:
            loaders[name] = datasets[dotted(dataset) or ""]
    return _passed_to_parameters(module, loaders)


def _unsized_streams(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """The file's ``IterableDataset`` subclasses (directly or through a class of the file) that
    neither define ``__len__`` nor inherit one from a class of the file."""
    classes = {statement.name.value: statement for statement in module.body if isinstance(statement, cst.ClassDef)}
    streams: dict[str, bool] = {}  # class → it (or a base of the file) defines __len__
    grew = True
    while grew:
        grew = False
        for class_name, definition in classes.items():
            if class_name in streams:
                continue
            bases = [base.value for base in definition.bases]
            if any(facts.qualified_name(base) in ITERABLE_DATASETS for base in bases) or any(
                dotted(base) in streams for base in bases
            ):
                own = _defines_len(definition)
                streams[class_name] = own or any(streams.get(dotted(base) or "", False) for base in bases)
                grew = True
    return {name for name, sized in streams.items() if not sized}


def _defines_len(definition: cst.ClassDef) -> bool:
    if not isinstance(definition.body, cst.IndentedBlock):
        return False
    return any(isinstance(item, cst.FunctionDef) and item.name.value == "__len__" for item in definition.body.body)


def _named_calls(nodes: Iterable[cst.CSTNode]) -> Iterator[tuple[str, cst.Call]]:
    """``name = Call(...)`` (or ``self.name = ...``) among ``nodes``: the name and the call."""
    for node in nodes:
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            name = dotted(node.targets[0].target)
            if name is not None:
                yield name, node.value


def _dataset_argument(loader: cst.Call) -> cst.BaseExpression | None:
    """The dataset a ``DataLoader(...)`` call is given: ``dataset=``, or its first positional argument."""
    dataset = argument_for(loader, 0, "dataset")
    return None if dataset is None else dataset.value


def _passed_to_parameters(module: cst.Module, loaders: dict[str, str]) -> dict[str, str]:
    """``loaders`` with the parameters of the file's functions called with one of them
    (``evaluate(model, test_loader, device)``: the helper's ``loader`` is that loader)."""
    loaders = dict(loaders)
    functions = {node.name.value: node for node in module.body if isinstance(node, cst.FunctionDef)}
    calls = [call for call in module_nodes(module) if isinstance(call, cst.Call) and dotted(call.func) in functions]
    grew = bool(loaders)
    while grew:
        grew = False
        for call in calls:
            params = positional_parameter_names(functions[dotted(call.func) or ""])
            for index, arg in enumerate(call.args):
                stream = loaders.get(dotted(arg.value) or "")
                if stream is None or arg.star:
                    continue
                parameter = parameter_filled(arg, index, params)
                if parameter is not None and parameter not in loaders:
                    loaders[parameter] = stream
                    grew = True
    return loaders


def loaders_of_sample_lists(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Loaders built with a ``collate_fn`` that returns ``tuple(zip(*batch))`` (a function of
    the file or a lambda): each batch is a tuple of per-sample lists (images of different sizes,
    target dicts), and with the parameters they are passed to."""
    if "zip" not in facts.called:
        return set()  # no ``tuple(zip(*batch))`` anywhere

    @functools.cache
    def zipping() -> set[str]:
        """The file's functions returning ``tuple(zip(*batch))``: read once a loader names one."""
        return {
            node.name.value
            for node in module.body
            if isinstance(node, cst.FunctionDef)
            and any(
                isinstance(n, cst.Return)
                and n.value is not None
                and _zips_samples(n.value, facts.builtins_at((node.name.value,)))
                for n in nodes_in(node)
            )
        }

    def matches(collate: cst.BaseExpression) -> bool:
        if isinstance(collate, cst.Lambda):
            # Read as module code: the loader's own scope is not tracked by this walk.
            return _zips_samples(collate.body, facts.builtins_at())
        name = dotted(collate)
        return name is not None and name in zipping()

    return _loaders_collated_by(module, facts, matches)


def _loaders_collated_by(
    module: cst.Module, facts: ScriptFacts, matches: Callable[[cst.BaseExpression], bool]
) -> set[str]:
    """Names bound to a DataLoader whose ``collate_fn`` ``matches``, and the parameters they are
    passed to."""
    loaders: dict[str, str] = {}
    for node in module_nodes(module):
        if not (type(node) is cst.Assign and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
            continue
        collate = next((a.value for a in node.value.args if a.keyword and a.keyword.value == "collate_fn"), None)
        if collate is None or not matches(collate):
            continue
        name = dotted(node.targets[0].target)
        if name is not None and facts.qualified_name(node.value.func) in DATA_LOADERS:
            loaders[name] = ""
    return set(_passed_to_parameters(module, loaders)) if loaders else set()


def loaders_padded_per_batch(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Loaders whose ``collate_fn`` pads each batch to its own longest sample: a function of the
    file calling ``pad_sequence`` or taking ``max(len(...) ...)`` of the samples, or a
    transformers padding collator (``DataCollatorWithPadding(...)``, inline or by name); with the
    parameters they are passed to."""
    if not (facts.called & (SEQUENCE_PADDERS | PADDING_COLLATORS) or "max" in facts.called):
        return set()  # the analysis saw no call that pads: no walk of the file
    padding = {
        node.name.value
        for node in module.body
        if isinstance(node, cst.FunctionDef)
        and any(_pads_to_longest(call, facts, (node.name.value,)) for call in calls_in(node))
    }
    collators: set[str] = set()
    for node in module_nodes(module):
        if (
            type(node) is cst.Assign  # asked of every node of the file: the cheap test first
            and len(node.targets) == 1
            and isinstance(node.value, cst.Call)
            and facts.qualified_name(node.value.func) in PADDING_COLLATORS
        ):
            collators.add(dotted(node.targets[0].target) or "")
    if not padding and not collators:
        return set()
    return _loaders_collated_by(
        module,
        facts,
        lambda collate: (
            dotted(collate) in padding | collators
            or (isinstance(collate, cst.Call) and facts.qualified_name(collate.func) in PADDING_COLLATORS)
        ),
    )


#: Batch fields that hold one value per token (padded to the batch's longest sequence).
TOKEN_FIELDS = frozenset({"input_ids", "attention_mask", "token_type_ids"})


def gathers_padded_sequences(loop: cst.For, plan: GatherPlan) -> bool:
    """Whether a gathered value has a per-token dimension: a token field of the batch
    (``batch["input_ids"]``), or labels compared with ``-100`` in the loop (token labels whose
    padding the loss ignores). A sentence classifier's logits and labels have none, however the
    batch is padded."""
    for expression, name in zip(plan.gathered, plan.names):
        key = name
        if isinstance(expression, cst.Subscript) and isinstance(expression.slice[0].slice, cst.Index):
            index = expression.slice[0].slice.value
            if isinstance(index, cst.SimpleString) and isinstance(index.evaluated_value, str):
                key = index.evaluated_value
        if key in TOKEN_FIELDS or "mask" in key:
            return True
    return any(
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
        and node.expression.value == "100"
        for node in nodes_in(loop.body)
    )


def _pads_to_longest(call: cst.Call, facts: ScriptFacts, scope: tuple[str, ...]) -> bool:
    """``pad_sequence(...)``, or ``max(len(f["input_ids"]) for f in features)``, in the function
    ``scope`` names."""
    if facts.qualified_name(call.func, scope) in SEQUENCE_PADDERS:
        return True
    return facts.is_builtin(call.func, "max", scope) and any(
        isinstance(inner, cst.Call) and facts.is_builtin(inner.func, "len", scope)
        for arg in call.args
        for inner in nodes_in(arg.value)
    )


def _zips_samples(value: cst.BaseExpression, builtin: BuiltinOf) -> bool:
    """``tuple(zip(*batch))`` or ``list(zip(*batch))``, the builtins (``builtin`` answers where
    ``value`` stands)."""
    if not (isinstance(value, cst.Call) and builtin(value.func) in ("tuple", "list") and len(value.args) == 1):
        return False
    inner = value.args[0].value
    return (
        isinstance(inner, cst.Call)
        and builtin(inner.func) == "zip"
        and len(inner.args) == 1
        and inner.args[0].star == "*"
    )
