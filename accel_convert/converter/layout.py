"""The formatter's layout for the lines a conversion adds or changes, without the formatter.

A script that black (default settings) or ``ruff format`` left as it is should pass
``black --check`` / ``ruff format --check`` after conversion too; black and ruff may not be
installed where the converter runs, so the converter lays out its own lines as they would:

- one blank line between the import block and the statement after it
  (``accelerator = Accelerator()``);
- two blank lines between a top-level ``def``/``class`` and a statement next to it;
- no whitespace on a blank line (a statement moved into a new ``with`` block);
- a line the rewrite made longer than the limit split at its last bracket pair with something
  inside (an empty ``.item()`` after it stays on the closing line), the content hugged on one
  indented line when it fits, else one element per line with a trailing comma (or one operand
  per line, the operator first), as black's right-hand split does;
- the value of an assignment, ``return``, ``if``/``while`` or ``for ... in`` put in parentheses
  (``x = (`` / the value / ``)``) where black keeps its invisible ones: several operators at
  the value's depth, or one with the value ending in an empty call, a subscript or an attribute;
- imports keep the wrapping of the project's import sorting (``formatting.import_style``);
- a comment after a call statement stays with the closing bracket.

A line whose split black makes by rules not reproduced here (a comparison in the value, a
tuple, a chain of method calls, an element of a bracket holding operators, an assignment with
a comment) is left as it is, and the result must parse to the same tree as
the converter's output, or the output is returned as the converter wrote it.

Only a file that looks formatter-formatted is touched (:func:`looks_formatted`): the user's own
layout elsewhere is kept byte for byte. Lines the original already had are left alone.

Example (line length 88)::

    import torch
    from accel_convert.runtime import Accelerator
    accelerator = Accelerator()
    x = accelerator.unwrap_model(model).load_state_dict(torch.load(path, map_location=location))

becomes::

    import torch
    from accel_convert.runtime import Accelerator

    accelerator = Accelerator()
    x = accelerator.unwrap_model(model).load_state_dict(
        torch.load(path, map_location=location)
    )
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
import warnings
from collections.abc import Sequence
from functools import lru_cache

from accel_convert.codemods.engine.positions import python_ast

OPENING = {"(": ")", "[": "]", "{": "}"}
CLOSING = set(OPENING.values())
#: Delimiters black splits a bracket's content at, highest priority first.
DELIMITERS: tuple[frozenset[str], ...] = (
    frozenset({","}),
    frozenset({"if", "else"}),
    frozenset({"or"}),
    frozenset({"and"}),
    frozenset({"+", "-"}),
    frozenset({"*", "/", "//", "%", "@"}),
)


def formatter_layout(original: str, output: str, line_length: int) -> str:
    """``output`` laid out as black/ruff would lay out the lines the conversion changed, when
    ``original`` looks formatter-formatted; else ``output`` unchanged."""
    # CPython's parser warns about the user's code (``invalid escape sequence``): not ours to
    # print, and under ``-W error`` the warning would make valid code look unparsable.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if output == original or not looks_formatted(original, line_length):
            return output
        try:
            lines = _blank_lines_fixed(output.splitlines(keepends=True))
            old = set(original.splitlines())
            lines = _new_statements_joined(lines, old)
            laid_out = "".join(_wrapped(lines, old, line_length))
            # Layout moves whitespace and brackets black would add, nothing else: the same tree.
            if laid_out != output and not same_tree(_parsed(output), _parsed(laid_out)):
                return output
        except (SyntaxError, ValueError, tokenize.TokenError):
            return output
        finally:
            _tokens_of.cache_clear()
            _parsed.cache_clear()
    return laid_out


# The steps below tokenize and parse the output as each left it; where a step changed nothing
# (most conversions: no blank line to fix, no statement to join), the next one reads the same
# text, tokenized and parsed once (tokenize is a third of this module's time). Cleared when the
# file is laid out: nothing of one file is kept for the next.


@lru_cache(maxsize=2)
def _tokens_of(text: str) -> tuple[tokenize.TokenInfo, ...]:
    return tuple(tokenize.generate_tokens(io.StringIO(text).readline))


@lru_cache(maxsize=2)
def _parsed(text: str) -> ast.Module:
    """CPython's tree of ``text``: the pipeline's own (``python_ast``, cached) where it has parsed
    the same bytes already (the original and the converter's output, both plain UTF-8 here: the
    same tree), else parsed here; a SyntaxError as ``ast.parse`` raises it."""
    tree = python_ast(text.encode("utf-8", "surrogatepass"))
    return tree if tree is not None else ast.parse(text)


def same_tree(first: ast.AST, second: ast.AST) -> bool:
    """Whether two CPython trees are the same program: what ``ast.dump(first) == ast.dump(second)``
    says (node types, fields, and values by their ``repr``; positions left out), without
    printing either tree (the two dumps were a quarter of this module's time on a 9 KB script)."""
    pending: list[tuple[object, object]] = [(first, second)]
    while pending:
        a, b = pending.pop()
        if a is b:
            continue
        if isinstance(a, ast.AST):
            if type(a) is not type(b):
                return False
            pending.extend((getattr(a, name, None), getattr(b, name, None)) for name in a._fields)
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            pending.extend(zip(a, b))
        elif isinstance(b, ast.AST | list) or repr(a) != repr(b):
            return False
    return True


def looks_formatted(source: str, line_length: int) -> bool:
    """Whether ``source`` has the marks of black/ruff format: no trailing whitespace, no tab
    indent, double quotes, a blank line after the module docstring, two blank lines around
    top-level definitions, lines within the limit save one a long string or comment makes long
    (the formatters cannot split those)."""
    lines = source.splitlines()
    if any(line != line.rstrip() or line.startswith("\t") for line in lines):
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        tree = _parsed(source)
    except (SyntaxError, tokenize.TokenError, ValueError):
        return False
    if any(t.type == tokenize.STRING and _single_quoted(t.string) for t in tokens):
        return False
    long_lines = {n for n, line in enumerate(lines, 1) if len(line) > line_length}
    if long_lines and not long_lines <= _unsplittable_lines(tokens):
        return False
    if _docstring_glued(tree, lines) or _joinable_statement(tokens, lines, line_length):
        return False
    return all(_gap(lines, a, b) == 2 for a, b in _definition_pairs(tree.body))


def _unsplittable_lines(tokens: list[tokenize.TokenInfo]) -> set[int]:
    """Lines holding a string or comment and no bracket pair with something inside (a line the
    formatters leave long: they split at brackets, never inside a string)."""
    has_text: set[int] = set()
    split_here: set[int] = set()
    opened: list[tokenize.TokenInfo] = []
    in_fstring = 0
    for token in tokens:
        kind = tokenize.tok_name.get(token.type, "")
        if kind in ("STRING", "COMMENT", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END"):
            has_text.update(range(token.start[0], token.end[0] + 1))
        in_fstring += (kind == "FSTRING_START") - (kind == "FSTRING_END")
        if in_fstring or token.type != tokenize.OP:
            continue
        if token.string in OPENING:
            opened.append(token)
        elif token.string in CLOSING and opened:
            start = opened.pop()
            if start.start[0] == token.start[0] and token.start[1] > start.end[1]:
                split_here.add(token.start[0])
    return has_text - split_here


def _joinable_statement(tokens: list[tokenize.TokenInfo], lines: list[str], line_length: int) -> bool:
    """A statement on several lines that would fit on one, with no comment, multi-line string or
    magic trailing comma holding it open: the formatters join those."""
    statement: list[tokenize.TokenInfo] = []
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if _fits_joined(statement, lines, line_length):
                return True
            statement = []
        elif token.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            statement.append(token)
    return False


def _fits_joined(statement: list[tokenize.TokenInfo], lines: list[str], line_length: int) -> bool:
    if not statement or statement[0].start[0] == statement[-1].end[0]:
        return False
    kinds = {tokenize.tok_name.get(t.type, "") for t in statement}
    if "COMMENT" in kinds or any(t.end[0] > t.start[0] for t in statement):
        return False
    if any(a.string == "," and b.string in CLOSING for a, b in zip(statement, statement[1:])):
        return False
    first, last = statement[0].start[0], statement[-1].end[0]
    if any(lines[n - 1].rstrip().endswith("\\") for n in range(first, last)):
        return False
    joined = " ".join(line.strip() for line in lines[first - 1 : last])
    joined = re.sub(r" ([)\]}])", r"\1", re.sub(r"([(\[{]) ", r"\1", joined))
    return statement[0].start[1] + len(joined) <= line_length


def _docstring_glued(tree: ast.Module, lines: list[str]) -> bool:
    """A module docstring with code right under it (black puts a blank line there)."""
    if not tree.body or not isinstance(tree.body[0], ast.Expr) or not isinstance(tree.body[0].value, ast.Constant):
        return False
    end = tree.body[0].end_lineno or 0
    return len(tree.body) > 1 and end < len(lines) and bool(lines[end].strip())


def _single_quoted(string: str) -> bool:
    body = string.lstrip("rRbBuUfF")
    return body.startswith("'") and '"' not in body


def _definition_pairs(body: Sequence[ast.stmt]) -> list[tuple[ast.stmt, ast.stmt]]:
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [(a, b) for a, b in zip(body, body[1:]) if isinstance(a, definitions) or isinstance(b, definitions)]


def _start(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", [])
    return min([statement.lineno, *(d.lineno for d in decorators)])


def _gap(lines: list[str], a: ast.stmt, b: ast.stmt) -> int:
    """Blank lines between ``a`` and ``b`` (comments in between end the count: they are kept)."""
    between = lines[(a.end_lineno or a.lineno) : _start(b) - 1]
    return len(between) if all(not line.strip() for line in between) else 2


def _blank_lines_fixed(lines: list[str]) -> list[str]:
    """Whitespace-only lines emptied; one blank line after the import block; two around
    top-level definitions (where only blank lines separate the statements)."""
    text = "".join(lines)
    in_strings = _string_lines(text)
    lines = [
        ("\n" if line.endswith("\n") else "") if not line.strip() and n not in in_strings else line
        for n, line in enumerate(lines, 1)
    ]
    body = _parsed("".join(lines)).body
    wanted: dict[int, int] = {}  # line number of a statement's start -> blank lines before it
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.Import | ast.ImportFrom) and not isinstance(b, ast.Import | ast.ImportFrom):
            wanted[_start(b)] = max(1, _gap([line.rstrip("\n") for line in lines], a, b))
    for _, b in _definition_pairs(body):
        wanted[_start(b)] = 2
    fixed: list[str] = []
    for n, line in enumerate(lines, 1):
        if n in wanted and _blank_run(fixed) is not None:
            while fixed and not fixed[-1].strip():
                fixed.pop()
            fixed.extend(["\n"] * wanted[n])
        fixed.append(line)
    return fixed


def _blank_run(previous: list[str]) -> int | None:
    """Blank lines at the end of ``previous``, None when a comment precedes (the user's layout)."""
    count = 0
    for line in reversed(previous):
        if line.strip():
            return None if line.lstrip().startswith("#") else count
        count += 1
    return count


def _string_lines(text: str) -> set[int]:
    """Lines inside (not the first line of) a string spanning lines."""
    inside: set[int] = set()
    for token in _tokens_of(text):
        if token.type in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)) and token.end[0] > token.start[0]:
            inside.update(range(token.start[0] + 1, token.end[0] + 1))
    return inside


