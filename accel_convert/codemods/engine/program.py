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
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import ScriptFacts, callers_closure
from accel_convert.codemods.engine.iteration import iterated
from accel_convert.codemods.engine.local_imports import absolute_module
from accel_convert.codemods.engine.model import ConversionOutcome, Options
from accel_convert.codemods.engine.names import NameCollector
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.codemods.engine.program_seeds import ROLES, ProgramSeeds, program_callee
from accel_convert.codemods.engine.syntax import (
    dotted,
    forward_python_outputs,
    nodes_in,
    parameter_filled,
    parameter_names,
)
from accel_convert.codemods.engine.torch_names import DATA_LOADERS

#: Rounds of analysis at most: each round carries facts one module boundary further.
MAX_ROUNDS = 6


@dataclass
class ProgramModule:
    """One module of a program: its dotted name (``engine``, ``mylib.utils``; a package's
    ``__init__.py`` is ``mylib``), its tree, and the text or bytes it was parsed from."""

    name: str
    module: cst.Module
    source: str | bytes | None = None
    is_package: bool = False
    #: Filled by :func:`convert_program`.
    calls: list[_CrossCall] = field(default_factory=list)


@dataclass(frozen=True)
class _CrossCall:
    """A call from one module to a module-level function of another."""

    caller_module: str
    #: The calling module-level function ("<module>" outside any).
    function: str
    callee_module: str
    callee: str
    #: (parameter the argument fills, argument as written) for plain-name arguments.
    arguments: tuple[tuple[str, str], ...]
    #: ``super().__init__(...)`` in a subclass: the base's ``__init__`` runs, nothing is built.
    through_super: bool = False


@dataclass
class _ModuleShape:
    """What one module looks like, read once (syntax only)."""

    #: Module-level function → its parameter names, and which of them are positional.
    params: dict[str, tuple[str, ...]]
    positional: dict[str, tuple[str, ...]]
    #: Module-level function → first and last line.
    extents: dict[str, tuple[int, int]]
    #: Module-level function → returned expressions' top-level elements (names or calls).
    returns: dict[str, list[cst.BaseExpression]]
    #: Binding → absolute qualified name, for relative imports (``from .utils import x``).
    relative: dict[str, str]
    #: Program modules this module imports.
    imports: set[str]
    #: Module-level classes with an ``__init__`` (listed in ``params`` by their constructor's
    #: parameters, ``self`` left out).
    classes: set[str] = field(default_factory=set)
    #: Module-level ``from <program module> import name [as bound]``: bound → qualified name of
    #: what it names there (a package's ``__init__`` re-exporting ``from .engine import train``).
    reexports: dict[str, str] = field(default_factory=dict)
    #: Program modules this module star-imports (``from .engine import *``).
    star_imports: list[str] = field(default_factory=list)
    #: Module-level class → its methods → their parameters after the instance, and how many of
    #: them are positional (``early_stopping(val_loss, model)`` fills ``__call__``'s).
    methods: dict[str, dict[str, tuple[tuple[str, ...], int]]] = field(default_factory=dict)


