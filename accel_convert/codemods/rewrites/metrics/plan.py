"""The gather itself: which expressions after the forward are read per sample (whole names,
``outputs.logits``, ``batch["labels"]``) and gathered into which names, which are one value per
batch and cannot be, the ``gather_for_metrics`` statements, and the loop body rewritten to read
the gathered names."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import field
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.positions import reanchor
from accel_convert.codemods.engine.syntax import (
    dotted,
    expression_code,
)
from accel_convert.codemods.engine.transformers import RuleTransformer, TargetedTransformer
from accel_convert.codemods.engine.walk import walk
from accel_convert.records import record

#: Attributes of model outputs that are one number per batch, not one row per sample.
BATCH_SCALAR_ATTRIBUTES = frozenset({"loss", "aux_loss"})


#: Methods whose first argument is a batch dimension the gather multiplies by N.
RESHAPE_METHODS = frozenset({"view", "reshape"})


@record(eq=False, repr=False)
class GatherPlan:
    """What an evaluation loop gathers from every process, and the names the gathered values take."""

    #: Expressions gathered, in order: names are rebound, other expressions get new names.
    gathered: list[cst.BaseExpression] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    new_names: list[str] = field(default_factory=list)
    batch_scalars: list[str] = field(default_factory=list)


class _UseCollector(cst.CSTVisitor):
    """How the statements after the forward read the outputs and the batch: whole names,
    ``name.attr`` or ``name[constant]``. Local: it reads the evaluation loop being rewritten."""

    def __init__(self, interesting: set[str]) -> None:
        self.interesting = interesting
        self.uses: list[cst.Name | cst.Attribute | cst.Subscript] = []
        #: Names read as ``name.item()``: one-element tensors, so one value per batch (a gathered
        #: copy would hold N values and ``.item()`` would fail).
        self.item_names: set[str] = set()
        self._consumed: set[int] = set()
        self._methods: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        # output.argmax(...): a method of a tensor, so the whole tensor is what is read
        if isinstance(node.func, cst.Attribute):
            self._methods.add(id(node.func))
            owner = node.func.value
            if node.func.attr.value == "item" and isinstance(owner, cst.Name) and owner.value in self.interesting:
                self.item_names.add(owner.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # ``outputs.data``: the name after the dot is no variable, even where a batch is called
        # ``data`` (gathering it would gather the whole input batch)
        self._consumed.add(id(node.attr))
        if isinstance(node.value, cst.Name) and node.value.value in self.interesting:
            if id(node) in self._methods:
                return
            if node.attr.value == "shape":
                # ``images.shape[0]`` counts samples: a torch.Size is no tensor to gather, so the
                # tensor itself is gathered (its gathered shape counts every sample once).
                return
            self._consumed.add(id(node.value))
            self._record(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if isinstance(node.value, cst.Name) and node.value.value in self.interesting and _constant_index(node):
            self._consumed.add(id(node.value))
            self._record(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.interesting and id(node) not in self._consumed:
            self._record(node)

    def visit_Arg(self, node: cst.Arg) -> None:
        # keyword names (f(target=...)) are not uses of a variable called "target"
        if node.keyword is not None:
            self._consumed.add(id(node.keyword))

    def _record(self, node: cst.Name | cst.Attribute | cst.Subscript) -> None:
        if not any(node.deep_equals(seen) for seen in self.uses):
            self.uses.append(node)


def _constant_index(node: cst.Subscript) -> bool:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return False
    return isinstance(node.slice[0].slice.value, (cst.SimpleString, cst.Integer))


def plan_gather(
    outputs: tuple[str, ...], targets: tuple[str, ...], after: list[cst.CSTNode], taken: Callable[[], set[str]]
) -> GatherPlan:
    collector = _UseCollector(set(outputs) | set(targets))
    for statement in after:
        walk(statement, collector)
    plan = GatherPlan()
    whole = {u.value for u in collector.uses if isinstance(u, cst.Name)}
    for use in collector.uses:
        if isinstance(use, cst.Name) and (
            (use.value in outputs and _is_batch_scalar(use.value, collector)) or use.value in collector.item_names
        ):
            # A target read with ``.item()`` too (``targets.append(y.item())`` over a loader of
            # batch size 1): gathered, it would hold N values and ``.item()`` would fail.
            plan.batch_scalars.append(use.value)
            continue
        if isinstance(use, cst.Name):
            plan.gathered.append(use)
            plan.names.append(use.value)
            continue
        owner = cast(cst.Name, use.value).value  # _UseCollector records name.attr and name[constant] only
        if owner in whole:
            continue  # the whole object is gathered already
        if isinstance(use, cst.Attribute) and use.attr.value in BATCH_SCALAR_ATTRIBUTES:
            plan.batch_scalars.append(expression_code(use))
            continue
        name = fresh_name(_suggested_name(use), taken() | set(plan.names))
        plan.gathered.append(use)
        plan.names.append(name)
        plan.new_names.append(name)
    return plan


def _is_batch_scalar(output: str, collector: _UseCollector) -> bool:
    """A forward output that is one number per batch: ``loss, logits = model(**batch)``'s
    ``loss``, or any output the loop reads with ``.item()``."""
    return output in BATCH_SCALAR_ATTRIBUTES or output in collector.item_names


def _suggested_name(use: cst.BaseExpression) -> str:
    if isinstance(use, cst.Attribute):
        return use.attr.value
    # Else ``name[constant]``, the only subscript _UseCollector records (see _constant_index).
    subscript = cast(cst.Subscript, use)
    index = cast(cst.Index, subscript.slice[0].slice).value
    key = index.evaluated_value if isinstance(index, cst.SimpleString) else None
    if isinstance(key, str) and key.isidentifier():
        return key
    return f"{cast(cst.Name, subscript.value).value}_{expression_code(index)}"


#: Python's builtins: a gathered ``batch["id"]`` named ``id`` would hide ``id()`` for the rest of the function.
_BUILTIN_NAMES = frozenset(dir(builtins))


def fresh_name(name: str, taken: set[str]) -> str:
    candidate = name
    while candidate in taken or candidate in _BUILTIN_NAMES:
        candidate = f"gathered_{candidate}" if not candidate.startswith("gathered_") else f"{candidate}_"
    return candidate


def _gather_statement(plan: GatherPlan, facts: ScriptFacts) -> cst.SimpleStatementLine:
    if len(plan.gathered) == 1:
        argument: cst.BaseExpression = plan.gathered[0]
        target: cst.BaseAssignTargetExpression = cst.Name(plan.names[0])
    else:
        argument = cst.Tuple([cst.Element(e) for e in plan.gathered])
        target = cst.Tuple([cst.Element(cst.Name(n)) for n in plan.names], lpar=[], rpar=[])
    call = accelerator_call(facts, "gather_for_metrics", argument)
    return cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(target)], value=call)])


def gather_statements(plan: GatherPlan, objects: set[str], facts: ScriptFacts) -> list[cst.SimpleStatementLine]:
    """One gather of the tensors, then one of each value that may be a list of objects."""
    if not objects:
        return [_gather_statement(plan, facts)]
    tensors = GatherPlan()
    alone: list[cst.SimpleStatementLine] = []
    for expression, name in zip(plan.gathered, plan.names):
        if name in objects:
            alone.append(_gather_statement(GatherPlan(gathered=[expression], names=[name]), facts))
        else:
            tensors.gathered.append(expression)
            tensors.names.append(name)
    return ([_gather_statement(tensors, facts)] if tensors.gathered else []) + alone


class _ExpressionReplacer(TargetedTransformer):
    """After the gather: gathered expressions read through their new names,
    ``x.view(<batch size>, ...)`` of gathered tensors becomes ``x.view(-1, ...)``, and
    ``range(<batch size>)`` becomes ``range(len(x))`` of a gathered tensor (the gathered batch
    holds every rank's rows: a loop over the loader's batch size would visit 1/N of them).
    A targeted transformer without origins: it walks everything but rebuilds only what changed,
    so that ``reanchor`` skips every statement it left as it was."""

    def __init__(self, plan: GatherPlan, batch_size_expr: str | None, builtin: BuiltinOf) -> None:
        super().__init__(None)
        #: What a name denotes where the loop stands (``range`` the builtin).
        self.builtin = builtin
        self.replacements = [
            (expr, name) for expr, name in zip(plan.gathered, plan.names) if not isinstance(expr, cst.Name)
        ]
        self.gathered_names = set(plan.names)
        self.batch_size_expr = batch_size_expr
        #: A gathered tensor whose rows are the gathered batch's (the first one gathered).
        self.rows = plan.names[0] if plan.names else None

    def leave_Attribute(self, original_node, updated_node):
        return self._replace(updated_node)

    def leave_Subscript(self, original_node, updated_node):
        return self._replace(updated_node)

    def _replace(self, node):
        for expr, name in self.replacements:
            if node.deep_equals(expr):
                return cst.Name(name)
        return node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if (
            self.batch_size_expr
            and self.rows is not None
            and self.builtin(func) == "range"
            and len(updated_node.args) == 1
            and dotted(updated_node.args[0].value) == self.batch_size_expr
        ):
            rows = cst.Call(func=cst.Name("len"), args=[cst.Arg(cst.Name(self.rows))])
            return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=rows)])
        if not (
            self.batch_size_expr
            and isinstance(func, cst.Attribute)
            and func.attr.value in RESHAPE_METHODS
            and dotted(func.value) in self.gathered_names
            and len(updated_node.args) > 1
            and dotted(updated_node.args[0].value) == self.batch_size_expr
        ):
            return updated_node
        first = updated_node.args[0].with_changes(value=cst.UnaryOperation(cst.Minus(), cst.Integer("1")))
        return updated_node.with_changes(args=[first, *updated_node.args[1:]])


def insert_after(
    statements: list[cst.BaseStatement],
    forward: cst.CSTNode,
    gather_lines: list[cst.SimpleStatementLine],
    plan: GatherPlan,
    rule: RuleTransformer,
) -> list[cst.BaseStatement]:
    """The loop body with the gather line after the forward and later reads rewritten (``rule``:
    the walk at the loop, which answers what its names are)."""
    facts = rule.facts
    replacer = _ExpressionReplacer(plan, facts.batch_size_expr, rule.builtin)
    state = {"inserted": False}

    def rewrite(block: list) -> list:
        result = []
        for statement in block:
            if state["inserted"]:
                # Carry the original positions over to what the replacer rebuilt, so that later
                # rules report (and walk) the statement where the user wrote it.
                rewritten = statement.visit(replacer)
                reanchor(statement, rewritten, facts.origins)
                result.append(rewritten)
            elif statement is forward:
                result.extend([statement, *gather_lines])
                state["inserted"] = True
            elif isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
                inner = rewrite(list(statement.body.body))
                result.append(statement.with_changes(body=statement.body.with_changes(body=inner)))
            else:
                result.append(statement)
        return result

    return rewrite(list(statements))