def _new_statements_joined(lines: list[str], old: set[str]) -> list[str]:
    """Statements the conversion printed on several lines (no line but closing brackets from the original, no
    comment, multi-line string or magic trailing comma) joined, to be split again as the
    formatters would (or left joined where they fit)."""
    text = "".join(lines)
    plain = [line.rstrip("\n") for line in lines]
    joins: dict[int, tuple[int, str]] = {}  # first line -> (last line, joined text)
    statement: list[tokenize.TokenInfo] = []
    for token in _tokens_of(text):
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            joined = _joined(statement, plain)
            span = range(joined[0], joined[1] + 1) if joined is not None else range(0)
            if joined is not None and not any(plain[n - 1] in old and plain[n - 1].strip(")]}:,") for n in span):
                joins[joined[0]] = (joined[1], joined[2])
            statement = []
        elif token.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            statement.append(token)
    out: list[str] = []
    skip_to = 0
    for n, line in enumerate(lines, 1):
        if n <= skip_to:
            continue
        if n in joins:
            skip_to, joined_text = joins[n]
            out.append(joined_text + "\n")
        else:
            out.append(line)
    return out


def _joined(statement: list[tokenize.TokenInfo], lines: list[str]) -> tuple[int, int, str] | None:
    if not statement or statement[0].start[0] == statement[-1].end[0]:
        return None
    if statement[0].string in ("import", "from"):
        return None  # an import is wrapped as the project's import sorting does (formatting.import_style)
    if any(t.type == tokenize.COMMENT or t.end[0] > t.start[0] for t in statement):
        return None
    if any(a.string == "," and b.string in CLOSING for a, b in zip(statement, statement[1:])):
        return None
    first, last = statement[0].start[0], statement[-1].end[0]
    if any(lines[n - 1].rstrip().endswith("\\") for n in range(first, last)):
        return None
    joined = " ".join(line.strip() for line in lines[first - 1 : last])
    joined = re.sub(r" ([)\]}])", r"\1", re.sub(r"([(\[{]) ", r"\1", joined))
    return first, last, " " * statement[0].start[1] + joined


