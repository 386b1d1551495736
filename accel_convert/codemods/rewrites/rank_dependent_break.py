"""ACC123 agreed-break: a break on a per-process comparison is decided by all processes together.

``if loss < 1e-3: break`` is decided by each process on its own batch; one process leaves the
loop while the others wait for it in the next gradient all-reduce, forever. Where the decision is
one comparison (``if loss < threshold:``, no ``elif``/``else``, the ``break`` ending the ``if``'s
body) that every process reaches alike, the processes are made to agree: the comparison raises
Accelerate's trigger (``accelerator.set_trigger()``), and the body runs under
``accelerator.check_trigger()``, true on every process once one of them met the condition. On one
process that is the comparison's own answer, so the run is unchanged. The loop left may be a
``for`` (also over ``itertools.count()``) or a ``while True:`` holding the backward.

Any other shape stays as written and is reported (ACC902): a flag set elsewhere, ``and``/``or``,
a ``break`` in an ``else`` or under another per-process test, a place the accelerator does not
reach. Make the decision the same everywhere by hand (reduce the value first, e.g.
``accelerator.reduce(loss, "mean")``, or set the trigger where the flag is set).
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of
from accel_convert.codemods.model.locality import locality, locality_of

MESSAGE = "break decided by a per-process value: other processes would wait forever"
AGREED = "break decided by a per-process comparison: every process stops once one meets it (set_trigger/check_trigger)"
AGREED_CODE = "ACC123"
REPORTED_CODE = "ACC902"


class RankDependentBreak(Rule):
    code = AGREED_CODE
    name = "agreed-break"
    providers = (locality,)
    fixes = {
        "ACC902": (
            'Make every process take the same decision: reduce the value the ``if`` reads before testing it, e.g. ``stop = accelerator.reduce(torch.tensor(float(val_loss < best), device=accelerator.device), "max")`` and ``if stop.item(): break``, or decide on the main process and share it with ``accelerator.set_trigger()`` / ``if accelerator.check_trigger(): break``.'
        ),
    }
    extra_codes = {
        REPORTED_CODE: "rank-dependent-break: a loop that stops on a per-process value can hang the others",
    }
    reports_as_written = frozenset({REPORTED_CODE})
    examples = (
        Example(
            code=REPORTED_CODE,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        if loss.item() < 1e-3 or loss.item() > 1e3:
                            break


                if __name__ == "__main__":
                    main()
            """,
            message="break decided by a per-process value: other processes would wait forever",
        ),
        Example(
            # A script that distributes itself is only reported on; its per-process break still
            # hangs the other processes.
            code=REPORTED_CODE,
            before="""
                import torch
                import torch.distributed as dist
                from torch import nn
                from torch.nn.parallel import DistributedDataParallel


                def main():
                    dist.init_process_group("gloo")
                    model = DistributedDataParallel(nn.Linear(4, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for step in range(100):
                        loss = model(torch.randn(8, 4)).pow(2).mean()
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                        if loss.item() < 1e-3:
                            break
                    dist.destroy_process_group()


                if __name__ == "__main__":
                    main()
            """,
            message="break decided by a per-process value: other processes would wait forever",
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        if loss.item() < 1e-3:
                            break


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
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                        if loss.item() < 1e-3:
                            accelerator.set_trigger()
                        if accelerator.check_trigger():
                            break


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                for epoch in range(100):
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()
                    if epoch == 3:
                        break
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for epoch in range(100):
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(x), y))
                        optimizer.step()
                    if epoch == 3:
                        break
            """,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        if step == 5:
                            break


                if __name__ == "__main__":
                    main()
            """,
            code=REPORTED_CODE,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        answer = locality_of(facts)
        return bool(answer.rank_dependent_breaks or answer.agreeable_breaks)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        answer = locality_of(facts)
        reports = [report_at(site, REPORTED_CODE, MESSAGE) for site in answer.rank_dependent_breaks]
        if not answer.agreeable_breaks:
            return module, reports
        if not options.enabled(self.code):
            # The rewrite is switched off (--ignore ACC123): those breaks are reported as they are.
            return module, reports + [report_at(site, REPORTED_CODE, MESSAGE) for site in answer.agreeable_breaks]
        agreeing = _AgreeOnBreaks(facts)
        module = module.visit(agreeing)
        return module, reports + agreeing.changes(module)


class _AgreeOnBreaks(RuleTransformer):
    """``if <comparison>: ...; break`` at the analysis's agreeable sites becomes ``if
    <comparison>: accelerator.set_trigger()`` followed by ``if accelerator.check_trigger(): ...;
    break``."""

    def __init__(self, facts: ScriptFacts) -> None:
        agreeable = locality_of(facts).agreeable_breaks
        super().__init__(facts, lines_of(agreeable))
        self._sites = set(agreeable)
        #: The agreeable ``if`` statements being walked → whether they can be rewritten there.
        self._rewritable: dict[int, bool] = {}

    def visit_If(self, node: cst.If) -> None:
        if self.origins.site(node) in self._sites:
            self._rewritable[id(node)] = self.accelerator_reachable() and self.every_rank_reaches_here(node)

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        rewritable = self._rewritable.pop(id(original_node), None)
        if rewritable is None:
            return updated_node
        if not rewritable:
            last = original_node.body.body[-1]  # the statement line holding the break (analysis)
            self.report(last, REPORTED_CODE, MESSAGE, False)
            return updated_node
        accelerator: cst.BaseExpression = self.instance_accelerator() or cst.Name(self.accelerator)

        def call(method: str) -> cst.Call:
            return cst.Call(cst.Attribute(accelerator, cst.Name(method)))

        trigger = updated_node.with_changes(
            body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(call("set_trigger"))])])
        )
        agreed = cst.If(test=call("check_trigger"), body=updated_node.body)
        self.report(original_node, RankDependentBreak.code, AGREED)
        return cst.FlattenSentinel([trigger, agreed])
