"""The analysis's entry point: :func:`analyse` fills :class:`~codemods.engine.facts.ScriptFacts`
for one module. The work is done by the program model (``codemods/model/``): one walk that
records the tree, then providers, each the one owner of a concept (roles, loops, devices, the
home block, ...), run in an order checked against what each needs."""

from __future__ import annotations

from accel_convert.codemods.model.runner import analyse

__all__ = ["analyse"]
