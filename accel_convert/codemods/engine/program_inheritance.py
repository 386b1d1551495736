"""The classes of a program across its modules (:mod:`codemods.engine.program`): which program
classes each class derives from, whose ``__init__`` builds a class without one, and which classes
train, or are the bases of training classes, through another module."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.program_calls import CrossCall
from accel_convert.codemods.engine.program_shapes import ModuleShape
from accel_convert.codemods.engine.syntax import dotted

#: (module, class) of each module-level class of the program → the program classes it derives from.
ClassParents = dict[tuple[str, str], set[tuple[str, str]]]


def class_parents(
    trees: Mapping[str, cst.Module], shapes: Mapping[str, ModuleShape], facts: Mapping[str, ScriptFacts]
) -> ClassParents:
    """(module, class) of every module-level class → the program classes it derives from
    (``Trainer(BaseTrainer)`` with ``from base import BaseTrainer`` → ``base.base_trainer``)."""
    parents: ClassParents = {}
    for name, tree in trees.items():
        for node in tree.body:
            if not isinstance(node, cst.ClassDef):
                continue
            found = parents.setdefault((name, node.name.value), set())
            for base in node.bases:
                written = dotted(base.value)
                if written in shapes[name].methods:
                    found.add((name, written))
                    continue
                qualified = program_callee(facts[name], base.value, ())
                owner, _, cls = (qualified or "").rpartition(".")
                if owner in shapes and cls in shapes[owner].methods:
                    found.add((owner, cls))
    return parents


def initialiser_classes(
    parents: ClassParents, shapes: Mapping[str, ModuleShape]
) -> dict[tuple[str, str], tuple[str, str]]:
    """(module, class) of each program class without an ``__init__`` of its own → the program
    class whose ``__init__`` constructing it runs: the first up its chain of single bases that
    defines one (several bases: the method resolution order decides, not followed)."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for child in parents:
        module, cls = child
        if cls in shapes[module].classes:
            continue
        current, seen = child, {child}
        while current[1] not in shapes[current[0]].classes:
            bases = parents.get(current, set())
            if len(bases) != 1:
                break
            current = next(iter(bases))
            if current in seen:
                break
            seen.add(current)
        else:
            found[child] = current
    return found


def initialisers_by_name(parents: ClassParents, shapes: Mapping[str, ModuleShape]) -> dict[str, tuple[str, str]]:
    """:func:`initialiser_classes` keyed by qualified name (``trainers.ClassifierTrainer``)."""
    return {f"{module}.{cls}": base for (module, cls), base in initialiser_classes(parents, shapes).items()}


def inheriting_training(
    parents: ClassParents, shapes: Mapping[str, ModuleShape], facts: Mapping[str, ScriptFacts]
) -> set[tuple[str, str]]:
    """(module, class) of classes deriving, through at least one class of another module,
    from a class whose methods run a backward or loop over a loader."""
    training = {
        (name, cls)
        for name, module_facts in facts.items()
        for cls in shapes[name].methods
        if cls in module_facts.backward_functions
        or any(loop.function == cls for loop in [*module_facts.train_loops, *module_facts.eval_loops])
    }
    found: set[tuple[str, str]] = set()
    changed = True
    while changed:
        grown = {
            child
            for child, bases in parents.items()
            if any(base in training | found and base[0] != child[0] for base in bases)
            or any(base in found for base in bases)
        } - found
        found |= grown
        changed = bool(grown)
    return found


def training_bases(
    parents: ClassParents,
    facts: Mapping[str, ScriptFacts],
    calls: Iterable[CrossCall],
) -> set[tuple[str, str]]:
    """(module, class) of the classes training classes derive from across the program:
    those never constructed by another module and with no subclass in the program that is
    neither a training class nor such a base (the module's own analysis checks its own
    constructions). Their methods read the ``self.accelerator`` their subclasses keep."""
    trainers = {(name, cls) for name, module_facts in facts.items() for cls in module_facts.training_classes} & set(
        parents
    )
    concrete = {(name, cls) for name, cls in trainers if cls not in facts[name].training_bases}
    candidates: set[tuple[str, str]] = set()
    pending = list(concrete)
    while pending:
        for parent in parents.get(pending.pop(), ()):
            if parent not in candidates and parent not in concrete:
                candidates.add(parent)
                pending.append(parent)
    candidates -= {(call.callee_module, call.callee) for call in calls if not call.through_super}
    unsafe: set[tuple[str, str]] = {("", "")}
    while unsafe:
        unsafe = {
            base
            for base in candidates
            if any(base in bases and child not in candidates | concrete for child, bases in parents.items())
        }
        candidates -= unsafe
    return candidates


def inheriting_accelerator(
    parents: ClassParents, shapes: Mapping[str, ModuleShape], facts: Mapping[str, ScriptFacts]
) -> set[tuple[str, str]]:
    """(module, class) of classes with no ``__init__`` whose inherited one keeps the
    accelerator (a base in another module, or in its own when another module constructs it):
    their instances hold ``self.accelerator`` for their own methods."""
    return {
        (module, cls)
        for (module, cls), (base_module, base) in initialiser_classes(parents, shapes).items()
        if base in facts[base_module].training_classes
    }


def bases_elsewhere(name: str, parents: ClassParents) -> dict[str, tuple[str, str]]:
    """Module ``name``'s classes → the class of another program module they derive from (of
    several, the last by name)."""
    return {
        cls: base
        for (owner, cls), found in parents.items()
        if owner == name
        for base in sorted(found)
        if base[0] != name
    }
