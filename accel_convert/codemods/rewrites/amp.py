"""ACC111 amp: hand-written mixed precision (GradScaler + autocast) → ``Accelerator(mixed_precision=...)``.

The accelerator owns the scaler and the prepared model autocasts its forward, so the script's own
machinery goes: the ``GradScaler`` line, ``scaler.update()`` and ``scaler.unscale_(opt)`` are
removed (``accelerator.clip_grad_norm_`` unscales), ``scaler.scale(loss).backward()`` becomes
``accelerator.backward(loss)``, ``scaler.step(opt)`` becomes ``opt.step()`` and ``with autocast(...):``
blocks are dissolved into their body. An ``if use_amp: ... else: ...`` whose two branches are then the
same collapses into one. The script's own switch is kept: ``GradScaler(enabled=args.amp)`` or
``if args.amp:`` give ``mixed_precision="fp16" if args.amp else "no"``. A scaler used in any other
way (saved in a checkpoint, its scale read) is reported (ACC911) and nothing is changed. A module of a
program that only autocasts (an evaluation helper under ``autocast(enabled=amp)``) and is handed the
entry script's accelerator keeps its autocast as written, unreported: it computes what it computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call, is_accelerator_method
from accel_convert.codemods.engine.accelerator_creation import (
    expression_available,
    set_accelerator_argument,
)
from accel_convert.codemods.engine.devices import names_gpu_type
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import Findings
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    Statement,
    argument_for,
    as_statement,
    as_statements,
    binds_name,
    body_statements,
    dotted,
    expression,
    expression_code,
    is_backward,
    keyword_is,
    parameter_names,
    positional_parameter_names,
)
from accel_convert.codemods.engine.torch_names import AUTOCASTS, GRAD_SCALERS
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import StatementFilter, identifiers, walk
from accel_convert.codemods.model.plan import AcceleratorCreation, find_creation
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.records import record

#: The scaler's methods this pass knows how to replace; any other use keeps the script as it is.
SCALER_METHODS = frozenset({"scale", "step", "update", "unscale_"})


#: The last names of the GradScalers and autocasts (``GradScaler``, ``autocast``).
_AMP_FINAL_NAMES = frozenset(name.rpartition(".")[2] for name in GRAD_SCALERS | AUTOCASTS)


@record(frozen=True, eq=False, repr=False)
class MixedPrecision:
    """What the rule would otherwise survey the whole module for."""

    #: Names bound to a ``GradScaler(...)`` (``scaler``, ``self.scaler``), matched by qualified
    #: name as the rule matches calls (module scope).
    grad_scalers: frozenset[str]
    #: Original lines where mixed-precision machinery may be: calls to a GradScaler or an autocast
    #: and statements naming a scaler (None: a call without an original position, so look
    #: everywhere). The rule reads only the simple statements holding these lines.
    amp_lines: frozenset[int] | None


@rule_provider(needs=("word_lines",))
def mixed_precision(a: Analysis) -> MixedPrecision:
    """The scalers and the lines of the AMP machinery. Callees are matched as the rule matches
    them (``facts.callee_name``)."""
    lines: set[int] | None = set()
    scaler_calls: set[int] = set()
    for call in a.r.calls:
        func = call.node.func
        # A name written ``x.attr`` resolves to a name ending in ``.attr``: most calls are
        # ruled out without resolving them.
        if isinstance(func, cst.Attribute) and func.attr.value not in _AMP_FINAL_NAMES:
            continue
        callee = a.facts.callee_name(func)
        if callee not in GRAD_SCALERS and callee not in AUTOCASTS:
            continue
        if callee in GRAD_SCALERS:
            scaler_calls.add(id(call.node))
        site = a.origins.site(call.node)
        if site is None:
            lines = None
        elif lines is not None:
            lines.add(site.line)
    scalers = {
        name
        for assign in a.r.assigns
        if isinstance(assign.value, cst.Call) and id(assign.value) in scaler_calls
        for target in assign.node.targets
        if (name := dotted(target.target))
    }
    if lines is not None:
        lines |= a.facts.lines_mentioning({part for name in scalers for part in name.split(".")})
    return MixedPrecision(frozenset(scalers), None if lines is None else frozenset(lines))


class AmpCodemod(Rule):
    code = "ACC111"
    name = "amp"
    providers = (mixed_precision,)
    fixes = {
        "ACC911": (
            'Replace the hand-made mixed precision with Accelerate\'s: delete the ``GradScaler`` and ``autocast`` lines, construct ``Accelerator(mixed_precision="fp16")`` (or ``"bf16"``), call ``accelerator.backward(loss)`` and ``optimizer.step()`` directly; wrap a forward that must stay in autocast with ``with accelerator.autocast():``.'
        ),
    }
    extra_codes = {
        "ACC911": "amp-manual: mixed precision set up in a way the converter cannot carry over (check by hand)",
    }
    examples = (
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--amp", action="store_true")
                    args = parser.parse_args()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
                    for data, target in loader:
                        optimizer.zero_grad()
                        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=args.amp):
                            loss = nn.functional.mse_loss(model(data), target)
                        scaler.scale(loss).backward()
                        scaler.step(optimizer)
                        scaler.update()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--amp", action="store_true")
                    args = parser.parse_args()
                    accelerator = Accelerator(mixed_precision="fp16" if args.amp else "no")
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


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code="ACC911",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    scaler = torch.cuda.amp.GradScaler()
                    for data, target in loader:
                        optimizer.zero_grad()
                        with torch.autocast(device_type="cuda", dtype=torch.float16):
                            loss = nn.functional.mse_loss(model(data), target)
                        scaler.scale(loss).backward()
                        scaler.step(optimizer)
                        scaler.update()
                    torch.save(scaler.state_dict(), "scaler.pt")


                if __name__ == "__main__":
                    main()
            """,
            message="the GradScaler is used beyond scale/step/update: convert by hand",
        ),
        # A scaler that is not mixed precision's (scikit-learn's StandardScaler, matched by
        # qualified name): its calls stay as written.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from sklearn.preprocessing import StandardScaler
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    features = torch.randn(64, 8).numpy()
                    scaler = StandardScaler()
                    scaled = torch.tensor(scaler.fit_transform(features), dtype=torch.float32)
                    loader = DataLoader(TensorDataset(scaled, torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    print("feature means:", scaler.mean_)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from sklearn.preprocessing import StandardScaler
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    features = torch.randn(64, 8).numpy()
                    scaler = StandardScaler()
                    scaled = torch.tensor(scaler.fit_transform(features), dtype=torch.float32)
                    loader = DataLoader(TensorDataset(scaled, torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.print("feature means:", scaler.mean_)


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    scaler = torch.cuda.amp.GradScaler()
                    for data, target in loader:
                        optimizer.zero_grad()
                        with torch.autocast(device_type="cuda", dtype=torch.float16):
                            loss = nn.functional.mse_loss(model(data), target)
                        scaler.scale(loss).backward()
                        scaler.step(optimizer)
                        scaler.update()


                if __name__ == "__main__":
                    main()
            """,
            code="ACC911",
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.existing_features & {"GradScaler", "autocast"})

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        survey = _AmpSurvey(facts)
        walk(module, survey)
        pending = Findings(facts)
        if not survey.scalers and not survey.autocasts:
            return module, []
        if survey.other_scaler_uses:
            for node, anchor in survey.other_scaler_uses:
                pending.add(
                    node, "ACC911", "the GradScaler is used beyond scale/step/update: convert by hand", False, anchor
                )
            return module, pending.resolve(module)
        flags = _switch_flags(survey.flags, module)
        if flags is None:
            # ``GradScaler(enabled=args.amp)`` with ``autocast(enabled=args.fp16)``: which one
            # decides is not ours to guess (fp16 would be switched on where the user said off).
            switches = ", ".join(dict.fromkeys(expression_code(flag) for flag in survey.flags))
            for node in survey.scaler_lines + survey.autocasts:
                pending.add(node, "ACC911", f"AMP is switched by different flags ({switches}): convert by hand", False)
            return module, pending.resolve(module)
        precision = _precision_argument(survey, flags, module, facts)
        if precision is None and flags and find_creation(module, facts) is not None:
            switches = ", ".join(dict.fromkeys(expression_code(flag) for flag in flags))
            for node in survey.scaler_lines + survey.autocasts:
                pending.add(
                    node, "ACC911", f"AMP switch ({switches}) not readable where the accelerator is created", False
                )
            return module, pending.resolve(module)
        if precision is None and not survey.scalers and facts.home_kind == "library":
            # A library's autocast around what it runs (an evaluation under ``autocast(enabled=amp)``)
            # with the accelerator handed in: kept as written, it does what it did; the entry
            # script's accelerator takes the mixed precision from its own scaler.
            return module, []
        if precision is None:
            for node in survey.scaler_lines + survey.autocasts:
                pending.add(node, "ACC911", "no Accelerator(...) to give mixed_precision to", False)
            return module, pending.resolve(module)
        rewriter = _AmpRemover(facts, survey, flags, pending, _amp_lines(facts, survey))
        new_module = module.visit(rewriter)
        new_module = set_accelerator_argument(new_module, facts, "mixed_precision", precision)
        return new_module, pending.resolve(module)


def _amp_lines(facts: ScriptFacts, survey: _AmpSurvey) -> set[int]:
    """The lines the rewrite may touch: those naming a scaler, GradScaler or autocast (by any
    alias), or the script's AMP switch (an ``if args.amp:`` whose branches become the same)."""
    words = {qualified.rpartition(".")[2] for qualified in GRAD_SCALERS | AUTOCASTS}
    words |= {local for local, qualified in facts.imports.items() if qualified in GRAD_SCALERS | AUTOCASTS}
    words |= {part for scaler in survey.scalers for part in scaler.split(".")}
    words |= identifiers(*survey.flags)
    return facts.lines_mentioning(words)


# ---- survey: which names are scalers, where autocast is, which flag switches AMP ------------


def _machinery_lines(facts: ScriptFacts, scalers: AbstractSet[str]) -> list[int] | None:
    """The original lines of the simple statements that can hold AMP machinery in the tree this
    rule received: where the analysis found a GradScaler or autocast call or a scaler's name
    (``facts.amp_lines``), where ``scalers`` are named, and what earlier rules changed (a
    statement they inserted has no original line and is always read). None: read everything."""
    amp_lines = facts.of(mixed_precision).amp_lines
    if amp_lines is None:
        return None
    named = facts.lines_mentioning({part for scaler in scalers for part in scaler.split(".")})
    return sorted(amp_lines | named | facts.changed_lines)


class _StatementsAtLines(StatementFilter):
    """A read-only look that enters only the statements holding one of ``lines``
    (:func:`_machinery_lines`): the analysis already found every GradScaler, autocast and scaler
    name of the script, so the other statements hold nothing for this rule."""

    def __init__(self, facts: ScriptFacts, lines: list[int] | None) -> None:
        super().__init__()
        self.facts = facts
        self._lines = lines

    def enters_statement(self, node: cst.CSTNode) -> bool:
        # A decorated definition's original lines start at ``def``/``class``, below its decorators.
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node.decorators:
            return True
        return not skips_statement(node, self._lines, self.facts.origins)


class _AmpSurvey(_StatementsAtLines):
    """The scaler variables, the autocast calls and the script's AMP switch, in the statements
    the analysis pointed at."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__(facts, _machinery_lines(facts, facts.of(mixed_precision).grad_scalers))
        self.scalers: set[str] = set()
        self.scaler_lines: list[cst.CSTNode] = []
        self.autocasts: list[cst.Call] = []
        self.other_scaler_uses: list[tuple[cst.CSTNode, cst.CSTNode | None]] = []
        #: What the scaler-use check read (see :func:`_machinery_lines`): all the rewrite may change.
        self.machinery_lines: list[int] | None = None
        #: ``enabled=`` expressions and ``if`` tests around AMP code: the script's switch.
        self.flags: list[cst.BaseExpression] = []
        self.bf16 = False
        self._tests: list[cst.BaseExpression] = []

    def visit_Module(self, node: cst.Module) -> None:
        self.functions = module_functions(node)

    def visit_If(self, node: cst.If) -> bool:
        self._tests.append(node.test)  # popped by leave_If, entered or not
        return super().visit_If(node)

    def leave_If(self, original_node: cst.If) -> None:
        self._tests.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Call) and self.facts.callee_name(value.func) in GRAD_SCALERS:
            for target in node.targets:
                name = dotted(target.target)
                if name:
                    self.scalers.add(name)
            self.scaler_lines.append(node)
            self._note_switch(value)

    def visit_Call(self, node: cst.Call) -> None:
        if self.facts.callee_name(node.func) in AUTOCASTS and not _disables(node):
            self.autocasts.append(node)
            self._note_switch(node)
            for arg in node.args:
                if (
                    arg.keyword
                    and arg.keyword.value == "dtype"
                    and dotted(arg.value)
                    in (
                        "torch.bfloat16",
                        "bfloat16",
                    )
                ):
                    self.bf16 = True

    def _note_switch(self, call: cst.Call) -> None:
        for arg in call.args:
            if arg.keyword and arg.keyword.value == "enabled" and not _is_true(arg.value):
                self.flags.append(arg.value)
        self.flags.extend(self._tests[-1:])

    def leave_Module(self, original_node: cst.Module) -> None:
        checker = _ScalerUseChecker(self.facts, self.scalers, self.functions)
        self.machinery_lines = checker.lines
        walk(original_node, checker)
        self.other_scaler_uses = checker.other_uses


class _ScalerUseChecker(_StatementsAtLines):
    """Finds uses of a scaler other than ``scaler.<known method>(...)`` and its own assignment."""

    def __init__(self, facts: ScriptFacts, scalers: set[str], functions: dict[str, list[str]]) -> None:
        self.lines = _machinery_lines(facts, scalers)
        super().__init__(facts, self.lines)
        self.scalers = scalers
        self.functions = functions
        #: Each other use, with the statement holding it (a name has no recorded position of its
        #: own: the report goes to the statement's line).
        self.other_uses: list[tuple[cst.CSTNode, cst.CSTNode | None]] = []
        self._fine: set[int] = set()
        self._statement: cst.CSTNode | None = None

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        entered = super().visit_SimpleStatementLine(node)
        if entered:
            self._statement = node
        return entered

    def visit_Param(self, node: cst.Param) -> None:
        self._fine.add(id(node.name))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._fine.add(id(node.target))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and dotted(func.value) in self.scalers:
            if func.attr.value in SCALER_METHODS:
                self._fine.add(id(func.value))
        for arg in passed_through(node, self.scalers, self.functions):
            self._fine.add(id(arg.value))

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.scalers and id(node) not in self._fine:
            self.other_uses.append((node, self._statement))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted(node) in self.scalers and id(node) not in self._fine:
            self.other_uses.append((node, self._statement))
            return False
        if id(node) in self._fine:
            return False
        return True


def module_functions(module: cst.Module) -> dict[str, list[str]]:
    """Module-level function name → its positional-or-keyword parameter names."""
    return {
        s.name.value: [p.name.value for p in [*s.params.posonly_params, *s.params.params]]
        for s in module.body
        if isinstance(s, cst.FunctionDef)
    }


def passed_through(call: cst.Call, names: set[str], functions: dict[str, list[str]]) -> list[cst.Arg]:
    """Arguments that hand one of ``names`` to a function of this file under the same parameter
    name (``train(..., scaler)`` into ``def train(..., scaler)``): both can go together."""
    callee = dotted(call.func)
    params = functions.get(callee or "")
    if params is None:
        return []
    found = []
    for index, arg in enumerate(call.args):
        name = dotted(arg.value) if isinstance(arg.value, cst.Name) else None
        if name not in names:
            continue
        if arg.keyword is not None:
            if arg.keyword.value == name:
                found.append(arg)
        elif index < len(params) and params[index] == name and all(a.keyword is None for a in call.args[:index]):
            found.append(arg)
    return found


def without(items: Sequence, dropped: Sequence) -> list:
    """``items`` minus ``dropped`` (by identity), with the new last item's trailing comma as the
    old last item had it."""
    kept = [item for item in items if not any(item is d for d in dropped)]
    if kept and items and kept[-1] is not items[-1]:
        kept[-1] = kept[-1].with_changes(comma=items[-1].comma)
    return kept


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


# ---- the Accelerator(...) call ----------------------------------------------------------------


def _precision_argument(
    survey: _AmpSurvey, flags: Sequence[cst.BaseExpression], module: cst.Module, facts: ScriptFacts
) -> cst.BaseExpression | None:
    """``"fp16"``/``"bf16"``, or ``"fp16" if <flag> else "no"`` when the script has its own switch
    (``flags``: its spellings) and one of them exists where the accelerator is created."""
    creation = find_creation(module, facts)
    if creation is None:
        return None
    precision = cst.SimpleString('"bf16"' if survey.bf16 else '"fp16"')
    for flag in flags:
        for spelling in (flag, _outside_the_instance(flag), _argument_from_callers(flag, module)):
            if spelling is not None and not expression_available(spelling, creation):
                spelling = _value_assigned_later(spelling, creation)
            if spelling is not None:
                spelling = _readable_part(spelling, creation, facts)
            if spelling is not None:
                return cst.IfExp(test=spelling, body=precision, orelse=cst.SimpleString('"no"'))
    if flags:
        return None  # a switch, but none of it readable there: always-on fp16 would be wrong
    return precision


def _readable_part(
    flag: cst.BaseExpression, creation: AcceleratorCreation, facts: ScriptFacts
) -> cst.BaseExpression | None:
    """The switch as the accelerator's creation can read it. ``use_amp = args.amp and
    device.type == "cuda"`` with the device chosen after the creation: the device test is
    ``torch.cuda.is_available()`` (the device is CUDA exactly when that holds)."""
    if expression_available(flag, creation):
        return flag
    if isinstance(flag, cst.BooleanOperation) and isinstance(flag.operator, cst.And):
        left = _readable_part(flag.left, creation, facts)
        right = _readable_part(flag.right, creation, facts)
        if left is None or right is None:
            return None
        return flag.with_changes(left=left, right=right)
    if (
        isinstance(flag, cst.Comparison)
        and len(flag.comparisons) == 1
        and isinstance(flag.comparisons[0].operator, cst.Equal)
        and isinstance(flag.left, cst.Attribute)
        and flag.left.attr.value == "type"
        and dotted(flag.left.value) in facts.device_names
        and names_gpu_type(flag.comparisons[0].comparator)
    ):
        return expression("torch.cuda.is_available()")
    return None


def _outside_the_instance(flag: cst.BaseExpression) -> cst.BaseExpression | None:
    """``args.amp`` for ``self.args.amp``: a training class keeps the options it was given
    (``self.args = args``), and the accelerator is created where they were parsed."""
    chain: list[str] = []
    node = flag
    while isinstance(node, cst.Attribute):
        chain.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name) or node.value != "self" or len(chain) < 2:
        return None
    return expression(".".join(reversed(chain)))


def _argument_from_callers(flag: cst.BaseExpression, module: cst.Module) -> cst.BaseExpression | None:
    """For a switch that is a parameter of the script's functions (``def train_model(..., amp=False)``
    holding ``GradScaler(enabled=amp)``), the one value its callers pass (``train_model(...,
    amp=args.amp)``, twice on an out-of-memory retry): the switch as the code creating the
    accelerator sees it. A call inside those functions passing the parameter on under its own name
    (``evaluate(model, loader, device, amp)``) carries the same switch. None when the callers pass
    different values, a call leaves it to its default or passes ``*args``/``**kwargs``, or a
    function rebinds it: which precision the accelerator needs is then not one value."""
    if not isinstance(flag, cst.Name):
        return None
    name = flag.value
    functions = {
        statement.name.value: statement
        for statement in module.body
        if isinstance(statement, cst.FunctionDef) and name in parameter_names(statement)
    }
    if not functions or any(binds_name(body_statements(function), name) for function in functions.values()):
        return None
    finder = _CallsOf(functions)
    walk(module, finder)
    values: dict[str, cst.BaseExpression] = {}
    for caller, call in finder.calls:
        positional = positional_parameter_names(functions[cast(cst.Name, call.func).value])
        argument = argument_for(call, positional.index(name) if name in positional else None, name)
        if argument is None:
            return None  # not passed, or not knowable (behind ``*args``/``**kwargs``)
        value = argument.value
        if caller in functions and isinstance(value, cst.Name) and value.value == name:
            continue  # handed on within the switch's own functions
        values.setdefault(expression_code(value), value)
    return next(iter(values.values())) if len(values) == 1 else None


class _CallsOf(cst.CSTVisitor):
    """Calls of some module-level functions by their bare name, each with the module-level
    function it lies in (None: module-level code or the ``__main__`` block). Local: read only
    when an AMP switch is a function parameter."""

    def __init__(self, functions: dict[str, cst.FunctionDef]) -> None:
        super().__init__()
        self.functions = functions
        self.calls: list[tuple[str | None, cst.Call]] = []
        self._enclosing: list[str] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enclosing.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._enclosing.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in self.functions:
            self.calls.append((self._enclosing[0] if self._enclosing else None, node))


def _value_assigned_later(flag: cst.BaseExpression, creation: AcceleratorCreation) -> cst.BaseExpression | None:
    """For a switch set after the accelerator exists (``use_amp = args.amp``), the value it gets,
    when exactly one simple assignment of the same body sets it."""
    if not isinstance(flag, cst.Name):
        return None
    values = [
        small.value
        for statement in creation.statements_after
        if isinstance(statement, cst.SimpleStatementLine)
        for small in statement.body
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted(small.targets[0].target) == flag.value
    ]
    return values[0] if len(values) == 1 else None


def _switch_flags(flags: Sequence[cst.BaseExpression], module: cst.Module) -> list[cst.BaseExpression] | None:
    """The spellings of the script's one AMP switch (empty: AMP always on), or None when the
    scaler and the autocasts are switched by different flags. ``use_amp = cfg["use_amp"]`` makes
    ``use_amp`` and ``cfg["use_amp"]`` one switch."""
    distinct: list[cst.BaseExpression] = []
    for flag in flags:
        if not any(flag.deep_equals(seen) for seen in distinct):
            distinct.append(flag)
    if len(distinct) <= 1:
        return distinct
    aliases = _single_assignments(module, {flag.value for flag in distinct if isinstance(flag, cst.Name)})

    def meaning(flag: cst.BaseExpression) -> str:
        value = aliases.get(flag.value) if isinstance(flag, cst.Name) else None
        return expression_code(value if value is not None else flag)

    return distinct if len({meaning(flag) for flag in distinct}) == 1 else None


def _single_assignments(module: cst.Module, names: set[str]) -> dict[str, cst.BaseExpression]:
    """Of ``names``, those the module assigns exactly once (``use_amp = args.amp``), with the value."""
    finder = _Assignments(names)
    walk(module, finder)
    return {name: values[0] for name, values in finder.values.items() if len(values) == 1}


class _Assignments(cst.CSTVisitor):
    """Values assigned to some plain names. Local: needed only when a script spells its AMP
    switch two ways, which the analysis cannot know before the survey above."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.values: dict[str, list[cst.BaseExpression]] = {}

    def visit_Assign(self, node: cst.Assign) -> bool:
        for target in node.targets:
            if isinstance(target.target, cst.Name) and target.target.value in self.names:
                self.values.setdefault(target.target.value, []).append(node.value)
        return False


# ---- the rewrite --------------------------------------------------------------------------------


class _AmpRemover(RuleTransformer):
    def __init__(
        self,
        facts: ScriptFacts,
        survey: _AmpSurvey,
        flags: Sequence[cst.BaseExpression],
        pending: Findings,
        lines: set[int],
    ) -> None:
        super().__init__(facts, lines)
        self.scalers = survey.scalers
        self.findings = pending
        self.flags = flags
        self.functions = survey.functions
        self.machinery_lines = survey.machinery_lines

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        # Only lines that name a scaler or build one (or an autocast) change: a read-only look
        # spares the rebuilding walk of every other line, and lines the survey did not read
        # (no AMP machinery there) need not even that look.
        if skips_statement(node, self.machinery_lines, self.origins):
            return False
        finder = _ScalerMention(self.facts, self.scalers)
        walk(node, finder)
        return finder.found

    def leave_Parameters(self, original_node: cst.Parameters, updated_node: cst.Parameters) -> cst.Parameters:
        dropped = [p for p in updated_node.params if p.name.value in self.scalers]
        if not dropped:
            return updated_node
        return updated_node.with_changes(params=without(updated_node.params, dropped))

    def _scaler_method(self, node: cst.CSTNode) -> tuple[str, cst.Call] | None:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if dotted(node.func.value) in self.scalers:
                return node.func.attr.value, node
        return None

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        handed_over = passed_through(updated_node, self.scalers, self.functions)
        if handed_over:
            updated_node = updated_node.with_changes(args=without(updated_node.args, handed_over))
        # scaler.scale(loss).backward() → accelerator.backward(loss)
        if is_backward(updated_node):
            scaled = self._scaler_method(updated_node.func.value)  # type: ignore[attr-defined]
            if scaled and scaled[0] == "scale" and scaled[1].args:
                self.findings.add(
                    original_node, AmpCodemod.code, "scaler.scale(loss).backward() → accelerator.backward(loss)", True
                )
                return accelerator_call(self.facts, "backward", scaled[1].args[0].value, *updated_node.args)
        # accelerator.backward(scaler.scale(loss)) (the backward pass ran first) → accelerator.backward(loss)
        if is_accelerator_method(updated_node, self.facts, "backward") and updated_node.args:
            scaled = self._scaler_method(updated_node.args[0].value)
            if scaled and scaled[0] == "scale" and scaled[1].args:
                first = updated_node.args[0].with_changes(value=scaled[1].args[0].value)
                return updated_node.with_changes(args=[first, *updated_node.args[1:]])
        # scaler.step(optimizer) → optimizer.step()
        step = self._scaler_method(updated_node)
        if step and step[0] == "step" and updated_node.args:
            self.findings.add(
                original_node,
                AmpCodemod.code,
                "scaler.step(optimizer) → optimizer.step() (the accelerator scales)",
                True,
            )
            optimizer = updated_node.args[0].value
            rest = list(updated_node.args[1:])
            return cst.Call(func=cst.Attribute(value=optimizer, attr=cst.Name("step")), args=rest)
        return updated_node

    def leave_SimpleStatementLine(self, original_node, updated_node):
        kept = [s for s in updated_node.body if not self._removable(s)]
        if len(kept) == len(updated_node.body):
            return updated_node
        self.findings.add(
            original_node, AmpCodemod.code, "GradScaler bookkeeping removed: the accelerator scales", True
        )
        if not kept:
            return cst.RemoveFromParent()
        return updated_node.with_changes(body=kept)

    def _removable(self, statement: cst.BaseSmallStatement) -> bool:
        if isinstance(statement, cst.Expr):
            method = self._scaler_method(statement.value)
            return method is not None and method[0] in ("update", "unscale_")
        if isinstance(statement, cst.Assign) and isinstance(statement.value, cst.Call):
            return self.facts.callee_name(statement.value.func) in GRAD_SCALERS
        return False

    def leave_With(self, original_node: cst.With, updated_node: cst.With):
        items = [i for i in updated_node.items if not _is_autocast(i.item, self.facts)]
        if len(items) == len(updated_node.items):
            return updated_node
        self.findings.add(
            original_node, AmpCodemod.code, "autocast block dissolved: the prepared model autocasts", True
        )
        if items:
            items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated_node.with_changes(items=items)
        body = updated_node.body
        statements: list[Statement] = (
            as_statements(body.body)
            if isinstance(body, cst.IndentedBlock)
            else [cst.SimpleStatementLine(cast(cst.SimpleStatementSuite, body).body)]  # BaseSuite's other kind
        )
        if statements:
            first = statements[0]
            statements[0] = self.origins.relined(first, [*updated_node.leading_lines, *first.leading_lines])
        return cst.FlattenSentinel(statements)

    def leave_If(self, original_node: cst.If, updated_node: cst.If):
        """``if use_amp: A else: A`` (the same after the rewrite) → ``A``."""
        orelse = updated_node.orelse
        if not isinstance(orelse, cst.Else) or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        if not any(updated_node.test.deep_equals(flag) for flag in self.flags):
            if not _mentions_amp(original_node, self.facts, self.scalers):
                return updated_node
        if not isinstance(orelse.body, cst.IndentedBlock) or not _same_statements(
            updated_node.body.body, orelse.body.body
        ):
            return updated_node
        self.findings.add(original_node, AmpCodemod.code, "AMP and plain branches are the same now: one kept", True)
        statements = as_statements(updated_node.body.body)
        statements[0] = self.origins.relined(statements[0], [*updated_node.leading_lines, *statements[0].leading_lines])
        return cst.FlattenSentinel(statements)


class _ScalerMention(cst.CSTVisitor):
    """Whether a statement names one of the scalers or calls a GradScaler or autocast. Local:
    it reads the one statement the rewrite is about to enter, in the tree this rule received."""

    def __init__(self, facts: ScriptFacts, scalers: set[str]) -> None:
        super().__init__()
        self.facts, self.scalers, self.found = facts, scalers, False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or node.value in self.scalers

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.found = self.found or dotted(node) in self.scalers

    def visit_Call(self, node: cst.Call) -> None:
        self.found = self.found or self.facts.callee_name(node.func) in GRAD_SCALERS | AUTOCASTS


def _is_autocast(node: cst.BaseExpression, facts: ScriptFacts) -> bool:
    """An autocast context that switches mixed precision on (``enabled=False`` blocks, which
    carve a full-precision region out of an autocast one, stay as they are)."""
    return isinstance(node, cst.Call) and facts.callee_name(node.func) in AUTOCASTS and not _disables(node)


def _disables(call: cst.Call) -> bool:
    return keyword_is(call, "enabled", "False")


def _mentions_amp(node: cst.CSTNode, facts: ScriptFacts, scalers: set[str]) -> bool:
    finder = _AmpMention(facts, scalers)
    walk(node, finder)
    return finder.found


class _AmpMention(cst.CSTVisitor):
    """Whether an ``if`` being rewritten holds autocast or scaler calls. Local: it reads only
    that statement (as this rule received it)."""

    def __init__(self, facts: ScriptFacts, scalers: set[str]) -> None:
        self.facts, self.scalers, self.found = facts, scalers, False

    def visit_Call(self, node: cst.Call) -> None:
        if _is_autocast(node, self.facts):
            self.found = True
        if isinstance(node.func, cst.Attribute) and dotted(node.func.value) in self.scalers:
            self.found = True


def _same_statements(first: Sequence[cst.BaseStatement], second: Sequence[cst.BaseStatement]) -> bool:
    """Same code, line by line, ignoring blank lines and comments above each statement."""
    if len(first) != len(second):
        return False
    return all(_statement_code(a) == _statement_code(b) for a, b in zip(first, second))


def _statement_code(statement: cst.BaseStatement) -> str:
    return cst.Module(body=[as_statement(statement).with_changes(leading_lines=())]).code
