"""The shared state of one analysis: the recorder's observations, the facts being filled, and
the questions several providers ask of them (where a parameter's value comes from, what a
function reaches, whether a loop is over a loader).

Providers (:mod:`codemods.model.provider`) read and fill it in the order
:mod:`codemods.model.runner` checks; outside the model folder only the rules' own providers
(``Rule.providers``) see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from accel_convert.codemods.engine.facts import FactsDraft, RunContext
from accel_convert.codemods.engine.findings import FILE_START
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.records import record

if TYPE_CHECKING:
    from accel_convert.codemods.engine.model import Site
    from accel_convert.codemods.engine.names import ScopeKey
    from accel_convert.codemods.engine.positions import OriginIndex
    from accel_convert.codemods.engine.program_seeds import ProgramSeeds
    from accel_convert.codemods.model.recorder import CallRecord, LoopRecord, Recorder


@record(frozen=True)
class PerRankLoop:
    """An evaluation loop whose processes each run their own batches and write their files under
    the names the original gives them (see :func:`codemods.model.file_flow.per_batch_file_loaders`)."""

    #: Its ``enumerate`` index (``i`` of ``for i, batch in enumerate(loader)``); None without one.
    index: str | None
    #: Counters of its own the loop names files by (``n``, ``self.count``): bound before the loop,
    #: grown by one per batch at the top of its body, read nowhere after it.
    counters: tuple[str, ...]
    #: The prepared models it calls (``join_uneven_inputs`` joins them).
    models: tuple[str, ...]


class Analysis:
    """What the providers share while they draw :class:`ScriptFacts` from one recorder's walk."""

    def __init__(
        self,
        recorder: Recorder,
        origins: OriginIndex,
        seeds: ProgramSeeds | None = None,
        *,
        module: cst.Module | None = None,
        source: str | bytes | None = None,
    ) -> None:
        self.r = recorder
        self.origins = origins
        #: What the rules' own providers return, by provider (read with ``facts.of``).
        self.rule_results: dict[str, object] = {}
        #: The facts being drawn; ``runner.analyse`` ends with ``finish`` (the rules' ScriptFacts).
        self.facts = FactsDraft(
            names=recorder.names, context=RunContext(origins), program=seeds, rule_results=self.rule_results
        )
        #: What the other modules of the program say (None: the script is converted alone).
        self.seeds = seeds
        #: The module walked and the text it was parsed from (None: print the module).
        self.module = module
        self.source = source
        self._qualified: dict[int, str | None] = {}
        self.assigned = {name for assign in recorder.assigns for name in assign.targets}
        #: (function, parameter) → (calling function, argument name) at each call site.
        self.arguments: dict[tuple[str, str], set[tuple[str, str]]] = {}
        #: (function, parameter) → (calling function, the value) where a call site passes a value
        #: that is no name (``Runner({"gpu": 0})``, ``fit(model, 0)``, ``fit(model, gpus[0])``).
        self.argument_values: dict[tuple[str, str], list[tuple[str, cst.BaseExpression]]] = {}
        #: (function, name) → the file's classes the function binds the name to an instance of
        #: (built on first use).
        self.instances: dict[tuple[str, str], set[str]] | None = None
        #: Module-level class → the calls constructing it (``Trainer(...)``).
        self.constructions: dict[str, list[CallRecord]] = {}
        #: Module-level functions returning loaders → positions of the loaders in what they
        #: return (None: what they return is one loader).
        self.loader_factories: dict[str, set[int] | None] = {}
        #: The same for methods of module-level classes (``self.make_loader()``), keyed by
        #: ``(class, method)``.
        self.loader_methods: dict[tuple[str, str], set[int] | None] = {}
        #: Of those positions, the ones holding a tuple of loaders (``return (DataLoader(a),
        #: DataLoader(b)), n_classes``: ``{0}``), by the function or ``(class, method)``; filled
        #: with ``loader_factories``.
        self.loader_groups: dict[tuple[str, ...], set[int]] = {}
        #: Module-level functions every ``return`` of which is a dict literal of loaders (``return
        #: {"train": train_loader, "test": test_loader}``) → its keys.
        self.loader_dict_factories: dict[str, tuple[str, ...]] = {}
        #: Module-level functions returning the parse result (``args = get_args()`` parses).
        self.argument_parsing_functions: set[str] = set()
        #: Calls that copy what they are given (``copy.deepcopy``, ``AveragedModel``, ...).
        self.model_copy_calls: list[CallRecord] = []
        #: Devices settings classes choose: what to rebind once the accelerator exists → the class
        #: attribute it stands for, and those that cannot be rebound.
        self.settings_devices: dict[str, str] = {}
        self.settings_devices_unreached: set[str] = set()
        #: Training class → method (not ``__init__``) → the loaders and optimizers it builds.
        self.method_prepare: dict[str, dict[str, tuple[str, ...]]] = {}
        #: Where the first optimizer is built: the function the accelerator goes into.
        self.optimizer_home: str | None = None
        #: (class, method) pairs that run a backward, directly or through the methods they call.
        self.backward_methods: set[tuple[str, str]] = set()
        #: Loops over loaders, with the names the loader goes by at its call sites.
        self.loader_loops: list[tuple[LoopRecord, set[str]]] = []
        #: Loaders kept unprepared: an evaluation over them writes a file per batch.
        self.unsharded_loaders: set[str] = set()
        #: Original line of each evaluation loop over a prepared loader whose processes each write
        #: their own batches' files under the original's index → how it counts its batches and
        #: the prepared models it calls: see :func:`codemods.model.file_flow.per_batch_file_loaders`.
        self.per_rank_loops: dict[int, PerRankLoop] = {}
        #: Prepared loaders deal whole batches of the original round-robin (see
        #: :func:`codemods.model.runner.analyse`): where not, no loop runs per process.
        self.whole_batches = True
        #: Per function (``"<module>"``, a class's name for its methods): the names holding this
        #: process's share of the training there, sums of its batch losses grown in training and
        #: what follows from them (the locality owner's).
        self.per_process_sums: dict[str, set[str]] = {}
        #: The attributes of a training bundle read outside its class (``exp.model`` after ``exp =
        #: Experiment()``, whose ``__init__`` builds ``self.model``) → the instance holding them
        #: (``exp``): see :func:`codemods.model.classes.bundle_attributes`.
        self.bundle_attributes: dict[str, str] = {}

    def qualified(self, call: CallRecord) -> str | None:
        """The call's qualified name, resolved once per call (several providers ask for every call)."""
        key = id(call.node)
        if key not in self._qualified:
            self._qualified[key] = self.r.names.qualified_name(call.node.func, call.scope, strict=False)
        return self._qualified[key]

    def site(self, node: cst.CSTNode) -> Site:
        return self.origins.site(node) or FILE_START

    def origins_of(self, function: str, name: str) -> set[str]:
        """The names a parameter receives at the call sites of its function (transitively)."""
        return {origin for _, origin in self.origin_sites(function, name)}

    def origin_sites(
        self, function: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()
    ) -> set[tuple[str, str]]:
        """(function, name) of what a parameter receives at the call sites of its function,
        transitively; ``(function, name)`` itself for a name no caller fills."""
        key = (function, name)
        if key not in self.arguments or key in seen:
            return {key}
        found: set[tuple[str, str]] = set()
        for caller, argument in self.arguments[key]:
            found |= self.origin_sites(caller, argument, seen | {key})
        return found

    def reachable(self, functions: set[str]) -> set[str]:
        """``functions`` and every module-level function they call, transitively."""
        reachable = set(functions)
        pending = list(functions)
        while pending:
            for callee in self.facts.call_graph.get(pending.pop(), ()):
                if callee not in reachable:
                    reachable.add(callee)
                    pending.append(callee)
        return reachable

    def is_loader(self, loop: LoopRecord) -> bool:
        """Whether the loop iterates a loader (under its own name or one its callers pass)."""
        assert loop.iterated is not None
        names = self.origins_of(loop.function, loop.iterated) | {loop.iterated}
        return bool(names & self.facts.loaders)

    def constructs_loader(self, value: cst.BaseExpression, scope: ScopeKey) -> bool:
        return isinstance(value, cst.Call) and self.facts.builds_data_loader(value.func, scope, strict=False)

    def loaders_built_here(self) -> set[str]:
        """Names this module binds to a DataLoader it constructs, directly or through one of its
        own loader factories."""
        return {name for _, name in self.loader_bindings()}

    def loader_bindings(self) -> set[tuple[str, str]]:
        """(function, name) of each binding of :meth:`loaders_built_here`: a parameter of another
        function named alike (``eval(dataloader, ...)`` beside ``train()``'s ``dataloader``) is
        not it."""
        return {
            (assign.function, target)
            for assign in self.r.assigns
            if self.constructs_loader(assign.value, assign.scope)
            or (isinstance(assign.value, cst.Call) and dotted(assign.value.func) in self.loader_factories)
            for target in assign.targets
        }

    def initialising_class(self, name: str) -> str:
        """The class of this file whose ``__init__`` constructing ``name`` runs: ``name`` itself,
        or, when it defines none, the first of its bases here that does (single inheritance only:
        with several bases the method resolution order decides, and ``name`` is returned)."""
        seen = {name}
        current = name
        while self.r.classes[current].init_params is None:
            bases = [dotted(base.value) for base in self.r.classes[current].node.bases]
            if len(bases) != 1 or bases[0] not in self.r.classes or bases[0] in seen:
                return name
            current = bases[0]
            seen.add(current)
        return current
