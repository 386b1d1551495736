"""Converting Jupyter notebooks: the code cells as one program, everything else kept.

A notebook's cells share one namespace (the model built in cell 3 is trained in cell 5), so the
analysis must see them together: the code cells are joined into one module, a marker statement
on its own line between each two, converted as a script is, and the converted module is split
back at the markers. The split is checked to be exact (joining the pieces again gives back the
converted module, byte for byte), and a conversion that moves a marker (code carried from one
cell into another) is refused rather than written.

IPython's own syntax is not Python, and libcst never sees it: a line magic (``%matplotlib``),
a shell escape (``!pip install``, ``files = !ls``) and a help request (``model?``) are replaced
by a placeholder name for the conversion and put back afterwards; a cell magic (``%%time``,
``%%bash``) leaves its whole cell alone.

Markdown and raw cells, outputs, execution counts, cell ids and metadata are kept. A notebook
with nothing to convert comes back byte for byte; one that changes is written the way Jupyter
writes notebooks (nbformat's layout), which is what it already is when Jupyter saved it.

Positions are shown as ruff shows them in notebooks: ``path:cell N:line:column``, ``N`` counting
every cell from 1 (markdown ones too, as Jupyter and VS Code number them), the line counted
within the cell.
"""

from __future__ import annotations

import json
import re
from dataclasses import field, replace
from typing import Any

from accel_convert.codemods import Change, Options
from accel_convert.converter.pipeline import Conversion, ConversionError, convert_script
from accel_convert.records import record

NOTEBOOK_SUFFIX = ".ipynb"


def is_notebook_path(path: str) -> bool:
    """Whether ``path`` names a Jupyter notebook (by its suffix, as Jupyter itself decides)."""
    return path.lower().endswith(NOTEBOOK_SUFFIX)


@record(frozen=True)
class CellChange(Change):
    """A change or warning in a notebook: ``line`` and ``end_line`` count within cell ``cell``."""

    cell: int = 0


@record(frozen=True)
class NotebookConversion(Conversion):
    """A converted notebook; ``cells`` holds one :class:`Conversion` per code cell that changed
    (its path ``NOTEBOOK:cell N``, its bytes the cell's code), which is what ``--diff`` shows."""

    cells: tuple[Conversion, ...] = field(default=())

    def cell_diffs(self, new_name: str | None = None) -> list[str]:
        """One unified diff per changed code cell, headed ``a/PATH:cell N`` and ``b/PATH:cell N``
        (a :class:`CellConversion` names the cell on each side, ``/dev/null`` for a cell that is
        new or gone, as git heads a new or deleted file); unchanged cells are left out."""
        from accel_convert.converter.report import unified_diff

        lines: list[str] = []
        for cell in self.cells:
            # A cell is text shown in a notebook, not a file: no marker for its missing last newline.
            shown = replace(cell, source=_ended(cell.source), output=_ended(cell.output))
            if not isinstance(cell, CellConversion):
                suffix = cell.path[len(self.path) :]
                lines.extend(unified_diff(shown, f"{new_name or self.path}{suffix}"))
                continue
            diff = unified_diff(shown, f"{new_name or self.path}:cell {cell.new_cell}")
            if diff and cell.old_cell is None:
                diff[0] = "--- /dev/null\n"
            if diff and cell.new_cell is None:
                diff[1] = "+++ /dev/null\n"
            lines.extend(diff)
        return lines


def _ended(code: bytes) -> bytes:
    return code + b"\n" if code and not code.endswith(b"\n") else code


@record(frozen=True)
class CellConversion(Conversion):
    """One code cell's change where cells were added, removed or moved (``--launcher``): its
    path ``NOTEBOOK:cell N`` names it in the original notebook, ``new_cell`` in the converted
    one; None on the side where the cell does not exist (its source or output is empty there)."""

    old_cell: int | None = field(default=None, kw_only=True)
    new_cell: int | None = field(default=None, kw_only=True)


def cell_conversions(path: str, old: Any, new: Any, origins: list[int | None]) -> tuple[CellConversion, ...]:
    """The code cells that differ between notebook ``old`` and ``new`` (``origins``: the index in
    ``old`` each cell of ``new`` comes from, None for a new cell), in the new notebook's order, a
    removed cell where it stood."""
    kept = {origin for origin in origins if origin is not None}
    removed = [index for index, cell in enumerate(old.cells) if index not in kept and _is_code(cell)]
    found: list[CellConversion] = []

    def removed_before(limit: int) -> None:
        while removed and removed[0] < limit:
            index = removed.pop(0)
            source = old.cells[index].source.encode("utf-8")
            found.append(CellConversion(f"{path}:cell {index + 1}", source, b"", old_cell=index + 1))

    for position, (cell, origin) in enumerate(zip(new.cells, origins)):
        # A removed cell comes before the new cells that follow it (its code moved into them).
        following = next((later for later in origins[position:] if later is not None), len(old.cells))
        removed_before(following)
        if not _is_code(cell):
            continue
        before = old.cells[origin].source if origin is not None else ""
        if before != cell.source:
            name = f"{path}:cell {origin + 1}" if origin is not None else path
            old_cell = origin + 1 if origin is not None else None
            conversion = CellConversion(
                name, before.encode("utf-8"), cell.source.encode("utf-8"), old_cell=old_cell, new_cell=position + 1
            )
            found.append(conversion)
    removed_before(len(old.cells))
    return tuple(found)


