"""A device selected at module level, with the accelerator created in a function.

``device = torch.device("cuda" ...)`` at module level, read by the model's code and helpers, is
GPU 0 on every rank. The function creating the accelerator rebinds the global (``global device``
/ ``device = accelerator.device``); a module-level ``featurizer = LogMel().to(device)`` nothing
else at module level reads moves there too, and a tensor still placed on that device at import is
reported (ACC904), as is a tensor a legacy CUDA type makes at import (``FIXED_Z =
Tensor(...)`` with ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``). This pass
runs on the module the device walk converted.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.devices import holds_device, selects_device
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS
from accel_convert.codemods.engine.syntax import (
    as_statement,
    binds_name,
    calls_in,
    dotted,
    expression_code,
    is_docstring,
    names_in,
    parameter_names,
)
from accel_convert.codemods.engine.torch_names import LEGACY_CUDA_TENSOR_TYPES
from accel_convert.codemods.model.plan import creation_index
from accel_convert.codemods.rewrites.device.rebinding import creating_function, rebinding
from accel_convert.codemods.rewrites.device.state import DEVICE

#: A module-level move taken into the home function: target → (its original statement, the device name).
Moved = dict[str, tuple[cst.SimpleStatementLine, str]]


def rebind_module_device(
    original: cst.Module, converted: cst.Module, facts: ScriptFacts
) -> tuple[cst.Module, list[Change]]:
    """A module-level ``device = torch.device("cuda" ...)`` read by the model's code and helpers,
    with the accelerator created in ``main()``: that device is GPU 0 on every rank. The function
    creating the accelerator rebinds the global (``global device`` / ``device =
    accelerator.device``), so everything run after it uses this rank's device."""
    home = facts.creating_function if facts.home_kind == "function" else None
    if home is None:
        return converted, []
    selections = _module_level_selections(original, facts)
    body = list(converted.body)
    function = creating_function(body, home) if selections else None
    if function is None:
        return converted, []
    statements = function.statements
    local = set(parameter_names(function.function))
    names = [name for name in selections if name not in local and not binds_name(statements, name)]
    created = creation_index(statements, facts)
    if not names or created is None:
        return converted, []
    accelerator = accelerator_name(facts)
    # Prepared models are placed by prepare (their moves are removed): not moved here.
    moved = _moves_at_import(original, set(names), selections, statements, created, local | facts.models)
    rebinds = [rebinding(name, accelerator) for name in names]
    rebinds += [cst.parse_statement(f"{target} = {target}.to({device})") for target, (_, device) in moved.items()]
    statements[created + 1 : created + 1] = rebinds
    _declare_global(statements, [*names, *moved])
    body[function.position] = function.edited()
    changes = _rebound_reports(names, selections, moved, home, accelerator, facts)
    changes.extend(_placed_at_import(original, set(names), selections, facts, set(moved)))
    # Module-level statements the device pass left as they were: found again by their code.
    without_moves = {expression_code(statement): _without_move(statement) for statement, _ in moved.values()}
    body = [without_moves.get(expression_code(statement), statement) for statement in body]
    return converted.with_changes(body=body), changes


def _module_level_selections(original: cst.Module, facts: ScriptFacts) -> dict[str, cst.SimpleStatementLine]:
    """The module-level statements selecting a device (``device = torch.device(...)``, not an
    alias of a name), by the name they bind; the first of each."""
    selections: dict[str, cst.SimpleStatementLine] = {}
    for statement in original.body:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        assign = statement.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and selects_device(assign.value, facts):
            name = dotted(assign.targets[0].target)
            if name is not None and holds_device(name, facts, ()) and name not in selections:
                selections[name] = statement
    return selections


def _declare_global(statements: list[cst.BaseStatement], names: list[str]) -> None:
    """``global device, ...`` as the first statement of a function's body (after its docstring),
    taking over the blank lines and comments before that statement."""
    docstring = 1 if statements and is_docstring(statements[0]) else 0
    first = statements[docstring]
    declaration = cst.SimpleStatementLine(
        [cst.Global([cst.NameItem(cst.Name(name)) for name in names])],
        leading_lines=as_statement(first).leading_lines,
    )
    statements[docstring] = as_statement(first).with_changes(leading_lines=())
    statements.insert(docstring, declaration)


def _rebound_reports(
    names: Iterable[str],
    selections: dict[str, cst.SimpleStatementLine],
    moved: Moved,
    home: str,
    accelerator: str,
    facts: ScriptFacts,
) -> list[Change]:
    changes = []
    for name in names:
        site = facts.origins.site(selections[name])
        if site is not None:
            message = (
                f"module-level {name} → {accelerator}.device once {home}() creates the accelerator (global {name})"
            )
            changes.append(report_at(site, DEVICE, message, fixed=True))
    for target, (statement, device) in moved.items():
        site = facts.origins.site(statement)
        if site is not None:
            message = f"module-level {target} moved to this process's {device} once {home}() creates the accelerator"
            changes.append(report_at(site, DEVICE, message, fixed=True))
    return changes


