"""ACC104 helpers: functions that now use the accelerator receive it as a parameter.

Earlier passes write ``accelerator.backward(loss)``, ``accelerator.print(...)`` ... inside helper
functions such as ``train(args, model, device, train_loader, optimizer, epoch)``, where no
``accelerator`` exists. As a person would, this pass adds an ``accelerator`` parameter (after the
parameters without defaults) and passes it at every call site in the file — and to the callers of
those functions in turn, up to the function that creates the accelerator. A call from code that has
no accelerator (module level, a class method) is reported instead, but in a module of a program
that is also a script of its own (char-rnn's ``generate.py``, YOLOv3's ``test.py``): a function
its ``__main__`` block calls as the training script does takes the accelerator as an optional
last parameter, ``def generate(decoder, prime_str="A", accelerator=None):``, and creates its own
where it gets none (``if accelerator is None: accelerator = Accelerator()``), so the module still
runs alone.

Such a function also used as a value (``hooks = [record_history, save_checkpoint]`` then ``for
hook in hooks: hook(model, epoch)``, a trainer's ``callbacks=[save_weights]``) is called where no
rewrite can add the argument: the value carries it, ``functools.partial(save_checkpoint,
accelerator=accelerator)``, so the save in it runs on the main process whatever calls it; so is
a function of another module of the program imported by name (``from callbacks import log_epoch``)
or named through its module (``import callbacks`` then ``callbacks.log_epoch``, resolved by its
qualified name) that gained the parameter there because code holding the accelerator hands it over. Left
as written (and reported, ACC937): a value where the accelerator is not reachable, and one of a
function whose new parameter comes before a positional one (the call through the value could fill
it positionally too).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import field

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imported_calls import (
    callers_of_imported_accelerator_users,
    imported_accelerator_call,
)
from accel_convert.codemods.engine.imports import add_import, imports_module, with_accelerate_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS, Example, Rule
from accel_convert.codemods.engine.signatures import (
    parameter_index,
    with_argument,
    with_optional_accelerator,
    with_parameter,
)
from accel_convert.codemods.engine.syntax import TIGHT_EQUAL, nodes_in, parameter_names, statement
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of
from accel_convert.codemods.engine.walk import StatementFilter, walk
from accel_convert.records import record

#: Where the accelerator, once created, is a global of the module (created in module code or in
#: the ``__main__`` block), which the module's functions read without a parameter.
MODULE_GLOBAL_HOMES = frozenset({"module", "main_guard"})


@record(eq=False, repr=False)
class _Function:
    """A module-level function: its parameters, where an accelerator parameter goes, whom it calls."""

    params: tuple[str, ...]
    #: Where the accelerator parameter goes among the positional parameters (None: keyword-only).
    new_index: int | None
    uses_accelerator: bool = False
    binds_accelerator: bool = False
    #: Module-level functions called by plain name.
    calls: set[str] = field(default_factory=set)


class _Survey(StatementFilter):
    """Which module-level functions read ``accelerator`` and whom they call.

    Only what earlier passes wrote can hold a new use: statements they changed (their original
    lines) or inserted (no original position). Other statements are not walked. Not an analysis
    fact: the uses it looks for are what the earlier rules of this run wrote.
    """

    def __init__(self, accelerator: str, candidates: AbstractSet[str], facts: ScriptFacts) -> None:
        super().__init__()
        self.accelerator = accelerator
        #: Only functions the earlier passes could have given an accelerator use are walked.
        self.candidates = candidates
        self.origins = facts.origins
        self.changed = facts.changed_lines
        self.functions: dict[str, _Function] = {}
        self.depth = 0
        self.current: _Function | None = None

    def enters_statement(self, node: cst.CSTNode) -> bool:
        """Not a statement inside a function that no earlier pass changed: nothing new there."""
        if self.depth < 1:
            return True
        site = self.origins.site(node) if self.origins is not None else None
        return site is None or any(line in self.changed for line in range(site.line, site.end_line + 1))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        if self.depth == 1 and node.name.value not in self.candidates:
            return False
        if self.depth == 1:
            params = node.params
            names = parameter_names(node)
            # A helper that creates its own accelerator is a home of its own: not this pass's business.
            self.current = _Function(names, parameter_index(params), binds_accelerator=self.accelerator in names)
            self.functions[node.name.value] = self.current
        return self.enters_statement(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.current = None

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # Methods get no parameter added; module-level classes are skipped.
        return self.depth > 0 and self.enters_statement(node)

    def visit_Name(self, node: cst.Name) -> None:
        if self.current is not None and node.value == self.accelerator:
            self.current.uses_accelerator = True

    def visit_Call(self, node: cst.Call) -> None:
        if self.current is not None and isinstance(node.func, cst.Name):
            self.current.calls.add(node.func.value)


def needing_parameter(functions: dict[str, _Function], home: str | None) -> set[str]:
    """Functions that read the accelerator without binding it, and their callers (transitively),
    except the function that creates it."""
    needs = {
        name
        for name, info in functions.items()
        if name != home and info.uses_accelerator and not info.binds_accelerator
    }
    changed = True
    while changed:
        changed = False
        for name, info in functions.items():
            if name not in needs and name != home and not info.binds_accelerator and info.calls & needs:
                needs.add(name)
                changed = True
    return needs


def _imported_takers(facts: ScriptFacts) -> set[str]:
    """The names this module imports functions of the program by that now take the accelerator
    (a line naming one as a value is rewritten too)."""
    seeds = facts.program
    if seeds is None or facts.names is None:
        return set()
    takers = seeds.accelerator_parameter_index()
    # A module (or package) one of them is named through: ``callbacks`` of ``callbacks.log_epoch``.
    modules = {qualified.rpartition(".")[0] for qualified in takers}
    holding = {prefix for module in modules for prefix in _prefixes(module)}
    return {
        name for name, qualified in facts.names.imported_names().items() if qualified in takers or qualified in holding
    }


def _prefixes(module: str) -> set[str]:
    """``a.b.c`` → ``a``, ``a.b``, ``a.b.c``."""
    parts = module.split(".")
    return {".".join(parts[: end + 1]) for end in range(len(parts))}


class _PassAccelerator(RuleTransformer):
    def __init__(self, facts: ScriptFacts, needs: set[str], functions: dict[str, _Function], accelerator: str) -> None:
        callees = needs | set(facts.program.accelerator_parameter_index() if facts.program else ())
        sites = [site for name in callees for site in facts.call_sites.get(name, ())]
        # The lines naming a function that gains the parameter without calling it (a hook list).
        super().__init__(facts, lines_of(sites) | facts.lines_mentioning(needs | _imported_takers(facts)))
        self.needs = needs
        self.functions = functions
        self.facts = facts
        #: Names that are not a function used as a value: callees, definitions, attributes, keywords.
        self._not_values: set[int] = set()
        #: Whether ``functools.partial`` was written (its import is added).
        self.partial_written = False
        #: Whether a function creating its own accelerator when called without one was written
        #: (the ``Accelerator`` import is added).
        self.creation_written = False

    def visit_Call(self, node: cst.Call) -> None:
        self._not_values.add(id(node.func))
        self._not_values.update(id(arg.keyword) for arg in node.args if arg.keyword is not None)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._not_values.add(id(node.name))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_values.add(id(node.attr))

    def visit_Param(self, node: cst.Param) -> None:
        self._not_values.add(id(node.name))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._not_values.update(
            id(name) for name in nodes_in(node.target) if isinstance(name, (cst.Name, cst.Attribute))
        )

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        """A function that gains the parameter used as a value (``hooks = [save_checkpoint]``,
        ``Thread(target=save)``): it is called out of sight, so the value carries the argument,
        ``functools.partial(save_checkpoint, accelerator=accelerator)``, where the accelerator is
        reachable and the new parameter comes after every positional one (a positional argument
        of the out-of-sight call cannot fill it too)."""
        if id(original_node) in self._not_values:
            return updated_node
        if not self._carries_accelerator(original_node):
            return updated_node  # the guard reports the value that misses the argument (ACC937)
        return self._carrying_accelerator(original_node, updated_node, original_node.value)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        """A function of another module named through its module (``import callbacks`` then
        ``hooks = [callbacks.log_epoch]``), resolved by its qualified name: carried as a function
        imported by name is."""
        if id(original_node) in self._not_values:
            return updated_node
        imported = imported_accelerator_call(self.facts, original_node, self.scope)
        seeds = self.facts.program
        if imported is None or seeds is None or imported[0] not in seeds.accelerator_bindable:
            return updated_node
        return self._carrying_accelerator(original_node, updated_node, imported[0].rpartition(".")[2])

    def _carrying_accelerator(
        self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression, name: str
    ) -> cst.BaseExpression:
        """``functools.partial(<value>, accelerator=accelerator)`` where the code naming the value
        holds the accelerator; the value as it is elsewhere."""
        if not self._value_holds_accelerator():
            return updated_node
        self.partial_written = True
        self.report(
            original_node,
            Helpers.code,
            f"{name} used as a value → functools.partial({name}, {self.accelerator}={self.accelerator})",
        )
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        return cst.Call(
            func=cst.Attribute(cst.Name("functools"), cst.Name("partial")),
            args=[cst.Arg(updated_node), cst.Arg(accelerator, keyword=cst.Name(self.accelerator), equal=TIGHT_EQUAL)],
        )

    def _carries_accelerator(self, node: cst.Name) -> bool:
        """Whether ``node`` names a function that gains the parameter, and a value of it can carry
        it: one of this module's whose new parameter comes after every positional one, or an
        imported one (``from callbacks import save_weights``) whose module says so."""
        name = node.value
        if self.facts.name_table.resolve(name, self.scope) is not None:
            imported = imported_accelerator_call(self.facts, node, self.scope)
            seeds = self.facts.program
            return imported is not None and seeds is not None and imported[0] in seeds.accelerator_bindable
        function = self.functions.get(name)
        if name not in self.needs or function is None:
            return False
        return function.new_index is None or function.new_index >= len(function.params)

    def _value_holds_accelerator(self) -> bool:
        """Whether the code naming the value holds the accelerator: module code after its creation,
        a function that has it, a training class's method (its ``self.accelerator``)."""
        if not self.scope:
            return self.accelerator_reachable()
        return self._caller_has_accelerator(self.scope[0]) or self.instance_accelerator() is not None

    def _caller_has_accelerator(self, caller: str) -> bool:
        """Whether the module-level function ``caller`` has the accelerator (a parameter, its
        own creation, or the module's global)."""
        return caller in self.functions and (
            caller in self.needs
            or caller == (self.facts.creating_function or self.facts.main_function)
            or self.functions[caller].binds_accelerator
            or (self.facts.home_kind in MODULE_GLOBAL_HOMES and self.accelerator_reachable())
        )

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        updated = updated_node
        # Module-level functions only (the scope still holds the function being left).
        if len(self.scope) > 1 or original_node.name.value not in self.needs:
            return updated
        name = original_node.name.value
        if name in self.facts.optional_accelerator_functions:
            # Its module's own ``__main__`` block calls it too, with no accelerator to hand over.
            self.report(
                original_node,
                Helpers.code,
                f"{name}() receives the accelerator as an optional parameter, and creates one where it is called without",
                header_only=True,
            )
            self.creation_written = True
            return with_optional_accelerator(updated, self.accelerator)
        self.report(original_node, Helpers.code, f"{name}() receives the accelerator as a parameter", header_only=True)
        return updated.with_changes(params=with_parameter(updated.params, self.accelerator))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        # A function of another module of the program that now takes the accelerator.
        imported = imported_accelerator_call(self.facts, func, self.scope)
        if imported is not None:
            passed = self._pass(original_node, updated_node, imported[0], imported[1])
            if passed is not updated_node:  # every change is reported: this one is in another module's terms
                self.report(
                    original_node, Helpers.code, f"the accelerator is passed to {imported[0]}()", header_only=True
                )
            return passed
        if not isinstance(func, cst.Name) or func.value not in self.needs:
            return updated_node
        if self.facts.name_table.resolve(func.value, self.scope) is not None:
            return updated_node
        return self._pass(original_node, updated_node, func.value, self.functions[func.value].new_index)

    def _pass(self, original_node: cst.Call, updated_node: cst.Call, callee: str, index: int | None) -> cst.Call:
        caller = self.scope[0] if self.scope else None
        if caller is None and self.accelerator_reachable():
            return with_argument(updated_node, index, self.accelerator)  # module code after the creation
        instance_accelerator = self.instance_accelerator()
        if instance_accelerator is not None:
            # A training class's method hands on its own ``self.accelerator`` (ACC108).
            return with_argument(updated_node, index, self.accelerator, instance_accelerator)
        if callee in self.facts.optional_accelerator_functions and (
            caller is None or not self._caller_has_accelerator(caller)
        ):
            return updated_node  # it creates its own
        if caller is None or not self._caller_has_accelerator(caller):
            self.report(
                original_node,
                NO_ACCELERATOR_ACCESS,
                f"{callee}() needs the accelerator, but this caller has none",
                False,
                header_only=True,
            )
            return updated_node
        return with_argument(updated_node, index, self.accelerator)


