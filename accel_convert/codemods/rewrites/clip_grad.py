"""ACC106 clip-grad: clip gradients through the accelerator.

``accelerator.clip_grad_norm_`` unscales mixed-precision gradients first and, under gradient
accumulation, clips the accumulated gradients. Calls are matched by qualified name, so
``torch.nn.utils.clip_grad_norm_``, ``nn.utils.clip_grad_norm_``, a ``from torch.nn.utils import
clip_grad_norm_`` and any alias of them are all found; ``clip_grad_value_`` likewise.

Left as written: the clipping in a module that trains nothing (a class visualisation clipping the
frozen model's gradients while an optimizer steps its image): its backward stays plain, so there
is nothing to unscale.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, Example, Rule
from accel_convert.codemods.engine.torch_names import CLIPPERS
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of


class _ClipGrad(RuleTransformer):
    def __init__(self, facts: ScriptFacts, accelerator: str) -> None:
        sites = [site for name in CLIPPERS for site in facts.call_sites.get(name, ())]
        super().__init__(facts, lines_of(sites))
        self.facts = facts

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        method = CLIPPERS.get(self.qualified_name(original_node.func) or "")
        if method is None:
            return updated_node
        if not self.accelerator_reachable():
            self.report(
                original_node,
                NO_ACCELERATOR_ACCESS,
                f"{method} where no accelerator is reachable: left as it was",
                False,
                header_only=True,
            )
            return updated_node
        self.report(original_node, ClipGrad.code, f"gradient clipping → {self.accelerator}.{method}", header_only=True)
        return updated_node.with_changes(func=cst.Attribute(cst.Name(self.accelerator), cst.Name(method)))


class ClipGrad(Rule):
    code = "ACC106"
    name = "clip-grad"
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
                        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
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
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        accelerator.clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # The script's own function named clip_grad_norm_ (it clips each parameter on its own):
        # matched by qualified name, it is not torch's and stays as written.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def clip_grad_norm_(parameters, max_norm):
                    # Clips each parameter on its own (not the global norm torch computes).
                    for p in parameters:
                        if p.grad is not None:
                            p.grad.mul_(min(1.0, max_norm / (p.grad.norm() + 1e-6)))


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def clip_grad_norm_(parameters, max_norm):
                    # Clips each parameter on its own (not the global norm torch computes).
                    for p in parameters:
                        if p.grad is not None:
                            p.grad.mul_(min(1.0, max_norm / (p.grad.norm() + 1e-6)))


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
                        clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # A module that trains nothing (gradients for an input) keeps its backward plain, so its
        # gradients are not scaled: they are clipped as written (``facts.backward_trains``).
        return facts.has_accelerator and facts.backward_trains and bool(facts.called & CLIPPERS.keys())

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _ClipGrad(facts, facts.existing_accelerator or facts.accelerator_name)
        return module.visit(transformer), transformer.changes(module)
