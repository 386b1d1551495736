"""``--launcher``: a notebook whose training is written at its top level, restructured for
``notebook_launcher``.

``notebook_launcher(function, num_processes=N)`` forks N workers that each run ``function``; the
``Accelerator`` must be created inside it (one made in the kernel would be copied into every
worker as a single-process one). Training written cell after cell at the notebook's top level
has no such function, so the cells are restructured before the usual conversion:

- **Where training starts and ends** comes from the analysis (``codemods.engine.analysis``):
  it starts at the first top-level statement binding a model, optimizer, scheduler or loader,
  and ends with the last top-level loop over a loader or call of a function that trains or
  evaluates. The cells before it (imports, downloading and building the data) stay as they are.
- **The cells of the training** become one ``def training_function():`` cell, in order. Their
  imports, functions and classes stay at the top level, where they were (a cell of only such
  definitions is kept as it is; a mixed cell keeps its definitions, loses its other statements
  and its outputs), so that helpers like ``train(dataloader, model, ...)`` are converted as a
  script's helpers are. Markdown cells among them stay, before the function.
- **The cells after training** that read a name the training binds (``torch.save(model...)``, a
  prediction with the trained model) move into the function too, with every cell between: the
  workers are other processes, so nothing the function binds comes back to the kernel
  (``notebook_launcher`` returns nothing). The others stay after the launcher cell.
- **The launcher cell** follows the function: ``notebook_launcher(training_function,
  num_processes=N)``, ``N`` from ``--num-processes`` (default 2, as Accelerate's notebook guide
  writes it: two GPUs, or two CPU processes on Gloo on a machine without one).

Then the notebook is converted as any notebook is (the accelerator is created inside the
function, evaluation gathers over every sample, saving happens once...), and converter's
name-flow check compares the original cells with the converted, restructured ones.

- **Plain values stay in the kernel.** ``notebook_launcher`` forks the kernel, so a value bound at
  the top level before the launch is in every process: the training cells' statements that only
  bind plain values and data (settings, tensors, data sets) stay at the top level, in their cell
  and order, and what each process makes (the device, the training's objects, the loops, what
  reads them) moves in (:mod:`accel_convert.converter.launcher_values` decides, by data flow).
- **Settings read as globals.** When the name-flow check finds a definition (a model class, a
  helper) reading one of the function's names as a global (a helper's ``device``), the notebook
  is restructured again declaring those names ``global`` in the function
  (:func:`_shared_settings`): each process binds its own.

Nothing is restructured — the notebook gets its usual conversion, and a ``notebook-launcher``
warning says why — when: the training is already in a function (launch that one), there is no
top-level training, a cell magic (``%%time``) sits among the training cells, or the restructured
program would still read a name before binding it (a helper reading the training's optimizer as a
global, a definition's default argument computed from a training variable).

Example — a settings cell next to the loaders, and a class reading its sizes::

    num_hidden_1 = 32                          # stays: a plain value (MultilayerPerceptron reads it)
    train_dataset = TensorDataset(features)    # stays: the same data in every process
    train_loader = DataLoader(train_dataset, batch_size=batch_size)   # moves into training_function
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import libcst as cst

from accel_convert.codemods import Options
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.name_flow import possibly_unbound_reads
from accel_convert.codemods.model.plan import plan_of
from accel_convert.converter.launcher_values import TopStatement, bound_names, global_reads, staying_statements
from accel_convert.converter.notebooks import (
    CellChange,
    Masks,
    NotebookConversion,
    cell_conversions,
    convert_cells,
    is_cell_magic,
    unused_name,
    write_notebook,
)
from accel_convert.converter.pipeline import Conversion
from accel_convert.records import record

#: A top-level statement of a cell, as libcst parses one.
Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement
#: The code of the warning saying why a notebook was not restructured.
LAUNCHER_WARNING = "notebook-launcher"
FUNCTION = "training_function"
DEFAULT_PROCESSES = 2
PLACEHOLDER_PREFIX = "__accel_convert"


class NotRestructured(Exception):
    """Why the notebook keeps its layout (said once, as a warning at ``cell``)."""

    def __init__(self, reason: str, cell: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cell = cell


def convert_for_launcher(notebook: Any, source: bytes, options: Options, path: str) -> Conversion:
    """The notebook restructured for ``notebook_launcher`` and converted; where that cannot be
    done safely, the usual conversion with a warning saying why."""
    original = copy.deepcopy(notebook)
    try:
        attempt = restructured_and_converted(notebook, options, path)
        if attempt is None:  # launched already: converted as it is, nothing to say
            converted = convert_cells(notebook, options, path)
            return converted.conversion(notebook, source, path) if converted else Conversion(path, source, source)
        restructured, converted = attempt
    except NotRestructured as refusal:
        converted = convert_cells(original, options, path)
        warning = CellChange(
            LAUNCHER_WARNING,
            f"not restructured for notebook_launcher: {refusal.reason}; converted as it is",
            1,
            0,
            1,
            0,
            False,
            cell=refusal.cell,
        )
        if converted is None:
            return NotebookConversion(path, source, source, (warning,))
        conversion = converted.conversion(original, source, path)
        return NotebookConversion(
            path, source, conversion.output, (warning, *converted.changes), "utf-8", converted.cells
        )
    new_notebook = restructured.notebook
    new_notebook.cells.insert(restructured.launcher_index, launcher_cell(restructured, options))
    origins = list(restructured.origins)
    origins.insert(restructured.launcher_index, None)
    output = write_notebook(new_notebook, source)
    cells = cell_conversions(path, original, new_notebook, origins)
    return NotebookConversion(path, source, output, converted.changes, "utf-8", cells)


def restructured_and_converted(notebook: Any, options: Options, path: str) -> tuple[Restructured, Any] | None:
    """The notebook restructured and its cells converted, None when it launches its training
    already. A first restructuring moves every statement of the training into the function; when
    the converted definitions above it then read one of the function's names as a global (a
    settings cell's ``num_hidden_1`` read in a model's ``__init__``, a helper's ``device``), the
    notebook is restructured again sharing those names (:func:`_shared_settings`), once more for
    each new such name."""
    shared: frozenset[str] = frozenset()
    while True:
        restructured = restructure(notebook, options, shared)
        if restructured is None:
            return None
        converted = convert_cells(restructured.notebook, replace(options, top_level_runs_once=True), path)
        assert converted is not None  # the training cells mention torch
        unbound = new_unbound_reads(restructured, converted)
        if not unbound:
            return restructured, converted
        wanted = restructured.shareable(unbound)
        if wanted <= shared:
            name, scope = unbound[0]
            where = "at the top level" if scope == "<module>" else f"in {scope}"
            raise NotRestructured(f"restructured, {name!r} would be read {where} before it is bound")
        shared |= wanted


@record()
class Restructured:
    notebook: Any
    #: Index (0-based, in ``notebook.cells``) of the function cell; the launcher cell goes after it.
    function_index: int
    #: The original masked code of every code cell (for the name-flow check), in order.
    original_codes: list[str]
    masks: Masks
    #: The names the function's statements bind (its locals, but for ``declared``).
    function_names: frozenset[str] = frozenset()
    #: The names the function declares ``global`` (each process binds its own).
    declared: tuple[str, ...] = ()
    #: The training's objects (models, optimizers, loaders, schedulers): never shared.
    trained: frozenset[str] = frozenset()
    #: Per cell of ``notebook``: the index of the original cell it comes from (None: new).
    origins: tuple[int | None, ...] = ()

    def shareable(self, unbound: Sequence[tuple[str, str]]) -> frozenset[str]:
        """The names of ``unbound`` (name, scope) that a definition reads as a global and the
        function binds: a setting or a per-process value such as the device (not a trained
        object: a helper reading the model as a global is left as the notebook wrote it)."""
        return frozenset(
            name
            for name, scope in unbound
            if scope not in ("<module>", FUNCTION) and name in self.function_names and name not in self.trained
        )

    @property
    def launcher_index(self) -> int:
        return self.function_index + 1


def launcher_cell(restructured: Restructured, options: Options) -> Any:

    processes = options.launcher_processes or DEFAULT_PROCESSES
    code = (
        f"from {options.accelerate_module} import notebook_launcher\n\n"
        f"notebook_launcher({FUNCTION}, num_processes={processes})"
    )
    return _new_cell(restructured.notebook, code, "notebook-launcher")


def _new_cell(notebook: Any, code: str, wanted_id: str) -> Any:
    """A code cell with an id no other cell has (none where the notebook's cells have none)."""
    from nbformat import v4

    cell = v4.new_code_cell(code)
    has_ids = any("id" in existing for existing in notebook.cells) or (
        notebook.get("nbformat_minor", 5) >= 5 and not notebook.cells
    )
    if not has_ids:
        del cell["id"]
        return cell
    taken = {existing.get("id") for existing in notebook.cells}
    identifier = wanted_id
    while identifier in taken:
        identifier += "-1"
    cell["id"] = identifier
    return cell


# -- finding the training ------------------------------------------------------------------------


@record()
class _CodeCell:
    index: int  # in notebook.cells
    number: int  # 1-based, as positions name cells
    masked: str
    module: cst.Module
    #: Per top-level statement: whether it stays at the top level (an import, def, class).
    definitions: list[bool]
    #: Per top-level statement: its CPython tree.
    trees: list[ast.Module]
    #: Per top-level statement: its first and last line in the cell (1-based).
    lines: list[tuple[int, int]]


def restructure(notebook: Any, options: Options, shared: frozenset[str] = frozenset()) -> Restructured | None:
    """The notebook's cells restructured (a new notebook; ``notebook`` is left as it is), None
    when it already launches its training; raises :class:`NotRestructured` with the reason.
    ``shared``: names definitions read as globals, kept at the top level or declared ``global``
    in the function (:func:`_shared_settings`)."""
    from accel_convert.codemods.engine.analysis import analyse

    every_code = "".join(
        cell.source for cell in notebook.cells if cell.get("cell_type") == "code" and isinstance(cell.source, str)
    )
    if "notebook_launcher" in every_code:
        return None
    masks = Masks(unused_name(PLACEHOLDER_PREFIX + "_ipython", every_code))
    cells, magic_cells = _code_cells(notebook, masks)
    joined = "".join(cell.masked for cell in cells)
    facts = analyse(cst.parse_module(joined), joined)
    _refuse_unless_top_level(facts, cells)
    first, last = _training_span(cells, facts)
    trained = frozenset(name for name in facts.trained_objects if "." not in name)
    per_process = trained | {name for name in _per_process_names(facts) if "." not in name}
    moved, settings = _moved_cells(cells, first, last, lambda span: _shared_settings(span, shared, per_process))
    for index in magic_cells:
        if moved[0].index < index < moved[-1].index:
            raise NotRestructured(
                "a cell magic (%%...) sits among the training cells; the function cannot hold it", index + 1
            )
    new = copy.deepcopy(notebook)
    span = range(moved[0].index, moved[-1].index + 1)
    kept, statements = _split_span(new, span, moved, masks, settings.hoisted)
    origins = (*range(span.start), *(index for index, _ in kept), None, *range(span.stop, len(new.cells)))
    function = _training_function(statements, moved, settings.declared)
    code, _ = masks.restore(cst.Module(body=[function]).code.rstrip("\n"), "")
    function_cell = _new_cell(new, code, "training-function")
    new.cells = [*new.cells[: span.start], *(cell for _, cell in kept), function_cell, *new.cells[span.stop :]]
    return Restructured(
        new,
        span.start + len(kept),
        [cell.masked for cell in cells],
        masks,
        settings.function_names,
        settings.declared,
        trained,
        origins,
    )


def _per_process_names(facts: ScriptFacts) -> frozenset[str]:
    """What each process makes or holds for itself, besides the training's objects: devices, GPU
    flags and indices, frozen models, trackers, per-process paths. (Batches and losses are names
    a loop rebinds: the data flow sees them, and a tensor bound before under the same name stays.)"""
    return frozenset(
        facts.device_names
        | facts.cuda_flags
        | facts.gpu_index_names
        | facts.frozen_models
        | facts.trackers
        | facts.per_process_paths
    )


def _code_cells(notebook: Any, masks: Masks) -> tuple[list[_CodeCell], list[int]]:
    """The notebook's code cells, masked and parsed, and the indices of those that are a cell
    magic (``%%time``); raises :class:`NotRestructured` when a cell is not Python or none is code."""
    cells: list[_CodeCell] = []
    magic_cells: list[int] = []
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code" or not isinstance(cell.get("source"), str):
            continue
        if is_cell_magic(cell.source):
            magic_cells.append(index)
            continue
        masked, _ = masks.mask(cell.source)
        if not masked.endswith("\n"):
            masked += "\n"
        try:
            module = cst.parse_module(masked)
            trees = [ast.parse(module.code_for_node(statement)) for statement in module.body]
        except (cst.ParserSyntaxError, SyntaxError, ValueError):
            raise NotRestructured("a cell is not valid Python", index + 1) from None
        definitions = [_is_definition(statement) for statement in module.body]
        cells.append(_CodeCell(index, index + 1, masked, module, definitions, trees, _statement_lines(module)))
    if not cells:
        raise NotRestructured("the notebook has no code")
    return cells, magic_cells


def _refuse_unless_top_level(facts: ScriptFacts, cells: list[_CodeCell]) -> None:
    """Raises :class:`NotRestructured` when the training is not written at the top level: under
    a ``__main__`` guard, or in a function (the one to launch)."""
    if facts.home_kind == "main_guard":
        raise NotRestructured(
            "the training runs under if __name__ == \"__main__\": (a script's shape, not a notebook's)"
        )
    if facts.home_kind != "module":
        where = facts.main_function or "a function"
        defining = next(
            (
                cell.number
                for cell in cells
                for tree in cell.trees
                if any(isinstance(node, ast.FunctionDef) and node.name == where for node in tree.body)
            ),
            1,
        )
        raise NotRestructured(
            f"the training is already in {where}: launch it with notebook_launcher({where}, args=(...), num_processes=N)",
            defining,
        )


def _training_span(cells: list[_CodeCell], facts: ScriptFacts) -> tuple[int, int]:
    """(first, last) position in ``cells`` of the training: from the first cell binding a model,
    optimizer, scheduler or loader at the top level to the last holding a top-level statement
    of the training (the conversion plan's ``training_lines``)."""
    roles = {name for name in facts.trained_objects if "." not in name}
    first = next(
        (
            position
            for position, cell in enumerate(cells)
            if any(
                not definition and bound_names(tree) & roles for definition, tree in zip(cell.definitions, cell.trees)
            )
        ),
        None,
    )
    if first is None:
        raise NotRestructured("no model, optimizer or DataLoader is created at the notebook's top level")
    starts = [cell.masked.count("\n") for cell in cells]
    first_lines = [sum(starts[:position]) + 1 for position in range(len(cells))]
    training = [_statement_at(cells, first_lines, line) for line in plan_of(facts).training_lines]
    ends = [found[0] for found in training if found is not None and not cells[found[0]].definitions[found[1]]]
    if not ends or max(ends) < first:
        raise NotRestructured("no training loop runs at the notebook's top level", cells[first].number)
    return first, max(ends)


def _statement_at(cells: list[_CodeCell], first_lines: list[int], line: int) -> tuple[int, int] | None:
    """(position in ``cells``, statement index) of the top-level statement holding ``line`` of
    the joined cells (``first_lines``: where each cell starts in them)."""
    for position in range(len(cells) - 1, -1, -1):
        if line >= first_lines[position]:
            break
    else:
        return None
    cell = cells[position]
    local = line - first_lines[position] + 1
    for statement_index, (begin, end) in enumerate(cell.lines):
        if begin <= local <= end:
            return position, statement_index
    return None


def _moved_cells(
    cells: list[_CodeCell], first: int, last: int, settings_of: Callable[[list[_CodeCell]], SharedSettings]
) -> tuple[list[_CodeCell], SharedSettings]:
    """The cells the function takes, and which of their statements stay (``settings_of``): the
    training's cells, and each later cell reading a name the function binds (it runs in the
    workers too), with every cell between. A name only a statement that stays binds (a setting,
    a data set) is the kernel's, there after the launch: a cell reading it stays. Decided again
    as cells join, since a statement that stayed may move with them."""
    while True:
        moved = cells[first : last + 1]
        settings = settings_of(moved)
        reader = next(
            (position for position in range(last + 1, len(cells)) if _reads(cells[position]) & settings.function_names),
            None,
        )
        if reader is None:
            return moved, settings
        last = reader


def _split_span(
    new: Any, span: range, moved: list[_CodeCell], masks: Masks, hoisted: frozenset[tuple[int, int]]
) -> tuple[list[tuple[int, Any]], list[Statement]]:
    """The cells of the training's span (in ``new``) that stay, in order (markdown, definitions,
    settings, only comments), each with its index, and the statements that go into the function.
    ``hoisted``: the settings that stay, as (cell index, statement index)."""
    kept: list[tuple[int, Any]] = []
    statements: list[Statement] = []
    by_index = {cell.index: cell for cell in moved}
    for index in span:
        cell = new.cells[index]
        code_cell = by_index.get(index)
        if code_cell is None:
            kept.append((index, cell))
            continue
        stays = [
            definition or (index, position) in hoisted for position, definition in enumerate(code_cell.definitions)
        ]
        settings_stay = any((index, position) in hoisted for position in range(len(stays)))
        body, kept_definitions = _split(code_cell.module, stays, header_stays=settings_stay)
        if not code_cell.module.body:  # only comments: the cell stays as it is
            kept.append((index, cell))
        elif kept_definitions is not None:
            if body:
                cell.source, _ = masks.restore(_strip_final_newline(kept_definitions.code, cell.source), "")
                cell.outputs = []
                cell.execution_count = None
            kept.append((index, cell))
        if body:
            statements.extend(_separated(body, first=not statements))
    return kept, statements


def _training_function(statements: list[Statement], moved: list[_CodeCell], declared: Sequence[str]) -> cst.FunctionDef:
    """``def training_function():`` holding ``statements``, under a comment naming its cells;
    ``declared`` names are declared ``global`` first, under a comment saying why."""
    if len(moved) > 1:
        comment = (
            f"# Cells {moved[0].number}-{moved[-1].number} as one function: notebook_launcher runs it in every process."
        )
    else:
        comment = f"# Cell {moved[0].number} as a function: notebook_launcher runs it in every process."
    if declared:
        declaration = cst.SimpleStatementLine(
            body=[cst.Global(names=[cst.NameItem(cst.Name(name)) for name in declared])],
            leading_lines=[
                cst.EmptyLine(
                    comment=cst.Comment("# The definitions above read these as globals: each process binds its own.")
                )
            ],
        )
        first = statements[0]
        statements = [
            declaration,
            first.with_changes(leading_lines=[cst.EmptyLine(indent=False), *first.leading_lines]),
            *statements[1:],
        ]
    return cst.FunctionDef(
        name=cst.Name(FUNCTION),
        params=cst.Parameters(),
        body=cst.IndentedBlock(body=statements),
        leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))],
    )


