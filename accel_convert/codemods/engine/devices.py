"""Devices and moves: the one answer to "is this a device" and "is this a move to one".

A device is a name the analysis found holding the script's device (``device``, ``args.device``,
``self.device``, a dictionary's ``cfg["device"]``: :func:`held_name`; :attr:`ScriptFacts.device_names`,
followed through values by ``codemods/model/devices.py``) or the accelerator's own
``accelerator.device``. A move is a call of one of :data:`DEVICE_MOVE_METHODS` on a value
(``model.to(device)``, ``x.cuda()``, ``t.cpu()``); peeling the moves off an expression gives what
was moved; peeling casts and mode switches too (:data:`SELF_RETURNING_METHODS`) gives what was
constructed (``Net().to(device).eval()`` is a construction of ``Net``). A *fixed GPU* is a device that is
the same GPU on every process once the script runs on several (``"cuda:0"``,
``torch.device("cuda", 1)``, the index once given to ``torch.cuda.set_device``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.facts import FactQuestions, ScriptFacts
from accel_convert.codemods.engine.names import NameTable, ScopeKey
from accel_convert.codemods.engine.syntax import calls_in, dotted, nodes_in
from accel_convert.codemods.engine.torch_names import (
    CUDA_AVAILABILITY,
    DATA_PARALLEL,
    DEVICE_CONSTRUCTORS,
    DEVICE_MOVE_METHODS,
    SELF_RETURNING_METHODS,
)

#: Keywords through which a call takes a device (``torch.zeros(3, device=d)``,
#: ``torch.load(path, map_location=d)``).
DEVICE_KEYWORDS = frozenset({"device", "map_location"})


def names_device(
    node: cst.BaseExpression, facts: ScriptFacts, also: Collection[str] = (), scope: ScopeKey | None = None
) -> bool:
    """Whether ``node`` is a device: a name holding the script's device (where ``scope`` reads
    it: :func:`holds_device`), ``accelerator.device`` (or one of ``also``, names a rule knows
    hold one), a ``"cuda..."`` string, or ``torch.device(...)``."""
    name = held_name(node, indexed=True)
    if name is not None:
        device = holds_device(name, facts, scope) if scope is not None else name in facts.device_names
        return device or name == f"{accelerator_name(facts)}.device" or name in also
    if isinstance(node, cst.SimpleString):
        return is_gpu_string(node)
    if isinstance(node, cst.Call):
        return facts.qualified_name(node.func) in DEVICE_CONSTRUCTORS
    return False


def held_name(node: cst.BaseExpression, indexed: bool = False) -> str | None:
    """``device``, ``self.gpu_id``, ``config["device"]``: the name a value is held under, a dotted
    name or one string key of a dotted name (a dictionary of settings); with ``indexed``, one
    element of a dotted name too (``gpus[0]``, ``args.gpu_ids[0]``), and an element of such a part
    (``config["gpus"][0]``); None for anything else."""
    name = dotted(node)
    if name is not None or not isinstance(node, cst.Subscript) or len(node.slice) != 1:
        return name
    index = node.slice[0].slice
    # ``config["gpus"][0]``: a part of a part, when indexed.
    base = held_name(node.value, indexed) if indexed and isinstance(node.value, cst.Subscript) else dotted(node.value)
    if base is None or not isinstance(index, cst.Index):
        return None
    if indexed and isinstance(index.value, cst.Integer):
        return f"{base}[{index.value.value}]"
    if not isinstance(index.value, cst.SimpleString):
        return None
    key = index.value.evaluated_value
    return f'{base}["{key}"]' if isinstance(key, str) else None


def written_parts(name: str) -> list[str]:
    """``config["gpus"][0]`` → ``config["gpus"][0]``, ``config["gpus"]``, ``config``: a held name
    (:func:`held_name`) and each name it is a part of, the whole first and the variable last.
    Binding any of them writes the value the name holds; the variable's binding scope is where
    the name is read from (:func:`binding_scope`)."""
    cuts = [cut for cut, char in enumerate(name) if char in ".[" and cut]
    return [name, *(name[:cut] for cut in reversed(cuts))]


def binding_scope(name: str, scope: ScopeKey, names: NameTable | None) -> ScopeKey:
    """The scope whose bindings say what a held name holds where ``scope`` reads it: its
    variable's (a function's own ``dev``, the module's ``device``, a ``global``'s module) and, for
    a part of a method's own variable (``self.device``), the method's class, whose methods all
    write and read it."""
    variable = written_parts(name)[-1]
    bound = names.binding_scope(variable, scope) if names is not None else None
    if bound is None:
        return ()
    owner = names.scopes.get(bound[:-1]) if names is not None and variable != name and len(bound) >= 2 else None
    return bound[:-1] if owner is not None and owner.kind == "class" else bound


def holds_device(name: str, facts: FactQuestions, scope: ScopeKey) -> bool:
    """Whether ``name`` holds the script's device where ``scope`` reads it: one of the device
    names, unless the binding read there makes it something else (``device_names_elsewhere``:
    ``fingerprint()``'s own ``dev = torch.device("cpu")`` beside ``main()``'s device)."""
    if name not in facts.device_names:
        return False
    elsewhere = facts.device_names_elsewhere
    return not elsewhere or (binding_scope(name, scope, facts.names), name) not in elsewhere


#: How :func:`element_name` writes an index it cannot follow (``gpus[?]``).
UNFOLLOWED_INDEX = "[?]"


def element_name(node: cst.BaseExpression) -> str | None:
    """``gpus[i]``, ``args.gpu_ids[rank]``: an element of a dotted name at an index that is not
    written out, as ``gpus[?]``; None for anything else (:func:`held_name` names the others)."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 1 or held_name(node, indexed=True) is not None:
        return None
    base = dotted(node.value)
    return f"{base}{UNFOLLOWED_INDEX}" if base is not None else None


