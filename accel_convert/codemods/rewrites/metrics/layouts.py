"""The layouts of what an evaluation gathers, read from the file's models and collate functions:
sequence-first models and padding (``(sequence, batch, ...)`` tensors the gather would mix),
recurrent hidden states among a forward's outputs (``(layers, batch, hidden)``), and Python values
a forward returns (no tensor to gather). Read once per file, asked per loop."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import field, replace

import libcst as cst

from accel_convert.codemods.engine.devices import construction
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.syntax import (
    calls_in,
    class_methods,
    dotted,
    expression_code,
    forward_python_outputs,
    keyword_is,
    nodes_in,
    parameter_names,
    root_name,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    RECURRENT_LAYERS,
    SEQUENCE_FIRST_LAYERS,
    SEQUENCE_FIRST_PADDING,
)
from accel_convert.codemods.engine.walk import StatementFilter, module_nodes, walk
from accel_convert.codemods.rewrites.metrics.forward import is_model_call
from accel_convert.records import record


class _CallsOnLines(StatementFilter):
    """The calls of the statements holding one of ``lines`` (where the analysis saw the calls
    asked for). Local: only the rule reading sequence-first layers needs these nodes."""

    def __init__(self, lines: set[int], facts: ScriptFacts) -> None:
        super().__init__()
        self.lines = sorted(lines)
        self.origins = facts.origins
        self.calls: list[cst.Call] = []

    def enters_statement(self, node: cst.CSTNode) -> bool:
        return not skips_statement(node, self.lines, self.origins)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


@record(frozen=True, eq=False, repr=False)
class SequenceLayouts:
    """What says the evaluation tensors are ``(sequence, batch, ...)``: model names → why, and
    the reason the file's batches are padded sequence-first (None: they are not)."""

    models: dict[str, str] = field(default_factory=dict)
    padding: str | None = None
    #: Model names → the positions of their forward's outputs that are a recurrent layer's hidden
    #: state, ``(layers, batch, hidden)`` even in a batch-first model (-1: the one output).
    hidden_outputs: dict[str, frozenset[int]] = field(default_factory=dict)
    #: Model names → the positions of their forward's outputs that are Python values (a list of
    #: lengths made with ``.tolist()``), not tensors (-1: the one output).
    python_outputs: dict[str, frozenset[int]] = field(default_factory=dict)


def model_layouts(module: cst.Module, facts: ScriptFacts) -> SequenceLayouts:
    """Every layout the gather asks about, read once for the whole file."""
    return replace(
        sequence_first_layouts(module, facts),
        hidden_outputs=recurrent_hidden_outputs(module, facts),
        python_outputs=python_value_outputs(module, facts),
    )


def sequence_first_reason(loop: cst.For, layouts: SequenceLayouts, facts: ScriptFacts) -> str | None:
    """Why the loop's tensors may be sequence-first: it calls a sequence-first model, or the
    file pads its batches sequence-first. None: nothing says so."""
    if layouts.padding is not None:
        return layouts.padding
    for call in calls_in(loop.body):
        if is_model_call(call, facts):
            reason = layouts.models.get(dotted(call.func) or "")
            if reason is not None:
                return reason
    return None


def python_values_bound(forward: cst.SimpleStatementLine, layouts: SequenceLayouts) -> list[str]:
    """The names the forward binds to outputs its model's ``forward`` makes as Python values
    (see :func:`python_value_outputs`)."""
    return _bound_at(forward, layouts.python_outputs)


def hidden_states_read(
    forward: cst.SimpleStatementLine, gathered: Sequence[cst.BaseExpression], layouts: SequenceLayouts
) -> list[str]:
    """The names the forward binds to a recurrent hidden state (see
    :func:`recurrent_hidden_outputs`) that the gather would take, whole or in part."""
    hidden = set(_bound_at(forward, layouts.hidden_outputs))
    if not hidden:
        return []
    read = [root_name(expression) or "" for expression in gathered]
    return [name for name in dict.fromkeys(read) if name in hidden]


