"""The program across modules: where what the other modules of a program say (the seeds, see
:mod:`codemods.engine.program_seeds`) joins this module's own observations. A script converted
alone has no seeds, and these providers leave its facts as they are."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods.engine.facts import MODULE
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.model.calls import handed_to_worker_processes, nested_function
from accel_convert.codemods.model.loaders import loader_targets
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.state import Analysis

if TYPE_CHECKING:
    from accel_convert.codemods.engine.names import ScopeKey
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds


@provider(
    needs=("call_graph", "loop_calls"), provides=("call_sites", "loop_backward"), refines=("call_graph", "loop_calls")
)
def imported_calls(a: Analysis) -> None:
    """Calls of imported program functions join the call graph (and their loops' calls); a loop
    calling one that runs a backward trains."""
    if a.seeds is not None:
        seed_imported_calls(a, a.seeds)


@provider(refines=("train_loaders",))
def imported_loader_factories(a: Analysis) -> None:
    """Names bound to what an imported loader factory returns are loaders."""
    if a.seeds is not None:
        seed_loader_factories(a, a.seeds)


@provider(
    needs=("call_graph",),
    refines=(
        "models",
        "optimizers",
        "train_loaders",
        "schedulers",
        "device_names",
        "cuda_flags",
        "prepared",
        "frozen_models",
    ),
)
def parameter_roles(a: Analysis) -> None:
    """Parameters filled by callers in other modules take the role of what they receive."""
    if a.seeds is not None:
        seed_parameter_roles(a, a.seeds)


def _callee(conclusions: Analysis, func: cst.BaseExpression, scope: ScopeKey) -> str | None:
    return program_callee(conclusions.facts, func, scope)


def seed_imported_calls(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """Calls of imported program functions join the call graph under their qualified name (so
    a function calling ``engine.train`` loops over a loader, and its call starts the training);
    a loop calling an imported function that runs a backward is a training loop."""
    facts = conclusions.facts
    known = seeds.imported_functions
    if not known:
        return
    for call in conclusions.r.calls:
        callee = _callee(conclusions, call.node.func, call.scope)
        if callee is None or callee not in known:
            continue
        facts.call_graph.setdefault(call.function, set()).add(callee)
        if callee != conclusions.r.names.qualified_name(call.node.func, call.scope):
            # The analysis files calls under the name their import gives; reached through a
            # relative or star import, or a re-export, they are filed under the definition too.
            facts.call_sites.setdefault(callee, []).append(conclusions.site(call.node))
        for loop in call.loops:
            loop.calls.add(callee)
            if callee in seeds.backward_functions:
                loop.has_backward = True
    _imported_value_edges(conclusions, known)


def _imported_value_edges(conclusions: Analysis, known: frozenset[str]) -> None:
    """An imported program function named as a value (``hooks = [log_epoch]`` after ``from
    callbacks import log_epoch``, ``functools.partial(save_weights, ...)``) is called out of sight
    from the code that hands it over: an edge from that code's function, as for a call (and as
    for a value of this module's own function), so the accelerator is passed where it is needed.
    Not one handed to DataLoader workers (``collate_fn=``)."""
    in_workers = handed_to_worker_processes(conclusions)
    # Named through its module too (``import callbacks`` then ``hooks = [callbacks.log_epoch]``).
    values: list[tuple[cst.Name | cst.Attribute, ScopeKey]] = [
        (cst.Name(name), scope) for name, scope in conclusions.r.value_names
    ]
    values += conclusions.r.value_attributes
    for value, scope in values:
        if (dotted(value), scope) in in_workers:
            continue
        callee = _callee(conclusions, value, scope)
        if callee is not None and callee in known:
            caller = (nested_function(conclusions, scope) or scope[0]) if scope else MODULE
            conclusions.facts.call_graph.setdefault(caller, set()).add(callee)


def seed_loader_factories(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """``train_loader, val_loader = get_dataloaders(args)`` with ``get_dataloaders`` from another
    module of the program returning loaders: both names are loaders, prepared where they arrive;
    of ``self.train_loader, self.val_loader, self.nclass = make_data_loader(args)``, those at the
    positions it returns loaders at."""
    if not seeds.loader_factories:
        return
    positions = dict(seeds.loader_positions)
    for assign in conclusions.r.assigns:
        value = assign.value
        callee = _callee(conclusions, value.func, assign.scope) if isinstance(value, cst.Call) else None
        if callee is None or callee not in seeds.loader_factories:
            continue
        if callee in positions:
            at, groups = positions[callee]
            found = loader_targets(assign, None if at is None else set(at), frozenset(groups))
            conclusions.facts.train_loaders.update(found)
        else:
            conclusions.facts.train_loaders.update(assign.targets)


def seed_parameter_roles(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """Parameters filled by callers in other modules take the role of what they receive. A loader
    not as prepared where the module's own ``__main__`` block calls its function too (the module
    is also a script of its own): there it is the loader the block built, unprepared, so its
    batches still need their moves."""
    facts = conclusions.facts
    for role, names in seeds.parameter_roles:
        getattr(facts, role).update(names)
    facts.models.update(seeds.models_handed_over)
    standalone = {name for function in _reached_from_main_guard(conclusions) for name in conclusions.r.defs[function]}
    facts.prepared.update(seeds.prepared - (standalone & facts.train_loaders))
    facts.frozen_models -= facts.models


def _reached_from_main_guard(conclusions: Analysis) -> set[str]:
    """The module-level functions that its ``__main__`` block calls, directly or through them."""
    r = conclusions.r
    called = {
        call.node.func.value
        for call in r.calls
        if call.in_main_guard and isinstance(call.node.func, cst.Name) and call.node.func.value in r.defs
    }
    return conclusions.reachable(called) & r.defs.keys()
