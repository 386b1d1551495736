"""ACC929 sharded-update-bn: SWA's ``update_bn`` over a prepared loader sees one process's shard.

``torch.optim.swa_utils.update_bn(train_loader, swa_model)`` recomputes the averaged model's
BatchNorm statistics in one pass over the loader. After ``prepare`` the loader yields this
process's share of the data only: each process's averaged model gets its own statistics (on 2
processes the main process's running mean summed to 0.5089 where one process computes 0.5144),
its evaluation mixes them, and the main process saves its own. Average the statistics across
processes after the pass (``accelerator.reduce(buffer, "mean")`` for each ``running_mean`` and
``running_var``), or run ``update_bn`` on the main process over the unprepared loader.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.walk import module_nodes
from accel_convert.codemods.model.plan import prepared_loader_dicts

UPDATE_BN = "torch.optim.swa_utils.update_bn"

MESSAGE = (
    "update_bn over a prepared loader: each process computes the BatchNorm statistics of its own"
    " shard; average them across processes (accelerator.reduce(..., 'mean')) or run it on the main"
    " process over the unprepared loader"
)


class ShardedUpdateBn(WalkingCheck):
    code = "ACC929"
    name = "sharded-update-bn"
    #: The dicts of loaders the converted tree prepares (set by :meth:`start`).
    prepared_dicts: frozenset[str] = frozenset()
    fixes = {
        "ACC929": (
            'Average the BatchNorm statistics across processes after ``update_bn``: for each BatchNorm buffer, ``buf.copy_(accelerator.reduce(buf, "mean"))``; or run ``update_bn`` on the main process only over the unprepared loader and broadcast the model\'s buffers.'
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.optim.swa_utils import AveragedModel, update_bn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    swa_model = AveragedModel(model)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        swa_model.update_parameters(model)
                    update_bn(loader, swa_model)


                if __name__ == "__main__":
                    main()
            """,
            message=MESSAGE,
        ),
        # update_bn over a fixed calibration list (not a prepared loader): every process has all of
        # it and computes the same statistics.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.optim.swa_utils import AveragedModel, update_bn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    # A fixed calibration set, whole on every process: each computes the same statistics.
                    calibration = [torch.randn(16, 8) for _ in range(4)]
                    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    swa_model = AveragedModel(model)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        swa_model.update_parameters(model)
                    update_bn(calibration, swa_model)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.optim.swa_utils import AveragedModel, update_bn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    # A fixed calibration set, whole on every process: each computes the same statistics.
                    calibration = [torch.randn(16, 8) for _ in range(4)]
                    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    swa_model = AveragedModel(accelerator.unwrap_model(model))
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        swa_model.update_parameters(model)
                    update_bn(calibration, swa_model)


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # Loaders by name, or held in a dict the loader-dict rule prepares (no name of their own).
        return "update_bn" in facts.word_lines and facts.has_accelerator

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        assignments = [node for node in module_nodes(module) if isinstance(node, cst.Assign)]
        self.prepared_dicts = frozenset(prepared_loader_dicts(assignments, facts))

    def lines(self, facts: ScriptFacts) -> set[int]:
        return facts.lines_mentioning({"update_bn"})

    def visit_Call(self, node: cst.Call) -> None:
        """``update_bn(loader, ...)`` whose loader is one the conversion prepares, by its name or
        as a value of a dict of loaders it prepares."""
        if self.walk.qualified_name(node.func) != UPDATE_BN or not node.args:
            return
        loader = node.args[0].value
        if isinstance(loader, cst.Subscript):
            # ``update_bn(dataloaders["train"], swa_model)`` over a dict of prepared loaders.
            prepared = dotted(loader.value) in self.prepared_dicts
        else:
            prepared = dotted(loader) in self.walk.facts.loaders
        if prepared:
            self.walk.report(node, self.code, MESSAGE, False)
