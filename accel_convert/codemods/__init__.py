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
from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods.engine.model import Change, ConversionOutcome, Options

if TYPE_CHECKING:
    from accel_convert.codemods.engine.facts import ScriptFacts
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds
    from accel_convert.codemods.engine.rule import Rule

# The engine is imported where a module is converted, not here: ``accel-convert --check``
# answering from its cache, ``--help`` and ``--list-codes`` import this package (for Options
# and Change) and convert nothing.


def __getattr__(name: str) -> object:
    """``from accel_convert.codemods import Rule``: the rules' base, loaded when first asked for."""
    if name == "Rule":
        from accel_convert.codemods.engine.rule import Rule

        return Rule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from accel_convert.codemods.engine.accelerator_creation import unseen_accelerators
    from accel_convert.codemods.engine.analysis import analyse
    from accel_convert.codemods.engine.check_walk import run_checks
    from accel_convert.codemods.engine.registry import check_rules, rewrite_rules
    from accel_convert.codemods.engine.torch_names import SELF_DISTRIBUTING

    facts = analyse(module, source, seeds, whole_batches=not (options.fsdp or options.split_batches))
    if _nothing_to_convert(facts):
        return ConversionOutcome(module)
    # A script that distributes itself is only reported on, never rewritten.
    # And so is one whose model trains itself (see ``ScriptFacts.self_training_models``).
    # And so is one holding an ``Accelerator`` from a module the converter cannot see (ACC956).
    report_only = (
        bool(facts.existing_features & SELF_DISTRIBUTING)
        or bool(facts.self_training_models)
        or bool(unseen_accelerators(facts))
    )
    changes: list[Change] = []
    for rule_class in rewrite_rules():
        module, found = _rewrite(rule_class(), module, facts, options, report_only=report_only, tree_only=tree_only)
        changes.extend(found)
    if not tree_only:  # the checks only report: their findings are all they give
        checks = [check for check in (rule_class() for rule_class in check_rules()) if _runs(check, facts, options)]
        for check, found in run_checks(module, facts, checks, options):
            changes.extend(_asked_for(check, found, options))
    changes.sort(key=lambda change: (change.line, change.column, change.code))
    if report_only or not facts.train_loaders:
        return ConversionOutcome(module, changes)
    return ConversionOutcome(module, changes, _loader_batch_size(facts), has_loader=True)


def _loader_batch_size(facts: ScriptFacts) -> int | None:
    """The loader's batch size as ACC101's analysis read it (None where it is not known)."""
    from accel_convert.codemods.rewrites.accelerator import loader_batch_size

    try:
        return facts.of(loader_batch_size)
    except ValueError:  # the accelerator rule's facts were not built (a library module)
        return None


def _nothing_to_convert(facts: ScriptFacts) -> bool:
    """A module that does not use torch, unless its program needs it converted: a library whose
    functions the accelerator reaches (a ``log`` helper that prints), that keeps a file open for
    writing (a CSV logger class, reported), that creates folders (made safe on every rank) or that
    rebinds ``print`` at its top level (printing's :func:`rebinds_output_at_top_level`: kept to the
    first process), or an entry script calling a function of its program that takes the
    accelerator (``fit(args, loaders)``)."""
    from accel_convert.codemods.engine.imported_calls import callers_of_imported_accelerator_users
    from accel_convert.codemods.model.home import reached_library
    from accel_convert.codemods.rewrites.printing import rebinds_output_at_top_level

    return (
        not facts.uses_torch
        and not reached_library(facts)
        and not (
            facts.home_kind == "library"
            and (facts.keeps_files_for_writing or facts.creates_folders or rebinds_output_at_top_level(facts))
        )
        and not callers_of_imported_accelerator_users(facts)
    )


def _runs(rule: Rule, facts: ScriptFacts, options: Options) -> bool:
    """Whether any of the rule's codes is asked for and its cheap test says it has work."""
    asked = options.enabled(rule.code) or any(options.enabled(code) for code in rule.extra_codes)
    return asked and rule.applies(facts, options)


def _asked_for(rule: Rule, found: list[Change], options: Options) -> list[Change]:
    """A rule run only for its extra codes (``--select ACC904``) keeps only those findings."""
    if options.enabled(rule.code):
        return found
    return [change for change in found if change.code != rule.code]


def _rewrite(
    rule: Rule, module: cst.Module, facts: ScriptFacts, options: Options, *, report_only: bool, tree_only: bool
) -> tuple[cst.Module, list[Change]]:
    """One rewrite run on ``module``: the tree it makes and what it reports.

    On a script that is only reported on (``report_only``), the rewrite is switched off and only
    the findings that hold for the script as written are kept (agreed-break then reports every
    per-process break, ACC902); a rule with none of those is not run. ``tree_only``: see
    :func:`convert_module`.
    """
    if report_only:
        if not rule.reports_as_written:
            return module, []
        options = dataclasses.replace(options, ignore=(*options.ignore, rule.code))
    rewrites = options.enabled(rule.code)
    if (tree_only and not rewrites) or not _runs(rule, facts, options):
        return module, []  # with tree_only: the tree it returns would be dropped below
    converted, found = rule.transform(module, facts, options)
    found = _asked_for(rule, found, options)
    if report_only:
        found = [change for change in found if change.code in rule.reports_as_written]
    facts.context.changed_lines.update(
        line for change in found if change.fixed for line in range(change.line, change.end_line + 1)
    )
    if not rewrites or not any(change.fixed for change in found):
        # Every rewrite is reported, so a rule that reports none changed nothing: keep the
        # tree it received (libcst rebuilds every node it walks; carrying positions over
        # that copy would cost more than the rule). This also makes "every change to the
        # file is reported" hold by construction. A rule whose rewrite is off (--select
        # ACC904) gives only its findings.
        return module, found
    if converted is not module and facts.origins.site(converted) is None:
        from accel_convert.codemods.engine.positions import reanchor

        # The rule did not carry positions (at least not to the module): the later rules
        # need them.
        reanchor(module, converted, facts.origins)
    return converted, found
