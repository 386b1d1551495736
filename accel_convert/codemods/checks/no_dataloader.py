"""ACC901 no-dataloader: training data that does not come from a DataLoader is not sharded.

``prepare`` shards DataLoaders (also when the training draws its batches with
``next(iter(loader))``); data fed by hand (``get_batch(source, i)``, whole graphs, a gym
environment) reaches every process in full, so each one trains on the same samples. The converter cannot know how to split it: it says so at the ``backward``
call and leaves the data path as it was.

A DataLoader inside a wrapper the training draws from (``InfiniteDataLoader(DataLoader(...))``)
is prepared where it is passed when the wrapper is the file's own class or function; a wrapper
from a module the converter does not see into, or one that builds its DataLoader itself in its
class, is named in the report, with where to prepare the DataLoader.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.iteration import iterated
from accel_convert.codemods.engine.loader_values import builds_loader, holds_loaders
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import dotted, nodes_in, target_names
from accel_convert.codemods.engine.torch_names import SELF_DISTRIBUTING
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.model.plan import prepared_loader_dicts

MESSAGE = "training data does not come from a DataLoader: it is not sharded across processes"


class NoDataLoader(Rule):
    code = "ACC901"
    name = "no-dataloader"
    fixes = {
        "ACC901": (
            "Build the training data as a ``torch.utils.data.DataLoader`` over a ``Dataset`` and convert again; the converter then prepares it (``train_loader = accelerator.prepare(train_loader)``) and each process reads its own shard. If the loader comes from a function the converter cannot see into, add ``train_loader = accelerator.prepare(train_loader)`` right after it is returned, and gather what the evaluation counts with ``accelerator.gather_for_metrics``. Data that is not a loader (a tensor indexed by hand) needs slicing per process: ``x[accelerator.process_index::accelerator.num_processes]``. A DataLoader wrapped in a class that re-iterates it (``InfiniteDataLoader``): prepare the DataLoader before the wrapper gets it, ``InfiniteDataLoader(accelerator.prepare(DataLoader(...)))``; where the class builds the DataLoader itself, build it outside and pass it in, or pass the ``Accelerator`` to the class and prepare it where it is built; the wrapper then iterates each process's shard."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn


                def get_batch(source, i):
                    return source[i:i + 8, :-1], source[i:i + 8, -1:]


                def main():
                    train_data = torch.randn(64, 9)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for i in range(0, train_data.size(0), 8):
                        data, targets = get_batch(train_data, i)
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), targets)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message="training data does not come from a DataLoader: it is not sharded across processes",
        ),
        # Loaders from a module the converter does not follow (a package path added to sys.path).
        Example(
            before="""
                import sys

                import torch
                import torch.nn as nn

                sys.path.append("../../")
                from TCN.mnist_pixel.utils import data_generator

                train_loader, test_loader = data_generator("./data", batch_size=32)
                model = nn.Linear(784, 10)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for batch_idx, (data, target) in enumerate(train_loader):
                    optimizer.zero_grad()
                    loss = nn.functional.cross_entropy(model(data.view(-1, 784)), target)
                    loss.backward()
                    optimizer.step()
            """,
            message="training data comes from train_loader, returned by data_generator(), which the converter does "
            "not see build a DataLoader: not sharded across processes (if it is a DataLoader, prepare it: "
            "train_loader = accelerator.prepare(train_loader), and gather what the evaluation counts)",
        ),
        # Batches drawn from the script's own generator over a loader: the loader trains, and is
        # prepared (the generator then re-iterates each process's shard).
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def infinite(loader):
                    while True:
                        yield from loader


                def main():
                    data_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    batches = infinite(data_loader)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for step in range(100):
                        data, target = next(batches)
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
        # A wrapper from a module the converter does not see into, around a DataLoader built in
        # its arguments: the converter cannot tell what the wrapper does with it.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from loader_tools import EndlessLoader
                from torch.utils.data import DataLoader, TensorDataset

                data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                batches = EndlessLoader(DataLoader(data, batch_size=8, shuffle=True))
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(100):
                    data, target = next(batches)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(data), target)
                    loss.backward()
                    optimizer.step()
            """,
            message="training data comes from batches, drawn from EndlessLoader(...), which the converter does not "
            "see into, around a DataLoader built in its arguments: not sharded across processes (prepare the "
            "DataLoader where it is passed: EndlessLoader(accelerator.prepare(DataLoader(...))))",
        ),
        # A wrapper class of the file that builds its DataLoader itself, where no accelerator is.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class InfiniteDataLoader:
                    def __init__(self, dataset, batch_size):
                        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
                        self.iterator = iter(self.loader)

                    def __next__(self):
                        try:
                            return next(self.iterator)
                        except StopIteration:
                            self.iterator = iter(self.loader)
                            return next(self.iterator)


                batches = InfiniteDataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), 8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(100):
                    data, target = next(batches)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(data), target)
                    loss.backward()
                    optimizer.step()
            """,
            message="training data comes from batches, built by InfiniteDataLoader(...), a class that builds its "
            "DataLoader itself: not sharded across processes (build the DataLoader outside and pass it prepared: "
            "InfiniteDataLoader(accelerator.prepare(DataLoader(...))), or prepare it where InfiniteDataLoader "
            "builds it)",
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(100):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        torch.save(model.state_dict(), "model.pt")


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return (
            facts.backward_site is not None
            and not facts.train_loops
            and not facts.train_loaders
            # A script that shards its own data: ACC903 says it all.
            and not facts.existing_features & SELF_DISTRIBUTING
            # The data comes in from callers this file does not show (ACC904 says so).
            and not facts.library_converted_alone
            # Each training step is called per batch by another module's loop over a loader.
            and not facts.backward_fed_elsewhere
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        assert facts.backward_site is not None
        assignments = [node for node in module_nodes(module) if isinstance(node, cst.Assign)]
        dicts = _loader_dicts(assignments, facts)
        if prepared_loader_dicts(assignments, facts):
            return module, []  # the loader-dict rule (ACC119) prepared them
        held = dicts
        if held:
            # ``dataloaders = {x: DataLoader(...) for x in ["train", "val"]}`` (the transfer-learning
            # tutorial): the data does come from DataLoaders, held in a dict nothing prepares.
            name = held[0]
            message = (
                f"training data comes from the DataLoaders held in the dict {name}, which are not prepared: "
                f"not sharded across processes (prepare each: {name} = {{k: accelerator.prepare(v) for k, v in "
                f"{name}.items()}}, and gather what the evaluation counts)"
            )
            return module, [report_at(facts.backward_site, self.code, message)]
        wrapped = _loader_wrapper(module, assignments, facts)
        if wrapped is not None:
            return module, [report_at(facts.backward_site, self.code, wrapped)]
        returned = _loop_data_returned_by_call(module, assignments, facts)
        if returned is not None:
            name, call = returned
            message = (
                f"training data comes from {name}, returned by {call}(), which the converter does not see build a "
                f"DataLoader: not sharded across processes (if it is a DataLoader, prepare it: {name} = "
                f"accelerator.prepare({name}), and gather what the evaluation counts)"
            )
            return module, [report_at(facts.backward_site, self.code, message)]
        return module, [report_at(facts.backward_site, self.code, MESSAGE)]


def _loop_data_returned_by_call(
    module: cst.Module, assignments: list[cst.Assign], facts: ScriptFacts
) -> tuple[str, str] | None:
    """``(name, call)`` when the loop holding the backward iterates over a name (through
    ``enumerate``/``tqdm``) that the script binds from a call of a function it does not show
    building a DataLoader (``train_loader, test_loader = data.get(...)`` from a module the
    converter does not follow); None otherwise."""
    assert facts.backward_site is not None
    line = facts.backward_site.line
    looped: str | None = None
    for node in module_nodes(module):
        if not isinstance(node, cst.For):
            continue
        site = facts.origins.site(node)
        if site is None or not site.line <= line <= site.end_line:
            continue
        iterable = iterated(node.iter, facts.names, through_any_call=True)  # enumerate(loader), tqdm(loader)
        if isinstance(iterable, cst.Name):
            looped = iterable.value  # the innermost loop holding the backward decides
    if looped is None:
        return None
    for node in assignments:
        if not isinstance(node.value, cst.Call):
            continue
        bound = {name for target in node.targets for name in target_names(target.target)}
        call = dotted(node.value.func)
        if looped in bound and call is not None and not facts.builds_data_loader(node.value.func):
            return looped, call
    return None


def _loader_wrapper(module: cst.Module, assignments: list[cst.Assign], facts: ScriptFacts) -> str | None:
    """The message for training batches drawn (``next(batches)``, ``iter(batches)``, ``for ...
    in batches``) from a wrapper around a DataLoader the converter could not prepare: one built
    in the arguments of a class or function of another module (``EndlessLoader(DataLoader(...))``),
    or a class of the file that builds its DataLoader itself; None otherwise."""
    drawn = _drawn_names(module, facts)
    building = _classes_building_loaders(module, facts)
    for assign in assignments:
        value = assign.value
        if not isinstance(value, cst.Call) or (wrapper := dotted(value.func)) is None:
            continue
        bound = {name for target in assign.targets for name in target_names(target.target)}
        name = next(iter(sorted(bound & drawn)), None)
        if name is None:
            continue
        if any(builds_loader(arg.value, facts) for arg in value.args):
            return (
                f"training data comes from {name}, drawn from {wrapper}(...), which the converter does not see "
                f"into, around a DataLoader built in its arguments: not sharded across processes (prepare the "
                f"DataLoader where it is passed: {wrapper}(accelerator.prepare(DataLoader(...))))"
            )
        if wrapper in building:
            return (
                f"training data comes from {name}, built by {wrapper}(...), a class that builds its DataLoader "
                f"itself: not sharded across processes (build the DataLoader outside and pass it prepared: "
                f"{wrapper}(accelerator.prepare(DataLoader(...))), or prepare it where {wrapper} builds it)"
            )
    return None


def _drawn_names(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Names the script draws batches from: ``next(name)``, ``iter(name)``, ``for ... in name``."""
    drawn = set()
    for node in module_nodes(module):
        if isinstance(node, cst.For) and (name := dotted(node.iter)) is not None:
            drawn.add(name)
        elif (
            isinstance(node, cst.Call)
            and facts.builtin(node.func) in ("next", "iter")
            and len(node.args) == 1
            and (name := dotted(node.args[0].value)) is not None
        ):
            drawn.add(name)
    return drawn


def _classes_building_loaders(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """The module's classes that build a DataLoader in one of their methods."""
    return {
        statement.name.value
        for statement in module.body
        if isinstance(statement, cst.ClassDef) and any(builds_loader(node, facts) for node in nodes_in(statement))
    }


def _loader_dicts(assignments: list[cst.Assign], facts: ScriptFacts) -> list[str]:
    """Names bound to a dict of DataLoaders (a dict comprehension or a literal), in file order."""
    found: list[str] = []
    for assign in assignments:
        if (
            holds_loaders(assign.value, facts)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
        ):
            found.append(assign.targets[0].target.value)
    return found
