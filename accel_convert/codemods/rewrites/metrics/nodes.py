"""Tree questions the metrics rule's modules share: whether a node holds one that matches (a walk
that stops at the first), the names a scope uses (read once a new name is needed), (the call
that builds a value through its moves is ``engine/devices.py``'s ``construction``)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from accel_convert.codemods.engine.walk import variables_read, walk

#: A question asked of each node of a walk.
NodePredicate = Callable[[cst.CSTNode], bool]


def contains(node: cst.CSTNode, predicate: NodePredicate, kind: type[cst.CSTNode] | None = None) -> bool:
    """Whether a node inside ``node`` (or ``node``) satisfies ``predicate``; ``kind``: only
    nodes of that type can (a walk that calls the predicate on those alone)."""
    finder = _Finder(predicate) if kind is None else _FINDERS[kind](predicate)
    walk(node, finder)
    return finder.found


class _KindFinder(cst.CSTVisitor):
    """Whether a node of one kind matching ``predicate`` is inside one loop or statement (see
    :class:`_Finder`): a ``visit_`` hook for that kind only, never a call per node."""

    def __init__(self, predicate: NodePredicate) -> None:
        self.predicate = predicate
        self.found = False

    def _check(self, node: cst.CSTNode) -> bool:
        if not self.found and self.predicate(node):
            self.found = True
        return not self.found


class _CallFinder(_KindFinder):
    def visit_Call(self, node: cst.Call) -> bool:
        return self._check(node)


class _WithFinder(_KindFinder):
    def visit_With(self, node: cst.With) -> bool:
        return self._check(node)


_FINDERS: dict[type[cst.CSTNode], type[_KindFinder]] = {cst.Call: _CallFinder, cst.With: _WithFinder}


class _Finder(cst.CSTVisitor):
    """Whether a node matching ``predicate`` is inside one loop or statement. Local: it reads
    the loop the rewrite is deciding on, as earlier rules left it."""

    def __init__(self, predicate: NodePredicate) -> None:
        self.predicate = predicate
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if self.predicate(node):
            self.found = True
            return False
        return True


class LazyNames:
    """The variable names used in a node, collected on first use."""

    def __init__(self, node: cst.CSTNode) -> None:
        self._node = node
        self._names: set[str] | None = None

    @property
    def names(self) -> set[str]:
        if self._names is None:
            self._names = variables_read(self._node)
        return self._names