def _moves_at_import(
    original: cst.Module,
    names: set[str],
    selections: dict[str, cst.SimpleStatementLine],
    statements: list[cst.BaseStatement],
    created: int,
    local: set[str],
) -> Moved:
    """Module-level ``featurizer = LogMel().to(device)`` (a fixed filterbank module, a constant
    tensor) after the device selection: at import it lands on GPU 0 on every rank, while each
    rank's batches are on its own GPU. Where nothing else at module level reads the name and the
    home function neither binds it nor reads it before creating the accelerator, the move goes
    to the home function, right after the device is rebound: built on the CPU at import, then
    ``featurizer = featurizer.to(device)`` (a module moves itself, a tensor is a new one: the
    assignment covers both). Not prepared: it trains nothing (DDP refuses a module without
    trainable parameters). Target → (its original statement, the device name)."""
    selected = {id(statement) for statement in selections.values()}
    found: Moved = {}
    later_mentions: set[str] = set()
    seen = False
    for statement in original.body:
        if id(statement) in selected:
            seen = True
            continue
        if not seen or isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        move = _module_level_move(statement, names)
        if move is not None and move[0] not in found and move[0] not in later_mentions:
            found[move[0]] = (statement, move[1])  # type: ignore[assignment]
            continue
        later_mentions |= names_in(statement)
    read_early = {name for statement in statements[:created] for name in names_in(statement)}
    return {
        target: found[target]
        for target in found
        if target not in later_mentions
        and target not in local
        and target not in read_early
        and not binds_name(statements, target)  # a local of the home function: no global for it
    }


def _module_level_move(statement: cst.CSTNode, names: set[str]) -> tuple[str, str] | None:
    """``name = <expression>.to(device)`` with ``device`` one of ``names``: (name, device)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target, value = assign.targets[0].target, assign.value
    if not isinstance(target, cst.Name) or not isinstance(value, cst.Call) or len(value.args) != 1:
        return None
    func, arg = value.func, value.args[0]
    if not isinstance(func, cst.Attribute) or func.attr.value != "to" or arg.keyword is not None or arg.star:
        return None
    device = dotted(arg.value)
    if device not in names or target.value in names_in(func.value):
        return None
    return target.value, device


def _without_move(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """``featurizer = LogMel().to(device)`` → ``featurizer = LogMel()``."""
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)
    assert isinstance(assign.value.func, cst.Attribute)
    return statement.with_changes(body=[assign.with_changes(value=assign.value.func.value)])


def _placed_at_import(
    original: cst.Module,
    names: set[str],
    selections: dict[str, cst.SimpleStatementLine],
    facts: ScriptFacts,
    moved: set[str],
) -> list[Change]:
    """Module-level statements after the device selection that put tensors on that device
    (a diffusion schedule's ``alpha_bar = torch.cumprod(alphas, 0).to(device)``): they run at
    import, before the accelerator exists, so on GPU 0 on every rank, where the global is not yet
    rebound; the other ranks' batches meet them on their own GPU. Reported (ACC904)."""
    changes: list[Change] = []
    selected = {id(statement) for statement in selections.values()}
    seen = False
    for statement in original.body:
        if id(statement) in selected:
            seen = True
            continue
        if not seen or not isinstance(statement, cst.SimpleStatementLine):
            continue
        if (_module_level_move(statement, names) or ("",))[0] in moved:
            continue  # moved to the home function instead (_moves_at_import)
        placed = [
            name
            for call in calls_in(statement)
            for name in names
            if any(dotted(arg.value) == name and _places_on(call, arg) for arg in call.args)
        ]
        site = facts.origins.site(statement)
        if placed and site is not None:
            changes.append(
                report_at(
                    site,
                    NO_ACCELERATOR_ACCESS,
                    f"tensor placed on module-level {placed[0]} at import, before the accelerator picks this "
                    f"process's device: GPU 0 on every rank (move it after the accelerator is created, or to "
                    f"the device of the batch that uses it)",
                )
            )
    return changes


def _places_on(call: cst.Call, arg: cst.Arg) -> bool:
    """Whether ``arg`` is where ``call`` puts a tensor: ``x.to(arg)`` or ``device=arg``."""
    if arg.keyword is not None:
        return arg.keyword.value == "device"
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"


def legacy_tensors_at_import(original: cst.Module, facts: ScriptFacts) -> list[Change]:
    """Module-level ``FIXED_Z = Tensor(np.random.normal(0, 1, (16, 8)))`` where ``Tensor`` is a
    legacy CUDA type (``torch.cuda.FloatTensor``, or chosen at module level: ``Tensor =
    torch.cuda.FloatTensor if cuda else torch.FloatTensor``), with the accelerator created in a
    function: such a constructor allocates on the current GPU, which is GPU 0 at import on every
    rank (``Accelerator()`` selects the rank's own GPU later, and ``Tensor(...)`` called after it
    lands there). Reported (ACC904); the same calls in functions run after the accelerator exists
    and are left alone."""
    if facts.home_kind != "function":
        return []
    aliases: set[str] = set()
    changes: list[Change] = []
    for statement in original.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        alias = _legacy_type_alias(statement, facts)
        if alias is not None:
            aliases.add(alias)
            continue
        made = [
            call
            for call in calls_in(statement)
            if dotted(call.func) in aliases or facts.qualified_name(call.func) in LEGACY_CUDA_TENSOR_TYPES
        ]
        site = facts.origins.site(statement)
        if made and site is not None:
            message = (
                f"tensor made by a legacy CUDA type ({expression_code(made[0].func)}) at import, before the "
                f"accelerator picks this process's device: GPU 0 on every rank (make it after the accelerator "
                f"is created, or move it to the device of the batch that uses it)"
            )
            changes.append(report_at(site, NO_ACCELERATOR_ACCESS, message))
    return changes


def _legacy_type_alias(statement: cst.SimpleStatementLine, facts: ScriptFacts) -> str | None:
    """``Tensor`` for ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` (or
    ``Tensor = torch.cuda.FloatTensor``); None for any other statement."""
    assign = statement.body[0] if len(statement.body) == 1 else None
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target, value = assign.targets[0].target, assign.value
    chosen = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
    if isinstance(target, cst.Name) and any(facts.qualified_name(o) in LEGACY_CUDA_TENSOR_TYPES for o in chosen):
        return target.value
    return None
