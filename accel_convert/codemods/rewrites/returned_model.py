"""Part of ACC114 (:mod:`.checkpoint`): a prepared model that the function creating the accelerator
returns, and that the code calling it saves.

    def main():
        accelerator = Accelerator()
        ...
        model = accelerator.prepare(model)
        ...
        return model

    if __name__ == "__main__":
        model = main()
        torch.save(model.state_dict(), "model.pt")
        fresh.load_state_dict(torch.load("model.pt"))

The ``__main__`` block has no accelerator: its save ran on every rank with the DDP wrapper's
``module.`` keys, and the reload into a plain model failed. Returning the accelerator as well would
change what ``main()`` returns for every caller (a test importing it, a notebook); instead ``main``
returns the model it was given, ``accelerator.unwrap_model(model)`` (the keys the original saved),
and the caller's save runs on the main process (``PartialState``, the process state every
``Accelerator`` shares), followed by a barrier so that no rank reads the file before it is
written.

Left alone: a caller that trains the returned model further (a ``backward`` or ``step`` after the
call: the wrapper's gradient averaging must stay), a function called from anywhere but module
code or the ``__main__`` block, and a caller that does not save what it got (there nothing needs
the unwrapped model). Those saves stay reported (ACC914).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import unwrap_model
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imports import add_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.syntax import bound_by, calls_in, dotted, is_main_guard, names_in, nodes_in
from accel_convert.codemods.model.plan import prepare_call, prepared_arguments
from accel_convert.records import record

#: Calls on the returned model that mean it is still trained where it arrives.
TRAINING_CALLS = frozenset({"backward", "step"})


@record(eq=False, repr=False)
class ReturnedModel:
    """What the pass changes: the creating function's returns, and the caller's saves."""

    home: str
    #: Positions, in the returned tuple, of the prepared models (None: the value is the model).
    positions: frozenset[int | None]
    #: The caller's saving statements (nodes of the tree the rule received).
    saves: list[cst.SimpleStatementLine] = field(default_factory=list)
    #: Statements of the caller after the call that read what it returned (their ACC914 reports go).
    readers: list[cst.CSTNode] = field(default_factory=list)


def unwrapped_returns(
    module: cst.Module, found: ReturnedModel | None, facts: ScriptFacts, options: Options
) -> tuple[cst.Module, list[Change]]:
    """The module with the returned model (``found`` in it by :func:`returned_model`) unwrapped
    and the caller's saves kept to the main process (unchanged when the pattern is not there),
    and the changes made."""
    if found is None:
        return module, []
    changes = [
        _change(facts, save, "saved by the caller of the function creating the accelerator") for save in found.saves
    ]
    body = [_with_returns_unwrapped(statement, found, facts) for statement in module.body]
    body = _with_saves_on_main(body, found)
    converted = module.with_changes(body=body)
    line = cast(cst.SimpleStatementLine, cst.parse_statement(f"from {options.accelerate_module} import PartialState"))
    return add_import(converted, line, options.import_style), changes


def handled_lines(found: ReturnedModel | None, facts: ScriptFacts) -> set[int]:
    """Original lines of the caller's statements this pass makes sound (their ACC914 reports go)."""
    if found is None:
        return set()
    lines = set()
    for node in found.readers:
        site = facts.origins.site(node)
        if site is not None:
            lines.add(site.line)
    return lines


def returned_model(module: cst.Module, facts: ScriptFacts) -> ReturnedModel | None:
    """The creating function returning a prepared model, and its one caller that saves it."""
    home = facts.creating_function or facts.main_function
    if facts.home_kind != "function" or home is None:
        return None
    definition = next((s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == home), None)
    if definition is None:
        return None
    positions = _model_positions(definition, facts)
    if not positions:
        return None
    callers = _caller_blocks(module, home)
    if callers is None or len(callers) != 1:
        return None
    found = ReturnedModel(home, frozenset(positions))
    if not _saves_after_call(callers[0], found, facts):
        return None
    return found


def _model_positions(definition: cst.FunctionDef, facts: ScriptFacts) -> set[int | None]:
    """Where the function's returns hold a prepared model (every return must agree)."""
    positions: set[int | None] = set()
    nodes = nodes_in(definition.body)
    returns = [node for node in nodes if type(node) is cst.Return]
    if not returns:
        return positions  # nothing returned (a ``main`` that trains and saves itself)
    prepared = {
        name
        for node in nodes
        if (call := prepare_call(node, facts)) is not None
        for name in prepared_arguments(call)
        if name in facts.models
    }
    for node in returns:
        value = node.value
        if dotted(value) in prepared:
            positions.add(None)
        elif isinstance(value, cst.Tuple):
            positions.update(i for i, element in enumerate(value.elements) if dotted(element.value) in prepared)
        else:
            return set()
    return positions if len(returns) == 1 or len(positions) == 1 else set()


