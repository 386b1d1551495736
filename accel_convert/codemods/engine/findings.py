"""How a rule reports what it did or left: the one place a :class:`Change` is positioned.

A rule reports a node of the tree it received; :class:`Findings` resolves each to a position in
the file the user wrote: the node's own recorded position, or that of the statement holding it
(an attribute, a node an earlier rule created), or the top of the file. A change spans the whole
node it rewrote (a loop a gather went into, a ``def`` that got a parameter): the pass loop marks
those lines as changed, and later rules that look for what earlier ones wrote walk exactly them.
Reports decided by the analysis alone (``ACC9xx`` at a recorded :class:`Site`) use
:func:`report_at`.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Site

#: Where a change without any recorded position is reported: the top of the file.
FILE_START = Site(1, 0, 1, 0)


class Findings:
    """The changes a rule found; their positions are looked up once its walk is done.

    In the pipeline, the analysis recorded the original position of every statement and call
    (``facts.origins``) and the passes carry those records to the nodes they return, so a change
    is reported at its node's original site, or at the statement holding it (``anchor``) when the
    node itself is not recorded (an attribute, a node an earlier pass created). Run on its own
    (unit tests, no origins), a pass reports positions in the tree it received.
    """

    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.found: list[tuple[cst.CSTNode, cst.CSTNode | None, str, str, bool, bool]] = []

    def add(
        self,
        node: cst.CSTNode,
        code: str,
        message: str,
        fixed: bool,
        anchor: cst.CSTNode | None = None,
        *,
        header_only: bool = False,
    ) -> None:
        """Record a change at ``node`` (or ``anchor`` when ``node`` has no position).
        ``header_only``: the change is to a compound statement's first line (a ``def`` that got a
        parameter, a statement inserted before a block), not to its body."""
        self.found.append((node, anchor, code, message, fixed, header_only))

    def drop(self, code: str) -> None:
        """Forget the changes with this code (a pass that gives up after its walk)."""
        self.found = [entry for entry in self.found if entry[2] != code]

    def resolve(self, module: cst.Module) -> list[Change]:
        if not self.found:
            return []
        site_of = self._site_lookup(module)
        changes = []
        for node, anchor, code, message, fixed, header_only in self.found:
            candidates = [_positioned(n) for n in (node, anchor) if n is not None]
            site = next((s for s in map(site_of, candidates) if s is not None), FILE_START)
            if header_only and isinstance(node, cst.BaseCompoundStatement):
                site = Site(site.line, site.column, site.line, site.column)
            changes.append(report_at(site, code, message, fixed))
        return changes

    def _site_lookup(self, module: cst.Module) -> Callable[[cst.CSTNode], Site | None]:
        origins = self.facts.origins
        if origins:
            return origins.site
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)

        def from_positions(node: cst.CSTNode) -> Site | None:
            where = positions.get(node)
            if where is None:
                return None
            return Site(where.start.line, where.start.column, where.end.line, where.end.column)

        return from_positions


def _positioned(node: cst.CSTNode) -> cst.CSTNode:
    """The node whose position is recorded: a statement line's first small statement."""
    if isinstance(node, cst.SimpleStatementLine) and node.body:
        return node.body[0]
    return node


def report_at(site: Site, code: str, message: str, fixed: bool = False) -> Change:
    """A change at a position the analysis recorded."""
    return Change(code, message, site.line, site.column, site.end_line, site.end_column, fixed)
