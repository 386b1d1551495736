"""``--launcher``: which statements of the training's cells stay in the kernel and which move
into ``training_function()``.

``notebook_launcher`` forks the kernel, so a value bound at the top level before the launch is
in every process, the same in each. The statements of the moved cells that only bind such
values stay at the top level, in their cell and in their order, with their comments; what each
process must make itself moves into the function. Decided by data flow on names (what each
top-level statement binds and reads), in the cells' order:

- **May stay**: a plain assignment (``batch_size = 16``, ``config = {...}``, ``features =
  torch.randn(...)``, ``train_dataset = TensorDataset(...)``) that binds none of the training's
  objects (models, optimizers, loaders, schedulers) nor a device, and moves nothing to a device
  (``.to(...)``, ``.cuda()``, a ``"cuda"`` string: CUDA must not start in the kernel before the
  fork); a ``print(...)`` of such values (it prints once, in the kernel, before the launch); a
  method call on a value that stays (``parser.add_argument(...)``: argparse-like settings).
- **Moves** (checked again each time a statement moves, until nothing changes):
  a method call on a name the training's cells do not bind (``torch.manual_seed(0)``: each
  process seeds itself); a statement that may stay but reads a name whose last binding moves, or that a
  moving statement read or changed since (``features.mul_(2)``); a staying binding of a name
  the function binds too, where the function reads it before binding it (it would be the
  function's unbound local), or where a definition reads it as a global (it would see the
  kernel's value, not the one the function binds); a staying binding of a name that comes after
  a moving statement reading it (the function would see the later value).
- Everything else moves: the device, the training's objects, the loops, anything reading them.

Example — a settings cell::

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # moves: per process
    batch_size = 16                                                 # stays
    features = torch.randn(456, 8)                                  # stays
    train_dataset = TensorDataset(features)                         # stays
    train_loader = DataLoader(train_dataset, batch_size=batch_size) # moves: a loader
    steps = len(train_loader)                                       # moves: reads a loader
    for features, targets in train_loader: ...                      # moves (rebinds features,
                                                                    # after the kernel's binding)
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from functools import cached_property

import libcst as cst

from accel_convert.codemods.engine.devices import is_move, mentions_cuda
from accel_convert.codemods.engine.name_flow import possibly_unbound_reads
from accel_convert.codemods.engine.syntax import nodes_in
from accel_convert.records import record

#: (cell index, statement index) of a top-level statement.
Key = tuple[int, int]


@record(frozen=True)
class TopStatement:
    """A top-level statement of the training's cells that is not a definition."""

    key: Key
    tree: ast.Module
    node: cst.CSTNode

    @cached_property
    def binds(self) -> frozenset[str]:
        return frozenset(bound_names(self.tree))

    @cached_property
    def reads(self) -> frozenset[str]:
        """Every name it reads, anywhere in it."""
        return frozenset(loaded_names(self.tree))

    @cached_property
    def free_reads(self) -> frozenset[str]:
        """The names it may read before it binds them itself: the values it takes from before."""
        unbound = {name for _, name in possibly_unbound_reads(self.tree)}
        return frozenset(unbound | (self.reads - self.binds))


def staying_statements(
    statements: Sequence[TopStatement], per_process: frozenset[str], global_reads: frozenset[str]
) -> frozenset[Key]:
    """The keys of ``statements`` (in the cells' order) that stay at the top level.
    ``per_process``: the training's objects and the devices; ``global_reads``: the names the
    notebook's definitions read as globals."""
    staying = {statement.key for statement in statements if _may_stay(statement, per_process)}
    while True:
        leaving = _leaving(statements, staying, global_reads)
        if not leaving:
            return frozenset(staying)
        staying -= leaving


def _may_stay(statement: TopStatement, per_process: frozenset[str]) -> bool:
    if statement.binds & per_process:
        return False
    if any(is_move(node) for node in nodes_in(statement.node)):
        return False
    if any(isinstance(node, cst.BaseExpression) and mentions_cuda(node) for node in nodes_in(statement.node)):
        return False
    return (
        _is_plain_assignment(statement.tree)
        or (_is_print(statement.tree) and bool(statement.reads - {"print"}))
        or method_receiver(statement.tree) is not None
    )


