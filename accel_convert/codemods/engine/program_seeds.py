"""What the other modules of a program tell the analysis of one module (see
:mod:`codemods.engine.program`).

A script converted alone learns every role from its own code. A module of a program (the entry
script, or ``engine.py`` that it imports) also gets *seeds*: facts about the names that cross
module boundaries, carried as names like every other fact:

* roles of parameters that callers in other modules fill (``model`` of
  ``train_one_epoch(model, ...)`` is a model there, and arrives prepared);
* imported functions, by absolute qualified name (``engine.train_one_epoch``), that return
  loaders, loop over loaders, run a backward, or now take the accelerator as a parameter;
* whether the module is a library: the entry script creates the one accelerator and passes it
  down; a library never creates one.

:func:`seed_imported_calls`, :func:`seed_loader_factories`, :func:`seed_parameter_roles` and
:func:`library_home` are called by the analysis at the points where the seeds join its own
observations. Without seeds (``None``) the analysis is the single-file one, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods.engine.syntax import dotted

if TYPE_CHECKING:
    from accel_convert.codemods.engine.facts import FactQuestions, ScriptFacts
    from accel_convert.codemods.engine.names import ScopeKey
    from accel_convert.codemods.model.state import Analysis

#: The role sets a parameter can be seeded into: the ScriptFacts fields of the same name.
ROLES = ("models", "optimizers", "train_loaders", "schedulers", "device_names", "cuda_flags")


@dataclass(frozen=True)
class ProgramSeeds:
    """Names one module learns from the rest of its program (every field a plain name or a
    qualified name, never a node)."""

    #: The module is imported by the entry script: the accelerator comes in as a parameter.
    library: bool = False
    #: Role (a ScriptFacts field, see ROLES) → parameter names (file-wide, as facts are) that
    #: callers in other modules fill with an object of that role.
    parameter_roles: tuple[tuple[str, frozenset[str]], ...] = ()
    #: Parameters that receive objects already passed through ``accelerator.prepare``.
    prepared: frozenset[str] = frozenset()
    #: Names this module passes to a parameter that holds a trained model in another module's
    #: function or class (``Trainer(model, loaders, cfg)`` whose ``__init__`` builds the
    #: optimizer over ``self.model``): models here too, so they are prepared where they are built,
    #: as in a single script.
    models_handed_over: frozenset[str] = frozenset()
    #: Library only: its module-level functions called only from code that holds the accelerator.
    accelerator_reaches: frozenset[str] = frozenset()
    #: Imported functions (absolute qualified names) that return data loaders.
    loader_factories: frozenset[str] = frozenset()
    #: Imported functions that loop over a loader (directly or through their calls).
    looping_functions: frozenset[str] = frozenset()
    #: Imported functions that run a backward (directly or through their calls).
    backward_functions: frozenset[str] = frozenset()
    #: Imported functions (and classes) that draw from a global generator before any seed,
    #: directly or through their calls (a config helper drawing the learning rate).
    drawing_functions: frozenset[str] = frozenset()
    #: Imported functions that take the accelerator once converted → where the parameter sits
    #: among the positional ones (None: keyword-only).
    accelerator_parameters: tuple[tuple[str, int | None], ...] = ()
    #: Another module of the program saves (``torch.save``, or ``accelerator.save`` in a module
    #: converted before this one): this module's ``torch.load`` lines wait for every rank first,
    #: as in a script that saves.
    saved_elsewhere: bool = False
    #: This module's classes whose instances code elsewhere in the program hands a prepared model
    #: (``early_stopping(val_loss, model)`` with ``early_stopping = EarlyStopping(...)``): what
    #: their methods save of it is reported (ACC914), since no accelerator reaches them.
    classes_given_models: frozenset[str] = frozenset()
    #: This module's classes that training classes of other modules derive from (pytorch-template's
    #: ``BaseTrainer`` in ``base/base_trainer.py``), never constructed anywhere in the program and
    #: with no subclass that is not a training class: their methods read ``self.accelerator``.
    training_bases: frozenset[str] = frozenset()
    #: This module's classes deriving from a class of another module whose methods train (run a
    #: backward or loop over a loader): training classes even when their own methods only define
    #: a step, and they keep the accelerator for the base's methods.
    training_base_subclasses: frozenset[str] = frozenset()
    #: This module's classes without an ``__init__`` of their own whose inherited one (of a
    #: training class, here or in another module) receives and keeps the accelerator: their
    #: methods read ``self.accelerator``.
    inherited_accelerator: frozenset[str] = frozenset()
    #: Names this module passes to a function or class of another module that steps them as a
    #: scheduler once per epoch (``Trainer(..., lr_scheduler=lr_scheduler)`` whose epoch loop
    #: calls ``self.lr_scheduler.step()``): not prepared, as in a single script.
    per_epoch_schedulers: frozenset[str] = frozenset()
    #: Names bound by relative imports (``from .utils import save``) → absolute qualified name.
    relative_imports: tuple[tuple[str, str], ...] = ()
    #: Names a ``from <program module> import *`` binds → absolute qualified name.
    star_imports: tuple[tuple[str, str], ...] = ()
    #: Program-wide: a qualified name a function is re-exported under → where it is defined
    #: (``mylib.train`` → ``mylib.engine.train``).
    aliases: tuple[tuple[str, str], ...] = ()
    #: Program-wide: classes (qualified) whose ``forward`` returns Python values it made, with
    #: their positions among the outputs (``syntax.forward_python_outputs``): such outputs of a
    #: model built in another module cannot be gathered as tensors.
    python_outputs: tuple[tuple[str, frozenset[int]], ...] = ()

    def roles(self) -> dict[str, frozenset[str]]:
        return dict(self.parameter_roles)

    def accelerator_parameter_index(self) -> dict[str, int | None]:
        return dict(self.accelerator_parameters)

    @property
    def imported_functions(self) -> frozenset[str]:
        """Every imported function the seeds say something about."""
        return (
            self.loader_factories
            | self.looping_functions
            | self.backward_functions
            | {name for name, _ in self.accelerator_parameters}
        )


def program_callee(facts: FactQuestions, func: cst.BaseExpression, scope: ScopeKey) -> str | None:
    """The absolute qualified name of a call's function when it is imported (``engine.train``
    for ``train`` after ``from engine import train``, or for ``engine.train`` after ``import
    engine``; relative imports through the seeds); None otherwise."""
    seeds = facts.program
    found = facts.names.qualified_name(func, scope, strict=True) if facts.names is not None else None
    if found is None and seeds is not None:
        head, _, rest = (dotted(func) or "").partition(".")
        resolved = dict(seeds.relative_imports).get(head)
        if resolved is None and facts.names is not None and not facts.names.is_bound(head, scope):
            # Only where nothing in the module binds the name after the star import did.
            resolved = dict(seeds.star_imports).get(head)
        if resolved is not None:
            found = f"{resolved}.{rest}" if rest else resolved
    if found is None or seeds is None or not seeds.aliases:
        return found
    return dict(seeds.aliases).get(found, found)


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


def seed_loader_factories(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """``train_loader, val_loader = get_dataloaders(args)`` with ``get_dataloaders`` from another
    module of the program returning loaders: both names are loaders, prepared where they arrive."""
    if not seeds.loader_factories:
        return
    for assign in conclusions.r.assigns:
        value = assign.value
        if isinstance(value, cst.Call) and _callee(conclusions, value.func, assign.scope) in seeds.loader_factories:
            conclusions.facts.train_loaders.update(assign.targets)


def seed_parameter_roles(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """Parameters filled by callers in other modules take the role of what they receive."""
    facts = conclusions.facts
    for role, names in seeds.parameter_roles:
        getattr(facts, role).update(names)
    facts.models.update(seeds.models_handed_over)
    facts.prepared.update(seeds.prepared)
    facts.frozen_models -= facts.models


def library_home(conclusions: Analysis, seeds: ProgramSeeds) -> None:
    """A library builds nothing it trains and creates no accelerator: its functions that the
    accelerator reaches (called only from code holding it) and what they call get it.

    A class constructed there is not one of them: its methods have no parameter to receive the
    accelerator (a ``MetricLogger`` whose ``log_every`` prints), so it reaches them only as
    ``self.accelerator`` when the class turns out to be a training class (which then receives
    it in ``__init__``, see ``model.classes.library_training_classes``)."""
    facts = conclusions.facts
    facts.home_kind = "library"
    facts.main_function = None
    facts.creating_function = None
    facts.accessible_functions = conclusions.reachable(set(seeds.accelerator_reaches) - set(conclusions.r.classes))


def imported_accelerator_call(
    facts: ScriptFacts, func: cst.BaseExpression, scope: ScopeKey
) -> tuple[str, int | None] | None:
    """For a call of an imported program function that takes the accelerator once converted:
    its qualified name and where the accelerator goes (None: by keyword); else None."""
    seeds = facts.program
    if seeds is None or not seeds.accelerator_parameters:
        return None
    callee = program_callee(facts, func, scope)
    if callee is None:
        return None
    index = seeds.accelerator_parameter_index()
    return (callee, index[callee]) if callee in index else None


def callers_of_imported_accelerator_users(facts: ScriptFacts) -> set[str]:
    """Functions of this module that call an imported function which takes the accelerator:
    they use it too (and need it passed in unless they create it)."""
    seeds = facts.program
    if seeds is None or not seeds.accelerator_parameters:
        return set()
    takers = set(seeds.accelerator_parameter_index())
    return {caller for caller, callees in facts.call_graph.items() if callees & takers}
