"""One read-only pass over a script that fills :class:`~codemods.facts.ScriptFacts`.

The pass records raw observations (assignments, calls, loops, function signatures), because a name's
role is often only known later in the file: ``train_loader`` is a parameter of ``train()`` long
before ``main()`` builds the DataLoader it receives. :func:`analyse` then draws the conclusions:

* roles come from constructors matched by qualified name (``torch.optim.*`` → optimizer,
  ``torch.utils.data.DataLoader`` → loader, ``torch.optim.lr_scheduler.*`` → scheduler,
  ``torch.device(...)`` → device); a model is whatever an optimizer gets ``.parameters()`` of;
* roles flow from call-site arguments into the parameters of the module-level functions they call;
* a loop over a loader is a *train* loop when ``.backward()`` runs in it (directly or in a function
  it calls), an *eval* loop when it runs under ``no_grad``/``inference_mode`` or after ``.eval()``.

The same pass records the original position of every statement and call (``codemods.edits``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Union

import libcst as cst

from accel_convert.codemods.engine.devices import is_move, peel_moves
from accel_convert.codemods.engine.facts import MODULE, LoopFacts, RunContext, ScriptFacts, callers_closure
from accel_convert.codemods.engine.findings import FILE_START
from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.names import NameCollector, NameTable, ScopeKey
from accel_convert.codemods.engine.positions import POSITIONED_TYPES, OriginIndex, handler_sites, original_sites
from accel_convert.codemods.engine.program_seeds import (
    ProgramSeeds,
    library_home,
    program_callee,
    seed_imported_calls,
    seed_loader_factories,
    seed_parameter_roles,
)
from accel_convert.codemods.engine.syntax import (
    calls_in,
    class_methods,
    dotted,
    instance_parameter,
    is_host_number,
    is_main_guard,
    mean_reduced,
    names_in,
    names_variable,
    nodes_in,
    parameter_filled,
    parameter_names,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    ACCELERATORS,
    AUTOCASTS,
    DATA_LOADERS,
    DEVICE_CALLS,
    FEATURES,
    GRAD_SCALERS,
    GRAD_SWITCHES,
    LOADER_PASS_THROUGH_METHODS,
    MODEL_COPIES,
    NETWORK_FETCHES,
    NO_GRAD_CONTEXTS,
    PATH_CONSTRUCTORS,
    PER_PROCESS_PATHS,
    PROGRESS_BARS,
    TRACKER_CONSTRUCTORS,
    is_optimizer,
    is_scheduler,
)
from accel_convert.codemods.engine.walk import walk

# -- raw observations ------------------------------------------------------------------------


@dataclass(eq=False)
class _Loop:
    node: cst.For
    function: str
    iterated: str | None
    targets: tuple[str, ...]
    no_grad: bool
    #: Sequence number of the loop in the pass (orders it against .eval()/.train() calls).
    order: int
    has_backward: bool = False
    calls: set[str] = field(default_factory=set)
    #: Methods of the enclosing class called on ``self`` in the loop (``self._run_batch(...)``).
    method_calls: set[str] = field(default_factory=set)
    #: The method holding the loop, for a loop in a module-level class.
    method: str | None = None
    #: What it iterates through any calls (``progress(test_loader)`` of the file's own wrapper):
    #: where ``iterated`` knows no such wrapper, an evaluation over it is still one.
    through_calls: str | None = None


@dataclass(eq=False)
class _WhileLoop:
    """A ``while`` loop, for the ``break`` statements that leave it (``while True: ...; if loss <
    1e-3: break``)."""

    node: cst.While
    has_backward: bool = False
    #: Callees written as names or dotted paths in its body.
    calls: set[str] = field(default_factory=set)


#: The loops a ``break`` can leave.
_Exit = Union["_Loop", _WhileLoop]


@dataclass(eq=False)
class _Frame:
    """What an expression (an assignment's value, an ``if`` test) mentions."""

    names: set[str] = field(default_factory=set)
    #: Callees written as names or dotted paths (``model``, ``loss.item``); ``.item`` for any.
    calls: set[str] = field(default_factory=set)
    #: Receivers of ``.parameters()`` / ``.named_parameters()``.
    parameter_receivers: set[str] = field(default_factory=set)


@dataclass(eq=False)
class _If:
    node: cst.If
    #: The innermost loop around the ``if``, ``for`` or ``while`` (None outside loops).
    loop: _Exit | None
    test: _Frame = field(default_factory=_Frame)
    modulo: bool = False
    #: Its body (not its ``else``) calls ``.cuda()`` somewhere: its test is a device switch.
    body_moves_to_cuda: bool = False
    #: What its body (not its ``else``) assigns: a device chosen there makes its test a switch.
    body_assigns: set[str] = field(default_factory=set)


@dataclass
class _Call:
    node: cst.Call
    scope: ScopeKey
    function: str
    loops: tuple[_Loop, ...]
    ifs: tuple[_If, ...]
    order: int
    in_main_guard: bool = False


@dataclass
class _Assign:
    node: cst.Assign
    targets: tuple[str, ...]
    value: cst.BaseExpression
    function: str
    mentions: _Frame
    scope: ScopeKey
    #: The ``if`` statements around it (body or ``else``), outermost first.
    ifs: tuple[_If, ...] = ()

    @property
    def names(self) -> set[str]:
        return self.mentions.names


@dataclass(eq=False)
class _AugAssign:
    """``total += loss.item()``, ``bad_epochs += 1``: where per-process sums and counters grow."""

    targets: tuple[str, ...]
    #: Names on both sides (the target is read too).
    mentions: _Frame
    loops: tuple[_Loop, ...]
    ifs: tuple[_If, ...]


@dataclass
class _Class:
    """A module-level class: what converting training code held in it needs to know."""

    node: cst.ClassDef
    #: ``__init__``'s parameters after ``self`` (None: the class defines no ``__init__``).
    init_params: tuple[str, ...] | None = None
    #: Method → the name of its instance parameter (``self``); static and class methods have none.
    self_names: dict[str, str | None] = field(default_factory=dict)
    #: Method → methods of the class it calls on its instance (``self.build_model()``).
    method_calls: dict[str, set[str]] = field(default_factory=dict)


class _Recorder(NameCollector):
    """Walks the module once and writes down what the conclusions need."""

    #: Statements and calls, in pre-order: ``walk`` appends them to ``collected``.
    collected_types = POSITIONED_TYPES

    def __init__(self) -> None:
        super().__init__()
        self.collected: list[cst.CSTNode] = []
        #: Every identifier (a name, or an attribute's name after the dot) and every dotted path
        #: (``model.state_dict``) → the index in ``collected`` of the statement or call it was last
        #: inside: enough to find its line.
        self.words: dict[str, list[int]] = {}
        self.calls: list[_Call] = []
        self.assigns: list[_Assign] = []
        self.loops: list[_Loop] = []
        #: Comprehensions' ``for`` clauses: (function, what they iterate, index in ``collected``
        #: of the statement or call they are in, under ``no_grad``, order among loops).
        self.comprehension_loops: list[tuple[str, str | None, int, bool, int]] = []
        self.breaks: list[tuple[cst.Break, tuple[_Exit, ...], tuple[_If, ...], str]] = []
        self.aug_assigns: list[_AugAssign] = []
        #: Module-level functions → parameter names.
        self.defs: dict[str, tuple[str, ...]] = {}
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
        self.main_guard_assigns: set[str] = set()
        #: Module-level classes by name.
        self.classes: dict[str, _Class] = {}
        #: Every assignment and ``if``, in source order (where device switches are read).
        self.assigns_and_ifs: list[_Assign | _If] = []
        #: The ``if`` statements whose body the walk is in.
        self._if_bodies: list[_If] = []
        #: (scope, name) → the loader a progress bar bound to that name wraps
        #: (``pbar = tqdm(train_loader)``, then ``for batch in pbar``).
        self._wrapped_loaders: dict[tuple[ScopeKey, str], str] = {}
        self._loops: list[_Loop] = []
        #: The ``for`` and ``while`` loops the walk is in, innermost last: what a ``break`` leaves.
        self._exits: list[_Exit] = []
        self._ifs: list[_If] = []
        self._frames: list[_Frame] = []
        self._no_grad_depth = 0
        #: Per enclosing ``def``: whether a decorator disables gradients in it.
        self._decorated: list[bool] = []
        self._main_guard_depth = 0
        self._order = 0

    @property
    def function(self) -> str:
        return self.scope[0] if self.scope else MODULE

    def visit_Name(self, node: cst.Name) -> None:
        self.words.setdefault(node.value, []).append(len(self.collected) - 1)
        if self._frames:
            self._frames[-1].names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # The attribute's own name is a Name node below: visit_Name indexes it.
        path = dotted(node)
        if path is not None:
            self.words.setdefault(path, []).append(len(self.collected) - 1)
            if self._frames:
                self._frames[-1].names.add(path)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.with_items.append(node)

    # -- functions ----------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if not self.scope:
            self.classes[node.name.value] = _Class(node)
        super().visit_ClassDef(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        if len(self.scope) == 2 and self.scope[0] in self.classes:
            self._method(self.classes[self.scope[0]], node)
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
        self._no_grad_depth -= self._decorated.pop()
        super().leave_FunctionDef(original_node)

    def _method(self, owner: _Class, node: cst.FunctionDef) -> None:
        params = [*node.params.posonly_params, *node.params.params]
        instance = instance_parameter(node)
        owner.self_names[node.name.value] = instance
        owner.method_calls.setdefault(node.name.value, set())
        if node.name.value == "__init__" and instance is not None:
            rest = [*params[1:], *node.params.kwonly_params]
            owner.init_params = tuple(param.name.value for param in rest)

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
        self._frames.append(_Frame())

    def leave_Assign(self, original_node: cst.Assign) -> None:
        mentions = self._frames.pop()
        targets = tuple(name for target in original_node.targets for name in target_names(target.target))
        wrapped = _iterated(original_node.value, self.names, self.scope) if len(targets) == 1 else None
        if wrapped is not None and isinstance(original_node.value, cst.Call):
            self._wrapped_loaders[(self.scope, targets[0])] = wrapped
        else:
            for name in targets:
                self._wrapped_loaders.pop((self.scope, name), None)
        self.assigns.append(
            _Assign(original_node, targets, original_node.value, self.function, mentions, self.scope, tuple(self._ifs))
        )
        self.assigns_and_ifs.append(self.assigns[-1])
        if self._main_guard_depth:
            self.main_guard_assigns.update(targets)
        for record in self._if_bodies:
            record.body_assigns.update(targets)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        super().visit_AugAssign(node)
        self._frames.append(_Frame())

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        mentions = self._frames.pop()
        targets = tuple(target_names(original_node.target))
        self.aug_assigns.append(_AugAssign(targets, mentions, tuple(self._loops), tuple(self._ifs)))

    def visit_If(self, node: cst.If) -> None:
        record = _If(node, self._exits[-1] if self._exits else None)
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
        self._ifs.pop()
        if is_main_guard(original_node) and not self.scope:
            self._main_guard_depth -= 1

    def visit_With(self, node: cst.With) -> None:
        if any(_disables_grad(item.item, self.names, self.scope) for item in node.items):
            self._no_grad_depth += 1
            # ``for x, y in loader: with torch.no_grad(): ...``: the loops around it evaluate too.
            for loop in self._loops:
                loop.no_grad = True

    def leave_With(self, original_node: cst.With) -> None:
        if any(_disables_grad(item.item, self.names, self.scope) for item in original_node.items):
            self._no_grad_depth -= 1

    def visit_For(self, node: cst.For) -> None:
        super().visit_For(node)
        self._order += 1
        iterated = _iterated(node.iter, self.names, self.scope)
        loop = _Loop(
            node,
            self.function,
            self._wrapped_loaders.get((self.scope, iterated or ""), iterated),
            _loop_targets(node, self.names, self.scope),
            no_grad=self._no_grad_depth > 0,
            order=self._order,
        )
        if len(self.scope) >= 2 and self.scope[0] in self.classes:
            loop.method = self.scope[1]
        wrapped = node.iter
        while isinstance(wrapped, cst.Call) and wrapped.args:
            wrapped = wrapped.args[0].value
        loop.through_calls = dotted(wrapped)
        self.loops.append(loop)
        self._loops.append(loop)
        self._exits.append(loop)

    def leave_For(self, original_node: cst.For) -> None:
        self._loops.pop()
        self._exits.pop()

    def visit_While(self, node: cst.While) -> None:
        self._exits.append(_WhileLoop(node))

    def leave_While(self, original_node: cst.While) -> None:
        self._exits.pop()

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._order += 1
        iterated = _iterated(node.iter, self.names, self.scope)
        no_grad = self._no_grad_depth > 0
        self.comprehension_loops.append((self.function, iterated, len(self.collected) - 1, no_grad, self._order))

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None and len(self.scope) == 1:
            self.returns.append((self.function, node.value))
        elif node.value is not None and len(self.scope) == 2 and self.scope[0] in self.classes:
            self.method_returns.append((self.scope, node.value))

    def visit_Break(self, node: cst.Break) -> None:
        self.breaks.append((node, tuple(self._exits), tuple(self._ifs), self.function))

    def visit_Call(self, node: cst.Call) -> None:
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
        for exit_loop in self._exits:
            if isinstance(exit_loop, _WhileLoop):
                exit_loop.has_backward = exit_loop.has_backward or _is_backward(node)
                if (callee_name := dotted(node.func)) is not None:
                    exit_loop.calls.add(callee_name)
        method = self.instance_method_called(node)
        if method is not None:
            self.classes[self.scope[0]].method_calls[self.scope[1]].add(method)
            for loop in self._loops:
                loop.method_calls.add(method)
        self._order += 1
        self.calls.append(
            _Call(
                node,
                self.scope,
                self.function,
                tuple(self._loops),
                tuple(self._ifs),
                self._order,
                in_main_guard=self._main_guard_depth > 0,
            )
        )


#: Methods that collect a value into their receiver (a list of batch losses, an average meter).
_COLLECTING_METHODS = frozenset({"append", "extend", "update"})

#: The last names of the GradScalers and autocasts (``GradScaler``, ``autocast``).
_AMP_FINAL_NAMES = frozenset(name.rpartition(".")[2] for name in GRAD_SCALERS | AUTOCASTS)


def _read_switch(node: cst.CSTNode, negated: bool, found: list[tuple[str, bool]]) -> None:
    """The flags (``args.no_cuda``) a device decision tests, and whether each is under ``not``."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        _read_switch(node.expression, not negated, found)
    elif isinstance(node, cst.Attribute) and dotted(node) is not None:
        found.append((dotted(node), negated))  # type: ignore[arg-type]
    elif isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
        _read_switch(node.left, negated, found)
        _read_switch(node.right, negated, found)
    elif isinstance(node, cst.IfExp):
        _read_switch(node.test, negated, found)
    elif isinstance(node, cst.Call):
        for arg in node.args:  # torch.device("cuda" if args.cuda else "cpu")
            _read_switch(arg.value, negated, found)


def _has_modulo(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, cst.Modulo) or _has_modulo(node.left) or _has_modulo(node.right)
    if isinstance(node, cst.Comparison):
        return _has_modulo(node.left) or any(_has_modulo(c.comparator) for c in node.comparisons)
    if isinstance(node, cst.BooleanOperation):
        return _has_modulo(node.left) or _has_modulo(node.right)
    return False


#: What a function that only builds a command-line parser and parses it calls.
ARGUMENT_PARSER_CALLS = frozenset(
    {
        "ArgumentParser",
        "add_argument",
        "add_argument_group",
        "add_mutually_exclusive_group",
        "add_subparsers",
        "add_parser",
        "set_defaults",
        "parse_args",
        "parse_known_args",
    }
)

#: Builtins that wrap an iterable without changing what it yields (the first argument).
ITERABLE_WRAPPERS = {"enumerate", "iter", "zip"}


def _unwrapped(expr: cst.BaseExpression, accelerators: set[str]) -> cst.BaseExpression:
    """``accelerator.unwrap_model(model)`` → ``model`` (a script already converted); else ``expr``."""
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == "unwrap_model"
        and dotted(expr.func.value) in accelerators
        and expr.args
    ):
        return expr.args[0].value
    return expr


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


def _iterated(expr: cst.BaseExpression, names: NameTable, scope: ScopeKey) -> str | None:
    """The iterable of ``for ... in enumerate(tqdm(loader))``: ``loader``. Wrappers are matched
    by qualified name (tqdm), as unshadowed builtins (enumerate; ``zip(cls_loader, reg_loader)``
    of multi-task training gives its first loader, the others are prepared as loaders too), or as
    a metric logger's ``log_every(loader, print_freq, header)`` method."""
    while isinstance(expr, cst.Call) and expr.args:
        func = expr.func
        builtin = (
            isinstance(func, cst.Name) and func.value in ITERABLE_WRAPPERS and not names.is_bound(func.value, scope)
        )
        logger = isinstance(func, cst.Attribute) and func.attr.value in LOADER_PASS_THROUGH_METHODS
        if not builtin and not logger and names.qualified_name(func, scope, strict=False) not in PROGRESS_BARS:
            break
        if expr.args[0].keyword is not None or expr.args[0].star:
            break
        expr = expr.args[0].value
    return dotted(expr)


def _loop_targets(node: cst.For, names: NameTable, scope: ScopeKey) -> tuple[str, ...]:
    """Names bound per batch; the counter of ``enumerate`` is not batch data."""
    target = node.target
    if (
        isinstance(node.iter, cst.Call)
        and dotted(node.iter.func) == "enumerate"
        and not names.is_bound("enumerate", scope)
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
    ):
        return target_names(target.elements[1].value)
    return target_names(target)


# -- conclusions --------------------------------------------------------------------------


class _Conclusions:
    """Draws ScriptFacts from a recorder's observations."""

    def __init__(self, recorder: _Recorder, origins: OriginIndex, seeds: ProgramSeeds | None = None) -> None:
        self.r = recorder
        self.origins = origins
        self.facts = ScriptFacts(names=recorder.names, context=RunContext(origins), program=seeds)
        #: What the other modules of the program say (None: the script is converted alone).
        self.seeds = seeds
        self._qualified: dict[int, str | None] = {}
        #: Module-level functions that run a backward, directly or through their calls.
        self.backward_functions: set[str] = set()
        self.assigned = {name for assign in recorder.assigns for name in assign.targets}
        #: (function, parameter) → (calling function, argument name) at each call site.
        self.arguments: dict[tuple[str, str], set[tuple[str, str]]] = {}
        #: (function, name) → the file's classes the function binds the name to an instance of.
        self._instances: dict[tuple[str, str], set[str]] | None = None
        #: Where the first optimizer is built: the function the accelerator goes into.
        self.optimizer_home: str | None = None
        #: Loops over loaders, with the names the loader goes by at its call sites.
        self.loader_loops: list[tuple[_Loop, set[str]]] = []
        #: Module-level class → the calls constructing it (``Trainer(...)``).
        self.constructions: dict[str, list[_Call]] = {}
        #: (class, method) pairs that run a backward, directly or through the methods they call.
        self.backward_methods: set[tuple[str, str]] = set()

    def qualified(self, call: _Call) -> str | None:
        """The call's qualified name, resolved once per call (several steps ask for every call)."""
        key = id(call.node)
        if key not in self._qualified:
            self._qualified[key] = self.r.names.qualified_name(call.node.func, call.scope, strict=False)
        return self._qualified[key]

    def site(self, node: cst.CSTNode) -> Site:
        return self.origins.site(node) or FILE_START

    def _word_lines(self) -> None:
        """``facts.word_lines``: the line of the statement or call each identifier was met in.
        In pre-order, the last statement or call entered before a name lies inside the innermost
        statement holding the name, so its first line is inside that statement's lines."""
        line_of = [self.site(node).line for node in self.r.collected]
        for word, indices in self.r.words.items():
            self.facts.word_lines[word] = sorted({line_of[index] for index in indices})

    def run(self) -> ScriptFacts:
        facts = self.facts
        facts.imports = self.r.names.imported_names()
        facts.uses_torch = self.r.names.any_import_of("torch")
        self._word_lines()
        self._call_graph()
        seeds = self.seeds
        if seeds is not None:
            seed_imported_calls(self, seeds)
        self._argument_parser()
        self._constructors()
        self._settings_class_devices()
        if seeds is not None:
            seed_loader_factories(self, seeds)
        self._optimizers_and_models()
        self._trackers()
        if "getLogger" in self.r.words:
            self._loggers()
        self._batch_mean_losses()
        if seeds is not None:
            seed_parameter_roles(self, seeds)
        self._flow_into_parameters()
        self._loops()
        self._models_trained_by_hand()
        self._schedulers()
        if seeds is not None and seeds.library:
            library_home(self, seeds)
            self._library_training_classes()
            self._library_training_functions()
        else:
            self._home()
        self._batch_names()
        self._helpers()
        self._features()
        self._mixed_precision()
        self._assign_sites()
        self._breaks()
        self._per_process_paths()
        self._device_switches()
        return facts

    def _trackers(self) -> None:
        for assign in self.r.assigns:
            value = assign.value
            if isinstance(value, cst.Call) and (
                self.r.names.qualified_name(value.func, assign.scope) in TRACKER_CONSTRUCTORS
            ):
                self.facts.trackers.update(assign.targets)

    def _loggers(self) -> None:
        """``facts.loggers``: names every assignment of which is ``logging.getLogger(...)``."""
        bound: dict[str, bool] = {}
        for assign in self.r.assigns:
            value = assign.value
            is_logger = isinstance(value, cst.Call) and (
                self.r.names.qualified_name(value.func, assign.scope) == "logging.getLogger"
            )
            for target in assign.targets:
                bound[target] = bound.get(target, True) and is_logger
        self.facts.loggers = {name for name, only_loggers in bound.items() if only_loggers}

    def _batch_mean_losses(self) -> None:
        for assign in self.r.assigns:
            value = assign.value
            if not isinstance(value, cst.Call) or len(assign.node.targets) != 1 or len(assign.targets) != 1:
                continue
            qualified = self.r.names.qualified_name(value.func, assign.scope) or ""
            if qualified.startswith("torch.nn.") and qualified.endswith("Loss") and mean_reduced(value):
                self.facts.batch_mean_losses.setdefault(assign.function, set()).update(assign.targets)

    def _argument_parser(self) -> None:
        """``parser_options`` and ``parsed_arguments``: what the argument parser defines, and
        the names its parse result is bound to."""
        facts = self.facts
        for call in self.r.calls:
            node = call.node
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "add_argument":
                dest = next((arg.value for arg in node.args if arg.keyword and arg.keyword.value == "dest"), None)
                names = [dest] if dest is not None else [arg.value for arg in node.args if arg.keyword is None]
                for value in names:
                    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
                        text = value.evaluated_value
                        if dest is not None or text.startswith("--"):
                            facts.parser_options.add(text.lstrip("-").replace("-", "_"))
        parsed_in: dict[str, set[str]] = {}
        for assign in self.r.assigns:
            value = assign.value
            # ``parser.parse_args()``, or torchvision's ``get_args_parser().parse_args()``.
            if (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in ("parse_args", "parse_known_args")
            ):
                facts.parsed_arguments |= {name.partition(".")[0] for name in assign.targets}
                parsed_in.setdefault(assign.function, set()).update(assign.targets)
        # ``def get_args(): ...; return parser.parse_args()`` (or ``args = ...; return args``):
        # ``args = get_args()`` is argument parsing too.
        for function, value in self.r.returns:
            parses = isinstance(value, cst.Call) and (dotted(value.func) or "").rpartition(".")[2] in (
                "parse_args",
                "parse_known_args",
            )
            if function != "<module>" and (parses or dotted(value) in parsed_in.get(function, ())):
                facts.argument_parsing_functions.add(function)
        # Only parsing: one that also prints or writes (``print(args)``) gets the accelerator.
        facts.argument_parsing_functions -= {
            call.function
            for call in self.r.calls
            if (dotted(call.node.func) or "").rpartition(".")[2] not in ARGUMENT_PARSER_CALLS
        }
        for assign in self.r.assigns:
            value = assign.value
            if isinstance(value, cst.Call) and dotted(value.func) in facts.argument_parsing_functions:
                facts.parsed_arguments |= {name.partition(".")[0] for name in assign.targets}

    def _device_switches(self) -> None:
        """``device_switches``: the flags the device choice tests (``use_cuda = not args.no_cuda
        and ...``, ``if args.cuda: model.cuda()``), in source order."""
        facts = self.facts
        device = facts.device_names | facts.cuda_flags
        for record in self.r.assigns_and_ifs:
            if isinstance(record, _If):
                # ``if not args.disable_cuda and torch.cuda.is_available(): args.device = ...``
                if record.body_moves_to_cuda or record.body_assigns & facts.device_names:
                    _read_switch(record.node.test, False, facts.device_switches)
                continue
            if set(record.targets) & device:
                _read_switch(record.value, False, facts.device_switches)

    def _per_process_paths(self) -> None:
        """Names bound to a folder or file only this process has (``tempfile.mkdtemp()``), and
        names built from them (``os.path.join(workdir, "last.pt")``)."""
        found = self.facts.per_process_paths
        # ``with tempfile.TemporaryDirectory() as workdir:`` first: paths are built from it.
        for item in self.r.with_items:
            call = item.item
            if isinstance(call, cst.Call) and self.r.names.qualified_name(call.func) in PER_PROCESS_PATHS:
                if item.asname is not None:
                    found.update(target_names(item.asname.name))
        for _ in range(3):  # a path built from a path built from the folder, or handed on
            for assign in self.r.assigns:
                value = assign.value
                builds_path = isinstance(value, (cst.BinaryOperation, cst.FormattedString)) or (
                    isinstance(value, cst.Call)
                    and (
                        (dotted(value.func) or "").endswith("join")
                        or self.r.names.qualified_name(value.func, assign.scope) in PATH_CONSTRUCTORS
                    )
                )
                # ``tempfile.mkdtemp()`` itself, or a path built around one
                # (``os.path.join(tempfile.mkdtemp(), "vocab.json")``).
                creates = any(
                    isinstance(node, cst.Call)
                    and self.r.names.qualified_name(node.func, assign.scope) in PER_PROCESS_PATHS
                    for node in ([value] if not builds_path else nodes_in(value))
                )
                if creates or (builds_path and assign.names & found):
                    found.update(assign.targets)
            found.update(self._parameters_given(found))

    def _parameters_given(self, paths: set[str]) -> set[str]:
        """Parameters of module-level functions that every call of the function fills with one
        of ``paths`` (``build_vocab(texts, workdir)`` with ``workdir = tempfile.mkdtemp()``): in
        the function they name this process's folder too."""
        calls: dict[str, list[_Call]] = {}
        for call in self.r.calls:
            func = call.node.func
            if isinstance(func, cst.Name) and func.value in self.r.defs:
                calls.setdefault(func.value, []).append(call)
        given: set[str] = set()
        for function, sites in calls.items():
            params = self.r.defs[function]
            for param in params:
                filled = [
                    arg.value
                    for call in sites
                    for index, arg in enumerate(call.node.args)
                    if not arg.star and parameter_filled(arg, index, params) == param
                ]
                if len(filled) == len(sites) and all(dotted(value) in paths for value in filled):
                    given.add(param)
        return given

    def _call_graph(self) -> None:
        for call in self.r.calls:
            callee = call.node.func
            if isinstance(callee, cst.Name) and callee.value in self.r.defs:
                self.facts.call_graph.setdefault(call.function, set()).add(callee.value)
                params = self.r.defs[callee.value]
                limit = self.r.positional_limits.get(callee.value)
                if limit is not None and sum(arg.keyword is None for arg in call.node.args) > limit:
                    # More positional arguments than the function takes: the call fails as it
                    # stands, and what fills which parameter is anybody's guess.
                    params = ()
                for index, arg in enumerate(call.node.args):
                    name = dotted(arg.value)
                    if name is None or arg.star:
                        continue
                    param = parameter_filled(arg, index, params)
                    if param is not None:
                        self.arguments.setdefault((callee.value, param), set()).add((call.function, name))
                for loop in call.loops:
                    loop.calls.add(callee.value)
            elif isinstance(callee, cst.Name) and callee.value in self.r.classes:
                self._construction(call, self.r.classes[callee.value])
            elif isinstance(callee, cst.Attribute) and callee.attr.value in LOADER_PASS_THROUGH_METHODS:
                self._into_pass_through_method(call, callee.attr.value)
            elif isinstance(callee, cst.Attribute):
                self._into_method(call, callee)
        self._attribute_aliases()
        self._loop_aliases()

    def _into_method(self, call: _Call, callee: cst.Attribute) -> None:
        """``trainer.fit(train_loader, val_loader)``, ``Trainer(...).fit(...)`` or, in a method,
        ``self.evaluate(val_loader)``: the arguments flow into the parameters of that method of
        the file's class (keyed by the class name, as for ``__init__``), so its loop over
        ``loader`` is a loop over the (prepared) validation loader."""
        owner = self._instance_class(call, callee.value)
        if owner is None:
            return
        definition = next(
            (m for m in class_methods(self.r.classes[owner].node) if m.name.value == callee.attr.value), None
        )
        if definition is None or self.r.classes[owner].self_names.get(callee.attr.value) is None:
            return
        params = parameter_names(definition)[1:]
        for index, arg in enumerate(call.node.args):
            value = dotted(arg.value)
            if value is None or arg.star:
                continue
            param = parameter_filled(arg, index, params)
            if param is not None and param in params:
                self.arguments.setdefault((owner, param), set()).add((call.function, value))

    def _instance_class(self, call: _Call, receiver: cst.BaseExpression) -> str | None:
        """The file's class ``receiver`` is an instance of: ``self`` in one of its methods, a
        construction (``Trainer(...)``), or a name the same function binds to one."""
        if isinstance(receiver, cst.Call):
            built = dotted(receiver.func)
            return built if built in self.r.classes else None
        if not isinstance(receiver, cst.Name):
            return None
        scope = call.scope
        if (
            len(scope) >= 2
            and scope[0] in self.r.classes
            and self.r.classes[scope[0]].self_names.get(scope[1]) == receiver.value
        ):
            return scope[0]
        if self._instances is None:
            self._instances = {}
            for assign in self.r.assigns:
                value = assign.value
                if isinstance(value, cst.Call) and dotted(value.func) in self.r.classes:
                    for target in assign.targets:
                        self._instances.setdefault((assign.function, target), set()).add(dotted(value.func) or "")
        found = self._instances.get((call.function, receiver.value), set())
        return next(iter(found)) if len(found) == 1 else None

    def _into_pass_through_method(self, call: _Call, method: str) -> None:
        """``metric_logger.log_every(data_loader, ...)`` with the file's own ``MetricLogger``:
        the loader flows into the method's first parameter (keyed by the class name, as for
        ``__init__``), so the method's loop over it is a loop over the (prepared) loader."""
        if not call.node.args or call.node.args[0].keyword is not None or call.node.args[0].star:
            return
        value = dotted(call.node.args[0].value)
        if value is None:
            return
        for name, owner in self.r.classes.items():
            definition = next((m for m in class_methods(owner.node) if m.name.value == method), None)
            if definition is None or owner.self_names.get(method) is None:
                continue
            params = parameter_names(definition)
            if len(params) >= 2:
                self.arguments.setdefault((name, params[1]), set()).add((call.function, value))

    def _construction(self, call: _Call, owner: _Class) -> None:
        """``Trainer(model, train_data, ...)``: each argument flows into ``__init__``'s parameter
        (keyed by the class name, which is the analysis' "function" for all its methods)."""
        name = owner.node.name.value
        local = self.r.names.scopes.get(call.scope) if call.scope else None
        if local is not None and local.binds(name):
            return  # a local of the same name
        self.constructions.setdefault(name, []).append(call)
        initialiser = self._initialising_class(name)
        if initialiser != name:
            # ``MSETrainer(model, loader)`` with no ``__init__`` of its own runs its base's: the
            # base is constructed there too, and the arguments fill the base's parameters.
            self.constructions.setdefault(initialiser, []).append(call)
            name, owner = initialiser, self.r.classes[initialiser]
        params = owner.init_params or ()
        for index, arg in enumerate(call.node.args):
            value = dotted(arg.value)
            if value is None or arg.star:
                continue
            param = parameter_filled(arg, index, params)
            if param is not None:
                self.arguments.setdefault((name, param), set()).add((call.function, value))

    def _initialising_class(self, name: str) -> str:
        """The class of this file whose ``__init__`` constructing ``name`` runs: ``name`` itself,
        or, when it defines none, the first of its bases here that does (single inheritance only:
        with several bases the method resolution order decides, and ``name`` is returned)."""
        seen = {name}
        current = name
        while self.r.classes[current].init_params is None:
            bases = [dotted(base.value) for base in self.r.classes[current].node.bases]
            if len(bases) != 1 or bases[0] not in self.r.classes or bases[0] in seen:
                return name
            current = bases[0]
            seen.add(current)
        return current

    def _attribute_aliases(self) -> None:
        """``self.model = model.to(device)`` in a class: the attribute is what the name holds
        (recorded like an argument flowing into a parameter, so roles and origins follow it)."""
        for assign in self.r.assigns:
            owner = self.r.classes.get(assign.function)
            if owner is None or len(assign.scope) < 2:
                continue
            instance = owner.self_names.get(assign.scope[1])
            values: list[cst.BaseExpression] = [assign.value]
            if len(assign.targets) != 1:
                # ``self.model, self.loader = model, loader``: pairwise.
                value = assign.value
                if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != len(assign.targets):
                    continue
                if any(isinstance(element, cst.StarredElement) for element in value.elements):
                    continue
                values = [element.value for element in value.elements]
            for target, value in zip(assign.targets, values):
                peeled = peel_moves(value)
                source = dotted(peeled) or _keyword_argument(peeled, owner, assign.scope[1])
                if instance is None or not target.startswith(instance + ".") or source is None or source == target:
                    continue
                self.arguments.setdefault((assign.function, target), set()).add((assign.function, source))

    def _loop_aliases(self) -> None:
        """``for split, loader in [("val", val_loader), ("test", test_loader)]:``: the loop's
        target holds each element in turn (recorded like an argument flowing into a parameter, so
        what it is handed to sees where it comes from)."""
        for loop in self.r.loops:
            elements = loop.node.iter
            if not isinstance(elements, (cst.List, cst.Tuple)):
                continue
            for element in elements.elements:
                if isinstance(element, cst.StarredElement):
                    break
                pairs = _pairwise(
                    loop.node.target.target if isinstance(loop.node.target, cst.AssignTarget) else loop.node.target,
                    element.value,
                )
                for target, source in pairs:
                    if target != source:
                        self.arguments.setdefault((loop.function, target), set()).add((loop.function, source))

    def _loader_factories(self) -> dict[str, set[int] | None]:
        """Module-level functions that return DataLoaders (``return train_loader, test_loader``
        or ``return DataLoader(...)``) → the positions of the loaders in the tuple they return
        (``return n_words, train_loader``: ``{1}``; None: what they return is one loader)."""
        built_in = {  # (function, name) for every ``name = DataLoader(...)``
            (assign.function, target)
            for assign in self.r.assigns
            if self._constructs_loader(_peel_moves(assign.value), assign.scope)
            for target in assign.targets
        }
        factories: dict[str, set[int] | None] = {}
        for function, value in self.r.returns:
            is_tuple = isinstance(value, (cst.Tuple, cst.List))
            elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
            for index, element in enumerate(elements):
                if self._constructs_loader(element, (function,)) or (
                    isinstance(element, cst.Name) and (function, element.value) in built_in
                ):
                    positions = factories.get(function, set()) if function in factories else set()
                    factories[function] = None if not is_tuple or positions is None else positions | {index}
        return factories

    @staticmethod
    def _loader_targets(assign: _Assign, positions: set[int] | None) -> set[str]:
        """The names ``n_words, train_loader = get_data()`` binds to loaders: those at the
        positions the factory returns loaders at (every name when unpacking differs)."""
        targets = assign.node.targets
        target = targets[0].target if len(targets) == 1 else None
        if positions is None or not isinstance(target, (cst.Tuple, cst.List)):
            return set(assign.targets)
        names = [element.value for element in target.elements]
        if not all(isinstance(name, cst.Name) for name in names):
            return set(assign.targets)
        return {name.value for index, name in enumerate(names) if index in positions}  # type: ignore[attr-defined]

    def _inline_loaders(self, factories: dict[str, set[int] | None]) -> None:
        """``train(model, DataLoader(train_set, shuffle=True), optimizer)``: a loader built as the
        argument of a call of one of the file's functions (or a factory of the file returning
        one loader) has no name to prepare; the parameter receiving it is a loader, and the
        construction is prepared where it stands."""
        # Functions of other modules of the program that loop over what they are given: the
        # program seeds the parameter's role there (see ``program.INLINE_LOADER``).
        looping = self.seeds.looping_functions if self.seeds is not None else frozenset()
        for call in self.r.calls:
            callee = call.node.func
            if looping and program_callee(self.facts, callee, call.scope) in looping:
                for arg in call.node.args:
                    value = arg.value
                    if not arg.star and isinstance(value, cst.Call) and self._constructs_loader(value, call.scope):
                        self.facts.inline_loaders.append(self.site(value))
                continue
            if not (isinstance(callee, cst.Name) and callee.value in self.r.defs):
                continue
            params = self.r.defs[callee.value]
            for index, arg in enumerate(call.node.args):
                value = arg.value
                if arg.star or not isinstance(value, cst.Call):
                    continue
                builds = self._constructs_loader(value, call.scope) or (
                    isinstance(value.func, cst.Name)
                    and value.func.value in factories
                    and factories[value.func.value] is None
                )
                param = parameter_filled(arg, index, params)
                if builds and param is not None:
                    self.facts.train_loaders.add(param)  # sorted into train/eval by the loops
                    self.facts.inline_loaders.append(self.site(value))

    def _constructs_loader(self, value: cst.BaseExpression, scope: ScopeKey) -> bool:
        return (
            isinstance(value, cst.Call) and self.r.names.qualified_name(value.func, scope, strict=False) in DATA_LOADERS
        )

    def _constructors(self) -> None:
        facts = self.facts
        factories = self._loader_factories()
        self._inline_loaders(factories)
        for assign in self.r.assigns:
            value = _peel_moves(assign.value)
            qualified = (
                self.r.names.qualified_name(value.func, assign.scope, strict=False)
                if isinstance(value, cst.Call)
                else None
            )
            targets = set(assign.targets)
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in factories:
                facts.train_loaders.update(self._loader_targets(assign, factories[value.func.value]))
            elif qualified in DATA_LOADERS and isinstance(value, cst.Call):  # qualified: value is a call
                facts.train_loaders.update(targets)  # sorted into train/eval by the loops below
                self._batch_size(value, assign)
            elif qualified in ACCELERATORS:
                facts.existing_accelerator = assign.targets[0] if assign.targets else None
            elif qualified is not None and is_scheduler(qualified):
                facts.schedulers.update(targets)
            elif self._is_device(assign.value, assign.scope) or dotted(assign.value) in facts.device_names:
                facts.device_names.update(targets)  # ``DEV = device`` aliases it
            elif self._mentions_cuda_availability(assign):
                facts.cuda_flags.update(targets)
            if _is_prepare(assign.value):
                facts.prepared.update(targets)
        if facts.batch_size_expr is None:
            self._factory_batch_size()

    def _settings_class_devices(self) -> None:
        """``class Config: device = "cuda" if torch.cuda.is_available() else "cpu"`` (or a
        ``@dataclass`` field ``device: str = ...``): a settings class without bases choosing the
        device in its body. The script reads it as ``Config.device`` or through an instance
        (``cfg = Config()``, ``cfg.device``): those name the device like a variable, and are
        rebound once the accelerator exists (``facts.settings_devices``): the class attribute of
        a plain class, which its instances read; each instance of a dataclass (which copies the
        default when built), built once with no arguments. Left out (ACC904 stays): a class whose
        instances may hold a device of their own (``cfg.device = ...``, ``self.device = ...``),
        other decorators, a dataclass instance built several times or given arguments."""
        facts = self.facts
        found: dict[str, tuple[str, bool]] = {}  # Config.device → (Config, is a dataclass)
        frozen: set[str] = set()
        for owner, record in self.r.classes.items():
            node = record.node
            decorators = [dotted(d.decorator) or dotted(getattr(d.decorator, "func", None)) for d in node.decorators]
            if node.bases or node.keywords or decorators not in ([], ["dataclass"], ["dataclasses.dataclass"]):
                continue
            for line in node.body.body:
                small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target, value = small.targets[0].target, small.value
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    target, value = small.target, small.value
                else:
                    continue
                if isinstance(target, cst.Name) and self._is_device(value, (owner,)):
                    found[f"{owner}.{target.value}"] = (owner, bool(decorators))
                    if any(isinstance(d.decorator, cst.Call) and d.decorator.args for d in node.decorators):
                        frozen.add(f"{owner}.{target.value}")  # @dataclass(frozen=True): no rebinding
        if not found:
            return
        owners = {owner for owner, _ in found.values()}
        built: dict[str, list[_Assign]] = {}
        for assign in self.r.assigns:
            if len(assign.targets) == 1 and isinstance(assign.value, cst.Call) and dotted(assign.value.func) in owners:
                built.setdefault(assign.targets[0], []).append(assign)
        instances = {name: dotted(sites[0].value.func) for name, sites in built.items()}  # type: ignore[attr-defined]
        for name, (owner, is_dataclass) in found.items():
            attribute = name.split(".", 1)[1]
            mine = [instance for instance, of in instances.items() if of == owner]
            readers = {name} | {f"{instance}.{attribute}" for instance in mine}
            overridden = any(
                target in readers or target == f"self.{attribute}"
                for assign in self.r.assigns
                for target in assign.targets
                if assign.scope != (owner,)
            )
            if is_dataclass:
                # Each instance copies the default: rebind each one, built once and plainly.
                plain = all(len(built[i]) == 1 and not built[i][0].value.args for i in mine)  # type: ignore[attr-defined]
                overridden = overridden or not plain
            if overridden or name in frozen:
                facts.settings_devices_unreached.add(name)
                continue
            rebound = [f"{instance}.{attribute}" for instance in mine] if is_dataclass else []
            facts.settings_devices.update({target: name for target in [name, *rebound]})
            facts.device_names.update(readers)

    def _batch_size(self, call: cst.Call, assign: _Assign) -> None:
        if self.facts.batch_size_expr is not None and not any("train" in t for t in assign.targets):
            return
        found = self._batch_size_argument(call)
        if found is not None:
            self.facts.batch_size_expr = found

    def _batch_size_argument(self, call: cst.Call) -> str | None:
        """The ``batch_size`` a DataLoader call passes (by keyword, second positional argument, or
        in a ``**kwargs`` dict the script builds)."""
        for index, arg in enumerate(call.args):
            if (
                arg.keyword is not None
                and arg.keyword.value == "batch_size"
                or (arg.keyword is None and not arg.star and index == 1)
            ):
                return cst.Module([]).code_for_node(arg.value)
            if arg.star == "**" and isinstance(arg.value, cst.Name):
                found = self._dict_entry(arg.value.value, "batch_size")
                if found is not None:
                    return found
        return None

    def _factory_batch_size(self) -> None:
        """No loader built by assignment gave a batch size: the one a loader factory builds its
        loader with (``return DataLoader(dataset, batch_size=batch_size)``), which is one of its
        parameters the training code passes its batch size for."""
        for function, value in self.r.returns:
            elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
            for element in elements:
                if isinstance(element, cst.Call) and self._constructs_loader(element, (function,)):
                    found = self._batch_size_argument(element)
                    if found is not None:
                        self.facts.batch_size_expr = found
                        return

    def _dict_entry(self, name: str, key: str) -> str | None:
        for assign in self.r.assigns:
            if assign.targets == (name,) and isinstance(assign.value, cst.Dict):
                for element in assign.value.elements:
                    if (
                        isinstance(element, cst.DictElement)
                        and isinstance(element.key, cst.SimpleString)
                        and element.key.evaluated_value == key
                    ):
                        return cst.Module([]).code_for_node(element.value)
        return None

    def _is_device(self, value: cst.BaseExpression, scope: ScopeKey) -> bool:
        if isinstance(value, cst.SimpleString):
            text = value.evaluated_value
            return isinstance(text, str) and (text.startswith("cuda") or text == "mps")
        if isinstance(value, cst.IfExp):
            if self._is_device(value.body, scope) or self._is_device(value.orelse, scope):
                return True
            # ``0 if torch.cuda.is_available() else "cpu"``: a GPU index or the CPU.
            return _is_cpu_string(value.orelse) and any(
                (dotted(node.func) or "").endswith("cuda.is_available") for node in calls_in(value.test)
            )
        if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Call):
            # torch.accelerator.current_accelerator().type
            return self._is_device(value.value, scope)
        if isinstance(value, cst.Attribute) and dotted(value.value) in self.facts.parsed_arguments:
            # ``device = args.device`` from ``--device cuda``: the device string itself.
            option = value.attr.value
            return option in self.facts.parser_options and (option == "device" or option.endswith("_device"))
        if isinstance(value, cst.Call):
            return self.r.names.qualified_name(value.func, scope, strict=False) in DEVICE_CALLS
        return dotted(value) == f"{self.facts.existing_accelerator or 'accelerator'}.device"

    def _mentions_cuda_availability(self, assign: _Assign) -> bool:
        """``use_cuda = not args.no_cuda and torch.cuda.is_available()``."""
        return any(name.endswith("cuda.is_available") for name in assign.names)

    def _optimizer_factories(self) -> dict[str, cst.Call]:
        """Module-level functions that return a new optimizer → the constructor call they return."""
        factories = {}
        for function, value in self.r.returns:
            value = _peel_moves(value)
            if isinstance(value, cst.Call):
                qualified = self.r.names.qualified_name(value.func, (function,), strict=False)
                if qualified is not None and is_optimizer(qualified):
                    factories[function] = value
        return factories

    def _optimizer_methods(self) -> set[str]:
        """Names of methods of the file's classes that return a new optimizer, built in the return
        or bound to a local first (a model's ``configure_optimizers``, as in minGPT and nanoGPT)."""
        found = set()
        for scope, value in self.r.method_returns:
            value = _peel_moves(value)
            if isinstance(value, cst.Name):
                bound = [
                    assign.value
                    for assign in self.r.assigns
                    if assign.scope[:2] == scope and assign.targets == (value.value,)
                ]
                value = _peel_moves(bound[-1]) if len(bound) == 1 else value
            if isinstance(value, cst.Call):
                qualified = self.r.names.qualified_name(value.func, scope, strict=False)
                if qualified is not None and is_optimizer(qualified):
                    found.add(scope[1])
        return found

    def _factory_roots(self, call: cst.Call, factory: str, returned: cst.Call) -> set[str]:
        """``make_optimizer(net)`` whose factory returns ``SGD(model.parameters())``: ``net``."""
        finder = _ParameterReceivers()
        walk(returned, finder)
        params = self.r.defs.get(factory, ())
        passed = {
            (arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else ""): dotted(
                arg.value
            )
            for index, arg in enumerate(call.args)
            if not arg.star
        }
        roots = set()
        for receiver in finder.receivers:
            head, _, rest = receiver.partition(".")
            argument = passed.get(head)
            if argument is not None:
                roots.add(argument)  # the model itself, also for ``model.fc.parameters()``
        return roots

    def _optimizers_and_models(self) -> None:
        facts = self.facts
        factories = self._optimizer_factories()
        optimizer_methods = self._optimizer_methods()
        parameter_sources: dict[str, set[str]] = {}
        for assign in self.r.assigns:
            roots = self._parameter_roots(assign.mentions.parameter_receivers)
            for target in assign.targets:
                parameter_sources.setdefault(target, set()).update(roots)
            value = _peel_moves(assign.value)
            if not isinstance(value, cst.Call):
                continue
            if isinstance(value.func, cst.Name) and value.func.value in factories:
                roots = self._factory_roots(value, value.func.value, factories[value.func.value])
            elif isinstance(value.func, cst.Attribute) and value.func.attr.value in optimizer_methods:
                # ``optimizer = model.configure_optimizers(config)``: the model's own parameters.
                receiver = dotted(value.func.value)
                roots = {receiver} if receiver is not None else set()
            else:
                qualified = self.r.names.qualified_name(value.func, assign.scope, strict=False)
                if qualified is None or not is_optimizer(qualified):
                    continue
            facts.optimizers.update(assign.targets)
            if self.optimizer_home is None:
                self.optimizer_home = assign.function
            for name in assign.names:
                roots |= parameter_sources.get(name, set())
            facts.models.update(roots)
        self._inline_optimizers()
        moved = {
            target for assign in self.r.assigns if _moves_a_construction(assign.value) for target in assign.targets
        }
        facts.frozen_models = {
            name
            for name in moved - facts.models
            if name not in facts.device_names and name not in facts.loaders and name[:1].islower()
        }

    def _inline_optimizers(self) -> None:
        """``Trainer(model, ..., torch.optim.SGD(model.parameters(), lr=0.1))``: an optimizer built
        as an argument and bound to no name. The model it takes the parameters of is trained all
        the same, so it is prepared (DDP averages its gradients); the optimizer itself has no name
        to prepare."""
        assigned = {id(_peel_moves(assign.value)) for assign in self.r.assigns}
        for call in self.r.calls:
            if id(call.node) in assigned:
                continue
            qualified = self.qualified(call)
            if qualified is None or not is_optimizer(qualified) or not call.node.args:
                continue
            source = call.node.args[0].value
            if (
                isinstance(source, cst.Call)
                and isinstance(source.func, cst.Attribute)
                and source.func.attr.value in ("parameters", "named_parameters")
                and dotted(source.func.value) is not None
            ):
                self.facts.models.add(dotted(source.func.value))  # type: ignore[arg-type]
                if self.optimizer_home is None:
                    self.optimizer_home = call.function

    def _models_trained_by_hand(self) -> None:
        """Without an optimizer (``for p in model.parameters(): p.data.add_(...)`` after
        ``model.zero_grad()``), the model is what a training loop reads parameters of or zeroes
        the gradients of."""
        facts = self.facts
        if facts.optimizers:
            return
        # ``optimizer.zero_grad()`` ... ``optimizer.step()`` in a helper that receives the
        # optimizer: what steps is an optimizer, not a model trained by hand.
        stepped = {
            func.value.value
            for call in self.r.calls
            if isinstance(func := call.node.func, cst.Attribute)
            and func.attr.value == "step"
            and isinstance(func.value, cst.Name)
        }
        for call in self.r.calls:
            func = call.node.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in ("parameters", "zero_grad")
                and isinstance(func.value, cst.Name)
                and func.value.value not in stepped
                and any(loop.has_backward for loop in call.loops)
            ):
                facts.models.add(func.value.value)

    def _parameter_roots(self, receivers: set[str]) -> set[str]:
        """``model`` for ``model.parameters()`` / ``model.fc.named_parameters()``."""
        roots = set()
        for receiver in receivers:
            parts = receiver.split(".")
            while len(parts) > 1 and ".".join(parts) not in self.assigned:
                parts.pop()
            roots.add(".".join(parts))
        return roots

    def _origins_of(self, function: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> set[str]:
        """The names a parameter receives at the call sites of its function (transitively)."""
        key = (function, name)
        if key not in self.arguments or key in seen:
            return {name}
        found: set[str] = set()
        for caller, argument in self.arguments[key]:
            found |= self._origins_of(caller, argument, seen | {key})
        return found

    def _flow_into_parameters(self) -> None:
        """A parameter that receives a model is a model too (file-wide name sets)."""
        facts = self.facts
        roles = [
            facts.models,
            facts.optimizers,
            facts.train_loaders,
            facts.schedulers,
            facts.device_names,
            facts.cuda_flags,
            facts.trackers,
        ]
        for function, param in self.arguments:
            origins = self._origins_of(function, param)
            for role in roles:
                if origins & role:
                    role.add(param)
        # And back: a class that builds the optimizer from ``self.model.parameters()`` trains the
        # model its caller passed in (``Trainer(args, model, ...)``), which the caller prepares.
        for function, param in self.arguments:
            if function in self.r.classes and param in facts.models:
                handed_in = {name for name in self._origins_of(function, param) if name != param}
                facts.models |= handed_in
                facts.frozen_models -= handed_in

    def _loops(self) -> None:
        facts = self.facts
        created_loaders = set(facts.train_loaders)
        backward_functions = self._functions_with_backward()
        self.backward_functions = backward_functions
        self.facts.backward_functions = set(backward_functions)
        eval_switches = [
            (call.order, call.function, call.node.func.attr.value)
            for call in self.r.calls
            if isinstance(call.node.func, cst.Attribute)
            and call.node.func.attr.value in {"eval", "train"}
            and not call.node.args
        ]
        train: set[str] = set()
        evaluation: set[str] = set()
        created_loaders |= {
            name
            for name in facts.prepared - facts.models - facts.optimizers - facts.schedulers
            if any(loop.iterated == name for loop in self.r.loops)
        }
        # A loop decoding with a model's own ``generate`` evaluates even without ``no_grad`` or
        # ``model.eval()`` (sampling loops often have neither).
        models = facts.models | facts.frozen_models
        accelerators = {facts.existing_accelerator or facts.accelerator_name, f"self.{facts.accelerator_name}"}
        # Only where it counts or collects something (a metric): a loop that only writes samples
        # out has no per-process figure to gather or report.
        collecting = {id(loop) for aug in self.r.aug_assigns for loop in aug.loops} | {
            id(loop)
            for call in self.r.calls
            if isinstance(call.node.func, cst.Attribute) and call.node.func.attr.value in ("append", "extend")
            for loop in call.loops
        }
        decoding = {
            id(call.loops[-1])
            for call in self.r.calls
            if call.loops
            and isinstance(call.node.func, cst.Attribute)
            and call.node.func.attr.value == "generate"
            and dotted(_unwrapped(call.node.func.value, accelerators)) in models
            and id(call.loops[-1]) in collecting
        }
        known = created_loaders | (facts.prepared - facts.models - facts.optimizers - facts.schedulers)
        wrapped_evaluations: list[_Loop] = []
        for loop in self.r.loops:
            trains = (
                loop.has_backward
                or bool(loop.calls & backward_functions)
                or any((loop.function, method) in self.backward_methods for method in loop.method_calls)
            )
            last_switch = max((s for s in eval_switches if s[1] == loop.function and s[0] < loop.order), default=None)
            evaluates = loop.no_grad or (last_switch is not None and last_switch[2] == "eval") or id(loop) in decoding
            if loop.iterated is None or not (
                self._origins_of(loop.function, loop.iterated) & known or loop.iterated in known
            ):
                # ``for batch in progress(test_loader)`` through a wrapper the roles do not know:
                # an evaluation all the same (the loader is prepared), though it says nothing of
                # the loader's role.
                if not trains and evaluates and loop.through_calls is not None:
                    wrapped_evaluations.append(loop)
                continue
            origins = self._origins_of(loop.function, loop.iterated)
            self.loader_loops.append((loop, origins | {loop.iterated}))
            if not trains and not evaluates:
                continue
            kind: Literal["train", "eval"] = "train" if trains else "eval"
            record = LoopFacts(loop.function, loop.iterated, loop.targets, kind, self.site(loop.node))
            (facts.train_loops if trains else facts.eval_loops).append(record)
            (train if trains else evaluation).update(origins | {loop.iterated})
        # A loader read batch by batch with ``next(iter(loader))`` (or an iterator kept in a
        # name) in a function that runs the backward trains.
        for call in self.r.calls:
            node = call.node
            if (
                isinstance(node.func, cst.Name)
                and node.func.value == "iter"
                and len(node.args) == 1
                and call.function in backward_functions
            ):
                name = dotted(node.args[0].value)
                if name is not None and name in created_loaders - evaluation:
                    train.add(name)
        # Loaders never looped over keep their name's hint.
        unknown = created_loaders - train - evaluation
        facts.train_loaders = (train | {n for n in unknown if "train" in n.lower()}) - (evaluation - train)
        facts.eval_loaders = (evaluation | {n for n in unknown if "train" not in n.lower()}) - facts.train_loaders
        for loop in wrapped_evaluations:
            if loop.through_calls in facts.loaders:
                record = LoopFacts(loop.function, loop.through_calls or "", loop.targets, "eval", self.site(loop.node))
                facts.eval_loops.append(record)
        # ``[loss_batch(model, xb, yb) for xb, yb in valid_dl]``: an evaluation written as a
        # comprehension over a loader (outside training functions, under ``no_grad``, or after
        # ``model.eval()``, as for loops).
        for function, iterated, index, no_grad, order in self.r.comprehension_loops:
            if iterated is None or not (self._origins_of(function, iterated) | {iterated}) & facts.loaders:
                continue
            last_switch = max((s for s in eval_switches if s[1] == function and s[0] < order), default=None)
            if function not in backward_functions or no_grad or (last_switch is not None and last_switch[2] == "eval"):
                facts.loader_comprehensions.append((iterated, self.site(self.r.collected[index])))

    def _batch_names(self) -> None:
        """Targets of loops over loaders that will be prepared (whatever the loop does, prepare
        puts their batches on the device), and names taken out of them without a call
        (``x = batch["input"]``). A loader the home block does not build is not prepared, so
        its batches still need their moves."""
        homes = {self.facts.main_function or MODULE, self.facts.creating_function, *self.facts.training_functions}
        built_at_home = {name for assign in self.r.assigns if assign.function in homes for name in assign.targets}
        prepared = built_at_home | self.facts.prepared
        prepared |= {name for names in self.facts.class_prepare.values() for name in names}
        by_function = self.facts.batch_names_by_function
        for loop, loaders in self.loader_loops:
            if loaders & prepared:
                by_function.setdefault(loop.function, set()).update(loop.targets)
        for assign in self.r.assigns:
            names = by_function.get(assign.function)
            if names and _is_plain_access(assign.value) and assign.names & names:
                names.update(_batch_data_targets(assign.node, names))
        self.facts.batch_names = {name for names in by_function.values() for name in names}

    def _functions_with_backward(self) -> set[str]:
        facts = self.facts
        direct: set[str] = set()
        accelerator = facts.existing_accelerator or facts.accelerator_name
        for call in self.r.calls:
            if _is_backward(call.node):
                receiver = call.node.func.value  # type: ignore[attr-defined]
                name = dotted(receiver)
                if names_variable(receiver, accelerator):  # accelerator.backward(loss): already converted
                    name = dotted(call.node.args[0].value) if call.node.args else None
                if name is not None:
                    facts.loss_names.add(name)
                if facts.backward_site is None:
                    facts.backward_site = self.site(call.node)
                direct.add(call.function)
                if call.function in self.r.classes and len(call.scope) >= 2:
                    self.backward_methods.add((call.function, call.scope[1]))
                for loop in call.loops:
                    loop.has_backward = True
        # Methods that call a method with backward (``self._run_batch(...)``) train too.
        changed = True
        while changed:
            changed = False
            for owner_name, owner in self.r.classes.items():
                for method, callees in owner.method_calls.items():
                    if (owner_name, method) not in self.backward_methods and any(
                        (owner_name, callee) in self.backward_methods for callee in callees
                    ):
                        self.backward_methods.add((owner_name, method))
                        changed = True
        # Functions that call a function with backward train too.
        return callers_closure(direct, facts.call_graph)

    def _schedulers(self) -> None:
        """A scheduler stepped inside a batch loop (or in a function called from one) steps per
        batch; one stepped only outside them steps per epoch and is not prepared (ACC103)."""
        facts = self.facts
        loader_loops = [loop for loop in self.r.loops if loop.iterated is not None and self._is_loader(loop)]
        per_batch_functions = self._reachable(set().union(*(loop.calls for loop in loader_loops)))
        per_batch: set[str] = set()
        stepped: set[str] = set()
        for call in self.r.calls:
            func = call.node.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
                continue
            name = dotted(func.value)
            if name not in facts.schedulers:
                continue
            # Stepped under a parameter's name (``scheduler.step()`` in ``train_model(...,
            # scheduler, ...)``): what steps is the scheduler its callers pass in.
            names = {name} | self._origins_of(call.function, name)
            stepped |= names
            if any(loop in loader_loops for loop in call.loops) or call.function in per_batch_functions:
                per_batch |= names
        facts.per_epoch_schedulers = stepped - per_batch
        if self.seeds is not None:
            facts.per_epoch_schedulers |= self.seeds.per_epoch_schedulers & facts.schedulers

    def _creating_function(self, home: str) -> str:
        """Where the accelerator is created: the home function, unless another function calls it
        more than once or in a loop (one trial per width, one run per seed), then that caller
        (and so on up): an accelerator must be created once per process."""
        seen = {home}
        while True:
            calls = [
                call
                for call in self.r.calls
                if isinstance(call.node.func, cst.Name) and call.node.func.value == home and call.function != home
            ]
            callers = {call.function for call in calls}
            repeated = len(calls) > 1 or any(call.loops for call in calls)
            if len(callers) != 1 or not repeated:
                return home
            caller = callers.pop()
            if caller not in self.r.defs or caller in seen:
                return home
            seen.add(caller)
            home = caller

    def _reachable(self, functions: set[str]) -> set[str]:
        """``functions`` and every module-level function they call, transitively."""
        reachable = set(functions)
        pending = list(functions)
        while pending:
            for callee in self.facts.call_graph.get(pending.pop(), ()):
                if callee not in reachable:
                    reachable.add(callee)
                    pending.append(callee)
        return reachable

    def _is_loader(self, loop: _Loop) -> bool:
        assert loop.iterated is not None
        names = self._origins_of(loop.function, loop.iterated) | {loop.iterated}
        return bool(names & self.facts.loaders)

    def _training_classes(self) -> list[str]:
        """Module-level classes whose methods hold the training code (a ``Trainer`` with
        ``_run_batch``/``train``, a ``Solver``) and can be given the accelerator: they have an
        ``__init__`` to receive it, every method that trains or loops over a loader has an instance
        to keep it on, and this module constructs them by name. In order of first construction."""
        found = []
        models = self._model_classes()
        self.facts.model_classes = set(models)
        trains_through_a_base = self._training_subclasses(models)
        for name, owner in self.r.classes.items():
            methods = {method for owner_name, method in self.backward_methods if owner_name == name}
            if methods and name in models and models[name] & set(self.constructions):
                self.facts.self_training_models.add(name)
                continue
            methods |= {loop.method for loop, _ in self.loader_loops if loop.function == name and loop.method}
            if (
                not methods
                and self.seeds is not None
                and self.seeds.library
                and name in self.seeds.classes_given_models
            ):
                # Handed the prepared model by the program (Bjarten's EarlyStopping): its methods
                # that save need the accelerator (main process, unwrapped model).
                methods = {
                    call.scope[1]
                    for call in self.r.calls
                    if call.function == name
                    and len(call.scope) >= 2
                    and self.r.names.qualified_name(call.node.func, call.scope) == "torch.save"
                }
            constructed = name in self.constructions or (
                # A library's class constructed by code of the program that holds the accelerator.
                self.seeds is not None and self.seeds.library and name in self.seeds.accelerator_reaches
            )
            inherited = name in trains_through_a_base
            if owner.init_params is None and self.seeds is not None and name in self.seeds.inherited_accelerator:
                # No ``__init__`` here: the base's in another module receives the accelerator.
                found.append(name)
                continue
            if not (methods or inherited) or owner.init_params is None or not constructed:
                continue
            if any(owner.self_names.get(method) is None for method in methods):
                continue
            found.append(name)
        # A subclass with no ``__init__`` of its own (``class MSETrainer(BaseTrainer)`` defining
        # only ``compute_loss``) holds the accelerator its base's ``__init__`` keeps.
        found += [
            name
            for name, owner in self.r.classes.items()
            if owner.init_params is None and name in self.constructions and self._initialising_class(name) in found
        ]
        return sorted(found, key=lambda name: self.constructions[name][0].order if name in self.constructions else 0)

    def _local_parents(self) -> dict[str, set[str]]:
        """Module-level class → the module-level classes of this file it names as its bases."""
        return {
            name: {written for base in owner.node.bases if (written := dotted(base.value)) in self.r.classes}
            for name, owner in self.r.classes.items()
        }

    def _training_subclasses(self, models: dict[str, set[str]]) -> set[str]:
        """Classes whose training code is inherited: they derive, here or through a class of
        another module of the program (the seeds), from a class whose methods run a backward or
        loop over a loader (a ``BaseTrainer`` holding the epoch loop, subclassed by a
        ``RegressionTrainer`` that only defines the step)."""
        training = {owner for owner, _ in self.backward_methods}
        training |= {loop.function for loop, _ in self.loader_loops if loop.method}
        found = set(self.seeds.training_base_subclasses) if self.seeds is not None else set()
        parents = self._local_parents()
        changed = True
        while changed:
            grown = {name for name, bases in parents.items() if bases & (training | found)} - found
            found |= grown
            changed = bool(grown)
        return found - set(models)

    def _model_classes(self) -> dict[str, set[str]]:
        """Module-level classes deriving from a ``torch.nn`` module (``nn.Module``, ``nn.Linear``)
        or from another such class of the file, each with itself and the file's classes deriving
        from it (constructing any of them builds its methods)."""
        children: dict[str, set[str]] = {}
        roots = []
        for name, owner in self.r.classes.items():
            for base in owner.node.bases:
                qualified = self.r.names.qualified_name(base.value, (), strict=False) or dotted(base.value) or ""
                children.setdefault(qualified, set()).add(name)
                if qualified.startswith("torch.nn."):
                    roots.append(name)

        def family(name: str) -> set[str]:
            found, pending = {name}, [name]
            while pending:
                for child in children.get(pending.pop(), ()):
                    if child not in found:
                        found.add(child)
                        pending.append(child)
            return found

        models = set().union(*(family(root) for root in roots))
        return {name: family(name) for name in models}

    def _class_prepare(self, name: str) -> None:
        """The training objects a class builds itself (``self.model = Net()``, ``self.loader =
        DataLoader(...)``): prepared in its ``__init__``. Attributes holding an object the caller
        passed in are prepared where the caller built it."""
        facts = self.facts
        instance = self.r.classes[name].self_names.get("__init__")
        roles = facts.models | facts.optimizers | facts.loaders | (facts.schedulers - facts.per_epoch_schedulers)
        facts.prepared_attributes |= {
            role for role in roles if role.startswith(f"{instance}.") and role.count(".") == 1
        }
        owner = self.r.classes[name]
        received = {
            target
            for assign in self.r.assigns
            if assign.function == name
            for target in assign.targets
            # ``self.model = model`` (a parameter), then ``self.model = self.model.to(device)``:
            # what the caller passed in, which the caller prepares.
            if dotted(_peel_moves(assign.value)) in {*(owner.init_params or ()), target}
        }
        built_here = {
            target for assign in self.r.assigns if assign.function == name for target in assign.targets
        } - received
        method_prepared = self._method_prepare(name)
        attributes: list[str] = []
        for group in facts.preparation_groups():
            for attribute in sorted(group):
                if (
                    attribute not in method_prepared
                    and attribute.startswith(f"{instance}.")
                    and attribute.count(".") == 1
                    and attribute in built_here
                    and attribute not in facts.prepared
                    # ``self.optimizer = None`` in ``__init__`` only makes room for it.
                    and self._origins_of(name, attribute) - {"None"} <= built_here
                    and attribute not in attributes
                ):
                    attributes.append(attribute)
        if attributes:
            facts.class_prepare[name] = tuple(attributes)

    def _method_prepare(self, name: str) -> set[str]:
        """``facts.method_prepare`` for one training class; the names it covers."""
        facts = self.facts
        owner = self.r.classes[name]
        # ``__init__`` and the methods it calls (``self.build_model()``) build what is prepared
        # at the end of ``__init__``.
        from_init, pending = {"__init__"}, ["__init__"]
        while pending:
            for called in owner.method_calls.get(pending.pop(), ()):
                if called not in from_init:
                    from_init.add(called)
                    pending.append(called)
        covered: set[str] = set()
        for assign in self.r.assigns:
            if assign.function != name or len(assign.scope) != 2 or assign.scope[1] in from_init:
                continue
            method = assign.scope[1]
            instance = owner.self_names.get(method)
            value = _peel_moves(assign.value)
            if instance is None or not isinstance(value, cst.Call) or _is_prepare(value) or not assign.targets:
                continue
            if not all(
                target in facts.loaders | facts.optimizers
                and target not in facts.prepared
                and ("." not in target or target.startswith(f"{instance}.") and target.count(".") == 1)
                for target in assign.targets
            ):
                continue
            found = facts.method_prepare.setdefault(name, {}).setdefault(method, ())
            facts.method_prepare[name][method] = (*found, *(t for t in assign.targets if t not in found))
            covered.update(assign.targets)
        return covered

    def _library_training_classes(self) -> None:
        """A library's training classes (constructed by the entry script, which passes the
        accelerator to their ``__init__``): their methods reach it as ``self.accelerator``."""
        facts = self.facts
        classes = self._training_classes()
        facts.training_classes.update(classes)
        for name in classes:
            self._class_prepare(name)
            self._class_methods(name)
        bases = self._training_bases(classes)
        facts.accessible_functions |= self._reachable(set(classes) | bases)

    def _library_training_functions(self) -> None:
        """A library's functions that the accelerator reaches and that build an optimizer (``fit(args,
        train_loader, val_loader)`` building its model and optimizer, handed the prepared loaders):
        each prepares what it builds, its model included, where it builds it; no other module
        holds those names."""
        facts = self.facts
        builders = {
            assign.function
            for assign in self.r.assigns
            if set(assign.targets) & facts.optimizers and assign.function in self.r.defs
        }
        facts.training_functions |= builders & facts.accessible_functions

    def _training_bases(self, classes: Sequence[str]) -> set[str]:
        """The classes of this module that training classes derive from (``Trainer(BaseTrainer)``,
        with ``BaseTrainer`` here or, in a program, named by the seeds), joined to the training
        classes as :attr:`ScriptFacts.training_bases`: their methods (pytorch-template's
        ``BaseTrainer.train`` printing and saving checkpoints) run on a subclass's instance, which
        holds ``self.accelerator``. Only bases never constructed here whose every subclass here is
        a training class or such a base: an instance without the accelerator would fail there."""
        facts = self.facts
        parents = self._local_parents()
        found = set(self.seeds.training_bases) & set(self.r.classes) if self.seeds is not None else set()
        pending = [*classes, *found]
        while pending:
            for parent in parents.get(pending.pop(), ()):
                if parent not in found and parent not in classes:
                    found.add(parent)
                    pending.append(parent)
        found -= set(self.constructions) | facts.model_classes
        unsafe: set[str] = {""}
        while unsafe:
            unsafe = {
                base
                for base in found
                if any(
                    base in bases and child not in found and child not in classes for child, bases in parents.items()
                )
            }
            found -= unsafe
        facts.training_bases |= found
        facts.training_classes |= found
        for name in found:
            # What it builds in ``__init__`` (an optimizer over ``self.model``) is prepared there:
            # its subclass keeps the accelerator before calling ``super().__init__``.
            self._class_prepare(name)
            self._class_methods(name)
        return found

    def _class_methods(self, name: str) -> None:
        """Per method of a training class: the instance attributes it assigns and the methods it
        calls on its instance (where ``__init__`` builds what it prepares)."""
        owner = self.r.classes[name]
        binds = self.facts.method_binds[name] = {method: set() for method in owner.self_names}
        self.facts.method_calls[name] = {method: set(calls) for method, calls in owner.method_calls.items()}
        for assign in self.r.assigns:
            if assign.function != name or len(assign.scope) < 2 or assign.scope[1] not in binds:
                continue
            instance = owner.self_names.get(assign.scope[1])
            if instance is not None:
                binds[assign.scope[1]].update(t for t in assign.targets if t.startswith(f"{instance}."))

    def _home(self) -> None:
        facts = self.facts
        classes = self._training_classes()
        if classes:
            # Training lives in classes: the accelerator is created where the first of them is
            # constructed, and each reaches its methods as ``self.accelerator``.
            facts.training_classes.update(classes)
            for name in classes:
                self._class_prepare(name)
                self._class_methods(name)
            self._training_bases(classes)
            first = self.constructions[classes[0]][0]
            home: str | None = first.function if first.function in self.r.defs else MODULE
            constructed_in_guard = home == MODULE and first.in_main_guard
            builder = self.optimizer_home
            if builder in self.r.defs and home != builder and home in self._reachable({builder}):
                # Built in ``main`` and handed to a helper that constructs the class: ``main``
                # prepares them and creates the accelerator (the helper receives it, ACC104).
                home, constructed_in_guard = builder, False
        elif self._trains_only_what_it_receives():
            # A module of training functions converted alone: its callers build and prepare the
            # model and optimizer, so no accelerator is created here (each function would create
            # its own, and train unprepared objects); what needs one is reported (ACC904).
            facts.home_kind = "library"
            facts.main_function = facts.creating_function = None
            facts.accessible_functions = set()
            return
        else:
            home = self.optimizer_home
            constructed_in_guard = False
            caller = self._caller_building_the_model(home)
            if caller is not None:
                # ``train(model, loader, ...)`` builds only the optimizer: the code calling it
                # builds the model and loaders, so it creates the accelerator and prepares them;
                # the functions building optimizers from what they receive prepare those there.
                facts.training_functions = self._functions_training_what_they_receive()
                self._unprepared_received_models()
                home, constructed_in_guard = caller
        if home is None:
            home = next((a.function for a in self.r.assigns if set(a.targets) & facts.loaders), None)
        if home is None and facts.train_loops:
            home = facts.train_loops[0].function
        if home is None:
            # No optimizer, loader or training loop to go by (hand-written SGD over tensors): the
            # block that binds the device builds the training objects. For a module-level script
            # that is the module, so the accelerator lands after its argument parsing and the
            # module's own prints can reach it, not in the function holding the backward.
            home = next((a.function for a in self.r.assigns if set(a.targets) & facts.device_names), None)
        if home is None:
            home = next((call.function for call in self.r.calls if _is_backward(call.node)), MODULE)
        if home != MODULE and home not in self.r.defs:
            # The training objects live in a class that cannot be given the accelerator (no
            # ``__init__``, never constructed here): the accelerator goes where the class is used,
            # and the methods' calls are reported (ACC904) rather than rewritten.
            home = next(
                (
                    call.function
                    for call in self.r.calls
                    if isinstance(call.node.func, cst.Name)
                    and call.node.func.value == home
                    and (call.function in self.r.defs or call.function == MODULE)
                ),
                MODULE,
            )
        if home != MODULE:
            facts.main_function = home
            facts.home_kind = "function"
        else:
            facts.main_function = None
            trained = facts.models | facts.optimizers | facts.loaders
            in_guard = constructed_in_guard or bool(trained & self.r.main_guard_assigns)
            facts.home_kind = "main_guard" if in_guard else "module"
        if home != MODULE:
            facts.creating_function = self._creating_function(home)
            home = facts.creating_function
        facts.accessible_functions = self._reachable({home} | facts.training_classes)
        if facts.home_kind == "main_guard":
            # Defined inside the __main__ block (an LBFGS closure): they read the global accelerator.
            facts.accessible_functions |= self._reachable(self.r.guard_defs)

    def _receives_its_models(self, function: str) -> bool:
        """Whether ``function`` builds an optimizer from models it receives as parameters and never
        binds itself (``train(model, loader)`` with ``optimizer = SGD(model.parameters())``)."""
        params = set(self.r.defs.get(function) or ())
        bound = {name for assign in self.r.assigns if assign.function == function for name in assign.targets}
        received = (params & self.facts.models) - bound
        return bool(received) and not (self.facts.models & bound)

    def _caller_building_the_model(self, function: str | None) -> tuple[str, bool] | None:
        """The block calling ``function`` (module code, the ``__main__`` block, or another
        function), when ``function`` trains models it receives and that block builds them: that
        block is where the accelerator belongs. None when ``function`` builds its model itself,
        or its calls come from several places."""
        if function is None or function not in self.r.defs or not self._receives_its_models(function):
            return None
        calls = [
            call
            for call in self.r.calls
            if isinstance(call.node.func, cst.Name) and call.node.func.value == function and call.function != function
        ]
        callers = {call.function for call in calls}
        if len(callers) != 1:
            return None
        caller = callers.pop()
        if caller != MODULE and caller not in self.r.defs:
            return None  # a method of a class: the class would have to receive the accelerator
        params = set(self.r.defs[function] or ()) & self.facts.models
        built = {name for assign in self.r.assigns if assign.function == caller for name in assign.targets}
        if not any(self._origins_of(function, param) & built for param in params):
            return None
        in_guard = caller == MODULE and all(call.in_main_guard for call in calls)
        return caller, in_guard

    def _functions_training_what_they_receive(self) -> set[str]:
        """Module-level functions building an optimizer from models they receive: each prepares
        what it builds itself (the optimizer, its scheduler, loaders), where it builds them."""
        builders = {
            assign.function
            for assign in self.r.assigns
            if set(assign.targets) & self.facts.optimizers and assign.function in self.r.defs
        }
        return {function for function in builders if self._receives_its_models(function)}

    def _unprepared_received_models(self) -> None:
        """What the training functions are given at each call that is not known as a model
        (``train(nn_light, ...)`` where the optimizer is built from the parameter ``model``):
        nothing prepares it (ACC926)."""
        facts = self.facts
        handed: list[tuple[str, str, _Call]] = []
        for call in self.r.calls:
            function = call.node.func.value if isinstance(call.node.func, cst.Name) else None
            if function not in facts.training_functions:
                continue
            params = self.r.defs.get(function) or ()
            for index, arg in enumerate(call.node.args):
                param = parameter_filled(arg, index, params)
                name = dotted(arg.value)
                if param in facts.models and name is not None and name not in facts.models and not arg.star:
                    handed.append((name, function, call))
        # Built once, by a model constructor, in the block handing it over (knowledge
        # distillation's teacher, trained first, and student, built after the teacher's training
        # began): prepared right where it is built.
        where_built = {name for name, _, call in handed if self._built_once_as_model(name, call)}
        where_built -= {name for name, _, call in handed if not self._built_once_as_model(name, call)}
        facts.models |= where_built
        facts.models_prepared_where_built |= where_built
        facts.unprepared_received_models.extend(
            (name, function, self.site(call.node)) for name, function, call in handed if name not in where_built
        )

    def _built_once_as_model(self, name: str, call: _Call) -> bool:
        """Whether the block holding ``call`` binds ``name`` once, to a new model (``Net()``, a
        model class of the file or a ``torch.nn`` layer, moved or not), before the call."""
        if not name.isidentifier():
            return False
        assigns = [assign for assign in self.r.assigns if name in assign.targets and assign.function == call.function]
        if len(assigns) != 1 or assigns[0].targets != (name,) or assigns[0].scope != call.scope:
            return False
        built = peel_moves(assigns[0].value)
        if not isinstance(built, cst.Call):
            return False
        qualified = self.r.names.qualified_name(built.func, assigns[0].scope, strict=False) or ""
        constructs = dotted(built.func) in self.facts.model_classes or (
            qualified.startswith("torch.nn.") and qualified.rpartition(".")[2][:1].isupper()
        )
        return constructs and self.site(assigns[0].node).line < self.site(call.node).line

    def _trains_only_what_it_receives(self) -> bool:
        """Whether the file is a library of training functions converted on its own: every
        ``backward()`` is in a module-level function with parameters (what it trains comes from
        its caller), the file constructs no optimizer and no DataLoader, and no module-level code
        calls its functions (run as a script, it would train nothing)."""
        if self.seeds is not None or self.optimizer_home is not None:
            return False
        backward_functions = {call.function for call in self.r.calls if _is_backward(call.node)}
        if not backward_functions or any(not self.r.defs.get(function) for function in backward_functions):
            return False
        for call in self.r.calls:
            if self.qualified(call) in DATA_LOADERS:
                return False
            func = call.node.func
            if call.function == MODULE and isinstance(func, cst.Name) and func.value in self.r.defs:
                return False
        return True

    def _helpers(self) -> None:
        facts = self.facts
        roles = facts.trained_objects | facts.device_names
        for function, params in self.r.defs.items():
            if function != facts.main_function and set(params) & roles:
                facts.helper_functions[function] = params

    def _mixed_precision(self) -> None:
        """``grad_scalers`` and ``amp_lines``: what the AMP rule would otherwise survey the whole
        module for. Callees are matched as the rule matches them (``facts.callee_name``)."""
        facts = self.facts
        lines: set[int] | None = set()
        scaler_calls: set[int] = set()
        for call in self.r.calls:
            func = call.node.func
            # A name written ``x.attr`` resolves to a name ending in ``.attr``: most calls are
            # ruled out without resolving them.
            if isinstance(func, cst.Attribute) and func.attr.value not in _AMP_FINAL_NAMES:
                continue
            callee = facts.callee_name(func)
            if callee not in GRAD_SCALERS and callee not in AUTOCASTS:
                continue
            if callee in GRAD_SCALERS:
                scaler_calls.add(id(call.node))
            site = self.origins.site(call.node)
            if site is None:
                lines = None
            elif lines is not None:
                lines.add(site.line)
        for assign in self.r.assigns:
            value = assign.value
            if isinstance(value, cst.Call) and id(value) in scaler_calls:
                for target in assign.node.targets:
                    name = dotted(target.target)
                    if name:
                        facts.grad_scalers.add(name)
        if lines is not None:
            lines |= facts.lines_mentioning({part for name in facts.grad_scalers for part in name.split(".")})
        facts.amp_lines = lines

    def _assign_sites(self) -> None:
        for assign in self.r.assigns:
            site = self.site(assign.node)
            for target in assign.targets:
                self.facts.assign_sites.setdefault(target, []).append(site)

    def _features(self) -> None:
        facts = self.facts
        for call in self.r.calls:
            qualified = self.r.names.qualified_name(call.node.func, call.scope)
            func = call.node.func
            key = qualified or (func.value if isinstance(func, cst.Name) else None)
            if key is not None:
                facts.called.add(key)
                facts.call_sites.setdefault(key, []).append(self.site(call.node))
            if isinstance(func, cst.Attribute):
                facts.call_sites.setdefault("." + func.attr.value, []).append(self.site(call.node))
            if qualified is None:  # a strict answer is also the lenient one
                qualified = self.qualified(call)
            feature = FEATURES.get(qualified or "")
            if feature is None:
                continue
            facts.existing_features.add(feature)
            facts.distributed_sites.setdefault(feature, self.site(call.node))
        self._copied_models()
        self._download_functions()
        self._training_method_calls()
        backward_branches = {id(branch) for call in self.r.calls if _is_backward(call.node) for branch in call.ifs}
        for call in self.r.calls:
            func = call.node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "cpu":
                moved = dotted(_peel_modes(func.value))
                if moved in facts.models:
                    facts.cpu_models.add(moved)
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "step"
                and dotted(func.value) in facts.optimizers
                and any(loop.has_backward for loop in call.loops)
            ):
                # Accumulation steps every k batches after a backward on every batch; a branch
                # with a backward of its own trains something else every k batches (a GAN's
                # generator every n_critic steps).
                if any(branch.modulo and id(branch) not in backward_branches for branch in call.ifs):
                    facts.existing_features.add("manual_accumulation")

    def _download_functions(self) -> None:
        found = {call.function for call in self.r.calls if self.qualified(call) in NETWORK_FETCHES}
        found = callers_closure(found & set(self.r.defs), self.facts.call_graph, among=set(self.r.defs))
        self.facts.download_functions = found - {self.facts.home_function, self.facts.creating_function or ""}

    def _copied_models(self) -> None:
        """Models passed to a call that copies them (``copy.deepcopy``, ``AveragedModel``, timm's
        EMA, or a class of the file whose ``__init__`` deep-copies that parameter)."""
        facts = self.facts
        copying_classes = self._classes_copying_a_parameter()
        for call in self.r.calls:
            qualified = self.qualified(call)
            func = call.node.func
            local = func.value if isinstance(func, cst.Name) else None
            if qualified not in MODEL_COPIES and local not in copying_classes:
                continue
            facts.model_copiers.add(dotted(func) or "")
            for arg in call.node.args:
                value = arg.value
                if isinstance(value, cst.Call) and (dotted(value.func) or "").endswith(".unwrap_model") and value.args:
                    value = value.args[0].value  # converted already: a copy of the unwrapped model
                if isinstance(value, cst.Name) and value.value in facts.models:
                    facts.copied_models.add(value.value)

    def _training_method_calls(self) -> None:
        running = self._methods_running_the_model()
        for call in self.r.calls:
            func = call.node.func
            if not isinstance(func, cst.Attribute) or func.attr.value not in running:
                continue
            owner = dotted(func.value)
            if owner in self.facts.models and any(loop.has_backward for loop in call.loops):
                self.facts.training_method_calls.add(f"{owner}.{func.attr.value}")

    def _methods_running_the_model(self) -> set[str]:
        """Methods of the file's classes (other than ``forward`` and dunders) that call the instance
        (``self(x)``, ``self.forward(x)``) or a submodule it holds (``self.encoder(x)``)."""
        held: dict[str, set[str]] = {}
        for assign in self.r.assigns:
            if len(assign.scope) == 2 and assign.scope[0] in self.r.classes and isinstance(assign.value, cst.Call):
                instance = self.r.classes[assign.scope[0]].self_names.get(assign.scope[1])
                prefix = f"{instance}."
                held.setdefault(assign.scope[0], set()).update(
                    target[len(prefix) :] for target in assign.targets if instance and target.startswith(prefix)
                )
        found = set()
        for call in self.r.calls:
            if len(call.scope) != 2 or call.scope[0] not in self.r.classes:
                continue
            owner, method = call.scope
            instance = self.r.classes[owner].self_names.get(method)
            if instance is None or method == "forward" or method.startswith("__"):
                continue
            callee = dotted(call.node.func) or ""
            head, _, attribute = callee.partition(".")
            if head == instance and (attribute in ("", "forward") or attribute in held.get(owner, set())):
                found.add(method)
        return found

    def _classes_copying_a_parameter(self) -> set[str]:
        """Classes of the file whose ``__init__`` passes one of its parameters to ``copy.deepcopy``
        (a hand-written ``ModelEMA(model)``)."""
        found = set()
        for call in self.r.calls:
            if len(call.scope) != 2 or call.scope[1] != "__init__" or self.qualified(call) not in MODEL_COPIES:
                continue
            owner = self.r.classes.get(call.scope[0])
            params = set(owner.init_params or ()) if owner is not None else set()
            if any(dotted(arg.value) in params for arg in call.node.args):
                found.add(call.scope[0])
        return found

    def _breaks(self) -> None:
        facts = self.facts
        tainted = set(facts.loss_names) | facts.batch_names
        model_calls = facts.models
        changed = True
        while changed:
            changed = False
            for assign in self.r.assigns:
                if set(assign.targets) <= tainted:
                    continue
                if assign.names & tainted or assign.mentions.calls & model_calls:
                    tainted.update(assign.targets)
                    changed = True
        sums = self._per_process_sums(tainted)
        tainted |= sums
        self._schedule_steps_on(sums | facts.loss_names)
        for node, loops, ifs, function in self.r.breaks:
            if not loops or function not in facts.accessible_functions:
                continue
            innermost = loops[-1]
            if not (innermost.has_backward or innermost.calls & self.backward_functions):
                # The loop it leaves holds no gradient all-reduce (an episode of an RL loop): a
                # rank leaving it early only waits at the next one, where all ranks meet.
                continue
            conditions = [branch for branch in ifs if branch.loop is innermost]
            deciding = [branch for branch in conditions if branch.test.names & tainted or ".item" in branch.test.calls]
            if not deciding:
                continue
            if deciding == conditions[-1:] and _agreeable_break(node, deciding[0].node):
                facts.agreeable_breaks.append(self.site(deciding[0].node))
            else:
                facts.rank_dependent_breaks.append(self.site(node))

    def _schedule_steps_on(self, sums: set[str]) -> None:
        """``scheduler.step(train_loss)`` with one of this process's sums (or ``scheduler.step(loss)``
        with its batch loss): each process would cut its learning rate at its own epoch
        (ReduceLROnPlateau), and DDP keeps only the gradients in step, so the weights drift apart."""
        if not sums:
            return
        for call in self.r.calls:
            func = call.node.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step" and call.node.args):
                continue
            if dotted(func.value) in self.facts.schedulers and any(
                names_in(arg.value) & sums for arg in call.node.args
            ):
                self.facts.rank_dependent_schedule_steps.append(self.site(call.node))

    def _per_process_sums(self, tainted: set[str]) -> set[str]:
        """Names that hold this process's share of the training: a sum grown in a loop that runs
        the backward (``train_loss += loss.item() * n``), what is computed from it (``train_loss /=
        len(dataset)``, returned by the function that trains an epoch), and what is decided by it
        (``bad_epochs += 1`` under ``if train_loss >= best``), including an object fed it
        (``stopper(train_loss)``, then ``if stopper.early_stop: break``). Early stopping on such a
        value leaves the loop on one process first; the others wait in their next all-reduce.
        Evaluation sums are not among them: their gathered outputs agree on every process."""
        sums: set[str] = set()
        for aug in self.r.aug_assigns:
            if aug.loops and aug.loops[-1].has_backward and aug.mentions.names & tainted:
                sums.update(aug.targets)
        # ``losses.append(loss.item())`` (then ``np.mean(losses)``), ``meter.update(loss.item(), n)``:
        # a list or meter of this process's batch losses.
        for call in self.r.calls:
            func = call.node.func
            if (
                call.loops
                and call.loops[-1].has_backward
                and isinstance(func, cst.Attribute)
                and func.attr.value in _COLLECTING_METHODS
                and (owner := dotted(func.value)) is not None
                and any(names_in(arg.value) & tainted for arg in call.node.args)
            ):
                sums.add(owner)
        if not sums:
            return sums
        # Read once: the fixed point below only intersects these with the growing ``sums``.
        returns = [(function, names_in(value)) for function, value in self.r.returns]
        feeds = [
            (fed, set().union(*(names_in(arg.value) for arg in call.node.args)))
            for call in self.r.calls
            if call.node.args and (fed := self._object_fed(call.node)) is not None
        ]
        records: list[_Assign | _AugAssign] = [*self.r.assigns, *self.r.aug_assigns]
        changed = True
        while changed:
            changed = False
            returning = {function for function, names in returns if names & sums}
            for record in records:
                if set(record.targets) <= sums:
                    continue
                decided = any(branch.test.names & sums for branch in record.ifs)
                # What it reads: its mentions include its own targets (``best, bad = inf, 0``).
                read = record.mentions.names - set(record.targets)
                if read & sums or record.mentions.calls & returning or decided:
                    sums.update(record.targets)
                    changed = True
            for fed, names in feeds:
                if fed not in sums and names & sums:
                    sums.add(fed)
                    changed = True
        return sums

    def _object_fed(self, node: cst.Call) -> str | None:
        """The object a call hands its arguments to: ``stopper`` for ``stopper(value)`` (a name
        the script binds) and for ``stopper.step(value)``; None for functions and modules."""
        func = node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            name = func.value.value
        elif isinstance(func, cst.Name):
            name = func.value
        else:
            return None
        accelerators = {self.facts.existing_accelerator, self.facts.accelerator_name}
        return name if name in self.assigned and name not in accelerators else None