def _wrapped(lines: list[str], old: set[str], line_length: int) -> list[str]:
    out: list[str] = []
    continuations = _continuation_lines("".join(lines))
    for n, line in enumerate(lines, 1):
        text = line.rstrip("\n")
        if len(text) <= line_length or text in old:
            out.append(line)
            continue
        indent = text[: len(text) - len(text.lstrip())]
        if n in continuations:
            split = _element_split(text.strip(), indent, line_length)
        else:
            split = statement_split(text.strip(), indent, line_length)
        out.extend([f"{piece}\n" for piece in split] if split is not None else [line])
    return out


def _continuation_lines(text: str) -> set[int]:
    """Lines whose first token is inside a bracket: an element of a call or list split over lines."""
    depth, seen, inside = 0, set(), set()
    for token in _tokens_of(text):
        if token.start[0] not in seen and token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.DEDENT):
            seen.add(token.start[0])
            if depth > 0:
                inside.add(token.start[0])
        if token.type == tokenize.OP:
            depth += (token.string in OPENING) - (token.string in CLOSING)
    return inside


def _element_split(code: str, indent: str, line_length: int) -> list[str] | None:
    """One element of a bracket split at its last bracket pair, where black would: no delimiter
    at its depth (black splits there first, by rules not all reproduced here)."""
    tokens = _tokens(code)
    if not tokens:
        return None
    element = tokens[:-1] if tokens[-1].string == "," else tokens
    if not element or _value_delimiters(element) != []:
        return None
    return right_hand_split(code, indent, line_length)


