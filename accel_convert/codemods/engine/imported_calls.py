"""Calls of functions imported from the other modules of a program, read through the seeds
(:mod:`codemods.engine.program_seeds`): which imported function a call calls, whether it takes
the accelerator once converted, and which functions here call one that does.

The questions both the program model's providers and the rules ask; apart from the seeds (plain
names, which the facts hold) because they read the facts.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from accel_convert.codemods.engine.syntax import dotted

if TYPE_CHECKING:
    import libcst as cst

    from accel_convert.codemods.engine.facts import FactQuestions, FactsDraft, ScriptFacts
    from accel_convert.codemods.engine.names import ScopeKey


def program_callee(facts: FactQuestions, func: cst.BaseExpression, scope: ScopeKey) -> str | None:
    """The absolute qualified name of a call's function when it is imported (see
    :meth:`FactQuestions.program_callee`, which answers it)."""
    return facts.program_callee(func, scope)


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


def builds_model_of_program_class(
    facts: FactsDraft | ScriptFacts,
    func: cst.BaseExpression,
    scope: ScopeKey = (),
    own_classes: AbstractSet[str] | None = None,
) -> bool:
    """Whether a call of ``func`` builds a model of one of the program's model classes: a class of
    this module deriving from a ``torch.nn`` module (``Net()``, ``facts.model_classes``, or
    ``own_classes`` for the providers that ask before it is set), or one another module of the
    program defines (``models.Net()``, ``from pkg.models import Net``: the seeds'
    ``model_classes``, by qualified name); or a function returning a new one of them
    (``build_model(10)``, ``Net.create()``: the file's ``facts.model_factories`` or the seeds'
    ``model_factories``). The one answer where the accelerator is created, what is prepared where
    and which new models are tested ask: a class of another module is a model there as the
    module's own classes are, and a factory's model is one as the construction it returns is."""
    own = facts.model_classes if own_classes is None else own_classes
    written = dotted(func)
    return written in own or written in facts.model_factories or _builds_model_of_other_module(facts, func, scope)


def _builds_model_of_other_module(facts: FactQuestions, func: cst.BaseExpression, scope: ScopeKey = ()) -> bool:
    """Whether a call of ``func`` builds a model of a class another module of the program defines
    (``Net()`` after ``from nets import Net``, ``nets.Net()``), or calls a function of another
    module returning one (``build_model(10)`` after ``from models import build_model``,
    ``Net.create()``); by qualified name, re-exports followed (a class method through the
    re-exported class: ``pkg.Net.create``). False for a script alone."""
    seeds = facts.program
    if seeds is None or not (seeds.model_classes or seeds.model_factories):
        return False
    callee = program_callee(facts, func, scope)
    if callee is None:
        return False
    if callee in seeds.model_classes or callee in seeds.model_factories:
        return True
    owner, _, method = callee.rpartition(".")
    return bool(owner) and f"{dict(seeds.aliases).get(owner, owner)}.{method}" in seeds.model_factories
