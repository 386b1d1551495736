"""The checkpoint rule's walk: which statements it enters, where in a function the model is
wrapped (after the ``prepare`` line), and which part of the rule each call or attribute goes to
(saves, loads, unwrapped reads, copies and exports)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call, is_accelerator_method
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import body_statements, dotted
from accel_convert.codemods.engine.torch_names import MODEL_EXPORTS
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.plan import PreparesAhead
from accel_convert.codemods.rewrites.checkpoint.copies_exports import (
    CopiesAndExportsUnwrapped,
    graph_of_tracker,
    model_copiers,
    type_of_model,
)
from accel_convert.codemods.rewrites.checkpoint.loads import LoadsOnOwnDevice
from accel_convert.codemods.rewrites.checkpoint.saves import SavesOnMainProcess, one_barrier_before_saves
from accel_convert.codemods.rewrites.checkpoint.unwrap import MODULE_OWN_ATTRIBUTES, UnwrapsModelAttributes


class CheckpointRewriter(SavesOnMainProcess, LoadsOnOwnDevice, UnwrapsModelAttributes, CopiesAndExportsUnwrapped):
    """The rule's one rewriting walk over the script; each base class holds one part of it."""

    def __init__(
        self,
        facts: ScriptFacts,
        module: cst.Module,
        lines: set[int],
        runtime: bool = True,
        saved_values: AbstractSet[str] = frozenset(),
    ) -> None:
        super().__init__(facts, lines)
        #: The runtime's ``accelerator.as_forward`` exists (not Accelerate's API).
        self.runtime = runtime
        #: Names ``torch.save`` writes: a dict bound to one of them holds what is saved.
        self.saved_values = saved_values
        self._prepare_pending: list[PreparesAhead] = [PreparesAhead(module.body, facts)]
        self._saves_in_line = 0
        #: Whether the script saves and loads: then loads wait for the save (a second, small pass).
        self.saves = False
        self.loads = False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # Model classes use ``self``; only a trainer class holding ``self.model`` needs a look.
        return self.in_training_class()

    # Function frames: in the function that calls prepare, the model is wrapped only after it.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._prepare_pending.append(PreparesAhead(body_statements(node), self.facts))

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        self._prepare_pending.pop()
        return super().leave_FunctionDef(original_node, updated_node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self._saves_in_line = 0
        # ``parser.add_argument("--lr", type=float, default=0.1)``-style lines (most of a script's
        # top) hold nothing this pass rewrites: no need to walk their expressions.
        if all(self._plain_call(small) for small in node.body):
            return False
        if any(isinstance(small, (cst.Import, cst.ImportFrom)) for small in node.body):
            return False  # ``import model.model as module_arch`` names a module, not a model's attribute
        if any(self._binds_saved_dict(small) for small in node.body):
            return True
        # Most lines hold no model attribute and no save/load: a read-only look is far cheaper
        # than the transformer's walk, which rebuilds every node it enters.
        finder = _CheckpointInterest(self.facts)
        walk(node, finder)
        return finder.found

    def _plain_call(self, small: cst.BaseSmallStatement) -> bool:
        """A call of a non-model, non-torch function on literals and bare names only."""
        call = small.value if isinstance(small, cst.Expr) else None
        if not isinstance(call, cst.Call):
            return False
        callee = dotted(call.func)
        if callee is None or callee.split(".")[0] in self.facts.models | {"torch", "self"}:
            return False
        if self.facts.callee_name(call.func) in ("torch.save", "torch.load"):
            return False
        # A model handed to a call may be traced or saved there (``writer.add_graph(model, x)``).
        return all(_is_plain_value(arg.value) and dotted(arg.value) not in self.facts.models for arg in call.args)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        self._prepare_pending[-1].passed(original_node)
        if not self._saves_in_line or not self.every_rank_reaches_here() or self._inside_file_written():
            return updated_node
        if self._in_class_handed_the_model():
            return updated_node
        barrier = cst.SimpleStatementLine(
            body=[cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))],
            leading_lines=updated_node.leading_lines,
        )
        return cst.FlattenSentinel([barrier, updated_node.with_changes(leading_lines=())])

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = one_barrier_before_saves(updated_node.body, self.facts)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        result = super().leave_Module(original_node, updated_node)
        body = one_barrier_before_saves(result.body, self.facts)
        return result if body is None else result.with_changes(body=body)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        copied = self._copy_or_export_of_unwrapped(original_node, updated_node)
        if copied is not None:
            return copied
        callee = self.facts.callee_name(updated_node.func)
        self.loads = self.loads or callee == "torch.load"
        self.saves = self.saves or is_accelerator_method(updated_node, self.facts, "save")
        if callee == "torch.load":
            return self._load_on_own_device(original_node, updated_node)
        if callee != "torch.save":
            return updated_node
        return self._save_on_main_process(original_node, updated_node)


class _CheckpointInterest(cst.CSTVisitor):
    """Whether a statement holds anything :class:`CheckpointRewriter` reacts to: an attribute of
    a model that is not nn.Module's own, a ``torch.save``/``torch.load`` call or an
    ``accelerator.save``. Local: it reads the one statement the rewrite is about to enter (in
    the tree earlier rules made), to spare the rebuilding walk of statements with nothing to do."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__()
        self.facts = facts
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        # ``model.train()``, ``model.parameters()``: the wrapper has those, nothing to unwrap.
        if node.attr.value not in MODULE_OWN_ATTRIBUTES and dotted(node.value) in self.facts.models:
            self.found = True
        return not self.found

    def visit_Call(self, node: cst.Call) -> bool:
        if (
            self.facts.callee_name(node.func) in ("torch.save", "torch.load", *MODEL_EXPORTS)
            or is_accelerator_method(node, self.facts, "save")
            or dotted(node.func) in self.facts.of(model_copiers)
            or type_of_model(node, self.facts)
            or graph_of_tracker(node, self.facts) is not None
        ):
            self.found = True
        return not self.found


#: Argument values that never hold a model attribute or a save/load call.
_PLAIN_VALUES = (cst.SimpleString, cst.Integer, cst.Float, cst.Name)


def _is_plain_value(value: cst.BaseExpression) -> bool:
    """A literal or a bare name. Implicitly joined strings are plain only when no part is an
    f-string: ``f"{model.n_channels} input channels\\n" f"..."`` reads a model attribute."""
    if isinstance(value, cst.ConcatenatedString):
        return _is_plain_value(value.left) and _is_plain_value(value.right)
    return isinstance(value, _PLAIN_VALUES)
