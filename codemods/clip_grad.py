"""ACC106 clip-grad: clip gradients through the accelerator.

``accelerator.clip_grad_norm_`` unscales mixed-precision gradients first and, under gradient
accumulation, clips the accumulated gradients. Calls are matched by qualified name, so
``torch.nn.utils.clip_grad_norm_``, ``nn.utils.clip_grad_norm_``, a ``from torch.nn.utils import
clip_grad_norm_`` and any alias of them are all found; ``clip_grad_value_`` likewise.

Before::

    nn.utils.clip_grad_norm_(model.parameters(), args.clip)

After::

    accelerator.clip_grad_norm_(model.parameters(), args.clip)
"""

from __future__ import annotations

import libcst as cst

from codemods.backward import UNREACHABLE
from codemods.base import Change, Codemod, Options
from codemods.edits import CodemodTransformer
from codemods.facts import ScriptFacts

#: Qualified name → the accelerator's method.
CLIPPERS = {
    "torch.nn.utils.clip_grad_norm_": "clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm": "clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm": "clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_": "clip_grad_value_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "clip_grad_value_",
}


class _ClipGrad(CodemodTransformer):
    def __init__(self, facts: ScriptFacts, accelerator: str) -> None:
        sites = [site for name in CLIPPERS for site in facts.call_sites.get(name, ())]
        super().__init__(facts.names, facts.origins, accelerator=accelerator, lines=sites)  # type: ignore[arg-type]
        self.facts = facts

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        method = CLIPPERS.get(self.qualified_name(original_node.func) or "")
        if method is None:
            return updated_node
        if self.function not in self.facts.accessible_functions:
            self.report(UNREACHABLE, f"{method} where no accelerator is reachable: left as it was",
                        original_node, fixed=False)
            return updated_node
        self.report(ClipGrad.code, f"gradient clipping → {self.accelerator}.{method}", original_node)
        return updated_node.with_changes(func=cst.Attribute(cst.Name(self.accelerator), cst.Name(method)))


class ClipGrad(Codemod):
    code = "ACC106"
    name = "clip-grad"

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(facts.called & CLIPPERS.keys())

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _ClipGrad(facts, facts.existing_accelerator or facts.accelerator_name)
        return module.visit(transformer), transformer.changes
