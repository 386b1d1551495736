"""ACC120 inline-loader: a DataLoader built in a call's arguments is prepared where it stands.

``train(model, DataLoader(train_set, batch_size=32, shuffle=True), optimizer)`` hands the loader
over without a name, so there is nothing for ``prepare`` to rebind: left as it was, every process
would train on the whole dataset (and an evaluation would count every sample once per process).
The construction itself becomes ``accelerator.prepare(DataLoader(...))``; the parameter receiving
it is a prepared loader in the called function, so its batches arrive on the device and an
evaluation over it is gathered. The constructions it prepares are direct ``DataLoader(...)``
calls and calls of the file's functions that return one loader. Where the accelerator cannot be read at the call, the loader is left and reported
(ACC931): every process would read all of its data.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of

UNREACHABLE = "ACC931"
UNREACHABLE_MESSAGE = (
    "a DataLoader built in this call's arguments where the accelerator cannot be read: not prepared, so "
    "every process reads all of its data; build it where the accelerator exists and prepare it"
)


class _PrepareInPlace(RuleTransformer):
    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__(facts, lines_of(facts.inline_loaders))
        self.wanted = set(facts.inline_loaders)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        value = original_node.value
        if not isinstance(value, cst.Call) or self.site(value) not in self.wanted:
            return updated_node
        if not self.accelerator_reachable():
            self.report(value, UNREACHABLE, UNREACHABLE_MESSAGE, False)
            return updated_node
        accelerator: cst.BaseExpression = self.instance_accelerator() or cst.Name(self.accelerator)
        self.report(
            value, InlineLoader.code, "DataLoader built in a call's arguments → accelerator.prepare(DataLoader(...))"
        )
        prepared = cst.Call(cst.Attribute(accelerator, cst.Name("prepare")), [cst.Arg(updated_node.value)])
        return updated_node.with_changes(value=prepared)


class InlineLoader(Rule):
    code = "ACC120"
    name = "inline-loader"
    fixes = {
        "ACC931": (
            "Build the loader where the accelerator exists and prepare it: ``loader = accelerator.prepare(DataLoader(...))`` in the caller, then pass ``loader`` to the call instead of the inline ``DataLoader(...)``."
        ),
    }
    extra_codes = {
        UNREACHABLE: "inline-loader-unreachable: a DataLoader built in a call's arguments where the accelerator "
        "cannot be read: not prepared, so not sharded",
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer):
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()


                def main():
                    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                    model = nn.Linear(4, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(2):
                        train(model, DataLoader(data, batch_size=8, shuffle=True), optimizer)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer, accelerator):
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(x), y))
                        optimizer.step()


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                    model = nn.Linear(4, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer = accelerator.prepare(model, optimizer)
                    for epoch in range(2):
                        train(
                            model,
                            accelerator.prepare(DataLoader(data, batch_size=8, shuffle=True)),
                            optimizer,
                            accelerator,
                        )


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code=UNREACHABLE,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer):
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()


                def smoke_test():
                    model = nn.Linear(4, 1)
                    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
                    train(model, DataLoader(data, batch_size=4), torch.optim.SGD(model.parameters(), lr=0.1))


                def main():
                    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                    loader = DataLoader(data, batch_size=8, shuffle=True)
                    model = nn.Linear(4, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    train(model, loader, optimizer)


                if __name__ == "__main__":
                    main()
            """,
            message=UNREACHABLE_MESSAGE,
        ),
        # A loader bound to a name before it is handed to the training function: ACC103 prepares it
        # by name, nothing is prepared in the call.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer):
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                def main():
                    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    loader = DataLoader(dataset, batch_size=8, shuffle=True)
                    train(model, loader, optimizer)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer, accelerator):
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    loader = DataLoader(dataset, batch_size=8, shuffle=True)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    train(model, loader, optimizer, accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer):
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()


                def main():
                    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                    model = nn.Linear(4, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    train(model, DataLoader(data, batch_size=8, shuffle=True), optimizer)


                if __name__ == "__main__":
                    main()
            """,
            code=UNREACHABLE,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(facts.inline_loaders)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _PrepareInPlace(facts)
        return module.visit(transformer), transformer.changes(module)
