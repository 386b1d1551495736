"""Saves in the file's other classes (a callback, Bjarten's ``EarlyStopping`` handed the prepared
model), which no accelerator reaches: every rank writes the file. Reported (ACC914), not
rewritten."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import walk


def classes_given_models(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Module-level classes, other than training classes, whose instances receive a model that
    is prepared (``early_stopping(val_loss, model)`` with ``early_stopping = EarlyStopping(...)``,
    Bjarten's early stopping): in this file, or, for a module of a program, in another module."""
    seeded = set(facts.program.classes_given_models) if facts.program is not None else set()
    classes = {line.name.value for line in module.body if isinstance(line, cst.ClassDef)}
    # A model class given a model is a composition (``Head(backbone)``), not a helper that saves it.
    classes -= facts.training_classes | facts.model_classes
    if not classes:
        return seeded - facts.training_classes
    finder = _HandedModels(facts, classes)
    walk(module, finder)
    return (seeded | finder.found) - facts.training_classes


class _HandedModels(cst.CSTVisitor):
    """Which of ``classes`` get a model of the file: as a constructor argument, or as an argument
    of a call of an instance (names file-wide, as facts are). Local: reads the module once."""

    def __init__(self, facts: ScriptFacts, classes: set[str]) -> None:
        super().__init__()
        self.facts, self.classes = facts, classes
        self.instances: dict[str, str] = {}
        self.found: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in self.classes:
            for target in node.targets:
                name = dotted(target.target)
                if name is not None:
                    self.instances[name] = value.func.value

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        owner = func.value if isinstance(func, cst.Attribute) else func
        name = dotted(owner)
        cls = (
            func.value if isinstance(func, cst.Name) and func.value in self.classes else self.instances.get(name or "")
        )
        if cls is not None and any(dotted(arg.value) in self.facts.models for arg in node.args if not arg.star):
            self.found.add(cls)


class SavesInHelperClasses(RuleTransformer):
    """``torch.save`` in the methods of the file's other classes, which no accelerator reaches:
    every rank writes the file. One handed the prepared model (``early_stopping(val_loss,
    model)``) saves it with DDP's ``module.`` keys; another (a callback given the trainer, saving
    ``trainer.model.state_dict()``) may too. Reported (ACC914), not rewritten."""

    def __init__(self, facts: ScriptFacts, lines: set[int], handed: set[str], others: set[str]) -> None:
        super().__init__(facts, lines)
        self.handed = handed
        self.classes = handed | others

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return len(self.scope) == 1 and node.name.value in self.classes

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return bool(self.scope) and self.scope[0] in self.classes

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not (self.scope and self.scope[0] in self.classes):
            return updated_node
        if self.facts.callee_name(original_node.func) != "torch.save":
            return updated_node
        if self.scope[0] in self.handed:
            message = (
                f"torch.save in {self.scope[0]}, which is handed the prepared model: every rank writes this "
                "file, with DDP's 'module.' keys (save accelerator.unwrap_model(model) on the main process)"
            )
        else:
            message = (
                f"torch.save in {self.scope[0]}, where the accelerator is not reachable: every rank writes this "
                "file; save on the main process (and a prepared model's state from accelerator.unwrap_model(model), "
                "without DDP's 'module.' keys)"
            )
        self.report(original_node, "ACC914", message, False)
        return updated_node
