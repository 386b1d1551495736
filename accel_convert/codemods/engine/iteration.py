"""What a ``for`` loop iterates: the one answer to "which loader is under ``enumerate(tqdm(loader))``"
and "which part of the loop's target is the batch".

A loop over a loader often wraps it: ``enumerate(loader)`` adds a batch index before the batch,
``tqdm(loader)`` and a metric logger's ``log_every(loader, ...)`` show progress, ``iter(loader)``
and ``zip(loader, other)`` pass its batches on (``zip`` of multi-task training: its first loader,
the others are prepared as loaders too). :func:`iterated` looks through these *known* wrappers,
matched by qualified name (tqdm) or as unshadowed builtins; ``through_any_call=True`` looks through
any call's first argument (``progress(test_loader)``, a wrapper of the file's own, which says
nothing of the loader's role but still runs over its batches).
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.names import BuiltinOf, NameTable, ScopeKey, builtin_named
from accel_convert.codemods.engine.syntax import constant_item, dotted, item_code, target_names
from accel_convert.codemods.engine.torch_names import LOADER_PASS_THROUGH_METHODS, PROGRESS_BARS

#: Builtins that wrap an iterable and yield what its first argument yields (``enumerate`` with an
#: index before it).
ITERABLE_WRAPPERS = frozenset({"enumerate", "iter", "zip"})


def iterated(
    expr: cst.BaseExpression, names: NameTable | None = None, scope: ScopeKey = (), *, through_any_call: bool = False
) -> cst.BaseExpression:
    """The iterable under the wrappers of ``expr``: ``loader`` for ``enumerate(tqdm(loader))``.
    ``names``: the module's names (None for facts built by hand: builtins and progress bars are
    then matched as written)."""
    return _unwrapped(expr, names, scope, through_any_call)[0]


def iterated_name(
    expr: cst.BaseExpression, names: NameTable | None = None, scope: ScopeKey = (), *, through_any_call: bool = False
) -> str | None:
    """The name of the iterable under the wrappers of ``expr`` (see :func:`iterated`), as the
    analysis names loaders: ``self.loader``, or ``loaders[0]`` for an item of a container of
    loaders (a constant subscript of a name); None for any other iterable."""
    found = iterated(expr, names, scope, through_any_call=through_any_call)
    item = constant_item(found)
    return dotted(found) or (item_code(*item) if item is not None else None)


def batch_target(
    loop: cst.For, names: NameTable | None = None, scope: ScopeKey = (), *, through_any_call: bool = False
) -> cst.BaseExpression | None:
    """The part of the loop's target that receives a batch: ``(x, y)`` of ``for i, (x, y) in
    tqdm(enumerate(loader))``, the whole target where no ``enumerate`` is among the wrappers;
    None when an ``enumerate``'s target cannot be split into index and batch."""
    target: cst.BaseExpression = loop.target
    if not _unwrapped(loop.iter, names, scope, through_any_call)[1]:
        return target
    if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        return target.elements[1].value
    return None


def loop_batch_names(
    loop: cst.For,
    names: NameTable | None = None,
    scope: ScopeKey = (),
    *,
    through_any_call: bool = False,
    plain: bool = False,
) -> tuple[str, ...]:
    """The names the loop binds per batch: ``x``, ``y`` of ``for i, (x, y) in enumerate(loader)``
    (the batch index is not batch data); every name of the target where it cannot be split.
    ``plain``: as :func:`~codemods.engine.syntax.target_names` takes it."""
    batch = batch_target(loop, names, scope, through_any_call=through_any_call)
    return tuple(target_names(batch if batch is not None else loop.target, plain=plain))


def enumerate_index(loop: cst.For, builtin: BuiltinOf) -> str | None:
    """``batch_idx`` of ``for batch_idx, (x, y) in enumerate(loader)``: it counts batches
    (through any wrapper: ``tqdm(enumerate(loader))``). ``builtin`` answers where the loop stands:
    the builtin ``enumerate``, not a script's own."""
    target = loop.target
    if not _enumerated(loop.iter, builtin) or not isinstance(target, (cst.Tuple, cst.List)):
        return None
    first = target.elements[0].value if len(target.elements) == 2 else None
    return first.value if isinstance(first, cst.Name) else None


def enumerate_start(expr: cst.BaseExpression, builtin: BuiltinOf) -> cst.BaseExpression | None:
    """The start of the builtin ``enumerate`` among the calls ``expr`` wraps its iterable in
    (``enumerate(loader, 1)``, ``start=1``); None when it counts from 0 or nothing enumerates."""
    call = _enumerate_call(expr, builtin)
    if call is None:
        return None
    given = [arg for arg in call.args[1:] if arg.keyword is None or arg.keyword.value == "start"]
    value = given[0].value if given else None
    return None if isinstance(value, cst.Integer) and int(value.value) == 0 else value


def _enumerated(expr: cst.BaseExpression, builtin: BuiltinOf) -> bool:
    """Whether the builtin ``enumerate`` is among the calls ``expr`` wraps its iterable in (through
    any call, as :func:`iterated` with ``through_any_call``)."""
    return _enumerate_call(expr, builtin) is not None


def _enumerate_call(expr: cst.BaseExpression, builtin: BuiltinOf) -> cst.Call | None:
    """The builtin ``enumerate`` call among the calls ``expr`` wraps its iterable in."""
    while isinstance(expr, cst.Call) and expr.args:
        if builtin(expr.func) == "enumerate":
            return expr
        expr = expr.args[0].value
    return None


def _unwrapped(
    expr: cst.BaseExpression, names: NameTable | None, scope: ScopeKey, through_any_call: bool
) -> tuple[cst.BaseExpression, bool]:
    """The iterable under the wrappers, and whether one of them is ``enumerate``."""
    enumerated = False
    while isinstance(expr, cst.Call) and expr.args:
        builtin = _builtin_wrapper(expr.func, names, scope)
        if not through_any_call:
            if builtin is None and not _passes_batches_through(expr.func, names, scope):
                break
            if expr.args[0].keyword is not None or expr.args[0].star:
                break
        enumerated = enumerated or builtin == "enumerate"
        expr = expr.args[0].value
    return expr, enumerated


def _builtin_wrapper(func: cst.BaseExpression, names: NameTable | None, scope: ScopeKey) -> str | None:
    """``enumerate``, ``iter`` or ``zip`` where ``func`` is that builtin (not a name the module binds)."""
    builtin = builtin_named(func, names, scope)
    return builtin if builtin in ITERABLE_WRAPPERS else None


def _passes_batches_through(func: cst.BaseExpression, names: NameTable | None, scope: ScopeKey) -> bool:
    """A progress bar (``tqdm``) or a metric logger's ``log_every``."""
    if isinstance(func, cst.Attribute) and func.attr.value in LOADER_PASS_THROUGH_METHODS:
        return True
    qualified = names.qualified_name(func, scope, strict=False) if names is not None else dotted(func)
    return qualified in PROGRESS_BARS
