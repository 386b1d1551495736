"""ACC958 sharded-but-unsynchronised: the training loader is prepared but no trained model is recognised, so each process trains its own copy on its shard.

The conversion prepares the loaders it recognises and the models an optimizer it recognises
updates (``torch.optim``'s, any object built from ``parameters()`` whose ``step()`` or own methods
the training loop calls, as SAM's ``first_step()``). A script whose optimizer is stepped where the
conversion cannot follow it (a helper of the script the loop calls), or whose model is trained inside
an object it cannot see into, still has its training loader prepared: on several processes each trains its own copy of the
model on its own shard of the data, with no gradient averaged between them. The result is neither
the one-process model nor a data-parallel one, and nothing fails. Where a loop over a loader runs a
``backward()``, something is built from a model's ``parameters()`` (an optimizer of some kind), and
no model or optimizer is recognised, each such ``backward()`` is reported. A backward with nothing
built from parameters takes gradients for something else (an attack's input) and is not reported.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.checks.unrecognised_training import updates_from_parameters
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule

#: What is said at each ``backward()``.
MESSAGE = (
    "backward() over a prepared loader, but no model or optimizer the converter recognises is prepared: on "
    "several processes each trains its own copy on its shard of the data, unsynchronised"
)


class UnsynchronisedTraining(Rule):
    code = "ACC958"
    name = "sharded-but-unsynchronised"
    fixes = {
        "ACC958": (
            "Prepare the model the loop trains with the loader: ``model = accelerator.prepare(model)`` after it is built, and call ``accelerator.backward(loss)``; an optimizer of its own kind (SAM) can stay as it is, stepping the prepared model's parameters. Or step a ``torch.optim`` optimizer built from ``model.parameters()`` and convert again."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                from torch.utils.data import DataLoader, TensorDataset
                from sam import SAM

                loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
                model = torch.nn.Linear(4, 1)
                optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)


                def update(optimizer):
                    optimizer.first_step(zero_grad=True)


                for x, y in loader:
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    update(optimizer)
            """,
            message=MESSAGE,
        ),
        Example(
            before="""
                import torch
                from torch.utils.data import DataLoader, TensorDataset

                loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
                model = torch.nn.Linear(4, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    optimizer.zero_grad()
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                from torch.utils.data import DataLoader, TensorDataset

                loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
                model = torch.nn.Linear(4, 2)
                model.eval()
                for x, y in loader:
                    x.requires_grad = True
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    adversarial = x + 0.1 * x.grad.sign()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return (
            facts.uses_torch
            and facts.home_kind != "library"
            and facts.existing_accelerator is None
            and not facts.models
            and not facts.optimizers
            and bool(facts.loaders)
            and bool(facts.call_sites.get(".backward"))
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        if not updates_from_parameters(module, facts):
            # Nothing is built from a model's parameters: the backward takes gradients for
            # something else (an attack's input, a saliency map), and nothing is trained.
            return module, []
        loops = [loop.site for loop in (*facts.train_loops, *facts.eval_loops) if loop.loader in facts.loaders]
        return module, [
            Change(self.code, MESSAGE, site.line, site.column, site.end_line, site.end_column, fixed=False)
            for site in facts.call_sites[".backward"]
            if any(loop.line <= site.line <= loop.end_line for loop in loops)
        ]
