"""ACC115 downloads: datasets downloaded and extracted by the main process first, then read by all.

``datasets.MNIST(root, download=True)`` checks a folder and, when the files are missing, downloads
and extracts them. Run by every process at once, they all find the folder empty and write the same
files over each other (a truncated archive, a half-extracted folder another rank already reads).
The same goes for a call of anything that downloads where no barrier can go inside (the
locality owner's ``download_calls``): the script's own download function (one that fetches with
``urlretrieve``, ``requests.get`` ... and unpacks what it fetched), a function calling a lambda
that downloads (``{"mnist": lambda: MNIST(root, download=True)}[name]()``), a class that does not
train whose ``__init__`` downloads (a dataset wrapping ``MNIST(root, download=True)``), a method
of one, and those of another module of the program: the call runs on the main process first.
Under ``with accelerator.main_process_first():`` the main process downloads while the others wait
at a barrier, then they read what it wrote. The barrier is only added where every process reaches
it (not inside ``try``, a rank-dependent ``if``, or a loop over something other than a range or a
loader). A ``try`` whose body downloads (``except OSError:`` falling back to something else) goes
under it whole, handlers included, where it holds nothing the processes must run together (no
loop, no call of the script's other functions, models or accelerator): each process then meets
and handles the download's error as the original does.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.model.locality import statement_downloads


class Downloads(Rule):
    code = "ACC115"
    name = "downloads"
    examples = (
        Example(
            before="""
                import torch
                from torch.utils.data import DataLoader
                from torchvision import datasets, transforms


                def main():
                    train_set = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
                    loader = DataLoader(train_set, batch_size=64, shuffle=True)
                    model = torch.nn.Linear(784, 10)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        loss = torch.nn.functional.cross_entropy(model(images.flatten(1)), labels)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader
                from torchvision import datasets, transforms


                def main():
                    accelerator = Accelerator()
                    with accelerator.main_process_first():
                        train_set = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
                    loader = DataLoader(train_set, batch_size=64, shuffle=True)
                    model = torch.nn.Linear(784, 10)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        loss = torch.nn.functional.cross_entropy(model(images.flatten(1)), labels)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A dataset class wrapping a download in its __init__: the accelerator does not go inside
        # it, so the construction runs on the main process first.
        Example(
            before="""
                import torch
                from torch.utils.data import DataLoader, Dataset
                from torchvision import datasets, transforms


                class Digits(Dataset):
                    def __init__(self, root):
                        self.inner = datasets.MNIST(root, download=True, transform=transforms.ToTensor())

                    def __len__(self):
                        return len(self.inner)

                    def __getitem__(self, index):
                        return self.inner[index]


                def main():
                    loader = DataLoader(Digits("data"), batch_size=64, shuffle=True)
                    model = torch.nn.Linear(784, 10)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        loss = torch.nn.functional.cross_entropy(model(images.flatten(1)), labels)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, Dataset
                from torchvision import datasets, transforms


                class Digits(Dataset):
                    def __init__(self, root):
                        self.inner = datasets.MNIST(root, download=True, transform=transforms.ToTensor())

                    def __len__(self):
                        return len(self.inner)

                    def __getitem__(self, index):
                        return self.inner[index]


                def main():
                    accelerator = Accelerator()
                    with accelerator.main_process_first():
                        loader = DataLoader(Digits("data"), batch_size=64, shuffle=True)
                    model = torch.nn.Linear(784, 10)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        loss = torch.nn.functional.cross_entropy(model(images.flatten(1)), labels)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A data set read from disk without download=True: no process writes anything, so no process
        # waits for another.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader
                from torchvision import datasets, transforms


                def main():
                    # The data set is already on disk (fetched by a setup step): nothing is downloaded here.
                    train_set = datasets.MNIST("data", train=True, download=False, transform=transforms.ToTensor())
                    loader = DataLoader(train_set, batch_size=64, shuffle=True)
                    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(images), labels)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader
                from torchvision import datasets, transforms


                def main():
                    accelerator = Accelerator()
                    # The data set is already on disk (fetched by a setup step): nothing is downloaded here.
                    train_set = datasets.MNIST("data", train=True, download=False, transform=transforms.ToTensor())
                    loader = DataLoader(train_set, batch_size=64, shuffle=True)
                    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for images, labels in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(images), labels)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and ("download" in facts.word_lines or bool(facts.download_calls))

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        rewriter = _MainProcessFirst(facts, facts.lines_mentioning({"download"} | _words(facts.download_calls)))
        return module.visit(rewriter), rewriter.changes(module)


class _MainProcessFirst(RuleTransformer):
    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # A dataset class's own download(): its callers decide. A trainer building its data does.
        return self.in_training_class()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def visit_With(self, node: cst.With) -> bool:
        # Already under main_process_first (a converted script): nothing to add inside.
        return not any(
            isinstance(item.item, cst.Call)
            and isinstance(item.item.func, cst.Attribute)
            and item.item.func.attr.value == "main_process_first"
            for item in node.items
        )

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        body = self._wrap_downloads(updated_node.body, original_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = self._wrap_downloads(updated_node.body, original_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def _wrap_downloads(
        self, statements: Sequence[cst.BaseStatement], originals: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement] | None:
        """Consecutive statements that download go under one ``main_process_first()``."""
        if not self.accelerator_reachable() or not self.every_rank_reaches_here():
            return None
        if len(statements) != len(originals):
            return None  # an earlier rule changed this block's shape: leave it
        result: list[cst.BaseStatement] = []
        run: list[cst.BaseStatement] = []
        changed = False

        def flush() -> None:
            nonlocal changed
            if run:
                leading = run[0].leading_lines  # type: ignore[attr-defined]
                block = cst.IndentedBlock(body=[run[0].with_changes(leading_lines=()), *run[1:]])
                call = cst.Call(cst.Attribute(cst.Name(self.accelerator), cst.Name("main_process_first")))
                wrapped = cst.With(items=[cst.WithItem(call)], body=block, leading_lines=leading)
                if self.origins is not None:  # the block stands where its first statement stood
                    first = run[0]
                    self.origins.carry(first.body[0] if isinstance(first, cst.SimpleStatementLine) else first, wrapped)
                result.append(wrapped)
                changed = True
                run.clear()

        for statement, original in zip(statements, originals):
            if statement_downloads(statement, self.facts, self.accelerator):
                run.append(statement)
                self.report(original, Downloads.code, "dataset download on the main process first, then the others")
            else:
                flush()
                result.append(statement)
        flush()
        return result if changed else None


def _words(callees: AbstractSet[str]) -> set[str]:
    """The names the lines calling ``callees`` mention (``Source().get`` mentions ``Source``)."""
    return {callee.partition("(")[0] for callee in callees}
