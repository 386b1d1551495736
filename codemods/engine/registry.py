"""The rules, in the order they run, and the documentation generated from them.

The order is fixed: each rule may rely on what the previous ones wrote — the device rule on the
accelerator existing, prepare on the moves being gone, the AMP rule on ``accelerator.backward``...
``pass_accelerator`` runs after every rewrite: it gives every module-level function that now uses
the accelerator an ``accelerator`` parameter, whichever rule introduced the use.

Adding a rule: write ``codemods/rules/<name>.py`` (one :class:`~codemods.engine.rule.Rule`
subclass, its docstring and examples), add ``<name>`` to :data:`RULE_MODULES` at its place in
the order, and add its fixture(s). A name without a module is an error, never skipped.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cache

from codemods.engine.rule import Rule

#: Module names under ``codemods/rules/``, in run order.
RULE_MODULES: tuple[str, ...] = (
    "accelerator",
    "dataparallel",
    "device",
    "prepare",
    "backward",
    "clip_grad",
    # Before amp/accumulate: printing does not interact with them, and
    # running it on trees whose positions are all still carried keeps its reports exact.
    "printing",
    "amp",
    "accumulate",
    "metrics",
    "checkpoint",
    "side_effects",
    "downloads",
    "oom_retry",
    "pass_accelerator",
    "no_dataloader",
    "rank_dependent_break",
    "already_distributed",
    "keyboard_interrupt",
)


@dataclass(frozen=True)
class CodeDoc:
    """One code's documentation, as ``--list-codes``, ``--help`` and the README show it."""

    code: str
    name: str
    summary: str
    before: str
    after: str
    #: True for automatic rewrites (ACC1xx), False for findings left to a person (ACC9xx).
    fixed: bool


@cache
def all_rules() -> list[type[Rule]]:
    """Every rule class, in run order; a module listed but missing is an error."""
    found: list[type[Rule]] = []
    for name in RULE_MODULES:
        module = importlib.import_module(f"codemods.rules.{name}")
        rules = _rule_classes(module)
        if len(rules) != 1:
            raise TypeError(f"codemods/rules/{name}.py must define exactly one Rule, found {len(rules)}")
        found.extend(rules)
    return found


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
_EXAMPLE = re.compile(r"^(Before|After)::\s*$")


def parse_docstring(doc: str) -> tuple[str, str, str, str, str]:
    """(code, name, summary, before, after) from a docstring in the format ``codemods/base.py``
    describes: a headline ``ACC105 backward: summary``, then ``Before::`` and ``After::`` blocks."""
    lines = inspect.cleandoc(doc).splitlines()
    # The headline is the first paragraph, which may wrap.
    headline_end = lines.index("") if "" in lines else len(lines)
    match = _HEADLINE.match(" ".join(lines[:headline_end]))
    if match is None:
        raise ValueError(f"codemod docstring must start with 'ACCnnn name: summary', got {lines[:1]}")
    examples = {"Before": "", "After": ""}
    current: str | None = None
    block: list[str] = []
    for line in lines[headline_end:] + ["<end>::"]:
        heading = _EXAMPLE.match(line)
        if heading or line == "<end>::" or (current and line and not line.startswith(" ")):
            if current is not None:
                examples[current] = inspect.cleandoc("\n".join(block))
            current, block = (heading.group(1), []) if heading else (None, [])
        elif current is not None:
            block.append(line)
    code, name, summary = match.groups()
    return code, name, summary.strip(), examples["Before"], examples["After"]


def code_docs() -> list[CodeDoc]:
    """Documentation for every code, automatic rewrites and reports, sorted by code."""
    docs: dict[str, CodeDoc] = {}
    for rule in all_rules():
        source = inspect.getdoc(inspect.getmodule(rule)) or ""
        code, name, summary, before, after = parse_docstring(source)
        if code != rule.code:
            # A module may hold its doc for the module's main code; a class may document its own.
            code, name, summary, before, after = parse_docstring(inspect.getdoc(rule) or "")
        docs[code] = CodeDoc(code, name, summary, before, after, fixed=code.startswith("ACC1"))
        for extra, text in rule.extra_codes.items():
            extra_doc = _extra_doc(extra, text)
            docs.setdefault(extra, extra_doc)
    return [docs[code] for code in sorted(docs)]


def _extra_doc(code: str, text: str) -> CodeDoc:
    """An extra code's doc: ``"name: summary"`` or a full docstring-format text."""
    if text.lstrip().startswith(code):
        parsed = parse_docstring(text)
        return CodeDoc(*parsed, fixed=code.startswith("ACC1"))
    name, _, summary = text.partition(":")
    if not summary or not re.fullmatch(r"[a-z0-9_-]+", name.strip()):
        name, summary = code.lower(), text
    return CodeDoc(code, name.strip(), summary.strip(), "", "", fixed=code.startswith("ACC1"))
