"""The transformers every rule's rewrite is built on, and the one way a rule reports a change.

* :class:`TargetedTransformer` is the machinery: it walks only the statements that can hold what a
  rule rewrites, never enters whitespace or tokens, and carries original positions from each node
  it received to the node it returns (see :mod:`codemods.engine.positions`).
* :class:`RuleTransformer` is what a rule subclasses: it knows the enclosing ``def``/``class``
  scope (for qualified names), the statement it is in (for positions), whether code there can read
  the accelerator (``accelerator_reachable``, the one answer), and collects :class:`Findings`.
* :class:`HomeBlockTransformer` edits the block that builds the training objects.

:class:`Findings` is how a change is reported, inside a transformer or outside one: at the
node's original position, or at the statement holding it when the node has none of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import RETRIED_TRAINING_FUNCTION, accelerator_name
from accel_convert.codemods.engine.facts import LoopFacts, ScriptFacts
from accel_convert.codemods.engine.findings import FILE_START, Findings
from accel_convert.codemods.engine.model import Change, Site
from accel_convert.codemods.engine.positions import (
    CARRIED_TYPES,
    POSITIONED_TYPES,
    STATEMENT_TYPES,
    OriginIndex,
    skips_statement,
)
from accel_convert.codemods.engine.syntax import (
    assigns_at_top,
    body_statements,
    instance_parameter,
    is_main_guard,
    parameter_names,
)
from accel_convert.codemods.engine.walk import (
    SUBSTANCE,
    TRIVIA,
    child_nodes,
    hooked_types,
    own_hooks,
    types_leading_to,
    wants_trivia,
)
from accel_convert.codemods.model.locality import RankReach, locality_of

NodeT = TypeVar("NodeT", bound=cst.CSTNode)


class TargetedTransformer(cst.CSTTransformer):
    """What every pass's transformer shares: it walks only the statements holding one of
    ``lines`` (original line numbers; None: all), never enters whitespace or tokens, rebuilds
    only the nodes whose children changed, and carries the original position of each statement,
    call and the module to the node that replaces it (so that later passes still report in terms
    of the file the user wrote). Without ``origins`` (a pass run on its own, in unit tests) it
    walks everything and carries nothing.

    Why it walks the children itself: libcst rebuilds (constructs and validates a copy of) every
    node a transformer enters, and visits every whitespace and token node, although a pass
    changes a handful of nodes. Here a node's children are transformed one by one (the steps of
    libcst's ``node.visit``, so the hooks run exactly as libcst calls them); a node none of whose children
    changed is kept as it is, and a node with a changed child is rebuilt by libcst's own
    ``_visit_and_replace_children``, replaying the children's results (so removals and
    ``FlattenSentinel`` are handled as libcst does). A rule's ``leave_`` hook therefore receives
    ``updated_node is original_node`` when nothing below changed, also for a node it entered.

    Subclasses refine :meth:`entering_node` and :meth:`leaving_node` (not ``on_visit`` and
    ``on_leave``, which drive the walk)."""

    def __init__(self, origins: OriginIndex | None, lines: Iterable[int] | None = None) -> None:
        super().__init__()
        self.origins = origins
        self.lines = sorted(set(lines)) if lines is not None else None
        self._hooks = _transformer_hooks(type(self))
        #: While libcst rebuilds a node whose children changed: the node, and each child's result
        #: by the child's identity (a list: one object may stand at two places).
        self._replay: tuple[cst.CSTNode, dict[int, list[Any]]] | None = None
        self._libcst_walk = wants_trivia(type(self))
        self._entered_types = _entered_types(type(self))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._replay is not None:
            return False  # a child of the node being rebuilt: its result is ready
        if not self.entering_node(node):
            return False
        if self._libcst_walk:
            return True  # a pass with hooks for whitespace or tokens: libcst walks everything
        done: list[tuple[cst.CSTNode, Any]] = []
        changed = False
        for child in child_nodes(node):
            if type(child) not in self._entered_types:
                continue  # nothing this pass hooks can stand there: left as it is, unvisited
            # What ``child.visit(self)`` does, without its frame and its check of the result
            # (a result that is not a node reaches libcst's check when the parent is rebuilt).
            if self.on_visit(child):
                result = self.on_leave(child, child._visit_and_replace_children(self))
            else:
                result = self.on_leave(child, child)
            done.append((child, result))
            if result is not child:
                changed = True
        if not changed:
            return False  # libcst leaves the node as it is: on_leave(node, node)
        results: dict[int, list[Any]] = {}
        for child, result in done:
            results.setdefault(id(child), []).append(result)
        self._replay = (node, results)
        return True

    def on_leave(
        self, original_node: NodeT, updated_node: NodeT
    ) -> NodeT | cst.RemovalSentinel | cst.FlattenSentinel[NodeT]:
        if self._replay is not None:
            parent, results = self._replay
            if original_node is not parent:
                done = results.get(id(original_node))
                return done.pop(0) if done else updated_node
            self._replay = None
        return self.leaving_node(original_node, updated_node)

    # libcst's on_visit/on_leave look ``visit_<Node>``/``leave_<Node>`` up by a built name for
    # every node, and find one of its thousand no-op stubs for most: the pass's own hooks are
    # looked up once per node type instead, and only they are called.
    def entering_node(self, node: cst.CSTNode) -> bool:
        """Whether to walk below ``node`` (its ``visit_`` hook said so and it may hold one of
        ``lines``)."""
        kind = type(node)
        if kind in TRIVIA:
            return False
        visit = self._hooks_of(kind)[0]
        if visit is not None and visit(self, node) is False:
            return False
        # Only statements can be skipped (``skips_statement`` says no to anything else).
        return kind not in STATEMENT_TYPES or not skips_statement(node, self.lines, self.origins)

    def skips(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is a statement holding none of ``lines``: not walked."""
        return skips_statement(node, self.lines, self.origins)

    def leaving_node(
        self, original_node: NodeT, updated_node: NodeT
    ) -> NodeT | cst.RemovalSentinel | cst.FlattenSentinel[NodeT]:
        """The node's ``leave_`` hook, and its original position carried to what it returned."""
        leave = self._hooks_of(type(original_node))[1]
        result = updated_node if leave is None else leave(self, original_node, updated_node)
        if self.origins is None or type(original_node) not in CARRIED_TYPES or result is original_node:
            return result
        if isinstance(result, cst.FlattenSentinel):
            # Statements lifted out of a dissolved block (``with autocast(): for ...``) keep their
            # own positions: later rules find the loop by its line.
            for node in result.nodes:
                if not self.origins.carried(node):
                    self.origins.carry(original_node, node)
        elif isinstance(result, cst.CSTNode):
            self.origins.carry(original_node, result)
        return result

    def _hooks_of(self, node_type: type) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
        hooks = self._hooks.get(node_type)
        if hooks is None:
            hooks = self._hooks[node_type] = (
                own_hooks(type(self)).get(f"visit_{node_type.__name__}"),
                own_hooks(type(self)).get(f"leave_{node_type.__name__}"),
            )
        return hooks

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass  # no pass has per-field hooks (``_transformer_hooks`` refuses them)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


