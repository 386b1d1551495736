"""The command line: what the argument parser defines and the names its result is bound to."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.syntax import (
    dotted,
)
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.state import Analysis

#: What a function that only builds a command-line parser and parses it calls.
ARGUMENT_PARSER_CALLS = frozenset(
    {
        "ArgumentParser",
        "add_argument",
        "add_argument_group",
        "add_mutually_exclusive_group",
        "add_subparsers",
        "add_parser",
        "set_defaults",
        "parse_args",
        "parse_known_args",
    }
)


@provider(provides=("parser_options", "parsed_arguments", "argument_parsing_functions"))
def argument_parser(a: Analysis) -> None:
    """``parser_options`` and ``parsed_arguments``: what the argument parser defines, and
    the names its parse result is bound to."""
    facts = a.facts
    for call in a.r.calls:
        facts.parser_options.update(options_defined(call.node))
    parsed_in: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        # ``parser.parse_args()``, or torchvision's ``get_args_parser().parse_args()``.
        if _parses(assign.value):
            facts.parsed_arguments |= {name.partition(".")[0] for name in assign.targets}
            parsed_in.setdefault(assign.function, set()).update(assign.targets)
    a.argument_parsing_functions = _argument_parsing_functions(a, parsed_in)
    for assign in a.r.assigns:
        value = assign.value
        if isinstance(value, cst.Call) and dotted(value.func) in a.argument_parsing_functions:
            facts.parsed_arguments |= {name.partition(".")[0] for name in assign.targets}


def options_defined(node: cst.Call) -> list[str]:
    """The attribute names ``parser.add_argument(...)`` defines: ``no_cuda`` for ``--no-cuda``,
    or its ``dest=``; nothing for a positional argument or another call."""
    if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "add_argument"):
        return []
    dest = next((arg.value for arg in node.args if arg.keyword and arg.keyword.value == "dest"), None)
    names = [dest] if dest is not None else [arg.value for arg in node.args if arg.keyword is None]
    found = []
    for value in names:
        if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
            text = value.evaluated_value
            if dest is not None or text.startswith("--"):
                found.append(text.lstrip("-").replace("-", "_"))
    return found


def _parses(value: cst.BaseExpression) -> bool:
    """``<anything>.parse_args(...)`` or ``.parse_known_args(...)``."""
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("parse_args", "parse_known_args")
    )


def _argument_parsing_functions(a: Analysis, parsed_in: dict[str, set[str]]) -> set[str]:
    """``def get_args(): ...; return parser.parse_args()`` (or ``args = ...; return args``):
    ``args = get_args()`` is argument parsing too. Only parsing: one that also prints or writes
    (``print(args)``) gets the accelerator."""
    found = set()
    for function, value in a.r.returns:
        parses = isinstance(value, cst.Call) and (dotted(value.func) or "").rpartition(".")[2] in (
            "parse_args",
            "parse_known_args",
        )
        if function != "<module>" and (parses or dotted(value) in parsed_in.get(function, ())):
            found.add(function)
    return found - {
        call.function
        for call in a.r.calls
        if (dotted(call.node.func) or "").rpartition(".")[2] not in ARGUMENT_PARSER_CALLS
    }
