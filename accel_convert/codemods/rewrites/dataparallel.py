"""ACC110 dataparallel: drop ``nn.DataParallel`` (``prepare`` wraps the model in DDP) and unwrap ``.module``.

``accelerator.prepare`` does not unwrap a DataParallel model, and one process per device with DDP
replaces DataParallel's threads, so the wrapping line goes (an ``if`` left empty by it goes too).
``model.module`` reads the wrapped network: after the conversion that is
``accelerator.unwrap_model(model)``. A state dict loaded into the model once it was wrapped has
the wrapper's keys (``module.conv1.weight``: a checkpoint the original saved, or one a project
publishes): the model, no longer wrapped, loads it with that prefix taken off its keys (a dict
without it loads as before). A part wrapped alone (``model.features = nn.DataParallel(model.features)``)
has the wrapper's ``module.`` after its name (``features.module.0.weight``): a load into the model
takes that segment out, and ``model.features.module`` reads the part itself. Saves write the unwrapped model's keys either way. Scripts that already run their own DistributedDataParallel,
``mp.spawn`` or ``DistributedSampler`` are reported (ACC903) and left as they are.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import callee_words, unwrap_model
from accel_convert.codemods.engine.devices import data_parallel_wrapped, names_device, peel_moves
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import as_operand, dotted
from accel_convert.codemods.engine.torch_names import DATA_PARALLEL, HAND_DISTRIBUTION
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.plan import plan_of

#: What the analysis reports (``ScriptFacts.existing_features``) when there is something to do here.
PARALLEL_FEATURES = frozenset(
    {"DataParallel", "DistributedDataParallel", "mp.spawn", "DistributedSampler", "init_process_group"}
)


class DataParallelCodemod(Rule):
    code = "ACC110"
    name = "dataparallel"
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    if torch.cuda.device_count() > 1:
                        model = nn.DataParallel(model)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.module.state_dict(), "model.pt")


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
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")


                if __name__ == "__main__":
                    main()
            """,
        ),
        # Pretrained weights saved through the wrapper: their keys start with "module.".
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.DataParallel(nn.Linear(8, 1))
                    checkpoint = torch.load("pretrained.th")
                    model.load_state_dict(checkpoint["state_dict"])
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
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
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    checkpoint = torch.load("pretrained.th", map_location={"cuda:0": str(accelerator.device)})
                    model.load_state_dict({key.removeprefix("module."): value for key, value in checkpoint["state_dict"].items()})
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A script that distributes itself with DistributedDataParallel (its model.module is DDP's):
        # reported (ACC903) and left as written, model.module included.
        Example(
            leaves_alone=True,
            before="""
                import os

                import torch
                import torch.distributed as dist
                import torch.nn as nn
                from torch.nn.parallel import DistributedDataParallel
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.data.distributed import DistributedSampler


                def main():
                    dist.init_process_group("gloo")
                    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
                    model = DistributedDataParallel(nn.Linear(8, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    if int(os.environ["RANK"]) == 0:
                        torch.save(model.module.state_dict(), "model.pt")
                    dist.destroy_process_group()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.existing_features & PARALLEL_FEATURES)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        if any(qualified in facts.called for qualified in HAND_DISTRIBUTION):
            return module, []  # distributed by hand: ACC903 reports it, nothing here is touched
        # What changes: DataParallel(...) calls, ``model.module`` and isinstance unwraps naming a wrapper.
        words = callee_words(facts, DATA_PARALLEL | HAND_DISTRIBUTION) | {"module", "load_state_dict"}
        rewriter = _DataParallelRemover(facts, facts.lines_mentioning(words))
        new_module = module.visit(rewriter)
        return new_module, rewriter.changes(module)


class _DataParallelRemover(RuleTransformer):
    def __init__(self, facts: ScriptFacts, lines: set[int]) -> None:
        super().__init__(facts, lines)
        #: The blocks this pass emptied (by identity), kept alive here: an id alone could be taken
        #: by a new block once an emptied one's statement is removed, and that block would go too.
        self._emptied_blocks: dict[int, cst.IndentedBlock] = {}
        self._removing_line = False
        #: Statement lines the walk enters (by identity): only those can lose a ``model = model``.
        self._entered_lines: set[int] = set()
        #: (function, name) of the models wrapped in DataParallel so far, in the walk's order.
        self._wrapped: set[tuple[str, str]] = set()
        self._unwrapped_on_this_line = False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        # A read-only look first: rebuilding every line is most of what this pass would cost.
        finder = _DataParallelMention(self.facts)
        walk(node, finder)
        if finder.found and not self.skips(node):
            self._entered_lines.add(id(node))
        return finder.found

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.facts.callee_name(updated_node.func) not in DATA_PARALLEL:
            return self._loaded_without_prefix(original_node, updated_node)
        wrapped = data_parallel_wrapped(updated_node, self.facts)
        if wrapped is updated_node:
            return updated_node
        self.findings.add(
            original_node, DataParallelCodemod.code, "nn.DataParallel removed: prepare wraps the model in DDP", True
        )
        self._unwrapped_on_this_line = True
        return wrapped

    def _loaded_without_prefix(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        """``model.load_state_dict(checkpoint["state_dict"])`` where ``model`` was wrapped above:
        the dict has the wrapper's keys, so its ``module.`` prefix comes off. Where a part of it
        was wrapped (``model.features = nn.DataParallel(model.features)``), its keys have the
        wrapper's segment after the part's name (``features.module.0.weight``), which comes out."""
        func = updated_node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict" and updated_node.args):
            return updated_node
        model = dotted(func.value)
        first = updated_node.args[0]
        if model is None or first.keyword is not None or first.star:
            return updated_node
        whole = (self.function, model) in self._wrapped
        parts = sorted(
            name.removeprefix(f"{model}.")
            for function, name in self._wrapped
            if function == self.function and name.startswith(f"{model}.")
        )
        if not whole and not parts:
            return updated_node
        wrapped = ", ".join([f"{model}.{part}" for part in parts] + [model] * whole)
        self.report(
            original_node,
            DataParallelCodemod.code,
            f"{wrapped} no longer wrapped in DataParallel: the state dict's keys lose the wrapper's 'module.'",
        )
        key = _key_without_wrappers(whole, parts)
        stripped = cst.parse_expression(f"{{{key}: value for key, value in STATE.items()}}")
        assert isinstance(stripped, cst.DictComp)
        items = cst.Call(func=cst.Attribute(value=as_operand(first.value), attr=cst.Name("items")))
        comprehension = stripped.with_changes(for_in=stripped.for_in.with_changes(iter=items))
        return updated_node.with_changes(args=[first.with_changes(value=comprehension), *updated_node.args[1:]])

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        if id(original_node) not in self._entered_lines:
            return updated_node
        if self._unwrapped_on_this_line:
            self._unwrapped_on_this_line = False
            self._wrapped.update(
                (self.function, target)
                for statement in original_node.body
                if isinstance(statement, cst.Assign)
                for target in map(dotted, (each.target for each in statement.targets))
                if target is not None
            )
        body = [s for s in updated_node.body if not self._assigns_to_itself(s)]
        if not body:
            return cst.RemoveFromParent()
        return updated_node.with_changes(body=body)

    def _assigns_to_itself(self, statement: cst.BaseSmallStatement) -> bool:
        """``model = model`` (or ``model = model.cuda()``: prepare moves the model) after the unwrap;
        a function's own model, which no prepare places (``predict()`` building its own), keeps
        its move."""
        if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
            return False
        target = dotted(statement.targets[0].target)
        if isinstance(statement.value, cst.Call) and target in plan_of(self.facts).own_models(self.scope):
            return False
        value = peel_moves(statement.value, lambda node: names_device(node, self.facts))
        return target is not None and dotted(value) == target

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if original_node.body and not updated_node.body:
            emptied = updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
            self._emptied_blocks[id(emptied)] = emptied
            return emptied
        return updated_node

    # libcst removes an optional field's node (If.orelse) on RemoveFromParent; its typed stub says Else only.
    def leave_Else(self, original_node: cst.Else, updated_node: cst.Else) -> cst.Else | cst.RemovalSentinel:  # type: ignore[override]
        return cst.RemoveFromParent() if id(updated_node.body) in self._emptied_blocks else updated_node

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.BaseStatement | cst.RemovalSentinel:
        if id(updated_node.body) in self._emptied_blocks and updated_node.orelse is None:
            return cst.RemoveFromParent()
        return updated_node

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.BaseExpression:
        """``model.module if isinstance(model, nn.DataParallel) else model`` →
        ``accelerator.unwrap_model(model)``: after prepare the wrapper is DDP, which the
        isinstance test would not see."""
        model = self._data_parallel_check(updated_node.test)
        if model is None or not self.accelerator_reachable():
            return updated_node
        unwrapped = unwrap_model(self.facts, cst.Name(model))
        branches = (updated_node.body, updated_node.orelse)
        if any(b.deep_equals(unwrapped) for b in branches) and any(dotted(b) == model for b in branches):
            self.report(
                original_node, DataParallelCodemod.code, f"unwrapping {model} → accelerator.unwrap_model({model})"
            )
            return unwrapped.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node

    def _data_parallel_check(self, test: cst.BaseExpression) -> str | None:
        """The model name in ``isinstance(model, nn.DataParallel)`` (or a tuple of wrappers)."""
        if not (isinstance(test, cst.Call) and self.builtin(test.func) == "isinstance" and len(test.args) == 2):
            return None
        kinds = test.args[1].value
        elements = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        names = {self.facts.callee_name(e) for e in elements}
        model = dotted(test.args[0].value)
        return model if model in self.facts.models and names & (DATA_PARALLEL | HAND_DISTRIBUTION) else None

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        owner = dotted(updated_node.value)
        if updated_node.attr.value != "module":
            return updated_node
        if owner is not None and "." in owner and (self.function, owner) in self._wrapped:
            # ``model.features.module`` of a part wrapped above: the part itself, no longer wrapped.
            self.report(original_node, DataParallelCodemod.code, f"{owner}.module → {owner}", True)
            return updated_node.value
        if owner not in self.facts.models:
            return updated_node
        if not self.accelerator_reachable():
            return updated_node
        self.report(
            original_node, DataParallelCodemod.code, f"{owner}.module → accelerator.unwrap_model({owner})", True
        )
        return unwrap_model(self.facts, updated_node.value)


class _DataParallelMention(cst.CSTVisitor):
    """Whether a statement line holds what :class:`_DataParallelRemover` rewrites: a
    DataParallel call, ``model.module``, or a conditional expression (the isinstance unwrap).
    Local: it reads the one statement the rewrite is about to enter, to spare the rebuilding
    walk of statements with nothing to do."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__()
        self.facts, self.found = facts, False

    def visit_Call(self, node: cst.Call) -> None:
        self.found = self.found or self.facts.callee_name(node.func) in DATA_PARALLEL
        self.found = self.found or (isinstance(node.func, cst.Attribute) and node.func.attr.value == "load_state_dict")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # ``model.module``, and ``model.features.module`` of a part (the rewrite knows which were wrapped).
        owner = dotted(node.value)
        self.found = self.found or (
            node.attr.value == "module" and (owner in self.facts.models or "." in (owner or ""))
        )

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self.found = True


def _key_without_wrappers(whole: bool, parts: list[str]) -> str:
    """The key of a state dict saved through the wrappers, as the unwrapped model names it:
    ``key.removeprefix("module.")`` for the model wrapped whole, and for each wrapped part
    (``features``) its ``features.module.`` made ``features.`` (a key has at most one of these
    prefixes: the original wraps the model whole or its parts)."""
    key = 'key.removeprefix("module.")' if whole else "key"
    for part in reversed(parts):
        key = f'key.replace("{part}.module.", "{part}.", 1) if key.startswith("{part}.module.") else {key}'
    return key
