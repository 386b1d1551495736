"""The model's providers in their run order, checked when this module is imported, and
:func:`analyse`, which walks a module once and runs them.

The order is the one the facts need (see :func:`codemods.model.provider.check_order`): a
provider listed before one that provides what it needs fails the import, so reordering or
adding a provider cannot silently read a fact that is not filled yet. The rules' own providers
(``Rule.providers``, see :mod:`codemods.model.provider`) are handed to :func:`analyse` (the model
sits below the rules and never imports the registry) and run after the model's, checked the same
way the first time they are handed over.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import TYPE_CHECKING, Any

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import FILE_START
from accel_convert.codemods.engine.positions import OriginIndex, original_sites
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model import (
    arguments,
    calls,
    classes,
    devices,
    file_flow,
    home,
    loaders,
    locality,
    loops,
    models,
    plan,
    program,
    roles,
    source,
)
from accel_convert.codemods.model.provider import WORKING_FACTS, Provider, RuleProvider, check_order
from accel_convert.codemods.model.recorder import Recorder
from accel_convert.codemods.model.state import Analysis

if TYPE_CHECKING:
    # Only a program of several modules has seeds: a script converted alone never loads them.
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds

#: ScriptFacts fields the analysis does not draw: set when the facts are made (the name table,
#: the seeds, the run context) or a fixed default (the accelerator's name).
GIVEN = frozenset({"names", "program", "context", "accelerator_name", "rule_results"})

#: Every fact a provider may name: the ScriptFacts fields and the working facts.
KNOWN_FACTS = frozenset(field.name for field in fields(ScriptFacts)) | WORKING_FACTS

PROVIDERS: tuple[Provider, ...] = (
    source.imports,
    source.word_lines,
    loaders.loader_classes,
    classes.model_factories,
    classes.model_parts,
    calls.call_graph,
    calls.functions_called_out_of_sight,
    file_flow.path_parameters,
    file_flow.kept_files,
    program.imported_calls,
    arguments.argument_parser,
    loaders.loader_factories,
    loaders.inline_loaders,
    roles.constructor_roles,
    loaders.loader_tuples,
    loaders.batch_size,
    devices.settings_class_devices,
    devices.device_name_scopes,
    devices.device_values,
    program.imported_loader_factories,
    roles.stepped_objects,
    roles.optimizers_and_models,
    roles.trackers,
    classes.bundle_attributes,
    file_flow.file_loggers,
    program.parameter_roles,
    roles.flow_into_parameters,
    loops.evaluating_methods,
    loops.loops,
    file_flow.per_batch_file_loaders,
    file_flow.statistics_loaders,
    loaders.joined_rows_loaders,
    locality.deciding_evaluations,
    models.models_trained_by_hand,
    roles.per_epoch_schedulers,
    file_flow.kept_handles,
    home.home,
    classes.training_method_lines,
    classes.dataset_classes,
    loops.batch_names,
    source.calls_and_features,
    models.model_copy_calls,
    locality.download_functions,
    loops.manual_accumulation,
    source.assign_sites,
    locality.breaks,
    locality.per_process_paths,
    locality.shared_draws,
    plan.conversion_plan,
    loops.planned_evaluation_batches,
)

check_order(PROVIDERS, KNOWN_FACTS, given=GIVEN)


@cache
def rule_steps(rule_providers: tuple[RuleProvider[Any], ...]) -> tuple[Provider, ...]:
    """The providers the rules declare (``Rule.providers``), handed over by the caller in the
    rules' order, as steps run after the model's; checked like them (what one needs, an earlier
    provider provides)."""
    steps = tuple(step.step() for step in rule_providers)
    check_order((*PROVIDERS, *steps), KNOWN_FACTS | {step.name for step in steps}, given=GIVEN)
    return steps


def analyse(
    module: cst.Module,
    source: str | bytes | None = None,
    seeds: ProgramSeeds | None = None,
    rule_providers: tuple[RuleProvider[Any], ...] = (),
    *,
    whole_batches: bool = True,
) -> ScriptFacts:
    """Facts about ``module`` (one walk, then the providers, then ``rule_providers``), with the
    original position of every statement and call recorded; ``source``, if given, is what the
    module was parsed from; ``seeds``, what the other modules of its program say
    (:mod:`codemods.engine.program`; None: converted alone). The model never looks the rules up:
    :func:`codemods.engine.analysis.analyse` hands it every rule's providers. ``whole_batches``:
    prepared loaders deal the processes whole batches of the original, round-robin (not so with
    ``--split-batches``, or ``--fsdp``, whose forwards every process must run alike)."""
    analysis = record(module, source, seeds)
    analysis.whole_batches = whole_batches
    for step in PROVIDERS:
        step(analysis)
    for step in rule_steps(rule_providers):
        step(analysis)
    return analysis.facts.finish()


def record(module: cst.Module, source: str | bytes | None = None, seeds: ProgramSeeds | None = None) -> Analysis:
    """The one walk over ``module``: its records and the original position of every statement
    and call, ready for the providers."""
    recorder = Recorder(dict(seeds.star_library_imports) if seeds is not None else None)
    walk(module, recorder)
    recorder.follow_returning_methods()
    origins = OriginIndex()
    original_sites(module, recorder.collected, origins, source)
    # The module itself: a pass that carries positions carries this one too (see convert_module).
    origins.record(module, FILE_START)
    return Analysis(recorder, origins, seeds, module=module, source=source)