def _bound_at(forward: cst.SimpleStatementLine, positions_by_model: dict[str, frozenset[int]]) -> list[str]:
    """The names ``outputs = model(...)`` binds to the outputs at the model's positions (-1: the
    only output)."""
    assign = forward.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
        return []
    positions = positions_by_model.get(dotted(assign.value.func) or "")
    if not positions:
        return []
    target = assign.targets[0].target
    if isinstance(target, (cst.Tuple, cst.List)):
        return [
            name
            for index, element in enumerate(target.elements)
            if index in positions
            for name in target_names(element.value)
        ]
    return list(target_names(target)) if -1 in positions else []


def sequence_first_layouts(module: cst.Module, facts: ScriptFacts) -> SequenceLayouts:
    """Models built from a sequence-first layer (``nn.Transformer``, ``nn.LSTM``... without
    ``batch_first=True``), directly or through a class of the file that builds one (or builds
    such a class), and ``pad_sequence`` without ``batch_first=True``. Only a literal ``True``
    counts as batch-first: a flag could be either."""
    wanted = facts.called & (SEQUENCE_FIRST_LAYERS | SEQUENCE_FIRST_PADDING)
    if not wanted:
        return SequenceLayouts()
    padding, layer_reasons = _sequence_first_calls(module, facts, wanted)
    if not layer_reasons:
        return SequenceLayouts({}, padding)  # every layer batch-first (a literal True)
    class_reasons = _sequence_first_classes(module, layer_reasons)
    models: dict[str, str] = {}
    for node in module_nodes(module):
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        model = dotted(node.targets[0].target)
        built = construction(node.value)
        if model is None or model not in facts.models or built is None:
            continue
        if id(built) in layer_reasons:
            models[model] = f"the model is sequence-first ({layer_reasons[id(built)]})"
        elif dotted(built.func) in class_reasons:
            models[model] = class_reasons[dotted(built.func) or ""]
    return SequenceLayouts(models, padding)


def _sequence_first_calls(
    module: cst.Module, facts: ScriptFacts, wanted: AbstractSet[str]
) -> tuple[str | None, dict[int, str]]:
    """Why the file's batches are padded sequence-first (None: they are not), and the calls
    building a sequence-first layer (by ``id``) → why."""
    padding = None
    layer_reasons: dict[int, str] = {}
    finder = _CallsOnLines({site.line for name in wanted for site in facts.call_sites.get(name, ())}, facts)
    walk(module, finder)
    for call in finder.calls:
        qualified = facts.qualified_name(call.func) or ""
        if qualified not in SEQUENCE_FIRST_PADDING and qualified not in SEQUENCE_FIRST_LAYERS:
            continue
        if _batch_first(call):
            continue
        if qualified in SEQUENCE_FIRST_PADDING and padding is None:
            padding = f"batches padded by {expression_code(call.func)}() without batch_first=True"
        elif qualified in SEQUENCE_FIRST_LAYERS:
            layer_reasons[id(call)] = f"{expression_code(call.func)} built without batch_first=True"
    return padding, layer_reasons


def _sequence_first_classes(module: cst.Module, layer_reasons: dict[int, str]) -> dict[str, str]:
    """The file's classes that build a sequence-first layer, or such a class of the file → why."""
    classes = {node.name.value: node for node in module.body if isinstance(node, cst.ClassDef)}
    class_calls = {name: calls_in(node) for name, node in classes.items()}
    class_reasons: dict[str, str] = {}
    for name, calls in class_calls.items():
        reason = next((layer_reasons[id(call)] for call in calls if id(call) in layer_reasons), None)
        if reason is not None:
            class_reasons[name] = f"the model is sequence-first ({reason})"
    grew = True
    while grew:
        grew = False
        for name, calls in class_calls.items():
            if name in class_reasons:
                continue
            inner = next((dotted(call.func) for call in calls if dotted(call.func) in class_reasons), None)
            if inner is not None:
                class_reasons[name] = class_reasons[inner]
                grew = True
    return class_reasons


