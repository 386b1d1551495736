"""ACC126 per-rank-files: an evaluation writing a file per batch of a loader training shards writes every file, each process its own batches'.

StarGAN's ``test()`` iterates the loader ``train()`` trains on, so the loader is prepared, and
writes ``{i + 1}-images.jpg`` per batch. Sharded, process p runs batches p, p + N, p + 2N ...
(the runtime and Accelerate deal a loader's batches round-robin), and the main process alone
writing the files under its own count would leave N times fewer files, each holding other
images than the original's file of that name. So, where the locality owner says the loop can run
per process (it keeps nothing from one batch to the next and calls a prepared model, see
``file_flow.per_batch_file_loaders``):

- the loop runs under ``accelerator.join_uneven_inputs([model], even_batches=False)``: no batch
  is repeated to even out the last round, and a process that runs out of batches shadows the
  others' collectives (torch's ``Join``) until all are done;
- its first statement gives the index the original's value for this batch, ``i = i *
  accelerator.num_processes + accelerator.process_index`` (with ``enumerate(loader, 1)``:
  ``i = (i - 1) * ... + 1``), so names, prints and tests of ``i`` read what the original reads;
- a counter of the loop's own that names the files (``n = 0`` before it, ``n += 1`` or ``n = n
  + 1`` once per batch, read nowhere after it) starts at the original's value for this process's
  first batch (``n += accelerator.process_index - (accelerator.num_processes - 1)`` before the
  loop) and steps over the other processes' batches before each of its own (``n +=
  accelerator.num_processes - 1``, the loop's first statement): the k-th batch of process p
  sees what the original's batch ``k * N + p`` sees, before and after the loop's ``n += 1``;
- its writes stay on every process (the side-effects and checkpoint rules ask the same owner), and
  ``accelerator.wait_for_everyone()`` follows the loop, so that whatever reads the files after it
  finds every one; so do its prints (StarGAN's ``Saved ... into {}`` per batch): each process
  prints the lines of its own batches, every line once.

On one process the loop is the original's. Where the accelerator is not reachable the loop is
left as it is and reported (ACC904). A loop that also gathers (sums, lists of predictions), one
whose counter is read after it (a total: each process would have its own), grown on some
batches only (under an ``if``, after a ``continue``) or bound outside a loop holding it, and
any such loop under ``--split-batches`` or ``--fsdp`` (no process gets whole batches of its
own there), is the per-batch-files check's (ACC936). With ``--target accelerate`` Accelerate
joins uneven inputs on GPUs only: on several CPU processes its last round is evened out with
repeated samples, and the files of those repeats are written too.
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import enumerate_start
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, Example, Rule
from accel_convert.codemods.engine.syntax import TIGHT_EQUAL, dotted, nodes_in, statement
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.model.locality import locality, locality_of

MESSAGE = (
    "a file written per evaluation batch: each process writes its own batches' files under the original's "
    "index (join_uneven_inputs(..., even_batches=False))"
)
UNREACHABLE = (
    "a file written per evaluation batch where the accelerator is not reachable: the processes cannot write "
    "their own batches' files under the original's index"
)
#: Prints the accelerator's expression (``accelerator``, ``self.accelerator``) into the lines made.
_CODE = cst.Module([])


class PerRankFiles(Rule):
    code = "ACC126"
    name = "per-rank-files"
    providers = (locality,)
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (x, _) in enumerate(loader):
                        torch.save(model(x), f"pred_{i}.pt")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for x, y in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    with accelerator.join_uneven_inputs([model], even_batches=False), accelerator.no_sync(model):
                        for i, (x, _) in enumerate(loader):
                            i = i * accelerator.num_processes + accelerator.process_index
                            torch.save(model(x), f"pred_{i}.pt")
                    accelerator.wait_for_everyone()
            """,
        ),
        Example(
            # A counter of the loop's own names the files: each process's follows the original's.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                n = 0
                with torch.no_grad():
                    for x, _ in loader:
                        n += 1
                        torch.save(model(x), f"pred_{n}.pt")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for x, y in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                model.eval()
                n = 0
                with torch.no_grad():
                    with accelerator.join_uneven_inputs([model], even_batches=False), accelerator.no_sync(model):
                        n += accelerator.process_index - (accelerator.num_processes - 1)
                        for x, _ in loader:
                            n += accelerator.num_processes - 1
                            n += 1
                            torch.save(model(x), f"pred_{n}.pt")
                    accelerator.wait_for_everyone()
            """,
        ),
        Example(
            # A loader only the evaluation iterates stays unprepared: every process runs it
            # whole, and the main process writes every file (the side-effects rule's guard).
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
                test_loader = DataLoader(TensorDataset(torch.randn(100, 8)), batch_size=48)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (x,) in enumerate(test_loader):
                        torch.save(model(x), f"pred_{i}.pt")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from accel_convert.runtime.utils import send_to_device
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(200, 8), torch.randn(200, 2)), batch_size=48)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                test_loader = DataLoader(TensorDataset(torch.randn(100, 8)), batch_size=48)
                for x, y in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    for i, (x,) in enumerate(test_loader):
                        (x,) = send_to_device((x,), accelerator.device)
                        accelerator.save(model(x), f"pred_{i}.pt")
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(locality_of(facts).per_rank_loops)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        rewriter = _OwnBatchesWritten(facts)
        module = module.visit(rewriter)
        return module, rewriter.changes(module)


class _OwnBatchesWritten(RuleTransformer):
    """Each per-rank loop (see the module docstring) under ``join_uneven_inputs``, its index
    the original's, a barrier after it."""

    def __init__(self, facts: ScriptFacts) -> None:
        self._loops = locality_of(facts).per_rank_loops
        super().__init__(facts, self._loops.keys())
        #: The per-rank loops being walked → (accelerator reachable, every rank reaches the loop).
        self._where: dict[int, tuple[bool, bool]] = {}

    def visit_For(self, node: cst.For) -> None:
        loop = self._loops.get(self.site(node).line) if self.runs_per_rank(node) else None
        counted = None if loop is None else loop.index or next(iter(loop.counters), None)
        if loop is not None and not _already_per_rank(node, counted):
            self._where[id(node)] = (self.accelerator_reachable(), self.every_rank_reaches_here(node))

    def leave_For(
        self, original_node: cst.For, updated_node: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        where = self._where.pop(id(original_node), None)
        site = self.origins.site(original_node)
        if where is None or site is None:
            return updated_node
        reachable, reached_by_all = where
        if not reachable:
            self.report(original_node, NO_ACCELERATOR_ACCESS, UNREACHABLE, False, header_only=True)
            return updated_node
        loop = self._loops[site.line]
        accelerator: cst.BaseExpression = self.instance_accelerator() or cst.Name(self.accelerator)

        def call(method: str, *args: cst.Arg) -> cst.Call:
            return cst.Call(cst.Attribute(accelerator, cst.Name(method)), args=args)

        first: list[cst.BaseStatement] = []
        if loop.index is not None:
            first.append(
                _line(
                    cst.Assign(
                        [cst.AssignTarget(cst.Name(loop.index))],
                        self._original_index(original_node, loop.index, accelerator),
                    )
                )
            )
        # Each counter steps over the other processes' batches before each batch of this one
        # (``n += P - 1``), starting from the original's value at this process's first batch
        # (``n += p - (P - 1)`` before the loop): its k-th batch is the original's ``k * P + p``.
        held = _CODE.code_for_node(accelerator)
        first.extend(statement(f"{counter} += {held}.num_processes - 1") for counter in loop.counters)
        started = [
            statement(f"{counter} += {held}.process_index - ({held}.num_processes - 1)") for counter in loop.counters
        ]
        body = updated_node.body
        if isinstance(body, cst.IndentedBlock):
            block = body.with_changes(body=[*first, *body.body])
        else:  # ``for ...: write(...)`` on one line
            block = cst.IndentedBlock([*first, cst.SimpleStatementLine(cast(cst.SimpleStatementSuite, body).body)])
        rewritten = updated_node.with_changes(body=block, leading_lines=())
        joined = call(
            "join_uneven_inputs",
            cst.Arg(cst.List([cst.Element(cst.parse_expression(model)) for model in loop.models])),
            cst.Arg(cst.Name("False"), keyword=cst.Name("even_batches"), equal=TIGHT_EQUAL),
        )
        # Without a backward to follow, each forward tells a process that ran out of batches
        # there is no gradient all-reduce to shadow (``no_sync``); else it waits for one.
        unsynced = [cst.WithItem(call("no_sync", cst.Arg(cst.parse_expression(model)))) for model in loop.models]
        wrapped = cst.With(
            [cst.WithItem(joined), *unsynced],
            cst.IndentedBlock([*started, rewritten]),
            leading_lines=updated_node.leading_lines,
        )
        self.report(original_node, PerRankFiles.code, MESSAGE, header_only=True)
        if not reached_by_all:
            return wrapped
        return cst.FlattenSentinel([wrapped, _line(cst.Expr(call("wait_for_everyone")))])

    def _original_index(self, node: cst.For, index: str, accelerator: cst.BaseExpression) -> cst.BaseExpression:
        """``i * accelerator.num_processes + accelerator.process_index``, shifted by the
        ``enumerate`` start when there is one (``(i - 1) * ... + 1``)."""
        start = enumerate_start(node.iter, self.builtin)
        if start is not None and not isinstance(start, (cst.Name, cst.Integer, cst.Attribute)):
            start = start.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # ``(i - (a + 1))``
        counted: cst.BaseExpression = cst.Name(index)
        if start is not None:
            counted = cst.BinaryOperation(
                counted, cst.Subtract(), start, lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
            )
        dealt = cst.BinaryOperation(
            cst.BinaryOperation(counted, cst.Multiply(), cst.Attribute(accelerator, cst.Name("num_processes"))),
            cst.Add(),
            cst.Attribute(accelerator, cst.Name("process_index")),
        )
        return dealt if start is None else cst.BinaryOperation(dealt, cst.Add(), start)


def _line(small: cst.BaseSmallStatement) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine([small])


def _already_per_rank(node: cst.For, counted: str | None) -> bool:
    """Whether the loop's first statement already gives ``counted`` (its index, or else its first
    counter) the original's value (a converted script converted again): ``i = i * accelerator.num_processes +
    ...``, ``n += accelerator.num_processes - 1``."""
    body = node.body
    first = body.body[0] if isinstance(body, cst.IndentedBlock) and body.body else None
    small = first.body[0] if isinstance(first, cst.SimpleStatementLine) and first.body else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target: cst.BaseExpression = small.targets[0].target
    elif isinstance(small, cst.AugAssign):
        target = small.target
    else:
        return False
    return (
        counted is not None
        and dotted(target) == counted
        and any(
            isinstance(part, cst.Attribute) and part.attr.value in ("process_index", "num_processes")
            for part in nodes_in(small.value)
        )
    )
