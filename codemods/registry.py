"""The codemods, in the order they run, and the documentation generated from their docstrings.

The order is fixed (DESIGN.md): each pass may rely on what the previous ones wrote — the device
pass on the accelerator existing, prepare on the moves being gone, the AMP pass on
``accelerator.backward``... ``helpers`` runs last: it gives every module-level function that now
uses the accelerator an ``accelerator`` parameter, whichever pass introduced the use.

Modules are looked up by name, and a name whose module does not exist yet is skipped, so passes
can be added one at a time.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cache

from codemods.base import Codemod

#: Module names under ``codemods/``, in run order.
CODEMOD_MODULES: tuple[str, ...] = (
    "accelerator",
    "dataparallel",
    "device",
    "prepare",
    "backward",
    "clip_grad",
    # Before amp/accumulate (DESIGN.md has it after): printing does not interact with them, and
    # running it on trees whose positions are all still carried keeps its reports exact.
    "printing",
    "amp",
    "accumulate",
    "metrics",
    "checkpoint",
    "side_effects",
    "oom_retry",
    "helpers",
    "reports",
    "interrupts",
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
def all_codemods() -> list[type[Codemod]]:
    """Every codemod class, in run order (modules not written yet are skipped)."""
    found: list[type[Codemod]] = []
    for name in CODEMOD_MODULES:
        try:
            module = importlib.import_module(f"codemods.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"codemods.{name}":
                raise  # the module exists but one of its own imports is missing: a real bug
            continue
        found.extend(_codemod_classes(module))
    return found


def _codemod_classes(module: object) -> list[type[Codemod]]:
    """The Codemod subclasses defined in ``module`` itself, in source order: a module's
    namespace keeps its names in the order the ``class`` statements ran. (Asking ``inspect`` for
    their lines compiled every codemod module again: a fifth of a second on each CLI run.)"""
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, Codemod)
        and value is not Codemod
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
    for codemod in all_codemods():
        source = inspect.getdoc(inspect.getmodule(codemod)) or ""
        code, name, summary, before, after = parse_docstring(source)
        if code != codemod.code:
            # A module may hold its doc for the module's main code; a class may document its own.
            code, name, summary, before, after = parse_docstring(inspect.getdoc(codemod) or "")
        docs[code] = CodeDoc(code, name, summary, before, after, fixed=code.startswith("ACC1"))
        for extra, text in codemod.extra_codes.items():
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
