"""The one walk the checks share: each check says which nodes it looks at, one traversal of the
converted tree calls them all (as Fixit and torchfix run their lint rules).

A check that looks at nodes (``codemods/checks/<name>.py``) subclasses :class:`WalkingCheck` and
writes hooks as on a libcst visitor, ``visit_<Node>(self, node)`` (return False: nothing below
``node`` is shown to it) and ``leave_<Node>(self, node)``; its :meth:`~WalkingCheck.lines` are the
original lines whose statements it looks into (None: every statement). During the walk
``self.walk`` is the walk's :class:`~codemods.engine.transformers.RuleTransformer`, the one owner
of what every rule asks about the spot being walked (the enclosing scope and function, qualified
names, the analysis's loop facts) and of ``report``. A check that needs no walk (its findings are
facts of the analysis) stays a plain :class:`~codemods.engine.rule.Rule`.

Why one walk: each check used to walk the tree on its own (two walks for one of them), every
walk paying the traversal and the scope bookkeeping again for a handful of calls it looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any, NamedTuple, TypeVar

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.positions import STATEMENT_TYPES, skips_statement
from accel_convert.codemods.engine.rule import Rule
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import child_nodes, hooked_types, own_hooks, types_leading_to

NodeT = TypeVar("NodeT", bound=cst.CSTNode)
_Hook = Callable[[Any, cst.CSTNode], Any]


class WalkingCheck(Rule):
    """A check that looks at nodes of the converted tree during the shared walk (see the module
    docstring). Subclasses set the :class:`Rule` attributes and write ``visit_``/``leave_`` hooks;
    they report with ``self.walk.report(node, self.code, message, False)``."""

    #: The walk under way (set by :func:`run_checks` for the walk).
    walk: SharedWalk

    def lines(self, facts: ScriptFacts) -> Iterable[int] | None:
        """The original lines whose statements the check looks into (None: all of them): a
        statement holding none is not shown to it, nor anything inside."""
        return None

    def looks_into(self, statement: cst.CSTNode) -> bool:
        """Whether the check looks into ``statement``, one of its lines (asked as the walk enters
        it: ``self.walk`` tells where it is); False: nothing inside is shown to it."""
        return True

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        """Prepare for a walk of ``module`` (called just before it)."""

    def finish(self) -> None:
        """Report what could only be decided once the whole tree was seen (called after the walk)."""

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        """The check run alone: a walk of its own."""
        [(_, found)] = run_checks(module, facts, [self], options)
        return module, found


def run_checks(
    module: cst.Module, facts: ScriptFacts, checks: Sequence[Rule], options: Options
) -> list[tuple[Rule, list[Change]]]:
    """Each check with what it found on ``module``, in the order given: the walking checks in
    one shared walk, the others by their ``transform``."""
    walking = [check for check in checks if isinstance(check, WalkingCheck)]
    found_by_code: dict[str, list[Change]] = {}
    if walking:
        walk = SharedWalk(facts, walking)
        for walker in walking:
            walker.walk = walk
            walker.start(module, facts)
        walk.walk_tree(module)
        for walker in walking:
            walker.finish()
        for change in walk.changes(module):
            found_by_code.setdefault(change.code, []).append(change)
    results: list[tuple[Rule, list[Change]]] = []
    for check in checks:
        if isinstance(check, WalkingCheck):
            codes = (check.code, *check.extra_codes)
            results.append((check, [change for code in codes for change in found_by_code.get(code, [])]))
        else:
            results.append((check, check.transform(module, facts, options)[1]))
    return results


class Held(NamedTuple):
    """A node met during the walk, and the statement holding it (where a node without a position
    of its own is reported)."""

    node: cst.CSTNode
    anchor: cst.CSTNode | None


class SharedWalk(RuleTransformer):
    """The walk: a read-only :class:`RuleTransformer` (it returns every node as it received it)
    that calls each check's hooks, as the check's own transformer walk would have, and enters a
    node while any check still looks into it."""

    def __init__(self, facts: ScriptFacts, checks: Sequence[WalkingCheck]) -> None:
        super().__init__(facts)
        self._checks = tuple(checks)
        self._lines = tuple(_sorted_lines(check.lines(facts)) for check in checks)
        self._filters = tuple(
            check.looks_into if type(check).looks_into is not WalkingCheck.looks_into else None for check in checks
        )
        #: Per check: the node below which it looks no further (its hook said so, or a statement
        #: it does not look into), while that node is walked; None while it looks.
        self._outside: list[cst.CSTNode | None] = [None] * len(checks)
        #: How many checks look at the node being walked.
        self._looking = len(checks)
        self._plans: dict[type, tuple[bool, tuple[tuple[_Hook | None, _Hook | None], ...]]] = {}
        #: The node types under which a node some check has a hook for can stand: no others are
        #: entered.
        self._walked_types = _types_walked_for(frozenset(type(check) for check in checks))

    def walk_tree(self, node: cst.CSTNode) -> None:
        """Walk ``node`` and what is below it. The tree is only read: the walk goes from child
        to child itself, without libcst's machinery for replacing nodes."""
        if self.entering_node(node):
            for child in child_nodes(node):
                if type(child) in self._walked_types:
                    self.walk_tree(child)
        self.leaving_node(node, node)

    def entering_node(self, node: cst.CSTNode) -> bool:
        if not super().entering_node(node):
            return False
        concerned, hooks = self._plan(type(node))
        if concerned:
            statement = type(node) in STATEMENT_TYPES
            for index, (visit, _) in enumerate(hooks):
                if self._outside[index] is None and (
                    (visit is not None and visit(self._checks[index], node) is False)
                    or (statement and not self._looks_into(index, node))
                ):
                    self._outside[index] = node
                    self._looking -= 1
        return self._looking > 0

    def _looks_into(self, index: int, statement: cst.CSTNode) -> bool:
        if skips_statement(statement, self._lines[index], self.origins):
            return False
        looks_into = self._filters[index]
        return looks_into is None or looks_into(statement)

    def leaving_node(
        self, original_node: NodeT, updated_node: NodeT
    ) -> NodeT | cst.RemovalSentinel | cst.FlattenSentinel[NodeT]:
        concerned, hooks = self._plan(type(original_node))
        if concerned:
            for index, (_, leave) in enumerate(hooks):
                outside = self._outside[index]
                if outside is None or outside is original_node:
                    if leave is not None:
                        leave(self._checks[index], original_node)
                    if outside is original_node:
                        self._outside[index] = None
                        self._looking += 1
        return super().leaving_node(original_node, updated_node)

    def hold(self, node: cst.CSTNode) -> Held:
        """``node`` with the statement holding it, for a report decided after the walk."""
        return Held(node, self._anchors[-1] if self._anchors else None)

    def report_held(self, held: Held, code: str, message: str) -> None:
        """Report at a node held during the walk, as :meth:`report` would have there."""
        self.findings.add(held.node, code, message, False, held.anchor)

    def _plan(self, node_type: type) -> tuple[bool, tuple[tuple[_Hook | None, _Hook | None], ...]]:
        """Whether nodes of ``node_type`` concern any check (a statement, which each check may
        not look into, or a type some check has a hook for), and each check's own (visit, leave)
        hooks for it, None where it has none."""
        plan = self._plans.get(node_type)
        if plan is None:
            name = node_type.__name__
            hooks = tuple(
                (own_hooks(type(check)).get(f"visit_{name}"), own_hooks(type(check)).get(f"leave_{name}"))
                for check in self._checks
            )
            concerned = node_type in STATEMENT_TYPES or any(hook is not None for pair in hooks for hook in pair)
            plan = self._plans[node_type] = (concerned, hooks)
        return plan


@cache
def _types_walked_for(check_types: frozenset[type]) -> frozenset[type]:
    """The node types under which a node one of ``check_types`` has a hook for can stand."""
    return types_leading_to(frozenset().union(*(hooked_types(check_type) for check_type in check_types)))


def _sorted_lines(lines: Iterable[int] | None) -> list[int] | None:
    return sorted(set(lines)) if lines is not None else None
