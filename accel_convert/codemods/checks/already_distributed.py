"""ACC903 already-distributed: the script already distributes itself; that part is left as it is.

A script that starts its own processes (``mp.spawn``), initialises a process group or wraps its
model in ``DistributedDataParallel`` has made every decision the converter would make, in its own
way: mixing the two would start processes twice or wrap the model twice, so nothing in it is
rewritten. A ``DistributedSampler`` or a functional ``nn.parallel.data_parallel`` call shards the
data or the batch by hand: the rest of the script is converted, but that code is left for a person
(``prepare`` would shard the data a second time). Every such call is reported.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.torch_names import FEATURES, HAND_DISTRIBUTION, SELF_DISTRIBUTING


class AlreadyDistributed(Rule):
    code = "ACC903"
    name = "already-distributed"
    fixes = {
        "ACC903": (
            "Nothing to do if the script's own distribution works: run it with its own launcher. To convert it instead, remove what distributes it (``init_process_group``, ``DistributedSampler``, the ``DistributedDataParallel`` wrap, the ``LOCAL_RANK`` handling) and convert the single-GPU version."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.distributed as dist
                import torch.multiprocessing as mp
                import torch.nn as nn
                from torch.nn.parallel import DistributedDataParallel as DDP


                def worker(rank, world_size):
                    dist.init_process_group("gloo", rank=rank, world_size=world_size)
                    model = DDP(nn.Linear(8, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    loss = model(torch.randn(4, 8)).sum()
                    loss.backward()
                    optimizer.step()


                if __name__ == "__main__":
                    mp.spawn(worker, args=(2,), nprocs=2)
            """,
            message="init_process_group already distributes this script: nothing converted",
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.data.distributed import DistributedSampler


                def main():
                    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message="DistributedSampler already distributes this script: left as it is, the rest converted",
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
        return any(qualified in facts.called for qualified in HAND_DISTRIBUTION)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        whole_script = bool(facts.existing_features & SELF_DISTRIBUTING)
        outcome = "nothing converted" if whole_script else "left as it is, the rest converted"
        changes = [
            report_at(site, self.code, f"{FEATURES[qualified]} already distributes this script: {outcome}")
            for qualified in sorted(HAND_DISTRIBUTION)
            for site in facts.call_sites.get(qualified, ())
        ]
        return module, sorted(changes, key=lambda change: (change.line, change.column))