def _tokens(code: str) -> list[tokenize.TokenInfo] | None:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError):
        return None
    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
    kept = [t for t in tokens if t.type not in skip]
    if any(t.type == tokenize.COMMENT or t.start[0] != 1 for t in kept):
        return None  # a comment, or a statement on several lines: not one of the converter's lines
    return kept


def right_hand_split(code: str, indent: str, line_length: int) -> list[str] | None:
    """``code`` (one piece of a bracket's content, no indent) split at its last bracket pair with
    something inside as black does, or None where this is not the split black would make."""
    tokens = _tokens(code)
    if not tokens:
        return None
    pair = _last_bracket_pair(tokens)
    if pair is None:
        return None
    opening_at, closing_at = pair
    head = code[: tokens[opening_at].end[1]]
    body = code[tokens[opening_at].end[1] : tokens[closing_at].start[1]].strip()
    tail = code[tokens[closing_at].start[1] :]
    if len(indent) + len(head) > line_length or len(indent) + len(tail) > line_length:
        return None
    inner = _split_body(body, indent + "    ", line_length)
    return None if inner is None else [indent + head, *inner, indent + tail]


def statement_split(code: str, indent: str, line_length: int) -> list[str] | None:
    """``code`` (one statement, no indent) split as black splits a statement: the value of an
    assignment, ``return``, ``if``/``elif``/``while`` or ``for ... in`` sits in black's invisible
    parentheses, kept (``x = (`` / the value / ``)``) or left out (the split at the last bracket
    pair) by black's rules; None where this is not the split black would make."""
    commented = _trailing_comment(code)
    if commented is not None:
        return _split_before_comment(*commented, indent, line_length)
    tokens = _tokens(code)
    if not tokens:
        return None
    span = _optional_parens_span(tokens)
    if span is not None:
        omitted = _parens_omitted(tokens[span[0] : span[1]], len(indent) + 4, line_length)
        if omitted is None:
            return None
        if not omitted:
            return _in_parentheses(code, tokens, span, indent, line_length)
    split = right_hand_split(code, indent, line_length)
    if split is None and span is not None and _head_too_long(tokens, indent, line_length):
        # black's second opinion: the head of the split does not fit, the parentheses make all fit.
        return _in_parentheses(code, tokens, span, indent, line_length)
    return split


