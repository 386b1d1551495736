"""Convert a program of several modules as one: the entry script and the local modules it imports.

``train.py`` importing ``engine.py``/``data.py`` from its folder is one program: one accelerator,
created once in the entry script and passed to what needs it. Converted file by file, each module
would create its own accelerator (``engine.train_one_epoch`` one per call) and would not know that
its ``data_loader`` parameter is a prepared loader whose evaluation must be gathered.

This pass analyses every module, works out what crosses module boundaries (as names, see
:mod:`codemods.engine.program_seeds`), then converts each module with those seeds, libraries
first:

* roles flow from call sites into the parameters of imported functions (``model``, ``optimizer``,
  ``train_loader`` passed to ``engine.train_one_epoch(...)`` make its parameters a model, an
  optimizer, a prepared loader there), and loaders returned by an imported factory
  (``data.get_dataloaders(args)``) are loaders where they arrive (prepared there);
* a library never creates an accelerator: the functions the accelerator reaches (called only from
  code that holds it) get it as a parameter when a rewrite uses it, and the importing module passes
  it at every call.

The analysis runs a few rounds, because a fact learnt in one module feeds another (the entry knows
``val_loader`` is a loader only once ``data.get_dataloaders`` is known to return loaders, and only
then can ``engine.validate``'s parameter be one). Everything here is names: nodes of one round are
never used in another.

This module holds the rounds and the conversion order; the rest lives beside it:
``program_shapes`` (each module's syntax, read once), ``program_calls`` (calls and instances
across modules), ``program_inheritance`` (classes deriving from another module's),
``program_roles`` (what one round carries from module to module) and ``program_seeds`` (the
seeds themselves).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field, replace
from typing import Any

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import ScriptFacts, callers_closure
from accel_convert.codemods.engine.model import ConversionOutcome, Options
from accel_convert.codemods.engine.names import NameTable, builtins_at, collect_names
from accel_convert.codemods.engine.program_calls import CrossCall, CrossCalls, InstanceCalls
from accel_convert.codemods.engine.program_inheritance import (
    bases_elsewhere,
    class_parents,
    inheriting_accelerator,
    inheriting_training,
    initialisers_by_name,
    training_bases,
)
from accel_convert.codemods.engine.program_roles import (
    Learnt,
    Received,
    by_module,
    classes_given_models,
    imported_gpu_indices,
    models_handed_over,
    per_epoch_arguments,
    prepared_by_entry,
    stepped_elsewhere,
)
from accel_convert.codemods.engine.program_seeds import ProgramSeeds
from accel_convert.codemods.engine.program_shapes import (
    ModuleShape,
    ShapeReader,
    accelerator_parameters,
    bindable_accelerator_parameters,
    function_at,
    function_extents,
    iterates_parameters,
)
from accel_convert.codemods.engine.syntax import (
    class_methods,
    concatenated_rows,
    defines_backward,
    defines_method,
    dotted,
    forward_python_outputs,
)
from accel_convert.codemods.engine.torch_names import DATA_LOADERS
from accel_convert.codemods.model.locality import locality_of
from accel_convert.records import record

#: Rounds of analysis at most: each round carries facts one module boundary further.
MAX_ROUNDS = 6


@record()
class ProgramModule:
    """One module of a program: its dotted name (``engine``, ``mylib.utils``; a package's
    ``__init__.py`` is ``mylib``), its tree, and the text or bytes it was parsed from."""

    name: str
    module: cst.Module
    source: str | bytes | None = None
    is_package: bool = False
    #: Filled by :func:`convert_program`.
    calls: list[CrossCall] = field(default_factory=list)


def _program_base(
    base: cst.BaseExpression, names: NameTable, relative: dict[str, str], aliases: dict[str, str], module: str
) -> str:
    """The qualified name of a class's ``base`` as module ``module`` names it: imported (by a
    relative import too), or a class of the module itself; a re-export followed to its definition."""
    written = dotted(base) or ""
    head, _, rest = written.partition(".")
    if head in relative:
        found = f"{relative[head]}.{rest}" if rest else relative[head]
    else:
        found = names.qualified_name(base, (), strict=False) or f"{module}.{written}"
    return aliases.get(found, found)


def _follow(name: str, aliases: dict[str, str]) -> str:
    """Where a chain of re-exports ends (a cycle ends where it would repeat)."""
    seen = {name}
    while name in aliases and aliases[name] not in seen:
        name = aliases[name]
        seen.add(name)
    return name


class Program:
    """The modules of one program and the seeds each gets."""

    def __init__(self, modules: Sequence[ProgramModule], entry: str) -> None:
        self.modules = {module.name: module for module in modules}
        self.entry = entry
        #: The module that creates the accelerator: the entry script, or the module of the one
        #: function a thin entry hands everything to (see :meth:`_home_module`).
        self.home = entry
        names = set(self.modules)
        self.shapes: dict[str, ModuleShape] = {}
        for module in modules:
            visitor = ShapeReader(module.name, module.is_package, names)
            module.module.visit(visitor)
            visitor.shape.extents = function_extents(module.source, module.module)
            self.shapes[module.name] = visitor.shape
        #: Classes without an ``__init__`` (qualified) → the class whose ``__init__`` builds them
        #: (see :meth:`initialisers`), as the last round of :meth:`plan` found them.
        self.inherited_inits: dict[str, tuple[str, str]] = {}
        self._names: dict[str, NameTable] = {}

    def names_of(self, module: str) -> NameTable:
        """Module ``module``'s name table, collected once for the whole plan."""
        if module not in self._names:
            self._names[module] = collect_names(self.modules[module].module)
        return self._names[module]

    def aliases(self) -> dict[str, str]:
        """Qualified names under which a program function is also reachable → where it is defined:
        ``mylib.train`` → ``mylib.engine.train`` when ``mylib/__init__.py`` re-exports it (by name or
        with ``*``), followed through chains of re-exports."""
        found: dict[str, str] = {}
        for name, shape in self.shapes.items():
            for bound, target in shape.reexports.items():
                if f"{name}.{bound}" != target:
                    found[f"{name}.{bound}"] = target
            for source in shape.star_imports:
                for public in self._public_names(source, set()):
                    found.setdefault(f"{name}.{public}", f"{source}.{public}")
        return {alias: _follow(alias, found) for alias in found}

    def star_bindings(self, name: str) -> dict[str, str]:
        """Names a module's ``from <program module> import *`` binds → their qualified names."""
        return {
            public: f"{source}.{public}"
            for source in self.shapes[name].star_imports
            for public in self._public_names(source, set())
        }

    def star_library_bindings(self, name: str) -> dict[str, str]:
        """What a module's ``from <program module> import *`` binds of that module's own imports
        of libraries (``sys`` after ``from utils import *`` where ``utils`` imports ``sys``) →
        their qualified names; followed through the star imports of the modules imported so."""
        found: dict[str, str] = {}
        pending, seen = list(self.shapes[name].star_imports), {name}
        while pending:
            source = pending.pop(0)
            if source in seen or source not in self.shapes:
                continue
            seen.add(source)
            shape = self.shapes[source]
            if not shape.lists_all:
                for bound, qualified in shape.library_imports.items():
                    if not bound.startswith("_"):
                        found.setdefault(bound, qualified)
            pending.extend(shape.star_imports)
        return found

    def _public_names(self, module: str, seen: set[str]) -> set[str]:
        """What ``from <module> import *`` binds of interest: its public functions and classes,
        and what it re-exports itself."""
        if module in seen or module not in self.shapes:
            return set()
        seen.add(module)
        shape = self.shapes[module]
        names = {n for n in [*shape.params, *shape.reexports] if not n.startswith("_")}
        for source in shape.star_imports:
            names |= self._public_names(source, seen)
        return names

    def order(self) -> list[str]:
        """Modules in conversion order: every module after the modules it imports (the entry last)."""
        ordered: list[str] = []
        visiting: set[str] = set()

        def visit(name: str) -> None:
            if name in ordered or name in visiting:
                return  # an import cycle: converted in the order met
            visiting.add(name)
            for imported in sorted(self.shapes[name].imports):
                visit(imported)
            visiting.discard(name)
            ordered.append(name)

        visit(self.entry)
        for name in sorted(self.modules):
            visit(name)
        return ordered

    def plan(self) -> dict[str, ProgramSeeds]:
        """Seeds for every module, after the rounds of analysis that carry facts across."""
        aliases = tuple(sorted(self.aliases().items()))
        python_outputs = self._python_outputs()
        row_collates = self._row_collates()
        backward_helpers = self._backward_helper_classes()
        models = self._derived_classes(dict(aliases), lambda base: base.startswith("torch.nn."))
        loaders = self._derived_classes(dict(aliases), DATA_LOADERS.__contains__)
        seeds = {
            name: ProgramSeeds(
                library=name != self.entry,
                relative_imports=tuple(sorted(shape.relative.items())),
                star_imports=tuple(sorted(self.star_bindings(name).items())),
                star_library_imports=tuple(sorted(self.star_library_bindings(name).items())),
                aliases=aliases,
                python_outputs=python_outputs,
                row_collates=row_collates,
                backward_helper_classes=backward_helpers,
                model_classes=models,
                loader_classes=loaders,
            )
            for name, shape in self.shapes.items()
        }
        self.home = self._home_module(seeds)
        if self.home != self.entry:
            seeds = {name: replace(seed, library=name != self.home) for name, seed in seeds.items()}
        seeds, facts = self._rounds(seeds)
        if not any(each.trains_here for each in facts.values()) and any(seed.library for seed in seeds.values()):
            # No module trains (none steps an optimizer or updates parameters by hand): what a
            # library is handed is not trained either (a saliency class of another module).
            seeds, facts = self._rounds({name: replace(seed, program_trains=False) for name, seed in seeds.items()})
        loggers = _file_logger_classes(facts)
        bundles = _bundle_classes(facts)
        return {
            name: replace(seed, file_logger_classes=loggers, bundle_classes=bundles) for name, seed in seeds.items()
        }

    def _rounds(self, seeds: dict[str, ProgramSeeds]) -> tuple[dict[str, ProgramSeeds], dict[str, ScriptFacts]]:
        """The rounds of analysis that carry facts across modules, from ``seeds`` until nothing
        changes (at most :data:`MAX_ROUNDS`): the seeds reached and the last round's facts."""
        facts: dict[str, ScriptFacts] = {}
        for _ in range(MAX_ROUNDS):
            facts = {name: analyse(m.module, m.source, seeds[name]) for name, m in self.modules.items()}
            derived = self._derive(facts, seeds)
            if derived == seeds:
                break
            seeds = derived
        return seeds, facts

    def _python_outputs(self) -> tuple[tuple[str, frozenset[int]], ...]:
        """Every module-level class of the program whose ``forward`` returns Python values, by
        qualified name, with their positions (a model built in one module from a class of another)."""
        found = []
        for name, module in self.modules.items():
            names: NameTable | None = None  # read only for a module with a ``forward``
            for node in module.module.body:
                if isinstance(node, cst.ClassDef) and defines_method(node, "forward"):
                    names = names or self.names_of(name)
                    positions = forward_python_outputs(node, builtins_at(names, (node.name.value, "forward")))
                    if positions:
                        found.append((f"{name}.{node.name.value}", positions))
        return tuple(sorted(found, key=lambda entry: entry[0]))

    def _row_collates(self) -> tuple[tuple[str, frozenset[int]], ...]:
        """Every module-level function and class method of the program returning rows joined
        from the samples' own rows (``syntax.concatenated_rows``: a detector's ``collate_fn``), by
        qualified name (``datasets.ListDataset.collate_fn``), with their positions: a loader of one
        module may collate with a function of another."""
        found = []
        for name, module in self.modules.items():
            names = self.names_of(name)
            if not names.any_import_of("torch"):
                continue  # no torch, no ``torch.cat``
            for node in module.module.body:
                functions: list[tuple[tuple[str, ...], cst.FunctionDef]] = []
                if isinstance(node, cst.FunctionDef):
                    functions = [((), node)]
                elif isinstance(node, cst.ClassDef):
                    functions = [((node.name.value,), method) for method in class_methods(node)]
                for owner, function in functions:
                    scope = (*owner, function.name.value)
                    positions = concatenated_rows(function, functools.partial(names.qualified_name, scope=scope))
                    if positions:
                        found.append((".".join((name, *scope)), positions))
        return tuple(sorted(found, key=lambda entry: entry[0]))

    def _backward_helper_classes(self) -> frozenset[str]:
        """Every module-level class of the program defining a ``backward`` method, by qualified
        name (an instance built in another module: its ``backward()`` is that method)."""
        return frozenset(
            f"{name}.{node.name.value}"
            for name, module in self.modules.items()
            for node in module.module.body
            if isinstance(node, cst.ClassDef) and defines_backward(node)
        )

    def _derived_classes(self, aliases: dict[str, str], root: Callable[[str], bool]) -> frozenset[str]:
        """Every module-level class of the program deriving from a class ``root`` accepts (a
        ``torch.nn`` module, torch's ``DataLoader``), by qualified name: directly, or through a
        base that is such a class of the program (named as its module imports it, a re-export
        followed to where it is defined)."""
        bases: dict[str, set[str]] = {}
        for name, module in self.modules.items():
            classes = [node for node in module.module.body if isinstance(node, cst.ClassDef)]
            if not classes:
                continue
            names = self.names_of(name)
            relative = self.shapes[name].relative
            for node in classes:
                bases[f"{name}.{node.name.value}"] = {
                    _program_base(base.value, names, relative, aliases, name) for base in node.bases
                }
        found = {cls for cls, named in bases.items() if any(root(base) for base in named)}
        grown = True
        while grown:
            more = {cls for cls, named in bases.items() if named & found} - found
            found |= more
            grown = bool(more)
        return frozenset(found)

    def _home_module(self, seeds: dict[str, ProgramSeeds]) -> str:
        """The entry script, unless it builds nothing to train (no model, optimizer or loader,
        no backward) and calls a function of exactly one other module that builds it all (none
        of its parameters is a trained object) and trains (a thin ``main.py`` whose ``__main__`` block runs ``src.train.run(parse_args())``):
        that module is then converted as a script whose home is that function, which creates
        the accelerator, and the entry is left as it is (it has nothing to convert)."""
        entry = self.modules[self.entry]
        alone = replace(seeds[self.entry], library=False)
        entry_facts = analyse(entry.module, entry.source, alone)
        if entry_facts.trained_objects or entry_facts.call_sites.get(".backward"):
            return self.entry
        finder = CrossCalls(entry_facts, self.entry, {name: shape.params for name, shape in self.shapes.items()}, {})
        entry.module.visit(finder)
        homes = set()
        for module, function in {(call.callee_module, call.callee) for call in finder.found}:
            candidate = self.modules[module]
            facts = analyse(candidate.module, candidate.source, replace(seeds[module], library=False))
            handed_in = iterates_parameters(candidate.module, function) or (
                set(self.shapes[module].params.get(function, ())) & facts.trained_objects
            )
            if (
                facts.trained_objects
                and facts.backward_functions
                and facts.home_kind == "function"
                and function in {facts.main_function, facts.creating_function}
                and not handed_in  # what the entry passes in would stay unprepared
            ):
                homes.add(module)
        return homes.pop() if len(homes) == 1 else self.entry

    def _derive(self, facts: dict[str, ScriptFacts], seeds: dict[str, ProgramSeeds]) -> dict[str, ProgramSeeds]:
        """The seeds of the next round: what this round's facts of each module tell the others."""
        trees = {name: module.module for name, module in self.modules.items()}
        parents = class_parents(trees, self.shapes, facts)
        initialisers = self.inherited_inits = initialisers_by_name(parents, self.shapes)
        calls, values = self._cross_calls(facts, parents, initialisers)
        prepared_in = self._prepared_in(facts)
        instances = self._instance_calls(facts)
        received = Received({name: {} for name in self.modules}, {name: set() for name in self.modules})
        method_calls = [call for found in instances.values() for call in found.method_calls]
        received.through_calls([*calls, *method_calls], facts, prepared_in)
        received.through_instances(instances, facts, prepared_in)
        received.through_base_classes(parents, facts)
        looping = self._looping_functions(facts, seeds)
        backward = self._backward_functions(facts, seeds)
        learnt = Learnt(
            received=received,
            handed_over=models_handed_over([*calls, *method_calls], facts),
            reaches=self._accelerator_reaches([*calls, *values], facts),
            given_models=classes_given_models(instances, facts, prepared_in),
            loader_factories=self._loader_factories(facts),
            loader_tuple_factories=_qualified_mapping(facts, "loader_tuple_factories"),
            loader_positions=_qualified_mapping(facts, "loader_positions"),
            looping=looping,
            backward=backward,
            training_classes={
                f"{name}.{cls}"
                for name, shape in self.shapes.items()
                for cls in shape.classes
                if f"{name}.{cls}" in looping | backward
            },
            drawing={f"{name}.{f}" for name, module_facts in facts.items() for f in module_facts.drawing_functions},
            downloading={
                f"{name}.{f}"
                for name, module_facts in facts.items()
                for f in module_facts.download_functions | module_facts.downloading_methods
            },
            training_bases=by_module(training_bases(parents, facts, calls)),
            training_base_subclasses=by_module(inheriting_training(parents, self.shapes, facts)),
            inherited_accelerator=by_module(inheriting_accelerator(parents, self.shapes, facts)),
            per_epoch=per_epoch_arguments(calls, facts),
            stepped=stepped_elsewhere([*calls, *method_calls], parents, facts),
            # A checkpoint one module saves may be loaded by another, converted before or after it.
            saving={name for name, module_facts in facts.items() if module_facts.call_sites.get("torch.save")},
            evaluating_calls=_joined_calls_out(facts, "evaluating_calls_out"),
            per_process_calls={
                **_joined_calls_out(facts, "per_process_calls_out"),
                **{f"{use.callee_module}.{use.callee}": False for use in values},
            },
            training_calls=_joined_calls_out(facts, "training_calls_out"),
            called_on_some_ranks={
                callee
                for module_facts in facts.values()
                for callee in locality_of(module_facts).program_calls_on_some_ranks
            },
            path_writers=_qualified(facts, "path_parameter_writes"),
            path_readers=_qualified(facts, "path_parameter_reads"),
            handle_openers=_handle_openers(facts),
            main_process_openers=_joined_calls_out(facts, "main_process_openers_out"),
            per_batch_file_writers=_qualified(facts, "per_batch_file_parameters"),
            imported_gpu_indices=imported_gpu_indices(facts),
            model_factories=_qualified_names(facts, "model_factories"),
            optimizer_methods=_qualified_names(facts, "optimizer_methods"),
            model_parts=_qualified_names(facts, "model_parts"),
            evaluating_methods=_qualified_names(facts, "evaluating_methods"),
            joined_rows_factories=_qualified_mapping(facts, "joined_rows_factories"),
        )
        # What a class of a module keeps open does not depend on the other modules; told from the
        # second round on, so a logger of one module built in a call of another's function (or
        # method) is seen as one where it is built. So do a module's training bundles.
        loggers = _file_logger_classes(facts)
        bundles = _bundle_classes(facts)
        return {
            name: replace(
                learnt.seeds(name, old, self.shapes[name]), file_logger_classes=loggers, bundle_classes=bundles
            )
            for name, old in seeds.items()
        }

    def _cross_calls(
        self,
        facts: dict[str, ScriptFacts],
        parents: dict[tuple[str, str], set[tuple[str, str]]],
        initialisers: dict[str, tuple[str, str]],
    ) -> tuple[list[CrossCall], list[CrossCall]]:
        """Every call from one module to a function or class of another, in module order; and
        every use of another module's function as a value (a hook, a ``partial``), as a call
        without arguments from the code that hands it over."""
        functions = {name: shape.params for name, shape in self.shapes.items()}
        calls: list[CrossCall] = []
        values: list[CrossCall] = []
        for name, module in self.modules.items():
            finder = CrossCalls(facts[name], name, functions, bases_elsewhere(name, parents), initialisers)
            module.module.visit(finder)
            calls.extend(finder.found)
            values.extend(use for use in finder.values if use.callee not in self.shapes[use.callee_module].classes)
        return calls, values

    def _prepared_in(self, facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
        """Module → the names it prepares itself (the home module: what its ``prepare`` will cover)."""
        return {
            name: (
                prepared_by_entry(facts[name], self.shapes[name]) if name == self.home else set(facts[name].prepared)
            )
            for name in self.modules
        }

    def _instance_calls(self, facts: dict[str, ScriptFacts]) -> dict[str, InstanceCalls]:
        """Per module: its instances of other modules' classes and what it passes to them."""
        found: dict[str, InstanceCalls] = {}
        for name, module in self.modules.items():
            found[name] = InstanceCalls(facts[name], name, self.shapes)
            module.module.visit(found[name])
        return found

    def _loader_factories(self, facts: dict[str, ScriptFacts]) -> set[str]:
        """Module-level functions (qualified) that return a data loader."""
        return {
            f"{name}.{function}"
            for name, shape in self.shapes.items()
            for function, returned in shape.returns.items()
            if function in facts[name].loader_returning_functions
            or any(self._returns_loader(facts[name], function, value) for value in returned)
        }

    def _looping_functions(self, facts: dict[str, ScriptFacts], seeds: dict[str, ProgramSeeds]) -> set[str]:
        """Functions (qualified) that loop over a loader, directly or through what they call."""
        found: set[str] = set()
        for name in self.shapes:
            module_facts = facts[name]
            loops = {loop.function for loop in [*module_facts.train_loops, *module_facts.eval_loops]}
            reaching = seeds[name].looping_functions
            found |= {f"{name}.{f}" for f in callers_closure(loops, module_facts.call_graph, reaching=reaching)}
        return found

    def _backward_functions(self, facts: dict[str, ScriptFacts], seeds: dict[str, ProgramSeeds]) -> set[str]:
        """Functions (qualified) that run a backward that trains, directly or through what they
        call: not those of a module whose backward trains nothing (gradients for an input, in a
        program none of whose modules trains: ``ProgramSeeds.program_trains``), whose callers'
        loops evaluate."""
        found: set[str] = set()
        for name, shape in self.shapes.items():
            module_facts = facts[name]
            trains = {loop.function for loop in module_facts.train_loops}
            if module_facts.backward_trains:
                trains |= {function_at(shape, site.line) for site in module_facts.call_sites.get(".backward", ())}
            reaching = seeds[name].backward_functions
            found |= {f"{name}.{f}" for f in callers_closure(trains, module_facts.call_graph, reaching=reaching)}
        return found

    def _returns_loader(self, facts: ScriptFacts, function: str, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call):
            return facts.builds_data_loader(value.func, (function,))
        return dotted(value) in facts.loaders

    def _accelerator_reaches(self, calls: Iterable[CrossCall], facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
        """Library functions every one of whose callers in the program holds the accelerator (the
        entry's functions it reaches, and library functions it reached in the previous round)."""
        entry = facts[self.home]
        ok: dict[tuple[str, str], bool] = {}
        for call in calls:
            caller = facts[call.caller_module]
            if call.caller_module == self.home:
                # Module-level code holds it too where the entry creates it there (a script
                # without functions, or its ``__main__`` block).
                holds = entry.has_accelerator and call.function in entry.accessible_functions
            else:
                holds = call.function in caller.accessible_functions
            key = (call.callee_module, call.callee)
            ok[key] = ok.get(key, True) and holds
        reaches: dict[str, set[str]] = {}
        for (module, function), holds in ok.items():
            if holds and module != self.home:
                reaches.setdefault(module, set()).add(function)
        return reaches


def _qualified(facts: dict[str, ScriptFacts], fact: str) -> tuple[tuple[str, int, str], ...]:
    """``fact`` (function, position, parameter) of every module, functions by qualified name."""
    return tuple(
        sorted(
            (f"{name}.{function}", position, param)
            for name, module_facts in facts.items()
            for function, position, param in getattr(module_facts, fact)
        )
    )


def _handle_openers(facts: dict[str, ScriptFacts]) -> tuple[tuple[str, str], ...]:
    """Every function of the program returning a file it opens for writing (see
    ``file_flow.kept_files``), by qualified name, with its mode."""
    return tuple(
        sorted(
            (f"{name}.{function}", mode)
            for name, module_facts in facts.items()
            for function, mode in module_facts.handle_openers.items()
        )
    )


def _qualified_mapping(facts: dict[str, ScriptFacts], fact: str) -> dict[str, Any]:
    """``fact`` (a mapping of the module's own functions: ``loader_tuple_factories``) of every
    module, its functions qualified."""
    return {
        f"{name}.{own}": value
        for name, module_facts in facts.items()
        for own, value in getattr(module_facts, fact).items()
    }


def _qualified_names(facts: dict[str, ScriptFacts], fact: str) -> set[str]:
    """``fact`` (a set of the module's own names: ``model_factories``) of every module, qualified."""
    return {f"{name}.{own}" for name, module_facts in facts.items() for own in getattr(module_facts, fact)}


def _file_logger_classes(facts: dict[str, ScriptFacts]) -> frozenset[str]:
    """Every class of the program keeping a file open for writing (see ``file_flow.file_loggers``),
    by qualified name."""
    return frozenset(f"{name}.{cls}" for name, found in facts.items() for cls in found.file_logger_classes)


def _bundle_classes(facts: dict[str, ScriptFacts]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """Every training bundle of the program (see ``ScriptFacts.bundle_classes``), by qualified
    name, with its (attribute, role) pairs."""
    return tuple(
        sorted((f"{name}.{cls}", held) for name, found in facts.items() for cls, held in found.bundle_classes.items())
    )


def _joined_calls_out(facts: dict[str, ScriptFacts], fact: str) -> dict[str, bool]:
    """A verdict on each call out to another module's function (``fact``: ``evaluating_calls_out``,
    ``training_calls_out``, ``per_process_calls_out``), joined over every module: whether it holds for every such call."""
    joined: dict[str, bool] = {}
    for module_facts in facts.values():
        for callee, verdict in getattr(module_facts, fact).items():
            joined[callee] = joined.get(callee, True) and verdict
    return joined


def convert_program(modules: Sequence[ProgramModule], entry: str, options: Options) -> dict[str, ConversionOutcome]:
    """Convert every module of the program whose entry script is ``entry`` (a module name),
    libraries first; the outcome of each, by module name."""
    from accel_convert.codemods import convert_module

    program = Program(modules, entry)
    seeds = program.plan()
    inherited_inits = program.inherited_inits
    takes_accelerator: dict[str, int | None] = {}
    bindable: set[str] = set()
    outcomes: dict[str, ConversionOutcome] = {}
    saved = False
    for name in program.order():
        module = program.modules[name]
        module_seeds = replace(
            seeds[name],
            accelerator_parameters=tuple(sorted(takes_accelerator.items())),
            accelerator_bindable=frozenset(bindable),
            saved_elsewhere=seeds[name].saved_elsewhere or saved,
        )
        outcome = convert_module(module.module, options, module.source, module_seeds)
        outcomes[name] = outcome
        if outcome.module is not module.module:
            taking = accelerator_parameters(name, program.shapes[name], outcome.module)
            takes_accelerator.update(taking)
            bindable |= bindable_accelerator_parameters(name, outcome.module, taking)
        # Constructing a class without ``__init__`` passes the accelerator where its base's takes it.
        for subclass, (base_module, base) in inherited_inits.items():
            taken = f"{base_module}.{base}"
            if taken in takes_accelerator:
                takes_accelerator.setdefault(subclass, takes_accelerator[taken])
        # A checkpoint a library saves (``utils.save_checkpoint``) may be loaded by its importers.
        saved = saved or "accelerator.save(" in outcome.module.code
    return outcomes
