"""The rewrites that make a single-GPU PyTorch script distributed, and the one entry point.

``convert_module`` analyses the module once (:mod:`codemods.engine.analysis`), then runs every
rule of :mod:`codemods.engine.registry` in its fixed order, each reading the same facts and
returning the tree it made and what it changed. Changes are reported at their positions in the
original file, sorted by line.

Layout: ``engine/`` is the machinery every rule shares (facts, names, positions, transformers,
the registry); ``rewrites/`` holds one module per rewrite (run in the registry's order) and
``checks/`` one module per check (reports only, run after every rewrite); each imports the engine
only.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from accel_convert.codemods.engine.model import Change, ConversionOutcome, Options
from accel_convert.codemods.engine.program_seeds import ProgramSeeds
from accel_convert.codemods.engine.rule import Rule

__all__ = ["convert_module", "Change", "Rule", "ConversionOutcome", "Options"]


def convert_module(
    module: cst.Module,
    options: Options,
    source: str | bytes | None = None,
    seeds: ProgramSeeds | None = None,
    *,
    tree_only: bool = False,
) -> ConversionOutcome:
    """Convert one parsed module; a module that does not import torch comes back as it was.

    ``source`` (optional) is the text or bytes ``module`` was parsed from: passing it saves
    generating the code once more to find original positions. ``seeds``: what the other modules
    of its program say (see :mod:`codemods.engine.program`); None converts it alone.
    ``tree_only``: only the converted tree is wanted (the pipeline's check that converting the
    output again changes nothing): the rules that cannot change it are not run — those that only
    report, and those whose rewrite is switched off — so the reports are incomplete.
    """
    from accel_convert.codemods.engine.analysis import analyse
    from accel_convert.codemods.engine.positions import reanchor
    from accel_convert.codemods.engine.program_seeds import callers_of_imported_accelerator_users
    from accel_convert.codemods.engine.registry import all_rules
    from accel_convert.codemods.engine.torch_names import SELF_DISTRIBUTING

    facts = analyse(module, source, seeds)
    # A library of a program whose functions the accelerator reaches (a ``log`` helper that
    # prints) has something to convert even without importing torch; so has an entry script
    # calling a function of its program that takes the accelerator (``fit(args, loaders)``).
    if (
        not facts.uses_torch
        and not (facts.home_kind == "library" and facts.accessible_functions)
        and not callers_of_imported_accelerator_users(facts)
    ):
        return ConversionOutcome(module)
    # A script that distributes itself is only reported on, never rewritten.
    # And so is one whose model trains itself (see ``ScriptFacts.self_training_models``).
    report_only = bool(facts.existing_features & SELF_DISTRIBUTING) or bool(facts.self_training_models)
    changes: list[Change] = []
    for rule_class in all_rules():
        rule = rule_class()
        rule_options = options
        as_written_only = report_only and not rule.code.startswith("ACC9")
        if as_written_only:
            if not rule.reports_as_written:
                continue
            # A rewrite rule whose findings hold for the script as written runs with its rewrite
            # switched off (agreed-break then reports every per-process break, ACC902).
            rule_options = dataclasses.replace(options, ignore=(*options.ignore, rule.code))
        rewrites = rule_options.enabled(rule.code)
        reports = any(rule_options.enabled(code) for code in rule.extra_codes)
        reports_only = rule.reports_only()
        if tree_only and (reports_only or not rewrites):
            continue  # the tree it returns would be dropped below
        if not (rewrites or reports) or not rule.applies(facts, rule_options):
            continue
        converted, found = rule.transform(module, facts, rule_options)
        if not rewrites:
            # Only its findings were asked for (--select ACC904): keep those, drop the rewrite.
            converted, found = module, [change for change in found if change.code != rule.code]
        if as_written_only:
            found = [change for change in found if change.code in rule.reports_as_written]
        if reports_only or not any(change.fixed for change in found):
            # Every rewrite is reported, so a rule that reports none changed nothing: keep the
            # tree it received (libcst rebuilds every node it walks; carrying positions over
            # that copy would cost more than the rule). This also makes "every change to the
            # file is reported" hold by construction.
            converted = module
        if converted is not module and facts.origins.site(converted) is None:
            # The rule did not carry positions (at least not to the module): the later rules
            # need them.
            reanchor(module, converted, facts.origins)
        module = converted
        changes.extend(found)
        facts.changed_lines.update(
            line for change in found if change.fixed for line in range(change.line, change.end_line + 1)
        )
    changes.sort(key=lambda change: (change.line, change.column, change.code))
    return ConversionOutcome(module, changes)
