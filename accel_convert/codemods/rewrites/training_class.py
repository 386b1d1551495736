"""ACC108 training-class: a class holding the training code receives the accelerator.

Many scripts keep their training code in a class — a ``Trainer`` holding ``self.model``,
``self.optimizer`` and ``self.train_data`` with ``_run_batch``/``_run_epoch``/``train`` methods,
or a research repo's ``Solver`` that builds its networks and loaders in ``__init__``. The earlier
rules rewrite the methods as they rewrite functions (``accelerator.backward(loss)``,
``accelerator.print``, the gather in ``evaluate``); this rule makes that ``accelerator`` exist:

* ``__init__`` gets an ``accelerator`` parameter and keeps it as ``self.accelerator``, and the
  methods use ``self.accelerator``;
* every construction of the class passes the accelerator (created where the class is first
  constructed; helpers in between receive it through ACC104);
* what the class builds itself (``self.model = Net()``, ``self.loader = DataLoader(...)``) is
  prepared at the end of ``__init__`` (after the statement that builds the last of them, directly
  or through a ``self.build_model()`` call); what the caller builds and passes in is prepared by
  the caller, before the construction.

A construction where no accelerator is reachable is reported (ACC904). What a method other than
``__init__`` builds (``fit()`` building its model and optimizer, as locals or as ``self.model``; a
class without ``__init__`` of its own whose ``setup()`` builds everything; a function nested in a
method building its optimizer each epoch) is prepared in that method, right after the line
building it (``model, optimizer = self.build()`` in one call); a training object the class builds
there in a way no such line can follow (a model chosen by a conditional expression) is reported
(ACC920), to be prepared by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType
from typing import TypeVar

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import prepare_statement, prepare_statements
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, Example, Rule
from accel_convert.codemods.engine.signatures import parameter_index, with_argument, with_parameter
from accel_convert.codemods.engine.syntax import (
    assigned_in,
    binds_locally,
    calls_in,
    class_methods,
    dotted,
    first_statement_index,
    instance_parameter,
    is_plain_class,
    statement,
    target_names,
)
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.plan import held_loader, iterator_taken, plan_of
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.records import record

BUILT_OUTSIDE_INIT = "ACC920"

NodeWithValue = TypeVar("NodeWithValue", cst.Attribute, cst.Arg)


@record(eq=False, repr=False)
class _ClassPlan:
    """What one training class needs, found before the rewrite."""

    #: Its methods (or an earlier rule's rewrite of them) use the accelerator.
    uses_accelerator: bool = False
    #: ``__init__``'s positional index for the new parameter, counting ``self`` (None: keyword).
    init_index: int | None = None
    #: Method → the instance attributes it binds, and the methods it calls on its instance.
    binds: Mapping[str, frozenset[str]] = field(default_factory=dict)
    calls: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: A training base (``BaseTrainer``): its subclasses receive the accelerator, it does not.
    is_base: bool = False
    #: The names its class statement derives from, as written.
    bases: set[str] = field(default_factory=set)
    #: No ``__init__`` and nothing inherited but ``object``'s: it is given one.
    plain: bool = False
    #: The training classes its methods construct by name (``Trainer(...)`` in ``Stage.execute``):
    #: handed the accelerator there, so the class needs it when they do.
    constructs: set[str] = field(default_factory=set)


class _AcceleratorUses(cst.CSTVisitor):
    """Whether a method reads the accelerator variable (an earlier rule's rewrite: not as an
    attribute name or keyword) or already reads it from its instance (``self.accelerator``), and
    the names it calls."""

    def __init__(self, accelerator: str, instance_attribute: str) -> None:
        super().__init__()
        self.accelerator = accelerator
        self.path = instance_attribute
        self.variable = False
        self.instance_attribute = False
        #: The names it calls (``Trainer`` of ``Trainer(...)``).
        self.called: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted(node) == self.path:
            self.instance_attribute = True
        walk(node.value, self)
        return False  # the name after the dot is not a use

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False  # nor is a keyword

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name):
            self.called.add(node.func.value)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.accelerator:
            self.variable = True


@record(frozen=True, eq=False, repr=False)
class MethodUses:
    """What the methods of one training class do with their instance."""

    #: Method → the instance attributes it assigns (``self.net``).
    binds: Mapping[str, frozenset[str]]
    #: Method → the methods it calls on its instance (``build_model``).
    calls: Mapping[str, frozenset[str]]


@rule_provider(needs=("training_classes",))
def method_uses(a: Analysis) -> Mapping[str, MethodUses]:
    """Per training class, what its methods bind on and call on their instance (where
    ``__init__`` builds what it prepares)."""
    found = {}
    for name in a.facts.training_classes:
        owner = a.r.classes[name]
        binds: dict[str, set[str]] = {method: set() for method in owner.self_names}
        for assign in a.r.assigns:
            if assign.function != name or len(assign.scope) < 2 or assign.scope[1] not in binds:
                continue
            instance = owner.self_names.get(assign.scope[1])
            if instance is not None:
                binds[assign.scope[1]].update(t for t in assign.targets if t.startswith(f"{instance}."))
        found[name] = MethodUses(
            MappingProxyType({method: frozenset(bound) for method, bound in binds.items()}),
            MappingProxyType({method: frozenset(calls) for method, calls in owner.method_calls.items()}),
        )
    return MappingProxyType(found)


def _plan(node: cst.ClassDef, accelerator: str, facts: ScriptFacts) -> _ClassPlan:
    name = node.name.value
    inherits = facts.program is not None and name in facts.program.training_base_subclasses
    methods = facts.of(method_uses).get(name)
    plan = _ClassPlan(
        uses_accelerator=bool(
            facts.class_prepare.get(name) or plan_of(facts).method_preparations.get(name) or inherits
        ),
        binds=methods.binds if methods is not None else {},
        calls=methods.calls if methods is not None else {},
        is_base=name in facts.training_bases,
        bases={base for base in (dotted(b.value) for b in node.bases) if base is not None},
    )
    if is_plain_class(node, facts.builtins_at()):  # a module-level class
        plan.plain, plan.init_index = True, 1
    for method in class_methods(node):
        instance = instance_parameter(method)
        if instance is None:
            continue
        if method.name.value == "__init__":
            index = parameter_index(method.params)
            plan.init_index = index
        uses = _AcceleratorUses(accelerator, f"{instance}.{accelerator}")
        walk(method.body, uses)
        plan.constructs |= uses.called & facts.training_classes
        if uses.instance_attribute or (uses.variable and not binds_locally(method, accelerator, top_level_only=True)):
            plan.uses_accelerator = True
    return plan


def _builders_use_the_accelerator(plans: dict[str, _ClassPlan]) -> None:
    """A class building a training class that uses the accelerator hands it over (an
    ``Experiment`` building a ``Stage`` building a ``Trainer``), along the chain."""
    grown = True
    while grown:
        users = {name for name, plan in plans.items() if plan.uses_accelerator}
        grown = False
        for plan in plans.values():
            if not plan.uses_accelerator and plan.constructs & users:
                plan.uses_accelerator = grown = True


def _ancestors(name: str, plans: dict[str, _ClassPlan]) -> set[str]:
    """The classes with a plan that ``name`` derives from, directly or through others."""
    found: set[str] = set()
    pending = [name]
    while pending:
        for base in plans[pending.pop()].bases:
            if base in plans and base not in found:
                found.add(base)
                pending.append(base)
    return found


class _GiveAccelerator(RuleTransformer):
    def __init__(self, facts: ScriptFacts, plans: dict[str, _ClassPlan], lines: set[int]) -> None:
        super().__init__(facts, lines)
        self.plans = plans
        #: The method being walked binds the accelerator name itself (a parameter, a local).
        self._local_binding = False
        #: Classes whose methods now read the accelerator from their instance.
        self._reading_instance: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.scope) == 2 and self.scope[0] in self.plans:
            self._local_binding = binds_locally(node, self.accelerator, top_level_only=True)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """``train_loader = DataLoader(...)`` in ``Trainer.run``: prepared right there."""
        if len(self.scope) < 2 or len(updated_node.body) != 1 or not isinstance(updated_node.body[0], cst.Assign):
            return updated_node
        # What the plan has this method (or a function nested in it: ``fit.train``) prepare where
        # it builds it (``train_loader = DataLoader(...)``, ``self.optimizer =
        # model.configure_optimizers(...)``).
        wanted = plan_of(self.facts).method_preparations.get(self.scope[0], {}).get(".".join(self.scope[1:]), ())
        assign = updated_node.body[0]
        # ``model, optimizer = self.build()`` too: both prepared in one call; of ``(train_loader,
        # test_loader), n_classes = self.make_data()``, the loaders the plan names.
        names = [name for target in assign.targets for name in target_names(target.target) if name in wanted]
        accelerator = self._instance_accelerator()
        if not names or accelerator is None:
            return updated_node
        where = ".".join(self.scope)
        self.report(original_node, TrainingClass.code, f"{where} prepares {', '.join(names)} where it is built")
        indent = " " * 4 * (len(self._anchors))
        # A dict of loaders (the model's ``loader_dict_names``) is prepared by its values.
        prepare = prepare_statements(
            cst.Module([]).code_for_node(accelerator), names, indent, {}, dicts=self.facts.loader_dict_names
        )
        return cst.FlattenSentinel([updated_node, *prepare])

    def _instance_accelerator(self) -> cst.Attribute | None:
        """``self.accelerator`` where a rewritten method should read it, else None."""
        if len(self.scope) < 2 or self.scope[0] not in self.plans or self._local_binding:
            return None
        return self.instance_accelerator()

    # The accelerator variable is read as the receiver of a call (``accelerator.backward``) or
    # passed on (``helper(model, accelerator)``): those are the two places earlier rules write it.
    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._read_from_instance(updated_node)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return self._read_from_instance(updated_node)

    def _read_from_instance(self, node: NodeWithValue) -> NodeWithValue:
        """``node`` with its ``value`` read from the instance when it is the accelerator variable."""
        replacement = self._instance_accelerator()
        value = node.value
        if replacement is not None and isinstance(value, cst.Name) and value.value == self.accelerator:
            self._reading_instance.add(self.scope[0])
            return node.with_changes(value=replacement)
        return node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if not isinstance(func, cst.Name) or func.value not in self.plans:
            return updated_node
        plan = self.plans[func.value]
        local = self.facts.name_table.scopes.get(tuple(self.scope)) if self.scope else None
        if local is not None and local.binds(func.value):
            return updated_node  # a local of the same name
        if any(
            (arg.keyword is not None and arg.keyword.value == self.accelerator)
            or dotted(arg.value) in (self.accelerator, f"{self.instance}.{self.accelerator}")
            for arg in updated_node.args
        ):
            return updated_node  # already passed (a converted script converted again)
        if self.in_training_class():
            value: cst.BaseExpression | None = self._instance_accelerator()
        else:
            value = cst.Name(self.accelerator) if self.function in self.facts.accessible_functions else None
        if value is None:
            self.report(
                original_node,
                NO_ACCELERATOR_ACCESS,
                f"{func.value}() needs the accelerator, but this caller has none",
                False,
                header_only=True,
            )
            return updated_node
        self.report(original_node, TrainingClass.code, f"{func.value}(...) receives the accelerator", header_only=True)
        index = None if plan.init_index is None else plan.init_index - 1
        return with_argument(updated_node, index, self.accelerator, value)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        name = original_node.name.value
        if len(self.scope) != 1 or name not in self.plans or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        if self.plans[name].is_base:
            # Its subclasses keep the accelerator on the instance; its own ``__init__`` only
            # prepares what it builds.
            for index, method in enumerate(body):
                if isinstance(method, cst.FunctionDef) and method.name.value == "__init__":
                    body[index] = self._prepare_in_base(name, method, original_node)
                    updated_node = updated_node.with_changes(body=updated_node.body.with_changes(body=body))
            if name not in self._reading_instance:
                return updated_node
            self.report(
                original_node,
                TrainingClass.code,
                f"{name} is a base of training classes: its methods use {self.accelerator} as "
                f"self.{self.accelerator}, kept by its subclasses",
                header_only=True,
            )
            return updated_node
        has_init = False
        for index, method in enumerate(body):
            if isinstance(method, cst.FunctionDef) and method.name.value == "__init__":
                body[index] = self._receive(name, method, original_node)
                has_init = True
        if not has_init and self.plans[name].plain:
            # Methods only, nothing inherited but ``object.__init__``: an ``__init__`` of its own
            # keeps the accelerator.
            init = cst.ensure_type(statement("def __init__(self):\n    pass\n"), cst.FunctionDef)
            init = init.with_changes(body=init.body.with_changes(body=[]))
            start = first_statement_index(body)
            body.insert(start, self._receive(name, init, original_node))
            if start + 1 < len(body) and isinstance(body[start + 1], cst.FunctionDef):
                following = cst.ensure_type(body[start + 1], cst.FunctionDef)
                body[start + 1] = following.with_changes(
                    leading_lines=[cst.EmptyLine(indent=False), *following.leading_lines]
                )
        elif not has_init and name in self._reading_instance:
            # No ``__init__`` of its own: the one it inherits (a base's, maybe in another module)
            # keeps the accelerator.
            self.report(
                original_node,
                TrainingClass.code,
                f"{name}'s methods use {self.accelerator} as self.{self.accelerator}, kept by the __init__ it inherits",
                header_only=True,
            )
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def _prepare_in_base(self, name: str, init: cst.FunctionDef, anchor: cst.CSTNode) -> cst.FunctionDef:
        """A training base's ``__init__`` with the prepare of what it builds (its subclass set
        ``self.accelerator`` before calling it)."""
        instance = instance_parameter(init)
        prepared = self.facts.class_prepare.get(name, ())
        if instance is None or not prepared or not isinstance(init.body, cst.IndentedBlock):
            return init
        statements = self._with_prepare(name, instance, list(init.body.body), prepared, anchor)
        return init.with_changes(body=init.body.with_changes(body=statements))

    def _receive(self, name: str, init: cst.FunctionDef, anchor: cst.CSTNode) -> cst.FunctionDef:
        """``__init__(..., accelerator)`` keeping ``self.accelerator``, and the prepare of what
        the class builds itself."""
        instance = instance_parameter(init)
        if (
            instance is None
            or not isinstance(init.body, cst.IndentedBlock)
            or binds_locally(init, self.accelerator, top_level_only=True)
        ):
            return init
        acc = self.accelerator
        statements = list(init.body.body)
        self.report(anchor, TrainingClass.code, f"{name} keeps the accelerator as {instance}.{acc}", header_only=True)
        prepared = self.facts.class_prepare.get(name, ())
        if prepared:
            statements = self._with_prepare(name, instance, statements, prepared, anchor)
        start = first_statement_index(statements)
        statements.insert(start, statement(f"{instance}.{acc} = {acc}"))
        return init.with_changes(params=with_parameter(init.params, acc), body=init.body.with_changes(body=statements))

    def _with_prepare(
        self,
        name: str,
        instance: str,
        statements: list[cst.BaseStatement],
        attributes: tuple[str, ...],
        anchor: cst.CSTNode,
    ) -> list[cst.BaseStatement]:
        plan = self.plans[name]
        last = -1
        bound: set[str] = set()
        for index, line in enumerate(statements):
            if _assigns_none(line):
                continue  # ``self.optimizer = None``: a placeholder, built later elsewhere
            here = {name for name in assigned_in(line) if name in attributes}
            for called in _called_methods(line, instance, plan):
                here |= _bound_through(called, plan) & set(attributes)
            if here:
                last = index
                bound |= here
        ready = [attribute for attribute in attributes if attribute in bound]
        for attribute in attributes:
            if attribute not in bound:
                self.report(
                    anchor,
                    BUILT_OUTSIDE_INIT,
                    f"{attribute} is built outside {name}.__init__: pass it through "
                    f"{instance}.{self.accelerator}.prepare(...) where it is built",
                    False,
                    header_only=True,
                )
        if not ready:
            return statements
        head, ready = self._prepared_before_iterators(name, instance, statements[: last + 1], ready)
        rest = statements[last + 1 :]
        if not ready:
            return [*head, *rest]
        joined = ", ".join(ready)
        self.report(anchor, TrainingClass.code, f"{name} prepares {joined}", header_only=True)
        prepare = prepare_statements(
            f"{instance}.{self.accelerator}", ready, " " * 8, {}, dicts=self.facts.loader_dict_names
        )
        return [*head, *prepare, *rest]

    def _prepared_before_iterators(
        self, name: str, instance: str, statements: list[cst.BaseStatement], ready: list[str]
    ) -> tuple[list[cst.BaseStatement], list[str]]:
        """``statements`` (``__init__``'s, up to its prepare) with each loader of ``ready`` that
        one of them takes an iterator from (``self.train_iter = iter(self.train_loader)``,
        ``enumerate(self.loaders["extra"])``: the plan's :func:`iterator_taken`) prepared right
        before it, and ``ready`` without the loaders so prepared (a dict of loaders stays: its
        prepare passes the prepared entry through)."""
        result: list[cst.BaseStatement] = []
        taken: set[str] = set()
        for line in statements:
            found = iterator_taken(line, self.facts, (name, "__init__"))
            if found is not None and held_loader(found[0]) in ready and found[0] not in taken:
                loader, wrapper = found
                taken.add(loader)
                self.report(
                    line,
                    TrainingClass.code,
                    f"prepare {loader} before {wrapper} takes an iterator from it",
                    header_only=True,
                )
                result.append(prepare_statement(f"{instance}.{self.accelerator}", [loader], " " * 8))
            result.append(line)
        return result, [attribute for attribute in ready if attribute not in taken]


def _called_methods(line: cst.BaseStatement, instance: str, plan: _ClassPlan) -> set[str]:
    """The class's methods ``line`` calls on its instance (``self.build_model()``)."""
    found = set()
    for call in calls_in(line):
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == instance
            and func.attr.value in plan.binds
        ):
            found.add(func.attr.value)
    return found


def _assigns_none(line: cst.BaseStatement) -> bool:
    return (
        isinstance(line, cst.SimpleStatementLine)
        and len(line.body) == 1
        and isinstance(line.body[0], cst.Assign)
        and isinstance(line.body[0].value, cst.Name)
        and line.body[0].value.value == "None"
    )


def _bound_through(method: str, plan: _ClassPlan) -> set[str]:
    """Attributes ``method`` binds, directly or through the methods it calls on its instance."""
    bound: set[str] = set()
    seen: set[str] = set()
    pending = [method]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        bound |= plan.binds.get(current, set())
        pending.extend(plan.calls.get(current, ()))
    return bound


class TrainingClass(Rule):
    code = "ACC108"
    name = "training-class"
    fixes = {
        "ACC920": (
            "Prepare the object where the class builds it: ``self.net = self.accelerator.prepare(Net())`` (the same for the optimizer and the loaders built in that method), so the class holds the prepared object from the start."
        ),
    }
    providers = (method_uses,)
    extra_codes = {
        BUILT_OUTSIDE_INIT: "built-outside-init: a training object a class builds outside __init__ "
        "(prepare it by hand where it is built)",
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Trainer:
                    def __init__(self, model, loader, optimizer):
                        self.model = model
                        self.loader = loader
                        self.optimizer = optimizer

                    def train_epoch(self):
                        for data, target in self.loader:
                            self.optimizer.zero_grad()
                            loss = nn.functional.mse_loss(self.model(data), target)
                            loss.backward()
                            self.optimizer.step()
                        print("epoch done")


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    trainer = Trainer(model, loader, optimizer)
                    for epoch in range(3):
                        trainer.train_epoch()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Trainer:
                    def __init__(self, model, loader, optimizer, accelerator):
                        self.accelerator = accelerator
                        self.model = model
                        self.loader = loader
                        self.optimizer = optimizer

                    def train_epoch(self):
                        for data, target in self.loader:
                            self.optimizer.zero_grad()
                            loss = nn.functional.mse_loss(self.model(data), target)
                            self.accelerator.backward(loss)
                            self.optimizer.step()
                        self.accelerator.print("epoch done")


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    trainer = Trainer(model, loader, optimizer, accelerator)
                    for epoch in range(3):
                        trainer.train_epoch()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code=BUILT_OUTSIDE_INIT,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Solver:
                    def __init__(self, lr, wide):
                        self.lr = lr
                        self.wide = wide
                        self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)

                    def train(self):
                        self.net = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 1)) if self.wide else nn.Linear(8, 1)
                        self.opt = torch.optim.SGD(self.net.parameters(), lr=self.lr)
                        for data, target in self.loader:
                            self.opt.zero_grad()
                            nn.functional.mse_loss(self.net(data), target).backward()
                            self.opt.step()


                def main():
                    Solver(0.1, False).train()


                if __name__ == "__main__":
                    main()
            """,
            message="self.net is built outside Solver.__init__: pass it through self.accelerator.prepare(...) "
            "where it is built",
        ),
        # A class that holds no training code (a configuration of hyper-parameters): it gets no
        # accelerator.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Config:
                    def __init__(self, lr=0.1, batch_size=8, epochs=2):
                        self.lr = lr
                        self.batch_size = batch_size
                        self.epochs = epochs


                def main():
                    config = Config(lr=0.05)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=config.batch_size)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
                    for epoch in range(config.epochs):
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


                class Config:
                    def __init__(self, lr=0.1, batch_size=8, epochs=2):
                        self.lr = lr
                        self.batch_size = batch_size
                        self.epochs = epochs


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    config = Config(lr=0.05)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=config.batch_size)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(config.epochs):
                        for data, target in loader:
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


                class Solver:
                    def __init__(self, lr):
                        self.lr = lr
                        self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                        self.net = nn.Linear(8, 1)
                        self.opt = torch.optim.SGD(self.net.parameters(), lr=self.lr)

                    def train(self):
                        for data, target in self.loader:
                            self.opt.zero_grad()
                            nn.functional.mse_loss(self.net(data), target).backward()
                            self.opt.step()


                def main():
                    Solver(0.1).train()


                if __name__ == "__main__":
                    main()
            """,
            code=BUILT_OUTSIDE_INIT,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(facts.training_classes)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        accelerator = facts.existing_accelerator or facts.accelerator_name
        plans = {
            node.name.value: _plan(node, accelerator, facts)
            for node in module.body
            if isinstance(node, cst.ClassDef) and node.name.value in facts.training_classes
        }
        for name, plan in plans.items():
            # A class deriving from a training base whose methods use the accelerator needs it
            # even when its own methods do not.
            plan.uses_accelerator = plan.uses_accelerator or any(
                plans[base].uses_accelerator for base in _ancestors(name, plans)
            )
        _builders_use_the_accelerator(plans)
        plans = {name: plan for name, plan in plans.items() if plan.uses_accelerator}
        if not plans:
            return module, []
        # The classes themselves, and the lines constructing them.
        lines = lines_of(site for name in plans for site in facts.call_sites.get(name, ()))
        for node in module.body:
            site = facts.origins.site(node) if isinstance(node, cst.ClassDef) and node.name.value in plans else None
            if site is not None:
                lines.update(range(site.line, site.end_line + 1))
        transformer = _GiveAccelerator(facts, plans, lines)
        return module.visit(transformer), transformer.changes(module)