def _is_code(cell: Any) -> bool:
    return bool(cell.get("cell_type") == "code" and isinstance(cell.get("source"), str))


# -- IPython syntax ------------------------------------------------------------------------------

#: ``name = !cmd``, ``a, b = %sx cmd``: IPython's assignment forms (never valid Python).
IPYTHON_ASSIGNMENT = re.compile(r"[ \t]*[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[%!]")
#: ``model?``, ``torch.nn??``, ``?model``: IPython's help requests.
IPYTHON_HELP = re.compile(r"\?{1,2}[\w.]+|[\w.]+\?{1,2}")


def is_cell_magic(code: str) -> bool:
    """A ``%%magic`` cell: its body belongs to the magic (bash, timing, writing a file...)."""
    return code.lstrip().startswith("%%")


@record()
class _Scan:
    """Where a line-by-line scan stands: inside a string (its quote), how deep in brackets, and
    whether the last line ended in a backslash continuation."""

    quote: str | None = None
    depth: int = 0
    continued: bool = False

    @property
    def at_statement_start(self) -> bool:
        return self.quote is None and self.depth == 0 and not self.continued

    def read(self, line: str) -> int:
        """Advance over one line; returns where its comment starts (its length without one)."""
        position, end = 0, len(line)
        comment = end
        while position < end:
            character = line[position]
            if self.quote is not None:
                if character == "\\":
                    position += 2  # an escaped character, or the line ending of a continued string
                elif line.startswith(self.quote, position):
                    position += len(self.quote)
                    self.quote = None
                else:
                    position += 1
                continue
            if character == "#":
                comment = position
                break
            if character in "\"'":
                self.quote = character * 3 if line.startswith(character * 3, position) else character
                position += len(self.quote)
                continue
            if character in "([{":
                self.depth += 1
            elif character in ")]}":
                self.depth = max(0, self.depth - 1)
            position += 1
        code = line[:comment].rstrip("\r\n")
        if self.quote in ('"', "'") and not code.endswith("\\"):
            self.quote = None  # an unclosed one-line string: a syntax error the parse will report
        self.continued = self.quote is None and comment == end and code.endswith("\\")
        return comment


def ipython_spans(code: str) -> list[tuple[int, int]]:
    """The (first, last) 0-based line numbers of each IPython-only statement in a cell: lines
    that start a statement (not inside a string or brackets) with ``%``, ``!`` or ``?``, an
    assignment from one, or a help request; a magic's backslash-continued lines come with it."""
    lines = code.splitlines(keepends=True)
    spans: list[tuple[int, int]] = []
    scan = _Scan()
    index = 0
    while index < len(lines):
        line = lines[index]
        if scan.at_statement_start and is_ipython_line(line):
            last = index
            while lines[last].rstrip("\r\n").endswith("\\") and last + 1 < len(lines):
                last += 1
            spans.append((index, last))
            index = last + 1
            continue
        scan.read(line)
        index += 1
    return spans


def is_ipython_line(line: str) -> bool:
    """Whether a line, at the start of a statement, is IPython syntax (none of it is Python)."""
    stripped = line.strip()
    if stripped.startswith(("%", "!", "?")):
        return True
    if IPYTHON_ASSIGNMENT.match(line):
        return True
    code = line[: _Scan().read(line)].strip()
    return IPYTHON_HELP.fullmatch(code) is not None


# -- joining and splitting -----------------------------------------------------------------------


@record(frozen=True)
class Piece:
    """One code cell as it goes into the joined module."""

    cell: int  # 1-based, counting every cell of the notebook
    code: str  # the cell's code, IPython syntax masked
    #: The masked code had no final newline of its own (Jupyter stores cells without one).
    added_newline: bool
    #: Masked line (0-based) → the cell's own line (1-based), for positions.
    lines: tuple[int, ...]


