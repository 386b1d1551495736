"""The contract every codemod follows, and the types the converter reads back.

A codemod is one small module in ``codemods/`` holding one :class:`Codemod` subclass. Its module
docstring names its code and shows a before/after pair; ``--list-codes``, ``--help`` and the
README's table of rewrites are generated from those docstrings (see ``codemods/registry.py``), so
they are never written twice. The docstring format is::

    ACC105 backward: route every ``X.backward(...)`` through the accelerator.

    Before::

        loss.backward(retain_graph=True)

    After::

        accelerator.backward(loss, retain_graph=True)

Codemods never print. ``transform`` returns the new tree and a list of :class:`Change`; only the
CLI talks to the terminal. Facts shared between passes are names (see ``codemods/facts.py``),
never node identities, because each pass works on a new tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

import libcst as cst

if TYPE_CHECKING:
    from codemods.facts import ScriptFacts

Target = Literal["runtime", "accelerate"]


@dataclass(frozen=True)
class Change:
    """One rewrite made (``fixed=True``, codes ``ACC1xx``) or one spot left for a person
    (``fixed=False``, codes ``ACC9xx``), at its position in the *original* file (1-based line,
    0-based column, as libcst's PositionProvider counts)."""

    code: str
    message: str
    line: int
    column: int
    end_line: int
    end_column: int
    fixed: bool


@dataclass(frozen=True)
class Options:
    """What the user asked for; the CLI builds it from flags and ``[tool.accel-convert]``."""

    target: Target = "runtime"
    oom_retry: bool = False
    #: Code prefixes to run only (empty: all) and to skip, as ruff's --select/--ignore.
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def enabled(self, code: str) -> bool:
        """Whether a code is switched on; the longest matching prefix wins, as in ruff."""
        best_select = max((len(p) for p in self.select if code.startswith(p)), default=-1)
        best_ignore = max((len(p) for p in self.ignore if code.startswith(p)), default=-1)
        if self.select and best_select < 0:
            return False
        return best_select >= best_ignore

    @property
    def accelerate_module(self) -> str:
        """The package converted scripts import the Accelerator from."""
        return "runtime" if self.target == "runtime" else "accelerate"


class Codemod:
    """Base class of the rewrites. Subclasses set the class attributes and implement ``transform``."""

    #: The code of the automatic rewrite (``ACC1xx``) or of the report (``ACC9xx``).
    code: ClassVar[str]
    #: A short kebab-case name, e.g. ``"backward"``.
    name: ClassVar[str]
    #: Further codes this module may report (usually ``ACC9xx`` warnings), code → one-line summary.
    extra_codes: ClassVar[dict[str, str]] = {}
    #: False (the rule): changes are reported at original sites, looked up in ``facts.origins``.
    #: True: at positions in the tree the pass received (PositionProvider), which
    #: ``convert_module`` maps back to the original file by matching lines (inexact where lines
    #: were rewritten, and it prints the tree once more).
    positions_in_received_tree: ClassVar[bool] = False

    def applies(self, facts: "ScriptFacts", options: Options) -> bool:
        """Cheap test run before ``transform``: False skips the pass (no tree walk at all)."""
        return True

    def transform(
        self, module: cst.Module, facts: "ScriptFacts", options: Options
    ) -> tuple[cst.Module, list[Change]]:
        raise NotImplementedError


@dataclass
class ConversionOutcome:
    """What converting one module produced."""

    module: cst.Module
    changes: list[Change] = field(default_factory=list)
