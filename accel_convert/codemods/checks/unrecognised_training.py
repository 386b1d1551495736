"""ACC957 training-not-recognised: a script runs ``backward()`` but no model, optimizer or data loader is recognised; nothing converted.

The conversion starts from what it recognises: a model (a module the script builds, loads or
trains), an optimizer (``torch.optim``'s classes, or any object built from a model's
``parameters()`` whose ``step()`` the training calls) and the data loaders it reads. A script
whose training none of these describe — an optimizer of its own class stepped through methods
of its own (SAM's ``first_step()`` and ``second_step()``), batches read from an attribute of an
object the converter cannot see into (``dataset.train`` of a ``Cifar`` class of another module)
— would otherwise come back unchanged with nothing said, as if it needed nothing. Where something
is built from a model's ``parameters()`` (an optimizer of some class), it is reported at each
``backward()`` call instead, and left as written: on several processes each would train the whole
model on the whole data, unsynchronised. A backward with nothing built from parameters (but a
clipping of them: a class visualisation clips its frozen model's gradients) takes gradients for
something else (a saliency map's input) and is not reported.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import built_from_parameters, nodes_in
from accel_convert.codemods.engine.torch_names import CLIPPERS

#: What is said at each ``backward()``.
MESSAGE = (
    "backward() with no model, optimizer or DataLoader the converter recognises: nothing converted, so on several "
    "processes each would train on all the data, unsynchronised"
)


def updates_from_parameters(module: cst.Module, facts: ScriptFacts) -> bool:
    """Whether ``module`` builds something from a model's parameters that may update it (``SAM(
    model.parameters(), ...)``): a clipping call (``clip_grad_norm_(model.parameters(), 1.0)``,
    matched by qualified name) only clips the gradients a backward left there."""
    return any(
        isinstance(node, cst.Call)
        and built_from_parameters(node)
        and (facts.qualified_name(node.func) or "") not in CLIPPERS
        for node in nodes_in(module)
    )


class UnrecognisedTraining(Rule):
    code = "ACC957"
    name = "training-not-recognised"
    fixes = {
        "ACC957": (
            "Make the training recognisable, then convert again: build the data as a ``torch.utils.data.DataLoader`` the script iterates (not an attribute of another object), and step a ``torch.optim`` optimizer built from ``model.parameters()``. Or convert by hand: ``model, optimizer, loader = accelerator.prepare(model, optimizer, loader)`` and ``accelerator.backward(loss)``."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                from data import Cifar
                from model import WideResNet
                from sam import SAM

                dataset = Cifar(128)
                model = WideResNet()
                optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)


                def update(optimizer):
                    optimizer.first_step(zero_grad=True)


                for inputs, targets in dataset.train:
                    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
                    update(optimizer)
            """,
            message=MESSAGE,
        ),
        Example(
            before="""
                import torch
                from data import Cifar
                from model import WideResNet

                dataset = Cifar(128)
                model = WideResNet()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for inputs, targets in dataset.train:
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return (
            facts.uses_torch
            and facts.home_kind != "library"
            and not facts.has_accelerator
            and not facts.models
            and not facts.optimizers
            and not facts.loaders
            and bool(facts.call_sites.get(".backward"))
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        if not updates_from_parameters(module, facts):
            # No object is built from a model's parameters: the backward takes gradients for
            # something else (a saliency map's input), and nothing is trained.
            return module, []
        return module, [
            Change(self.code, MESSAGE, site.line, site.column, site.end_line, site.end_column, fixed=False)
            for site in facts.call_sites[".backward"]
        ]