def chooses_device(value: cst.BaseExpression, facts: FactQuestions, scope: tuple[str, ...] = ()) -> bool:
    """Whether an assigned value chooses the script's device: a ``"cuda..."``/``"mps"`` string (or
    a choice between one and ``"cpu"``), ``torch.device(...)`` and its kin, a ``--device``
    option, the accelerator's device. The model's roles name the devices with it (rules then ask
    :func:`names_device` of those names); the device rule asks it of what a call is given."""
    if isinstance(value, cst.SimpleString):
        return is_gpu_string(value) or value.evaluated_value == "mps"
    if isinstance(value, cst.IfExp):
        if chooses_device(value.body, facts, scope) or chooses_device(value.orelse, facts, scope):
            return True
        # ``0 if torch.cuda.is_available() else "cpu"``: a GPU index or the CPU.
        return _is_cpu_string(value.orelse) and any(
            facts.qualified_name(node.func, scope) == CUDA_AVAILABILITY for node in calls_in(value.test)
        )
    if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Call):
        # torch.accelerator.current_accelerator().type
        return chooses_device(value.value, facts, scope)
    if isinstance(value, cst.Attribute) and dotted(value.value) in facts.parsed_arguments:
        # ``device = args.device`` from ``--device cuda``: the device string itself.
        option = value.attr.value
        return option in facts.parser_options and (option == "device" or option.endswith("_device"))
    if isinstance(value, cst.Call):
        qualified = (
            facts.names.qualified_name(value.func, scope, strict=False)
            if facts.names is not None
            else facts.qualified_name(value.func, scope)
        )
        return qualified in DEVICE_CONSTRUCTORS
    return dotted(value) == f"{facts.existing_accelerator or 'accelerator'}.device"


def chooses_gpu(value: cst.BaseExpression, facts: ScriptFacts, scope: tuple[str, ...] = ()) -> bool:
    """``torch.device("cuda" if ok else "cpu")``, ``torch.device(f"cuda:{i}")``: a device made
    right here (a call, not a name or a string) that may be a GPU."""
    return isinstance(value, cst.Call) and chooses_device(value, facts, scope) and mentions_cuda(value)


def selects_device(value: cst.BaseExpression, facts: ScriptFacts) -> bool:
    """Whether the value assigned to a device name selects the device (``torch.device(...)``,
    ``"cuda" if ... else "cpu"``, the command line's ``args.device``) rather than aliasing another
    name that holds it (``DEV = device``, which stays)."""
    if isinstance(value, cst.Attribute) and dotted(value.value) in facts.parsed_arguments:
        return True
    return dotted(value) is None


def _is_cpu_string(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.SimpleString) and value.evaluated_value == "cpu"


def is_gpu_index(node: cst.BaseExpression) -> bool:
    """``0``, ``0 if torch.cuda.is_available() else "cpu"``: a GPU index written as a literal (or a
    choice between one and the CPU)."""
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.IfExp):
        branches = (node.body, node.orelse)
        return any(isinstance(b, cst.Integer) for b in branches) and all(
            isinstance(b, cst.Integer) or _is_cpu_string(b) for b in branches
        )
    return False


