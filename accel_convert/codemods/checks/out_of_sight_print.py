"""ACC954 out-of-sight-print: a ``print`` in a function the script only calls through a value (a hook, a handler, a thread target).

A function the script puts in a list of end-of-epoch hooks, a table of commands or
``Thread(target=...)`` is called where no rewrite can see the call. Handed over by code that
holds the accelerator, the value carries it (``functools.partial(log_epoch,
accelerator=accelerator)``, ACC104) and its ``print`` becomes ``accelerator.print``. Handed over
where no accelerator is reachable (a module-level list of hooks in a script whose ``main()``
creates the accelerator), it cannot be given the accelerator, and its ``print`` stays a plain
``print``: under ``torchrun`` every process prints the line. Print from the caller (which has
the accelerator: ``accelerator.print``), or pass the accelerator to the hook yourself and print
behind ``if accelerator.is_main_process``.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.engine.torch_names import SELF_DISTRIBUTING

_SCRIPT = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def log_epoch(epoch, loss):
        print(f"epoch {epoch} loss {loss:.4f}")


    HOOKS = [log_epoch]


    def main():
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for data, target in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(data), target)
                loss.backward()
                optimizer.step()
            for hook in HOOKS:
                hook(epoch, loss.item())


    if __name__ == "__main__":
        main()
"""

MESSAGE = (
    "print in {function}, which the script only calls through a value (a hook, a handler, a thread target): "
    "the accelerator cannot be passed to it, so every process prints this; print from the caller "
    "(accelerator.print) or guard it with accelerator.is_main_process"
)


class OutOfSightPrint(WalkingCheck):
    code = "ACC954"
    name = "out-of-sight-print"
    fixes = {
        "ACC954": (
            "Print from the caller with ``accelerator.print(...)``, or guard the print in the function with ``if PartialState().is_main_process:`` (``PartialState`` imported from where the converted script imports ``Accelerator``), since the accelerator cannot be passed to it."
        ),
    }
    examples = (
        Example(before=_SCRIPT, message=MESSAGE.format(function="log_epoch")),
        # Called by name, the function receives the accelerator and prints once.
        Example(
            before=_SCRIPT.replace("HOOKS = [log_epoch]", "HOOKS = []").replace(
                "            for hook in HOOKS:\n                hook(epoch, loss.item())",
                "            log_epoch(epoch, loss.item())",
            ),
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # A script that starts its own processes (mp.spawn of a worker) is left as written.
        self_distributing = bool(facts.existing_features & SELF_DISTRIBUTING)
        return facts.has_accelerator and "print" in facts.called and not self_distributing

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        self._hidden = facts.functions_called_out_of_sight()

    def visit_Call(self, node: cst.Call) -> None:
        """Calls of the builtin ``print`` inside those functions."""
        if not self._hidden:
            return
        function = self.walk.function
        if function in self._hidden and self.walk.facts.is_builtin(node.func, "print", self.walk.scope):
            self.walk.report(node, self.code, MESSAGE.format(function=function), False)