def recurrent_hidden_outputs(module: cst.Module, facts: ScriptFacts) -> dict[str, frozenset[int]]:
    """Models of the file's classes whose ``forward`` returns the hidden state of a recurrent
    layer it holds (``_, hidden = self.gru(x)`` ... ``return self.fc(hidden[-1]), hidden``),
    with the positions of those outputs: model name → positions (-1: the only output)."""
    if not facts.called & RECURRENT_LAYERS:
        return {}
    positions_by_class: dict[str, frozenset[int]] = {}
    for node in module.body:
        if not isinstance(node, cst.ClassDef):
            continue
        methods = {method.name.value: method for method in class_methods(node)}
        init, forward = methods.get("__init__"), methods.get("forward")
        if init is None or forward is None or not parameter_names(init) or not parameter_names(forward):
            continue
        layers = _recurrent_attributes(init, facts)
        if layers:
            positions = _hidden_positions(forward, layers)
            if positions:
                positions_by_class[node.name.value] = positions
    return _models_built_from(module, facts, positions_by_class)


def python_value_outputs(module: cst.Module, facts: ScriptFacts) -> dict[str, frozenset[int]]:
    """Models of the program's classes whose ``forward`` returns a Python value it made
    (``decode_lengths = (caption_lengths - 1).tolist()`` ... ``return scores, decode_lengths``),
    with the positions of those outputs: model name → positions (-1: the only output). A class
    of another module of the program is known by its qualified name (``models.DecoderWithAttention``)."""
    positions_by_class = {
        node.name.value: positions
        for node in module.body
        if isinstance(node, cst.ClassDef)
        and (positions := forward_python_outputs(node, facts.builtins_at((node.name.value, "forward"))))
    }
    imported = dict(facts.program.python_outputs) if facts.program is not None else {}
    return _models_built_from(module, facts, positions_by_class, imported)


def _models_built_from(
    module: cst.Module,
    facts: ScriptFacts,
    positions_by_class: dict[str, frozenset[int]],
    imported: dict[str, frozenset[int]] | None = None,
) -> dict[str, frozenset[int]]:
    """The models built from those classes (``decoder = Decoder(...).to(device)``) → the
    class's positions; ``imported``: classes of other modules, by qualified name."""
    if not positions_by_class and not imported:
        return {}
    models: dict[str, frozenset[int]] = {}
    for found in module_nodes(module):
        if not isinstance(found, cst.Assign) or len(found.targets) != 1:
            continue
        model = dotted(found.targets[0].target)
        built = construction(found.value)
        if model is None or model not in facts.models or built is None:
            continue
        positions = positions_by_class.get(dotted(built.func) or "")
        if positions is None and imported:
            positions = imported.get(facts.qualified_name(built.func) or "")
        if positions is not None:
            models[model] = positions
    return models


def _recurrent_attributes(init: cst.FunctionDef, facts: ScriptFacts) -> set[str]:
    """``self.gru = nn.GRU(...)`` in ``__init__``: ``{"gru"}``."""
    instance = parameter_names(init)[0]
    found = set()
    for node in nodes_in(init):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            target = node.targets[0].target
            if (
                isinstance(target, cst.Attribute)
                and dotted(target.value) == instance
                and facts.qualified_name(node.value.func) in RECURRENT_LAYERS
            ):
                found.add(target.attr.value)
    return found


def _hidden_positions(forward: cst.FunctionDef, layers: set[str]) -> frozenset[int]:
    """The outputs of ``forward`` that return a hidden state of ``layers`` as it came (a name
    bound to the layer's second output, or a tuple holding one)."""
    instance = parameter_names(forward)[0]
    hidden: set[str] = set()
    returns: list[cst.BaseExpression] = []
    for node in nodes_in(forward):
        if isinstance(node, cst.Return) and node.value is not None:
            returns.append(node.value)
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
            continue
        func, target = node.value.func, node.targets[0].target
        if (
            isinstance(func, cst.Attribute)
            and dotted(func.value) == instance
            and func.attr.value in layers
            and isinstance(target, (cst.Tuple, cst.List))
            and len(target.elements) == 2
        ):
            hidden.update(target_names(target.elements[1].value))

    def holds_hidden(value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Name):
            return value.value in hidden
        return isinstance(value, cst.Tuple) and any(holds_hidden(element.value) for element in value.elements)

    positions: set[int] = set()
    for value in returns:
        if isinstance(value, cst.Tuple):
            positions.update(i for i, element in enumerate(value.elements) if holds_hidden(element.value))
        elif holds_hidden(value):
            positions.add(-1)
    return frozenset(positions)


def _batch_first(call: cst.Call) -> bool:
    return keyword_is(call, "batch_first", "True")
