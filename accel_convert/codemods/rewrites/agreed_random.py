"""ACC124 agreed-random: a module-level random tensor drawn before any seed is made the same on every process.

``W_target = torch.randn(4, 1) * 5`` at the top of pytorch/examples' regression script is the
function the model must learn; drawn before any seed, every process draws its own, DDP averages
gradients towards several targets at once, and the loss that should end training never gets
there (on two processes the run never stopped). Any seed would do for a script that never
seeds, but choosing one is the script's author's business; what the conversion can do without
changing what one process computes is make the processes agree on rank 0's draw: right after the
accelerator exists (and after the draws), ``W_target, b_target =
broadcast_object_list([W_target, b_target])`` (an object collective: it works with NCCL and a
tensor on the CPU alike, and keeps each tensor's device).

Only module-level assignments of tensors made of torch draws (``torch.randn``, ``torch.rand``,
``torch.randint``..., not given their own ``generator=``; not a dataset, loader or module built
from them), in a script that creates the accelerator at module level
and reads none of them at module level before the broadcast; NumPy draws and the rest stay
reported (``ACC923``).
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.imports import add_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.random_draws import agreed_names, is_seeding_call, unseeded_draw
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import binds_name, calls_in, name_assigned
from accel_convert.codemods.engine.walk import variables_read

FUNCTION = "broadcast_object_list"


class AgreedRandom(Rule):
    code = "ACC124"
    name = "agreed-random"
    examples = (
        Example(
            before="""
                from itertools import count

                import torch
                import torch.nn.functional as F

                W_target = torch.randn(4, 1) * 5


                def get_batch(batch_size=32):
                    x = torch.randn(batch_size, 4)
                    return x, x.mm(W_target)


                fc = torch.nn.Linear(4, 1)
                for batch_idx in count(1):
                    batch_x, batch_y = get_batch()
                    fc.zero_grad()
                    output = F.smooth_l1_loss(fc(batch_x), batch_y)
                    output.backward()
                    for param in fc.parameters():
                        param.data.add_(-0.1 * param.grad)
                    if batch_idx == 100:
                        break
            """,
            after="""
                from itertools import count

                import torch
                import torch.nn.functional as F
                from accel_convert.runtime import Accelerator
                from accel_convert.runtime.utils import broadcast_object_list

                W_target = torch.randn(4, 1) * 5


                def get_batch(batch_size=32):
                    x = torch.randn(batch_size, 4)
                    return x, x.mm(W_target)


                accelerator = Accelerator()
                W_target = broadcast_object_list([W_target])[0]
                fc = torch.nn.Linear(4, 1)
                fc = accelerator.prepare(fc)
                for batch_idx in count(1):
                    batch_x, batch_y = get_batch()
                    fc.zero_grad()
                    output = F.smooth_l1_loss(fc(batch_x), batch_y)
                    accelerator.backward(output)
                    for param in fc.parameters():
                        param.data.add_(-0.1 * param.grad)
                    if batch_idx == 100:
                        break
            """,
        ),
        Example(
            # A loader built from draws is no tensor: broadcasting it would pickle the loader
            # (and fail on the lambda); the unseeded draw stays the script's business.
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                loader = DataLoader(
                    TensorDataset(torch.randn(64, 8), torch.randn(64, 1)),
                    batch_size=8,
                    collate_fn=lambda rows: [torch.stack(column) for column in zip(*rows)],
                )
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(data), target).backward()
                    optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                accelerator = Accelerator()

                loader = DataLoader(
                    TensorDataset(torch.randn(64, 8), torch.randn(64, 1)),
                    batch_size=8,
                    collate_fn=lambda rows: [torch.stack(column) for column in zip(*rows)],
                )
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for data, target in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(data), target))
                    optimizer.step()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        body = list(module.body)
        accelerator = accelerator_name(facts)
        created = next((i for i, s in enumerate(body) if binds_name([s], accelerator)), None)
        if created is None:
            return module, []
        draws: dict[str, int] = {}  # name → index of its module-level draw
        for index, statement in enumerate(body):
            if isinstance(statement, cst.SimpleStatementLine) and any(
                is_seeding_call(c, facts) for c in calls_in(statement)
            ):
                break  # seeded from here on: every process draws the same
            name = _drawn_name(statement, facts)
            if name is not None:
                draws[name] = index
        for name in agreed_names(module):  # made to agree already (a converted script)
            draws.pop(name, None)
        if not draws:
            return module, []
        after = max(created, *draws.values())
        # A module-level statement that reads a draw before the broadcast keeps its own values.
        agreed = [
            name
            for name, index in draws.items()
            if not any(
                name in variables_read(statement)
                for statement in body[index + 1 : after + 1]
                if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
            )
        ]
        if not agreed:
            return module, []
        listed = ", ".join(agreed)
        code = f"{listed} = {FUNCTION}([{listed}])" + ("[0]" if len(agreed) == 1 else "")
        line = cst.parse_statement(code)
        body.insert(after + 1, line)
        converted = add_import(
            module.with_changes(body=body),
            cast(
                cst.SimpleStatementLine,
                cst.parse_statement(f"from {options.accelerate_module}.utils import {FUNCTION}"),
            ),
            options.import_style,
        )
        changes = []
        for name in agreed:
            site = facts.origins.site(body[draws[name]])
            if site is not None:
                message = f"{name} drawn at random before any seed: every process takes rank 0's draw ({FUNCTION})"
                changes.append(report_at(site, self.code, message, fixed=True))
        return converted, changes


def _drawn_name(statement: cst.BaseStatement, facts: ScriptFacts) -> str | None:
    """``NAME`` of a module-level ``NAME = <expression of unseeded torch draws>``."""
    assigned = name_assigned(statement)
    if assigned is None:
        return None
    name, value = assigned
    calls = calls_in(value)
    draws = [call for call in calls if unseeded_draw(call, facts)]
    if not draws or not all(_tensor_op(call, facts) for call in calls):
        return None
    return name


def _tensor_op(call: cst.Call, facts: ScriptFacts) -> bool:
    """A call that makes or transforms a tensor: a torch function (``torch.randn``, ``torch.cat``)
    or a method (``.mm()``, ``.cuda()``). A dataset, loader, module or a call of the script's own
    (``DataLoader(TensorDataset(torch.randn(...)))``) is no tensor: broadcasting it would pickle
    the whole object, and fail on a lambda ``collate_fn``."""
    qualified = facts.qualified_name(call.func)
    if qualified is None:
        return isinstance(call.func, cst.Attribute)
    return qualified.startswith("torch.") and not qualified.startswith(("torch.utils.", "torch.nn.", "torch.optim."))
