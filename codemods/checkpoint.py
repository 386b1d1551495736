"""ACC114 checkpoint: save once, from the unwrapped model; load and call custom methods through it.

After ``prepare`` the model is wrapped (DistributedDataParallel), so its ``state_dict()`` keys carry
a ``module.`` prefix, ``torch.save(model, f)`` pickles the wrapper, every rank writes the same file,
and custom methods (``model.decode(z)``, ``model.init_hidden(bs)``) are not on the wrapper at all.
This pass routes ``torch.save`` through ``accelerator.save`` (writes on the main process only) after a
barrier, and takes state dicts, ``load_state_dict`` and custom attributes from
``accelerator.unwrap_model(model)``. nn.Module's own methods (``train``, ``eval``, ``parameters``,
``zero_grad``, ``to``...) work on the wrapper and are left alone. In a script that saves, every
``torch.load`` line waits for the other ranks first, so no rank reads a file still being written. Loading in the function that calls
``prepare`` is only rewritten after the ``prepare`` line: before it the model is not wrapped yet.

Before::

    torch.save(model.state_dict(), "mnist_cnn.pt")
    sample = model.decode(z)

After::

    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "mnist_cnn.pt")
    sample = accelerator.unwrap_model(model).decode(z)

This module also holds the small helpers the issue-5 passes share (dotted and qualified names,
where the accelerator is reachable, positions of reported nodes).
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.base import Change, Codemod, Options
from codemods.edits import is_main_guard
from codemods.facts import ScriptFacts, Site
from codemods.walk import walk

# --------------------------------------------------------------------------------------------
# Shared helpers of the issue-5 codemods
# --------------------------------------------------------------------------------------------


def dotted_name(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a chain of Names and Attributes, None for anything else (calls, subscripts)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def qualified_name(node: cst.CSTNode, imports: dict[str, str]) -> str | None:
    """The qualified name of a Name/Attribute chain, resolving its first part through the imports.

    ``nn.DataParallel`` with ``{"nn": "torch.nn"}`` → ``"torch.nn.DataParallel"``. A first part that
    is not imported (a builtin such as ``open``, or a local variable) is returned as written.
    """
    name = dotted_name(node)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    resolved = imports.get(head, head)
    return f"{resolved}.{rest}" if rest else resolved


def accelerator_name(facts: ScriptFacts) -> str:
    """The variable converted code uses for the accelerator."""
    return facts.existing_accelerator or facts.accelerator_name


def accelerator_call(facts: ScriptFacts, method: str, *args: cst.BaseExpression | cst.Arg) -> cst.Call:
    """``accelerator.<method>(args...)``."""
    return cst.Call(
        func=cst.Attribute(value=cst.Name(accelerator_name(facts)), attr=cst.Name(method)),
        args=[a if isinstance(a, cst.Arg) else cst.Arg(a) for a in args],
    )


def unwrap_model(facts: ScriptFacts, model: cst.BaseExpression) -> cst.Call:
    """``accelerator.unwrap_model(model)``."""
    return accelerator_call(facts, "unwrap_model", model)


def is_accelerator_method(node: cst.CSTNode, facts: ScriptFacts, *methods: str) -> bool:
    """Whether ``node`` is a call ``accelerator.<one of methods>(...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and dotted_name(node.func.value) == accelerator_name(facts)
        and node.func.attr.value in methods
    )


def assigns_at_top(statements: Sequence[cst.CSTNode], name: str) -> bool:
    """Whether one of these statements itself (not a nested block) is ``name = ...``: the
    accelerator is created at the top level of its body, and looking no deeper keeps the scope
    bookkeeping from walking every function twice."""
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = small.targets if isinstance(small, cst.Assign) else []
                if any(_target_binds(t.target, name) for t in targets):
                    return True
    return False


def _target_binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_target_binds(e.value, name) for e in target.elements)
    return False


def binds_name(statements: Sequence[cst.CSTNode], name: str) -> bool:
    """Whether any of these statements (not looking into nested functions) assigns ``name``."""
    finder = _BindingFinder(name)
    for statement in statements:
        walk(statement, finder)
        if finder.found:
            return True
    return False


