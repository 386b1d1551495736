"""ACC918 keyboard-interrupt: an ``except KeyboardInterrupt`` runs on every process, each at its own point of the step.

Under ``torchrun`` a Ctrl-C reaches every process, and each is somewhere else: one inside the
gradient all-reduce, another still in its forward. Whatever the handler (or the code after the
``try``) does with the other processes — ``accelerator.save`` behind ``wait_for_everyone()``, an
evaluation that gathers, another training step — waits for processes that are waiting for
something else, and the job hangs instead of stopping. Keep the handler to work of this process
alone (a per-rank file, a message), or let the interrupt end the run.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options, Site
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.source import exception_handlers
from accel_convert.codemods.model.state import Analysis


@rule_provider()
def interrupt_handlers(a: Analysis) -> tuple[Site, ...]:
    """``except KeyboardInterrupt:`` clauses (the ``except`` keyword of each)."""
    return exception_handlers(a, "KeyboardInterrupt")


class KeyboardInterruptHandler(Rule):
    code = "ACC918"
    name = "keyboard-interrupt"
    providers = (interrupt_handlers,)
    fixes = {
        "ACC918": (
            "Keep the handler to work of this process alone (a message, a per-rank file) and remove from it, and from the code after the ``try``, anything that waits for the others: ``accelerator.wait_for_everyone()``, ``accelerator.save``, a gathering evaluation. Or delete the ``except KeyboardInterrupt`` and let the interrupt end the run; save checkpoints periodically instead."
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
                    try:
                        for epoch in range(100):
                            for data, target in loader:
                                optimizer.zero_grad()
                                loss = nn.functional.mse_loss(model(data), target)
                                loss.backward()
                                optimizer.step()
                    except KeyboardInterrupt:
                        print("interrupted")
                    torch.save(model.state_dict(), "model.pt")


                if __name__ == "__main__":
                    main()
            """,
            message=(
                "except KeyboardInterrupt runs on every process, each at another point of the "
                "step: anything in it or after it that needs the other processes can hang"
            ),
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
                    for epoch in range(100):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        torch.save(model.state_dict(), "model.pt")


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.of(interrupt_handlers)) and facts.has_accelerator

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        message = (
            "except KeyboardInterrupt runs on every process, each at another point of the step: "
            "anything in it or after it that needs the other processes can hang"
        )
        return module, [
            Change(self.code, message, site.line, site.column, site.end_line, site.end_column, fixed=False)
            for site in facts.of(interrupt_handlers)
        ]
