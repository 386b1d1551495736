"""The rewrites, in the order they run, the checks, and the documentation generated from them.

Rewrites (``codemods/rewrites/``) change the script, and their order is fixed: each may rely on
what the previous ones wrote — the device rule on the accelerator existing, prepare on the moves
being gone, the AMP rule on ``accelerator.backward``... ``pass_accelerator`` runs after every
rewrite: it gives every module-level function that now uses the accelerator an ``accelerator``
parameter, whichever rule introduced the use.

Checks (``codemods/checks/``) only report (``ACC9xx``) and never change the tree: they are found
by scanning the folder and run after every rewrite, on the converted tree, so their order does
not matter; those that look at nodes share one walk (:mod:`codemods.engine.check_walk`).

Adding a rewrite: write ``codemods/rewrites/<name>.py`` (one :class:`~codemods.engine.rule.Rule`
subclass, its docstring and examples), add ``<name>`` to :data:`REWRITE_MODULES` at its place in
the order, and add its fixture(s). A name without a module is an error, never skipped.
Adding a check: write ``codemods/checks/<name>.py`` with its examples (what it flags and what it
leaves alone); nothing else.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from functools import cache
from typing import Any

from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.model.provider import RuleProvider
from accel_convert.records import record

#: Module names under ``codemods/rewrites/``, in run order.
REWRITE_MODULES: tuple[str, ...] = (
    "accelerator",
    "dataparallel",
    "device",
    "batch_to_numpy",
    # Before prepare and the metrics: a loop over a loader left unsharded moves its batch first.
    "unsharded_batches",
    "prepare",
    "inline_loader",
    # Right after the loaders are prepared: repeats the step counts read from their lengths.
    "loader_length",
    "backward",
    "clip_grad",
    # Before amp/accumulate: printing does not interact with them, and
    # running it on trees whose positions are all still carried keeps its reports exact.
    "printing",
    "amp",
    "accumulate",
    "metrics",
    # After metrics (which gathers in evaluation loops over prepared loaders, never over a dict's).
    "loader_dict",
    "checkpoint",
    "side_effects",
    # After metrics, checkpoint and side_effects (which leave its loops' values and writes to each
    # process), before pass_accelerator (the functions it makes read the accelerator).
    "per_rank_files",
    "downloads",
    "oom_retry",
    # Before pass_accelerator: a break made to agree reads the accelerator (ACC123).
    "rank_dependent_break",
    # After every rewrite of the methods, before pass_accelerator (which hands the accelerator on
    # to the functions that now construct the class with it).
    "training_class",
    # After every rewrite that could read the device, before pass_accelerator: a function left
    # with no use of the accelerator gets no accelerator parameter.
    "unused_device",
    "pass_accelerator",
    # Before the checks: unseeded-random reports the draws it could not make agree (ACC923).
    "agreed_random",
    # Anywhere after the accelerator's creation is placed: the agreement needs none (ACC128).
    "agreed_paths",
)


@record(frozen=True)
class CodeDoc:
    """One code's documentation, as ``--list-codes``, ``--help``, the README and docs/codes/ show it."""

    code: str
    name: str
    summary: str
    #: True for automatic rewrites (ACC1xx), False for findings left to a person (ACC9xx).
    fixed: bool
    #: The rule's examples shown under this code (see :class:`~codemods.engine.rule.Example`).
    examples: tuple[Example, ...] = ()
    #: How a person fixes a finding of this code ("" for an automatic rewrite); see ``Rule.fixes``.
    fix: str = ""

    @property
    def before(self) -> str:
        """The first example's script before conversion ("" when the code has no example)."""
        return self.examples[0].before if self.examples else ""

    @property
    def after(self) -> str:
        """The first example's converted script ("" for a report)."""
        return self.examples[0].after if self.examples else ""

    @property
    def message(self) -> str:
        """The first example's reported message ("" for an automatic rewrite)."""
        return self.examples[0].message if self.examples else ""


@cache
def all_rules() -> list[type[Rule]]:
    """Every rule class: the rewrites in run order, then the checks (by code); a rewrite listed
    but missing is an error."""
    rewrites = [_the_rule_of("rewrites", name) for name in REWRITE_MODULES]
    checks = [_the_rule_of("checks", name) for name in check_modules()]
    for check in checks:
        if not check.reports_only():
            raise TypeError(f"codemods/checks/{check.__module__.rpartition('.')[2]}.py: a check only reports (ACC9xx)")
    return rewrites + sorted(checks, key=lambda check: check.code)


