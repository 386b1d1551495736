"""ACC117 oom-retry (``--oom-retry`` only): retry the training with a smaller batch size after an
out-of-memory error, with ``find_executable_batch_size``.

The training code — from the first line that builds a loader, model, optimizer or scheduler (or
reads the batch size) to the end of the function that calls ``prepare`` — moves into an inner
function decorated with ``@find_executable_batch_size(starting_batch_size=<the script's batch
size>)``. Every attempt frees what the last one held (``accelerator.free_memory()``), says which
batch size it uses (progress output would otherwise keep showing the first one), and rebuilds
loaders, model, optimizer and scheduler with the batch-size expression replaced by ``batch_size``
everywhere inside, ``view(args.batch_size, ...)`` included. Module-level scripts get their
training code wrapped the same way, with ``global`` for the names other code reads. Uses of the
batch-size expression outside the retried code (helper functions) still see the starting value
and are reported (ACC917), and so is a training bundle prepared where it is built (``exp =
Experiment()``, whose class builds the loaders with their batch size: nothing to shrink).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import TypeGuard, cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import (
    RETRIED_BATCH_SIZE,
    RETRIED_TRAINING_FUNCTION,
    RETRY_ANNOUNCEMENT,
    accelerator_name,
)
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import Findings
from accel_convert.codemods.engine.imports import add_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.positions import STATEMENT_TYPES, reanchor
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    Statement,
    argument_for,
    as_statement,
    as_statements,
    binds_locally,
    binds_name,
    body_statements,
    class_methods,
    dotted,
    expression_code,
    name_assigned,
    names_bound,
    parameter_names,
    positional_parameter_names,
    target_names,
)
from accel_convert.codemods.engine.torch_names import DATA_LOADERS
from accel_convert.codemods.engine.walk import variables_read, walk
from accel_convert.codemods.model.plan import creation_index, plan_of, prepared_by, prepares_here
from accel_convert.records import record

DECORATOR = "find_executable_batch_size"
INNER_NAME = RETRIED_TRAINING_FUNCTION
PARAMETER = RETRIED_BATCH_SIZE


class OomRetryCodemod(Rule):
    code = "ACC117"
    name = "oom-retry"
    fixes = {
        "ACC917": (
            "Read the batch size only inside the retried function (the one under ``@find_executable_batch_size``): take it from the function's ``batch_size`` parameter and build the loaders there, instead of reading ``args.batch_size`` outside it."
        ),
    }
    extra_codes = {
        "ACC917": "oom-retry-manual: out-of-memory retry not added, or a batch-size use it cannot reach (check by hand)",
    }
    examples = (
        Example(
            oom_retry=True,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--batch-size", type=int, default=64)
                    args = parser.parse_args()
                    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
                    loader = DataLoader(dataset, batch_size=args.batch_size)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator, find_executable_batch_size
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--batch-size", type=int, default=64)
                    args = parser.parse_args()
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))

                    @find_executable_batch_size(starting_batch_size=args.batch_size)
                    def inner_training_loop(batch_size):
                        accelerator.free_memory()
                        accelerator.print(f"Training with batch size {batch_size}")
                        loader = DataLoader(dataset, batch_size=batch_size)
                        model = nn.Linear(8, 1)
                        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()

                    inner_training_loop()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A helper's own parameter (``bs``) is not the batch size: what the training code passes
        # for it is (``args.bs``), and the helper stays where it is.
        Example(
            oom_retry=True,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def get_data(train_ds, bs):
                    return DataLoader(train_ds, batch_size=bs, shuffle=True)


                parser = argparse.ArgumentParser()
                parser.add_argument("--bs", type=int, default=64)
                args = parser.parse_args()
                train_ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
                train_dl = get_data(train_ds, args.bs)
                model = nn.Linear(8, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for xb, yb in train_dl:
                    loss = nn.functional.mse_loss(model(xb), yb)
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator, find_executable_batch_size
                from torch.utils.data import DataLoader, TensorDataset


                def get_data(train_ds, bs):
                    return DataLoader(train_ds, batch_size=bs, shuffle=True)


                parser = argparse.ArgumentParser()
                parser.add_argument("--bs", type=int, default=64)
                args = parser.parse_args()
                accelerator = Accelerator()
                accelerator.agree_random_state()
                train_ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))


                @find_executable_batch_size(starting_batch_size=args.bs)
                def inner_training_loop(batch_size):
                    accelerator.free_memory()
                    accelerator.print(f"Training with batch size {batch_size}")
                    train_dl = get_data(train_ds, batch_size)
                    model = nn.Linear(8, 1)
                    opt = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, opt, train_dl = accelerator.prepare(model, opt, train_dl)
                    for xb, yb in train_dl:
                        loss = nn.functional.mse_loss(model(xb), yb)
                        accelerator.backward(loss)
                        opt.step()
                        opt.zero_grad()


                inner_training_loop()
            """,
        ),
        Example(
            code="ACC917",
            oom_retry=True,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def show(output, args):
                    print(output.view(args.batch_size, -1)[0])


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--batch-size", type=int, default=64)
                    args = parser.parse_args()
                    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
                    loader = DataLoader(dataset, batch_size=args.batch_size, drop_last=True)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        output = model(data)
                        loss = nn.functional.mse_loss(output, target)
                        loss.backward()
                        optimizer.step()
                    show(output, args)


                if __name__ == "__main__":
                    main()
            """,
            message="args.batch_size used outside the retried code: it keeps the starting value",
        ),
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--batch-size", type=int, default=64)
                    args = parser.parse_args()
                    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
                    loader = DataLoader(dataset, batch_size=args.batch_size)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


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
                    parser.add_argument("--batch-size", type=int, default=64)
                    args = parser.parse_args()
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
                    loader = DataLoader(dataset, batch_size=args.batch_size)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--batch-size", type=int, default=64)
                    args = parser.parse_args()
                    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
                    loader = DataLoader(dataset, batch_size=args.batch_size, drop_last=True)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        output = model(data)
                        loss = nn.functional.mse_loss(output, target)
                        loss.backward()
                        optimizer.step()
                    print(output[0])


                if __name__ == "__main__":
                    main()
            """,
            code="ACC917",
            oom_retry=True,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return options.oom_retry and facts.uses_torch

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        pending = Findings(facts)
        if _already_retried(module, facts):
            return module, []
        region = _find_training_region(module, facts)
        if region is None and facts.home_kind == "library":
            # A module of a program (data, model, helper functions): the retry goes around the
            # training code where the entry script prepares it; nothing here to say.
            return module, []
        if region is None:
            pending.add(
                module.body[0] if module.body else module,
                "ACC917",
                "no accelerator.prepare(...) line at the top level of a function or the module: nothing to retry",
                False,
            )
            return module, pending.resolve(module)
        bundle = _bundle_prepared(region, facts)
        if bundle is not None:
            pending.add(
                bundle,
                "ACC917",
                "the loaders are built with their batch size inside this training bundle's class, "
                "which a retry cannot shrink: retry by hand",
                False,
            )
            return module, pending.resolve(module)
        batch_size = _batch_size_expression(module, region, facts)
        if batch_size is None:
            pending.add(
                region.function or region.statements[region.start],
                "ACC917",
                "no batch size found that the training code builds its loaders with",
                False,
            )
            return module, pending.resolve(module)
        moved = region.moved()
        if isinstance(batch_size, cst.Name) and batch_size.value != PARAMETER and binds_name(moved, batch_size.value):
            pending.add(
                region.statements[region.start],
                "ACC917",
                f"{batch_size.value} is assigned inside the training code: retry by hand",
                False,
            )
            return module, pending.resolve(module)
        region.kept = _independent_definitions(region, batch_size, facts)
        wrapped = _wrap(region, batch_size, module, facts)
        new_module = _replace_region(module, region, wrapped)
        new_module = _add_import(new_module, facts, options)
        pending.add(
            region.statements[region.start],
            OomRetryCodemod.code,
            f"training retried with a smaller batch size on out-of-memory (from {expression_code(batch_size)})",
            True,
        )
        for site, statement in [] if isinstance(batch_size, cst.Integer) else _uses_outside(module, region, batch_size):
            pending.add(
                site,
                "ACC917",
                f"{expression_code(batch_size)} used outside the retried code: it keeps the starting value",
                False,
                statement,
            )
        return new_module, pending.resolve(module)


# ---- where the training code is -----------------------------------------------------------


@record(eq=False, repr=False)
class _Region:
    """The training code the out-of-memory retry wraps: the body and statements around the prepare line."""

    #: The body holding the prepare line: a module-level function's or the module's own.
    function: cst.FunctionDef | None
    statements: list[cst.BaseStatement]
    start: int
    end: int
    prepare: int
    #: A module-level script's trailing ``if __name__ == "__main__":`` block: its body (the
    #: training loop) is retried too, and the block then only calls the retried function.
    main_guard: cst.If | None = None
    #: Module-level classes and functions inside the region that read nothing the training code
    #: builds: they stay at module level, above the retried function.
    kept: list[cst.BaseStatement] = field(default_factory=list)

    def moved(self) -> list[cst.BaseStatement]:
        """The statements that go into the retried function, in order."""
        # _find_training_region takes a guard only with an indented body.
        guarded = (
            as_statements(cast(cst.IndentedBlock, self.main_guard.body).body) if self.main_guard is not None else []
        )
        if guarded and not guarded[0].leading_lines:
            guarded[0] = guarded[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        kept = {id(s) for s in self.kept}
        return [s for s in self.statements[self.start : self.end] if id(s) not in kept] + guarded


def _independent_definitions(
    region: _Region, batch_size: cst.BaseExpression, facts: ScriptFacts
) -> list[cst.BaseStatement]:
    """Classes, functions and device lines of a module-level region that need nothing the
    training code assigns (``class VAE(nn.Module)``, ``def loss_function(...)``, ``device =
    accelerator.device``): moving them would only nest them deeper, and a device line moved would
    become a local of the retried function, which the unused-device rule (ACC125) removes where
    the conversion without the retry keeps the module's variable. Anything reading the batch size
    moves, so that it reads the retried one."""
    if region.function is not None:
        return []
    definitions: list[cst.BaseStatement] = [
        s for s in region.statements[region.start : region.end] if _stays_at_module_level(s, facts)
    ]
    kept = list(definitions)
    while True:
        kept_ids = {id(s) for s in kept}
        others = [s for s in region.moved() if id(s) not in kept_ids]
        assigned = names_bound(others)
        still = [
            d
            for d in kept
            if not (variables_read(d) & assigned) and not _contains_expression(d, batch_size, reads_only=True)
        ]
        if len(still) == len(kept):
            return kept
        kept = still


def _stays_at_module_level(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    """A definition, or a line giving a device variable a name or attribute path (``device =
    accelerator.device``: no call, so running it above the loaders changes nothing)."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return True
    assigned = name_assigned(statement)
    return assigned is not None and assigned[0] in facts.device_names and dotted(assigned[1]) is not None


def _find_training_region(module: cst.Module, facts: ScriptFacts) -> _Region | None:
    candidates: list[tuple[cst.FunctionDef | None, list[cst.BaseStatement]]] = [(None, list(module.body))]
    candidates += [
        (s, list(s.body.body))
        for s in module.body
        if isinstance(s, cst.FunctionDef) and isinstance(s.body, cst.IndentedBlock)
    ]
    for function, statements in candidates:
        prepare = next((i for i, s in enumerate(statements) if prepares_here(s, facts)), None)
        if prepare is None:
            continue
        scope = () if function is None else (function.name.value,)
        created = creation_index(statements, facts, scope)
        created = -1 if created is None else created
        if created > prepare:
            return None
        start = next(
            (i for i in range(created + 1, prepare + 1) if _builds_training_object(statements[i], facts)), prepare
        )
        end, guard = len(statements), None
        if function is not None:
            start = _with_helpers_reading_it(statements, created + 1, start, end)
        last = statements[-1]
        if function is None and _is_main_guard(last) and isinstance(last.body, cst.IndentedBlock):
            end, guard = end - 1, last
        return _Region(function, statements, start, end, prepare, guard)
    return None


def _with_helpers_reading_it(statements: Sequence[cst.BaseStatement], first: int, start: int, end: int) -> int:
    """The start of a function's retried code, moved up to take in the helpers defined above it
    that read what it binds (``def noise(n): return Tensor(...)`` above the models, ``Tensor``
    bound below them): left outside, their closure would read a name only the retried
    function binds."""
    while True:
        bound = names_bound(statements[start:end])
        readers = [
            i
            for i in range(first, start)
            if isinstance(statements[i], (cst.FunctionDef, cst.ClassDef)) and variables_read(statements[i]) & bound
        ]
        if not readers:
            return start
        start = min(readers)


def _bundle_prepared(region: _Region, facts: ScriptFacts) -> cst.BaseStatement | None:
    """The statement binding the training bundle (``exp = Experiment()``) whose attributes the
    region's prepare line takes (the plan's ``bundled``): its class builds the loaders, so the
    retry has no batch size to shrink. None for any other prepare."""
    bundled = plan_of(facts).bundled
    prepared = set(prepared_by(region.statements[region.prepare], facts) or ())
    instances = {bundled[name] for name in prepared if name in bundled}
    return next(
        (
            statement
            for statement in region.statements[: region.prepare]
            if any(binds_name([statement], instance) for instance in instances)
        ),
        None,
    )


def _builds_training_object(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    names = facts.models | facts.optimizers | facts.schedulers | facts.loaders
    # A definition builds nothing when it runs (``def train(loader, model)`` only names them).
    definition = isinstance(statement, (cst.FunctionDef, cst.ClassDef))
    if not definition and any(binds_name([statement], name) for name in names if "." not in name):
        return True
    batch = cst.parse_expression(facts.batch_size_expr) if facts.batch_size_expr else None
    return batch is not None and dotted(batch) is not None and _contains_expression(statement, batch, reads_only=True)


def _is_main_guard(statement: cst.BaseStatement) -> TypeGuard[cst.If]:
    if not isinstance(statement, cst.If) or not isinstance(statement.test, cst.Comparison):
        return False
    return dotted(statement.test.left) == "__name__"


def _batch_size_expression(module: cst.Module, region: _Region, facts: ScriptFacts) -> cst.BaseExpression | None:
    """The expression the retried code builds its loaders with: the analysis's batch size when
    the training code reads it, else the ``batch_size=`` of a DataLoader built there, else what
    the training code passes for it to a loader-building helper (``build_loaders(args.bs)``)."""
    moved = region.moved()
    finder = _LoaderBatchSize(facts)
    for statement in moved:
        walk(statement, finder)
    candidates = [cst.parse_expression(facts.batch_size_expr)] if facts.batch_size_expr else []
    candidates += [finder.found] if finder.found is not None else []
    for candidate in candidates:
        if isinstance(candidate, cst.Integer):
            return candidate
        if dotted(candidate) is None:
            continue
        if any(_contains_expression(statement, candidate, reads_only=True) for statement in moved):
            return candidate
        if isinstance(candidate, cst.Name):
            passed = _argument_for_parameter(module, moved, candidate.value)
            if passed is not None:
                return passed
    return None


def _argument_for_parameter(
    module: cst.Module, moved: Sequence[cst.CSTNode], parameter: str
) -> cst.BaseExpression | None:
    """What the moved code passes for ``parameter`` of a module-level function it calls."""
    functions = {s.name.value: positional_parameter_names(s) for s in module.body if isinstance(s, cst.FunctionDef)}
    finder = _CallArguments(functions, parameter)
    for statement in moved:
        walk(statement, finder)
    return finder.found


class _CallArguments(cst.CSTVisitor):
    """What the code moved into the retried function passes for one parameter. Local: it reads
    only that code, as earlier rules left it."""

    def __init__(self, functions: dict[str, tuple[str, ...]], parameter: str) -> None:
        self.functions = functions
        self.parameter = parameter
        self.found: cst.BaseExpression | None = None

    def visit_Call(self, node: cst.Call) -> None:
        params = self.functions.get(dotted(node.func) or "")
        if self.found is not None or params is None or self.parameter not in params:
            return
        argument = argument_for(node, params.index(self.parameter), self.parameter)
        if argument is not None and dotted(argument.value):
            self.found = argument.value


class _LoaderBatchSize(cst.CSTVisitor):
    """The ``batch_size=`` of the first DataLoader (a name, or a literal). Local: it reads only
    the code moved into the retried function."""

    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.found: cst.BaseExpression | None = None

    def visit_Call(self, node: cst.Call) -> None:
        if self.found is not None or self.facts.callee_name(node.func) not in DATA_LOADERS:
            return
        for arg in node.args:
            if arg.keyword and arg.keyword.value == "batch_size":
                if dotted(arg.value) or isinstance(arg.value, cst.Integer):
                    self.found = arg.value


# ---- building the retried function -----------------------------------------------------------


def _wrap(
    region: _Region, batch_size: cst.BaseExpression, module: cst.Module, facts: ScriptFacts
) -> list[cst.BaseStatement]:
    # The replacer rewrites expressions only: each statement comes back a statement.
    moved = [cast(cst.BaseStatement, s.visit(_BatchSizeReplacer(batch_size))) for s in region.moved()]
    acc = accelerator_name(facts)
    preamble: list[cst.BaseStatement] = []
    outer = _outer_names(region, module)
    if outer:
        keyword = cst.Nonlocal if region.function is not None else cst.Global
        preamble.append(cst.SimpleStatementLine([keyword([cst.NameItem(cst.Name(n)) for n in sorted(outer)])]))
    preamble += [
        cst.parse_statement(f"{acc}.free_memory()"),
        cst.parse_statement(f'{acc}.print(f"{RETRY_ANNOUNCEMENT.format("{" + PARAMETER + "}")}")'),
    ]
    flushed = [_flush_blank_lines(s) for s in moved]
    first_lines = _without_leading_blanks(flushed[0].leading_lines)
    if isinstance(flushed[0], (cst.FunctionDef, cst.ClassDef)):
        # A definition after the preamble's calls keeps a blank line above it, as formatters want.
        first_lines = [cst.EmptyLine(indent=False), *first_lines]
    flushed[0] = flushed[0].with_changes(leading_lines=first_lines)
    # The replacer and the blank-line flush rebuild every statement they touch: carry the
    # original positions over, so that the rules after this one report (and walk) the moved
    # code where the user wrote it.
    for original, rewritten in zip(region.moved(), flushed):
        reanchor(original, rewritten, facts.origins)
    inner = cst.FunctionDef(
        name=cst.Name(INNER_NAME),
        params=cst.Parameters(params=[cst.Param(cst.Name(PARAMETER))]),
        body=cst.IndentedBlock(body=[*preamble, *flushed]),
        decorators=[
            cst.Decorator(cst.parse_expression(f"{DECORATOR}(starting_batch_size={expression_code(batch_size)})"))
        ],
        leading_lines=_blank_lines(1 if region.function is not None else 2),
    )
    call = f"return {INNER_NAME}()" if region.function is not None and _returns(flushed) else f"{INNER_NAME}()"
    call_line = cst.parse_statement(call)
    if region.main_guard is not None:
        guard = region.main_guard
        return [inner, guard.with_changes(body=guard.body.with_changes(body=[call_line]))]
    blank = _blank_lines(1 if region.function is not None else 2)
    return [inner, call_line.with_changes(leading_lines=blank)]


def _blank_lines(count: int) -> list[cst.EmptyLine]:
    return [cst.EmptyLine(indent=False) for _ in range(count)]


def _flush_blank_lines(statement: cst.BaseStatement) -> Statement:
    """Blank lines above a statement that moves one level in stay empty (no trailing spaces),
    and at most one in a row, as inside any function body."""
    lines: list[cst.EmptyLine] = []
    for line in as_statement(statement).leading_lines:
        if line.comment is not None:
            lines.append(line)
        elif not lines or lines[-1].comment is not None:
            lines.append(line.with_changes(indent=False))
    return as_statement(statement).with_changes(leading_lines=lines)


def _without_leading_blanks(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    kept = list(lines)
    while kept and kept[0].comment is None:
        kept.pop(0)
    return kept


class _BatchSizeReplacer(cst.CSTTransformer):
    """Every read of the batch-size expression → ``batch_size``. A literal (``64``) is only
    replaced where it is a batch size: ``batch_size=64`` and ``{"batch_size": 64}``."""

    def __init__(self, batch_size: cst.BaseExpression) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.literal = isinstance(batch_size, cst.Integer)

    def leave_Name(self, original_node, updated_node):
        return updated_node if self.literal else self._replace(updated_node)

    def leave_Attribute(self, original_node, updated_node):
        return updated_node if self.literal else self._replace(updated_node)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if self.literal and updated_node.keyword is not None and updated_node.keyword.value == "batch_size":
            return updated_node.with_changes(value=self._replace(updated_node.value))
        return updated_node

    def leave_DictElement(self, original_node: cst.DictElement, updated_node: cst.DictElement) -> cst.DictElement:
        key = updated_node.key
        if self.literal and isinstance(key, cst.SimpleString) and key.evaluated_value == "batch_size":
            return updated_node.with_changes(value=self._replace(updated_node.value))
        return updated_node

    def _replace(self, node):
        if node.deep_equals(self.batch_size):
            return cst.Name(PARAMETER, lpar=node.lpar, rpar=node.rpar)
        return node


def _outer_names(region: _Region, module: cst.Module) -> set[str]:
    """Names the moved code assigns that code outside it binds or reads: they must keep living in
    the enclosing function (``nonlocal``) or the module (``global``)."""
    assigned = names_bound(region.moved())
    before = region.statements[: region.start]
    if region.function is not None:
        outside = set(parameter_names(region.function))
        outside |= names_bound(before)
    else:
        after = [] if region.main_guard is not None else region.statements[region.end :]
        # Definitions kept at module level (``def reparameterization(...)`` reading ``Tensor``)
        # read the moved code's names as globals too; a function's own parameters and locals
        # (``def forward(self, x)`` beside a retried ``for x, y in loader``) are not the module's.
        outside = names_bound(before) | _module_names_read([*before, *region.kept, *after])
    return assigned & outside


def _module_names_read(statements: Sequence[cst.CSTNode]) -> set[str]:
    """The names module-level statements read from the module's namespace: the names they read,
    less those a function, lambda or comprehension among them binds for itself."""
    reader = _ModuleNamesRead(frozenset())
    for statement in statements:
        walk(statement, reader)
    return reader.names


class _ModuleNamesRead(cst.CSTVisitor):
    """Reads of names not bound by the scope being read (``local``). Local: it reads only the
    module-level statements around the retried code."""

    def __init__(self, local: frozenset[str]) -> None:
        self.local = local
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        if node.value not in self.local:
            self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        # Its default and annotation are read where the function is defined; its name is not a read.
        for part in (node.default, node.annotation):
            if part is not None:
                walk(part, self)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for part in [*node.decorators, node.params, *([node.returns] if node.returns else [])]:
            walk(part, self)
        body = body_statements(node)
        own = set(parameter_names(node)) | _star_parameters(node.params) | names_bound(body)
        self._read_in_scope(body, own - _declared_global(body))
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        walk(node.params, self)
        self._read_in_scope([node.body], set(_lambda_parameters(node.params)))
        return False

    def visit_ListComp(self, node: cst.ListComp) -> bool:
        return self._comprehension(node)

    def visit_SetComp(self, node: cst.SetComp) -> bool:
        return self._comprehension(node)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> bool:
        return self._comprehension(node)

    def visit_DictComp(self, node: cst.DictComp) -> bool:
        return self._comprehension(node)

    def _comprehension(self, node: cst.BaseComp | cst.DictComp) -> bool:
        targets: set[str] = set()
        loop: cst.CompFor | None = node.for_in
        while loop is not None:
            targets |= set(target_names(loop.target, plain=True))
            loop = loop.inner_for_in
        self._read_in_scope(node.children, targets)
        return False

    def _read_in_scope(self, nodes: Sequence[cst.CSTNode], own: set[str]) -> None:
        inner = _ModuleNamesRead(self.local | own)
        for node in nodes:
            walk(node, inner)
        self.names |= inner.names


def _star_parameters(params: cst.Parameters) -> set[str]:
    return {p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}


def _lambda_parameters(params: cst.Parameters) -> list[str]:
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    return [p.name.value for p in every] + sorted(_star_parameters(params))


def _declared_global(body: Sequence[cst.CSTNode]) -> set[str]:
    return {
        item.name.value
        for statement in body
        if isinstance(statement, cst.SimpleStatementLine)
        for small in statement.body
        if isinstance(small, cst.Global)
        for item in small.names
    }


def _returns(statements: Sequence[cst.CSTNode]) -> bool:
    finder = _ReturnFinder()
    for statement in statements:
        walk(statement, finder)
    return finder.found


class _ReturnFinder(cst.CSTVisitor):
    """Whether statements return (not counting nested defs). Local: it reads only the code to
    be moved into the retried function."""

    def __init__(self) -> None:
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Return(self, node: cst.Return) -> None:
        self.found = True


def _replace_region(module: cst.Module, region: _Region, wrapped: list[cst.BaseStatement]) -> cst.Module:
    statements = region.statements
    rest = [] if region.main_guard is not None else statements[region.end :]
    new_statements = [
        *statements[: region.start],
        *_spaced_after(statements[: region.start], region.kept),
        *wrapped,
        *rest,
    ]
    if region.function is None:
        return module.with_changes(body=new_statements)
    new_function = region.function.with_changes(body=region.function.body.with_changes(body=new_statements))
    return module.with_changes(body=[new_function if s is region.function else s for s in module.body])


def _spaced_after(above: Sequence[cst.BaseStatement], kept: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements kept at module level, each line that now follows a definition two blank
    lines below it (a device line that followed a loader in the original, as formatters want)."""
    spaced: list[cst.BaseStatement] = []
    previous = above[-1] if above else None
    for statement in kept:
        lines = as_statement(statement).leading_lines
        if isinstance(previous, (cst.FunctionDef, cst.ClassDef)) and not any(line.comment is None for line in lines):
            statement = as_statement(statement).with_changes(leading_lines=[*_blank_lines(2), *lines])
        spaced.append(statement)
        previous = statement
    return spaced


def _add_import(module: cst.Module, facts: ScriptFacts, options: Options) -> cst.Module:
    """``find_executable_batch_size`` imported beside ``Accelerator`` (where isort would put it)."""
    line = cast(cst.SimpleStatementLine, cst.parse_statement(f"from {options.accelerate_module} import {DECORATOR}"))
    return add_import(module, line, options.import_style)


# ---- reports and small helpers ------------------------------------------------------------------


def _uses_outside(
    module: cst.Module, region: _Region, batch_size: cst.BaseExpression
) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """Reads of the batch-size expression in code that is not moved into the retried function
    (other functions of the module), which keep seeing the starting value; each with the
    statement holding it. A function with a variable of the same name of its own (a loader
    factory's ``batch_size`` parameter) reads that variable, not the retried one."""
    moved_ids = {id(s) for s in region.moved()}
    name = batch_size.value if isinstance(batch_size, cst.Name) else None
    finder = _ExpressionSites(batch_size)
    for statement in module.body:
        if statement is region.function or statement is region.main_guard:
            continue
        if id(statement) in moved_ids or not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        functions = [statement] if isinstance(statement, cst.FunctionDef) else class_methods(statement)
        for function in functions:
            if name is None or not binds_locally(function, name):
                walk(function, finder)
    return finder.sites


class _ExpressionSites(cst.CSTVisitor):
    """Where an expression (the batch size) is read, with the statement holding it. Local: the
    expression is only known once this rule has chosen it, and it reads the tree as earlier
    rules left it (only with ``--oom-retry``, on the functions the retried code does not hold)."""

    def __init__(self, expression: cst.BaseExpression, *, reads_only: bool = False) -> None:
        self.expression = expression
        self.sites: list[tuple[cst.CSTNode, cst.CSTNode]] = []
        self._statement: cst.CSTNode | None = None
        #: Only where the running code reads the expression's own variable: not where a
        #: statement assigns it (``batch_size = 16`` gives the starting value), nor inside a
        #: function or lambda whose parameter has its name (``def get_data(ds, bs)``: another
        #: variable, given its value by the caller).
        self.reads_only = reads_only
        self._root = (dotted(expression) or "").split(".")[0]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in STATEMENT_TYPES:
            self._statement = node
        if self.reads_only and self._shadows_or_assigns(node):
            return False
        if isinstance(node, cst.BaseExpression) and node.deep_equals(self.expression):
            self.sites.append((node, self._statement or node))
            return False
        # Names that are not reads of a variable: ``args.batch_size``'s attribute, a keyword.
        if isinstance(node, cst.Attribute):
            walk(node.value, self)
            return False
        if isinstance(node, cst.Arg):
            walk(node.value, self)
            return False
        return True

    def _shadows_or_assigns(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.FunctionDef) and (
            self._root in parameter_names(node) or binds_name(body_statements(node), self._root)
        ):
            return True  # the function's own variable (a parameter, or assigned in its body)
        if isinstance(node, cst.Lambda) and self._root in {p.name.value for p in node.params.params}:
            return True
        if isinstance(node, (cst.Assign, cst.AnnAssign)) and node.value is not None:
            walk(node.value, self)
            return True
        return False


def _contains_expression(node: cst.CSTNode, expression: cst.BaseExpression, *, reads_only: bool = False) -> bool:
    finder = _ExpressionSites(expression, reads_only=reads_only)
    walk(node, finder)
    return bool(finder.sites)


def _already_retried(module: cst.Module, facts: ScriptFacts) -> bool:
    """The script imports the decorator already (converted before, or written by hand)."""
    if any(name.rsplit(".", 1)[-1] == DECORATOR for name in facts.imports.values()):
        return True
    return any(
        isinstance(small, cst.ImportFrom)
        and not isinstance(small.names, cst.ImportStar)
        and any(dotted(alias.name) == DECORATOR for alias in small.names)
        for statement in module.body
        if isinstance(statement, cst.SimpleStatementLine)
        for small in statement.body
    )