def _leaving(statements: Sequence[TopStatement], staying: set[Key], global_reads: frozenset[str]) -> set[Key]:
    """The staying statements that must move, given that those not in ``staying`` move."""
    moving = [statement.key not in staying for statement in statements]
    function_binds: set[str] = set()
    for statement, moves in zip(statements, moving):
        if moves:
            function_binds |= statement.binds
    leaving: set[Key] = set()
    for position, statement in enumerate(statements):
        receiver = method_receiver(statement.tree)
        if receiver is not None and not moving[position] and _last_binding(statements, position, receiver) is None:
            leaving.add(statement.key)  # a call on a module or on what the span did not bind
        for name in statement.free_reads:
            last = _last_binding(statements, position, name)
            if not moving[position]:
                if _touched_since(statements, moving, position, last, name):
                    leaving.add(statement.key)
            elif name in function_binds:
                if last is not None and not moving[last]:
                    leaving.add(statements[last].key)  # the function's local, unbound there
            else:  # the function reads the kernel's last binding: none may come after this read
                leaving.update(
                    later.key
                    for later, moves in zip(statements[position + 1 :], moving[position + 1 :])
                    if not moves and name in later.binds
                )
    shadowed = function_binds & global_reads  # a definition would read the kernel's value
    leaving.update(
        statement.key for statement, moves in zip(statements, moving) if not moves and statement.binds & shadowed
    )
    return leaving & staying


def _touched_since(
    statements: Sequence[TopStatement], moving: Sequence[bool], position: int, last: int | None, name: str
) -> bool:
    """Whether a moving statement may have changed ``name`` between its last binding (``last``)
    and ``position``: it bound it, or read it (where the span binds it), or changed it in place
    (``name[...] = ``, ``name.x = ``, ``name.add_(...)``: a name from before the span)."""
    if last is not None and moving[last]:
        return True
    for index in range(0 if last is None else last + 1, position):
        if not moving[index]:
            continue
        if (last is not None and name in statements[index].reads) or _changes_in_place(statements[index].tree, name):
            return True
    return False


def _changes_in_place(tree: ast.Module, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if isinstance(node.value, ast.Name) and node.value.id == name:
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver, method = node.func.value, node.func.attr
            if isinstance(receiver, ast.Name) and receiver.id == name and method.endswith("_") and method[0] != "_":
                return True
    return False


def _last_binding(statements: Sequence[TopStatement], position: int, name: str) -> int | None:
    for index in range(position - 1, -1, -1):
        if name in statements[index].binds:
            return index
    return None


def _is_plain_assignment(tree: ast.Module) -> bool:
    """``name = value`` (or ``a, b = ...``, ``name: T = value``): binds names, changes no object."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            return False
        if not all(_names_only(target) for target in targets):
            return False
    return bool(tree.body)


def _is_print(tree: ast.Module) -> bool:
    """``print(...)`` and nothing else (the builtin: a notebook rebinding ``print`` binds it)."""
    return bool(tree.body) and all(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "print"
        for node in tree.body
    )


def method_receiver(tree: ast.Module) -> str | None:
    """``name.method(...)`` alone (``parser.add_argument(...)``): the name it is called on."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        return call.func.value.id
    return None


def _names_only(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(element) for element in target.elts)
    return isinstance(target, ast.Name)


def loaded_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def bound_names(tree: ast.AST) -> set[str]:
    """Names a top-level statement binds at the top level (not inside functions, classes,
    lambdas or comprehensions it holds)."""
    found: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(child.name)
                continue
            if isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue
            if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
                found.add(child.id)
            elif isinstance(child, ast.alias):
                found.add((child.asname or child.name).split(".")[0])
            pending.append(child)
    return found


def global_reads(trees: Sequence[ast.Module]) -> frozenset[str]:
    """The names the functions of ``trees`` (methods too) read and do not bind themselves."""
    found: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                parameters = {argument.arg for argument in ast.walk(node.args) if isinstance(argument, ast.arg)}
                stored = {
                    inner.id
                    for inner in ast.walk(node)
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del))
                }
                declared = {name for inner in ast.walk(node) if isinstance(inner, ast.Global) for name in inner.names}
                found |= loaded_names(node) - ((parameters | stored) - declared)
    return frozenset(found)
