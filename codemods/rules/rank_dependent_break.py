"""ACC902 rank-dependent-break: a loop that stops on a per-process value can hang the others.

``if loss < 1e-3: break`` is decided by each process on its own batch; one process leaves the
loop while the others wait for it in the next gradient all-reduce, forever. Make the decision
the same everywhere (reduce the value first, e.g. ``accelerator.reduce(loss, "mean")``), or set
a flag with ``accelerator.set_trigger()`` and test ``accelerator.check_trigger()``.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule

MESSAGE = "break decided by a per-process value: other processes would wait forever"


class RankDependentBreak(Rule):
    code = "ACC902"
    name = "rank-dependent-break"
    examples = (
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
            message="break decided by a per-process value: other processes would wait forever",
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.rank_dependent_breaks)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        return module, [report_at(site, self.code, MESSAGE) for site in facts.rank_dependent_breaks]
