"""ACC124 agreed-random: a script that draws before it seeds (or never seeds) gets every process's random generators from rank 0 where the accelerator is created.

A segmentation script draws its learning rate, augmentation probability and epoch count with
``random`` in ``main()`` and never seeds: Python's ``random`` and NumPy seed themselves from the
operating system, torch from a fresh random seed, so every process trains with other
hyperparameters, names its checkpoint after them, and rank 1 then loads a file nobody wrote. The
same holds for a split drawn at module level, a target drawn in a class's ``__init__``, a config
helper of another module. Any seed would do, but choosing one is the author's business; what the
conversion can do without changing what one process computes is make the processes agree: it
creates the accelerator above the first such draw (ACC101) and, right after it, every process
takes rank 0's state of Python's ``random``, NumPy's and torch's global generators (CPU and the
process's CUDA device): ``accelerator.agree_random_state()``; for ``--target accelerate``,
``broadcast_object_list`` of ``random``'s and NumPy's states and ``synchronize_rng_states``. On
one process nothing is read or set.

The draws are the global generators' (not one given its own ``generator=``, ``random_state=``
or a ``random.Random()`` of its own) made before any seeding call of their generator, outside the
loops that train (per-batch data), outside methods other than ``__init__`` (a dataset's
augmentation) and outside a ``worker_init_fn`` (the per-worker diversity the script asks for).
A draw handed straight to a dataset (``TensorDataset(torch.randn(64, 4))``, ``Subset(ds,
torch.randperm(200))``) is agreed too: the loader shards that dataset across the processes, so
with one of its own each would train and evaluate on a share of other data than one process's.

A draw that runs on import, before any accelerator can exist (at module level in a script that
trains in ``main()``: bearpaw's ``args.manualSeed = random.randint(1, 10000)`` before
``random.seed(args.manualSeed)``), is agreed right above the first such statement:
``PartialState().agree_random_state()`` joins the process group there; for ``--target
accelerate``, ``broadcast_object_list`` of ``random``'s, NumPy's and torch's states. A module a
program imports draws when its entry imports it: left reported (``ACC923``).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import Site, report_at
from accel_convert.codemods.engine.imports import add_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.random_draws import AGREEING_FUNCTION, AGREEING_METHOD, is_agreeing_call
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import is_main_guard, statement
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.model.locality import locality, locality_of
from accel_convert.codemods.model.plan import creation_index


class AgreedRandom(Rule):
    code = "ACC124"
    name = "agreed-random"
    providers = (locality,)
    examples = (
        Example(
            before="""
                import random

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    lr = random.choice([0.01, 0.05, 0.1])
                    epochs = random.randint(1, 3)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
                    for epoch in range(epochs):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                    torch.save(model.state_dict(), f"model_lr{lr}_e{epochs}.pt")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import random

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    lr = random.choice([0.01, 0.05, 0.1])
                    epochs = random.randint(1, 3)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(epochs):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), f"model_lr{lr}_e{epochs}.pt")


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # Drawn on import, before main() can create the accelerator: agreed right above it.
            before="""
                import argparse
                import random

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--manualSeed", type=int)
                args = parser.parse_args()
                if args.manualSeed is None:
                    args.manualSeed = random.randint(1, 10000)
                random.seed(args.manualSeed)
                torch.manual_seed(args.manualSeed)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.state_dict(), f"model_seed{args.manualSeed}.pt")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import argparse
                import random

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator, PartialState
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--manualSeed", type=int)
                args = parser.parse_args()
                PartialState().agree_random_state()
                if args.manualSeed is None:
                    args.manualSeed = random.randint(1, 10000)
                random.seed(args.manualSeed)
                torch.manual_seed(args.manualSeed)


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), f"model_seed{args.manualSeed}.pt")


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # Seeded first: every process draws the same already.
            leaves_alone=True,
            before="""
                import random

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    random.seed(0)
                    torch.manual_seed(0)
                    lr = random.choice([0.01, 0.05, 0.1])
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import random

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    random.seed(0)
                    torch.manual_seed(0)
                    lr = random.choice([0.01, 0.05, 0.1])
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(locality_of(facts).shared_draws) and facts.existing_accelerator is None

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        if any(isinstance(node, cst.Call) and is_agreeing_call(node) for node in module_nodes(module)):
            return module, []  # agreed already
        spans = _import_spans(module, facts)
        agreed = _agreed_draws(facts, spans)
        on_import = _import_draws(facts, spans)
        changes: list[Change] = []
        if on_import:  # first: it finds its place by the module-level statements' own lines
            module = self._agree_on_import(module, facts, options, on_import, changes)
        if agreed:
            module = self._agree_at_creation(module, facts, options, agreed, changes)
        return module, changes

    def _agree_at_creation(
        self, module: cst.Module, facts: ScriptFacts, options: Options, agreed: list[Site], changes: list[Change]
    ) -> cst.Module:
        lines, imports = _agreeing_code(facts, options)
        inserter = _InsertAfterCreation(facts, [statement(line) for line in lines])
        converted = module.visit(inserter)
        if not inserter.done:
            return module
        converted = _with_imports(converted, facts, options, imports)
        message = (
            "drawn at random before any seed: every process takes rank 0's random state where the "
            f"accelerator is created ({lines[-1]})"
        )
        changes.extend(report_at(site, self.code, message, fixed=True) for site in agreed)
        return converted

    def _agree_on_import(
        self, module: cst.Module, facts: ScriptFacts, options: Options, drawn: list[Site], changes: list[Change]
    ) -> cst.Module:
        """Module-level draws of a script that creates its accelerator in a function: they run on
        import, so the processes agree right above the first (the process group is joined there)."""
        lines, imports = _agreeing_code_on_import(facts, options)
        first = min(site.line for site in drawn)
        index = next(
            (
                i
                for i, node in enumerate(module.body)
                if (site := facts.origins.site(node)) is not None and site.line <= first <= site.end_line
            ),
            None,
        )
        if index is None:
            return module
        # The blank lines above the first drawing statement go above the agreement instead.
        above = module.body[index]
        agreeing = [statement(line) for line in lines]
        agreeing[0] = agreeing[0].with_changes(leading_lines=above.leading_lines)
        moved = above.with_changes(leading_lines=())
        facts.origins.carry(above, moved)
        body = [*module.body[:index], *agreeing, moved, *module.body[index + 1 :]]
        converted = _with_imports(module.with_changes(body=body), facts, options, imports)
        message = (
            "drawn at random on import before any seed: every process takes rank 0's random state "
            f"right above it ({lines[-1]})"
        )
        changes.extend(report_at(site, self.code, message, fixed=True) for site in drawn)
        return converted