class _ParameterReceivers(cst.CSTVisitor):
    """Receivers of ``.parameters()`` / ``.named_parameters()`` in a small subtree."""

    def __init__(self) -> None:
        super().__init__()
        self.receivers: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in {"parameters", "named_parameters"}:
            receiver = dotted(func.value)
            if receiver is not None:
                self.receivers.add(receiver)


def _agreeable_break(node: cst.Break, branch: cst.If) -> bool:
    """``if loss < 1e-3: ...; break``: a plain ``if`` (no ``elif``/``else``) whose test is one
    comparison and whose own body (not a nested block) ends in the ``break``. Its ranks can be
    made to agree without changing what one process does: the test raises a trigger, and the body
    runs under ``check_trigger()``, which is the test's own answer on one process."""
    test = branch.test
    if branch.orelse is not None or not isinstance(test, cst.Comparison):
        return False
    body = branch.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    last = body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(small is node for small in last.body)


def _pairwise(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple[str, str]]:
    """The names a target binds, each with the name it gets from ``value`` (element by element
    for tuples of the same length): ``(split, loader)`` ← ``("val", val_loader)`` gives
    ``[("loader", "val_loader")]``."""
    if isinstance(target, (cst.Tuple, cst.List)):
        if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != len(target.elements):
            return []
        return [
            pair
            for inner, element in zip(target.elements, value.elements)
            if not isinstance(inner, cst.StarredElement) and not isinstance(element, cst.StarredElement)
            for pair in _pairwise(inner.value, element.value)
        ]
    name, source = dotted(target), dotted(value)
    return [(name, source)] if name is not None and source is not None else []


