"""ACC119 loader-dict: prepare the DataLoaders held in a dict keyed by phase, and gather the
per-sample values that the phase loop's running sums count.

The PyTorch transfer-learning tutorial holds its loaders in ``dataloaders = {x: DataLoader(...)
for x in ['train', 'val']}`` and loops ``for inputs, labels in dataloaders[phase]``. After the dict
is built, ``dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}``
shards every loader: the prepare rule writes it for a dict the loaders owner of the program model
knows (``loader_dict_names``: written in the file and bound once, or returned by a factory of it),
this rule for any other, where no loader of the model trains. The statistics the loop sums (``running_loss += loss.item() *
inputs.size(0)``, ``running_corrects += torch.sum(preds == labels.data)``) would then count one
process's shard of the epoch, and the last uneven batch is padded with repeated samples; divided by
``dataset_sizes[phase]`` they would print a fraction of the one-process numbers, and the best-model
decision taken from them could differ between processes. So the per-sample tensors the sums read
are gathered first, with ``gather_for_metrics`` (which drops the padding), into new
``gathered_...`` names the sums then read: every sample counted exactly once, on every process.

The loss is a batch mean: ``loss.item() * inputs.size(0)`` is that batch's sum of per-sample
losses. It is recomputed on the gathered outputs and targets with the same criterion
(``criterion(gathered_outputs, gathered_labels).item() * gathered_labels.size(0)``), which is the
gathered rows' sum only for a mean-reduced criterion built without arguments (``nn.CrossEntropyLoss()``,
``nn.MSELoss()``...); the criterion must be traceable to such a constructor (through the training
function's parameter to its callers' arguments). A model returning a tuple while training
(``logits = outputs[1] if isinstance(outputs, tuple) else outputs``) gives per-sample rows like a
plain output; in a method, ``self.model`` and ``self.criterion`` are followed to what the class's
constructor received, as the dict is to what the method's callers pass. Anything else the sums
read that the loop computes per process (a loss summed without the batch size, a value of unknown
shape, a sum inside an ``if``) leaves the loop as it was, reported (ACC928): the dict's loaders
are still prepared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import batch_target, iterated
from accel_convert.codemods.engine.loader_values import holds_loaders
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    dotted,
    instance_parameter,
    nodes_in,
    parameter_names,
    rows_counted,
    statement,
    target_names,
)
from accel_convert.codemods.engine.torch_names import DATA_LOADERS, SELF_DISTRIBUTING
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import module_nodes, variables_read
from accel_convert.codemods.model.locality import adds_up, collects, grown_in, mean_over_rows
from accel_convert.codemods.model.plan import names_prepared_under, prepared_by, prepared_loader_dicts
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.records import record

#: A loop over a prepared dict's loaders whose sums cannot be gathered per sample: reported.
SUMS_NOT_GATHERED = "ACC928"
#: Methods that move or cast a batch tensor and keep its rows.
ROW_KEEPING_METHODS = frozenset({"to", "cuda", "cpu", "float", "long", "double", "half", "detach"})
#: Longest one-line gather statement before its arguments go on their own line.
GATHER_LINE_LIMIT = 100
#: Stands for "the rows of a gathered tensor" while a sum is rewritten (not an identifier a script can hold).
ROWS_PLACEHOLDER = "__gathered_rows__"
NOT_GATHERED_MESSAGE = (
    "the running sums of this loop over the loaders of the dict {name} count this process's samples only "
    "(and the last batch's padding): gather what they count with accelerator.gather_for_metrics"
)


@record(frozen=True, eq=False, repr=False)
class PassedNames:
    """What the methods of the file's classes receive: for a method's parameter, or an attribute
    a class binds from one (``self.criterion = criterion``), keyed by the class as the analysis
    keys them, the names its callers pass, followed through their own parameters."""

    classes: frozenset[str] = frozenset()
    passed: frozenset[tuple[str, str, frozenset[str]]] = frozenset()

    def of(self, owner: str, name: str) -> frozenset[str] | None:
        """The names passed for ``name`` in the methods of class ``owner``; None when unknown."""
        return next((names for key, held, names in self.passed if key == owner and held == name), None)


@rule_provider(needs=("arguments",))
def passed_names(a: Analysis) -> PassedNames:
    """:class:`PassedNames` of the script (``trainer.fit(dataloaders)``, ``Trainer(model, criterion)``)."""
    classes = frozenset(a.r.classes)
    passed = frozenset(
        (owner, name, frozenset(a.origins_of(owner, name))) for owner, name in a.arguments if owner in classes
    )
    return PassedNames(classes, passed)


class LoaderDict(Rule):
    code = "ACC119"
    name = "loader-dict"
    fixes = {
        "ACC928": (
            "Gather what the sums count before adding it up: inside the loop, ``preds, labels = accelerator.gather_for_metrics((preds, labels))``, then add the gathered per-sample counts (``correct += (preds == labels).sum().item()``, ``total += len(labels)``)."
        ),
    }
    providers = (passed_names,)
    extra_codes = {
        SUMS_NOT_GATHERED: "loader-dict-sums: running sums over a prepared dict's loaders that cannot be "
        "gathered per sample (gather them by hand)",
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                image_datasets = {x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}
                dataloaders = {x: DataLoader(image_datasets[x], batch_size=4) for x in ["train", "val"]}
                model = nn.Linear(4, 2)
                criterion = nn.CrossEntropyLoss()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for phase in ["train", "val"]:
                    running_loss = 0.0
                    for inputs, labels in dataloaders[phase]:
                        optimizer.zero_grad()
                        with torch.set_grad_enabled(phase == "train"):
                            outputs = model(inputs)
                            loss = criterion(outputs, labels)
                            if phase == "train":
                                loss.backward()
                                optimizer.step()
                        running_loss += loss.item() * inputs.size(0)
                    print(phase, running_loss / len(image_datasets[phase]))
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                image_datasets = {x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}
                accelerator = Accelerator()
                dataloaders = {x: DataLoader(image_datasets[x], batch_size=4) for x in ["train", "val"]}
                model = nn.Linear(4, 2)
                criterion = nn.CrossEntropyLoss()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer = accelerator.prepare(model, optimizer)
                dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}
                for phase in ["train", "val"]:
                    running_loss = 0.0
                    for inputs, labels in dataloaders[phase]:
                        optimizer.zero_grad()
                        with torch.set_grad_enabled(phase == "train"):
                            outputs = model(inputs)
                            loss = criterion(outputs, labels)
                            if phase == "train":
                                accelerator.backward(loss)
                                optimizer.step()
                        gathered_outputs, gathered_labels = accelerator.gather_for_metrics((outputs.detach(), labels))
                        running_loss += criterion(gathered_outputs, gathered_labels).item() * gathered_labels.size(0)
                    accelerator.print(phase, running_loss / len(image_datasets[phase]))
            """,
        ),
        # A model returning a tuple while training (Inception's auxiliary outputs): the element the
        # loop reads, ``outputs[1] if isinstance(outputs, tuple) else outputs``, is its per-sample output.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class TwoHeads(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.body = nn.Linear(4, 8)
                        self.fc = nn.Linear(8, 2)

                    def forward(self, x):
                        features = self.body(x)
                        return (features, self.fc(features)) if self.training else self.fc(features)


                torch.manual_seed(0)
                image_datasets = {x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}
                dataloaders = {x: DataLoader(image_datasets[x], batch_size=4) for x in ["train", "val"]}
                model = TwoHeads()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for phase in ["train", "val"]:
                    model.train() if phase == "train" else model.eval()
                    running_corrects = 0
                    for inputs, labels in dataloaders[phase]:
                        optimizer.zero_grad()
                        with torch.set_grad_enabled(phase == "train"):
                            outputs = model(inputs)
                            logits = outputs[1] if isinstance(outputs, tuple) else outputs
                            loss = nn.functional.cross_entropy(logits, labels)
                            if phase == "train":
                                loss.backward()
                                optimizer.step()
                        running_corrects += (logits.argmax(1) == labels).sum().item()
                    print(phase, running_corrects / len(image_datasets[phase]))
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class TwoHeads(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.body = nn.Linear(4, 8)
                        self.fc = nn.Linear(8, 2)

                    def forward(self, x):
                        features = self.body(x)
                        return (features, self.fc(features)) if self.training else self.fc(features)


                torch.manual_seed(0)
                image_datasets = {x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}
                accelerator = Accelerator()
                dataloaders = {x: DataLoader(image_datasets[x], batch_size=4) for x in ["train", "val"]}
                model = TwoHeads()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer = accelerator.prepare(model, optimizer)
                dataloaders = {key: accelerator.prepare(loader) for key, loader in dataloaders.items()}
                for phase in ["train", "val"]:
                    model.train() if phase == "train" else model.eval()
                    running_corrects = 0
                    for inputs, labels in dataloaders[phase]:
                        optimizer.zero_grad()
                        with torch.set_grad_enabled(phase == "train"):
                            outputs = model(inputs)
                            logits = outputs[1] if isinstance(outputs, tuple) else outputs
                            loss = nn.functional.cross_entropy(logits, labels)
                            if phase == "train":
                                accelerator.backward(loss)
                                optimizer.step()
                        gathered_labels, gathered_logits = accelerator.gather_for_metrics((labels, logits.detach()))
                        running_corrects += (gathered_logits.argmax(1) == gathered_labels).sum().item()
                    accelerator.print(phase, running_corrects / len(image_datasets[phase]))
            """,
        ),
        Example(
            code=SUMS_NOT_GATHERED,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                image_datasets = {x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}
                dataloaders = {x: DataLoader(image_datasets[x], batch_size=4) for x in ["train", "val"]}
                model = nn.Linear(4, 2)
                criterion = nn.CrossEntropyLoss()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for phase in ["train", "val"]:
                    running_loss = 0.0
                    for inputs, labels in dataloaders[phase]:
                        optimizer.zero_grad()
                        with torch.set_grad_enabled(phase == "train"):
                            loss = criterion(model(inputs), labels)
                            if phase == "train":
                                loss.backward()
                                optimizer.step()
                        running_loss += loss.item()
                    print(phase, running_loss / len(dataloaders[phase]))
            """,
            message=NOT_GATHERED_MESSAGE.format(name="dataloaders"),
        ),
        # A dict of data sets keyed by phase (not of loaders): the loader built from one is a named
        # loader, prepared by ACC103, and the dict stays as written.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    datasets = {phase: TensorDataset(torch.randn(64, 8), torch.randn(64, 1)) for phase in ["train", "val"]}
                    train_loader = DataLoader(datasets["train"], batch_size=8, shuffle=True)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    datasets = {phase: TensorDataset(torch.randn(64, 8), torch.randn(64, 1)) for phase in ["train", "val"]}
                    train_loader = DataLoader(datasets["train"], batch_size=8, shuffle=True)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                image_datasets = {x: TensorDataset(torch.randn(10, 4), torch.randint(0, 2, (10,))) for x in ["train", "val"]}
                dataloaders = {x: DataLoader(image_datasets[x], batch_size=4) for x in ["train", "val"]}
                model = nn.Linear(4, 2)
                criterion = nn.CrossEntropyLoss()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for phase in ["train", "val"]:
                    running_corrects = 0
                    for inputs, labels in dataloaders[phase]:
                        optimizer.zero_grad()
                        with torch.set_grad_enabled(phase == "train"):
                            outputs = model(inputs)
                            loss = criterion(outputs, labels)
                            if phase == "train":
                                loss.backward()
                                optimizer.step()
                        running_corrects += (outputs.argmax(1) == labels).sum().item()
                    print(phase, running_corrects / len(image_datasets[phase]))
            """,
            code=SUMS_NOT_GATHERED,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # The model's dicts of loaders (``facts.loader_dict_names``: written in the file or
        # returned by a factory of it) are prepared by the prepare rule, by their values; a dict
        # it does not know is prepared here where no loader of the model trains.
        unknown_dicts = not facts.train_loops and not facts.train_loaders
        return (
            facts.backward_site is not None
            and facts.has_accelerator
            and (bool(facts.loader_dict_names) or unknown_dicts)
            and not facts.existing_features & SELF_DISTRIBUTING
            and not facts.library_converted_alone
            and bool(facts.lines_mentioning(loader.rpartition(".")[2] for loader in DATA_LOADERS))
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        assignments = [node for node in module_nodes(module) if isinstance(node, cst.Assign)]
        already = prepared_loader_dicts(assignments, facts)
        if already:
            gatherer = _GatherSums(facts, module, already)
            return module.visit(gatherer), gatherer.changes(module)
        if facts.train_loops or facts.train_loaders:
            return module, []
        dicts = loader_dicts(module, facts)
        if not dicts:
            return module, []
        preparer = _PrepareDicts(facts, dicts)
        prepared = module.visit(preparer)
        changes = preparer.changes(module)
        if not preparer.prepared:
            return prepared, changes
        gatherer = _GatherSums(facts, prepared, preparer.prepared)
        converted = prepared.visit(gatherer)
        return converted, [*changes, *gatherer.changes(prepared)]


def loader_dicts(module: cst.Module, facts: ScriptFacts) -> list[str]:
    """Names bound (once) to a dict of DataLoaders (a dict comprehension or a literal), in file order."""
    found: list[str] = []
    bound: dict[str, int] = {}
    assignments = [node for node in module_nodes(module) if isinstance(node, cst.Assign)]
    for node in assignments:
        for assign_target in node.targets:
            for name in target_names(assign_target.target):
                bound[name] = bound.get(name, 0) + 1
    for node in assignments:
        if len(node.targets) != 1:
            continue
        target, value = node.targets[0].target, node.value
        # A dict bound once: which of several bindings trains would be a guess.
        if holds_loaders(value, facts) and isinstance(target, cst.Name) and bound[target.value] == 1:
            found.append(target.value)
    return found


def _dict_assignment(node: cst.CSTNode, names: Sequence[str]) -> str | None:
    """The loader dict a one-statement line ``D = {...}`` binds, if it is one of ``names``."""
    if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
        return None
    assign = node.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if isinstance(target, cst.Name) and target.value in names and isinstance(assign.value, (cst.Dict, cst.DictComp)):
        return target.value
    return None


class _PrepareDicts(RuleTransformer):
    """``D = {x: accelerator.prepare(loader) ...}`` after the statement building each loader dict,
    where the accelerator exists: right after the block's ``prepare`` of the model and optimizer
    when that comes later with nothing reading the dict in between (preparing a shuffled loader
    may draw from the global random generator, which the model's initialisation below it would
    then see differently from the one-process run), else right after the dict."""

    def __init__(self, facts: ScriptFacts, names: list[str]) -> None:
        super().__init__(facts, facts.lines_mentioning(names))
        self.names = names
        self.prepared: list[str] = []
        #: The dict statements (the node objects their block now holds, by id): the dict's name,
        #: the statement as written, and whether the accelerator exists there already.
        self._pending: dict[int, tuple[str, cst.SimpleStatementLine, bool]] = {}

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        name = _dict_assignment(original_node, self.names)
        if name is not None:
            self._pending[id(updated_node)] = (name, original_node, self.accelerator_reachable())
        return updated_node

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = self._placed(updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = self._placed(updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def _placed(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        """``body`` with the prepare of each pending dict it builds inserted; None when it builds none."""
        after: dict[int, list[str]] = {}
        for index, line in enumerate(body):
            pending = self._pending.pop(id(line), None)
            if pending is None:
                continue
            name, written, reachable = pending
            # After the dict when the accelerator exists there; the block's prepare always has it.
            at: int | None = index if reachable else None
            for later in range(index + 1, len(body)):
                if isinstance(body[later], (cst.FunctionDef, cst.ClassDef)):
                    continue  # a definition runs nothing here
                if name in variables_read(body[later]):
                    break
                if prepared_by(body[later], self.facts) is not None:
                    at = later
                    break
            if at is None:
                continue  # no accelerator before the dict is used: ACC901 says what to do
            self.prepared.append(name)
            self.report(written, LoaderDict.code, f"prepare the DataLoaders held in the dict {name}")
            after.setdefault(at, []).append(name)
        if not after:
            return None
        placed: list[cst.BaseStatement] = []
        for index, line in enumerate(body):
            placed.append(line)
            for name in after.get(index, ()):
                placed.append(
                    statement(f"{name} = {{x: {self.accelerator}.prepare(loader) for x, loader in {name}.items()}}")
                )
        return placed


class _GatherSums(RuleTransformer):
    """In each loop over ``D[...]`` of a prepared dict ``D``: the running sums that end its body
    read gathered per-sample tensors (see the module docstring), or the loop is reported."""

    def __init__(self, facts: ScriptFacts, module: cst.Module, prepared: list[str]) -> None:
        # Every line: a loop may read the dict through a parameter of another name.
        super().__init__(facts, None)
        self.module = module
        self.prepared = prepared
        self._functions: list[cst.FunctionDef] = []
        #: Names the tree binds from ``accelerator.prepare(...)`` (found when first needed).
        self._prepared_here: set[str] | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated_node

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        loop = original_node
        loader = iterated(loop.iter, self.facts.names, self.scope)
        batch = batch_target(loop, self.facts.names, self.scope)
        if not (
            isinstance(loader, cst.Subscript)
            and isinstance(loader.value, cst.Name)
            and isinstance(updated_node.body, cst.IndentedBlock)
        ):
            return updated_node
        name = loader.value.value
        # The dict itself, or a parameter its callers pass it to (``train_model(..., loaders)``).
        passed = self._arguments_for(name)
        held = [name] if passed is None else passed
        if not held or not all(dict_name in self.prepared for dict_name in held):
            return updated_node
        inside = nodes_in(loop.body)
        if any(collects(node) for node in inside):
            # ``meter.update(loss.item(), inputs.size(0))``, ``losses.append(...)``: per process.
            self.report(
                original_node, SUMS_NOT_GATHERED, NOT_GATHERED_MESSAGE.format(name=name), False, header_only=True
            )
            return updated_node
        if not grown_in(loop.body):
            return updated_node  # nothing counted per process
        body = list(updated_node.body.body)
        gathered = self._gathered_body(batch, body) if self.accelerator_reachable() and batch is not None else None
        if gathered is None:
            self.report(
                original_node, SUMS_NOT_GATHERED, NOT_GATHERED_MESSAGE.format(name=name), False, header_only=True
            )
            return updated_node
        rewritten, first_sum = gathered
        original_body = original_node.body.body if isinstance(original_node.body, cst.IndentedBlock) else ()
        anchor = original_body[first_sum] if first_sum < len(original_body) else original_node
        self.report(
            anchor,
            LoaderDict.code,
            f"the running sums over the loaders of {name} count every process's samples once (gather_for_metrics)",
        )
        return updated_node.with_changes(body=updated_node.body.with_changes(body=rewritten))

    # -- the analysis of one loop -------------------------------------------------------------

    def _gathered_body(
        self, batch: cst.BaseExpression, body: list[cst.BaseStatement]
    ) -> tuple[list[cst.BaseStatement], int] | None:
        """The loop body with the gather inserted before its trailing sums (``batch``: the loop's
        target for the batch), and the index of the first sum in ``body``; None when unsafe."""
        trailing = _trailing_sums(body)
        if trailing is None:
            return None  # a sum elsewhere in the loop (inside an if, before the forward)
        first_sum, sums = trailing
        rows = set(target_names(batch))
        if not rows or not all(name.isidentifier() for name in rows):
            return None
        losses: dict[str, cst.Call] = {}
        local: set[str] = set()
        forwarded: set[str] = set()
        for node in _in_source_order(body[:first_sum]):
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.While, cst.With)):
                if not self._classify(node, rows, losses, local, forwarded):
                    return None
        gathered: list[str] = []  # per-sample names the sums read, in first-use order
        new_sums: list[cst.BaseStatement] = []
        for line, augment in zip(body[first_sum:], sums, strict=True):
            value = self._rewritten_sum(augment.value, rows, losses, local, gathered)
            if value is None:
                return None
            new_sums.append(line.with_changes(body=[augment.with_changes(value=value)]))
        if not gathered:
            return None
        renamed = {name: f"gathered_{name}" for name in gathered}
        if any(word in self.facts.word_lines for word in renamed.values()):
            return None
        new_sums = [cast(cst.BaseStatement, line.visit(_Renamer(renamed))) for line in new_sums]
        gather = self._gather_statement(gathered, forwarded, renamed)
        # The comment above the sums (``# statistics``) now heads the gather that feeds them.
        first = new_sums[0]
        if isinstance(first, cst.SimpleStatementLine) and isinstance(gather, cst.SimpleStatementLine):
            gather = gather.with_changes(leading_lines=first.leading_lines)
            new_sums[0] = first.with_changes(leading_lines=[])
        return [*body[:first_sum], gather, *new_sums], first_sum

    def _gather_statement(self, gathered: list[str], forwarded: set[str], renamed: dict[str, str]) -> cst.BaseStatement:
        """``gathered_x, gathered_y = accelerator.gather_for_metrics((x, y))``, split over lines
        when one is too long."""
        # Model outputs still carry the graph the backward used: the gather only needs their values.
        sent = ", ".join(f"{name}.detach()" if name in forwarded else name for name in gathered)
        targets = ", ".join(renamed[name] for name in gathered)
        sent = sent if len(gathered) == 1 else f"({sent})"
        one_line = f"{targets} = {self.accelerator}.gather_for_metrics({sent})"
        return statement(
            one_line
            if len(one_line) <= GATHER_LINE_LIMIT
            else f"{targets} = {self.accelerator}.gather_for_metrics(\n    {sent}\n)"
        )

    def _classify(
        self, node: cst.CSTNode, rows: set[str], losses: dict[str, cst.Call], local: set[str], forwarded: set[str]
    ) -> bool:
        """Record what one binding in the loop makes: per-sample rows (``forwarded``: a model's
        outputs), a mean loss, or a per-process value; False when it cannot be followed (a nested
        loop, an augmented assignment)."""
        if isinstance(node, (cst.For, cst.While, cst.AugAssign)):
            return False
        if isinstance(node, cst.With):
            for item in node.items:
                if item.asname is not None:
                    local.update(target_names(item.asname.name))
            return True
        if isinstance(node, cst.AnnAssign):
            local.update(target_names(node.target))
            return True
        assert isinstance(node, cst.Assign)
        self._classify_assignment(node, rows, losses, local, forwarded)
        return True

    def _classify_assignment(
        self, node: cst.Assign, rows: set[str], losses: dict[str, cst.Call], local: set[str], forwarded: set[str]
    ) -> None:
        """:meth:`_classify` for ``name = value``."""
        targets = [target_names(target.target) for target in node.targets]
        bound = [name for names in targets for name in names]
        value = node.value
        if len(targets) == 1 and len(bound) == 1 and self._keeps_rows(value, rows):
            rows.add(bound[0])
            local.discard(bound[0])
            if isinstance(value, cst.Call) and (isinstance(value.func, cst.Name) or self._calls_model(value)):
                forwarded.add(bound[0])
            else:
                forwarded.discard(bound[0])
            return
        # ``logits = outputs[1] if isinstance(outputs, tuple) else outputs``: the model's output
        # (one of the tuple it returns while training), still carrying the graph.
        if len(targets) == 1 and len(bound) == 1 and self._output_or_its_item(value, forwarded):
            rows.add(bound[0])
            forwarded.add(bound[0])
            local.discard(bound[0])
            return
        # ``_, preds = torch.max(outputs, 1)``: the values and the indices are one per row.
        if len(targets) == 1 and len(bound) == 2 and self._is_max_over_classes(value, rows, "torch.max", "max"):
            rows.update(bound)
            local.difference_update(bound)
            return
        if len(bound) == 1 and isinstance(value, cst.Call) and self._is_mean_loss_call(value, rows):
            losses[bound[0]] = value
            rows.discard(bound[0])
            return
        for name in bound:
            rows.discard(name)
            forwarded.discard(name)
            losses.pop(name, None)
            local.add(name)

    def _keeps_rows(self, value: cst.BaseExpression, rows: set[str]) -> bool:
        """A model's output on a batch, a batch moved or cast, or a per-row max/argmax."""
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in rows:
            if func.attr.value in ROW_KEEPING_METHODS:
                return True
            return func.attr.value == "argmax" and _over_classes(value.args)
        if self._is_max_over_classes(value, rows, "torch.argmax", "argmax"):
            return True
        if self._calls_model(value):
            return bool(value.args) and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value in rows
        return False

    def _calls_model(self, call: cst.Call) -> bool:
        """``model(...)``, or ``self.model(...)`` in a method."""
        if isinstance(call.func, cst.Name):
            return self._is_model(call.func.value)
        held = dotted(call.func)
        return held is not None and self._instance_attribute(held) and self._is_model(held)

    def _instance_attribute(self, name: str) -> bool:
        """Whether ``name`` is ``self.attribute`` in a method (``self`` its instance parameter)."""
        if self._method_class() is None:
            return False
        instance = instance_parameter(self._functions[-1])
        return instance is not None and name.count(".") == 1 and name.startswith(f"{instance}.")

    def _output_or_its_item(self, value: cst.BaseExpression, forwarded: set[str]) -> bool:
        """``out[i] if isinstance(out, tuple) else out`` (either order, ``not isinstance``
        swapping them) of a model's output ``out``: one per-sample tensor whichever the model returned."""
        if not isinstance(value, cst.IfExp):
            return False
        test, item, whole = value.test, value.body, value.orelse
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, item, whole = test.expression, whole, item
        if not (isinstance(whole, cst.Name) and whole.value in forwarded and self._tests_tuple(test, whole.value)):
            return False
        return (
            isinstance(item, cst.Subscript)
            and isinstance(item.value, cst.Name)
            and item.value.value == whole.value
            and len(item.slice) == 1
            and isinstance(item.slice[0].slice, cst.Index)
            and isinstance(item.slice[0].slice.value, cst.Integer)
        )

    def _tests_tuple(self, test: cst.BaseExpression, name: str) -> bool:
        """``isinstance(name, tuple)`` or ``isinstance(name, (tuple, list))``."""
        if not (
            isinstance(test, cst.Call)
            and self.builtin(test.func) == "isinstance"
            and len(test.args) == 2
            and isinstance(test.args[0].value, cst.Name)
            and test.args[0].value.value == name
        ):
            return False
        kinds = test.args[1].value
        elements = [element.value for element in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        return all(self.builtin(kind) in ("tuple", "list") for kind in elements)

    def _is_max_over_classes(self, value: cst.BaseExpression, rows: set[str], function: str, method: str) -> bool:
        """``torch.max(outputs, 1)`` or ``outputs.max(1)`` (``function``, ``method``) of a per-sample name."""
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == method
            and isinstance(func.value, cst.Name)
            and func.value.value in rows
        ):
            return _over_classes(value.args)
        return (
            self.facts.qualified_name(func, self.scope) == function
            and bool(value.args)
            and isinstance(value.args[0].value, cst.Name)
            and value.args[0].value.value in rows
            and _over_classes(value.args[1:])
        )

    def _is_model(self, name: str) -> bool:
        passed = self._arguments_for(name)
        if passed is not None:
            return bool(passed) and all(self._known_model(argument) for argument in passed)
        return self._known_model(name)

    def _known_model(self, name: str) -> bool:
        """A model of the analysis, or a name the converted tree prepares that is no other
        training object (the tutorial's ``model_conv``, known only by ``model_conv.fc``)."""
        if name in self.facts.models:
            return True
        if self._prepared_here is None:
            self._prepared_here = names_prepared_under(self.module, self.facts)
        others = self.facts.optimizers | self.facts.loaders | self.facts.schedulers
        return name in self._prepared_here and name not in others

    def _is_mean_loss_call(self, call: cst.Call, rows: set[str]) -> bool:
        """``criterion(outputs, labels)`` on two per-sample names, with a mean-reduced loss built
        without arguments (or ``F.cross_entropy(outputs, labels)``)."""
        if len(call.args) != 2 or any(
            arg.keyword is not None or arg.star or not isinstance(arg.value, cst.Name) or arg.value.value not in rows
            for arg in call.args
        ):
            return False
        if mean_over_rows(self.facts.qualified_name(call.func, self.scope), call):
            return True
        func = dotted(call.func)
        if func is None or not (isinstance(call.func, cst.Name) or self._instance_attribute(func)):
            return False
        passed = self._arguments_for(func)
        names = [func] if passed is None else passed
        return bool(names) and all(self._bound_to_mean_loss(name) for name in names)

    def _arguments_for(self, name: str) -> list[str] | None:
        """When ``name`` is a parameter of the enclosing function: the names its callers in this
        file pass for it ([] when a caller passes anything but a name); None when it is not one.
        In a method, also for an attribute of its instance the class binds from a parameter."""
        if not self._functions:
            return None
        function = self._functions[-1]
        parameters = parameter_names(function)
        owner = self._method_class()
        if owner is not None:
            return self._passed_to_method(owner, name, parameters)
        if name not in parameters:
            return None
        index = parameters.index(name)
        passed: list[str] = []
        for node in module_nodes(self.module):
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                continue
            if node.func.value != function.name.value:
                continue
            positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
            keyword = [arg for arg in node.args if arg.keyword is not None and arg.keyword.value == name]
            argument = keyword[0] if keyword else positional[index] if index < len(positional) else None
            if argument is None or not isinstance(argument.value, cst.Name):
                return []
            passed.append(argument.value.value)
        return passed

    def _passed_to_method(self, owner: str, name: str, parameters: Sequence[str]) -> list[str] | None:
        """:meth:`_arguments_for` in a method of class ``owner``: what its callers pass for the
        parameter ``name``, or for the parameter the class binds the attribute ``name`` from
        (None for an attribute bound from anything else: ``self.model = Net()`` is itself)."""
        received = self.facts.of(passed_names).of(owner, name)
        if name in parameters:
            return [] if received is None else sorted(received)
        if received is None or not self._instance_attribute(name):
            return None
        return sorted(received)

    def _method_class(self) -> str | None:
        """The class of the file whose method the walk is in (directly), if it is in one."""
        classes = self.facts.of(passed_names).classes
        if not self._functions or len(self.scope) != 2 or self.scope[0] not in classes:
            return None
        return self.scope[0] if self.scope[1] == self._functions[-1].name.value else None

    def _bound_to_mean_loss(self, name: str) -> bool:
        """Every assignment of ``name`` in the file builds a mean-reduced loss without arguments."""
        values = [
            node.value
            for node in module_nodes(self.module)
            if isinstance(node, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
        ]
        # Which losses are a plain mean of their rows is the locality owner's answer.
        return bool(values) and all(
            isinstance(value, cst.Call) and mean_over_rows(self.facts.qualified_name(value.func), value)
            for value in values
        )

    def _rewritten_sum(
        self,
        value: cst.BaseExpression,
        rows: set[str],
        losses: dict[str, cst.Call],
        local: set[str],
        gathered: list[str],
    ) -> cst.BaseExpression | None:
        """The summed value reading per-sample names only (renamed later), the batch-mean loss
        times the batch size recomputed on them; None when it reads a per-process value."""
        counting = _CountRows(rows, losses, self.builtin)
        rewritten = cast(cst.BaseExpression, value.visit(counting))
        read = variables_read(rewritten) - {ROWS_PLACEHOLDER}
        if read & local or read & set(losses):
            return None
        for name in [*counting.used, *sorted(read & rows)]:
            if name not in gathered:
                gathered.append(name)
        if counting.counted:
            # A batch size reads the rows of any gathered tensor: an input only counted is not sent.
            if not gathered:
                gathered.append(counting.counted[0])
            counted_gathered = [name for name in counting.counted if name in gathered]
            anchor = counted_gathered[0] if counted_gathered else counting.used[-1] if counting.used else gathered[0]
            rewritten = cast(cst.BaseExpression, rewritten.visit(_Renamer({ROWS_PLACEHOLDER: anchor})))
        return rewritten


def _in_source_order(statements: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """Every node of ``statements``, each before its children, in the order the source has them."""
    found: list[cst.CSTNode] = []
    pending = list(reversed(statements))
    while pending:
        node = pending.pop()
        found.append(node)
        pending.extend(reversed(node.children))
    return found


def _over_classes(args: Sequence[cst.Arg]) -> bool:
    """``(1)`` or ``(dim=1)``: the reduction over a row's classes."""
    if len(args) != 1:
        return False
    arg = args[0]
    return (
        (arg.keyword is None or arg.keyword.value == "dim")
        and isinstance(arg.value, cst.Integer)
        and (arg.value.value == "1")
    )


def _trailing_sums(body: list[cst.BaseStatement]) -> tuple[int, list[cst.AugAssign]] | None:
    """The index of the first of the running sums that end the loop body, and those sums; None
    when there are none, or the body adds up something before them."""
    first_sum = len(body)
    while first_sum > 0 and _sum_alone_on_line(body[first_sum - 1]) is not None:
        first_sum -= 1
    sums = [_sum_alone_on_line(line) for line in body[first_sum:]]
    if not sums or any(isinstance(node, cst.AugAssign) for line in body[:first_sum] for node in nodes_in(line)):
        return None
    return first_sum, [cast(cst.AugAssign, augment) for augment in sums]


def _sum_alone_on_line(line: cst.BaseStatement) -> cst.AugAssign | None:
    """``total += value`` alone on its line, into a plain name."""
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
        node = line.body[0]
        summed = adds_up(node)
        if summed is not None and isinstance(summed.target, cst.Name):
            return summed
    return None


def _batch_count(node: cst.CSTNode, rows: set[str], builtin: BuiltinOf) -> str | None:
    """The per-sample name whose row count ``node`` is (``x.size(0)``, ``len(x)``, ``x.shape[0]``)."""
    counted = rows_counted(node, builtin)
    return counted if counted in rows else None


def _loss_item(node: cst.CSTNode, losses: dict[str, cst.Call]) -> str | None:
    """The loss name of ``loss.item()`` or a bare ``loss``."""
    if isinstance(node, cst.Name) and node.value in losses:
        return node.value
    if (
        isinstance(node, cst.Call)
        and not node.args
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "item"
        and isinstance(node.func.value, cst.Name)
        and node.func.value.value in losses
    ):
        return node.func.value.value
    return None


class _CountRows(cst.CSTTransformer):
    """Rewrites ``loss.item() * x.size(0)`` (either order) into the criterion recomputed on its
    arguments times the rows, and every batch size (``x.size(0)``, ``len(x)``, ``x.shape[0]``)
    into the rows of a placeholder name, renamed to a gathered tensor afterwards."""

    def __init__(self, rows: set[str], losses: dict[str, cst.Call], builtin: BuiltinOf) -> None:
        super().__init__()
        self.rows = rows
        self.losses = losses
        #: What a name denotes where the rewritten sum stands (``len`` the builtin).
        self.builtin = builtin
        #: Names the recomputed losses read, in order.
        self.used: list[str] = []
        #: Per-sample names whose row counts were read, in order.
        self.counted: list[str] = []

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        if not isinstance(original_node.operator, cst.Multiply):
            return updated_node
        sides = ((original_node.left, original_node.right), (original_node.right, original_node.left))
        for loss_side, count_side in sides:
            loss = _loss_item(loss_side, self.losses)
            if loss is None or _batch_count(count_side, self.rows, self.builtin) is None:
                continue
            call = self.losses[loss]
            for arg in call.args:
                if isinstance(arg.value, cst.Name) and arg.value.value not in self.used:
                    self.used.append(arg.value.value)
            recomputed: cst.BaseExpression = call
            if isinstance(loss_side, cst.Call):
                recomputed = cst.Call(func=cst.Attribute(value=call, attr=cst.Name("item")))
            return cst.BinaryOperation(left=recomputed, operator=cst.Multiply(), right=_rows_of(ROWS_PLACEHOLDER))
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._counted(original_node, updated_node)

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        return self._counted(original_node, updated_node)

    def _counted(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        counted = _batch_count(original_node, self.rows, self.builtin)
        if counted is None:
            return updated_node
        if counted not in self.counted:
            self.counted.append(counted)
        return _rows_of(ROWS_PLACEHOLDER)


def _rows_of(name: str) -> cst.Call:
    """``name.size(0)``."""
    return cst.Call(func=cst.Attribute(value=cst.Name(name), attr=cst.Name("size")), args=[cst.Arg(cst.Integer("0"))])


class _Renamer(cst.CSTTransformer):
    """Every variable ``old`` → ``new`` (attribute names after a dot are left)."""

    def __init__(self, renamed: dict[str, str]) -> None:
        super().__init__()
        self.renamed = renamed

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)  # ``labels.data`` keeps ``data``

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.renamed.get(original_node.value)
        return updated_node.with_changes(value=new) if new is not None else updated_node
