"""The locality owner (``model/locality.py``): its :class:`Locality` answer for a module, and
:class:`RankReach`, which the rule transformer asks whether every rank runs a statement alike.

Each shape is asked the same questions: module-level code, a function, a class's method. Each
holds a rank-guarded region (only some processes run it) and a sum of this process's batch losses
(its own value on each process).
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

import accel_convert.codemods as codemods_package
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.names import builtins_at
from accel_convert.codemods.engine.positions import POSITIONED_TYPES
from accel_convert.codemods.engine.syntax import nodes_in
from accel_convert.codemods.engine.walk import child_nodes
from accel_convert.codemods.model.locality import (
    Locality,
    RankReach,
    adds_up,
    counted_by_one,
    grown_in,
    locality,
    locality_of,
    mean_over_rows,
    per_batch_values,
    rows_added,
    run_once_per_batch,
)
from tests.codemods.support import code

MODULE_LEVEL = code(
    """
    import tempfile

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    rank = 0
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.MSELoss()
    workdir = tempfile.mkdtemp()
    for epoch in range(3):
        running = 0.0
        for data, target in loader:
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()
            running += loss.item()
        if running < 0.1:
            break
        if rank == 0:
            print(running)
    """
)

IN_A_FUNCTION = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def train(rank):
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        for epoch in range(3):
            total = 0.0
            for data, target in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(data), target)
                loss.backward()
                optimizer.step()
                total += loss.item()
            mean = total / len(loader)
            scheduler.step(mean)
            if rank == 0:
                print(mean)


    if __name__ == "__main__":
        train(0)
    """
)

IN_A_METHOD = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    class Trainer:
        def __init__(self, accelerator):
            self.accelerator = accelerator
            self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            self.model = nn.Linear(8, 1)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

        def fit(self):
            criterion = nn.CrossEntropyLoss()
            ignored = nn.L1Loss(reduction="sum")
            total = 0.0
            for data, target in self.loader:
                self.optimizer.zero_grad()
                loss = criterion(self.model(data), target)
                loss.backward()
                self.optimizer.step()
                total += loss.item()
            if total > 1.0:
                print("high")
            if self.accelerator.is_main_process:
                print(total)
            return total


    if __name__ == "__main__":
        Trainer(None).fit()
    """
)


#: Each shape holds a sum grown in the loop that trains, read by an ``if`` in another place: the
#: epoch loop at module level, ``main()`` through what ``train_epoch()`` returns, a training
#: class's ``fit()`` through what its ``train_epoch()`` method returns.
SUM_TESTED_AT_MODULE_LEVEL = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        total = 0.0
        steps = 0
        for data, target in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(data), target)
            loss.backward()
            optimizer.step()
            total += loss.item()
            steps += 1
        train_loss = total / len(loader)
        if train_loss < 1.0:
            torch.save(model.state_dict(), "low.pt")
        if epoch == 2:
            torch.save(model.state_dict(), "last.pt")
    """
)

SUM_RETURNED_BY_A_FUNCTION = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def train_epoch(model, loader, optimizer):
        total = 0.0
        for data, target in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(data), target)
            loss.backward()
            optimizer.step()
            total += loss.item()
        return total / len(loader)


    def evaluate(model, loader):
        total = 0.0
        with torch.no_grad():
            for data, target in loader:
                total += nn.functional.mse_loss(model(data), target).item()
        return total / len(loader)


    def main():
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        best = float("inf")
        for epoch in range(3):
            train_loss = train_epoch(model, loader, optimizer)
            val_loss = evaluate(model, loader)
            if train_loss < best:
                torch.save(model.state_dict(), "best.pt")
            if epoch == 2:
                torch.save(model.state_dict(), "last.pt")


    if __name__ == "__main__":
        main()
    """
)

SUM_RETURNED_BY_A_METHOD = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    class Trainer:
        def __init__(self):
            self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            self.model = nn.Linear(8, 1)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

        def train_epoch(self):
            losses = []
            for data, target in self.loader:
                self.optimizer.zero_grad()
                loss = nn.functional.mse_loss(self.model(data), target)
                loss.backward()
                self.optimizer.step()
                losses.append(loss.item())
            return sum(losses) / len(losses)

        def fit(self, epochs):
            for epoch in range(epochs):
                train_loss = self.train_epoch()
                if train_loss < 1.0:
                    torch.save(self.model.state_dict(), "low.pt")
                if epoch == 2:
                    torch.save(self.model.state_dict(), "last.pt")


    if __name__ == "__main__":
        Trainer().fit(3)
    """
)


def answer(source: str) -> tuple[ScriptFacts, Locality]:
    facts = analyse(cst.parse_module(source), source)
    assert locality.name in facts.rule_results, "no rule lists the locality provider: the analysis does not run it"
    return facts, locality_of(facts)


