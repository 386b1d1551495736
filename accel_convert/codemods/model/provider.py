"""Providers: the steps of the program model, each declaring what it needs and what it provides.

A provider is a function of the shared :class:`~codemods.model.state.Analysis` that fills some
named facts (a :class:`~codemods.engine.facts.ScriptFacts` field such as ``"models"``, or a
working fact of the analysis such as ``"arguments"``, see :data:`WORKING_FACTS`). It declares

* ``needs``: facts it reads, which an earlier provider must have provided;
* ``provides``: facts it is the first to fill (exactly one provider provides each fact);
* ``refines``: facts an earlier provider provided that it adds to (``flow_into_parameters``
  adds the parameters receiving a model to ``models``).

:func:`check_order` refuses a sequence in which a provider needs or refines something no earlier
provider provides, or two providers provide the same fact; the model's sequence is checked when
:mod:`codemods.model.runner` is imported, so a wrong declaration fails before anything runs.

**Facts one rule alone reads live with that rule**, the way a LibCST visitor declares the metadata
providers it reads: the rule's module (or its package) defines a :class:`RuleProvider` with
:func:`rule_provider`, a function of the same shared analysis that *returns* the rule's facts
(frozen: a frozen dataclass, a frozenset, a tuple), and the rule lists it in ``Rule.providers``.
The runner is handed every rule's providers (by :mod:`codemods.engine.analysis`, from the
registry: the model sits below the rules and never imports them) and runs them after the model's,
on the same one walk, with the same order check (a rule provider ``needs`` facts like any other and provides its own name), and the
rule reads the result through one typed accessor, ``facts.of(provider)``::

    @rule_provider(needs=("models",))
    def cpu_models(a: Analysis) -> frozenset[str]:
        return frozenset(...)

    class DeviceRule(Rule):
        providers = (cpu_models,)
        ...  # facts.of(cpu_models) is a frozenset[str]

A rule provider reads the recorder's records and the shared facts; it never walks the tree
itself (the one walk is what keeps the analysis fast).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from accel_convert.records import record

if TYPE_CHECKING:
    from accel_convert.codemods.model.state import Analysis

#: Facts of the analysis that are not ScriptFacts fields: what providers hand each other.
WORKING_FACTS = frozenset(
    {
        # (function, parameter) → (caller, argument): what flows into each parameter.
        "arguments",
        # Module-level class → the calls constructing it.
        "constructions",
        # The recorder's loops, with the functions each calls (``LoopRecord.calls``).
        "loop_calls",
        # The recorder's loops and while loops, marked when a backward runs in them.
        "loop_backward",
        # Module-level function → the positions of the loaders it returns (``loader_factories``).
        "loader_factories",
        # Module-level functions returning the parse result (``def get_args(): ... return
        # parser.parse_args()``): a call of one parses the command line.
        "argument_parsing_functions",
        # The recorder's calls that copy what they are given (``copy.deepcopy(model)``).
        "model_copy_calls",
        # Devices settings classes choose (``Config.device``): what to rebind → the class
        # attribute it stands for, and those that cannot be rebound (the device rule's).
        "settings_devices",
        "settings_devices_unreached",
        # Training class → method (not ``__init__``) → the loaders and optimizers it builds, which
        # the conversion plan has prepared where they are built.
        "method_prepare",
        # Where the first optimizer is built.
        "optimizer_home",
        # (class, method) pairs that run a backward.
        "backward_methods",
        # Loops over loaders, with the names the loader goes by.
        "loader_loops",
        # Loaders kept unprepared: an evaluation over them writes a file per batch.
        "unsharded_loaders",
        # Evaluation loops over prepared loaders whose processes write their own batches' files.
        "per_rank_loops",
        # Names holding this process's share of the training (model/locality.py's sums).
        "per_process_sums",
        # A bundle's attributes read outside its class (``exp.model``) → the instance (``exp``).
        "bundle_attributes",
    }
)


#: What a rule provider returns.
Result = TypeVar("Result", covariant=True)


class ProviderOrderError(ValueError):
    """A provider needs (or refines) a fact that no earlier provider provides, or two provide one."""


@record(frozen=True)
class Provider:
    """One step of the model: ``run`` fills ``provides`` (and adds to ``refines``) from ``needs``."""

    name: str
    run: Callable[[Analysis], None]
    needs: frozenset[str]
    provides: frozenset[str]
    refines: frozenset[str] = frozenset()

    def __call__(self, analysis: Analysis) -> None:
        self.run(analysis)


def provider(
    *, needs: Iterable[str] = (), provides: Iterable[str] = (), refines: Iterable[str] = ()
) -> Callable[[Callable[[Analysis], None]], Provider]:
    """Declare a function of the analysis as a provider (see the module docstring)."""

    def declare(run: Callable[[Analysis], None]) -> Provider:
        return Provider(run.__name__, run, frozenset(needs), frozenset(provides), frozenset(refines))

    return declare


@record(frozen=True)
class RuleProvider(Generic[Result]):
    """The facts one rule alone reads: ``compute`` returns them (frozen) from ``needs``; the
    runner keeps the result under ``name`` for ``facts.of(provider)``."""

    name: str
    compute: Callable[[Analysis], Result]
    needs: frozenset[str]

    def step(self) -> Provider:
        """This provider as a step of the runner: it provides its own name."""

        def run(analysis: Analysis) -> None:
            analysis.rule_results[self.name] = self.compute(analysis)

        return Provider(self.name, run, self.needs, frozenset({self.name}))


def rule_provider(*, needs: Iterable[str] = ()) -> Callable[[Callable[[Analysis], Result]], RuleProvider[Result]]:
    """Declare a function of the analysis returning one rule's facts (see the module docstring)."""

    def declare(compute: Callable[[Analysis], Result]) -> RuleProvider[Result]:
        return RuleProvider(f"{compute.__module__}.{compute.__name__}", compute, frozenset(needs))

    return declare


def check_order(providers: Sequence[Provider], known: Iterable[str], given: Iterable[str] = ()) -> None:
    """Raise :class:`ProviderOrderError` unless each provider's needs and refinements are provided
    by an earlier one (or ``given`` before any runs), each fact is provided once, and every fact
    named is one of ``known``."""
    known = frozenset(known)
    provided: dict[str, str] = dict.fromkeys(given, "the analysis itself")
    for step in providers:
        unknown = sorted((step.needs | step.provides | step.refines) - known)
        if unknown:
            raise ProviderOrderError(f"{step.name} names facts that do not exist: {', '.join(unknown)}")
        missing = sorted((step.needs | step.refines) - provided.keys())
        if missing:
            raise ProviderOrderError(f"{step.name} needs {', '.join(missing)}, which no provider before it provides")
        twice = sorted(step.provides & provided.keys())
        if twice:
            owners = ", ".join(f"{fact} (by {provided[fact]})" for fact in twice)
            raise ProviderOrderError(f"{step.name} provides what an earlier provider provides: {owners}")
        provided.update(dict.fromkeys(step.provides, step.name))
