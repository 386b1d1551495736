"""ACC936 per-batch-files: files an evaluation over a prepared loader writes once per batch, named by the batch's index.

``torch.save(out, f"preds/batch_{i}.pt")`` inside ``for i, (x, y) in enumerate(test_loader)``
writes one file per batch of the whole test set, numbered 0, 1, 2... After ``prepare`` each
process would see every N-th batch and the evaluation's values would be gathered: the i-th batch
of every process joined into one, written by the main process, and N times fewer files, each
holding other samples than the original's file of that name (StarGAN's test mode: 250 of its 500
images on 2 processes). So such an evaluation keeps its loader unprepared (the program model's
``file_flow.per_batch_file_loaders``, which says why every rank runs it whole rather than each
writing its own batches): every file the original writes is written, by the main process, under
its name and with its contents, and nothing is reported. The same holds across modules: a
helper of another module writing a file per batch of the loader it is handed (UNet's
``utils.save_predictions_as_imgs(val_loader, model, folder)``) makes the module building that
loader keep it unprepared, and the helpers it is handed to receive every batch, ungathered.

Over a loader that stays prepared because a training loop iterates it too (StarGAN's ``test()``
over the loader ``train()`` trains on), each process writes its own batches' files under the
original's index where the loop keeps nothing from one batch to the next (the per-rank-files
rewrite, ACC126), and so does a loop naming its files by a counter of its own (``n = 0`` before
it, ``n += 1`` or ``n = n + 1`` once per batch) that nothing reads after the loop. What is
reported is such a loop that keeps a sum or a list across batches (predictions written per batch
of the training set and a loss summed), or a counter each process would end with its own value
of (read after the loop: a total; grown under an ``if`` or after a ``continue``): collect the
gathered values and write them once after the loop, or name each file by its samples rather than
by the batch counter. The same holds for a path built
from the counter on an earlier line of the loop (``path = f"results/{i}.png"``, then
``save_image(out, path)``), and for the script's own function that writes a file to the path it
is given (``def save_image(pixels, path): with open(path, "wb") ...``).
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.model.file_flow import per_batch_writes

MESSAGE = (
    "a file written per evaluation batch and named by the batch's index: each process runs every N-th batch, "
    "so there are N times fewer files, each holding other samples than the original's file of that name "
    "(gathered, the i-th batches of all processes go into one); write the gathered values once after the "
    "loop, or name the files by their samples"
)


class PerBatchFiles(WalkingCheck):
    code = "ACC936"
    name = "per-batch-files"
    fixes = {
        "ACC936": (
            "Write the gathered values once after the loop: collect the gathered batches in a list, ``torch.cat`` them, and save one file under ``if accelerator.is_main_process:``; or name each file by its samples (their ids from the batch), not by the batch's index."
        ),
    }
    providers = (per_batch_writes,)
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 2)), batch_size=64)
                test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                total = 0.0
                with torch.no_grad():
                    for i, (x, _) in enumerate(train_loader):
                        out = model(x)
                        total += out.sum().item()
                        torch.save(out, f"pred_{i}.pt")
            """,
            message=MESSAGE,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def save_result(pixels, path):
                    with open(path, "wb") as f:
                        f.write(bytes((pixels.clamp(0, 1) * 255).to(torch.uint8).tolist()))


                torch.manual_seed(0)
                model = nn.Linear(8, 8)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 8)), batch_size=64)
                test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                model.eval()
                outputs = []
                with torch.no_grad():
                    for i, (x, _) in enumerate(train_loader):
                        out = model(x)
                        outputs.append(out)
                        path = f"result_{i}.bin"
                        save_result(out[0], path)
            """,
            message=MESSAGE,
        ),
        Example(
            # Over the test loader, which no training loop iterates: left unprepared, every file
            # written by the main process under the original's name.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 2)), batch_size=64)
                test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
                for x, y in train_loader:
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
                train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 2)), batch_size=64)
                model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
                test_loader = DataLoader(TensorDataset(torch.randn(200, 8)), batch_size=64)
                for x, y in train_loader:
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
        return facts.has_accelerator and bool(facts.of(per_batch_writes))

    # Which writes these are is the program model's (``file_flow.per_batch_writes``): the walk
    # finds them by their original position.
    def lines(self, facts: ScriptFacts) -> list[int]:
        return sorted({line for line, _, _ in facts.of(per_batch_writes)})

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        self._writes = {(line, column) for line, column, _ in facts.of(per_batch_writes)}
        self._paths = {(line, path) for line, _, path in facts.of(per_batch_writes)}
        #: The last call with a position: what a rebuilt write is reported at (its line).
        self._last: tuple[int, cst.Call] | None = None
        self._reported: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        site = self.walk.origins.site(node)
        if site is not None:
            self._last = (site.line, node)
            found, at = (site.line, site.column) in self._writes, node
        elif self._last is not None:
            # A write another rule rebuilt (``torch.save(model(x), path)`` with the forward
            # gathered first) has no position: it follows the calls of its line, and still
            # names the file by the same argument.
            line, at = self._last
            found = any((line, _EMPTY.code_for_node(arg.value)) in self._paths for arg in node.args)
        else:
            return
        line = self._last[0]
        if found and line not in self._reported:
            self._reported.add(line)
            self.walk.report(at, self.code, MESSAGE, False)


_EMPTY = cst.Module([])
