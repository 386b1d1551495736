"""The values a conversion trades in: positions, changes, options, outcomes.

This module imports nothing of the converter's, so every other module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from accel_convert.records import record

if TYPE_CHECKING:
    import libcst as cst

Target = Literal["runtime", "accelerate"]


@dataclass(frozen=True)
class Site:
    """A position in the original file (1-based line, 0-based column)."""

    line: int
    column: int
    end_line: int
    end_column: int


@record(frozen=True)
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


@record(frozen=True)
class ImportStyle:
    """How the project sorts its imports (its ``[tool.ruff]``/``[tool.isort]`` settings, read by
    the converter): what decides where and how an import a rewrite adds is written."""

    #: ``force-single-line``: one name per ``from`` import, never merged into another.
    force_single_line: bool = False
    #: ``known-first-party``: modules of the first-party section (after the third-party one).
    known_first_party: tuple[str, ...] = ()
    #: A new or merged import line longer than this is wrapped in parentheses.
    line_length: int = 88
    #: How it is wrapped: ``vertical`` (ruff, isort's black profile: one name a line, trailing
    #: comma) or ``grid`` (isort's default: names filled in after the parenthesis).
    wrap: Literal["vertical", "grid"] = "vertical"


@record(frozen=True)
class Options:
    """What the user asked for; the CLI builds it from flags and ``[tool.accel-convert]``."""

    target: Target = "runtime"
    oom_retry: bool = False
    #: Shard models with FSDP2: the created Accelerator gets ``fsdp_plugin=...``.
    fsdp: bool = False
    #: Keep the original's global batch on any number of processes: the created Accelerator
    #: gets ``split_batches=True`` (each process takes 1/N of every batch the loader makes).
    split_batches: bool = False
    #: Code prefixes to run only (empty: all) and to skip, as ruff's --select/--ignore.
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    #: Notebooks only (converter.launcher_cells): training written at the top level becomes one
    #: function, started by a ``notebook_launcher`` cell on this many processes (None: as it is).
    launcher_processes: int | None = None
    #: The module's top level runs in one process, the launched function in every worker: the
    #: cells of a notebook restructured for ``notebook_launcher``, converted before its launcher
    #: cell is added (converter.launcher_cells).
    top_level_runs_once: bool = False
    #: The project's import sorting (None: isort's and ruff's defaults, no wrapping).
    import_style: ImportStyle | None = None

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
        return "accel_convert.runtime" if self.target == "runtime" else "accelerate"


@record()
class ConversionOutcome:
    """What converting one module produced."""

    module: cst.Module
    changes: list[Change] = field(default_factory=list)
    #: The training loader's batch size where the converter can read it (a literal, an argparse
    #: default); None where it cannot. ``has_loader``: the converted script trains from a loader.
    batch_size: int | None = None
    has_loader: bool = False
