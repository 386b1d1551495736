"""ACC128 agreed-paths: a run folder named from the clock, a process id or a folder listing is the same folder on every process.

Scripts name their run from what they find when they start: a time stamp (``datetime.now()
.strftime(...)``, ``time.time()``), a fresh id (``uuid.uuid4()``), the process id, or the next
number after the folders already there (``glob.glob("run/experiment_*")``, ``os.listdir``). Each
process decides that for itself: the stamps differ as soon as the processes start a moment apart,
and the main process may have made ``experiment_3`` before another lists the folder and takes
``experiment_4``. The main process then saves the best checkpoint into its folder, and another
process, loading it back from the folder of its own name, finds nothing there.

Where such a value reaches a path the program uses (a folder made, a file opened, a checkpoint
saved or loaded, a tracker's log folder; the locality owner decides:
:func:`~codemods.model.locality.paths_decided_per_process`), the processes take rank 0's value
right after the assignment: ``stamp = broadcast_object_list([stamp])[0]`` (``from
accel_convert.runtime.utils`` or ``accelerate.utils``; it joins the process group where no
accelerator exists yet). On one process the value is its own. A timer (``start = time.time()``)
no path reads is left alone, and so is an assignment that not every process reaches (the
broadcast would wait there for the others).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imports import add_utils_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import dotted, statement
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.model.locality import locality, locality_of

AGREEING = "broadcast_object_list"
MESSAGE = (
    "a path named from the clock, a process id or a folder listing differs between processes: "
    f"every process takes rank 0's value ({AGREEING})"
)


class _PathsAgreed(RuleTransformer):
    def __init__(self, facts: ScriptFacts, decided: Mapping[int, tuple[str, ...]], agreed_lines: set[int]) -> None:
        super().__init__(facts, set(decided))
        self.decided = decided
        self.agreed_lines = agreed_lines
        self.agreed = False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        return self._agreed_after(original_node, updated_node)

    def leave_While(
        self, original_node: cst.While, updated_node: cst.While
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        return self._agreed_after(original_node, updated_node)

    def _agreed_after(
        self, original_node: cst.BaseStatement, updated_node: cst.BaseStatement
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """The statement, then its names agreed (where every process reaches it, not twice)."""
        site = self.origins.site(original_node)
        names = None if site is None else self.decided.get(site.line)
        if (
            not names
            or site is None
            or site.end_line + 1 in self.agreed_lines
            or not self.every_rank_reaches_here(original_node)
        ):
            return updated_node
        held = names[0] if len(names) == 1 else f"({', '.join(names)})"
        agreement = statement(f"{', '.join(names)} = {AGREEING}([{held}])[0]")
        self.report(original_node, AgreedPaths.code, MESSAGE, header_only=isinstance(original_node, cst.While))
        self.agreed = True
        return cst.FlattenSentinel([updated_node, agreement])


def _agreed_lines(module: cst.Module, facts: ScriptFacts) -> set[int]:
    """Lines of the agreements already there (``stamp = broadcast_object_list([stamp])[0]``): a
    script converted again is not agreed twice."""
    lines = set()
    for node in module_nodes(module):
        if type(node) is not cst.SimpleStatementLine or not isinstance(node.body[0], cst.Assign):
            continue
        value = node.body[0].value
        if isinstance(value, cst.Subscript) and isinstance(value.value, cst.Call):
            if (dotted(value.value.func) or "").rpartition(".")[2] == AGREEING:
                site = facts.origins.site(node)
                if site is not None:
                    lines.add(site.line)
    return lines


class AgreedPaths(Rule):
    code = "ACC128"
    name = "agreed-paths"
    providers = (locality,)
    examples = (
        Example(
            before="""
                import os
                from datetime import datetime

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    torch.manual_seed(0)
                    run_dir = os.path.join("runs", datetime.now().strftime("%Y%m%d-%H%M%S-%f"))
                    os.makedirs(run_dir, exist_ok=True)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()
                    torch.save(model.state_dict(), os.path.join(run_dir, "last.pt"))


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import os
                from datetime import datetime

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from accel_convert.runtime.utils import broadcast_object_list
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    torch.manual_seed(0)
                    run_dir = os.path.join("runs", datetime.now().strftime("%Y%m%d-%H%M%S-%f"))
                    run_dir = broadcast_object_list([run_dir])[0]
                    if accelerator.is_main_process:
                        os.makedirs(run_dir, exist_ok=True)
                    accelerator.wait_for_everyone()
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), os.path.join(run_dir, "last.pt"))


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # A timer: no path reads it.
            leaves_alone=True,
            before="""
                import time

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                start = time.time()
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                for data, target in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(data), target).backward()
                    optimizer.step()
                print(f"took {time.time() - start:.1f}s")
            """,
            after="""
                import time

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                start = time.time()
                accelerator = Accelerator()
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for data, target in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(data), target))
                    optimizer.step()
                accelerator.print(f"took {time.time() - start:.1f}s")
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(locality_of(facts).decided_per_process)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        decided = locality_of(facts).decided_per_process
        transformer = _PathsAgreed(facts, decided, _agreed_lines(module, facts))
        changed = module.visit(transformer)
        if transformer.agreed:
            changed = add_utils_import(changed, AGREEING, options)
        return changed, transformer.changes(module)
