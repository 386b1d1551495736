"""The rewrites that make a single-GPU PyTorch script distributed, and the one entry point.

``convert_module`` analyses the module once (:mod:`codemods.analysis`), then runs every codemod of
:mod:`codemods.registry` in its fixed order, each reading the same facts. Changes are reported at
their positions in the original file, sorted by line.
"""

from __future__ import annotations

import libcst as cst

from codemods.base import Change, Codemod, ConversionOutcome, Options

__all__ = ["convert_module", "Change", "Codemod", "ConversionOutcome", "Options"]

#: Set-ups that already distribute the work: the script is reported, never rewritten.
DISTRIBUTED_FEATURES = {"DistributedDataParallel", "mp.spawn", "init_process_group"}


def convert_module(
    module: cst.Module, options: Options, source: str | bytes | None = None
) -> ConversionOutcome:
    """Convert one parsed module; a module that does not import torch comes back as it was.

    ``source`` (optional) is the text or bytes ``module`` was parsed from: passing it saves
    generating the code once more to find original positions.
    """
    from codemods.analysis import analyse
    from codemods.edits import OriginIndex, move_to_original, reanchor
    from codemods.registry import all_codemods

    facts = analyse(module, OriginIndex(), source)
    if not facts.uses_torch:
        return ConversionOutcome(module)
    report_only = bool(facts.existing_features & DISTRIBUTED_FEATURES)
    original = module
    original_lines: list[str] | None = None
    changes: list[Change] = []
    for codemod_class in all_codemods():
        codemod = codemod_class()
        if report_only and not codemod.code.startswith("ACC9"):
            continue
        rewrites = options.enabled(codemod.code)
        reports = any(options.enabled(code) for code in codemod.extra_codes)
        if not (rewrites or reports) or not codemod.applies(facts, options):
            continue
        converted, found = codemod.transform(module, facts, options)
        if not rewrites:
            # Only its findings were asked for (--select ACC904): keep those, drop the rewrite.
            converted, found = module, [change for change in found if change.code != codemod.code]
        if not any(change.fixed for change in found):
            # Every rewrite is reported, so a pass that reports none changed nothing: keep the
            # tree it received (libcst rebuilds every node it walks; carrying positions over
            # that copy would cost more than the pass). This also makes "every change to the
            # file is reported" hold by construction.
            converted = module
        if found and codemod.positions_in_received_tree:
            if original_lines is None:
                original_lines = _original_lines(original, source)
            found = [move_to_original(change, module, original_lines) for change in found]
        if converted is not module and facts.origins.site(converted) is None:
            # The pass did not carry positions (at least not to the module): the later passes
            # need them.
            reanchor(module, converted, facts.origins)
        module = converted
        changes.extend(found)
        facts.changed_lines.update(line for change in found if change.fixed
                                   for line in range(change.line, change.end_line + 1))
    changes.sort(key=lambda change: (change.line, change.column, change.code))
    return ConversionOutcome(module, changes)



def _original_lines(module: cst.Module, source: str | bytes | None) -> list[str]:
    """The original file's lines, from its source when the caller passed it (printing the tree
    again costs a third of a parse)."""
    if source is None:
        return module.code.splitlines()
    if isinstance(source, bytes):
        return source.decode(module.encoding).lstrip("\ufeff").splitlines()
    return source.splitlines()