def lines_of(source: str, sites: tuple[object, ...]) -> list[str]:
    lines = source.splitlines()
    return [lines[site.line - 1].strip() for site in sites]  # type: ignore[attr-defined]


def test_module_level_code() -> None:
    """A per-process path, a sum grown in the loop that trains (the ``break`` it decides can be
    agreed), the region under ``if rank == 0:`` and a loss averaging over the batch."""
    facts, found = answer(MODULE_LEVEL)
    assert found.per_process_paths == {"workdir"}
    assert found.per_process_sums == {"running"}
    assert lines_of(MODULE_LEVEL, found.rank_guarded) == ["if rank == 0:"]
    assert found.rank_guarded_at(MODULE_LEVEL.splitlines().index("        print(running)") + 1)
    assert not found.rank_guarded_at(MODULE_LEVEL.splitlines().index("    if running < 0.1:") + 1)
    assert lines_of(MODULE_LEVEL, found.agreeable_breaks) == ["if running < 0.1:"]
    assert found.rank_dependent_breaks == ()
    assert found.batch_mean_losses == {"<module>": {"criterion"}}
    assert found.per_process_values == {"workdir", "running"}


def test_in_a_function() -> None:
    """A sum, what is computed from it (``mean``), the scheduler step it decides, and the region
    under a rank handed in as a parameter."""
    _, found = answer(IN_A_FUNCTION)
    assert {"total", "mean"} <= found.per_process_sums
    assert lines_of(IN_A_FUNCTION, found.rank_dependent_schedule_steps) == ["scheduler.step(mean)"]
    assert lines_of(IN_A_FUNCTION, found.rank_guarded) == ["if rank == 0:"]
    assert found.per_process_paths == frozenset()


def test_in_a_class_method() -> None:
    """The training class's main-process guard, its sum, and its batch-mean loss (not the one
    summing over the batch)."""
    _, found = answer(IN_A_METHOD)
    assert found.per_process_sums == {"total"}
    assert lines_of(IN_A_METHOD, found.rank_guarded) == ["if self.accelerator.is_main_process:"]
    assert found.batch_mean_losses == {"Trainer": {"criterion"}}


def test_per_rank_sums_at_module_level() -> None:
    """The sum and the mean made from it, under the module; not the step counter (every rank
    runs as many steps)."""
    _, found = answer(SUM_TESTED_AT_MODULE_LEVEL)
    assert found.per_rank_sums == {"<module>": {"total", "train_loss"}}


def test_per_rank_sums_returned_by_a_function() -> None:
    """What ``train_epoch()`` returns is this process's in ``main()``, which binds it; each sum
    under the function binding it. ``evaluate()``'s ``total`` is another name than
    ``train_epoch()``'s: neither it nor the ``val_loss`` it returns is one."""
    _, found = answer(SUM_RETURNED_BY_A_FUNCTION)
    assert found.per_rank_sums == {"train_epoch": {"total"}, "main": {"train_loss"}}


def test_per_rank_sums_returned_by_a_method() -> None:
    """A list of batch losses, and what the method returning its mean hands ``fit()`` through
    ``self.train_epoch()``: under the class, as the analysis keys its methods."""
    _, found = answer(SUM_RETURNED_BY_A_METHOD)
    assert found.per_rank_sums == {"Trainer": {"losses", "train_loss"}}


def test_summed_per_rank_adds_what_the_converted_function_sums() -> None:
    """The module's answer, and what the function as converted so far adds up in a loop that
    gathers nothing (an evaluation sum no rule gathered); not once a gather feeds it."""
    facts, found = answer(SUM_RETURNED_BY_A_FUNCTION)
    evaluation = cst.parse_module(
        code(
            """
            def evaluate(model, loader):
                correct = 0
                for x, y in loader:
                    correct += (model(x).argmax(1) == y).sum().item()
                return correct
            """
        )
    ).body[0]
    gathered = cst.parse_module(
        code(
            """
            def evaluate(model, loader):
                correct = 0
                for x, y in loader:
                    out, y = accelerator.gather_for_metrics((model(x), y))
                    correct += (out.argmax(1) == y).sum().item()
                return correct
            """
        )
    ).body[0]
    assert isinstance(evaluation, cst.FunctionDef) and isinstance(gathered, cst.FunctionDef)
    assert found.summed_per_rank("evaluate", evaluation) == {"correct"}
    assert found.summed_per_rank("evaluate", gathered) == frozenset()
    assert found.summed_per_rank("train_epoch", None) == {"total"}
    assert locality_of(facts).summed_per_rank("<module>", None) == frozenset()


def loop_in(source: str, header: str) -> cst.For:
    """The ``for`` loop of ``source`` whose first line is ``header``."""
    module = cst.parse_module(source)
    loops = [
        node
        for node in nodes_in(module)
        if isinstance(node, cst.For) and module.code_for_node(node).strip().startswith(header)
    ]
    assert len(loops) == 1, header
    return loops[0]


