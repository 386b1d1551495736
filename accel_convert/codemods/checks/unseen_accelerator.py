"""ACC956 unseen-accelerator: ``Accelerator`` comes from a module the converter cannot see; nothing converted.

A script that imports ``Accelerator`` from its own helper module (``from utils import
Accelerator``, ``from mylib.accel import Accelerator``) or calls ``mylib.Accelerator()`` may hold
Accelerate's class re-exported, or a class of its own with that name: the converter cannot tell.
Creating an accelerator beside it would make a second one, and importing the target's
``Accelerator`` would shadow the script's name (or be shadowed by it). So the script is left as
written and each such import or call is reported at its position. A script that imports
``Accelerator`` from ``accelerate`` (or ``accel_convert.runtime``) is converted as usual.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.accelerator_creation import unseen_accelerators
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options, Site
from accel_convert.codemods.engine.rule import Example, Rule

#: What is said of each import or call.
OUTCOME = "Accelerate's or another class, it cannot tell: nothing converted (import it from accelerate)"


class UnseenAccelerator(Rule):
    code = "ACC956"
    name = "unseen-accelerator"
    fixes = {
        "ACC956": (
            "If the module re-exports Accelerate's class, import it from ``accelerate`` (``from accelerate import Accelerator``) and convert again; if it is a class of your own, the script is already distributed by it: leave it as written."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                from utils import Accelerator


                def main():
                    accelerator = Accelerator()
                    model = torch.nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    loss = model(torch.randn(4, 8)).sum()
                    loss.backward()
                    optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message=f"Accelerator is imported from utils, a module the converter cannot see: {OUTCOME}",
        ),
        # Accelerator imported from accelerate itself: a script already distributed by Accelerate,
        # nothing is reported.
        Example(
            leaves_alone=True,
            before="""
                import torch
                from accelerate import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = torch.nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = torch.nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(unseen_accelerators(facts))

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        changes = []
        for qualified in sorted(unseen_accelerators(facts)):
            origin = qualified.rpartition(".")[0]
            sites = list(facts.call_sites.get(qualified, ()))
            imported = {local for local, name in facts.imports.items() if name == qualified}
            sites += import_sites(module, facts, imported)
            for site in sorted(sites, key=lambda site: (site.line, site.column))[:1]:
                message = f"Accelerator is imported from {origin}, a module the converter cannot see: {OUTCOME}"
                changes.append(report_at(site, self.code, message))
        return module, sorted(changes, key=lambda change: (change.line, change.column))


def import_sites(module: cst.Module, facts: ScriptFacts, names: set[str]) -> list[Site]:
    """Where the import statements binding any of ``names`` are, in the original file."""
    finder = _ImportFinder(names)
    module.visit(finder)
    return [site for statement in finder.found if (site := facts.origins.site(statement)) is not None]


class _ImportFinder(cst.CSTVisitor):
    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names
        self.found: list[cst.SimpleStatementLine] = []

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        for small in node.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                bound = {alias.evaluated_alias or alias.evaluated_name for alias in small.names}
                if bound & self.names:
                    self.found.append(node)
        return False