def is_gpu_string(node: cst.BaseExpression) -> bool:
    """``"cuda"``, ``"cuda:0"``: a string literal naming a GPU (the first, or the one of that index)."""
    if not isinstance(node, cst.SimpleString):
        return False
    value = node.evaluated_value
    return isinstance(value, str) and value.startswith("cuda")


def names_gpu_type(node: cst.BaseExpression) -> bool:
    """``"cuda"`` exactly: the GPU's device type (``device.type == "cuda"``), which has no index."""
    return isinstance(node, cst.SimpleString) and node.evaluated_value == "cuda"


def names_fixed_gpu(
    node: cst.BaseExpression, facts: ScriptFacts, scope: tuple[str, ...] = (), indices: Collection[str] = ()
) -> bool:
    """Whether ``node`` is the same GPU on every process: ``"cuda"``, ``"cuda:0"``,
    ``torch.device("cuda", 1)`` (``torch.device`` of such a string), or one of ``indices`` (the
    names the script gave ``torch.cuda.set_device``: ``args.gpu``). A choice made per process
    (``f"cuda:{local_rank}"``) is not fixed."""
    if is_gpu_string(node):
        return True
    if isinstance(node, cst.Call) and node.args and facts.qualified_name(node.func, scope) == "torch.device":
        return is_gpu_string(node.args[0].value)
    return held_name(node, indexed=True) in indices


def mentions_cuda(node: cst.BaseExpression) -> bool:
    """Whether the expression mentions the string "cuda" anywhere (``"cuda"``, ``"cuda:0"``,
    ``f"cuda:{i}"``, ``"cuda" if ok else "cpu"``): a device chosen there may be a GPU."""
    return any(
        (isinstance(inner, cst.SimpleString) and "cuda" in inner.value)
        or (isinstance(inner, cst.FormattedStringText) and "cuda" in inner.value)
        for inner in nodes_in(node)
    )


def is_move(node: cst.CSTNode) -> bool:
    """``X.to(...)``, ``X.cuda(...)``, ``X.cpu()``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in DEVICE_MOVE_METHODS
    )


def peel_moves(
    value: cst.BaseExpression, to_device: Callable[[cst.BaseExpression], bool] | None = None
) -> cst.BaseExpression:
    """``model.to(device).cuda()`` → ``model``: the value under its moves. With ``to_device``,
    ``.to(x)`` counts only when its one argument is a device by that test (``.to(torch.half)``
    converts, it does not move)."""
    while is_move(value):
        assert isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
        if value.func.attr.value == "to" and to_device is not None:
            if len(value.args) != 1 or not to_device(value.args[0].value):
                break
        value = value.func.value
    return value


def data_parallel_wrapped(value: cst.BaseExpression, facts: FactQuestions) -> cst.BaseExpression:
    """``nn.DataParallel(net, device_ids=...)`` (or ``DataParallel(module=net)``) → ``net``: the
    module a DataParallel call wraps; any other ``value`` (a wrap naming no module too) as it is."""
    if isinstance(value, cst.Call) and facts.callee_name(value.func) in DATA_PARALLEL:
        for arg in value.args:
            if arg.keyword is None or arg.keyword.value == "module":
                return arg.value
    return value


def peel_self_returning(value: cst.BaseExpression) -> cst.BaseExpression:
    """``model.eval().half()`` → ``model``: the value under casts and mode switches (not moves)."""
    while _called_method(value) in SELF_RETURNING_METHODS:
        value = value.func.value  # type: ignore[attr-defined]
    return value


def constructed(value: cst.BaseExpression) -> cst.BaseExpression:
    """``Net().to(device).train()`` → ``Net()``: the value under its moves, casts and mode switches
    (what was built, or the name it came from: ``model.cuda()`` → ``model``)."""
    while (method := _called_method(value)) in DEVICE_MOVE_METHODS or method in SELF_RETURNING_METHODS:
        value = value.func.value  # type: ignore[attr-defined]
    return value


def construction(value: cst.BaseExpression) -> cst.Call | None:
    """The call building what ``value`` holds, through moves, casts and mode switches
    (``Model(...).to(device)``); None where it is not built there (``model.to(device)``)."""
    built = constructed(value)
    return built if isinstance(built, cst.Call) else None


def _called_method(value: cst.BaseExpression) -> str | None:
    """``to`` of ``x.to(device)``: the method a call calls on a value; None for anything else."""
    if type(value) is cst.Call and type(value.func) is cst.Attribute:
        return value.func.attr.value
    return None