def _with_imports(module: cst.Module, facts: ScriptFacts, options: Options, imports: list[str]) -> cst.Module:
    for line in imports:
        with_import = add_import(module, statement(line), options.import_style)  # type: ignore[arg-type]
        facts.origins.carry(module, with_import)
        module = with_import
    return module


def _import_spans(module: cst.Module, facts: ScriptFacts) -> list[tuple[int, int]]:
    """The lines of the module-level statements that run on import, before the accelerator of a
    script whose home is a function or the ``__main__`` block can exist; none where the home is
    the module's own code (the accelerator is created there, above the first draw)."""
    if facts.home_kind == "module":
        return []
    return [
        (site.line, site.end_line)
        for node in module.body
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef)) and not is_main_guard(node)
        if (site := facts.origins.site(node)) is not None
    ]


def _agreed_draws(facts: ScriptFacts, spans: list[tuple[int, int]]) -> list[Site]:
    """The draws that run after the accelerator can exist: those outside the statements that
    run on import (``spans``)."""
    return [site for site in locality_of(facts).shared_draws if not _within(site, spans)]


def _import_draws(facts: ScriptFacts, spans: list[tuple[int, int]]) -> list[Site]:
    """The draws made on import, before the accelerator can exist (a library module's run when
    the program's entry imports it: its entry agrees, not it)."""
    if facts.home_kind == "library":
        return []
    return [site for site in locality_of(facts).shared_draws if _within(site, spans)]


