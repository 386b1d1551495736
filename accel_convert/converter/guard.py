"""The last word before anything is written: a converted program that would read a name before
binding it, or call a changed function without its new argument, is never written.

:func:`codemods.engine.name_flow.name_flow_problems` finds such reads and calls (only those the
conversion added); across the modules of a program, every module's calls are checked, those of a
module the conversion left as it was included (``from pkg.test import _evaluate`` calling an
``_evaluate`` that gained an ``accelerator``). What the guard does with them, in order:

1. **Repair the placement**: the accelerator created below its first use (a download put under
   ``with accelerator.main_process_first():`` above the line that creates it) is created just
   before that use instead, when both are statements of one block.
2. **Leave a rewrite out**: convert again without one rewrite at a time, the last in run order
   first, until the program is sound; the rewrite left out is reported (ACC937) at its position.
   Where no single rewrite is to blame (two rewrites each make a helper need the accelerator,
   and some call of it cannot pass it), the rewrites made inside that helper are left out
   together; each is reported.
3. **Leave the file as written**: when leaving rewrites out does not make it sound, nothing is
   converted and ACC937 says why.

Sound conversions — every shipped fixture — pay only for the check: two CPython trees, one walk
of each.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import replace

import libcst as cst

from accel_convert.codemods import Change, Options
from accel_convert.codemods.engine.accelerator_creation import move_creation_before
from accel_convert.codemods.engine.name_flow import (
    NameFlowProblem,
    definition_spans,
    name_flow_problems,
    program_argument_problems,
)
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.codemods.engine.registry import all_rules
from accel_convert.records import record

#: The report of a rewrite the guard left out (documented with the accelerator rule, which owns
#: "the accelerator exists before it is used").
LEFT_OUT = "ACC937"
#: Rewrites that only bring the accelerator to where others use it (its creation, the parameter
#: of a helper): they follow from the others and are never what is left out.
PLUMBING = frozenset({"ACC101", "ACC104"})
#: Names the converter itself writes into the code it converts (a notebook's cell markers,
#: converter.notebooks): they are never run, so their flow is not the program's.
PLACEHOLDER_PREFIX = "__accel_convert"


@record()
class Attempt:
    """One conversion of a file or a program: per file, the printed output, the changes and the
    converted trees (the trees are only needed to repair a placement)."""

    outputs: list[bytes]
    changes: list[list[Change]]
    modules: list[cst.Module | None]
    options: Options


def problems_of(
    sources: Sequence[bytes],
    outputs: Sequence[bytes],
    names: Sequence[str] = (),
    packages: frozenset[str] = frozenset(),
) -> list[list[NameFlowProblem]]:
    """The name-flow problems of each converted file (of the whole program when ``names``, the
    files' module names, are given: calls across modules must pass new arguments too;
    ``packages``: the names that are packages, for their relative imports)."""
    found: list[list[NameFlowProblem]] = []
    originals: dict[str, ast.Module] = {}
    converted: dict[str, ast.Module] = {}
    for index, (source, output) in enumerate(zip(sources, outputs)):
        if output == source:
            found.append([])
            if names:
                # Unchanged, its calls of another module's changed function still count.
                _unchanged_module(names[index], source, originals, converted)
            continue
        before, after = python_ast(source), python_ast(output)
        if before is None or after is None:
            found.append([])  # syntax newer than this interpreter: libcst's verification judges
            continue
        found.append(
            [
                p
                for p in name_flow_problems(before, after)
                if (p.kind == "unbound" or not names) and not p.name.startswith(PLACEHOLDER_PREFIX)
            ]
        )
        if names:
            originals[names[index]], converted[names[index]] = before, after
    if names and any(output != source for source, output in zip(sources, outputs)):
        # Within a module the single-module check already looked; across modules, this one.
        across = program_argument_problems(originals, converted, packages)
        for index, name in enumerate(names):
            found[index] += across.get(name, [])
    return found


def _unchanged_module(
    name: str, source: bytes, originals: dict[str, ast.Module], converted: dict[str, ast.Module]
) -> None:
    """A module the conversion left as it was joins the program check with one tree for both."""
    tree = python_ast(source)
    if tree is not None:
        originals[name] = converted[name] = tree


def guarded(
    attempt_with: Callable[[Options], Attempt],
    first: Attempt,
    sources: Sequence[bytes],
    generate: Callable[[int, cst.Module], bytes],
    names: Sequence[str] = (),
    packages: frozenset[str] = frozenset(),
) -> Attempt:
    """``first`` when it is sound; else a repaired attempt, one with a rewrite left out, or the
    files unchanged — each with what was done reported."""
    if not first.options.enabled("ACC101"):
        return first  # the user creates the accelerator: every read of it is theirs to bind
    problems = problems_of(sources, first.outputs, names, packages)
    if not any(problems):
        return first
    repaired = _repair_placement(first, problems, generate, sources)
    if repaired is not None and not any(problems_of(sources, repaired.outputs, names, packages)):
        return repaired
    for code in _codes_to_leave_out(first):
        options = replace(first.options, ignore=(*first.options.ignore, code))
        attempt = attempt_with(options)
        if not any(problems_of(sources, attempt.outputs, names, packages)):
            return _with_left_out_report(attempt, first, [code], problems)
    together = _leave_out_inside(
        attempt_with, first, sources, problems, lambda attempt: problems_of(sources, attempt.outputs, names, packages)
    )
    if together is not None:
        return together
    return Attempt(
        list(sources),
        [
            [_unconverted_report(changes, file_problems)] if file_problems else []
            for changes, file_problems in zip(first.changes, problems)
        ],
        [None] * len(sources),
        first.options,
    )


def _repair_placement(
    attempt: Attempt,
    problems: list[list[NameFlowProblem]],
    generate: Callable[[int, cst.Module], bytes],
    sources: Sequence[bytes],
) -> Attempt | None:
    """The accelerator created just before its first read, in each file that reads it early;
    its ACC101 report moves with it."""
    outputs, modules = list(attempt.outputs), list(attempt.modules)
    changes = [list(file_changes) for file_changes in attempt.changes]
    repaired = False
    for index, file_problems in enumerate(problems):
        module = modules[index]
        unbound = [p for p in file_problems if p.kind == "unbound" and not p.name.startswith("self.")]
        if module is None or not unbound:
            continue
        first = min(unbound, key=lambda p: p.statement_line)
        if _binds(sources[index], first.name):
            # The script creates it itself (half converted by hand): the rules placed their code
            # against that line, and moving it would change what they decided; a rewrite that
            # reads it too early is left out instead.
            return None
        moved = move_creation_before(module, first.name, first.statement_line)
        if moved is None:
            return None
        line = original_line(sources[index], outputs[index], first.statement_line)
        modules[index], outputs[index] = moved, generate(index, moved)
        changes[index] = sorted(
            [
                replace(c, line=line, column=0, end_line=line, end_column=0) if c.code == "ACC101" else c
                for c in changes[index]
            ],
            key=_position,
        )
        repaired = True
    return replace(attempt, outputs=outputs, modules=modules, changes=changes) if repaired else None


def _binds(source: bytes, name: str) -> bool:
    """Whether the original file assigns ``name`` anywhere (``accelerator = Accelerator()``)."""
    tree = python_ast(source)
    return tree is not None and any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store) for node in ast.walk(tree)
    )


def original_line(source: bytes, output: bytes, output_line: int) -> int:
    """The line of ``source`` that line ``output_line`` of ``output`` stands for: the same line
    where it is unchanged, else the line after the last unchanged line above it."""
    import difflib  # only a repaired placement needs it: not loaded at start-up

    matcher = difflib.SequenceMatcher(None, source.splitlines(), output.splitlines(), autojunk=False)
    line = 1
    for block in matcher.get_matching_blocks():
        if block.b + 1 > output_line:
            break
        if block.b + block.size >= output_line:
            return block.a + (output_line - block.b)
        line = block.a + block.size + 1
    return line


def _codes_to_leave_out(attempt: Attempt) -> list[str]:
    """The rewrites the attempt made, the last in run order first (the accelerator's creation
    is never left out alone: every rewrite reads it)."""
    made = {change.code for changes in attempt.changes for change in changes if change.fixed}
    return [rule.code for rule in reversed(all_rules()) if rule.code in made and rule.code != "ACC101"]


def _leave_out_inside(
    attempt_with: Callable[[Options], Attempt],
    first: Attempt,
    sources: Sequence[bytes],
    problems: list[list[NameFlowProblem]],
    problems_in: Callable[[Attempt], list[list[NameFlowProblem]]],
) -> Attempt | None:
    """Where no single rewrite is to blame (two rewrites each make one helper need the
    accelerator, and the helper is also called where no argument can be added), every rewrite
    made inside the functions whose new parameter some call cannot pass is left out together
    (then the helper needs no accelerator, and the helpers rule adds none)."""
    blamed = {p.scope for file_problems in problems for p in file_problems if p.kind != "unbound"}
    inside: set[str] = set()
    for source, file_changes in zip(sources, first.changes):
        spans = definition_spans(python_ast(source), blamed) if blamed else []
        inside |= {
            change.code
            for change in file_changes
            if change.fixed and change.code not in PLUMBING and any(a <= change.line <= b for a, b in spans)
        }
    codes = [rule.code for rule in reversed(all_rules()) if rule.code in inside]
    if not codes:
        return None
    attempt = attempt_with(replace(first.options, ignore=(*first.options.ignore, *codes)))
    if any(problems_in(attempt)):
        return None
    return _with_left_out_report(attempt, first, codes, problems)


def _with_left_out_report(
    attempt: Attempt, first: Attempt, codes: Sequence[str], problems: list[list[NameFlowProblem]]
) -> Attempt:
    changes = [list(file_changes) for file_changes in attempt.changes]
    for code in codes:
        rule = next(rule for rule in all_rules() if rule.code == code)
        for index, file_changes in enumerate(first.changes):
            made = [change for change in file_changes if change.code == code and change.fixed]
            if not made:
                continue
            what = (
                _problem_text(problems[index])
                or _problem_text([p for file_problems in problems for p in file_problems])
                or "the program would fail where the original ran"
            )
            site = made[0]
            changes[index].append(
                Change(
                    LEFT_OUT,
                    f"{code} {rule.name} left out here: with it, {what}",
                    site.line,
                    site.column,
                    site.end_line,
                    site.end_column,
                    False,
                )
            )
    for file_changes in changes:
        file_changes.sort(key=_position)
    return replace(attempt, changes=changes)


def _unconverted_report(changes: Sequence[Change], problems: Sequence[NameFlowProblem]) -> Change:
    site = next((change for change in changes if change.code == "ACC101"), changes[0] if changes else None)
    line, column = (site.line, site.column) if site is not None else (1, 0)
    return Change(
        LEFT_OUT,
        f"file left as written: converted, {_problem_text(problems)}, and leaving out any one rewrite does not help",
        line,
        column,
        line,
        column,
        False,
    )


def _problem_text(problems: Sequence[NameFlowProblem]) -> str:
    if not problems:
        return ""
    return min(problems, key=lambda p: (p.line, p.column)).message


def _position(change: Change) -> tuple[int, int, str]:
    return change.line, change.column, change.code