class _BindingFinder(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._check_target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._check_target(node.target)

    def _check_target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name) and target.value == self.name:
            self.found = True
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._check_target(element.value)


class PendingChanges:
    """Changes found during a walk; their positions are looked up once the walk is done.

    In the pipeline, the analysis recorded the original position of every statement and call
    (``facts.origins``) and the passes carry those records to the nodes they return, so a change
    is reported at its node's original site, or at the statement holding it (``anchor``) when the
    node itself is not recorded (an attribute, a node an earlier pass created). Run on its own
    (unit tests, no origins), a pass reports positions in the tree it received.
    """

    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.found: list[tuple[cst.CSTNode, cst.CSTNode | None, str, str, bool]] = []

    def add(
        self, node: cst.CSTNode, code: str, message: str, fixed: bool, anchor: cst.CSTNode | None = None
    ) -> None:
        self.found.append((node, anchor, code, message, fixed))

    def drop(self, code: str) -> None:
        """Forget the changes with this code (a pass that gives up after its walk)."""
        self.found = [entry for entry in self.found if entry[2] != code]

    def resolve(self, module: cst.Module) -> list[Change]:
        if not self.found:
            return []
        site_of = self._site_lookup(module)
        changes = []
        for node, anchor, code, message, fixed in self.found:
            candidates = [_positioned(n) for n in (node, anchor) if n is not None]
            site = next((s for s in map(site_of, candidates) if s is not None), Site(1, 0, 1, 0))
            changes.append(Change(code, message, site.line, site.column, site.end_line, site.end_column, fixed))
        return changes

    def _site_lookup(self, module: cst.Module):  # type: ignore[no-untyped-def]
        origins = getattr(self.facts, "origins", None)
        if origins is not None:
            return origins.site
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)

        def from_positions(node: cst.CSTNode) -> Site | None:
            where = positions.get(node)
            if where is None:
                return None
            return Site(where.start.line, where.start.column, where.end.line, where.end.column)

        return from_positions


def _positioned(node: cst.CSTNode) -> cst.CSTNode:
    """The node whose position is recorded: a statement line's first small statement."""
    if isinstance(node, cst.SimpleStatementLine) and node.body:
        return node.body[0]
    return node


#: The node kinds the analysis records original positions for.
POSITIONED = (cst.Call, cst.BaseSmallStatement, cst.BaseCompoundStatement)


def _concrete_subclasses(bases: tuple[type, ...]) -> frozenset[type]:
    found: set[type] = set()
    pending = list(bases)
    while pending:
        kind = pending.pop()
        found.add(kind)
        pending.extend(kind.__subclasses__())
    return frozenset(found)


#: The same as a set of exact types: a set lookup per node instead of abstract isinstance checks
#: (the passes visit every node, and this runs twice for each).
POSITIONED_TYPES = _concrete_subclasses(POSITIONED)


