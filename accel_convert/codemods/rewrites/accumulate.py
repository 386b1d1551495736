"""ACC112 accumulate: manual gradient accumulation → ``Accelerator(gradient_accumulation_steps=k)``
plus ``with accelerator.accumulate(model):``.

The hand-written pattern divides the loss by ``k`` and steps every ``k`` batches. Under DDP that
still all-reduces gradients on every backward; ``accelerator.accumulate`` skips the reduction on
the batches that do not step, divides the loss itself, steps the optimizer (and scheduler, and
zero_grad) only on sync steps, and always syncs on the last batch of the loader. The loop body goes
under the context; the ``% k`` test goes when it only guarded optimizer/scheduler calls, and
becomes ``if accelerator.sync_gradients:`` when it also guards other work (logging, counters).
Recognised only when the division and the test use the same ``k`` and ``k`` exists where the
accelerator is created; anything else that looks like accumulation is reported (ACC912).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call, accelerator_name, is_accelerator_method
from accel_convert.codemods.engine.accelerator_creation import (
    available_spelling,
    set_accelerator_argument,
)
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import Findings
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import as_statements, dotted
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.plan import find_creation

#: Calls that only make sense on a sync step and that the prepared objects skip by themselves.
STEP_METHODS = frozenset({"step", "zero_grad"})


class AccumulateCodemod(Rule):
    code = "ACC112"
    name = "accumulate"
    fixes = {
        "ACC912": (
            "Write the accumulation with Accelerate: construct ``Accelerator(gradient_accumulation_steps=k)``, put the step inside ``with accelerator.accumulate(model):`` and call ``accelerator.backward(loss)``, ``optimizer.step()`` and ``optimizer.zero_grad()`` on every batch; remove the ``if (i + 1) % k == 0`` test and the ``loss / k`` division (``accumulate`` does both)."
        ),
    }
    extra_codes = {
        "ACC912": "accumulate-manual: gradient accumulation the converter could not recognise safely (convert by hand)",
    }
    examples = (
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--accum-steps", type=int, default=4)
                    args = parser.parse_args()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for i, (data, target) in enumerate(loader):
                        loss = nn.functional.mse_loss(model(data), target) / args.accum_steps
                        loss.backward()
                        if (i + 1) % args.accum_steps == 0:
                            optimizer.step()
                            optimizer.zero_grad()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--accum-steps", type=int, default=4)
                    args = parser.parse_args()
                    accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps)
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for i, (data, target) in enumerate(loader):
                        with accelerator.accumulate(model):
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                            optimizer.zero_grad()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code="ACC912",
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--accum-steps", type=int, default=4)
                    args = parser.parse_args()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for i, (data, target) in enumerate(loader):
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        if (i + 1) % args.accum_steps == 0:
                            optimizer.step()
                            optimizer.zero_grad()


                if __name__ == "__main__":
                    main()
            """,
            message="steps every k batches but the loss division by k was not found: convert by hand",
        ),
        # A loss divided by a constant and a step-modulo test that guards only a print, with the
        # optimizer stepped every batch: not accumulation, neither rewritten nor reported (ACC912).
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    log_every = 4
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target) / 2
                        loss.backward()
                        optimizer.step()
                        if step % log_every == 0:
                            print(f"step {step}: loss {loss.item():.4f}")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    log_every = 4
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target) / 2
                        accelerator.backward(loss)
                        optimizer.step()
                        if step % log_every == 0:
                            accelerator.print(f"step {step}: loss {loss.item():.4f}")


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--accum-steps", type=int, default=4)
                    args = parser.parse_args()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for i, (data, target) in enumerate(loader):
                        loss = nn.functional.mse_loss(model(data), target) / args.accum_steps
                        loss.backward()
                        if (i + 1) % args.accum_steps == 0:
                            optimizer.step()
                            optimizer.zero_grad()


                if __name__ == "__main__":
                    main()
            """,
            code="ACC912",
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return "manual_accumulation" in facts.existing_features

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        pending = Findings(facts)
        creation = find_creation(module, facts)
        # The loops to rewrite step the optimizer under a modulo guard: they hold a ``.step``.
        rewriter = _AccumulationRewriter(facts, pending, facts.lines_mentioning({"step"}))
        new_module = module.visit(rewriter)
        if not rewriter.steps:
            return module, pending.resolve(module)
        k = rewriter.steps[0]
        # ``accum = args.accum_steps`` after the creation: the accelerator reads ``args.accum_steps``.
        spelled = available_spelling(k, creation) if creation is not None else None
        if spelled is None or not all(k.deep_equals(s) for s in rewriter.steps):
            pending.drop(AccumulateCodemod.code)
            for loop in rewriter.loops:
                pending.add(loop, "ACC912", "accumulation steps not available where the Accelerator is created", False)
            return module, pending.resolve(module)
        new_module = set_accelerator_argument(new_module, facts, "gradient_accumulation_steps", spelled)
        return new_module, pending.resolve(module)


class _AccumulationRewriter(RuleTransformer):
    def __init__(self, facts: ScriptFacts, pending: Findings, lines: set[int]) -> None:
        super().__init__(facts, lines)
        self.findings = pending
        self.steps: list[cst.BaseExpression] = []
        self.loops: list[cst.CSTNode] = []

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.BaseStatement:
        body = updated_node.body
        if not isinstance(body, cst.IndentedBlock) or _already_accumulating(body.body, self.facts):
            return updated_node
        guard = _step_guard(body.body, self.facts)
        if guard is None:
            return updated_node
        if_node, k = guard
        new_statements = _without_division(body.body, k)
        if new_statements is None:
            self.findings.add(
                original_node,
                "ACC912",
                "steps every k batches but the loss division by k was not found: convert by hand",
                False,
            )
            return updated_node
        new_statements = _replace_guard(new_statements, if_node, self.facts)
        models = _models_called(body, self.facts)
        if not models:
            return updated_node
        context = cst.With(
            items=[cst.WithItem(accelerator_call(self.facts, "accumulate", *[cst.Name(m) for m in models]))],
            body=cst.IndentedBlock(body=new_statements),
        )
        self.steps.append(k)
        self.loops.append(original_node)
        self.findings.add(original_node, AccumulateCodemod.code, "manual accumulation → accelerator.accumulate", True)
        return updated_node.with_changes(body=body.with_changes(body=[context]))


def _already_accumulating(statements: Sequence[cst.BaseStatement], facts: ScriptFacts) -> bool:
    return any(
        isinstance(s, cst.With) and any(is_accelerator_method(i.item, facts, "accumulate") for i in s.items)
        for s in statements
    )


def _step_guard(statements, facts: ScriptFacts) -> tuple[cst.If, cst.BaseExpression] | None:
    """The ``if (i + 1) % k == 0:`` (optionally ``or`` end-of-loader) that guards ``optimizer.step()``."""
    for statement in statements:
        if isinstance(statement, cst.If) and statement.orelse is None:
            k = _modulo_divisor(statement.test)
            if k is not None and _calls_step(statement.body, facts):
                return statement, k
    return None


def _modulo_divisor(test: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _modulo_divisor(test.left) or _modulo_divisor(test.right)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comparison = test.comparisons[0]
    if not isinstance(comparison.operator, cst.Equal):
        return None
    zero, modulo = comparison.comparator, test.left
    if not (isinstance(zero, cst.Integer) and zero.value == "0"):
        return None
    if isinstance(modulo, cst.BinaryOperation) and isinstance(modulo.operator, cst.Modulo):
        return modulo.right.with_changes(lpar=[], rpar=[])
    return None


def _calls_step(block: cst.BaseSuite, facts: ScriptFacts) -> bool:
    return any(_step_call(small, facts) and _call_method(small) == "step" for small in _small_statements(block))


def _small_statements(block: cst.BaseSuite) -> list[cst.CSTNode]:
    lines = block.body if isinstance(block, cst.IndentedBlock) else [block]
    found: list[cst.CSTNode] = []
    for line in lines:
        if isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            found.extend(line.body)
        else:
            found.append(line)  # a compound statement: not a plain step call
    return found


def _call_method(statement: cst.CSTNode) -> str | None:
    if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
        func = statement.value.func
        if isinstance(func, cst.Attribute):
            return func.attr.value
    return None


def _step_call(statement: cst.CSTNode, facts: ScriptFacts) -> bool:
    """``optimizer.step()`` / ``scheduler.step()`` / ``optimizer.zero_grad()`` / ``model.zero_grad()``."""
    if _call_method(statement) not in STEP_METHODS:
        return False
    call = cast(cst.Call, cast(cst.Expr, statement).value)  # _call_method found ``owner.method()`` there
    owner = dotted(cast(cst.Attribute, call.func).value)
    return owner in facts.optimizers | facts.schedulers | facts.models


def _without_division(statements, k: cst.BaseExpression) -> list | None:
    remover = _DivisionRemover(k)
    result = [s.visit(remover) for s in statements]
    result = [s for s in result if not isinstance(s, cst.RemovalSentinel)]
    return result if remover.removed else None


class _DivisionRemover(cst.CSTTransformer):
    """``loss = loss / k`` and ``loss /= k`` go; ``x / k`` inside a loss expression becomes ``x``."""

    def __init__(self, k: cst.BaseExpression) -> None:
        super().__init__()
        self.k = k
        self.removed = False

    def _is_k(self, node: cst.BaseExpression) -> bool:
        return node.with_changes(lpar=[], rpar=[]).deep_equals(self.k)

    def leave_SimpleStatementLine(self, original_node, updated_node):
        kept = []
        for small in updated_node.body:
            if (
                isinstance(small, cst.AugAssign)
                and isinstance(small.operator, cst.DivideAssign)
                and self._is_k(small.value)
            ):
                self.removed = True
                continue
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Name):
                if small.value.deep_equals(small.targets[0].target):
                    continue  # ``loss = loss`` left by the division removal below
            kept.append(small)
        if not kept:
            return cst.RemoveFromParent()
        return updated_node.with_changes(body=kept)

    def leave_BinaryOperation(self, original_node, updated_node):
        if isinstance(updated_node.operator, cst.Divide) and self._is_k(updated_node.right):
            self.removed = True
            left = updated_node.left
            return (
                left.with_changes(lpar=updated_node.lpar or [], rpar=updated_node.rpar or [])
                if updated_node.lpar
                else left
            )
        return updated_node


def _replace_guard(statements: list, guard: cst.If, facts: ScriptFacts) -> list:
    """Unwrap the step guard when it only holds step/zero_grad calls, else test sync_gradients."""
    result = []
    for statement in statements:
        if not (isinstance(statement, cst.If) and statement.orelse is None and _modulo_divisor(statement.test)):
            result.append(statement)
            continue
        smalls = _small_statements(statement.body)
        if all(_step_call(s, facts) for s in smalls) and isinstance(statement.body, cst.IndentedBlock):
            inner = as_statements(statement.body.body)
            inner[0] = inner[0].with_changes(leading_lines=[*statement.leading_lines, *inner[0].leading_lines])
            result.extend(inner)
        else:
            sync = cst.Attribute(value=cst.Name(accelerator_name(facts)), attr=cst.Name("sync_gradients"))
            result.append(statement.with_changes(test=sync))
    return result


def _models_called(node: cst.CSTNode, facts: ScriptFacts) -> list[str]:
    finder = _ModelCalls(facts)
    walk(node, finder)
    return finder.models


class _ModelCalls(cst.CSTVisitor):
    """The models called in one statement. Local: it reads the training loop being rewritten."""

    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.models: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        name = dotted(node.func)
        if name is not None and name in self.facts.models and name not in self.models:
            self.models.append(name)
