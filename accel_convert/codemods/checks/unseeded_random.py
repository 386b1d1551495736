"""ACC923 unseeded-random-data: random data created before any seed (at module level, or a random split in a file that never seeds) differs on every process.

Every process runs the module, so ``W_target = torch.randn(4, 1)`` (the target a regression
fits) or ``X = torch.randn(1000, 10)`` (a synthetic dataset) drawn before any seed holds
different values on each rank: each one fits its own target or shards its own dataset, while DDP
averages their gradients as if they trained one model on one task. Seeding first (accelerate's
``set_seed(...)`` or ``torch.manual_seed(...)``, the same seed on every process) makes the draws
equal. The converter cannot choose the seed for the script: it makes the processes take rank 0's
random generators above the draws instead (``ACC124`` agreed-random: where the accelerator is
created, or on import for a module-level draw of a script that trains in ``main()``). What it
cannot make agree it reports and leaves as it is: the draws of a script already written for
Accelerate, which creates its own accelerator. Which draws count is the process-locality owner's
answer (the one ``ACC124`` agrees): draws handed straight to a dataset
(``TensorDataset(torch.randn(64, 4))``) do, since the loader shards one dataset across the
processes; inputs handed straight to a model do not. Draws given their own ``generator=`` are left
alone, as are draws after any call of a function whose name says seed (``torch.manual_seed``,
``set_seed``, ``np.random.seed``).

A dataset split at random in a file that never seeds (``random_split(ds, [400, 200])``
without ``generator=``, scikit-learn's ``train_test_split`` without ``random_state=``) is reported
too: each process draws its own split, so one process trains on samples another validates on,
and the gathered validation counts some samples twice and misses others. So is an in-place
shuffle from numpy's or Python's global generator (``np.random.shuffle(indices)`` before
``indices[:split]``, ``random.shuffle``) in a file that seeds torch at most: ``torch.manual_seed``
leaves those generators as they were. Which shuffles count is the process-locality owner's answer
too: one an augmentation makes per sample (in a dataset's ``__getitem__``, or a helper only such
code calls, in this module or another of the program) is each process's own on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.random_draws import (
    agreed_names,
    is_agreeing_call,
    is_draw,
    is_seeding_call,
    unseeded_draw,
)
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import calls_in, expression_code, is_main_guard
from accel_convert.codemods.engine.torch_names import (
    IN_PLACE_SHUFFLES,
    RANDOM_SPLITS,
    TORCH_ONLY_SEEDS,
)
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.model.locality import locality, locality_of

SHUFFLE_MESSAGE = (
    "{function}(...) shuffles with an unseeded generator: each process gets its own order, "
    "so a train/validation split made from it differs per process (one trains on samples another "
    "validates on); seed that generator first, the same on every process (accelerate's set_seed(...) "
    "seeds them all)"
)


class UnseededRandomData(Rule):
    code = "ACC923"
    name = "unseeded-random-data"
    providers = (locality,)
    fixes = {
        "ACC923": (
            "Seed before the random data is made, the same seed on every process: add ``set_seed(0)`` at the top of the script, before the first draw or split (import it from where the converted script imports ``Accelerator``: ``accel_convert.runtime``, or ``accelerate.utils`` with ``--target accelerate``), or ``torch.manual_seed(0)`` / ``np.random.seed(0)`` for the generator used."
        ),
    }
    examples = (
        Example(
            # Written for Accelerate already: its own accelerator, no agreement added.
            before="""
                import numpy as np
                import torch
                import torch.nn.functional as F
                from accelerate import Accelerator

                W_target = torch.from_numpy(np.random.randn(4, 1) * 5).float()


                def get_batch(batch_size=32):
                    x = torch.randn(batch_size, 4)
                    return x, x.mm(W_target)


                def main():
                    accelerator = Accelerator()
                    fc = torch.nn.Linear(4, 1)
                    optimizer = torch.optim.SGD(fc.parameters(), lr=0.1)
                    fc, optimizer = accelerator.prepare(fc, optimizer)
                    for step in range(100):
                        batch_x, batch_y = get_batch()
                        optimizer.zero_grad()
                        loss = F.smooth_l1_loss(fc(batch_x), batch_y)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message=(
                "W_target is drawn at random on every process before any seed: each process gets its own "
                "values (its own target or data); seed first, the same on every process "
                "(accelerate's set_seed(...) or torch.manual_seed(...))"
            ),
        ),
        Example(
            before="""
                import numpy as np
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, Subset, TensorDataset

                torch.manual_seed(0)
                dataset = TensorDataset(torch.randn(100, 8), torch.randn(100, 1))
                indices = list(range(len(dataset)))
                np.random.shuffle(indices)


                def main():
                    train_loader = DataLoader(Subset(dataset, indices[20:]), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message=SHUFFLE_MESSAGE.format(function="np.random.shuffle"),
        ),
        Example(
            before="""
                import numpy as np
                import torch
                import torch.nn.functional as F

                torch.manual_seed(0)
                np.random.seed(0)
                W_target = torch.from_numpy(np.random.randn(4, 1) * 5).float()


                def get_batch(batch_size=32):
                    x = torch.randn(batch_size, 4)
                    return x, x.mm(W_target)


                fc = torch.nn.Linear(4, 1)
                optimizer = torch.optim.SGD(fc.parameters(), lr=0.1)
                for step in range(100):
                    batch_x, batch_y = get_batch()
                    optimizer.zero_grad()
                    loss = F.smooth_l1_loss(fc(batch_x), batch_y)
                    loss.backward()
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
        Example(
            # An augmentation: the shuffle runs per sample, each process's own, and splits nothing.
            before="""
                import random

                import torch
                from torch.utils.data import DataLoader, Dataset


                def jitter(x):
                    steps = [lambda v: v * 1.05, lambda v: v + 0.01]
                    random.shuffle(steps)
                    for step in steps:
                        x = step(x)
                    return x


                class Augmented(Dataset):
                    def __len__(self):
                        return 64

                    def __getitem__(self, i):
                        return jitter(torch.full((4,), float(i))), i % 2


                torch.manual_seed(0)
                model = torch.nn.Linear(4, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in DataLoader(Augmented(), batch_size=8, shuffle=True):
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and any(
            is_draw(qualified) or qualified in RANDOM_SPLITS or qualified in IN_PLACE_SHUFFLES
            for qualified in facts.called
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        changes: list[Change] = []
        _report_draws(module.body, facts, changes, seeded=False, agreed=agreed_names(module))
        _report_unseeded_splits(module, facts, changes)
        return module, changes


def _report_unseeded_splits(module: cst.Module, facts: ScriptFacts, changes: list[Change]) -> None:
    """Random dataset splits without their own seed in a file with no seeding call at all, and
    in-place shuffles (``np.random.shuffle(indices)``) in a file that seeds torch at most."""
    if facts.called.isdisjoint(RANDOM_SPLITS) and facts.called.isdisjoint(IN_PLACE_SHUFFLES):
        return  # the analysis saw no split: no walk of the file
    every_call = [node for node in module_nodes(module) if isinstance(node, cst.Call)]
    seeds = [call for call in every_call if is_seeding_call(call, facts)]
    calls = _shared(_not_agreed(module, every_call, facts), facts)
    if all(facts.qualified_name(call.func) in TORCH_ONLY_SEEDS for call in seeds):
        # torch.manual_seed leaves numpy's and random's generators as they were.
        for call in calls:
            if facts.qualified_name(call.func) not in IN_PLACE_SHUFFLES:
                continue
            site = facts.origins.site(call)
            if site is not None:
                changes.append(report_at(site, UnseededRandomData.code, _shuffle_message(call)))
    if seeds:
        return
    for call in calls:
        keyword = RANDOM_SPLITS.get(facts.qualified_name(call.func) or "")
        if keyword is None or any(arg.keyword is not None and arg.keyword.value == keyword for arg in call.args):
            continue
        site = facts.origins.site(call)
        if site is None:
            continue
        message = (
            f"{expression_code(call.func)}(...) splits the data at random with no seed: each process draws its "
            "own split, so one trains on samples another validates on and the gathered validation counts some "
            f"samples twice; give it {keyword}= with a fixed seed, or seed first, the same on every process "
            "(accelerate's set_seed(...) or torch.manual_seed(...))"
        )
        changes.append(report_at(site, UnseededRandomData.code, message))


def _shared(calls: list[cst.Call], facts: ScriptFacts) -> list[cst.Call]:
    """``calls`` but those the process-locality owner says each process makes for itself (an
    augmentation's shuffle in a dataset's ``__getitem__``)."""
    shared = set(locality_of(facts).shared_draws)
    return [call for call in calls if facts.origins.site(call) in shared]


def _not_agreed(module: cst.Module, calls: list[cst.Call], facts: ScriptFacts) -> list[cst.Call]:
    """``calls`` but those that run after the processes took rank 0's generators (ACC124): with
    an agreement, only the module-level code of a script whose home is a function or the
    ``__main__`` block runs before it (on import)."""
    if not any(is_agreeing_call(call) for call in calls):
        return calls
    if facts.home_kind == "module":
        return []
    on_import = {
        id(node)
        for statement in module.body
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not is_main_guard(statement)
        for node in calls_in(statement)
    }
    return [call for call in calls if id(call) in on_import]


def _shuffle_message(call: cst.Call) -> str:
    return SHUFFLE_MESSAGE.format(function=expression_code(call.func))


def _report_draws(
    statements: Sequence[cst.BaseStatement],
    facts: ScriptFacts,
    changes: list[Change],
    *,
    seeded: bool,
    agreed: frozenset[str] | set[str] = frozenset(),
) -> bool:
    """Report the module-level assignments (also in the ``__main__`` block) of random draws made
    before any seeding call; returns whether a seed was met."""
    for statement in statements:
        if is_main_guard(statement):
            assert isinstance(statement, cst.If)
            seeded = _report_draws(statement.body.body, facts, changes, seeded=seeded, agreed=agreed)  # type: ignore[arg-type]
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        if any(is_seeding_call(call, facts) or is_agreeing_call(call) for call in calls_in(statement)):
            seeded = True
        elif not seeded:
            changes.extend(_unseeded_draws(statement, facts, agreed))
    return seeded


def _unseeded_draws(
    statement: cst.SimpleStatementLine, facts: ScriptFacts, agreed: frozenset[str] | set[str]
) -> list[Change]:
    """The assignments of ``statement`` that bind a random draw, but those of names the
    conversion broadcasts from rank 0 once the processes exist (``agreed``)."""
    found = []
    for small in statement.body:
        targets = _draw_targets(small, facts)
        if not targets or all(isinstance(target, cst.Name) and target.value in agreed for target in targets):
            continue
        site = facts.origins.site(small) or facts.origins.site(statement)
        if site is None:
            continue
        name = ", ".join(expression_code(target) for target in targets)
        message = (
            f"{name} is drawn at random on every process before any seed: each process gets its own "
            "values (its own target or data); seed first, the same on every process "
            "(accelerate's set_seed(...) or torch.manual_seed(...))"
        )
        found.append(report_at(site, UnseededRandomData.code, message))
    return found


def _draw_targets(small: cst.BaseSmallStatement, facts: ScriptFacts) -> list[cst.BaseExpression]:
    """What an assignment binds when its value makes a random draw no seed makes agree, one the
    process locality owner says the processes share (not an input handed to a model); nothing
    for any other statement."""
    if not isinstance(small, (cst.Assign, cst.AnnAssign)) or small.value is None:
        return []
    shared = set(locality_of(facts).shared_draws)
    if not any(unseeded_draw(call, facts) and facts.origins.site(call) in shared for call in calls_in(small.value)):
        return []
    return [target.target for target in small.targets] if isinstance(small, cst.Assign) else [small.target]