@record()
class Masks:
    """The placeholders standing for IPython syntax, and what each stands for."""

    name: str
    originals: dict[str, str] = field(default_factory=dict)

    def mask(self, code: str) -> tuple[str, tuple[int, ...]]:
        """``code`` with each IPython statement replaced by a one-line placeholder, and the map
        from masked lines to the cell's 1-based lines."""
        lines = code.splitlines(keepends=True)
        masked: list[str] = []
        numbers: list[int] = []
        taken = 0
        for first, last in ipython_spans(code):
            for number in range(taken, first):
                masked.append(lines[number])
                numbers.append(number + 1)
            original = "".join(lines[first : last + 1])
            body = original.rstrip("\r\n")
            ending = original[len(body) :]
            placeholder = f"{self.name}_{len(self.originals)}__"
            indent = body[: len(body) - len(body.lstrip(" \t"))]
            self.originals[placeholder] = body[len(indent) :]
            masked.append(f"{indent}{placeholder}{ending}")
            numbers.append(first + 1)
            taken = last + 1
        for number in range(taken, len(lines)):
            masked.append(lines[number])
            numbers.append(number + 1)
        return "".join(masked), tuple(numbers)

    def restore(self, code: str, path: str) -> tuple[str, int]:
        """Put each IPython statement back where its placeholder now stands (with the
        placeholder's indentation, should the conversion have moved it into a block); returns
        the code and how many were put back."""

        def original(match: re.Match[str]) -> str:
            placeholder = match.group(2)
            if placeholder not in self.originals:
                raise _moved(path, f"an unknown placeholder {placeholder}")
            return match.group(1) + self.originals[placeholder]

        return re.subn(rf"(?m)^([ \t]*)({re.escape(self.name)}_\d+__)[ \t]*(?=\r?$)", original, code)


def unused_name(stem: str, code: str) -> str:
    """``stem``, lengthened until no cell contains it: a placeholder never meets the user's names."""
    while stem in code:
        stem += "_"
    return stem


def join_pieces(pieces: list[Piece], marker: str) -> str:
    """The joined module: each piece's code, a marker line before every piece but the first."""
    return "".join((f"{marker}_{piece.cell}__\n" if index else "") + piece.code for index, piece in enumerate(pieces))


def split_module(module: str, marker: str) -> list[str]:
    """The joined module cut at its marker lines (the inverse of :func:`join_pieces`)."""
    return re.split(rf"(?m)^{re.escape(marker)}_\d+__\n", module)


def marker_cells(module: str, marker: str) -> list[int]:
    """The cell numbers the marker lines of ``module`` name, in order."""
    return [int(number) for number in re.findall(rf"(?m)^{re.escape(marker)}_(\d+)__\n", module)]


# -- the notebook --------------------------------------------------------------------------------


