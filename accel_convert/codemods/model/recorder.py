"""The one walk: records what the providers need (assignments, calls, loops, ``if`` tests, breaks,
function signatures, classes), because a name's role is often only known later in the file:
``train_loader`` is a parameter of ``train()`` long before ``main()`` builds the DataLoader it
receives. The providers draw the conclusions from these records.

Records hold libcst nodes of the tree walked; the facts the providers draw from them hold names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Union

import libcst as cst

from accel_convert.codemods.engine.facts import MODULE
from accel_convert.codemods.engine.iteration import iterated, iterated_name, loop_batch_names
from accel_convert.codemods.engine.names import NameCollector, NameTable, ScopeKey
from accel_convert.codemods.engine.positions import POSITIONED_TYPES
from accel_convert.codemods.engine.syntax import (
    dotted,
    instance_parameter,
    is_backward,
    is_main_guard,
    parameter_names,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    GRAD_SWITCHES,
    NO_GRAD_CONTEXTS,
)
from accel_convert.records import record


@record(eq=False, repr=False)
class LoopRecord:
    """A ``for`` loop of the walk: its function, what it iterates and binds, what runs in it."""

    node: cst.For
    function: str
    iterated: str | None
    targets: tuple[str, ...]
    no_grad: bool
    #: Sequence number of the loop in the pass (orders it against .eval()/.train() calls).
    order: int
    has_backward: bool = False
    #: The ``X.backward(...)`` calls written in its body (nested loops' too), as written: whether
    #: one trains is the loops owner's question (model/loops.py).
    backward_calls: list[cst.Call] = field(default_factory=list)
    calls: set[str] = field(default_factory=set)
    #: Methods of the enclosing class called on ``self`` in the loop (``self._run_batch(...)``).
    method_calls: set[str] = field(default_factory=set)
    #: The method holding the loop, for a loop in a module-level class.
    method: str | None = None
    #: What it iterates through any calls (``progress(test_loader)`` of the file's own wrapper):
    #: where ``iterated`` knows no such wrapper, an evaluation over it is still one.
    through_calls: str | None = None
    #: The function nested in ``function``'s body that holds the loop (``main.run.train_epoch``),
    #: the innermost; None for a loop in the module-level function's own code.
    nested: str | None = None
    #: Where the loop stands, as the name table keys scopes (what its names denote there).
    scope: ScopeKey = ()
    #: The module, every compound statement and every indented block holding the loop, outermost
    #: first, and the loop last: the way to it, block by block (what stands before it in each).
    enclosing: tuple[cst.CSTNode, ...] = ()


@record(eq=False, repr=False)
class WhileRecord:
    """A ``while`` loop, for the ``break`` statements that leave it (``while True: ...; if loss <
    1e-3: break``)."""

    node: cst.While
    #: Whether a backward that trains runs in it: the loops owner decides (model/loops.py).
    has_backward: bool = False
    #: The ``X.backward(...)`` calls written in its body, for the loops owner to judge.
    backward_calls: list[cst.Call] = field(default_factory=list)
    #: Callees written as names or dotted paths in its body.
    calls: set[str] = field(default_factory=set)


#: The loops a ``break`` can leave.
ExitRecord = Union["LoopRecord", WhileRecord]


@dataclass(eq=False, repr=False)
class Mentions:
    """What an expression (an assignment's value, an ``if`` test) mentions."""

    names: set[str] = field(default_factory=set)
    #: Callees written as names or dotted paths (``model``, ``loss.item``); ``.item`` for any.
    calls: set[str] = field(default_factory=set)
    #: Receivers of ``.parameters()`` / ``.named_parameters()``.
    parameter_receivers: set[str] = field(default_factory=set)


@record(eq=False, repr=False)
class IfRecord:
    """An ``if`` statement of the walk: the loop around it, what its test reads, what its body does."""

    node: cst.If
    #: The innermost loop around the ``if``, ``for`` or ``while`` (None outside loops).
    loop: ExitRecord | None
    test: Mentions = field(default_factory=Mentions)
    modulo: bool = False
    #: Its body (not its ``else``) calls ``.cuda()`` somewhere: its test is a device switch.
    body_moves_to_cuda: bool = False
    #: What its body (not its ``else``) assigns: a device chosen there makes its test a switch.
    body_assigns: set[str] = field(default_factory=set)


@dataclass(eq=False, repr=False)
class CallRecord:
    """A call of the walk, with its scope, function and the loops and ``if`` statements around it."""

    node: cst.Call
    scope: ScopeKey
    function: str
    loops: tuple[LoopRecord, ...]
    ifs: tuple[IfRecord, ...]
    order: int
    in_main_guard: bool = False
    #: Under ``no_grad``/``inference_mode``/``set_grad_enabled(False)`` (a ``with`` or a decorator).
    no_grad: bool = False


@dataclass(eq=False, repr=False)
class AssignRecord:
    """An assignment of the walk: its targets and value, where it stands and what it reads."""

    node: cst.Assign
    targets: tuple[str, ...]
    value: cst.BaseExpression
    function: str
    mentions: Mentions
    scope: ScopeKey
    #: The ``if`` statements around it (body or ``else``), outermost first.
    ifs: tuple[IfRecord, ...] = ()

    @property
    def names(self) -> set[str]:
        return self.mentions.names


@record(eq=False, repr=False)
class AugAssignRecord:
    """``total += loss.item()``, ``bad_epochs += 1``: where per-process sums and counters grow."""

    targets: tuple[str, ...]
    #: Names on both sides (the target is read too).
    mentions: Mentions
    loops: tuple[LoopRecord, ...]
    ifs: tuple[IfRecord, ...]
    #: The enclosing module-level function, or class for its methods (``"<module>"`` outside).
    function: str = MODULE


@record(eq=False, repr=False)
class ClassRecord:
    """A module-level class: what converting training code held in it needs to know."""

    node: cst.ClassDef
    #: ``__init__``'s parameters after ``self`` (None: the class defines no ``__init__``).
    init_params: tuple[str, ...] | None = None
    #: Method → the name of its instance parameter (``self``); static and class methods have none.
    self_names: dict[str, str | None] = field(default_factory=dict)
    #: Method → methods of the class it calls on its instance (``self.build_model()``).
    method_calls: dict[str, set[str]] = field(default_factory=dict)


class Recorder(NameCollector):
    """Walks the module once and writes down what the conclusions need."""

    #: Statements and calls, in pre-order: ``walk`` appends them to ``collected``.
    collected_types = POSITIONED_TYPES

    def __init__(self, star_imports: Mapping[str, str] | None = None) -> None:
        super().__init__(star_imports)
        self.collected: list[cst.CSTNode] = []
        #: Every identifier (a name, or an attribute's name after the dot) and every dotted path
        #: (``model.state_dict``) → the index in ``collected`` of the statement or call it was last
        #: inside: enough to find its line.
        self.words: dict[str, list[int]] = {}
        self.calls: list[CallRecord] = []
        self.assigns: list[AssignRecord] = []
        self.loops: list[LoopRecord] = []
        #: Comprehensions' ``for`` clauses: (function, what they iterate, index in ``collected``
        #: of the statement or call they are in, under ``no_grad``, order among loops).
        self.comprehension_loops: list[tuple[str, str | None, int, bool, int]] = []
        self.breaks: list[tuple[cst.Break, tuple[ExitRecord, ...], tuple[IfRecord, ...], str]] = []
        self.aug_assigns: list[AugAssignRecord] = []
        #: Module-level functions → parameter names.
        self.defs: dict[str, tuple[str, ...]] = {}
        #: Functions defined in a module-level function's body, or in such a function's (at any
        #: depth), by their path (``inner_training_loop.train``, ``main.run.train_epoch``) →
        #: parameter names.
        self.nested_defs: dict[str, tuple[str, ...]] = {}
        #: Functions defined in a method's body (at any depth), by their path
        #: (``Trainer.fit.evaluate``) → parameter names: their parameters receive what calls pass.
        self.method_nested_defs: dict[str, tuple[str, ...]] = {}
        #: Module-level functions without ``*args`` → how many positional arguments they take.
        self.positional_limits: dict[str, int] = {}
        #: Functions defined inside the ``if __name__ == "__main__":`` block.
        self.guard_defs: set[str] = set()
        #: ``with`` items, for the names they bind (``as workdir``).
        self.with_items: list[cst.WithItem] = []
        #: (module-level function, returned expression).
        self.returns: list[tuple[str, cst.BaseExpression]] = []
        #: ((class, method), returned expression) for methods of module-level classes.
        self.method_returns: list[tuple[ScopeKey, cst.BaseExpression]] = []
        #: (path of a function nested in functions, ``main.build``; returned expression): a closure
        #: of the block around it building what that block trains (``def build(): return
        #: optim.SGD(net.parameters())``).
        self.nested_returns: list[tuple[str, cst.BaseExpression]] = []
        self.main_guard_assigns: set[str] = set()
        #: Module-level classes by name.
        self.classes: dict[str, ClassRecord] = {}
        #: Every assignment and ``if``, in source order (where device switches are read).
        self.assigns_and_ifs: list[AssignRecord | IfRecord] = []
        #: The ``if`` statements whose body the walk is in.
        self._if_bodies: list[IfRecord] = []
        #: (scope, name) → the loader a progress bar bound to that name wraps
        #: (``pbar = tqdm(train_loader)``, then ``for batch in pbar``).
        self._wrapped_loaders: dict[tuple[ScopeKey, str], str] = {}
        self._loops: list[LoopRecord] = []
        #: The module, compound statements and indented blocks the walk is in, outermost first.
        self._enclosing: list[cst.CSTNode] = []
        #: The ``for`` and ``while`` loops the walk is in, innermost last: what a ``break`` leaves.
        self._exits: list[ExitRecord] = []
        self._ifs: list[IfRecord] = []
        self._frames: list[Mentions] = []
        self._no_grad_depth = 0
        #: Per enclosing ``def``: whether a decorator disables gradients in it.
        self._decorated: list[bool] = []
        self._main_guard_depth = 0
        self._order = 0
        #: Plain names read as values (not called, not a definition's, an attribute's or a
        #: keyword's name), with the scope reading them: a function handed as a callback
        #: (``add_hook(save_checkpoint)``, ``callbacks=[log_metrics]``) is reached from there.
        self.value_names: list[tuple[str, ScopeKey]] = []
        #: Attributes read as values (not called, not assigned to), with the scope reading them:
        #: another module's function named through its module (``hooks = [callbacks.log_epoch]``).
        self.value_attributes: list[tuple[cst.Attribute, ScopeKey]] = []
        #: ``id`` of the names that are no value: callees, definitions', attributes', keywords'.
        self._not_values: set[int] = set()

    @property
    def function(self) -> str:
        return self.scope[0] if self.scope else MODULE

    def visit_Name(self, node: cst.Name) -> None:
        self.words.setdefault(node.value, []).append(len(self.collected) - 1)
        if id(node) not in self._not_values:
            self.value_names.append((node.value, self.scope))
        if self._frames:
            self._frames[-1].names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # The attribute's own name is a Name node below: visit_Name indexes it.
        self._not_values.add(id(node.attr))
        if id(node) not in self._not_values:
            self.value_attributes.append((node, self.scope))
        path = dotted(node)
        if path is not None:
            self.words.setdefault(path, []).append(len(self.collected) - 1)
            if self._frames:
                self._frames[-1].names.add(path)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.with_items.append(node)

    # -- the way down: module, compound statements, indented blocks ---------------------------

    def _enter_block(self, node: cst.CSTNode) -> None:
        self._enclosing.append(node)

    def _leave_block(self, original_node: cst.CSTNode) -> None:
        self._enclosing.pop()

    # The compound statements with hooks of their own below push and pop themselves there.
    visit_Module = visit_IndentedBlock = visit_Try = visit_TryStar = visit_Match = _enter_block
    leave_Module = leave_IndentedBlock = leave_Try = leave_TryStar = leave_Match = _leave_block

    # -- functions ----------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._enclosing.append(node)
        self._not_values.add(id(node.name))
        if not self.scope:
            self.classes[node.name.value] = ClassRecord(node)
        super().visit_ClassDef(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._enclosing.pop()
        super().leave_ClassDef(original_node)

    def _in_functions_below(self, depth: int) -> bool:
        """Whether every scope enclosing the current one below the first ``depth`` is a function."""
        return all(self.names.scopes[self.scope[:n]].kind == "function" for n in range(depth + 1, len(self.scope)))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enclosing.append(node)
        # A decorator runs where the function is defined, not in its body (the scope entered here).
        self._not_values.update(id(name) for name in (node.name, *(d.decorator for d in node.decorators)))
        super().visit_FunctionDef(node)
        if len(self.scope) == 2 and self.scope[0] in self.classes:
            self._method(self.classes[self.scope[0]], node)
        if len(self.scope) >= 2 and self._in_functions_below(0):
            # Nested at any depth in functions (``main.run.train_epoch``): a function of its own.
            self.nested_defs[".".join(self.scope)] = parameter_names(node)
        elif len(self.scope) >= 3 and self.scope[0] in self.classes and self._in_functions_below(1):
            self.method_nested_defs[".".join(self.scope)] = parameter_names(node)
        if len(self.scope) == 1:
            if self._main_guard_depth:
                self.guard_defs.add(node.name.value)
            self.defs[node.name.value] = parameter_names(node)
            if not isinstance(node.params.star_arg, cst.Param):  # a bare ``*`` takes no extra positionals
                self.positional_limits[node.name.value] = len(node.params.posonly_params) + len(node.params.params)
        # ``@torch.no_grad()`` (or ``@torch.inference_mode()``): the function's own body runs
        # without gradients, not the rest of the function or class it is defined in.
        decorated = any(_disables_grad(d.decorator, self.names, self.scope[:-1]) for d in node.decorators)
        self._decorated.append(decorated)
        self._no_grad_depth += decorated

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._enclosing.pop()
        self._no_grad_depth -= self._decorated.pop()
        super().leave_FunctionDef(original_node)

    def _method(self, owner: ClassRecord, node: cst.FunctionDef) -> None:
        params = [*node.params.posonly_params, *node.params.params]
        instance = instance_parameter(node)
        owner.self_names[node.name.value] = instance
        owner.method_calls.setdefault(node.name.value, set())
        if node.name.value == "__init__" and instance is not None:
            rest = [*params[1:], *node.params.kwonly_params]
            owner.init_params = tuple(param.name.value for param in rest)

    def follow_returning_methods(self) -> None:
        """``for batch in self.batches()`` where the method returns ``self.loader``: the loop
        iterates ``self.loader``, as one written over the attribute does (after the walk, when
        every method's returns are known)."""
        for loop in self.loops:
            if loop.iterated is None and loop.method is not None:
                loop.iterated = self._attribute_returned(loop.function, loop.method, loop.node.iter)

    def _attribute_returned(self, owner: str, method: str, expr: cst.BaseExpression) -> str | None:
        """``self.loader`` for ``self.batches()`` (in ``owner``'s ``method``) when ``batches``
        returns nothing but its instance's ``loader``; None for any other iterable."""
        record = self.classes.get(owner)
        call = iterated(expr, self.names, (owner, method))
        if record is None or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
            return None
        instance = record.self_names.get(method)
        if instance is None or not isinstance(call.func.value, cst.Name) or call.func.value.value != instance:
            return None
        callee = call.func.attr.value
        returned = {dotted(value) for scope, value in self.method_returns if scope == (owner, callee)}
        only = returned.pop() if len(returned) == 1 else None
        head, _, attribute = (only or "").partition(".")
        if not attribute or head != record.self_names.get(callee):
            return None
        return f"{instance}.{attribute}"

    def instance_method_called(self, node: cst.Call) -> str | None:
        """``build_model`` for ``self.build_model()`` inside a method of a module-level class."""
        func = node.func
        if len(self.scope) < 2 or self.scope[0] not in self.classes or not isinstance(func, cst.Attribute):
            return None
        instance = self.classes[self.scope[0]].self_names.get(self.scope[1])
        if instance is None or not isinstance(func.value, cst.Name) or func.value.value != instance:
            return None
        return func.attr.value

    # -- statements ---------------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> None:
        self.note_alias(node)
        self._frames.append(Mentions())

    def leave_Assign(self, original_node: cst.Assign) -> None:
        mentions = self._frames.pop()
        targets = tuple(name for target in original_node.targets for name in target_names(target.target))
        wrapped = dotted(iterated(original_node.value, self.names, self.scope)) if len(targets) == 1 else None
        if wrapped is not None and isinstance(original_node.value, cst.Call):
            self._wrapped_loaders[(self.scope, targets[0])] = wrapped
        else:
            for name in targets:
                self._wrapped_loaders.pop((self.scope, name), None)
        self.assigns.append(
            AssignRecord(
                original_node, targets, original_node.value, self.function, mentions, self.scope, tuple(self._ifs)
            )
        )
        self.assigns_and_ifs.append(self.assigns[-1])
        if self._main_guard_depth:
            self.main_guard_assigns.update(targets)
        for if_record in self._if_bodies:
            if_record.body_assigns.update(targets)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        super().visit_AugAssign(node)
        self._frames.append(Mentions())

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        mentions = self._frames.pop()
        targets = tuple(target_names(original_node.target))
        self.aug_assigns.append(AugAssignRecord(targets, mentions, tuple(self._loops), tuple(self._ifs), self.function))

    def visit_If(self, node: cst.If) -> None:
        self._enclosing.append(node)
        record = IfRecord(node, self._exits[-1] if self._exits else None)
        if is_main_guard(node) and not self.scope:
            self._main_guard_depth += 1
        self._ifs.append(record)
        self.assigns_and_ifs.append(record)

    def visit_If_body(self, node: cst.If) -> None:
        self._if_bodies.append(self._ifs[-1])

    def leave_If_body(self, node: cst.If) -> None:
        self._if_bodies.pop()

    def visit_If_test(self, node: cst.If) -> None:
        self._frames.append(self._ifs[-1].test)

    def leave_If_test(self, node: cst.If) -> None:
        self._frames.pop()
        self._ifs[-1].modulo = _has_modulo(node.test)

    def leave_If(self, original_node: cst.If) -> None:
        self._enclosing.pop()
        self._ifs.pop()
        if is_main_guard(original_node) and not self.scope:
            self._main_guard_depth -= 1

    def visit_With(self, node: cst.With) -> None:
        self._enclosing.append(node)
        if any(_disables_grad(item.item, self.names, self.scope) for item in node.items):
            self._no_grad_depth += 1
            # ``for x, y in loader: with torch.no_grad(): ...``: the loops around it evaluate too.
            for loop in self._loops:
                loop.no_grad = True

    def leave_With(self, original_node: cst.With) -> None:
        self._enclosing.pop()
        if any(_disables_grad(item.item, self.names, self.scope) for item in original_node.items):
            self._no_grad_depth -= 1

    def visit_For(self, node: cst.For) -> None:
        self._enclosing.append(node)
        super().visit_For(node)
        self._order += 1
        # ``loaders[0]`` of a tuple of loaders: the loaders owner says what it holds.
        loader = iterated_name(node.iter, self.names, self.scope)
        loop = LoopRecord(
            node,
            self.function,
            self._wrapped_loaders.get((self.scope, loader or ""), loader),
            loop_batch_names(node, self.names, self.scope),
            no_grad=self._no_grad_depth > 0,
            order=self._order,
            scope=self.scope,
            enclosing=tuple(self._enclosing),
        )
        if len(self.scope) >= 2 and self.scope[0] in self.classes:
            loop.method = self.scope[1]
        loop.through_calls = iterated_name(node.iter, self.names, self.scope, through_any_call=True)
        loop.nested = next(
            (path for n in range(len(self.scope), 1, -1) if (path := ".".join(self.scope[:n])) in self.nested_defs),
            None,
        )
        self.loops.append(loop)
        self._loops.append(loop)
        self._exits.append(loop)

    def leave_For(self, original_node: cst.For) -> None:
        self._enclosing.pop()
        self._loops.pop()
        self._exits.pop()

    def visit_While(self, node: cst.While) -> None:
        self._enclosing.append(node)
        self._exits.append(WhileRecord(node))

    def leave_While(self, original_node: cst.While) -> None:
        self._enclosing.pop()
        self._exits.pop()

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._order += 1
        loader = dotted(iterated(node.iter, self.names, self.scope))
        no_grad = self._no_grad_depth > 0
        self.comprehension_loops.append((self.function, loader, len(self.collected) - 1, no_grad, self._order))

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None and len(self.scope) == 1:
            self.returns.append((self.function, node.value))
        elif node.value is not None and len(self.scope) == 2 and self.scope[0] in self.classes:
            self.method_returns.append((self.scope, node.value))
        elif node.value is not None and ".".join(self.scope) in self.nested_defs:
            self.nested_returns.append((".".join(self.scope), node.value))

    def visit_Break(self, node: cst.Break) -> None:
        self.breaks.append((node, tuple(self._exits), tuple(self._ifs), self.function))

    def visit_Call(self, node: cst.Call) -> None:
        self._not_values.add(id(node.func))
        self._not_values.update(id(arg.keyword) for arg in node.args if arg.keyword is not None)
        if self._if_bodies and isinstance(node.func, cst.Attribute) and node.func.attr.value == "cuda":
            for record in self._if_bodies:
                record.body_moves_to_cuda = True
        if self._frames:
            frame = self._frames[-1]
            func = node.func
            callee = dotted(func)
            if callee is not None:
                frame.calls.add(callee)
            if isinstance(func, cst.Attribute):
                frame.calls.add("." + func.attr.value)
                if func.attr.value in {"parameters", "named_parameters"} and dotted(func.value) is not None:
                    frame.parameter_receivers.add(dotted(func.value))  # type: ignore[arg-type]
        backward = is_backward(node)
        for exit_loop in self._exits:
            if isinstance(exit_loop, WhileRecord):
                if backward:
                    exit_loop.backward_calls.append(node)
                if (callee_name := dotted(node.func)) is not None:
                    exit_loop.calls.add(callee_name)
        if backward:
            for loop in self._loops:
                loop.backward_calls.append(node)
        method = self.instance_method_called(node)
        if method is not None:
            self.classes[self.scope[0]].method_calls[self.scope[1]].add(method)
            for loop in self._loops:
                loop.method_calls.add(method)
        self._order += 1
        self.calls.append(
            CallRecord(
                node,
                self.scope,
                self.function,
                tuple(self._loops),
                tuple(self._ifs),
                self._order,
                in_main_guard=self._main_guard_depth > 0,
                no_grad=self._no_grad_depth > 0,
            )
        )


def _has_modulo(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, cst.Modulo) or _has_modulo(node.left) or _has_modulo(node.right)
    if isinstance(node, cst.Comparison):
        return _has_modulo(node.left) or any(_has_modulo(c.comparator) for c in node.comparisons)
    if isinstance(node, cst.BooleanOperation):
        return _has_modulo(node.left) or _has_modulo(node.right)
    return False


def _disables_grad(expr: cst.BaseExpression, names: NameTable, scope: ScopeKey) -> bool:
    """Whether a ``with`` item or a decorator turns gradients off: ``torch.no_grad()``,
    ``torch.inference_mode()`` (and their ``torch.autograd`` spellings), ``torch.set_grad_enabled(False)``.
    The one reading of it: rules ask the analysis's loops (``RuleTransformer.evaluates``)."""
    callee = expr.func if isinstance(expr, cst.Call) else expr
    qualified = names.qualified_name(callee, scope, strict=False)
    if qualified in NO_GRAD_CONTEXTS:
        return True
    if qualified not in GRAD_SWITCHES or not isinstance(expr, cst.Call) or not expr.args:
        return False
    # ``set_grad_enabled(phase == "train")`` depends on the run: not an evaluation by itself.
    first = expr.args[0].value
    return isinstance(first, cst.Name) and first.value == "False"


# -- conclusions --------------------------------------------------------------------------
