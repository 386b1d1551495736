"""Large data literals kept out of libcst's tree: what keeps memory linear in a small multiple of
the file size.

A list of a hundred thousand numbers is nothing to convert, yet libcst builds several nodes per
element (some 550 bytes of memory per byte of such a literal, 550 MB for a 1 MB file). Before
parsing, each large literal made only of constants (``[0.5, -1, "a", (2, 3)]``, dicts and sets
alike) is replaced by a placeholder name of exactly the same shape: the same lines and line
endings, the same length on its last line, so that every position in the file (those the
findings report, those CPython's tree gives) stays where it was. The conversion, its printing
and its verification run on that text; the literals are put back in the printed output.

Only UTF-8 files take this path (CPython's column offsets are then byte offsets), only files
large enough for it to matter, and only when every placeholder comes back exactly once: a pass
that moved, copied or dropped one makes the caller convert the file as it is.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from accel_convert.records import record

#: Below this a file's tree is small anyway: the search is not worth its time.
MIN_FILE_BYTES = 64_000
#: Literals shorter than this stay in the tree.
MIN_LITERAL_BYTES = 4_096
PLACEHOLDER_PREFIX = b"__accel_convert_data_"

LINE_ENDING = re.compile(rb"\r\n|\r|\n")
#: The nodes a pure data literal is made of.
DATA_NODES = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Constant, ast.Load, ast.UnaryOp, ast.USub, ast.UAdd)
CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict)


@record(frozen=True)
class ElidedSource:
    """``source`` with its large literals replaced, and how to put them back."""

    source: bytes
    #: (placeholder, the literal's original bytes), in file order.
    literals: tuple[tuple[bytes, bytes], ...]

    def restore(self, output: bytes) -> bytes | None:
        """``output`` with every literal back; None unless each placeholder is there once."""
        for placeholder, _ in self.literals:
            if output.count(placeholder) != 1:
                return None
        for placeholder, original in self.literals:
            output = output.replace(placeholder, original, 1)
        return output


def is_pure_data(node: ast.AST) -> bool:
    """Made of constants only: no name, call or operator a pass could care about."""
    return all(isinstance(inner, DATA_NODES) for inner in ast.walk(node))


def placeholder_for(index: int, original: bytes) -> bytes:
    """A parenthesised name with ``original``'s line endings and the length of its last line."""
    name = PLACEHOLDER_PREFIX + str(index).encode() + b"__"
    pieces = LINE_ENDING.split(original)
    endings = LINE_ENDING.findall(original)
    if not endings:
        return b"(" + name + b" " * (len(original) - len(name) - 2) + b")"
    return b"(" + name + b"".join(endings) + b" " * (len(pieces[-1]) - 1) + b")"


def large_literal_spans(source: bytes, tree: ast.Module) -> list[tuple[int, int]]:
    """Byte spans of the outermost large pure-data literals, in file order."""
    line_starts = [0] + [match.end() for match in LINE_ENDING.finditer(source)]
    spans: list[tuple[int, int]] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.JoinedStr):
            continue  # an f-string's expressions cannot take a multi-line placeholder
        if isinstance(node, CONTAINERS) and node.end_lineno is not None and node.end_col_offset is not None:
            start = line_starts[node.lineno - 1] + node.col_offset
            end = line_starts[node.end_lineno - 1] + node.end_col_offset
            if end - start >= MIN_LITERAL_BYTES and is_pure_data(node):
                spans.append((start, end))
                continue
        pending.extend(ast.iter_child_nodes(node))
    return sorted(spans)


def elide_data_literals(source: bytes, tree: ast.Module | None) -> ElidedSource | None:
    """``source`` with its large data literals replaced, or None where nothing is replaced."""
    if tree is None or len(source) < MIN_FILE_BYTES or PLACEHOLDER_PREFIX in source:
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError:
        return None
    if encoding != "utf-8":  # a BOM shifts line 1, another encoding every column
        return None
    spans = large_literal_spans(source, tree)
    if not spans:
        return None
    pieces: list[bytes] = []
    literals: list[tuple[bytes, bytes]] = []
    position = 0
    for index, (start, end) in enumerate(spans):
        original = source[start:end]
        placeholder = placeholder_for(index, original)
        pieces += [source[position:start], placeholder]
        literals.append((placeholder, original))
        position = end
    pieces.append(source[position:])
    return ElidedSource(b"".join(pieces), tuple(literals))
