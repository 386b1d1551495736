"""torchmetrics metrics fed gathered values: which the file builds (and how to give their
constructors ``sync_on_compute=False``), which updates receive gathered values during the walk,
and the transformer that adds the keyword. A metric whose ``compute()`` would sync the gathered
states once more, and which cannot safely be given the keyword, is reported."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

import libcst as cst

from accel_convert.codemods.engine.devices import construction
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.syntax import (
    calls_in,
    dotted,
    expression_code,
    names_in,
)
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.rewrites.metrics.codes import GATHERED, SYNCED_TWICE
from accel_convert.codemods.rewrites.metrics.plan import GatherPlan
from accel_convert.records import record

#: Methods of a torchmetrics metric that add a batch to its state.
_METRIC_UPDATES = frozenset({"update", "forward"})


@record(frozen=True, eq=False, repr=False)
class TorchMetrics:
    """The torchmetrics metrics the file builds: name → original positions of the constructor
    calls to give ``sync_on_compute=False`` (empty: none can be given it safely), and name →
    original positions of every update of it in the file."""

    imported: bool = False
    constructors: dict[str, set[Site]] = field(default_factory=dict)
    uses: dict[str, set[Site]] = field(default_factory=dict)


class GatheredUpdates:
    """The updates of the file's torchmetrics metrics that receive gathered values, noted loop by
    loop as the rewriter gathers, and what follows for each metric once the walk is over."""

    def __init__(self, torchmetrics: TorchMetrics) -> None:
        self._torchmetrics = torchmetrics
        #: torchmetrics metric → original positions of its updates with gathered values.
        self._gathered_updates: dict[str, set[Site]] = {}
        #: The first such update of each metric (where a report points).
        self._first_update: dict[str, cst.Call] = {}

    def note(self, rule: RuleTransformer, statements: list[cst.CSTNode], plan: GatherPlan) -> None:
        """torchmetrics metrics updated (``metric.update(preds, target)``, ``metric(preds,
        target)``) after the gather: their states now hold every process's samples, and their
        ``compute()`` would add the processes' states up once more. A ``.update(...)`` of
        something else given gathered values, in a file using torchmetrics, is reported: it may be
        a metric built where this rule cannot see."""
        if not self._torchmetrics.imported:
            return
        read = {expression_code(e) for e in plan.gathered} | set(plan.names)
        for statement in statements:
            for call in calls_in(statement):
                func = call.func
                owner = func.value if isinstance(func, cst.Attribute) and func.attr.value in _METRIC_UPDATES else func
                name = dotted(owner)
                if name is None:
                    continue
                if name in self._torchmetrics.constructors:
                    site = rule.facts.origins.site(call)
                    if site is not None:
                        self._gathered_updates.setdefault(name, set()).add(site)
                        self._first_update.setdefault(name, call)
                elif owner is not func and func.attr.value == "update" and _mentions(call, read):  # type: ignore[attr-defined]
                    rule.report(
                        call,
                        SYNCED_TWICE,
                        f"{name}.update(...) receives gathered values: if {name} is a torchmetrics metric, build it "
                        "with sync_on_compute=False, or its compute() adds up every process's samples again",
                        False,
                    )

    def fed_gathered_values(self, rule: RuleTransformer) -> set[Site]:
        """The original positions of the torchmetrics constructors to build with
        ``sync_on_compute=False``: metrics every update of which receives gathered values. A
        metric also updated elsewhere (per process), or one whose constructor cannot take the
        keyword (a wrapper, the file's own subclass), is reported instead."""
        sites: set[Site] = set()
        for name, updates in self._gathered_updates.items():
            constructors = self._torchmetrics.constructors[name]
            if constructors and self._torchmetrics.uses.get(name, set()) <= updates:
                sites.update(constructors)
                continue
            why = (
                "it is also updated with this process's values only"
                if constructors
                else "its constructor may not take sync_on_compute"
            )
            rule.findings.add(
                self._first_update[name],
                SYNCED_TWICE,
                f"{name} is updated with gathered values, and its compute() syncs across processes again "
                f"(counting sums N times); not changed because {why}: build it with sync_on_compute=False "
                "or update it with this process's values only",
                False,
            )
        return sites


def torchmetrics_in(module: cst.Module, facts: ScriptFacts) -> TorchMetrics:
    """Names bound to torchmetrics metrics (``metric = torchmetrics.Accuracy(...).to(device)``,
    a ``MetricCollection`` of such), and where each is updated. Wrappers (a metric given another
    metric) and the file's own ``Metric`` subclasses are known but get no keyword: their
    constructors may not accept it."""
    if not any(qualified.partition(".")[0] == "torchmetrics" for qualified in facts.imports.values()):
        return TorchMetrics()
    own_metrics = {
        node.name.value
        for node in module.body
        if isinstance(node, cst.ClassDef) and any(_is_torchmetrics_class(base.value, facts) for base in node.bases)
    }
    nodes = module_nodes(module)
    constructors = _metric_constructors(nodes, own_metrics, facts)
    uses: dict[str, set[Site]] = {}
    for node in nodes:
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        owner = func.value if isinstance(func, cst.Attribute) and func.attr.value in _METRIC_UPDATES else func
        name = dotted(owner)
        site = facts.origins.site(node)
        if name in constructors and site is not None:
            uses.setdefault(name, set()).add(site)
    return TorchMetrics(True, constructors, uses)


def _metric_constructors(
    nodes: Sequence[cst.CSTNode], own_metrics: set[str], facts: ScriptFacts
) -> dict[str, set[Site]]:
    """Names bound to a metric → the original positions of the constructor calls to give
    ``sync_on_compute=False`` (empty: none can be given it safely)."""
    constructors: dict[str, set[Site]] = {}
    for node in nodes:
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        name = dotted(node.targets[0].target)
        built = construction(node.value)
        if name is None or built is None:
            continue
        if dotted(built.func) in own_metrics:
            constructors.setdefault(name, set())
        elif _is_torchmetrics_class(built.func, facts):
            sites = constructors.setdefault(name, set())
            keyword_sites = [facts.origins.site(call) for call in _metrics_taking_the_keyword(built, facts)]
            if None in keyword_sites:
                constructors[name] = set()  # a call without its original position cannot be found again
            else:
                sites.update(site for site in keyword_sites if site is not None)
    return constructors


def _is_torchmetrics_class(func: cst.BaseExpression, facts: ScriptFacts) -> bool:
    qualified = facts.qualified_name(func) or ""
    last = qualified.rpartition(".")[2]
    return qualified.startswith("torchmetrics.") and ".functional" not in qualified and last[:1].isupper()


def _metrics_taking_the_keyword(built: cst.Call, facts: ScriptFacts) -> list[cst.Call]:
    """The constructor calls to give ``sync_on_compute=False``: the metric itself, or each metric
    of a ``MetricCollection([...])``/``({...})``; none when a metric is given another metric (a
    wrapper) or the collection holds anything but metric constructors."""
    inner = [call for call in calls_in(built) if call is not built and _is_torchmetrics_class(call.func, facts)]
    if (facts.qualified_name(built.func) or "").rpartition(".")[2] != "MetricCollection":
        return [] if inner else [built]
    if not built.args or not isinstance(built.args[0].value, (cst.List, cst.Tuple, cst.Dict)):
        return []
    collection = built.args[0].value
    elements = (
        [element.value for element in collection.elements if isinstance(element, cst.DictElement)]
        if isinstance(collection, cst.Dict)
        else [element.value for element in collection.elements]
    )
    metrics = [construction(element) for element in elements]
    if len(metrics) != len(collection.elements) or not all(_is_plain_metric(call, facts) for call in metrics):
        return []
    return [call for call in metrics if call is not None]


def _is_plain_metric(call: cst.Call | None, facts: ScriptFacts) -> bool:
    """A torchmetrics metric's constructor given no other metric (not a wrapper)."""
    return (
        call is not None
        and _is_torchmetrics_class(call.func, facts)
        and not any(c is not call and _is_torchmetrics_class(c.func, facts) for c in calls_in(call))
    )


def _mentions(call: cst.Call, names: set[str]) -> bool:
    return any(expression_code(arg.value) in names or names_in(arg.value) & names for arg in call.args)


class SyncOnComputeOff(RuleTransformer):
    """Adds ``sync_on_compute=False`` to the torchmetrics constructors at ``sites`` (original
    positions): the metric is updated with values gathered from every process already."""

    def __init__(self, facts: ScriptFacts, sites: set[Site]) -> None:
        super().__init__(facts, {site.line for site in sites})
        self._sites = sites

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        site = self.facts.origins.site(original_node)
        if site is None or site not in self._sites:
            return updated_node
        if any(arg.keyword is not None and arg.keyword.value == "sync_on_compute" for arg in updated_node.args):
            return updated_node
        keyword = cst.Arg(
            value=cst.Name("False"),
            keyword=cst.Name("sync_on_compute"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        self.report(
            original_node,
            GATHERED,
            "sync_on_compute=False: the metric is updated with values gathered from every process; "
            "syncing again in compute() would count them once per process",
        )
        return updated_node.with_changes(args=[*updated_node.args, keyword])