def _entered_types(transformer_type: type) -> frozenset[type]:
    """The node types a transformer's walk enters: those under which a node it has a hook for
    can stand (a pass rewriting statements never enters an expression). A subclass that refines
    :meth:`TargetedTransformer.entering_node` or ``leaving_node`` itself may want every node."""
    entered = _ENTERED.get(transformer_type)
    if entered is None:
        if (
            transformer_type.entering_node in _OWN_ENTERING_NODE  # type: ignore[attr-defined]
            and transformer_type.leaving_node in _OWN_LEAVING_NODE  # type: ignore[attr-defined]
        ):
            entered = types_leading_to(hooked_types(transformer_type))
            if issubclass(transformer_type, RuleTransformer):
                # Its blocks learn which statement is being walked from every statement entered
                # (whether the accelerator exists there yet), hooked or not.
                entered |= _BLOCK_ITEM_TYPES
        else:
            entered = SUBSTANCE
        _ENTERED[transformer_type] = entered
    return entered


_ENTERED: dict[type, frozenset[type]] = {}


#: Transformer class → node class → (its own visit hook, its own leave hook), None where only
#: libcst's no-op stub exists.
_HOOKS: dict[type, dict[type, tuple[Callable[..., Any] | None, Callable[..., Any] | None]]] = {}