class Issue5Transformer(cst.CSTTransformer):
    """Base of the issue-5 transformers: reports changes, anchored at the enclosing statement,
    and carries original positions from each node it replaces to the node that replaces it (so
    that later passes still report in terms of the file the user wrote)."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__()
        self.facts = facts
        self.pending = PendingChanges(facts)
        self._anchors: list[cst.CSTNode] = []
        self._origins = getattr(facts, "origins", None)

    def report(self, node: cst.CSTNode, code: str, message: str, fixed: bool = True) -> None:
        self.pending.add(node, code, message, fixed, self._anchors[-1] if self._anchors else None)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in POSITIONED_TYPES:
            self._anchors.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        positioned = type(original_node) in POSITIONED_TYPES
        if positioned and self._anchors and self._anchors[-1] is original_node:
            self._anchors.pop()
        result = super().on_leave(original_node, updated_node)
        # Only statements and calls have recorded positions: nothing else needs carrying.
        if positioned and self._origins is not None and result is not original_node:
            if isinstance(result, cst.FlattenSentinel):
                for node in result.nodes:
                    self._origins.carry(original_node, node)
            elif isinstance(result, cst.CSTNode):
                self._origins.carry(original_node, result)
        return result


class AcceleratorScope(Issue5Transformer):
    """A transformer that knows, at every node, whether the accelerator variable is reachable.

    It is reachable inside a function that takes it as a parameter or assigns it, inside functions
    nested in such a function, in every function when module-level code assigns it (functions run
    when called, after the module-level setup), and in module-level statements after that
    assignment.
    """

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__(facts)
        self.acc = accelerator_name(facts)
        self._frames: list[bool] = []
        self._function_names: list[str] = []
        self._module_statement_ids: set[int] = set()
        self._module_index = -1
        self._module_accelerator_index: int | None = None
        #: The ``if __name__ == "__main__":`` block that creates the accelerator (a script whose
        #: training lives in that block), its statements, and which one creates it.
        self._guard_at: int | None = None
        self._guard_statement_ids: set[int] = set()
        self._guard_accelerator_index: int | None = None
        self._guard_index = -1

    def visit_Module(self, node: cst.Module) -> None:
        self._module_statement_ids = {id(statement) for statement in node.body}
        for index, statement in enumerate(node.body):
            if assigns_at_top([statement], self.acc):
                self._module_accelerator_index = index
                break
            if is_main_guard(statement) and isinstance(statement.body, cst.IndentedBlock):
                guarded = statement.body.body
                created = next((i for i, line in enumerate(guarded) if assigns_at_top([line], self.acc)), None)
                if created is not None:
                    self._guard_at, self._guard_accelerator_index = index, created
                    self._guard_statement_ids = {id(line) for line in guarded}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self._module_statement_ids:
            self._module_index += 1
        elif id(node) in self._guard_statement_ids:
            self._guard_index += 1
        return super().on_visit(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = node.params
        names = {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}
        self._frames.append(self.acc in names or assigns_at_top(_body_statements(node), self.acc))
        self._function_names.append(node.name.value)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        self._frames.pop()
        self._function_names.pop()
        return updated_node

    def accelerator_reachable(self) -> bool:
        """Whether code at the node being visited can use the accelerator variable."""
        if any(self._frames):
            return True
        # The helpers pass (it runs last) hands the accelerator to every module-level function the
        # training code calls, once that function uses it.
        reachable_functions = getattr(self.facts, "accessible_functions", set())
        if self._function_names and self._function_names[0] in reachable_functions:
            return True
        if self._in_guard_after_accelerator():
            return True
        at_module = self._module_accelerator_index
        if at_module is None:
            return False
        return bool(self._frames) or self._module_index > at_module

    def _in_guard_after_accelerator(self) -> bool:
        """Inside the ``__main__`` block, after the statement that creates the accelerator
        (functions defined there are covered by ``accessible_functions``)."""
        if self._guard_accelerator_index is None or self._function_names:
            return False
        return self._module_index == self._guard_at and self._guard_index > self._guard_accelerator_index


def _body_statements(node: cst.FunctionDef) -> Sequence[cst.CSTNode]:
    body = node.body
    return body.body if isinstance(body, cst.IndentedBlock) else [body]


def parse_statement(code: str) -> cst.BaseStatement:
    """One statement from source text (for the fixed snippets the passes insert)."""
    return cst.parse_statement(code)


def expression_code(node: cst.CSTNode) -> str:
    """Source text of an expression, for messages and for comparing two expressions."""
    return cst.Module(body=[]).code_for_node(node)


# --------------------------------------------------------------------------------------------
# The checkpoint pass
# --------------------------------------------------------------------------------------------

#: nn.Module's own methods and attributes: they work on the DDP wrapper (which forwards them or
#: has its own), so calls to them stay as written.
MODULE_OWN_ATTRIBUTES = frozenset(
    {
        "train", "eval", "parameters", "named_parameters", "zero_grad", "to", "cuda", "cpu",
        "modules", "named_modules", "children", "named_children", "apply", "buffers",
        "named_buffers", "requires_grad_", "half", "float", "double", "bfloat16", "type",
        "training", "forward", "register_forward_hook", "register_forward_pre_hook",
        "register_full_backward_hook", "register_backward_hook", "register_buffer",
        "register_parameter", "add_module", "get_submodule", "get_parameter", "get_buffer",
        "share_memory", "no_sync", "module", "__class__",
    }
)


class CheckpointCodemod(Codemod):
    code = "ACC114"
    name = "checkpoint"
    extra_codes = {
        "ACC914": "checkpoint-unreachable: torch.save or a model's own method where the accelerator is not reachable: runs on every rank",
    }

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.uses_torch and bool(facts.models or "torch" in facts.imports.values())

    def transform(
        self, module: cst.Module, facts: ScriptFacts, options: Options
    ) -> tuple[cst.Module, list[Change]]:
        rewriter = _CheckpointRewriter(facts, module)
        new_module = module.visit(rewriter)
        if rewriter.saves and rewriter.loads:
            new_module = new_module.visit(_WaitBeforeLoads(facts))
        return new_module, rewriter.pending.resolve(module)


class _CheckpointRewriter(AcceleratorScope):
    def __init__(self, facts: ScriptFacts, module: cst.Module) -> None:
        super().__init__(facts)
        self._assigned_targets: set[int] = set()
        self._prepare_pending: list[bool] = [_has_prepare_call(module.body, facts)]
        self._saves_in_line = 0
        #: Whether the script saves and loads: then loads wait for the save (a second, small pass).
        self.saves = False
        self.loads = False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # Model classes use ``self``; only a trainer class holding ``self.model`` needs a look.
        return any(name.startswith("self.") for name in self.facts.models)

    # Function frames: in the function that calls prepare, the model is wrapped only after it.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._prepare_pending.append(_has_prepare_call(_body_statements(node), self.facts))

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        self._prepare_pending.pop()
        return super().leave_FunctionDef(original_node, updated_node)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._assigned_targets.add(id(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._assigned_targets.add(id(node.target))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self._saves_in_line = 0
        # ``parser.add_argument("--lr", type=float, default=0.1)``-style lines (most of a script's
        # top) hold nothing this pass rewrites: no need to walk their expressions.
        if all(self._plain_call(small) for small in node.body):
            return False
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
        callee = dotted_name(call.func)
        if callee is None or callee.split(".")[0] in self.facts.models | {"torch", "self"}:
            return False
        if qualified_name(call.func, self.facts.imports) in ("torch.save", "torch.load"):
            return False
        return all(isinstance(arg.value, _PLAIN_VALUES) for arg in call.args)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if self._prepare_pending[-1] and any(_is_prepare(s, self.facts) for s in original_node.body):
            self._prepare_pending[-1] = False
        if not self._saves_in_line:
            return updated_node
        barrier = cst.SimpleStatementLine(
            body=[cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))],
            leading_lines=updated_node.leading_lines,
        )
        return cst.FlattenSentinel([barrier, updated_node.with_changes(leading_lines=())])

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        callee = qualified_name(updated_node.func, self.facts.imports)
        self.loads = self.loads or callee == "torch.load"
        self.saves = self.saves or is_accelerator_method(updated_node, self.facts, "save")
        if callee != "torch.save":
            return updated_node
        if not self.accelerator_reachable():
            self.report(
                original_node, "ACC914",
                "torch.save where the accelerator is not reachable: every rank writes this file", False,
            )
            return updated_node
        args = list(updated_node.args)
        if args and args[0].keyword is None and dotted_name(args[0].value) in self.facts.models:
            args[0] = args[0].with_changes(value=unwrap_model(self.facts, args[0].value))
        self._saves_in_line += 1
        self.saves = True
        self.report(original_node, self.code, "torch.save → accelerator.save (main process only)", True)
        return accelerator_call(self.facts, "save", *args)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        owner = dotted_name(updated_node.value)
        if owner not in self.facts.models or updated_node.attr.value in MODULE_OWN_ATTRIBUTES:
            return updated_node
        if id(original_node) in self._assigned_targets or self._prepare_pending[-1]:
            return updated_node
        attribute = updated_node.attr.value
        if not self.accelerator_reachable():
            self.report(
                original_node, "ACC914",
                f"{owner}.{attribute} after prepare needs accelerator.unwrap_model({owner}), "
                "but the accelerator is not reachable here", False,
            )
            return updated_node
        self.report(
            original_node, self.code,
            f"{owner}.{attribute} → accelerator.unwrap_model({owner}).{attribute}", True,
        )
        return updated_node.with_changes(value=unwrap_model(self.facts, updated_node.value))

    @property
    def code(self) -> str:
        return CheckpointCodemod.code


class _CheckpointInterest(cst.CSTVisitor):
    """Whether a statement holds anything :class:`_CheckpointRewriter` reacts to: an attribute of
    a model, a ``torch.save``/``torch.load`` call or an ``accelerator.save``."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__()
        self.facts = facts
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted_name(node.value) in self.facts.models:
            self.found = True
        return not self.found

    def visit_Call(self, node: cst.Call) -> bool:
        if qualified_name(node.func, self.facts.imports) in ("torch.save", "torch.load") or (
            is_accelerator_method(node, self.facts, "save")
        ):
            self.found = True
        return not self.found


