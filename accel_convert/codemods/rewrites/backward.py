"""ACC105 backward: route every ``X.backward(...)`` through the accelerator.

``accelerator.backward`` scales the loss for mixed precision and gradient accumulation and lets
DistributedDataParallel synchronise gradients; calling ``loss.backward()`` directly skips all of
that. Any tensor expression and any keyword arguments are kept (``errD_real``, LBFGS closures,
``retain_graph=True``). ``scaler.scale(loss).backward()`` is left to the AMP pass, which replaces the
scaler as a whole.

Left as written: the ``backward()`` of an object of the file's own class (a class defining a
``backward`` method, such as a weight penalty adding to the gradients by hand or a
``torch.autograd.Function``, its instances, and the parameters they are handed to): it is not a
loss, and ``accelerator.backward(helper)`` would fail. And every backward of a module that trains
nothing (no optimizer built, received or stepped, no parameters updated by hand): an adversarial
attack or a saliency map takes gradients for its input, its model is not wrapped for gradient
synchronisation, and its loops evaluate (the metrics rule sums their counts).

Where no accelerator is reachable (a static method, a class the file never constructs, code that
runs before the accelerator exists, a module of training functions converted without the script
that calls them), the ``backward()`` is left as written and reported (ACC904): there is no
``accelerator`` to call it on.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import seen_through_unwrap
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, NO_ACCELERATOR_ACCESS_DOC, Example, Rule
from accel_convert.codemods.engine.syntax import dotted, is_backward, names_variable
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of


def is_tensor_backward(node: cst.Call, accelerator: str) -> bool:
    """``X.backward(...)`` where X is not the accelerator, a module or a GradScaler product."""
    if not is_backward(node):
        return False
    receiver = node.func.value  # type: ignore[attr-defined]
    if names_variable(receiver, accelerator):
        return False
    # scaler.scale(loss).backward(): the AMP pass owns it.
    return not (
        isinstance(receiver, cst.Call)
        and isinstance(receiver.func, cst.Attribute)
        and receiver.func.attr.value == "scale"
    )


UNREACHABLE_MESSAGE = "backward() where no accelerator is reachable: left as it was"
LIBRARY_MESSAGE = (
    "backward() on what the caller passes in, and this file builds nothing to prepare: convert the "
    "script that calls it (its local imports are converted with it); left as it was"
)


class _Backward(RuleTransformer):
    def __init__(self, facts: ScriptFacts, accessible: AbstractSet[str]) -> None:
        super().__init__(facts, lines_of(facts.call_sites.get(".backward", ())))
        self.accessible = accessible

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not is_tensor_backward(original_node, self.accelerator):
            return updated_node
        receiver_name = dotted(seen_through_unwrap(original_node.func.value, self.facts))  # type: ignore[attr-defined]
        if receiver_name is not None and receiver_name in self.facts.backward_helpers:
            return updated_node  # ``penalty.backward()``: a method of the file's own class, not a loss
        if self.qualified_name(original_node.func.value) is not None:  # type: ignore[attr-defined]
            return updated_node  # torch.autograd.backward and the like: a function, not a tensor
        if not self.accelerator_reachable():
            message = LIBRARY_MESSAGE if self.facts.library_converted_alone else UNREACHABLE_MESSAGE
            self.report(original_node, NO_ACCELERATOR_ACCESS, message, False, header_only=True)
            return updated_node
        receiver = updated_node.func.value  # type: ignore[attr-defined]
        self.report(original_node, Backward.code, "X.backward() → accelerator.backward(X)", header_only=True)
        return updated_node.with_changes(
            func=cst.Attribute(cst.Name(self.accelerator), cst.Name("backward")),
            args=[cst.Arg(receiver), *updated_node.args],
        )


class Backward(Rule):
    code = "ACC105"
    name = "backward"
    fixes = {
        "ACC904": (
            "Give the code a way to reach the accelerator: make the static method an ordinary method or a function that takes ``accelerator`` as a parameter, construct the class in the converted file, or move the call after ``accelerator = Accelerator()``. For a module of training functions, convert the script that calls them, whose local imports are converted with it. Then write the call by hand, e.g. ``accelerator.backward(loss)`` instead of ``loss.backward()``."
        ),
    }
    extra_codes = {NO_ACCELERATOR_ACCESS: NO_ACCELERATOR_ACCESS_DOC}
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
                        output = model(data)
                        nn.functional.mse_loss(output, target).backward(retain_graph=True)
                        output.abs().mean().backward()
                        optimizer.step()


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
                        output = model(data)
                        accelerator.backward(nn.functional.mse_loss(output, target), retain_graph=True)
                        accelerator.backward(output.abs().mean())
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code="ACC904",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Steps:
                    @staticmethod
                    def step(model, optimizer, data, target):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        Steps.step(model, optimizer, data, target)


                if __name__ == "__main__":
                    main()
            """,
            message=UNREACHABLE_MESSAGE,
        ),
        Example(
            code="ACC904",
            before="""
                import torch.nn as nn


                def train_one_epoch(model, loader, optimizer):
                    model.train()
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
            """,
            message=LIBRARY_MESSAGE,
        ),
        # A backward that trains nothing (a saliency map: gradients of the input, no optimizer):
        # left as written, and with nothing trained the script gets no accelerator at all.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn


                def main():
                    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
                    model.load_state_dict(torch.load("classifier.pt"))
                    model.eval()
                    images = torch.randn(4, 8, requires_grad=True)
                    scores = model(images)
                    scores.max(dim=1).values.sum().backward()
                    saliency = images.grad.abs()
                    print("saliency per feature:", saliency.mean(dim=0))


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Steps:
                    @staticmethod
                    def loss(model, data, target):
                        return nn.functional.mse_loss(model(data), target)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = Steps.loss(model, data, target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            code="ACC904",
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and facts.backward_site is not None

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _Backward(facts, facts.accessible_functions)
        return module.visit(transformer), transformer.changes(module)
