"""ACC925 model-trains-itself: a model class whose own method runs the backward; nothing converted.

In forward-forward training each layer steps its own optimizer inside ``layer.train(...)``; a
scikit-learn style ``Net.fit(loader)`` does the same for the whole model. DDP averages gradients
only for what runs through the prepared wrapper's forward, and ``self`` inside those methods is
the bare module: converted, every process would train its own copy on its own shard of the data,
and the copies would drift apart without a word. The training has to be restructured by hand (the
caller runs the prepared model, an optimizer prepared beside it steps), so the script is left as
it is and the class is reported.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import Findings
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule


class ModelTrainsItself(Rule):
    code = "ACC925"
    name = "model-trains-itself"
    fixes = {
        "ACC925": (
            "Move the training step out of the model: have the model's ``forward`` return the loss (or outputs), and write the ``backward`` and ``optimizer.step()`` in the training loop, where the converter replaces them with ``accelerator.backward(loss)`` after preparing the model; then convert again."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn


                class Layer(nn.Linear):
                    def __init__(self, n_in, n_out):
                        super().__init__(n_in, n_out)
                        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

                    def train_on(self, x):
                        loss = self(x).pow(2).mean()
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()


                if __name__ == "__main__":
                    layer = Layer(8, 4)
                    for step in range(10):
                        layer.train_on(torch.randn(16, 8))
            """,
            message=(
                "Layer is a model that trains itself (its own method runs the backward): DDP averages "
                "gradients only through the prepared model's forward; nothing converted, restructure by hand"
            ),
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Regressor(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 1)

                    def forward(self, x, y):
                        return nn.functional.mse_loss(self.linear(x), y)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = Regressor()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in loader:
                        optimizer.zero_grad()
                        loss = model(x, y)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.self_training_models)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        findings = Findings(facts)
        for statement in module.body:
            if isinstance(statement, cst.ClassDef) and statement.name.value in facts.self_training_models:
                findings.add(
                    statement,
                    self.code,
                    f"{statement.name.value} is a model that trains itself (its own method runs the backward): "
                    "DDP averages gradients only through the prepared model's forward; nothing converted, "
                    "restructure by hand",
                    False,
                    header_only=True,
                )
        return module, findings.resolve(module)
