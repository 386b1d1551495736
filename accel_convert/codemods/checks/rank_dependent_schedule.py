"""ACC930 rank-dependent-schedule: a learning-rate schedule stepped with one process's loss.

``scheduler.step(train_loss)`` of a ``ReduceLROnPlateau``, where ``train_loss`` adds up the
losses of the batches this process trained on (or ``scheduler.step(loss)`` with its batch
loss, or the mean of a list of its batch losses: ``losses.append(loss.item())``, then
``np.mean(losses)``), decides on each process's own shard: one process halves its learning rate at an epoch
where another does not. DDP averages the gradients, not the learning rates, so from then on the
processes' weights drift apart, silently, and the main process saves its own copy. Reduce the value across processes first
(``accelerator.reduce(torch.tensor(train_loss, device=accelerator.device), "mean").item()``), or
step on a validation loss computed from gathered outputs.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.model.locality import locality, locality_of

MESSAGE = (
    "scheduler stepped with this process's loss: each process would change its learning rate at its"
    " own epoch and the weights drift apart; reduce the value across processes first"
)


class RankDependentSchedule(Rule):
    code = "ACC930"
    name = "rank-dependent-schedule"
    providers = (locality,)
    fixes = {
        "ACC930": (
            'Reduce the value before stepping the scheduler: ``val = accelerator.reduce(torch.tensor(val_loss, device=accelerator.device), "mean")`` and then ``scheduler.step(val.item())``, so every process changes its learning rate at the same epoch.'
        ),
    }
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
                    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=2)
                    for epoch in range(10):
                        train_loss = 0.0
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                            train_loss += loss.item()
                        scheduler.step(train_loss / len(loader))


                if __name__ == "__main__":
                    main()
            """,
            message=MESSAGE,
        ),
        Example(
            before="""
                import numpy as np
                import torch
                import torch.nn as nn
                from torch.optim.lr_scheduler import ReduceLROnPlateau
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    torch.manual_seed(0)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    scheduler = ReduceLROnPlateau(optimizer, patience=2)
                    for epoch in range(10):
                        losses = []
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                            losses.append(loss.item())
                        train_loss = np.mean(losses)
                        scheduler.step(train_loss)


                if __name__ == "__main__":
                    main()
            """,
            message=MESSAGE,
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
                    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
                    for epoch in range(10):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(locality_of(facts).rank_dependent_schedule_steps)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        return module, [
            report_at(site, self.code, MESSAGE) for site in locality_of(facts).rank_dependent_schedule_steps
        ]