_FIELD_HOOK = re.compile(r"(visit|leave)_[A-Z]\w*_[a-z]\w*$")


def _transformer_hooks(
    transformer_type: type,
) -> dict[type, tuple[Callable[..., Any] | None, Callable[..., Any] | None]]:
    hooks = _HOOKS.get(transformer_type)
    if hooks is None:
        field_hooks = sorted(name for name in own_hooks(transformer_type) if _FIELD_HOOK.match(name))
        if field_hooks:
            raise TypeError(
                f"{transformer_type.__name__} has per-field hooks ({', '.join(field_hooks)}), "
                "which TargetedTransformer does not call"
            )
        hooks = _HOOKS[transformer_type] = {}
    return hooks


def lines_of(sites: Iterable[Site]) -> set[int]:
    """The first lines of ``sites``: what a rule that may change only those calls walks."""
    return {site.line for site in sites}


class RuleTransformer(TargetedTransformer):
    """Base of every rule's transformer: the enclosing scope, the enclosing positioned node, and
    :class:`Findings`. ``lines`` are the original lines it may change (None: any)."""

    #: Always the run's index (``facts.origins``), never None as in a bare TargetedTransformer.
    origins: OriginIndex

    def __init__(self, facts: ScriptFacts, lines: Iterable[int] | None = None) -> None:
        super().__init__(facts.origins, lines)
        self.facts = facts
        self.findings = Findings(facts)
        #: The variable converted code uses for the accelerator.
        self.accelerator = accelerator_name(facts)
        #: Enclosing ``def``/``class`` names, as the name table keys scopes.
        self.scope: tuple[str, ...] = ()
        self._anchors: list[cst.CSTNode] = []
        #: Where every rank runs alike: the locality owner, asked by ``every_rank_reaches_here``.
        answer = locality_of(facts)
        self._rank_reach = RankReach(facts.loaders, self.qualified_name, self.builtin, answer)
        self._per_rank_loops = answer.per_rank_loops
        #: Inside a method of a training class: the method's instance parameter (``self``), None
        #: in a static or class method.
        self.instance: str | None = None
        #: The module and each enclosing function, innermost last: where in its body the walk is,
        #: and from where in it the accelerator variable can be read (see ``accelerator_reachable``).
        self._blocks: list[_Block] = []
        #: The module, functions and classes whose scope and block this walk pushed, innermost last.
        self._entered: list[cst.CSTNode] = []

    def report(
        self, node: cst.CSTNode, code: str, message: str, fixed: bool = True, *, header_only: bool = False
    ) -> None:
        """Record a change at ``node`` (or, when it has no position, the statement holding it);
        ``header_only``: see :meth:`Findings.add`."""
        anchor = self._anchors[-1] if self._anchors else None
        self.findings.add(node, code, message, fixed, anchor, header_only=header_only)

    def changes(self, module: cst.Module) -> list[Change]:
        """Everything reported, positioned (``module`` is the tree the walk received)."""
        return self.findings.resolve(module)

    def every_rank_reaches_here(self, statement: cst.CSTNode | None = None) -> bool:
        """Whether every process runs the statement being visited the same number of times: the
        locality owner's answer (:class:`model.locality.RankReach`) for the statements enclosing
        it. ``statement``: the question is asked of that enclosing statement (being walked), not
        of what is inside it."""
        anchors = self._anchors
        if statement is not None and any(node is statement for node in anchors):
            anchors = anchors[: next(i for i, node in enumerate(anchors) if node is statement)]
        return not self._in_per_rank_loop(anchors) and self._rank_reach.every_rank_reaches(anchors, self.function)

    def writes_per_rank_here(self) -> bool:
        """Whether the walk is inside an evaluation loop whose processes each run their own
        batches and write their files under the original's index (the locality owner's
        :attr:`~codemods.model.locality.Locality.per_rank_loops`): a write there stays on every
        process, and no barrier goes there."""
        return self._in_per_rank_loop(self._anchors)

    def runs_per_rank(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (of the tree this rule received) is such a loop (see
        :meth:`writes_per_rank_here`): nothing in it is gathered."""
        if type(node) is not cst.For or not self._per_rank_loops:
            return False
        site = self.origins.site(node)
        return site is not None and site.line in self._per_rank_loops

    def _in_per_rank_loop(self, anchors: Sequence[cst.CSTNode]) -> bool:
        return bool(self._per_rank_loops) and any(self.runs_per_rank(node) for node in anchors)

    def in_function_some_ranks_skip(self) -> bool:
        """Whether the walk is in a function that some rank may not call (a call of it stands
        where not every rank goes: ``if not os.path.isdir(d): mkdir_p(d)``): the locality
        owner's answer, the reason ``every_rank_reaches_here`` fails there however the function
        itself reads."""
        return self._rank_reach.called_on_some_ranks(self._anchors, self.function)

    def error_caught_here(self, *, fetching: bool = False) -> bool:
        """Whether an ``OSError`` raised at the node being visited may be caught by a handler
        that goes on (a ``try`` around it, or around a call of its function): that of a folder
        made or removed, or, ``fetching``, of a network fetch (``except
        requests.RequestException``): the locality owner's answer
        (:meth:`model.locality.RankReach.error_caught_here`)."""
        return self._rank_reach.error_caught_here(self._anchors, self.function, fetching=fetching)

    def site(self, node: cst.CSTNode) -> Site:
        """The original position of ``node`` (a node of the tree this rule received)."""
        return self.facts.origins.site(node) or FILE_START

    def accelerator_reachable(self) -> bool:
        """Whether code at the node being visited can read the accelerator: in a training class's
        method through ``self.accelerator``; in a function that takes it as a parameter, or after
        the statement of its body that creates it (and in functions defined in such a function);
        in module-level functions the training code calls (the helpers rule, ACC104, hands it to
        them); in module-level code, and in the ``__main__`` block, after the statement creating it.
        The one answer every rule uses."""
        if not self.facts.has_accelerator:
            return False  # a script that trains nothing gets no accelerator (ACC101 creates none)
        if self.in_training_class():
            return self.instance is not None
        if self._blocks:
            known = self._blocks[-1].reaches_here()
            if known is not None:
                return known
            if any(block.layout.parameter or block.layout.created_at is not None for block in self._blocks[:-1]):
                return True  # a function defined in one that has it: it runs when called
        return len(self.scope) > 0 and self.scope[0] in self.facts.accessible_functions

    def module_creation_index(self) -> int | None:
        """Index of the module-level statement creating the accelerator (while the module's
        statements are walked or left), None when module-level code does not create it."""
        return self._blocks[0].layout.created_at if self._blocks and self._blocks[0].layout.module else None

    def instance_accelerator(self) -> cst.Attribute | None:
        """``self.accelerator`` in a training class's method (ACC108); None elsewhere."""
        if not self.in_training_class() or self.instance is None:
            return None
        return cst.Attribute(cst.Name(self.instance), cst.Name(self.accelerator))

    def in_training_class(self) -> bool:
        """Whether the walk is inside a training class (one that receives the accelerator)."""
        return bool(self.scope) and self.scope[0] in self.facts.training_classes

    @property
    def function(self) -> str:
        """The enclosing module-level function's name, ``"<module>"`` outside any function. In a
        class, the class name (the analysis treats a class's methods as one unit), except in a
        training class's static methods and class body, which have no ``self.accelerator``:
        ``"Class.method"``, which no fact names."""
        scope = self.scope
        if scope and scope[0] == RETRIED_TRAINING_FUNCTION and scope[0] not in self.facts.word_lines:
            # Module-level code (statements, functions) the out-of-memory retry moved into its
            # function: the facts name it as it was written.
            scope = scope[1:]
        if not scope:
            return "<module>"
        if scope[0] in self.facts.training_classes and self.instance is None:
            return ".".join(scope[:2])
        return scope[0]

    def loop_fact(
        self, node: cst.For, loops: Iterable[LoopFacts], accepts: Callable[[LoopFacts], bool] | None = None
    ) -> LoopFacts | None:
        """The analysis's fact about the loop ``node`` (one of ``loops``, starting on its
        original line, that ``accepts`` takes); None for a loop it does not describe."""
        site = self.origins.site(node)
        if site is None:
            return None
        return next(
            (loop for loop in loops if loop.site.line == site.line and (accepts is None or accepts(loop))), None
        )

    def evaluates(self, node: cst.For) -> bool:
        """Whether the loop ``node`` (a node of the tree this rule received) is an evaluation: the
        analysis's eval loops (a loop over a loader that runs no backward, under ``torch.no_grad()``,
        ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``, in a ``@torch.no_grad()``
        function, after ``model.eval()``, or decoding with ``model.generate``). The one answer every
        rule uses: the loaders prepare shards are the loops the metrics rule gathers."""
        return self.loop_fact(node, self.facts.eval_loops) is not None

    def qualified_name(self, node: cst.BaseExpression) -> str | None:
        return self.facts.qualified_name(node, self.scope)

    def builtin(self, node: cst.BaseExpression) -> str | None:
        """The builtin ``node`` denotes here (``"range"``); None where the script binds the name."""
        return self.facts.builtin(node, self.scope)

    # The scope and the anchor are kept here rather than in visit_/leave_ hooks, so a rule's own
    # hooks (which may stop the descent into a class) can never unbalance them.
    def entering_node(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if self._blocks and kind in _BLOCK_ITEM_TYPES:
            self._blocks[-1].entering(node)
        if kind is cst.Module or kind is cst.FunctionDef or kind is cst.ClassDef:
            # What is pushed here is popped when this node is left, and only then (a subclass
            # may decline to enter a node without calling this method).
            self._entered.append(node)
        if kind is cst.Module:
            self._blocks.append(_Block.of_module(node, self.accelerator, self.facts))  # type: ignore[arg-type]
        elif kind is cst.FunctionDef or kind is cst.ClassDef:
            self.scope = (*self.scope, node.name.value)  # type: ignore[attr-defined]
            if kind is cst.FunctionDef:
                self._blocks.append(_Block.of_function(node, self.accelerator, self.facts))  # type: ignore[arg-type]
                if len(self.scope) == 2 and self.scope[0] in self.facts.training_classes:
                    self.instance = instance_parameter(node)  # type: ignore[arg-type]
        if kind in POSITIONED_TYPES:
            self._anchors.append(node)
        return super().entering_node(node)

    def leaving_node(
        self, original_node: NodeT, updated_node: NodeT
    ) -> NodeT | cst.RemovalSentinel | cst.FlattenSentinel[NodeT]:
        result = super().leaving_node(original_node, updated_node)
        kind = type(original_node)
        if kind in POSITIONED_TYPES and self._anchors and self._anchors[-1] is original_node:
            self._anchors.pop()
        if not self._entered or self._entered[-1] is not original_node:
            return result
        self._entered.pop()
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            if len(self.scope) == 2:
                self.instance = None
            self.scope = self.scope[:-1]
        if kind is cst.FunctionDef or kind is cst.Module:
            self._blocks.pop()
        return result


#: What a block's statement list holds: statements, or a ``def f(): ...`` one-line suite.
_BLOCK_ITEM_TYPES = STATEMENT_TYPES | {cst.SimpleStatementSuite}


class _Layout:
    """What a module's or function's statement list says, read once per node and accelerator
    name: the position of each top-level statement, which one creates the accelerator (or
    whether it arrives as a parameter). The ``__main__`` block counts as module code: a creation
    inside it is found there too."""

    def __init__(self, statements: Sequence[cst.CSTNode], accelerator: str, parameter: bool, module: bool) -> None:
        self.parameter = parameter
        self.module = module
        self.accelerator = accelerator
        self.position = {id(statement): index for index, statement in enumerate(statements)}
        self.created_at = next(
            (index for index, statement in enumerate(statements) if assigns_at_top([statement], accelerator)), None
        )
        #: The ``__main__`` block: its statements, and which of them creates the accelerator.
        self.guard_position: dict[int, int] = {}
        self.guard_at: int | None = None
        self.guard_created_at: int | None = None
        if module and self.created_at is None:
            for index, statement in enumerate(statements):
                if is_main_guard(statement) and isinstance(statement.body, cst.IndentedBlock):  # type: ignore[attr-defined]
                    guarded = statement.body.body  # type: ignore[attr-defined]
                    created = next((i for i, line in enumerate(guarded) if assigns_at_top([line], accelerator)), None)
                    if created is not None:
                        self.guard_at, self.guard_created_at = index, created
                        self.guard_position = {id(line): i for i, line in enumerate(guarded)}
                        break


class _Block:
    """The module or a function being walked: its :class:`_Layout`, and which of its top-level
    statements the walk is in."""

    def __init__(self, layout: _Layout) -> None:
        self.layout = layout
        self.current = -1
        self.guard_current = -1

    @classmethod
    def of_module(cls, node: cst.Module, accelerator: str, facts: ScriptFacts) -> _Block:
        return cls(_layout(node, accelerator, facts, lambda: _Layout(node.body, accelerator, False, module=True)))

    @classmethod
    def of_function(cls, node: cst.FunctionDef, accelerator: str, facts: ScriptFacts) -> _Block:
        return cls(
            _layout(
                node,
                accelerator,
                facts,
                lambda: _Layout(body_statements(node), accelerator, accelerator in parameter_names(node), module=False),
            )
        )

    def entering(self, node: cst.CSTNode) -> None:
        layout = self.layout
        index = layout.position.get(id(node))
        if index is not None:
            self.current = index
        elif layout.guard_position and self.current == layout.guard_at:
            guarded = layout.guard_position.get(id(node))
            if guarded is not None:
                self.guard_current = guarded

    def reaches_here(self) -> bool | None:
        """Whether the accelerator is readable at the walk's position in this (innermost) block:
        from the start when it is a parameter, after the statement creating it when the block
        creates it (or its ``__main__`` block does), None when the block says nothing."""
        layout = self.layout
        if layout.parameter:
            return True
        if layout.created_at is not None:
            return self.current > layout.created_at
        if layout.guard_created_at is not None and self.current == layout.guard_at:
            return self.guard_current > layout.guard_created_at
        return None


def _layout(node: cst.CSTNode, accelerator: str, facts: ScriptFacts, read: Callable[[], _Layout]) -> _Layout:
    """``node``'s layout, read once per conversion (see ``RunContext.block_layouts``)."""
    known = facts.context.block_layouts.get(id(node))
    if known is not None and known[0] is node and cast(_Layout, known[1]).accelerator == accelerator:
        return cast(_Layout, known[1])
    layout = read()
    facts.context.block_layouts[id(node)] = (node, layout)
    return layout


class HomeBlockTransformer(RuleTransformer):
    """Calls :meth:`edit_home` with the statements of the block that builds the training objects:
    the body of ``facts.main_function``, of the ``if __name__ == "__main__":`` block, or the module."""

    def __init__(self, facts: ScriptFacts) -> None:
        # Only the home block's own statement list is edited: nothing below needs a walk.
        super().__init__(facts, lines=())

    #: The functions whose bodies are edited (the accelerator rule: the creating function).
    @property
    def home_names(self) -> set[str | None]:
        return {self.facts.main_function}

    def edit_home(self, body: list[cst.BaseStatement], anchor: cst.CSTNode) -> list[cst.BaseStatement]:
        """Return the new statements; ``anchor`` is the original node owning them (for reports)."""
        raise NotImplementedError

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        updated = updated_node
        if (
            self.facts.home_kind == "function"
            and len(self.scope) == 1  # the scope still holds the function being left
            and original_node.name.value in self.home_names
            and isinstance(updated.body, cst.IndentedBlock)
        ):
            body = self.edit_home(list(updated.body.body), original_node)
            return updated.with_changes(body=updated.body.with_changes(body=body))
        return updated

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if (
            self.facts.home_kind == "main_guard"
            and not self.scope
            and is_main_guard(original_node)
            and isinstance(updated_node.body, cst.IndentedBlock)
        ):
            body = self.edit_home(list(updated_node.body.body), original_node)
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        return updated_node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.facts.home_kind == "module":
            return updated_node.with_changes(body=self.edit_home(list(updated_node.body), original_node))
        return updated_node


#: The machinery's own refinements of the hooks-calling steps: they keep state only for nodes on
#: the way to a hooked node (scope, anchors) and for statements (blocks), so a pass using them
#: needs no other nodes.
_OWN_ENTERING_NODE = (TargetedTransformer.entering_node, RuleTransformer.entering_node)
_OWN_LEAVING_NODE = (TargetedTransformer.leaving_node, RuleTransformer.leaving_node)