def _within(site: Site, spans: list[tuple[int, int]]) -> bool:
    return any(start <= site.line <= end for start, end in spans)


#: Each global generator whose state Accelerate's target broadcasts as an object: its module,
#: getter, setter and the import its module needs.
_GENERATOR_STATES = (
    ("random", "getstate", "setstate", "import random"),
    ("numpy", "random.get_state", "random.set_state", "import numpy"),
    ("torch", "get_rng_state", "set_rng_state", "import torch"),
)


def _agreeing_code(facts: ScriptFacts, options: Options) -> tuple[list[str], list[str]]:
    """The statements that make the processes agree, and the imports they need."""
    accelerator = accelerator_name(facts)
    if options.target == "runtime":
        return [f"{accelerator}.{AGREEING_METHOD}()"], []
    imports = [f"from accelerate.utils import broadcast_object_list, {AGREEING_FUNCTION}"]
    lines = _state_broadcasts(facts, ("random", "numpy"), imports)
    lines.append(f'{AGREEING_FUNCTION}(["torch", "cuda"] if {accelerator}.device.type == "cuda" else ["torch"])')
    return lines, imports


def _agreeing_code_on_import(facts: ScriptFacts, options: Options) -> tuple[list[str], list[str]]:
    """The statements that make the processes agree where no accelerator exists yet (they join
    the process group), and the imports they need."""
    if options.target == "runtime":
        return ["PartialState().agree_random_state()"], [f"from {options.accelerate_module} import PartialState"]
    imports = ["from accelerate.utils import broadcast_object_list"]
    return _state_broadcasts(facts, ("random", "numpy", "torch"), imports), imports


def _state_broadcasts(facts: ScriptFacts, generators: tuple[str, ...], imports: list[str]) -> list[str]:
    """``random.setstate(broadcast_object_list([random.getstate()])[0])`` for each of
    ``generators`` the script imports (torch's always), adding to ``imports`` what they need."""
    lines = []
    for qualified, getter, setter, import_line in _GENERATOR_STATES:
        if qualified not in generators or (qualified != "torch" and not _imports_module(facts, qualified)):
            continue
        local = _module_name(facts, qualified)
        if local is None:
            local = qualified
            imports.append(import_line)
        lines.append(f"{local}.{setter}(broadcast_object_list([{local}.{getter}()])[0])")
    return lines


def _imports_module(facts: ScriptFacts, qualified: str) -> bool:
    return any(value == qualified or value.startswith(qualified + ".") for value in facts.imports.values())


def _module_name(facts: ScriptFacts, qualified: str) -> str | None:
    """The name the script binds the module ``qualified`` to (``np`` for ``numpy``), if any."""
    return next((local for local, value in facts.imports.items() if value == qualified), None)


class _InsertAfterCreation(cst.CSTTransformer):
    """Puts ``statements`` right after the statement creating the accelerator, in whichever block
    holds it (the module, the ``__main__`` block, a function)."""

    def __init__(self, facts: ScriptFacts, statements: Sequence[cst.BaseStatement]) -> None:
        super().__init__()
        self.facts = facts
        self.statements = list(statements)
        self.done = False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False  # the creation is a statement of a block: nothing to find inside one

    def _insert(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        if self.done:
            return None
        index = creation_index(body, self.facts)
        if index is None:
            return None
        self.done = True
        return [*body[: index + 1], *self.statements, *body[index + 1 :]]

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = self._insert(updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = self._insert(updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)