def _trailing_comment(code: str) -> tuple[str, str] | None:
    """``code`` and the comment ending its one line, where it has one."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError):
        return None
    comments = [t for t in tokens if t.type == tokenize.COMMENT]
    if len(comments) != 1 or comments[0].start[0] != 1 or code[comments[0].end[1] :].strip():
        return None
    return code[: comments[0].start[1]].rstrip(), comments[0].string


def _split_before_comment(code: str, comment: str, indent: str, line_length: int) -> list[str] | None:
    """A call statement with a comment after it, split as black does: the comment stays with the
    closing bracket (an assignment's value is left as it is: black weighs the comment there)."""
    tokens = _tokens(code)
    if not tokens or _optional_parens_span(tokens) is not None:
        return None
    split = right_hand_split(code, indent, line_length)
    return None if split is None else [*split[:-1], f"{split[-1]}  {comment}"]


def _head_too_long(tokens: list[tokenize.TokenInfo], indent: str, line_length: int) -> bool:
    pair = _last_bracket_pair(tokens)
    return pair is not None and len(indent) + tokens[pair[0]].end[1] > line_length


def _last_bracket_pair(tokens: list[tokenize.TokenInfo]) -> tuple[int, int] | None:
    """The last bracket pair with something inside (black leaves an empty ``()`` in the tail)
    followed only by a trailer's tokens (names, dots, empty pairs, closing brackets, ``:``)."""
    closing_at = len(tokens) - 1
    while closing_at >= 0:
        token = tokens[closing_at]
        if token.string in CLOSING:
            opening_at = _matching_opening(tokens, closing_at)
            if opening_at is None:
                return None
            if opening_at < closing_at - 1:
                return opening_at, closing_at
            closing_at = opening_at - 1
        elif token.type == tokenize.NAME and not keyword.iskeyword(token.string) or token.string in (".", ":", ","):
            closing_at -= 1
        else:
            return None
    return None


#: The keywords whose condition or value black wraps in invisible parentheses.
_PARENTHESIZED_AFTER = frozenset({"return", "if", "elif", "while"})
#: Operators black splits at that this layout does not reproduce: a value holding one at the
#: depth of the invisible parentheses is left as it is.
_UNHANDLED = frozenset(
    {"<", ">", "==", "!=", "<=", ">=", "in", "not", "is", "|", "^", "&", "<<", ">>", "**", "~"}
    | {"lambda", "await", "yield", ":=", "for", "async"}
)
#: black's delimiter priorities (higher splits first); ``and``/``or`` share one, as in black.
_PRIORITY = {",": 6, "if": 5, "else": 5, "or": 4, "and": 4, "+": 3, "-": 3, "*": 2, "/": 2, "//": 2, "%": 2, "@": 2}
#: A dot after a closing bracket: a method called on a call's result (``a(b).c(d)``).
_DOT_PRIORITY = 1


def _optional_parens_span(tokens: list[tokenize.TokenInfo]) -> tuple[int, int] | None:
    """The tokens black wraps in invisible parentheses: the value after the last ``=`` (or
    augmented assignment) at depth 0, after ``return``/``if``/``elif``/``while``, after the ``in``
    of a ``for``; a trailing ``:`` stays outside. None for any other statement."""
    end = len(tokens) - 1 if tokens[-1].string == ":" else len(tokens)
    if tokens[0].string in _PARENTHESIZED_AFTER:
        return (1, end) if end > 1 else None
    depth, start = 0, None
    for i, token in enumerate(tokens[:end]):
        depth += (token.string in OPENING) - (token.string in CLOSING)
        if depth != 0:
            continue
        assigns = token.type == tokenize.OP and token.string.endswith("=") and token.string not in _COMPARISONS
        if assigns or (tokens[0].string == "for" and token.string == "in" and start is None):
            start = i + 1
    return (start, end) if start is not None and start < end else None


_COMPARISONS = frozenset({"==", "!=", "<=", ">="})


def _parens_omitted(value: list[tokenize.TokenInfo], depth_width: int, line_length: int) -> bool | None:
    """Whether black leaves out the invisible parentheses around ``value`` (its
    ``can_omit_invisible_parens``), None where this layout cannot tell."""
    delimiters = _value_delimiters(value)
    if delimiters is None or len(value) < 2:
        return None
    if not delimiters:
        return True  # the parentheses would help no split
    priority = max(delimiters)
    count = delimiters.count(priority)
    if priority == _DOT_PRIORITY:
        return True if count == 1 else None  # several: black splits before each dot
    if priority == _PRIORITY[","]:
        return None  # a tuple: black's rules for its commas differ
    if count > 1:
        return False
    # One delimiter: the parentheses go where the value ends in a call or a dict black can split
    # and the line up to that bracket fits (black's ``_can_omit_closing_paren``).
    if value[-1].string not in (")", "}") or value[-2].string in OPENING:
        return False
    opening_at = _matching_opening(value, len(value) - 1)
    if opening_at is None:
        return None
    if any(t.string in OPENING for t in value[:opening_at]):
        return True
    return depth_width + value[opening_at].end[1] - value[0].start[1] <= line_length


def _value_delimiters(value: list[tokenize.TokenInfo]) -> list[int] | None:
    """The priorities of the delimiters at depth 0 of ``value``; None where it holds an operator
    this layout does not reproduce, or a unary operator or star black treats apart."""
    if value[0].string in ("-", "+", "*", "**") or value[0].string in _UNHANDLED:
        return None
    priorities: list[int] = []
    depth = 0
    for previous, token in zip(value, value[1:]):
        depth += (previous.string in OPENING) - (token.string in CLOSING)
        if depth != 0:
            continue
        if token.string in _UNHANDLED or (token.type == tokenize.STRING and previous.type == tokenize.STRING):
            return None
        if token.string in ("+", "-", "*") and previous.type == tokenize.OP and previous.string not in CLOSING:
            return None  # a unary sign or a star after an operator
        if token.type == tokenize.OP and token.string in _PRIORITY or token.string in ("if", "else", "or", "and"):
            priorities.append(_PRIORITY[token.string])
        elif token.string == "." and previous.string in CLOSING:
            priorities.append(_DOT_PRIORITY)
    return priorities


def _in_parentheses(
    code: str, tokens: list[tokenize.TokenInfo], span: tuple[int, int], indent: str, line_length: int
) -> list[str] | None:
    """``target = (`` / the value / ``)``: black's split keeping its invisible parentheses."""
    start, end = span
    prefix = code[: tokens[start].start[1]].rstrip()
    value = code[tokens[start].start[1] : tokens[end - 1].end[1]]
    suffix = code[tokens[end - 1].end[1] :].strip()
    if len(indent) + len(prefix) + 2 > line_length:
        return None
    inner = _split_body(value, indent + "    ", line_length)
    return None if inner is None else [f"{indent}{prefix} (", *inner, f"{indent}){suffix}"]


def _matching_opening(tokens: list[tokenize.TokenInfo], closing_at: int) -> int | None:
    depth = 0
    for i in range(closing_at, -1, -1):
        if tokens[i].string in CLOSING:
            depth += 1
        elif tokens[i].string in OPENING:
            depth -= 1
            if depth == 0:
                return i
    return None


def _split_body(body: str, indent: str, line_length: int) -> list[str] | None:
    """A bracket's content: on one line when it fits, else split at its delimiters."""
    if len(indent) + len(body) <= line_length:
        return [indent + body]
    tokens = _tokens(body)
    if tokens is None:
        return None
    if len(tokens) == 1:  # one string: on its own line, however long (no split can shorten it)
        return [indent + body]
    depth, at_depth0 = 0, []
    for i, token in enumerate(tokens):
        if token.string in OPENING:
            depth += 1
        elif token.string in CLOSING:
            depth -= 1
        elif depth == 0:
            at_depth0.append(i)
    if any(tokens[i].string in ("lambda", "for", "async", ":") for i in at_depth0):
        return None  # a lambda, a comprehension, a slice: black's rules differ there
    for delimiters in DELIMITERS:
        cuts = [i for i in at_depth0 if tokens[i].string in delimiters and i > 0]
        if cuts:
            return _delimited(body, tokens, cuts, delimiters, indent, line_length)
    split = right_hand_split(body, indent, line_length)
    return split


def _delimited(
    body: str, tokens: list[tokenize.TokenInfo], cuts: list[int], delimiters: frozenset[str], indent: str, limit: int
) -> list[str] | None:
    if "," in delimiters:
        if any(tokens[i].string in ("*", "**") for i in [0, *(c + 1 for c in cuts)] if i < len(tokens)):
            return None  # a star argument: whether black adds the trailing comma depends on targets
        starts = [0, *(tokens[c].end[1] for c in cuts)]
        ends = [tokens[c].start[1] for c in cuts] + [len(body)]
        pieces = [body[s:e].strip() for s, e in zip(starts, ends)]
        pieces = [f"{p}," for p in pieces if p]
    else:
        starts = [0, *(tokens[c].start[1] for c in cuts)]
        ends = [tokens[c].start[1] for c in cuts] + [len(body)]
        pieces = [body[s:e].strip() for s, e in zip(starts, ends)]
    lines: list[str] = []
    for piece in pieces:
        if len(indent) + len(piece) <= limit:
            lines.append(indent + piece)
            continue
        split = right_hand_split(piece, indent, limit)
        if split is None:
            return None
        lines.extend(split)
    return lines