class _Shape(cst.CSTVisitor):
    def __init__(self, name: str, is_package: bool, program: set[str]) -> None:
        super().__init__()
        self.name, self.is_package, self.program = name, is_package, program
        self.depth = 0
        self.current: str | None = None
        self.shape = _ModuleShape({}, {}, {}, {}, {}, set())

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1
        if self.depth == 1:
            params = node.params
            self.current = node.name.value
            self.shape.params[node.name.value] = parameter_names(node)
            self.shape.positional[node.name.value] = tuple(
                p.name.value for p in [*params.posonly_params, *params.params]
            )
            self.shape.returns.setdefault(node.name.value, [])

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.current = None

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.depth == 0:
            # Constructing a class calls its ``__init__``: arguments fill its parameters (after
            # ``self``) as a function call's do, and a training class gains the accelerator there.
            init = next(
                (
                    line
                    for line in (node.body.body if isinstance(node.body, cst.IndentedBlock) else ())
                    if isinstance(line, cst.FunctionDef) and line.name.value == "__init__"
                ),
                None,
            )
            methods = self.shape.methods.setdefault(node.name.value, {})
            for line in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
                if isinstance(line, cst.FunctionDef):
                    positional = [*line.params.posonly_params, *line.params.params][1:]
                    every = [*positional, *line.params.kwonly_params]
                    methods[line.name.value] = (tuple(p.name.value for p in every), len(positional))
            if init is not None:
                params = init.params
                every = [*params.posonly_params, *params.params, *params.kwonly_params][1:]
                positional = [*params.posonly_params, *params.params][1:]
                self.shape.params[node.name.value] = tuple(p.name.value for p in every)
                self.shape.positional[node.name.value] = tuple(p.name.value for p in positional)
                self.shape.classes.add(node.name.value)
        self.depth += 1

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_Return(self, node: cst.Return) -> None:
        if self.current is not None and self.depth == 1 and node.value is not None:
            value = node.value
            elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
            self.shape.returns[self.current].extend(elements)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name) or ""
            parts = full.split(".")
            self.shape.imports.update(
                p for p in (".".join(parts[: i + 1]) for i in range(len(parts))) if p in self.program
            )

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None else None
        base = absolute_module(module, len(node.relative), self.name, self.is_package)
        if base is None:
            return
        if base in self.program:
            self.shape.imports.add(base)
        if isinstance(node.names, cst.ImportStar):
            if base in self.program and self.depth == 0:
                self.shape.star_imports.append(base)
            return
        for alias in node.names:
            imported = dotted(alias.name) or ""
            full = f"{base}.{imported}" if base else imported
            if full in self.program:
                self.shape.imports.add(full)
            bound = alias.asname.name if alias.asname is not None else alias.name
            if not isinstance(bound, cst.Name):
                continue
            if node.relative:
                self.shape.relative[bound.value] = full
            if base in self.program and self.depth == 0:
                self.shape.reexports[bound.value] = full