#: Argument values that never hold a model attribute or a save/load call.
_PLAIN_VALUES = (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float, cst.Name)


class _WaitBeforeLoads(AcceleratorScope):
    """In a script that saves, every ``torch.load`` line first waits for the other ranks: the
    main process may just have written the file."""

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only statement lists change: statement lines and expressions need no walk (rebuilding
        # them cost more than the rest of the checkpoint pass).
        descend = super().on_visit(node)
        return descend and not isinstance(node, (cst.SimpleStatementLine, cst.BaseExpression))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if not self.accelerator_reachable():
            return updated_node
        body = self._wait_before_loads(list(updated_node.body))
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        created = self._module_accelerator_index
        if created is None:
            return updated_node
        head, tail = list(updated_node.body[: created + 1]), list(updated_node.body[created + 1 :])
        body = self._wait_before_loads(tail)
        return updated_node if body is None else updated_node.with_changes(body=[*head, *body])

    def _wait_before_loads(self, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        result: list[cst.BaseStatement] = []
        for statement in statements:
            loads = isinstance(statement, cst.SimpleStatementLine) and _contains_call(statement, self.facts, "torch.load")
            if loads and not (result and _is_barrier(result[-1], self.facts)):
                result.append(cst.SimpleStatementLine(
                    [cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))],
                    leading_lines=statement.leading_lines,
                ))
                statement = statement.with_changes(leading_lines=())
            result.append(statement)
        return result if len(result) != len(statements) else None



def _is_barrier(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        is_accelerator_method(getattr(s, "value", None), facts, "wait_for_everyone") for s in statement.body
    )


def _contains_call(node: cst.CSTNode, facts: ScriptFacts, qualified: str) -> bool:
    finder = _CallFinder(lambda call: qualified_name(call.func, facts.imports) == qualified)
    walk(node, finder)
    return finder.found


class _CallFinder(cst.CSTVisitor):
    def __init__(self, predicate) -> None:  # type: ignore[no-untyped-def]
        self.predicate = predicate
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if self.predicate(node):
            self.found = True
        return not self.found


def _is_prepare(statement: cst.CSTNode, facts: ScriptFacts) -> bool:
    value = getattr(statement, "value", None)
    return is_accelerator_method(value, facts, "prepare") if value is not None else False


def _has_prepare_call(statements: Sequence[cst.CSTNode], facts: ScriptFacts) -> bool:
    """Whether one of these statements is the ``... = accelerator.prepare(...)`` line (the prepare
    pass puts it at the top level of the body that builds the training objects)."""
    return any(
        isinstance(statement, cst.SimpleStatementLine) and any(_is_prepare(s, facts) for s in statement.body)
        for statement in statements
    )