@cache
def rule_providers() -> tuple[RuleProvider[Any], ...]:
    """The providers the rules declare (``Rule.providers``), each once, in the rules' order: what
    the analysis runs after the model's (see :mod:`codemods.engine.analysis`)."""
    return tuple(dict.fromkeys(step for rule in all_rules() for step in rule.providers))


@cache
def rewrite_rules() -> tuple[type[Rule], ...]:
    """The rewrites, in run order."""
    return tuple(rule for rule in all_rules() if not rule.reports_only())


@cache
def check_rules() -> tuple[type[Rule], ...]:
    """The checks, by code: they run after every rewrite, on the converted tree."""
    return tuple(rule for rule in all_rules() if rule.reports_only())


def check_modules() -> list[str]:
    """The module names under ``codemods/checks/``: every module there is a check."""
    from accel_convert.codemods import checks

    return sorted(info.name for info in pkgutil.iter_modules(checks.__path__) if not info.name.startswith("_"))


def _the_rule_of(folder: str, name: str) -> type[Rule]:
    module = importlib.import_module(f"accel_convert.codemods.{folder}.{name}")
    rules = _rule_classes(module)
    if len(rules) != 1:
        raise TypeError(f"codemods/{folder}/{name}.py must define exactly one Rule, found {len(rules)}")
    return rules[0]


def _rule_classes(module: object) -> list[type[Rule]]:
    """The Rule subclasses defined in ``module`` itself."""
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, Rule)
        and value is not Rule
        and value.__module__ == getattr(module, "__name__", None)
        and "code" in vars(value)
    ]


_HEADLINE = re.compile(r"^(ACC\d{3})\s+([\w-]+)[^:]*:\s*(.+)$", re.DOTALL)


def parse_headline(doc: str) -> tuple[str, str, str]:
    """(code, name, summary) from a rule module's docstring, whose first paragraph (it may wrap)
    is ``ACC105 backward: summary``."""
    lines = inspect.cleandoc(doc).splitlines()
    headline_end = lines.index("") if "" in lines else len(lines)
    match = _HEADLINE.match(" ".join(lines[:headline_end]))
    if match is None:
        raise ValueError(f"rule docstring must start with 'ACCnnn name: summary', got {lines[:1]}")
    code, name, summary = match.groups()
    return code, name, " ".join(summary.split())


def example_code(rule: type[Rule], example: Example) -> str:
    """The code an example shows: its own ``code``, else the rule's."""
    return example.code or rule.code


def code_docs() -> list[CodeDoc]:
    """Documentation for every code, automatic rewrites and reports, sorted by code: the headline
    of each rule module's docstring, the ``name: summary`` of its extra codes, and the rule's
    examples under the code each one shows."""
    docs: dict[str, CodeDoc] = {}
    for rule in all_rules():
        code, name, summary = parse_headline(inspect.getdoc(inspect.getmodule(rule)) or "")
        if code != rule.code:
            raise ValueError(f"{rule.__module__}: the docstring documents {code}, the rule is {rule.code}")
        docs[code] = CodeDoc(
            code, name, summary, code.startswith("ACC1"), _examples_of(rule, code), rule.fixes.get(code, "")
        )
        for extra, text in rule.extra_codes.items():
            name, _, summary = text.partition(":")
            if not re.fullmatch(r"[a-z0-9-]+", name.strip()) or not summary.strip():
                raise ValueError(f"{rule.__module__}: extra code {extra} must be documented as 'name: summary'")
            docs.setdefault(
                extra,
                CodeDoc(
                    extra,
                    name.strip(),
                    summary.strip(),
                    extra.startswith("ACC1"),
                    _examples_of(rule, extra),
                    rule.fixes.get(extra, ""),
                ),
            )
    return [docs[code] for code in sorted(docs)]


def code_aliases() -> dict[str, tuple[str, ...]]:
    """Every former code that now stands for several (``ACC913`` → the metrics codes, one per
    reason), from the rules' ``aliases``."""
    aliases: dict[str, tuple[str, ...]] = {}
    for rule in all_rules():
        for old, codes in rule.aliases.items():
            unknown = set(codes) - {rule.code, *rule.extra_codes}
            if old in (rule.code, *rule.extra_codes) or unknown:
                raise ValueError(f"{rule.__module__}: alias {old} must be a former code of codes the rule has")
            aliases[old] = codes
    return aliases


def _examples_of(rule: type[Rule], code: str) -> tuple[Example, ...]:
    return tuple(example for example in rule.examples if example_code(rule, example) == code)
