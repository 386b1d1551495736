"""ACC122 loader-length-after-prepare: a step count read from ``len(loader)`` before the loader is prepared is computed again after it.

``total_steps = args.epochs * len(train_loader)`` written before ``accelerator.prepare`` counts
the batches of the whole data set, while each process then runs ``1/N`` of them: a learning rate
set by hand from it (``get_lr(step)`` decaying over ``total_steps``, ``g["lr"] = ...``) would end
training halfway down its decay on two processes. Accelerate's own examples compute such counts
again after ``prepare`` ("the size of the training dataloader may have changed"), so that a step
counter counting the process's own steps reaches the total at the end of training, as on one
process. The statement is repeated right after the ``prepare``; what ran before it (a print of
the total) keeps the one-process value.

Only where no learning-rate scheduler is built: a prepared scheduler steps once per process at
each call, which already matches a total counted before ``prepare``, and repeating the count would
make the schedule run twice as fast. Only plain arithmetic on ``len(loader)`` of a loader of the
``prepare`` call (``len``, ``int``, ``math.ceil``, ``min``, ``max``, ``round``), assigned to a
name the same block reads later (or a function reads at call time), is repeated.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import bound_by, dotted, nodes_in
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of
from accel_convert.codemods.engine.walk import variables_read
from accel_convert.codemods.model.loaders import counts_loader_batches
from accel_convert.codemods.model.plan import prepared_by


def _prepared_loaders(statement: cst.BaseStatement, facts: ScriptFacts) -> set[str]:
    """The training loaders an ``a, b = accelerator.prepare(a, b)`` line prepares (empty for any other line)."""
    # Training loaders only: an evaluation's batch count divides gathered sums, which the metrics
    # rule reports as a mean over batches, and is left as it is.
    return set(prepared_by(statement, facts) or ()) & set(facts.train_loaders)


def _count_assigned(
    statement: cst.BaseStatement, lengths: set[str], counts: set[str], names: RuleTransformer
) -> str | None:
    """The name ``statement`` assigns when it is ``name = <arithmetic>`` reading ``len(<loader>)``
    of one of ``lengths`` or a count already found (``counts``); None otherwise. ``names``: the
    walk, which answers what a called name is where ``statement`` stands."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    assign = statement.body[0]
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
        return None
    target = assign.targets[0].target
    if not isinstance(target, cst.Name):
        return None
    if counts_loader_batches(assign.value, lengths, counts, names.builtin, names.qualified_name):
        return target.value
    return None


def _read_later(name: str, statements: Sequence[cst.BaseStatement], index: int) -> bool:
    """Whether the block reads ``name`` after ``statements[index]`` (the ``prepare``), or a function
    or lambda defined anywhere in it does (it reads the value when called, after the ``prepare``)."""
    if any(name in variables_read(statement) for statement in statements[index + 1 :]):
        return True
    return any(
        name in variables_read(node)
        for statement in statements[:index]
        for node in nodes_in(statement)
        if isinstance(node, (cst.FunctionDef, cst.Lambda))
    )


class _RecountAfterPrepare(RuleTransformer):
    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = self._recount(list(original_node.body), list(updated_node.body))
        return updated_node.with_changes(body=body) if body is not None else updated_node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = self._recount(list(original_node.body), list(updated_node.body))
        return updated_node.with_changes(body=body) if body is not None else updated_node

    def _recount(
        self, originals: list[cst.BaseStatement], statements: list[cst.BaseStatement]
    ) -> list[cst.BaseStatement] | None:
        if len(originals) != len(statements):
            return None
        for index, statement in enumerate(statements):
            loaders = _prepared_loaders(statement, self.facts)
            if not loaders:
                continue
            counts: dict[str, int] = {}
            for before in range(index):
                name = _count_assigned(statements[before], loaders, set(counts), self)
                if name is not None:
                    counts[name] = before
                    continue
                # A count or a loader rebound by another statement: what was counted is no
                # longer what the prepare receives (counts may read one another: drop them all).
                bound = {n for node in nodes_in(statements[before]) for n in bound_by(node)}
                if bound & (set(counts) | loaders):
                    counts.clear()
            # A count the block assigns again after the prepare (this rule's own copy, once
            # converted) is left alone.
            later = {n for after in statements[index + 1 :] for node in nodes_in(after) for n in bound_by(node)}
            # Kept: counts read after the prepare, and the counts those are computed from.
            kept: list[int] = []
            needed: set[str] = set()
            for name, position in reversed(counts.items()):
                if name not in later and (name in needed or _read_later(name, statements, index)):
                    kept.append(position)
                    needed |= variables_read(statements[position])
            if not kept:
                return None
            repeated: list[cst.BaseStatement] = []
            for position in sorted(kept):
                original = originals[position]
                self.report(
                    original,
                    LoaderLength.code,
                    f"{expression_of(original)} counted again after the prepare: each process runs its own "
                    "share of the loader's batches",
                )
                copy = statements[position]
                assert isinstance(copy, cst.SimpleStatementLine)
                repeated.append(copy.with_changes(leading_lines=()))
            comment = cst.EmptyLine(comment=cst.Comment("# counted again: prepare gave each process its share"))
            repeated[0] = repeated[0].with_changes(leading_lines=[comment])
            return [*statements[: index + 1], *repeated, *statements[index + 1 :]]
        return None


def expression_of(statement: cst.BaseStatement) -> str:
    """The name a repeated line assigns, for the report."""
    assert isinstance(statement, cst.SimpleStatementLine)
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign)
    return dotted(assign.targets[0].target) or "a count"


class LoaderLength(Rule):
    code = "ACC122"
    name = "loader-length-after-prepare"
    examples = (
        Example(
            before="""
                import math

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    total_steps = 2 * len(loader)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    step = 0
                    for epoch in range(2):
                        for data, target in loader:
                            step += 1
                            for group in optimizer.param_groups:
                                group["lr"] = 0.1 * math.cos(math.pi * step / (2 * total_steps))
                            optimizer.zero_grad()
                            nn.functional.mse_loss(model(data), target).backward()
                            optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import math

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    total_steps = 2 * len(loader)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    # counted again: prepare gave each process its share
                    total_steps = 2 * len(loader)
                    step = 0
                    for epoch in range(2):
                        for data, target in loader:
                            step += 1
                            for group in optimizer.param_groups:
                                group["lr"] = 0.1 * math.cos(math.pi * step / (2 * total_steps))
                            optimizer.zero_grad()
                            accelerator.backward(nn.functional.mse_loss(model(data), target))
                            optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A step count from len(loader) that a learning-rate scheduler receives: the prepared
        # scheduler steps once per process at each call, so the count is not repeated after prepare.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    epochs = 3
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    total_steps = epochs * len(loader)
                    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total_steps)
                    for epoch in range(epochs):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                            scheduler.step()


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
                    epochs = 3
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    total_steps = epochs * len(loader)
                    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total_steps)
                    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
                    for epoch in range(epochs):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                            scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and not facts.schedulers and bool(facts.loaders) and "len" in facts.called

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        # Only blocks holding a prepare: one an earlier rule of this run wrote (its lines are
        # changed) or one the script already has.
        prepares = lines_of(facts.call_sites.get(".prepare", ()))
        transformer = _RecountAfterPrepare(facts, facts.changed_lines | prepares)
        return module.visit(transformer), transformer.changes(module)
