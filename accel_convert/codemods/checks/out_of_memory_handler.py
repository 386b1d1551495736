"""ACC927 out-of-memory-handler: an ``except OutOfMemoryError`` runs on the process that ran out only.

A script that catches ``torch.cuda.OutOfMemoryError`` around its training and tries again (with
activation checkpointing, a smaller batch, an emptied cache) relies on being alone. Under
``torchrun`` the process that ran out enters the handler while the others carry on into the
gradient all-reduce of the same step, where they wait for it; the retry starts a second training
on that process alone (preparing, reducing, gathering with nobody answering), and the job hangs
instead of failing. Left as it is: let the error end the run, or convert with ``--oom-retry``,
whose retry every process agrees on (``find_executable_batch_size``).
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options, Site
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.source import exception_handlers
from accel_convert.codemods.model.state import Analysis

MESSAGE = (
    "except OutOfMemoryError runs on the process that ran out only: the others wait for it in a "
    "collective and the job hangs; let the error end the run, or convert with --oom-retry"
)


@rule_provider()
def out_of_memory_handlers(a: Analysis) -> tuple[Site, ...]:
    """``except torch.cuda.OutOfMemoryError:`` clauses (the ``except`` keyword of each)."""
    return exception_handlers(a, "OutOfMemoryError")


class OutOfMemoryHandler(Rule):
    code = "ACC927"
    name = "out-of-memory-handler"
    providers = (out_of_memory_handlers,)
    fixes = {
        "ACC927": (
            "Remove the ``except OutOfMemoryError`` handler and let the error end the run, or convert with ``--oom-retry`` so the batch size is lowered on every process together."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader):
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    try:
                        train(model, loader)
                    except torch.cuda.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        train(model, loader)
            """,
            message=MESSAGE,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader):
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    torch.manual_seed(0)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    train(model, loader)
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.of(out_of_memory_handlers)) and facts.has_accelerator

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        return module, [
            Change(self.code, MESSAGE, site.line, site.column, site.end_line, site.end_column, fixed=False)
            for site in facts.of(out_of_memory_handlers)
        ]