def _caller_blocks(module: cst.Module, home: str) -> list[Sequence[cst.BaseStatement]] | None:
    """The blocks (module code, the ``__main__`` block) calling ``home``; None when something else
    names it (a function calling it, the function handed on as a value)."""
    blocks: list[Sequence[cst.BaseStatement]] = []
    named = 0
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == home:
            continue
        mentions = sum(1 for node in nodes_in(statement) if isinstance(node, cst.Name) and node.value == home)
        named += mentions
        body = statement.body if isinstance(statement, cst.If) and is_main_guard(statement) else None
        if mentions and isinstance(body, cst.IndentedBlock):
            blocks.append(body.body)
        elif mentions and isinstance(statement, cst.SimpleStatementLine) and module.body not in blocks:
            blocks.append(module.body)
    calls = sum(
        1
        for block in blocks
        for s in block
        if not isinstance(s, (cst.FunctionDef, cst.ClassDef))
        for call in calls_in(s)
        if dotted(call.func) == home
    )
    return blocks if calls == named else None


def _saves_after_call(block: Sequence[cst.BaseStatement], found: ReturnedModel, facts: ScriptFacts) -> bool:
    """Finds, after ``X = home(...)`` in ``block``, the statements saving X (or what is made of it);
    False when there are none, or when X is trained further."""
    received: set[str] = set()
    for statement in block:
        if not received:
            received = _received_names(statement, found)
            continue
        mentioned = names_in(statement)
        if not mentioned & received:
            continue
        if any(isinstance(n, cst.Attribute) and n.attr.value in TRAINING_CALLS for n in nodes_in(statement)):
            return False
        if not isinstance(statement, cst.SimpleStatementLine):
            if _saves(statement, facts):
                return False  # a save under ``if``/``for``: not a statement of its own to guard
            found.readers.append(statement)
            continue
        found.readers.append(statement)
        if _saves(statement, facts):
            found.saves.append(statement)
        else:
            received |= _names_assigned(statement)
    return bool(found.saves)


def _received_names(statement: cst.BaseStatement, found: ReturnedModel) -> set[str]:
    """The names ``X = home(...)`` (or ``X, history = home(...)``) binds to the returned model."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return set()
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
        return set()
    if dotted(assign.value.func) != found.home:
        return set()
    target = assign.targets[0].target
    if None in found.positions:
        return {target.value} if isinstance(target, cst.Name) else set()
    if not isinstance(target, cst.Tuple):
        return set()
    return {
        element.value.value
        for index, element in enumerate(target.elements)
        if index in found.positions and isinstance(element.value, cst.Name)
    }


def _saves(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    return any(facts.callee_name(call.func) == "torch.save" for call in calls_in(statement))


def _names_assigned(statement: cst.SimpleStatementLine) -> set[str]:
    """``state = model.state_dict()``: ``state`` holds what the model gave."""
    return {name for small in statement.body if isinstance(small, cst.Assign) for name in bound_by(small)}


def _with_returns_unwrapped(
    statement: cst.BaseStatement, found: ReturnedModel, facts: ScriptFacts
) -> cst.BaseStatement:
    if not (isinstance(statement, cst.FunctionDef) and statement.name.value == found.home):
        return statement
    return cast(cst.BaseStatement, statement.visit(_UnwrapReturns(found, facts)))


class _UnwrapReturns(cst.CSTTransformer):
    def __init__(self, found: ReturnedModel, facts: ScriptFacts) -> None:
        super().__init__()
        self.found, self.facts = found, facts

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == self.found.home  # not the returns of a function defined inside

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        value = updated_node.value
        if value is None:
            return updated_node
        if None in self.found.positions:
            return updated_node.with_changes(value=unwrap_model(self.facts, value))
        if not isinstance(value, cst.Tuple):
            return updated_node
        elements = [
            element.with_changes(value=unwrap_model(self.facts, element.value))
            if index in self.found.positions
            else element
            for index, element in enumerate(value.elements)
        ]
        return updated_node.with_changes(value=value.with_changes(elements=elements))


def _with_saves_on_main(body: list[cst.BaseStatement], found: ReturnedModel) -> list[cst.BaseStatement]:
    """Each saving statement under ``if PartialState().is_main_process:``, a barrier after it."""
    saves = {id(save) for save in found.saves}

    def rewritten(statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        result: list[cst.BaseStatement] = []
        for statement in statements:
            if id(statement) not in saves or not isinstance(statement, cst.SimpleStatementLine):
                result.append(statement)
                continue
            guard = cast(cst.If, cst.parse_statement("if PartialState().is_main_process:\n    pass\n"))
            result.append(
                guard.with_changes(
                    body=guard.body.with_changes(body=[statement.with_changes(leading_lines=())]),
                    leading_lines=statement.leading_lines,
                )
            )
            result.append(cst.parse_statement("PartialState().wait_for_everyone()\n"))
        return result

    body = rewritten(body)
    return [
        s.with_changes(body=s.body.with_changes(body=rewritten(s.body.body)))
        if isinstance(s, cst.If) and is_main_guard(s) and isinstance(s.body, cst.IndentedBlock)
        else s
        for s in body
    ]


def _change(facts: ScriptFacts, node: cst.CSTNode, why: str) -> Change:
    site = facts.origins.site(node)
    line, column = (site.line, site.column) if site is not None else (1, 0)
    end_line, end_column = (site.end_line, site.end_column) if site is not None else (line, column)
    return Change(
        "ACC114",
        f"{why}: main process only (PartialState), the ranks wait for it; the function returns "
        "accelerator.unwrap_model(model), the keys the original saved",
        line,
        column,
        end_line,
        end_column,
        True,
    )