class Helpers(Rule):
    code = "ACC104"
    name = "helpers"
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer):
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(3):
                        train(model, loader, optimizer)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader, optimizer, accelerator):
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(3):
                        train(model, loader, optimizer, accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A helper called by name and through a list of hooks: the hook list carries the argument.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def save_checkpoint(model, epoch):
                    torch.save(model.state_dict(), "last.pt")


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    hooks = [save_checkpoint]
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        for hook in hooks:
                            hook(model, epoch)
                    save_checkpoint(model, 3)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import functools

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def save_checkpoint(model, epoch, accelerator):
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "last.pt")


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    hooks = [functools.partial(save_checkpoint, accelerator=accelerator)]
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        for hook in hooks:
                            hook(model, epoch)
                    save_checkpoint(model, 3, accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A helper the training code calls that does not use the accelerator (a learning-rate
        # formula): it gets no parameter, and its calls stay as written.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def learning_rate(epoch, base=0.1):
                    return base * 0.5 ** (epoch // 2)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate(0))
                    for epoch in range(4):
                        for group in optimizer.param_groups:
                            group["lr"] = learning_rate(epoch)
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


                def learning_rate(epoch, base=0.1):
                    return base * 0.5 ** (epoch // 2)


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate(0))
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(4):
                        for group in optimizer.param_groups:
                            group["lr"] = learning_rate(epoch)
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        if not facts.has_accelerator:
            return False
        if facts.home_kind == "library" or callers_of_imported_accelerator_users(facts):
            return True  # a module of a program: the accelerator crosses module boundaries
        return facts.home_kind == "function" and len(facts.accessible_functions) > 1

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        accelerator = facts.existing_accelerator or facts.accelerator_name
        survey = _Survey(accelerator, facts.accessible_functions, facts)
        walk(module, survey)
        for caller, callees in facts.call_graph.items():
            if caller in survey.functions:  # calls in statements the survey did not walk
                survey.functions[caller].calls |= callees
        # Every caller of an imported function that now takes the accelerator must pass it: a
        # module-level function (given the parameter in turn), module-level code of an entry script
        # after the creation, a training class's method (its ``self.accelerator``); any other
        # caller is reported. Left alone, the call would fail with a missing argument.
        callers = callers_of_imported_accelerator_users(facts)
        for caller in callers & set(survey.functions):
            survey.functions[caller].uses_accelerator = True
        if facts.home_kind in MODULE_GLOBAL_HOMES:
            # The accelerator is a global of this module: its functions read it as they read
            # ``model``; a parameter would only shadow it (and change every call of the function).
            needs: set[str] = set()
        else:
            needs = needing_parameter(survey.functions, facts.creating_function or facts.main_function)
        if not needs and not callers:
            return module, []
        transformer = _PassAccelerator(facts, needs, survey.functions, accelerator)
        converted = module.visit(transformer)
        if transformer.creation_written:
            converted = with_accelerate_import(converted, options)
        if transformer.partial_written and not imports_module(converted, "functools"):
            converted = add_import(converted, statement("import functools"), options.import_style)  # type: ignore[arg-type]
        return converted, transformer.changes(module)
