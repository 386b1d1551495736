"""ACC901 no-dataloader: training data that does not come from a DataLoader is not sharded.

``prepare`` shards DataLoaders; data fed by hand (``get_batch(source, i)``, whole graphs,
``next(iter(loader))`` once, a gym environment) reaches every process in full, so each one trains
on the same samples. The converter cannot know how to split it: it says so at the ``backward``
call and leaves the data path as it was.

Before::

    for i in range(0, train_data.size(0) - 1, args.bptt):
        data, targets = get_batch(train_data, i)
        loss.backward()

After::

    for i in range(0, train_data.size(0) - 1, args.bptt):
        data, targets = get_batch(train_data, i)
        accelerator.backward(loss)  # ACC901: every process sees the same data
"""

from __future__ import annotations

import libcst as cst

from codemods.base import Change, Codemod, Options
from codemods.facts import ScriptFacts, Site


def _change(code: str, message: str, site: Site) -> Change:
    return Change(code, message, site.line, site.column, site.end_line, site.end_column, fixed=False)


class NoDataLoader(Codemod):
    code = "ACC901"
    name = "no-dataloader"

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return (
            facts.backward_site is not None
            and not facts.train_loops
            and not facts.train_loaders
            # A script that shards its own data: ACC903 says it all.
            and not facts.existing_features & {"DistributedDataParallel", "mp.spawn", "init_process_group"}
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        assert facts.backward_site is not None
        message = "training data does not come from a DataLoader: it is not sharded across processes"
        return module, [_change(self.code, message, facts.backward_site)]


class RankDependentBreak(Codemod):
    """ACC902 rank-dependent-break: a loop that stops on a per-process value can hang the others.

    ``if loss < 1e-3: break`` is decided by each process on its own batch; one process leaves the
    loop while the others wait for it in the next gradient all-reduce, forever. Make the decision
    the same everywhere (reduce the value first, e.g. ``accelerator.reduce(loss, "mean")``), or set
    a flag with ``accelerator.set_trigger()`` and test ``accelerator.check_trigger()``.

    Before::

        if loss.item() < 1e-3:
            break

    After::

        if loss.item() < 1e-3:  # ACC902: decided per process
            break
    """

    code = "ACC902"
    name = "rank-dependent-break"

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.rank_dependent_breaks)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        message = "break decided by a per-process value: other processes would wait forever"
        return module, [_change(self.code, message, site) for site in facts.rank_dependent_breaks]


class ExistingDistributed(Codemod):
    """ACC903 existing-distributed: the script already runs distributed; it is left as it is.

    A script that starts its own processes (``mp.spawn``), initialises a process group or wraps
    its model in ``DistributedDataParallel`` has made every decision the converter would make, in
    its own way. Mixing the two would start processes twice or wrap the model twice, so nothing is
    rewritten; each such spot is reported.

    Before::

        mp.spawn(train, args=(world_size,), nprocs=world_size)

    After::

        mp.spawn(train, args=(world_size,), nprocs=world_size)  # ACC903: left as it is
    """

    code = "ACC903"
    name = "existing-distributed"

    FEATURES = ("mp.spawn", "init_process_group", "DistributedDataParallel")

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return any(feature in facts.distributed_sites for feature in self.FEATURES)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        changes = [
            _change(self.code, f"{feature} already distributes this script: nothing converted", site)
            for feature, site in facts.distributed_sites.items()
            if feature in self.FEATURES
        ]
        return module, changes