@pytest.mark.parametrize(
    ("source", "header", "function", "means"),
    [
        # the module's criterion, called in the module's loop
        (MODULE_LEVEL, "for data, target in loader:", "<module>", {"loss"}),
        # a functional loss averaging over the batch, in a function
        (IN_A_FUNCTION, "for data, target in loader:", "train", {"loss"}),
        # a method's criterion, keyed by its class
        (IN_A_METHOD, "for data, target in self.loader:", "Trainer", {"loss"}),
        # the same loop read as another function's: its criterion is not that function's
        (IN_A_METHOD, "for data, target in self.loader:", "main", set()),
    ],
)
def test_per_batch_means(source: str, header: str, function: str, means: set[str]) -> None:
    """The names a loop binds to a loss averaging over this process's batch."""
    facts, found = answer(source)
    assert found.per_batch_means(loop_in(source, header).body, function, facts) == means


def test_averages_batch() -> None:
    """A loss summing over the batch (``reduction="sum"``) is no batch mean; a functional loss
    without ``reduction=`` is one, in any function."""
    facts, found = answer(IN_A_METHOD)
    calls = {
        text: call
        for text in ("criterion(out, y)", "ignored(out, y)", "nn.functional.mse_loss(out, y)")
        if isinstance(call := cst.parse_expression(text), cst.Call)
    }
    assert found.averages_batch(calls["criterion(out, y)"], "Trainer", facts)
    assert not found.averages_batch(calls["ignored(out, y)"], "Trainer", facts)
    assert found.averages_batch(calls["nn.functional.mse_loss(out, y)"], "main", facts)


@pytest.mark.parametrize(
    ("text", "summed", "by_one"),
    [
        ("total += loss.item()", "total", None),
        ("steps += 1", "steps", "steps"),
        ("total -= loss.item()", None, None),  # no running sum
        ("total = total + loss.item()", "total", None),  # written out: the += it means
        ("total = loss.item() + total", "total", None),
        ("total = other + loss.item()", None, None),
        ("total = total * 2", None, None),
    ],
)
def test_adds_up(text: str, summed: str | None, by_one: str | None) -> None:
    """The one reading of a running sum (``+=``, or written out), and of a counter of loop
    iterations."""
    statement = cst.parse_statement(text)
    assert isinstance(statement, cst.SimpleStatementLine)
    node = statement.body[0]
    found = adds_up(node)
    assert (found.target.value if found is not None else None) == summed  # type: ignore[attr-defined]
    counter = counted_by_one(node)
    assert (counter.value if counter is not None else None) == by_one  # type: ignore[attr-defined]


def enclosing(module: cst.Module, text: str) -> list[cst.CSTNode]:
    """The module and every node around the statement line reading ``text``, outermost first,
    the statement itself last (what the rule transformer's anchors hold while it visits it)."""
    path: list[cst.CSTNode] = []

    def find(node: cst.CSTNode) -> bool:
        path.append(node)
        if isinstance(node, cst.SimpleStatementLine) and module.code_for_node(node).strip() == text:
            return True
        if any(find(child) for child in child_nodes(node)):
            return True
        path.pop()
        return False

    assert find(module), text
    return path


#: Values each rank has for itself that are no sum: the last batch's loss at module level, a
#: number each rank read back from a file it wrote in a function, and, in a method, a count made
#: from gathered outputs (the same on every rank) beside the worst batch loss (not).
VALUES_EACH_RANK_HAS = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader

    train_loader = DataLoader(dataset, batch_size=8)
    model = nn.Linear(4, 1)
    for epoch in range(2):
        for x, y in train_loader:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            last = loss.item()
        if last < 0.5:
            torch.save(model.state_dict(), "last_low.pt")
        if epoch == 1:
            torch.save(model.state_dict(), "epoch.pt")


    def check(model, path):
        with open(path) as f:
            score = float(f.read())
        if score > 0.5:
            torch.save(model.state_dict(), "read_back.pt")


    class Trainer:
        def __init__(self):
            self.model = nn.Linear(4, 1)
            self.train_loader = DataLoader(dataset, batch_size=8)
            self.val_loader = DataLoader(dataset, batch_size=8)

        def fit(self):
            worst = 0.0
            for x, y in self.train_loader:
                loss = nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                worst = max(worst, loss.item())
            correct = 0
            for x, y in self.val_loader:
                output = self.model(x)
                output, y = self.accelerator.gather_for_metrics((output, y))
                correct += (output.argmax(1) == y).sum().item()
            if worst < 1.0:
                torch.save(self.model.state_dict(), "worst_low.pt")
            if correct > 10:
                torch.save(self.model.state_dict(), "correct.pt")
    """
)


#: A batch's index and a count over the loader's length are the same on every rank (a prepared
#: loader gives each as many batches): a save every N batches is reached alike (the GAN
#: tutorials' ``batches_done = epoch * len(dataloader) + i``); the batch's own loss is not.
BATCH_INDEX = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader


    def train(model, loader):
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            batches_done = 3 * len(loader) + i
            if batches_done % 10 == 0:
                torch.save(model.state_dict(), "every_ten.pt")
            if loss.item() < 0.1:
                torch.save(model.state_dict(), "low_loss.pt")
        for step in range(len(loader)):
            if step == 2:
                torch.save(model.state_dict(), "step_two.pt")


    loader = DataLoader(dataset, batch_size=8)
    """
)