def read_notebook(source: bytes, path: str) -> Any:
    """The notebook as nbformat reads it (no validation: a notebook Jupyter opens is converted
    as it is, and nothing is added to it), or one positioned error line."""
    import nbformat

    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConversionError(path, 1, 1, f"not a notebook: byte 0x{source[error.start]:02x} is not UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversionError(path, error.lineno, error.colno, f"not a notebook: invalid JSON ({error.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        raise ConversionError(path, 1, 1, "not a notebook: no list of cells")
    for number, cell in enumerate(data.get("cells", []), start=1):
        if not isinstance(cell, dict):
            raise ConversionError(path, 1, 1, f"not a notebook: cell {number} is not a JSON object")
    if data.get("nbformat") != 4:
        raise ConversionError(
            path,
            1,
            1,
            f"notebook format {data.get('nbformat')} is not converted; open and save it with Jupyter (format 4)",
        )
    return nbformat.from_dict(_joined_sources(data))


def _joined_sources(data: dict[str, Any]) -> dict[str, Any]:
    """Cell sources (a list of lines or one string in the file) as one string each."""
    for cell in data["cells"]:
        if isinstance(cell, dict) and isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return data


def is_python(notebook: Any) -> bool:
    """Whether the notebook's kernel runs Python (a notebook that does not say is taken as one)."""
    metadata = notebook.get("metadata", {})
    languages = [
        metadata.get("kernelspec", {}).get("language"),
        metadata.get("language_info", {}).get("name"),
    ]
    return all(language in (None, "python") for language in languages)


def write_notebook(notebook: Any, source: bytes) -> bytes:
    """The notebook in nbformat's layout, ending as the original file did."""
    from nbformat import v4

    text = v4.writes(notebook)
    if source.endswith(b"\n") and not text.endswith("\n"):
        text += "\n"
    return text.encode("utf-8")


@record(frozen=True)
class ConvertedCells:
    """The notebook's code cells converted (the notebook's cells already hold the new code)."""

    cells: tuple[Conversion, ...]
    changes: tuple[CellChange, ...]
    #: Cell number → its converted code with IPython syntax still masked (Python throughout).
    masked: dict[int, str]

    def conversion(self, notebook: Any, source: bytes, path: str) -> NotebookConversion:
        output = write_notebook(notebook, source) if self.cells else source
        return NotebookConversion(path, source, output, self.changes, "utf-8", self.cells)


def convert_cells(notebook: Any, options: Options, path: str) -> ConvertedCells | None:
    """Convert the code cells of ``notebook`` in place as one program; None when it has none
    that mention torch (nothing to convert)."""
    code_cells = [
        (number, cell)
        for number, cell in enumerate(notebook.cells, start=1)
        if cell.get("cell_type") == "code" and isinstance(cell.get("source"), str) and not is_cell_magic(cell.source)
    ]
    every_code = "".join(cell.source for _, cell in code_cells)
    if not code_cells or "torch" not in every_code:
        return None
    masks = Masks(unused_name("__accel_convert_ipython", every_code))
    marker = unused_name("__accel_convert_cell", every_code)
    pieces: list[Piece] = []
    for number, cell in code_cells:
        masked, lines = masks.mask(cell.source)
        added = not masked.endswith("\n")
        pieces.append(Piece(number, masked + "\n" if added else masked, added, lines))
    module = join_pieces(pieces, marker)
    # The cut must give back exactly the cells that went in, before anything else relies on it.
    if split_module(module, marker) != [piece.code for piece in pieces]:
        raise ConversionError(path, 1, 1, "internal error: the notebook's cells do not split back exactly")

    try:
        converted = convert_script(module.encode("utf-8"), replace(options, launcher_processes=None), path=path)
    except ConversionError as error:
        raise located_error(error, pieces, path) from None
    output_module = converted.output.decode("utf-8")
    new_codes = split_converted(output_module, marker, pieces, path)
    restored_total = 0
    cells: list[Conversion] = []
    masked_codes: dict[int, str] = {}
    for piece, (_, cell), new_code in zip(pieces, code_cells, new_codes):
        masked_codes[piece.cell] = new_code
        if piece.added_newline and new_code.endswith("\n"):
            new_code = new_code[:-1]
        new_code, restored = masks.restore(new_code, path)
        restored_total += restored
        if new_code != cell.source:
            cells.append(Conversion(f"{path}:cell {piece.cell}", cell.source.encode("utf-8"), new_code.encode("utf-8")))
            cell.source = new_code
    if restored_total != len(masks.originals):
        raise _moved(path, "an IPython line was dropped or repeated")
    changes = tuple(located_change(change, pieces) for change in converted.changes)
    return ConvertedCells(tuple(cells), changes, masked_codes)


def split_converted(module: str, marker: str, pieces: list[Piece], path: str) -> list[str]:
    """The converted module cut back into cells, refusing a cut that is not exact."""
    if marker_cells(module, marker) != [piece.cell for piece in pieces[1:]]:
        # Only a rewrite that wraps statements into a new function does this: --oom-retry on
        # training written at the top level of several cells. A notebook keeps its cells.
        raise ConversionError(
            path,
            1,
            1,
            "cannot convert: the conversion would move code across cells (--oom-retry wraps training "
            "written at the top level of several cells into one function); put the training in a function "
            "in one cell, or convert without --oom-retry; nothing written",
        )
    codes = split_module(module, marker)
    if join_pieces([replace(piece, code=code) for piece, code in zip(pieces, codes)], marker) != module:
        raise _moved(path, "the converted cells do not join back into the converted program")
    return codes


def _moved(path: str, what: str) -> ConversionError:
    return ConversionError(path, 1, 1, f"internal error: converting this notebook {what}; nothing written")


def cell_position(pieces: list[Piece], line: int) -> tuple[int, int]:
    """The (cell, line in the cell) of a 1-based line of the joined module."""
    start = 1
    for index, piece in enumerate(pieces):
        if index:
            start += 1  # the marker line before the piece
        count = len(piece.lines)
        if line < start + count or index == len(pieces) - 1:
            offset = min(max(line - start, 0), max(count - 1, 0))
            return piece.cell, piece.lines[offset] if piece.lines else 1
        start += count
    return pieces[0].cell, 1


def located_change(change: Change, pieces: list[Piece]) -> CellChange:
    """A change of the joined module, positioned in its cell."""
    cell, line = cell_position(pieces, change.line)
    end_cell, end_line = cell_position(pieces, change.end_line)
    if end_cell != cell:
        end_line = line
    return CellChange(
        change.code, change.message, line, change.column, end_line, change.end_column, change.fixed, cell=cell
    )


def located_error(error: ConversionError, pieces: list[Piece], path: str) -> ConversionError:
    """A failure of the joined module, named by its cell (internal errors name only the file)."""
    if error.message.startswith("internal error"):
        return error
    cell, line = cell_position(pieces, error.line)
    return ConversionError(f"{path}:cell {cell}", line, error.column, error.message)
