"""ACC936 per-batch-files: files an evaluation over a prepared loader writes once per batch, named by the batch's index.

``torch.save(out, f"preds/batch_{i}.pt")`` inside ``for i, (x, y) in enumerate(test_loader)``
writes one file per batch of the whole test set, numbered 0, 1, 2... After ``prepare`` each
process would see every N-th batch and the evaluation's values would be gathered: the i-th batch
of every process joined into one, written by the main process, and N times fewer files, each
holding other samples than the original's file of that name (StarGAN's test mode: 250 of its 500
images on 2 processes). So such an evaluation keeps its loader unprepared (the program model's
``file_flow.per_batch_file_loaders``, which says why every rank runs it whole rather than each
writing its own batches): every file the original writes is written, by the main process, under
its name and with its contents, and nothing is reported.

What is reported is the loop over a loader that stays prepared because a training loop iterates
it too (predictions written per batch of the training set): collect the gathered values and
write them once after the loop, or name each file by its samples rather than by the batch
counter. The same holds for a counter the loop adds 1 to per batch (``n += 1``), for a path built
from the counter on an earlier line of the loop (``path = f"results/{i}.png"``, then
``save_image(out, path)``), and for the script's own function that writes a file to the path it
is given (``def save_image(pixels, path): with open(path, "wb") ...``).
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.check_walk import Held, WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import enumerate_index
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.engine.syntax import (
    counted_by_one,
    dotted,
    names_in,
    nodes_in,
    parameter_names,
)
from accel_convert.codemods.engine.torch_names import WRITING_FUNCTIONS
from accel_convert.codemods.engine.transformers import RuleTransformer

MESSAGE = (
    "a file written per evaluation batch and named by the batch's index: each process runs every N-th batch, "
    "so there are N times fewer files, each holding other samples than the original's file of that name "
    "(gathered, the i-th batches of all processes go into one); write the gathered values once after the "
    "loop, or name the files by their samples"
)

#: Methods that write their receiver to a path (pandas' ``to_csv``, PIL's ``save``, a figure's ``savefig``).
_WRITING_METHODS = frozenset({"to_csv", "to_json", "to_parquet", "savefig", "save", "imsave", "write_text"})


class PerBatchFiles(WalkingCheck):
    code = "ACC936"
    name = "per-batch-files"
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
                with torch.no_grad():
                    for i, (x, _) in enumerate(train_loader):
                        torch.save(model(x), f"pred_{i}.pt")
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
                with torch.no_grad():
                    for i, (x, _) in enumerate(train_loader):
                        out = model(x)
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
                        accelerator.save(model(x), f"pred_{i}.pt")
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and any(loop.loader in facts.loaders for loop in facts.eval_loops)

    # Writes inside an evaluation loop over a prepared loader whose path reads a name counting
    # that loop's batches, directly or through one of the script's module-level functions that
    # writes a file to a parameter (``def save_result(image, path): image.save(path)``): those
    # are known once the whole tree is seen, so the calls are judged at the end of the walk.
    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        loops = [loop for loop in facts.eval_loops if loop.loader in facts.loaders]
        self._evaluation_lines = sorted(
            {line for loop in loops for line in range(loop.site.line, loop.site.end_line + 1)}
        )
        #: Per evaluation loop being walked: the names counting its batches.
        self._counters: list[set[str]] = []
        #: Names the evaluation loops bind to a path built from a counter (``path = f"{i}.png"``,
        #: written on a later line).
        self._paths: set[str] = set()
        #: The script's module-level functions that write a file to a parameter → its positions.
        self._writing: dict[str, set[int]] = {}
        #: The parameters of the module-level function being walked.
        self._params: list[tuple[str, ...]] = []
        #: Writes in evaluation loops, in walk order: a direct write whose path reads a counter
        #: (None), or a call of a function of the script with, per positional argument, whether
        #: it does.
        self._writes: list[tuple[Held, tuple[str, dict[int, bool]] | None]] = []

    def looks_into(self, statement: cst.CSTNode) -> bool:
        """The statements holding an evaluation loop, and every statement where a module-level
        function can be or whose calls it makes (not a class's, not a nested function's)."""
        if not skips_statement(statement, self._evaluation_lines, self.walk.origins):
            return True
        kind = type(statement)
        depth = len(self.walk.scope)  # a def or class being entered counts itself
        if kind is cst.FunctionDef:
            return depth == 1
        if kind is cst.ClassDef:
            return False
        return depth == 1 or (depth == 0 and kind in _HOLDS_MODULE_FUNCTIONS)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.walk.scope) == 1:
            self._params.append(parameter_names(node))

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.walk.scope) == 1:
            self._params.pop()

    def visit_For(self, node: cst.For) -> None:
        if self._over_evaluated_loader(node):
            self._counters.append(_batch_counters(node))

    def leave_For(self, node: cst.For) -> None:
        if self._over_evaluated_loader(node):
            self._counters.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._counters and _path_reads(node.value, set().union(*self._counters)):
            self._paths.update(name for target in node.targets if (name := dotted(target.target)) is not None)

    def _over_evaluated_loader(self, node: cst.For) -> bool:
        loop = self.walk.loop_fact(node, self.walk.facts.eval_loops)
        return loop is not None and loop.loader in self.walk.facts.loaders

    def visit_Call(self, node: cst.Call) -> None:
        in_function_body = len(self.walk.scope) == 1 and len(self._params) == 1
        counting: set[str] = set().union(*self._counters) if self._counters else set()
        if not in_function_body and not counting:
            return
        writes = _writes_file(self.walk, node)
        if writes and in_function_body:
            self._note_written_parameters(node)
        if counting:
            self._note_evaluation_write(node, writes, counting)

    def _note_written_parameters(self, call: cst.Call) -> None:
        """A write in a module-level function: the positions of the parameters its path reads."""
        read = set().union(*(names_in(arg.value) for arg in call.args))
        positions = {index for index, param in enumerate(self._params[0]) if param in read}
        if positions:
            self._writing.setdefault(self.walk.scope[0], set()).update(positions)

    def _note_evaluation_write(self, call: cst.Call, writes: bool, counting: set[str]) -> None:
        """A call in an evaluation loop: a write whose path reads a batch counter, or a call of
        one of the script's functions (judged once every function is known)."""
        if writes:
            if any(self._names_the_batch(arg.value, counting) for arg in call.args):
                self._writes.append((self.walk.hold(call), None))
        elif isinstance(call.func, cst.Name):
            named = {
                index: self._names_the_batch(arg.value, counting)
                for index, arg in enumerate(call.args)
                if arg.keyword is None
            }
            self._writes.append((self.walk.hold(call), (call.func.value, named)))

    def _names_the_batch(self, path: cst.BaseExpression, counting: set[str]) -> bool:
        return dotted(path) in self._paths or _path_reads(path, counting)

    def finish(self) -> None:
        for held, helper_call in self._writes:
            if helper_call is not None:
                function, named = helper_call
                if not any(named.get(index, False) for index in self._writing.get(function, ())):
                    continue
            self.walk.report_held(held, self.code, MESSAGE)


