"""Adding a parameter to a function and the matching argument to its calls (the accelerator,
handed to the helpers and classes that now use it)."""

from __future__ import annotations

from typing import Any

import libcst as cst

from accel_convert.codemods.engine.syntax import TIGHT_EQUAL, is_docstring


def parameter_index(params: cst.Parameters) -> int | None:
    """Where the new parameter goes among the positional ones (None: keyword-only)."""
    plain = list(params.params)
    index = next((i for i, param in enumerate(plain) if param.default is not None), len(plain))
    if index < len(plain) or not isinstance(params.star_arg, cst.MaybeSentinel):
        return None  # among defaulted parameters or after *args only a keyword-only one fits
    return len(params.posonly_params) + index


def with_parameter(params: cst.Parameters, name: str) -> cst.Parameters:
    """Add ``name`` after the positional parameters that have no default, else keyword-only."""
    if parameter_index(params) is None:
        return _with_keyword_only(params, cst.Param(cst.Name(name)))
    new = cst.Param(cst.Name(name))
    last_group = (
        isinstance(params.star_arg, cst.MaybeSentinel) and not params.kwonly_params and params.star_kwarg is None
    )
    if last_group and params.params:
        return params.with_changes(params=_appended(list(params.params), new))
    return params.with_changes(params=[*params.params, new])


def with_optional_accelerator(function: cst.FunctionDef, name: str) -> cst.FunctionDef:
    """``function`` taking ``name`` as a last parameter that defaults to None (keyword-only after
    ``*args``), and creating its own accelerator first where it gets none::

        def generate(decoder, prime_str="A", accelerator=None):
            if accelerator is None:
                accelerator = Accelerator()
    """
    params = function.params
    new = cst.Param(
        cst.Name(name),
        default=cst.Name("None"),
        equal=TIGHT_EQUAL,
    )
    if not isinstance(params.star_arg, cst.MaybeSentinel) or params.kwonly_params or params.star_kwarg is not None:
        params = _with_keyword_only(params, new)
    else:
        params = params.with_changes(params=_appended(list(params.params), new) if params.params else [new])
    creation = cst.parse_statement(f"if {name} is None:\n    {name} = Accelerator()\n")
    body = function.body
    assert isinstance(body, cst.IndentedBlock)
    statements = list(body.body)
    start = 1 if statements and is_docstring(statements[0]) else 0
    return function.with_changes(
        params=params, body=body.with_changes(body=[*statements[:start], creation, *statements[start:]])
    )


def _with_keyword_only(params: cst.Parameters, new: cst.Param) -> cst.Parameters:
    """``params`` with ``new`` keyword-only (after ``*``, added where there is none). Parameters
    one per line with a trailing comma stay so: ``*`` and ``new`` each take a line of their own."""
    if not isinstance(params.star_arg, cst.MaybeSentinel):
        kwonly = list(params.kwonly_params)
        star = params.star_arg.comma if isinstance(params.star_arg, (cst.ParamStar, cst.Param)) else None
        return params.with_changes(kwonly_params=_appended(kwonly, new, star) if kwonly else [new])
    plain = list(params.params)
    comma = plain[-1].comma if plain and not params.kwonly_params and params.star_kwarg is None else None
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        before = plain[-2].comma if len(plain) > 1 and isinstance(plain[-2].comma, cst.Comma) else comma
        return params.with_changes(
            params=[*plain[:-1], plain[-1].with_changes(comma=before)],
            star_arg=cst.ParamStar(comma=before),
            kwonly_params=[new.with_changes(comma=comma)],
        )
    return params.with_changes(star_arg=cst.ParamStar(), kwonly_params=[*params.kwonly_params, new])


def _appended(items: list[Any], new: Any, separator: Any = None) -> list[Any]:
    """``items`` (the parameters or arguments of a call, the last ones of their list) with
    ``new`` after them, in their layout: one per line with a trailing comma stays so.
    ``separator``: the comma before the first of ``items`` (the ``*``'s, for keyword-only ones)."""
    last = items[-1]
    comma = last.comma
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        previous = items[-2].comma if len(items) > 1 else separator
        before = previous if isinstance(previous, cst.Comma) else comma
        return [*items[:-1], last.with_changes(comma=before), new.with_changes(comma=comma)]
    if isinstance(comma, cst.MaybeSentinel):
        # What stood between the last one and the closing bracket (its own line: ``shuffle=True\n
        # )``) goes after the new one, so the bracket stays where it was; one per line, the new
        # one takes a line of its own, as the others are separated.
        trailing = "whitespace_after_arg" if isinstance(last, cst.Arg) else "whitespace_after_param"
        previous = items[-2].comma if len(items) > 1 else None
        one_per_line = isinstance(previous, cst.Comma) and isinstance(
            previous.whitespace_after, cst.ParenthesizedWhitespace
        )
        between = previous if one_per_line else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return [
            *items[:-1],
            last.with_changes(comma=between, **{trailing: cst.SimpleWhitespace("")}),
            new.with_changes(**{trailing: getattr(last, trailing)}),
        ]
    return [*items, new]


def with_argument(call: cst.Call, index: int | None, name: str, value: cst.BaseExpression | None = None) -> cst.Call:
    """Pass ``value`` (default: the variable ``name``) for the new parameter ``name``:
    positionally where it sits, or by keyword when the call's positional arguments do not line up
    with the parameters exactly."""
    value = cst.Name(name) if value is None else value
    args = list(call.args)
    leading = 0
    while leading < len(args) and args[leading].keyword is None and not args[leading].star:
        leading += 1
    all_positional = sum(1 for arg in args if arg.keyword is None)
    if index is not None and leading == all_positional >= index:
        # Positionally where the parameter sits. A call passing more positional arguments than
        # the function took fails as it stands: the extra ones still come after the new
        # parameter (by keyword it would be filled twice, and a second conversion would read
        # the extra argument as the accelerator).
        if index == leading == len(args) and args:
            args = _appended(args, cst.Arg(value))
        else:
            args.insert(index, cst.Arg(value))
    else:
        keyword = cst.Arg(
            value,
            keyword=cst.Name(name),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        args = _appended(args, keyword) if args else [keyword]
    return call.with_changes(args=_fix_commas(args))


def _fix_commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """Every argument but the last gets a comma; the last keeps a trailing comma if it had one."""
    fixed = []
    for position, arg in enumerate(args):
        if position < len(args) - 1 and isinstance(arg.comma, cst.MaybeSentinel):
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        fixed.append(arg)
    return fixed
