"""The analysis's entry point: :func:`analyse` fills :class:`~codemods.engine.facts.ScriptFacts`
for one module. The work is done by the program model (``codemods/model/``): one walk that
records the tree, then providers, each the one owner of a concept (roles, loops, devices, the
home block, ...), run in an order checked against what each needs, then the providers every rule
declares, which this module hands the model from the registry (the model sits below the rules and
never looks them up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_convert.codemods.engine.registry import rule_providers
from accel_convert.codemods.model import runner

if TYPE_CHECKING:
    import libcst as cst

    from accel_convert.codemods.engine.facts import ScriptFacts
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds

__all__ = ["analyse"]


def analyse(
    module: cst.Module,
    source: str | bytes | None = None,
    seeds: ProgramSeeds | None = None,
    *,
    whole_batches: bool = True,
) -> ScriptFacts:
    """Facts about ``module``, with every rule's own facts (see :func:`codemods.model.runner.analyse`)."""
    return runner.analyse(module, source, seeds, rule_providers(), whole_batches=whole_batches)