def _extents(source: str | bytes | None, module: cst.Module) -> dict[str, tuple[int, int]]:
    tree = python_ast(source if source is not None else module.code)
    if tree is None:
        return {}
    return {
        node.name: (min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


#: What ``_Calls`` records as the argument for a DataLoader built in the call's arguments
#: (``engine.train(model, DataLoader(...))``): the caller prepares it where it stands (ACC120), so
#: the parameter is a prepared loader in the callee's module. Not an identifier: no name matches it.
INLINE_LOADER = "<DataLoader(...)>"


class _Calls(NameCollector):
    """Calls of module-level functions of other program modules, with their arguments."""

    def __init__(
        self,
        facts: ScriptFacts,
        name: str,
        functions: dict[str, dict[str, tuple[str, ...]]],
        bases: dict[str, tuple[str, str]],
        initialisers: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        super().__init__()
        self.facts, self.name, self.functions = facts, name, functions
        #: This module's classes → the class of another program module they derive from.
        self.bases = bases
        #: Program classes without an ``__init__`` (qualified) → the class whose ``__init__``
        #: constructing them runs.
        self.initialisers = initialisers or {}
        self.found: list[_CrossCall] = []

    def visit_Call(self, node: cst.Call) -> None:
        found = self._callee(node)
        if found is None:
            return
        callee, through_super = found
        module, _, function = callee.rpartition(".")
        if module == self.name or function not in self.functions.get(module, {}):
            return
        arguments = self._arguments(node, self.functions[module][function])
        caller = self.scope[0] if self.scope else "<module>"
        self.found.append(_CrossCall(self.name, caller, module, function, arguments, through_super))

    def _callee(self, node: cst.Call) -> tuple[str, bool] | None:
        """The qualified name of the program function or class whose code the call runs, and
        whether it runs through ``super().__init__(...)``; None for anything else."""
        if _calls_super_init(node) and self.scope and self.scope[0] in self.bases:
            return ".".join(self.bases[self.scope[0]]), True
        callee = program_callee(self.facts, node.func, self.scope)
        if callee is None:
            callee = self._local_class_initialised_elsewhere(node.func)
        if callee is None:
            return None
        if callee in self.initialisers:
            # ``ClassifierTrainer(model, ...)`` with no ``__init__`` of its own runs its base's
            # (in another module): the arguments fill the base's parameters, as if it were built.
            return ".".join(self.initialisers[callee]), False
        return callee, False

    def _local_class_initialised_elsewhere(self, func: cst.BaseExpression) -> str | None:
        """A class of this module without ``__init__`` whose base is another module's (its
        qualified name), unless a local of that name shadows it."""
        if not isinstance(func, cst.Name):
            return None
        local = f"{self.name}.{func.value}"
        scope = self.facts.name_table.scopes.get(tuple(self.scope)) if self.scope else None
        shadowed = scope is not None and scope.binds(func.value)
        return local if local in self.initialisers and not shadowed else None

    def _arguments(self, node: cst.Call, params: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """(parameter filled, argument as written) for the call's plain-name arguments (and
        loaders built in the call, as :data:`INLINE_LOADER`)."""
        arguments = []
        for index, arg in enumerate(node.args):
            value = dotted(arg.value)
            if value is None and isinstance(arg.value, cst.Call):
                loader = self.facts.callee_name(arg.value.func, tuple(self.scope)) in DATA_LOADERS
                value = INLINE_LOADER if loader else None
            if value is None or arg.star:
                continue
            param = parameter_filled(arg, index, params)
            if param is not None:
                arguments.append((param, value))
        return tuple(arguments)


def _calls_super_init(node: cst.Call) -> bool:
    """``super().__init__(...)`` (or ``super(Trainer, self).__init__(...)``)."""
    func = node.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value == "__init__"
        and isinstance(func.value, cst.Call)
        and dotted(func.value.func) == "super"
    )


class _InstanceCalls(NameCollector):
    """Instances of other program modules' classes (``stopper = pytorchtools.EarlyStopping(...)``)
    and the plain names passed to them: to the constructor, to the instance itself
    (``stopper(val_loss, model)``) or to one of its methods (``stopper.step(model)``).
    Names are file-wide, as facts are."""

    def __init__(self, facts: ScriptFacts, name: str, shapes: dict[str, _ModuleShape]) -> None:
        super().__init__()
        self.facts, self.name, self.shapes = facts, name, shapes
        self.classes = {module: shape.classes for module, shape in shapes.items()}
        #: Instance name → (module, class).
        self.instances: dict[str, tuple[str, str]] = {}
        #: (module, class) → names passed to it, with the calling function.
        self.passed: dict[tuple[str, str], set[tuple[str, str]]] = {}
        #: (module, parameter of one of its methods, name passed) for calls of an instance.
        self.filled: set[tuple[str, str, str]] = set()

    def _program_class(self, func: cst.BaseExpression) -> tuple[str, str] | None:
        callee = program_callee(self.facts, func, self.scope)
        if callee is None:
            return None
        module, _, cls = callee.rpartition(".")
        return (module, cls) if module != self.name and cls in self.classes.get(module, set()) else None

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and len(node.targets) == 1:
            found = self._program_class(node.value.func)
            target = dotted(node.targets[0].target)
            if found is not None and target is not None:
                self.instances[target] = found

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        found = self._program_class(func)
        if found is None:
            instance = dotted(func.value) if isinstance(func, cst.Attribute) else dotted(func)
            found = self.instances.get(instance) if instance is not None else None
        if found is None:
            return
        caller = self.scope[0] if self.scope else "<module>"
        names = {(caller, value) for arg in node.args if not arg.star and (value := dotted(arg.value)) is not None}
        self.passed.setdefault(found, set()).update(names)
        if self._program_class(func) is not None:
            return  # the constructor: its arguments are followed as calls (``_Calls``)
        method = func.attr.value if isinstance(func, cst.Attribute) else "__call__"
        params, positional = self.shapes[found[0]].methods.get(found[1], {}).get(method, ((), 0))
        for index, arg in enumerate(node.args):
            value = dotted(arg.value)
            if value is None or arg.star:
                continue
            param = arg.keyword.value if arg.keyword is not None else (params[index] if index < positional else None)
            if param is not None and param in params:
                self.filled.add((found[0], param, value))


def _iterates_parameters(module: cst.Module, function: str) -> bool:
    """Whether the module-level ``function`` loops over one of its parameters (``for x, y in
    train_loader``, through ``enumerate``/``tqdm``/``zip``): data its caller hands it."""
    definition = next(
        (node for node in module.body if isinstance(node, cst.FunctionDef) and node.name.value == function), None
    )
    if definition is None:
        return False
    params = set(parameter_names(definition))
    for node in nodes_in(definition.body):
        if isinstance(node, (cst.For, cst.CompFor)):
            if dotted(iterated(node.iter, through_any_call=True)) in params:
                return True
    return False


def _follow(name: str, aliases: dict[str, str]) -> str:
    """Where a chain of re-exports ends (a cycle ends where it would repeat)."""
    seen = {name}
    while name in aliases and aliases[name] not in seen:
        name = aliases[name]
        seen.add(name)
    return name


def _within(extent: tuple[int, int] | None, line: int) -> bool:
    return extent is not None and extent[0] <= line <= extent[1]


def _function_at(shape: _ModuleShape, line: int) -> str:
    return next((name for name, extent in shape.extents.items() if _within(extent, line)), "<module>")


def _prepared_by_entry(facts: ScriptFacts, shape: _ModuleShape) -> set[str]:
    """Names the entry script's ``prepare`` calls will cover: the trained objects its home block
    binds (a per-epoch scheduler is not prepared), those a function training the model it
    receives builds (``train_model(model, ...)`` building its loaders and optimizer prepares them
    there), and those it already prepares. Counting only the home block, a loader prepared in
    such a function was known as prepared only once the ``prepare`` was written: the second
    conversion then dropped ``device=`` from its batches in another module, the first had not."""
    wanted = facts.models | facts.optimizers | facts.loaders | (facts.schedulers - facts.per_epoch_schedulers)
    home = facts.creating_function or facts.main_function if facts.home_kind == "function" else None
    prepared = set(facts.prepared)
    for name in wanted:
        for site in facts.assign_sites.get(name, ()):
            inside = _function_at(shape, site.line)
            if (
                (home is not None and inside in {home, facts.main_function})
                or (home is None and inside == "<module>")
                or inside in facts.training_functions
            ):
                prepared.add(name)
    return prepared


class Program:
    """The modules of one program and the seeds each gets."""

    def __init__(self, modules: Sequence[ProgramModule], entry: str) -> None:
        self.modules = {module.name: module for module in modules}
        self.entry = entry
        #: The module that creates the accelerator: the entry script, or the module of the one
        #: function a thin entry hands everything to (see :meth:`_home_module`).
        self.home = entry
        names = set(self.modules)
        self.shapes: dict[str, _ModuleShape] = {}
        for module in modules:
            visitor = _Shape(module.name, module.is_package, names)
            module.module.visit(visitor)
            visitor.shape.extents = _extents(module.source, module.module)
            self.shapes[module.name] = visitor.shape
        #: Classes without an ``__init__`` (qualified) → the class whose ``__init__`` builds them
        #: (see :meth:`initialisers`), as the last round of :meth:`plan` found them.
        self.inherited_inits: dict[str, tuple[str, str]] = {}

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
        seeds = {
            name: ProgramSeeds(
                library=name != self.entry,
                relative_imports=tuple(sorted(shape.relative.items())),
                star_imports=tuple(sorted(self.star_bindings(name).items())),
                aliases=aliases,
                python_outputs=python_outputs,
            )
            for name, shape in self.shapes.items()
        }
        self.home = self._home_module(seeds)
        if self.home != self.entry:
            seeds = {name: replace(seed, library=name != self.home) for name, seed in seeds.items()}
        for _ in range(MAX_ROUNDS):
            facts = {name: analyse(m.module, m.source, seeds[name]) for name, m in self.modules.items()}
            derived = self._derive(facts, seeds)
            if derived == seeds:
                break
            seeds = derived
        return seeds

    def _python_outputs(self) -> tuple[tuple[str, frozenset[int]], ...]:
        """Every module-level class of the program whose ``forward`` returns Python values, by
        qualified name, with their positions (a model built in one module from a class of another)."""
        found = []
        for name, module in self.modules.items():
            for node in module.module.body:
                if isinstance(node, cst.ClassDef):
                    positions = forward_python_outputs(node)
                    if positions:
                        found.append((f"{name}.{node.name.value}", positions))
        return tuple(sorted(found, key=lambda entry: entry[0]))

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
        finder = _Calls(entry_facts, self.entry, {name: shape.params for name, shape in self.shapes.items()}, {})
        entry.module.visit(finder)
        homes = set()
        for module, function in {(call.callee_module, call.callee) for call in finder.found}:
            candidate = self.modules[module]
            facts = analyse(candidate.module, candidate.source, replace(seeds[module], library=False))
            handed_in = _iterates_parameters(candidate.module, function) or (
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
        parents = self._class_parents(facts)
        initialisers = self.inherited_inits = self.initialisers(parents)
        calls = self._cross_calls(facts, parents, initialisers)
        prepared_in = self._prepared_in(facts)
        instances = self._instance_calls(facts)
        received = _Received({name: {} for name in self.modules}, {name: set() for name in self.modules})
        received.through_calls(calls, facts, prepared_in)
        received.through_instances(instances, facts, prepared_in)
        received.through_base_classes(parents, facts)
        learnt = _Learnt(
            received=received,
            handed_over=_models_handed_over(calls, facts),
            reaches=self._accelerator_reaches(calls, facts),
            given_models=_classes_given_models(instances, facts, prepared_in),
            loader_factories=self._loader_factories(facts),
            looping=self._looping_functions(facts, seeds),
            backward=self._backward_functions(facts, seeds),
            drawing={f"{name}.{f}" for name, module_facts in facts.items() for f in module_facts.drawing_functions},
            training_bases=_by_module(self._training_bases(parents, facts, calls)),
            training_base_subclasses=_by_module(self._inheriting_training(parents, facts)),
            inherited_accelerator=_by_module(self._inheriting_accelerator(parents, facts)),
            per_epoch=_per_epoch_arguments(calls, facts),
            # A checkpoint one module saves may be loaded by another, converted before or after it.
            saving={name for name, module_facts in facts.items() if module_facts.call_sites.get("torch.save")},
        )
        return {name: learnt.seeds(name, old, self.shapes[name]) for name, old in seeds.items()}

    def _cross_calls(
        self,
        facts: dict[str, ScriptFacts],
        parents: dict[tuple[str, str], set[tuple[str, str]]],
        initialisers: dict[str, tuple[str, str]],
    ) -> list[_CrossCall]:
        """Every call from one module to a function or class of another, in module order."""
        functions = {name: shape.params for name, shape in self.shapes.items()}
        calls: list[_CrossCall] = []
        for name, module in self.modules.items():
            finder = _Calls(facts[name], name, functions, _bases_elsewhere(name, parents), initialisers)
            module.module.visit(finder)
            calls.extend(finder.found)
        return calls

    def _prepared_in(self, facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
        """Module → the names it prepares itself (the home module: what its ``prepare`` will cover)."""
        return {
            name: (
                _prepared_by_entry(facts[name], self.shapes[name]) if name == self.home else set(facts[name].prepared)
            )
            for name in self.modules
        }

    def _instance_calls(self, facts: dict[str, ScriptFacts]) -> dict[str, _InstanceCalls]:
        """Per module: its instances of other modules' classes and what it passes to them."""
        found: dict[str, _InstanceCalls] = {}
        for name, module in self.modules.items():
            found[name] = _InstanceCalls(facts[name], name, self.shapes)
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
        """Functions (qualified) that run a backward, directly or through what they call."""
        found: set[str] = set()
        for name, shape in self.shapes.items():
            module_facts = facts[name]
            trains = {loop.function for loop in module_facts.train_loops}
            trains |= {_function_at(shape, site.line) for site in module_facts.call_sites.get(".backward", ())}
            reaching = seeds[name].backward_functions
            found |= {f"{name}.{f}" for f in callers_closure(trains, module_facts.call_graph, reaching=reaching)}
        return found

    def _inheriting_accelerator(
        self, parents: dict[tuple[str, str], set[tuple[str, str]]], facts: dict[str, ScriptFacts]
    ) -> set[tuple[str, str]]:
        """(module, class) of classes with no ``__init__`` whose inherited one keeps the
        accelerator (a base in another module, or in its own when another module constructs it):
        their instances hold ``self.accelerator`` for their own methods."""
        return {
            (module, cls)
            for (module, cls), (base_module, base) in self.initialiser_classes(parents).items()
            if base in facts[base_module].training_classes
        }

    def _class_parents(self, facts: dict[str, ScriptFacts]) -> dict[tuple[str, str], set[tuple[str, str]]]:
        """(module, class) of every module-level class → the program classes it derives from
        (``Trainer(BaseTrainer)`` with ``from base import BaseTrainer`` → ``base.base_trainer``)."""
        parents: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for name, module in self.modules.items():
            for node in module.module.body:
                if not isinstance(node, cst.ClassDef):
                    continue
                found = parents.setdefault((name, node.name.value), set())
                for base in node.bases:
                    written = dotted(base.value)
                    if written in self.shapes[name].methods:
                        found.add((name, written))
                        continue
                    qualified = program_callee(facts[name], base.value, ())
                    owner, _, cls = (qualified or "").rpartition(".")
                    if owner in self.shapes and cls in self.shapes[owner].methods:
                        found.add((owner, cls))
        return parents

    def initialiser_classes(
        self, parents: dict[tuple[str, str], set[tuple[str, str]]]
    ) -> dict[tuple[str, str], tuple[str, str]]:
        """(module, class) of each program class without an ``__init__`` of its own → the program
        class whose ``__init__`` constructing it runs: the first up its chain of single bases that
        defines one (several bases: the method resolution order decides, not followed)."""
        found: dict[tuple[str, str], tuple[str, str]] = {}
        for child in parents:
            module, cls = child
            if cls in self.shapes[module].classes:
                continue
            current, seen = child, {child}
            while current[1] not in self.shapes[current[0]].classes:
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

    def initialisers(self, parents: dict[tuple[str, str], set[tuple[str, str]]]) -> dict[str, tuple[str, str]]:
        """:meth:`initialiser_classes` keyed by qualified name (``trainers.ClassifierTrainer``)."""
        return {f"{module}.{cls}": base for (module, cls), base in self.initialiser_classes(parents).items()}

    def _inheriting_training(
        self, parents: dict[tuple[str, str], set[tuple[str, str]]], facts: dict[str, ScriptFacts]
    ) -> set[tuple[str, str]]:
        """(module, class) of classes deriving, through at least one class of another module,
        from a class whose methods run a backward or loop over a loader."""
        training = {
            (name, cls)
            for name, module_facts in facts.items()
            for cls in self.shapes[name].methods
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

    def _training_bases(
        self,
        parents: dict[tuple[str, str], set[tuple[str, str]]],
        facts: dict[str, ScriptFacts],
        calls: Iterable[_CrossCall],
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

    def _returns_loader(self, facts: ScriptFacts, function: str, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call):
            return facts.qualified_name(value.func, (function,)) in DATA_LOADERS
        return dotted(value) in facts.loaders

    def _accelerator_reaches(self, calls: Iterable[_CrossCall], facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
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


#: A role an argument holds in the caller's module → the role its parameter gets in the callee's:
#: an evaluation loader handed over is a loader there, where the callee's own loops decide its use.
_ROLES_PASSED: tuple[tuple[str, str], ...] = (*((role, role) for role in ROLES), ("eval_loaders", "train_loaders"))


@dataclass
class _Received:
    """What modules receive from the rest of the program in one round: module → role → names
    of parameters and attributes, and module → the names that arrive prepared."""

    roles: dict[str, dict[str, set[str]]]
    prepared: dict[str, set[str]]

    def add_role(self, module: str, role: str, name: str) -> None:
        self.roles[module].setdefault(role, set()).add(name)

    def through_calls(
        self, calls: Iterable[_CrossCall], facts: dict[str, ScriptFacts], prepared_in: dict[str, set[str]]
    ) -> None:
        """A parameter filled with an object of a role (or with an object holding one, as
        ``loaders`` holding ``loaders.train``) has that role in the callee; one filled with a
        prepared object, or with a loader built in the call, arrives prepared."""
        for call in calls:
            caller = facts[call.caller_module]
            for param, argument in call.arguments:
                for role, rest in _roles_of_argument(caller, argument):
                    self.add_role(call.callee_module, role, param + rest)
                if argument in prepared_in[call.caller_module] or argument == INLINE_LOADER:
                    self.prepared[call.callee_module].add(param)
                if argument == INLINE_LOADER:
                    self.add_role(call.callee_module, "train_loaders", param)

    def through_instances(
        self, instances: dict[str, _InstanceCalls], facts: dict[str, ScriptFacts], prepared_in: dict[str, set[str]]
    ) -> None:
        """``early_stopping(val_loss, model)``: ``model`` of ``EarlyStopping.__call__`` is a
        (prepared) model there, as a function's parameter is."""
        for name, found in instances.items():
            for callee_module, param, value in found.filled:
                for role in ROLES:
                    if value in getattr(facts[name], role):
                        self.add_role(callee_module, role, param)
                if value in prepared_in[name]:
                    self.prepared[callee_module].add(param)

    def through_base_classes(
        self, parents: dict[tuple[str, str], set[tuple[str, str]]], facts: dict[str, ScriptFacts]
    ) -> None:
        """A subclass's instance holds what its base class's ``__init__`` binds (``self.model``):
        roles of those attributes reach the subclass's module (pytorch-template's ``Trainer``
        evaluating ``self.model``, which ``BaseTrainer.__init__`` binds), prepared where the base's
        ``__init__`` received them prepared (the entry prepared them)."""
        for (name, _), found in parents.items():
            for owner, _ in found:
                if owner == name:
                    continue
                for held_role, role in _ROLES_PASSED:
                    for held in _attributes_of_self(getattr(facts[owner], held_role)):
                        self.add_role(name, role, held)
                self.prepared[name] |= _attributes_of_self(facts[owner].prepared_attributes)


@dataclass(frozen=True)
class _Learnt:
    """What one round of analysis learnt about each module from the others (see :class:`ProgramSeeds`)."""

    received: _Received
    #: Module → names it passes to a parameter another module trains as a model.
    handed_over: dict[str, set[str]]
    #: Library module → its functions every caller of which holds the accelerator.
    reaches: dict[str, set[str]]
    #: Module → its classes whose instances other modules hand a prepared model.
    given_models: dict[str, set[str]]
    #: Qualified names, program-wide.
    loader_factories: set[str]
    looping: set[str]
    backward: set[str]
    #: Functions and classes drawing from a global generator before any seed.
    drawing: set[str]
    #: Module → its classes of each kind.
    training_bases: dict[str, set[str]]
    training_base_subclasses: dict[str, set[str]]
    inherited_accelerator: dict[str, set[str]]
    #: Module → names it passes to be stepped as a scheduler once per epoch.
    per_epoch: dict[str, set[str]]
    #: Modules that save a checkpoint.
    saving: set[str]

    def seeds(self, name: str, old: ProgramSeeds, shape: _ModuleShape) -> ProgramSeeds:
        """Module ``name``'s seeds for the next round (functions of its own are not imported)."""
        own = {f"{name}.{function}" for function in shape.params}
        return replace(
            old,
            parameter_roles=tuple(
                sorted((role, frozenset(names)) for role, names in self.received.roles[name].items())
            ),
            prepared=frozenset(self.received.prepared[name]),
            models_handed_over=frozenset(self.handed_over.get(name, set())),
            accelerator_reaches=frozenset(self.reaches.get(name, set())),
            classes_given_models=frozenset(self.given_models.get(name, set())),
            loader_factories=frozenset(self.loader_factories),
            looping_functions=frozenset(self.looping - own),
            backward_functions=frozenset(self.backward - own),
            drawing_functions=frozenset(self.drawing - own),
            training_bases=frozenset(self.training_bases.get(name, set())),
            training_base_subclasses=frozenset(self.training_base_subclasses.get(name, set())),
            inherited_accelerator=frozenset(self.inherited_accelerator.get(name, set())),
            per_epoch_schedulers=frozenset(self.per_epoch.get(name, set())),
            saved_elsewhere=bool(self.saving - {name}),
        )


def _roles_of_argument(facts: ScriptFacts, argument: str) -> Iterator[tuple[str, str]]:
    """(role the parameter gets, attribute path after it) for each object of a role that the
    argument is (``model``: ("models", "")) or holds (``loaders`` holding ``loaders.train``:
    ("train_loaders", ".train"))."""
    for held_role, role in _ROLES_PASSED:
        for name in getattr(facts, held_role):
            if name == argument:
                yield role, ""
            elif name.startswith(argument + "."):
                yield role, name[len(argument) :]


def _attributes_of_self(names: Iterable[str]) -> set[str]:
    return {name for name in names if name.startswith("self.")}


def _bases_elsewhere(name: str, parents: dict[tuple[str, str], set[tuple[str, str]]]) -> dict[str, tuple[str, str]]:
    """Module ``name``'s classes → the class of another program module they derive from (of
    several, the last by name)."""
    return {
        cls: base
        for (owner, cls), found in parents.items()
        if owner == name
        for base in sorted(found)
        if base[0] != name
    }


def _models_handed_over(calls: Iterable[_CrossCall], facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
    """``Trainer(model, ...)``: a parameter the callee trains as a model makes the argument a
    model where it is built (the callee's module prepares none of what it is handed)."""
    handed_over: dict[str, set[str]] = {}
    for call in calls:
        callee_facts = facts[call.callee_module]
        for param, argument in call.arguments:
            if param in callee_facts.models and param not in callee_facts.frozen_models:
                handed_over.setdefault(call.caller_module, set()).add(argument)
    return handed_over


def _classes_given_models(
    instances: dict[str, _InstanceCalls], facts: dict[str, ScriptFacts], prepared_in: dict[str, set[str]]
) -> dict[str, set[str]]:
    """Module → its classes whose instances (or constructors) another module hands a prepared model."""
    given: dict[str, set[str]] = {}
    for name, found in instances.items():
        for (callee_module, cls), passed in found.passed.items():
            if any(value in facts[name].models and value in prepared_in[name] for _, value in passed):
                given.setdefault(callee_module, set()).add(cls)
    return given


def _per_epoch_arguments(calls: Iterable[_CrossCall], facts: dict[str, ScriptFacts]) -> dict[str, set[str]]:
    """Module → names it passes to a parameter another module steps as a scheduler once per epoch."""
    per_epoch: dict[str, set[str]] = {}
    for call in calls:
        stepped = facts[call.callee_module].per_epoch_schedulers
        per_epoch.setdefault(call.caller_module, set()).update(
            argument for param, argument in call.arguments if param in stepped
        )
    return per_epoch


def _by_module(classes: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """(module, class) pairs grouped: module → its classes."""
    found: dict[str, set[str]] = {}
    for module, cls in classes:
        found.setdefault(module, set()).add(cls)
    return found


def accelerator_parameters(
    name: str, before: _ModuleShape, after: cst.Module, accelerator: str = "accelerator"
) -> dict[str, int | None]:
    """Module-level functions that gained the accelerator parameter in the conversion →
    its positional index (None: keyword-only), keyed by qualified name."""
    visitor = _Shape(name, False, set())
    after.visit(visitor)
    found: dict[str, int | None] = {}
    for function, params in visitor.shape.params.items():
        if accelerator in params and accelerator not in before.params.get(function, ()):
            positional = visitor.shape.positional[function]
            found[f"{name}.{function}"] = positional.index(accelerator) if accelerator in positional else None
    return found


def convert_program(modules: Sequence[ProgramModule], entry: str, options: Options) -> dict[str, ConversionOutcome]:
    """Convert every module of the program whose entry script is ``entry`` (a module name),
    libraries first; the outcome of each, by module name."""
    from accel_convert.codemods import convert_module

    program = Program(modules, entry)
    seeds = program.plan()
    inherited_inits = program.inherited_inits
    takes_accelerator: dict[str, int | None] = {}
    outcomes: dict[str, ConversionOutcome] = {}
    saved = False
    for name in program.order():
        module = program.modules[name]
        module_seeds = replace(
            seeds[name],
            accelerator_parameters=tuple(sorted(takes_accelerator.items())),
            saved_elsewhere=seeds[name].saved_elsewhere or saved,
        )
        outcome = convert_module(module.module, options, module.source, module_seeds)
        outcomes[name] = outcome
        if outcome.module is not module.module:
            takes_accelerator.update(accelerator_parameters(name, program.shapes[name], outcome.module))
        # Constructing a class without ``__init__`` passes the accelerator where its base's takes it.
        for subclass, (base_module, base) in inherited_inits.items():
            taken = f"{base_module}.{base}"
            if taken in takes_accelerator:
                takes_accelerator.setdefault(subclass, takes_accelerator[taken])
        # A checkpoint a library saves (``utils.save_checkpoint``) may be loaded by its importers.
        saved = saved or "accelerator.save(" in outcome.module.code
    return outcomes