def _peel_moves(value: cst.BaseExpression) -> cst.BaseExpression:
    """``Net().to(device).train()`` → ``Net()``: the constructor under device/mode calls."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in {"to", "cuda", "train", "eval", "float", "half", "double", "cpu"}
        and isinstance(value.func.value, cst.Call)
    ):
        value = value.func.value
    return value


def _is_cpu_string(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.SimpleString) and value.evaluated_value == "cpu"


def _keyword_argument(value: cst.BaseExpression, owner: _Class, method: str) -> str | None:
    """``model`` for ``kwargs['model']`` in a method taking ``**kwargs``: the argument passed as
    ``model=...`` (sthalles/SimCLR's ``self.model = kwargs['model'].to(self.args.device)``)."""
    if not isinstance(value, cst.Subscript) or not isinstance(value.value, cst.Name) or len(value.slice) != 1:
        return None
    index = value.slice[0].slice
    if not isinstance(index, cst.Index) or not isinstance(index.value, cst.SimpleString):
        return None
    key = index.value.evaluated_value
    node = next(
        (
            line
            for line in (owner.node.body.body if isinstance(owner.node.body, cst.IndentedBlock) else ())
            if isinstance(line, cst.FunctionDef) and line.name.value == method
        ),
        None,
    )
    star = node.params.star_kwarg if node is not None else None
    if star is None or star.name.value != value.value.value or not isinstance(key, str) or not key.isidentifier():
        return None
    return key


def _peel_modes(value: cst.BaseExpression) -> cst.BaseExpression:
    """``model.eval()`` → ``model``: the module under calls that return it."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in {"eval", "train", "float", "half", "double", "requires_grad_"}
    ):
        value = value.func.value
    return value


def _is_backward(node: cst.Call) -> bool:
    return isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward"


def _is_prepare(value: cst.BaseExpression) -> bool:
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value
        in {"prepare", "prepare_model", "prepare_optimizer", "prepare_data_loader", "prepare_scheduler"}
    )


def _batch_data_targets(assign: cst.Assign, batch: set[str]) -> set[str]:
    """The targets of ``assign`` (whose value reads batch names without a call) that hold batch
    data: ``x`` of ``x = batch["input"]`` and of ``x, n = batch[0], batch[0].shape[0]``, not
    ``n``, nor ``b, c`` of ``b, c = x.shape``: sizes are Python numbers on the host
    (:func:`syntax.is_host_number`)."""
    found: set[str] = set()
    for target in assign.targets:
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(target.target, assign.value)]
        while pairs:
            bound, value = pairs.pop()
            if is_host_number(value) or not names_in(value) & batch:
                continue
            if (
                isinstance(bound, (cst.Tuple, cst.List))
                and isinstance(value, (cst.Tuple, cst.List))
                and len(bound.elements) == len(value.elements)
                and not any(isinstance(e, cst.StarredElement) for e in [*bound.elements, *value.elements])
            ):
                pairs.extend((b.value, v.value) for b, v in zip(bound.elements, value.elements))
            else:
                found.update(target_names(bound))
    return found


def _is_plain_access(value: cst.BaseExpression) -> bool:
    """Subscripts, attributes, names and tuples of them: no call that could compute something."""
    if isinstance(value, (cst.Name, cst.Attribute)):
        return True
    if isinstance(value, cst.Subscript):
        return _is_plain_access(value.value)
    if isinstance(value, (cst.Tuple, cst.List)):
        return all(_is_plain_access(element.value) for element in value.elements)
    return False


def analyse(module: cst.Module, source: str | bytes | None = None, seeds: ProgramSeeds | None = None) -> ScriptFacts:
    """Facts about ``module`` (one visitor pass), with the original position of every statement
    and call recorded; ``source``, if given, is what the module was parsed from; ``seeds``, what
    the other modules of its program say (:mod:`codemods.engine.program`; None: converted alone)."""
    recorder = _Recorder()
    walk(module, recorder)
    origins = OriginIndex()
    original_sites(module, recorder.collected, origins, source)
    # The module itself: a pass that carries positions carries this one too (see convert_module).
    origins.record(module, FILE_START)
    facts = _Conclusions(recorder, origins, seeds).run()
    if "KeyboardInterrupt" in recorder.words:
        facts.interrupt_handlers = handler_sites(
            source if source is not None else module.code, module.encoding, "KeyboardInterrupt"
        )
    if "OutOfMemoryError" in recorder.words:
        facts.out_of_memory_handlers = handler_sites(
            source if source is not None else module.code, module.encoding, "OutOfMemoryError"
        )
    return facts


def _moves_a_construction(value: cst.BaseExpression) -> bool:
    """``Net().to(device)``, ``Net().cuda()``: a construction moved where it is made."""
    return is_move(value) and isinstance(value.func.value, cst.Call)  # type: ignore[attr-defined]
