"""Small helpers the issue-5 passes share (metrics, checkpoint, amp, accumulate, dataparallel,
side_effects, oom_retry): qualified names through the imports, where the accelerator is reachable,
building accelerator calls, and reporting rewrites at their original positions.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.base import Change
from codemods.edits import POSITIONED_TYPES, TargetedTransformer, dotted, is_main_guard
from codemods.facts import ScriptFacts, Site
from codemods.walk import walk



def callee_words(facts: ScriptFacts, qualified_names: Iterable[str]) -> set[str]:
    """The identifiers a call to one of ``qualified_names`` must contain, however it is written:
    the last part (``save`` of ``torch.save``, ``np.save``) or a local alias
    (``from torch import save as save_to``): for ``ScriptFacts.lines_mentioning``."""
    wanted = set(qualified_names)
    words = {qualified.rpartition(".")[2] for qualified in wanted}
    return words | {local for local, qualified in facts.imports.items() if qualified in wanted}


def name_words(names: Iterable[str]) -> set[str]:
    """The identifier every mention of a (dotted) name contains: its last part (``model`` of
    ``self.model``)."""
    return {name.rpartition(".")[2] for name in names}


def qualified_name(node: cst.CSTNode, imports: dict[str, str]) -> str | None:
    """The qualified name of a Name/Attribute chain, resolving its first part through the imports.

    ``nn.DataParallel`` with ``{"nn": "torch.nn"}`` → ``"torch.nn.DataParallel"``. A first part that
    is not imported (a builtin such as ``open``, or a local variable) is returned as written.
    """
    name = dotted(node)
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
        and dotted(node.func.value) == accelerator_name(facts)
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




class Issue5Transformer(TargetedTransformer):
    """Base of the issue-5 transformers: reports changes through :class:`PendingChanges`, each
    anchored at the enclosing statement (for nodes without a recorded position of their own)."""

    def __init__(self, facts: ScriptFacts, lines: Iterable[int] | None = None) -> None:
        super().__init__(getattr(facts, "origins", None), lines)
        self.facts = facts
        self.pending = PendingChanges(facts)
        self._anchors: list[cst.CSTNode] = []

    def report(self, node: cst.CSTNode, code: str, message: str, fixed: bool = True) -> None:
        self.pending.add(node, code, message, fixed, self._anchors[-1] if self._anchors else None)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in POSITIONED_TYPES:
            self._anchors.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        if type(original_node) in POSITIONED_TYPES and self._anchors and self._anchors[-1] is original_node:
            self._anchors.pop()
        return super().on_leave(original_node, updated_node)


class AcceleratorScope(Issue5Transformer):
    """A transformer that knows, at every node, whether the accelerator variable is reachable.

    It is reachable inside a function that takes it as a parameter or assigns it, inside functions
    nested in such a function, in every function when module-level code assigns it (functions run
    when called, after the module-level setup), and in module-level statements after that
    assignment.
    """

    def __init__(self, facts: ScriptFacts, lines: Iterable[int] | None = None) -> None:
        super().__init__(facts, lines)
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
        self._frames.append(self.acc in names or assigns_at_top(body_statements(node), self.acc))
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


def body_statements(node: cst.FunctionDef) -> Sequence[cst.CSTNode]:
    body = node.body
    return body.body if isinstance(body, cst.IndentedBlock) else [body]


def parse_statement(code: str) -> cst.BaseStatement:
    """One statement from source text (for the fixed snippets the passes insert)."""
    return cst.parse_statement(code)


def expression_code(node: cst.CSTNode) -> str:
    """Source text of an expression, for messages and for comparing two expressions."""
    return cst.Module(body=[]).code_for_node(node)