def _strip_final_newline(code: str, original: str) -> str:
    return code.rstrip("\n") if not original.endswith("\n") else code


def _is_definition(statement: cst.BaseStatement) -> bool:
    """An import, function or class: it stays at the top level, where the workers inherit it."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return True
    if isinstance(statement, cst.SimpleStatementLine):
        return all(
            isinstance(small, cst.Import) or (isinstance(small, cst.ImportFrom) and not _is_future(small))
            for small in statement.body
        )
    return False


def _is_future(node: cst.ImportFrom) -> bool:
    return isinstance(node.module, cst.Name) and node.module.value == "__future__"


def _statement_lines(module: cst.Module) -> list[tuple[int, int]]:
    """1-based first and last line of each of the module's statements, with the comments and
    blank lines before it."""
    lines: list[tuple[int, int]] = []
    before = len(module.header)
    for statement in module.body:
        length = module.code_for_node(statement).count("\n")
        lines.append((before + 1, before + max(length, 1)))
        before += length
    return lines


def _split(
    module: cst.Module, definitions: Sequence[bool], *, header_stays: bool = False
) -> tuple[list[Statement], cst.Module | None]:
    """A cell's statements for the function, and the module of what stays (its definitions and
    settings; None when nothing stays). The cell's header comment goes with its first statement,
    or stays with the settings (``header_stays``: a settings cell's banner)."""
    body = [statement for statement, definition in zip(module.body, definitions) if not definition]
    kept = [statement for statement, definition in zip(module.body, definitions) if definition]
    header, attached = _header_parts(module.header)
    header_moves = bool(body and module.header and not definitions[0] and not (header_stays and kept and header))
    if header_moves:
        body[0] = body[0].with_changes(leading_lines=[*module.header, *body[0].leading_lines])
    elif body and not definitions[0]:  # the banner stays; the comment right above the first statement goes with it
        body[0] = body[0].with_changes(leading_lines=[*attached, *body[0].leading_lines])
        module = module.with_changes(header=header)
    if not kept:
        return body, None
    if not definitions[0]:  # the definitions start the cell now: no blank lines above them
        lines = list(kept[0].leading_lines)
        while lines and lines[0].comment is None:
            lines.pop(0)
        kept[0] = kept[0].with_changes(leading_lines=lines)
    return body, module.with_changes(body=kept, header=[] if header_moves else module.header)


def _header_parts(header: Sequence[cst.EmptyLine]) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """A cell's header comment cut at its last blank line: the banner, and the comment right
    above the first statement (libcst puts both in the module's header)."""
    lines = list(header)
    if not lines or lines[-1].comment is None:
        return lines, []
    blanks = [index for index, line in enumerate(lines) if line.comment is None]
    if not blanks:
        return [], lines
    return lines[: blanks[-1] + 1], lines[blanks[-1] + 1 :]


def _separated(body: list[Statement], *, first: bool) -> list[Statement]:
    """A cell's statements in the function: one blank line before each cell but the first."""
    lines = list(body[0].leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    lines = lines if first else [cst.EmptyLine(), *lines]
    statements = [body[0].with_changes(leading_lines=lines), *body[1:]]
    # Blank lines in the function carry no indentation (libcst would indent them).
    return [
        statement.with_changes(
            leading_lines=[
                line.with_changes(indent=False) if line.comment is None else line for line in statement.leading_lines
            ]
        )
        for statement in statements
    ]


# -- settings the definitions read ---------------------------------------------------------------


@record(frozen=True)
class SharedSettings:
    """How the names definitions read as globals reach them from the function's cells."""

    #: (cell index, statement index) of the statements that stay at the top level.
    hoisted: frozenset[tuple[int, int]]
    #: The names the function declares ``global``.
    declared: tuple[str, ...]
    #: The names the function's statements bind.
    function_names: frozenset[str]


def _shared_settings(moved: list[_CodeCell], shared: frozenset[str], per_process: frozenset[str]) -> SharedSettings:
    """Which statements of the training's cells stay at the top level, and where each name of
    ``shared`` (read as a global by a definition) is bound.

    ``notebook_launcher`` forks the kernel, so what the top level binds before the launch is in
    every process: the plain values and data (settings, tensors, data sets) stay there, decided
    by data flow in :mod:`accel_convert.converter.launcher_values`; what is made per process (the
    training's objects, the device: ``per_process``) and what reads it moves into the function.
    A name of ``shared`` the function binds (the device, a count of a loader's batches) is
    declared ``global`` there: each forked process binds its own, which its definitions read."""
    statements = [
        TopStatement((cell.index, position), tree, cell.module.body[position])
        for cell in moved
        for position, (definition, tree) in enumerate(zip(cell.definitions, cell.trees))
        if not definition
    ]
    every_tree = [tree for cell in moved for tree in cell.trees]
    hoisted = staying_statements(statements, per_process, global_reads(every_tree))
    local = set().union(*(statement.binds for statement in statements if statement.key not in hoisted))
    return SharedSettings(hoisted, tuple(sorted(shared & local)), frozenset(local))


# -- names ---------------------------------------------------------------------------------------


def _reads(cell: _CodeCell) -> set[str]:
    """Every name a cell reads anywhere (in its functions too) or declares global."""
    names: set[str] = set()
    for tree in cell.trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, ast.Global):
                names.update(node.names)
    return names


def new_unbound_reads(restructured: Restructured, converted: Any) -> list[tuple[str, str]]:
    """(name, a scope reading it) of every name the converted, restructured cells (the launcher
    cell read as a call of the function) read before binding more often than the original cells
    did, ordered by scope. Counted by name, not by scope: the training's reads were the module's
    and are the function's now. A name the function declares ``global`` is bound, for what it
    calls, before the call (the function binds it in the original's order, before its uses)."""
    function_number = restructured.function_index + 1
    program = ""
    for number, code in sorted(converted.masked.items()):
        program += code if code.endswith("\n") else code + "\n"
        if number == function_number:
            program += "".join(f"{name} = None\n" for name in restructured.declared)
            program += f"{FUNCTION}()\n"
    before = _unbound_by_name(ast.parse("".join(restructured.original_codes)))
    after = _unbound_by_name(ast.parse(program))
    return [
        (name, scope)
        for name, (scope, count) in sorted(after.items(), key=lambda item: item[1][0])
        if count > before.get(name, ("", 0))[1] and not name.startswith(PLACEHOLDER_PREFIX)
    ]


def _unbound_by_name(module: ast.Module) -> dict[str, tuple[str, int]]:
    """Name → (a scope reading it, how many reads anywhere) of the reads possibly before binding."""
    found: dict[str, tuple[str, int]] = {}
    for (scope, name), reads in possibly_unbound_reads(module).items():
        previous_scope, count = found.get(name, (scope, 0))
        found[name] = (previous_scope if count else scope, count + len(reads))
    return found
