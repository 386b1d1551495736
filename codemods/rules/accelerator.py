"""ACC101 accelerator: import ``Accelerator`` and create one accelerator, early.

The accelerator sets up the process group and picks the device, so it is created before anything
uses the device: at the top of the function that builds the model and optimizer (right after the
command line is parsed, when that happens there), or — for scripts without such a function — after
argument parsing in the ``__main__`` block or module. Never at import time of a module that
DataLoader workers re-import: a module-level script without a ``__main__`` guard gets it just before
the first training object, not among its imports. A script that already creates one is left alone.
"""

from __future__ import annotations

import libcst as cst

from codemods.engine.facts import ScriptFacts
from codemods.engine.model import Change, Options
from codemods.engine.rule import Example, Rule
from codemods.engine.syntax import assigned_in, first_statement_index, parses_arguments, statement
from codemods.engine.transformers import HomeBlockTransformer


def import_statement(options: Options, name: str = "Accelerator") -> cst.SimpleStatementLine:
    """``from runtime import Accelerator`` (or ``from accelerate import ...`` for that target)."""
    built = statement(f"from {options.accelerate_module} import {name}")
    assert isinstance(built, cst.SimpleStatementLine)
    return built


def imports_from(module: cst.Module, package: str, name: str) -> bool:
    """Whether the module already has ``from <package> import <name>`` at its top level."""
    for line in module.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if (
                isinstance(small, cst.ImportFrom)
                and isinstance(small.module, cst.Name)
                and small.module.value == package
                and not isinstance(small.names, cst.ImportStar)
                and any(alias.evaluated_name == name for alias in small.names)
            ):
                return True
    return False


def add_import(module: cst.Module, line: cst.SimpleStatementLine) -> cst.Module:
    """Insert ``line`` after the module's leading block of imports (docstring, __future__ first)."""
    body = list(module.body)
    index = first_statement_index(body)
    last_import = None
    for position in range(index, len(body)):
        node = body[position]
        if not (isinstance(node, cst.SimpleStatementLine) and all(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in node.body
        )):
            break
        last_import = position
    insert_at = last_import + 1 if last_import is not None else index
    body.insert(insert_at, line)
    return module.with_changes(body=body)


class _CreateAccelerator(HomeBlockTransformer):
    def edit_home(self, body: list[cst.BaseStatement], anchor: cst.CSTNode) -> list[cst.BaseStatement]:
        index = creation_index(body, self.facts, at_top=self.facts.home_kind == "function")
        anchor_node = body[index] if index < len(body) else anchor
        created = statement(f"{self.accelerator} = Accelerator()")
        self.report(anchor_node if index < len(body) else anchor, Accelerator.code, f"create the accelerator: {self.accelerator} = Accelerator()", header_only=True)
        return [*body[:index], created, *body[index:]]


def creation_index(body: list[cst.BaseStatement], facts: ScriptFacts, *, at_top: bool) -> int:
    """Right after argument parsing, but before the first statement that binds the device or a
    training object; a function with no argument parsing gets it at its top."""
    start = first_statement_index(body)
    users = facts.device_names | facts.cuda_flags | facts.trained_objects
    first_use = next(
        (i for i in range(start, len(body)) if assigned_in(body[i]) & users), len(body)
    )
    parsed = [i + 1 for i in range(start, first_use) if parses_arguments(body[i])]
    if parsed:
        return parsed[-1]
    return start if at_top else first_use


class Accelerator(Rule):
    code = "ACC101"
    name = "accelerator"
    examples = (
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset
                from runtime import Accelerator


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
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
        return facts.existing_accelerator is None and facts.has_accelerator

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _CreateAccelerator(facts)
        converted = module.visit(transformer)
        if not imports_from(converted, options.accelerate_module, "Accelerator"):
            with_import = add_import(converted, import_statement(options))
            facts.origins.carry(converted, with_import)
            converted = with_import
        return converted, transformer.changes(module)