#: The script's own ``open``, ``len`` and ``enumerate`` are no builtins: a value its ``open``
#: returns is no file read (a module-level ``from records import open``); a loop over
#: ``range(len(loader))`` with a parameter named ``len`` may run over the loader; the first item of
#: a method's own ``enumerate`` is no batch index.
SHADOWED_BUILTINS = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader
    from records import open

    loader = DataLoader(dataset, batch_size=8)
    model = nn.Linear(4, 1)
    best = open("best")
    if best > 0.5:
        torch.save(model.state_dict(), "own_open.pt")


    def train(model, loader, len):
        for step in range(len(loader)):
            loss = model(step)
        if step == 2:
            torch.save(model.state_dict(), "own_len.pt")


    class Trainer:
        def __init__(self):
            self.model = nn.Linear(4, 1)
            self.loader = DataLoader(dataset, batch_size=8)

        def fit(self):
            def enumerate(items):
                return zip(items, items)

            for i, (x, y) in enumerate(self.loader):
                loss = self.model(x)
            if i == 2:
                torch.save(self.model.state_dict(), "own_enumerate.pt")
    """
)


@pytest.mark.parametrize(
    ("source", "statement", "reached"),
    [
        (SHADOWED_BUILTINS, 'torch.save(model.state_dict(), "own_open.pt")', True),
        (SHADOWED_BUILTINS, 'torch.save(model.state_dict(), "own_len.pt")', False),
        (SHADOWED_BUILTINS, 'torch.save(self.model.state_dict(), "own_enumerate.pt")', False),
        (BATCH_INDEX, 'torch.save(model.state_dict(), "every_ten.pt")', True),
        (BATCH_INDEX, 'torch.save(model.state_dict(), "low_loss.pt")', False),
        (BATCH_INDEX, 'torch.save(model.state_dict(), "step_two.pt")', True),
        (MODULE_LEVEL, "workdir = tempfile.mkdtemp()", True),
        (MODULE_LEVEL, "optimizer.step()", True),  # in a loop over a loader, in a ``range`` loop
        (MODULE_LEVEL, "print(running)", False),  # under ``if rank == 0:``
        (IN_A_FUNCTION, "scheduler.step(mean)", True),
        (IN_A_FUNCTION, "print(mean)", False),  # under a rank the function is handed
        (IN_A_METHOD, "return total", True),
        (IN_A_METHOD, 'print("high")', False),  # under this process's sum
        (IN_A_METHOD, "print(total)", False),  # under the main-process guard
        # Under an ``if`` on a sum this process grew, at module level too, or on what a function
        # or a method of the class returned from one; not under one on the epoch.
        (SUM_TESTED_AT_MODULE_LEVEL, 'torch.save(model.state_dict(), "low.pt")', False),
        (SUM_TESTED_AT_MODULE_LEVEL, 'torch.save(model.state_dict(), "last.pt")', True),
        (SUM_RETURNED_BY_A_FUNCTION, 'torch.save(model.state_dict(), "best.pt")', False),
        (SUM_RETURNED_BY_A_FUNCTION, 'torch.save(model.state_dict(), "last.pt")', True),
        (SUM_RETURNED_BY_A_METHOD, 'torch.save(self.model.state_dict(), "low.pt")', False),
        (SUM_RETURNED_BY_A_METHOD, 'torch.save(self.model.state_dict(), "last.pt")', True),
        # Under an ``if`` on a value not known to be the same on every rank, in each shape; not
        # under one on the epoch or on a count of gathered outputs.
        (VALUES_EACH_RANK_HAS, 'torch.save(model.state_dict(), "last_low.pt")', False),
        (VALUES_EACH_RANK_HAS, 'torch.save(model.state_dict(), "epoch.pt")', True),
        (VALUES_EACH_RANK_HAS, 'torch.save(model.state_dict(), "read_back.pt")', False),
        (VALUES_EACH_RANK_HAS, 'torch.save(self.model.state_dict(), "worst_low.pt")', False),
        (VALUES_EACH_RANK_HAS, 'torch.save(self.model.state_dict(), "correct.pt")', True),
    ],
)
def test_every_rank_reaches(source: str, statement: str, reached: bool) -> None:
    """What the rule transformer asks before it inserts a collective: the enclosing statements
    decide, up to the enclosing function (its key: the module-level function, or the class)."""
    module = cst.parse_module(source)
    facts, found = answer(source)
    anchors = enclosing(module, statement)[:-1]
    # Names are answered where the statement stands, as the rule transformer answers them.
    scope = tuple(node.name.value for node in anchors if isinstance(node, (cst.FunctionDef, cst.ClassDef)))
    reach = RankReach(
        facts.loaders, lambda node: facts.qualified_name(node, scope), lambda node: facts.builtin(node, scope), found
    )
    function = next(
        (node.name.value for node in anchors if isinstance(node, (cst.FunctionDef, cst.ClassDef))), "<module>"
    )
    assert reach.every_rank_reaches(anchors, function) is reached


HELPERS_CALLED_WHERE_RANKS_DIFFER = code(
    """
    import os

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def mkdir_p(path):
        os.makedirs(path)


    def make_parents(path):
        mkdir_p(os.path.dirname(path))


    def ensure_dir(path):
        if not os.path.exists(path):
            os.makedirs(path)


    def log_epoch(epoch):
        os.makedirs(f"logs/{epoch}")


    def hook(path):
        os.makedirs(path)


    class Trainer:
        def __init__(self, loader):
            self.loader = loader
            self.model = nn.Linear(8, 1)

        def fit(self):
            for epoch in range(2):
                if not os.path.isdir("snapshots"):
                    ensure_dir("snapshots")
                log_epoch(epoch)


    def main():
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        for epoch in range(2):
            out = f"checkpoints/{epoch}"
            if not os.path.isdir(out):
                make_parents(out)
        Trainer(loader).fit()
        callbacks = [hook]


    if not os.path.isdir("runs"):
        mkdir_p("runs")
    main()
    """
)


def test_functions_called_where_the_ranks_differ() -> None:
    """A call under ``if not os.path.isdir(d):`` (module level, a function, a class's method)
    makes its function, and what that calls, one some rank may not call; a function called
    where every rank goes, or out of sight (a hook), is not."""
    _, found = answer(HELPERS_CALLED_WHERE_RANKS_DIFFER)
    assert found.called_on_some_ranks == {"mkdir_p", "make_parents", "ensure_dir"}


HELPERS_CALLED_IN_TRY = code(
    """
    import os


    def train():
        os.makedirs("runs")


    def save():
        os.makedirs("saved")


    def cleanup():
        os.makedirs("partial")


    def main():
        try:
            train()
            save()
        except KeyboardInterrupt:
            cleanup()


    if __name__ == "__main__":
        try:
            main()
        except KeyboardInterrupt:
            print("stopped")
    """
)


def test_the_first_call_of_a_try_is_made_by_every_rank() -> None:
    """``try: main()\nexcept KeyboardInterrupt:`` (module level, and in a function): every rank
    starts the body, so ``main()`` and ``train()`` keep their barriers; a later statement of the
    body (an earlier one may raise on one rank and be caught) and a handler's call are not."""
    _, found = answer(HELPERS_CALLED_IN_TRY)
    assert found.called_on_some_ranks == {"save", "cleanup"}


METHODS_CALLED_WHERE_RANKS_DIFFER = code(
    """
    import os


    class Trainer:
        def make_dir(self, d):
            os.makedirs(d)

        def note(self, d):
            os.makedirs(d)

        def snapshot(self, d):
            self.note(d)

        def log(self, d):
            os.makedirs(d)

        def fit(self):
            if not os.path.isdir("snapshots"):
                self.make_dir("snapshots")
            self.log("logs")


    def main():
        trainer = Trainer()
        if not os.path.isdir("best"):
            trainer.snapshot("best")
        trainer.fit()
    """
)


def test_methods_called_where_the_ranks_differ() -> None:
    """``self.make_dir(d)`` in a method and ``trainer.snapshot(d)`` on an instance ``main()``
    builds, each under ``if not os.path.isdir(d):``: those methods (keyed ``Class.method``) and
    what they call (``self.note``) are called on some ranks; ``self.log(...)``, called by every
    rank calling ``fit()``, is not."""
    _, found = answer(METHODS_CALLED_WHERE_RANKS_DIFFER)
    assert found.called_on_some_ranks == {"Trainer.make_dir", "Trainer.snapshot", "Trainer.note"}


@pytest.mark.parametrize(
    ("statement", "reached"),
    [
        ("os.makedirs(d)", False),  # make_dir's (the first method): called under a per-rank test
        ('self.log("logs")', True),  # fit's: every rank calls it
    ],
)
def test_every_rank_reaches_inside_a_method_as_its_calls(statement: str, reached: bool) -> None:
    """Inside a method, what the calls of that method decide (``Trainer.make_dir``), not the
    class's key, which every method shares."""
    module = cst.parse_module(METHODS_CALLED_WHERE_RANKS_DIFFER)
    facts, found = answer(METHODS_CALLED_WHERE_RANKS_DIFFER)
    anchors = enclosing(module, statement)[:-1]
    reach = RankReach(facts.loaders, facts.qualified_name, facts.builtin, found)
    assert reach.every_rank_reaches(anchors, "Trainer") is reached
    assert reach.called_on_some_ranks(anchors, "Trainer") is not reached


HELPERS_WHOSE_ERRORS_ARE_CAUGHT = code(
    """
    import os
    import sys


    def make_run_dir(d):
        os.makedirs(d)


    def make_parents(d):
        make_run_dir(os.path.dirname(d))


    def make_cache(d):
        os.makedirs(d)


    def make_logs(d):
        os.makedirs(d)


    def make_out(d):
        os.makedirs(d)


    def make_tmp(d):
        os.makedirs(d)


    def main():
        try:
            make_parents("runs/a/b")
        except FileExistsError:
            print("resuming")
        try:
            make_cache("cache")
        except (ValueError, OSError) as e:
            print(e)
        try:
            make_logs("logs")
        except OSError:
            print("no logs")
            sys.exit(1)
        try:
            make_out("out")
        except KeyboardInterrupt:
            pass
        try:
            pass
        except Exception:
            make_tmp("tmp")


    try:
        main()
    except KeyboardInterrupt:
        print("stopped")
    """
)


def test_functions_called_where_a_handler_catches_their_os_errors_and_goes_on() -> None:
    """``try: make_parents(d)`` / ``except FileExistsError:`` (and ``except (ValueError,
    OSError)``): their folder may fail on purpose, for the handler; so may what they call
    (``make_run_dir``). Not where the handler ends the run (``sys.exit(1)``), catches no
    ``OSError`` (``KeyboardInterrupt``: ``main()`` at module level, ``make_out``) or where the
    call is in the handler itself (``make_tmp``: this ``try`` catches nothing raised there). Each
    of them is the first statement of its ``try``, started by every rank."""
    _, found = answer(HELPERS_WHOSE_ERRORS_ARE_CAUGHT)
    assert found.called_in_try == {"make_parents", "make_run_dir", "make_cache"}
    assert found.called_on_some_ranks == {"make_tmp"}


@pytest.mark.parametrize(
    ("statement", "caught"),
    [
        ("os.makedirs(d)", True),  # make_run_dir's: called (through make_parents) in a try catching it
        ('make_logs("logs")', False),  # its handler ends the run
        ('make_out("out")', False),  # its handler catches KeyboardInterrupt only
        ('make_cache("cache")', True),  # in the body of a try catching OSError, which goes on
    ],
)
def test_error_caught_here(statement: str, caught: bool) -> None:
    """The owner's answer to the side effects rule: whether an ``OSError`` raised here may be
    caught by a handler that goes on."""
    module = cst.parse_module(HELPERS_WHOSE_ERRORS_ARE_CAUGHT)
    facts, found = answer(HELPERS_WHOSE_ERRORS_ARE_CAUGHT)
    # As the rule transformer holds them: the positioned statements around the line.
    anchors = [node for node in enclosing(module, statement)[:-1] if type(node) in POSITIONED_TYPES]
    function = next(node.name.value for node in anchors if isinstance(node, cst.FunctionDef))
    reach = RankReach(facts.loaders, facts.qualified_name, facts.builtin, found)
    assert reach.error_caught_here(anchors, function) is caught


CLASSES_BUILT_WHERE_RANKS_DIFFER = code(
    """
    import dataclasses
    import os


    class SnapshotDir:
        def __init__(self, root):
            self.root = root
            self.make()

        def make(self):
            os.makedirs(self.root)


    @dataclasses.dataclass
    class RunDir:
        root: str

        def __post_init__(self):
            os.makedirs(self.root)


    class BaseLog:
        def __init__(self, root):
            os.makedirs(root)


    class TextLog(BaseLog):
        def write(self, line):
            print(line)


    class Everywhere:
        def __init__(self, root):
            os.makedirs(root)


    def main():
        if not os.path.isdir("snapshots"):
            SnapshotDir("snapshots")
        if not os.path.isdir("runs"):
            RunDir("runs")
        if not os.path.isdir("logs"):
            TextLog("logs")
        Everywhere("shared")
    """
)


def test_classes_built_where_the_ranks_differ() -> None:
    """Building an instance under ``if not os.path.isdir(d):`` runs its class's constructor on
    some ranks (:func:`calls.constructor_method`): ``__init__`` and what it calls, a dataclass's
    ``__post_init__``, and for a class defining neither, its base's ``__init__``. A class built
    where every rank goes is not."""
    _, found = answer(CLASSES_BUILT_WHERE_RANKS_DIFFER)
    assert found.called_on_some_ranks == {
        "SnapshotDir.__init__",
        "SnapshotDir.make",
        "RunDir.__post_init__",
        "BaseLog.__init__",
    }


HELPERS_WHOSE_FETCH_ERRORS_ARE_CAUGHT = code(
    """
    from urllib.error import URLError

    import requests


    def fetch_labels(url):
        return requests.get(url).text


    def fetch_vocab(url):
        return requests.get(url).text


    def fetch_weights(url):
        return requests.get(url).content


    def main():
        try:
            fetch_labels("https://example.com/labels.txt")
        except requests.RequestException:
            print("no labels")
        try:
            fetch_vocab("https://example.com/vocab.txt")
        except URLError:
            print("no vocab")
        try:
            fetch_weights("https://example.com/w.bin")
        except ValueError:
            print("bad weights")
    """
)


def test_functions_called_where_a_fetch_error_is_caught() -> None:
    """``except requests.RequestException`` and ``except URLError`` (libraries' ``OSError``
    classes, by qualified name) catch a network fetch's error and go on: a fetch in the functions
    called there may fail on purpose, for the handler. Neither catches the ``FileExistsError`` of
    a folder made, so they are not called where an ``OSError`` of a folder is caught; ``except
    ValueError`` catches neither."""
    _, found = answer(HELPERS_WHOSE_FETCH_ERRORS_ARE_CAUGHT)
    assert found.called_where_fetch_caught == {"fetch_labels", "fetch_vocab"}
    assert found.called_in_try == set()


HELPERS_CALLED_UNDER_BUILTIN_TESTS = code(
    """
    import os
    import sys


    def export(path):
        os.makedirs(path)


    def refill(path):
        os.makedirs(path)


    def main():
        target = sys.argv[1]
        if len(target) > 0 and isinstance(target, str):
            export(target)
        if len(os.listdir(".")) == 0:
            refill("data")
    """
)


def test_a_builtin_computing_from_its_arguments_is_taken_alike_and_a_read_of_the_disk_is_not() -> None:
    """``if len(args.onnx_export) > 0: export_onnx(...)`` (pytorch/examples' word language
    model): ``len`` answers alike on every rank, so its barrier stays; ``len(os.listdir(d))``
    reads what each rank sees on its disk."""
    _, found = answer(HELPERS_CALLED_UNDER_BUILTIN_TESTS)
    assert found.called_on_some_ranks == {"refill"}


@pytest.mark.parametrize(
    ("statement", "reached"),
    [
        ("os.makedirs(path)", False),  # mkdir_p's: called under a test each rank makes itself
        ('os.makedirs(f"logs/{epoch}")', True),  # log_epoch's: every rank calls it
    ],
)
def test_every_rank_reaches_inside_a_function_as_its_calls(statement: str, reached: bool) -> None:
    """Inside a function, what its calls decide: not where some rank may not call it."""
    module = cst.parse_module(HELPERS_CALLED_WHERE_RANKS_DIFFER)
    facts, found = answer(HELPERS_CALLED_WHERE_RANKS_DIFFER)
    anchors = enclosing(module, statement)[:-1]
    function = next(node.name.value for node in anchors if isinstance(node, cst.FunctionDef))
    reach = RankReach(facts.loaders, facts.qualified_name, facts.builtin, found)
    assert reach.every_rank_reaches(anchors, function) is reached
    assert reach.called_on_some_ranks(anchors, function) is not reached


#: Names of functions that decide locality: defined in model/locality.py alone (the rule
#: transformer keeps ``every_rank_reaches_here``, which asks it).
LOCALITY_QUESTIONS = {
    "every_rank_reaches",
    "sums_per_rank",
    "summed_per_rank",
    "per_rank_bindings",
    "per_process_sums",
    "sums_grown_in_training",
    "rank_independent_test",
    "names_rank",
    "mentions_rank",
    "tests_rank",
    "is_main_process_test",
    "tests_main_process",
    "mean_reduced",
    "mean_reduction",
    "batch_mean_reduced",
    "batch_mean_losses",
    "is_batch_mean_loss",
    "taken_alike",
    "runs_alike_inside",
    "same_length_everywhere",
    "tests_parameter",
    "collected_into",
    "collects",
    "accumulates",
    "adds_up",
    "counted_by_one",
    # What a loop computes once per batch: the metrics' batch means, the file flow's per-batch
    # files, the loader-dict's mean test and ACC919's sample counts each read it their own way.
    "per_batch_values",
    "batch_counters",
    "per_batch_lists",
    "statements_once_per_batch",
    "run_once_per_batch",
    "appended_to",
    "rows_added",
    "rows_summed_up",
    "mean_over_rows",
    "grown_in",
    "running_sum",
    "per_rank_sums",
}


def test_only_the_owner_decides_locality() -> None:
    """The transformer, the side effects, the metrics and the loader dict rules each decided it
    once, the printing rule by text, ACC919 by its own list of collecting methods (issue 43); a copy anywhere else in codemods/ is refused."""
    codemods = Path(codemods_package.__file__).parent
    owner = codemods / "model" / "locality.py"
    copies = [
        f"{path.relative_to(codemods).as_posix()} defines {node.name}"
        for path in sorted(codemods.rglob("*.py"))
        if path != owner
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in LOCALITY_QUESTIONS
    ]
    assert copies == []
    owned = {
        node.name.lstrip("_") for node in ast.walk(ast.parse(owner.read_text())) if isinstance(node, ast.FunctionDef)
    }
    assert {"every_rank_reaches", "sums_per_rank", "names_rank", "tests_main_process", "batch_mean_reduced"} <= owned
    assert {"per_batch_values", "run_once_per_batch", "appended_to", "rows_added", "mean_over_rows"} <= owned


def test_grown_in() -> None:
    """Every augmented assignment a loop body makes, whatever its operator; not a plain one."""
    loop = cst.parse_statement("for x in loader:\n    total += x.sum()\n    budget -= 1\n    last = x\n")
    assert isinstance(loop, cst.For)
    assert {cst.Module([]).code_for_node(node.target) for node in grown_in(loop.body)} == {"total", "budget"}


PER_BATCH_LOOP = """
for i, (x, y) in enumerate(loader):
    steps += 1
    self.count += 1
    try:
        tries += 2
        losses.append(loss.item())
    finally:
        done += 1
    if x is None:
        skipped.append(x)
    total += loss.item()
    for row in x:
        rows += 1
        per_row.append(row)
    budget -= 1
    labels.extend(y)
"""


def test_per_batch_values() -> None:
    """What a loop counts and keeps once per batch: its index, the names and attributes it adds a
    whole number to and the lists it appends to, in ``if``/``try`` blocks too; not what a nested
    loop over the batch's rows counts, a sum of values, a countdown or a list extended by rows."""
    loop = cst.parse_statement(PER_BATCH_LOOP.lstrip())
    assert isinstance(loop, cst.For)
    found = per_batch_values(loop, builtins_at(None))
    assert found.counters == {"i", "steps", "self.count", "tries", "done"}
    assert found.lists == {"losses", "skipped"}


RUN_ONCE_BODY = """
first = 1
with ctx:
    second = 2
if a:
    third = 3
elif b:
    fourth = 4
else:
    fifth = 5
try:
    sixth = 6
except ValueError:
    failed = 0
else:
    seventh = 7
finally:
    eighth = 8
for row in rows:
    per_row = 0
while waiting:
    waited = 0
def helper():
    inner = 0
last = 9
"""


def test_run_once_per_batch_in_source_order() -> None:
    """The simple statements a batch runs at most once, in the order they stand: through ``with``,
    ``if``/``elif``/``else`` and ``try``'s body, ``else`` and ``finally``; not an ``except``
    block, a nested loop's body or a nested function's."""
    body = cst.parse_module(RUN_ONCE_BODY.lstrip()).body
    found = [cst.Module([]).code_for_node(line).split(" =")[0] for line in run_once_per_batch(body)]
    assert found == ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "last"]


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("seen += x.size(0)", "x"),
        ("self.seen += len(x)", "x"),
        ("seen += x.shape[0]", "x"),
        ("seen -= x.size(0)", None),
        ("seen += x.size(1)", None),
        ("seen = x.size(0)", None),
    ],
)
def test_rows_added(text: str, rows: str | None) -> None:
    """A running sum of a batch's rows (samples), whatever holds it."""
    statement = cst.parse_statement(text)
    assert isinstance(statement, cst.SimpleStatementLine)
    assert rows_added(statement.body[0], builtins_at(None)) == rows


@pytest.mark.parametrize(
    ("qualified", "text", "plain"),
    [
        ("torch.nn.CrossEntropyLoss", "nn.CrossEntropyLoss()", True),
        ("torch.nn.CrossEntropyLoss", 'nn.CrossEntropyLoss(reduction="mean")', True),
        ("torch.nn.CrossEntropyLoss", "nn.CrossEntropyLoss(weight=w)", False),  # a weighted mean
        ("torch.nn.CrossEntropyLoss", 'nn.CrossEntropyLoss(reduction="sum")', False),
        ("torch.nn.functional.cross_entropy", "F.cross_entropy(out, y)", True),
        ("torch.nn.functional.cross_entropy", "F.cross_entropy(out, y, ignore_index=0)", False),
        ("torch.nn.KLDivLoss", "nn.KLDivLoss()", False),  # not a plain mean of rows
        (None, "criterion(out, y)", False),
    ],
)
def test_mean_over_rows(qualified: str | None, text: str, plain: bool) -> None:
    """A loss whose value times the rows is the rows' sum (recomputable on gathered rows):
    stricter than a batch mean."""
    call = cst.parse_expression(text)
    assert isinstance(call, cst.Call)
    assert mean_over_rows(qualified, call) is plain
