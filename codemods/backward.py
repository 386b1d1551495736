"""ACC105 backward: route every ``X.backward(...)`` through the accelerator.

``accelerator.backward`` scales the loss for mixed precision and gradient accumulation and lets
DistributedDataParallel synchronise gradients; calling ``loss.backward()`` directly skips all of
that. Any tensor expression and any keyword arguments are kept (``errD_real``, LBFGS closures,
``retain_graph=True``). ``scaler.scale(loss).backward()`` is left to the AMP pass, which replaces the
scaler as a whole.

Before::

    loss.backward(retain_graph=True)

After::

    accelerator.backward(loss, retain_graph=True)
"""

from __future__ import annotations

import libcst as cst

from codemods.base import Change, Codemod, Options
from codemods.edits import CodemodTransformer, dotted
from codemods.facts import ScriptFacts

#: Reported when a ``.backward()`` call sits where no accelerator can be reached.
UNREACHABLE = "ACC904"


def is_tensor_backward(node: cst.Call, accelerator: str) -> bool:
    """``X.backward(...)`` where X is not the accelerator, a module or a GradScaler product."""
    func = node.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "backward"):
        return False
    receiver = func.value
    if dotted(receiver) == accelerator:
        return False
    # scaler.scale(loss).backward(): the AMP pass owns it.
    return not (
        isinstance(receiver, cst.Call)
        and isinstance(receiver.func, cst.Attribute)
        and receiver.func.attr.value == "scale"
    )


class _Backward(CodemodTransformer):
    def __init__(self, facts: ScriptFacts, accessible: set[str], **kwargs: object) -> None:
        super().__init__(facts.names, facts.origins, lines=facts.call_sites.get(".backward", ()), **kwargs)  # type: ignore[arg-type]
        self.accessible = accessible

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not is_tensor_backward(original_node, self.accelerator):
            return updated_node
        if self.qualified_name(original_node.func.value) is not None:  # type: ignore[attr-defined]
            return updated_node  # torch.autograd.backward and the like: a function, not a tensor
        if self.function not in self.accessible:  # a class method, or code no accelerator reaches
            self.report(UNREACHABLE, "backward() where no accelerator is reachable: left as it was",
                        original_node, fixed=False)
            return updated_node
        receiver = updated_node.func.value  # type: ignore[attr-defined]
        self.report(Backward.code, "X.backward() → accelerator.backward(X)", original_node)
        return updated_node.with_changes(
            func=cst.Attribute(cst.Name(self.accelerator), cst.Name("backward")),
            args=[cst.Arg(receiver), *updated_node.args],
        )


class Backward(Codemod):
    code = "ACC105"
    name = "backward"
    extra_codes = {UNREACHABLE: "no-accelerator-access: a call that needs the accelerator where none is reachable (a class method, code run before it exists)"}

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and facts.backward_site is not None

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        accelerator = facts.existing_accelerator or facts.accelerator_name
        transformer = _Backward(facts, facts.accessible_functions, accelerator=accelerator)
        return module.visit(transformer), transformer.changes
