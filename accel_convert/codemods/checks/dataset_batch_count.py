"""ACC967 dataset-batch-count: a batch count computed from a data set's size counts every process's batches.

``epoch_size = len(dataset) // args.batch_size`` (ssd.pytorch), ``warm_iteration =
round(dataset_sizes["train"] / opt.batchsize) * opt.warm_epoch`` (re-ID's warm-up): the number
of batches the whole data set makes. After ``prepare`` each process runs 1/N of them, so what is
measured in batches against it (a warm-up, an epoch boundary, a plot every epoch) lasts N times
longer on N processes. A count read from ``len(loader)`` is counted again after the ``prepare``
(ACC122); one computed from the data set's size is reported: count ``len(loader)`` after the
``prepare``, or divide by ``accelerator.num_processes``. The data sets and batch sizes are those
the script's loaders are built with (:func:`~codemods.model.loaders.counts_dataset_batches`
decides).
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import RETRIED_BATCH_SIZE, RETRIED_TRAINING_FUNCTION
from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.model.loaders import DatasetSizes, counts_dataset_batches, dataset_sizes
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis

MESSAGE = (
    "counts the batches of the whole data set: after prepare each process runs 1/N of them, so what"
    " is measured in these batches (a warm-up, an epoch) lasts N times longer; count len(loader)"
    " after the prepare, or divide by accelerator.num_processes"
)


@rule_provider(needs=("loader_classes",))
def sizes(a: Analysis) -> DatasetSizes:
    """The data sets, their sizes and the batch sizes of the file's loaders."""
    return dataset_sizes(a)


class DatasetBatchCount(WalkingCheck):
    code = "ACC967"
    name = "dataset-batch-count"
    providers = (sizes,)
    fixes = {
        "ACC967": (
            "Count the batches each process runs: compute the count from ``len(loader)`` after "
            "``loader = accelerator.prepare(loader)`` (``epoch_size = len(loader)``), or divide the "
            "data set's count by ``accelerator.num_processes``."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    batch_size = 8
                    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
                    epoch_size = len(dataset) // batch_size
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    step = 0
                    for epoch in range(2):
                        for data, target in loader:
                            step += 1
                            if step % epoch_size == 0:
                                print("epoch", step // epoch_size)
                            optimizer.zero_grad()
                            nn.functional.mse_loss(model(data), target).backward()
                            optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message=MESSAGE,
        ),
        # A mean over the data set's samples (a size, not divided by the batch size): no batches counted.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                    loader = DataLoader(dataset, batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    total = 0.0
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        total += loss.item() * len(data)
                    print(total / len(dataset))


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(facts.of(sizes).batch_sizes)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        found = self.walk.facts.of(sizes)
        if RETRIED_TRAINING_FUNCTION in self.walk.scope:
            # ``--oom-retry``: the retried training reads its own batch size where the loader's was.
            found = replace(found, batch_sizes=found.batch_sizes | {RETRIED_BATCH_SIZE})
        if counts_dataset_batches(node, found, self.walk.facts.loaders, self.walk.builtin):
            self.walk.report(node, self.code, MESSAGE, False)