#: The statements a module-level function can be defined in (a class's are methods).
_HOLDS_MODULE_FUNCTIONS = frozenset({cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar, cst.Match})


def _writes_file(walker: RuleTransformer, call: cst.Call) -> bool:
    """Whether ``call`` writes a file to a path among its arguments (``torch.save``, a writing
    function, ``open`` for writing, a writing method such as ``image.save(path)``)."""
    name = walker.qualified_name(call.func) or dotted(call.func)
    if name in WRITING_FUNCTIONS or name == "torch.save":
        return True
    if name in ("open", "builtins.open", "io.open"):
        mode = next((arg.value for arg in call.args[1:2] if arg.keyword is None), None)
        mode = next((arg.value for arg in call.args if arg.keyword and arg.keyword.value == "mode"), mode)
        return isinstance(mode, cst.SimpleString) and any(flag in mode.evaluated_value for flag in "wax")
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in _WRITING_METHODS


def _batch_counters(loop: cst.For) -> set[str]:
    """The loop's ``enumerate`` index, and names its body adds 1 to (``n += 1``)."""
    counters: set[str] = set()
    index = enumerate_index(loop)
    if index is not None:
        counters.add(index)
    for node in nodes_in(loop.body):
        counter = counted_by_one(node)
        if counter is not None and (name := dotted(counter)) is not None:
            counters.add(name)
    return counters


def _path_reads(value: cst.BaseExpression, counters: set[str]) -> bool:
    """Whether ``value`` is built from text and one of ``counters`` (``f"out_{i}.pt"``,
    ``os.path.join(root, str(n) + ".png")``): a path named by the batch."""
    nodes = nodes_in(value)
    has_text = any(isinstance(node, (cst.SimpleString, cst.FormattedString)) for node in nodes)
    return has_text and bool(names_in(value) & counters)
