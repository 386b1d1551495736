"""ACC107 print-progress: print once, and show progress bars on one process per machine.

Every process runs the whole script, so a plain ``print`` appears N times. ``accelerator.print``
prints on the main process only. ``tqdm`` bars get ``disable=not accelerator.is_local_main_process``
(merged with a ``disable=`` the script already passes). Only code that runs after the accelerator
exists is changed: the creating function after its creation, and the functions it calls (which
receive the accelerator, see ACC104). ``print`` inside a dataset's methods is left as it was, and
so is one in a model's methods unless the model is built where every process runs (the home block,
a function or a training class the accelerator reaches: its ``__init__`` printing the parameter
count printed once per process); that one, and one in a method of another class of the script (an
``EarlyStopping`` helper printing its counter), which no accelerator reaches, are kept to the
first process by the launcher's ``RANK``. What such a print's arguments call of the script's own
code (``print(f"loss {main():.4f}")``) still runs on every process: the call is bound to a name
(``main_result = main()``) before the guarded print, which prints that name.

Python's ``logging`` prints once per rank too (``logging.info``, ``logger.info`` of a module
logger, each rank appending to the file of ``logging.basicConfig(filename=...)``). The level the
script configures, ``logging.basicConfig(level=logging.INFO)`` (or ``DEBUG``), applies on the main
process only: the others get ``WARNING``, so progress records are logged once while warnings and
errors still come from every rank; so does the level a logger is given
(``logger.setLevel(logging.INFO)`` on ``logger = logging.getLogger(__name__)``). Where no
accelerator is reachable (``basicConfig`` at module level, before ``main`` creates it) the
launcher's ``RANK`` tells the main process. A level from a variable is left as it is.

A notebook that launches its training with ``notebook_launcher(training_function, ...)`` (one
restructured by ``--launcher``) keeps the prints of its top level as written: the top level is the
kernel's one process, and only the launched function runs in every worker.

A script that rebinds ``print`` (``print = misc.logger.info``) calls that function instead: the
binding becomes ``print = accelerator.on_main_process(misc.logger.info)``, so its calls run on the
main process only; so does a name bound to a ``logging`` logger's method (``log =
logging.getLogger(__name__).info``). At a module's top level where no accelerator is (a module of
the program such as pytorch-playground's ``utee/misc.py``, or the script before ``main()`` creates
it) the launcher's ``RANK`` picks: ``print = misc.logger.info if int(os.environ.get("RANK", "0"))
== 0 else (lambda *args, **kwargs: None)``, so one process logs, as on one process, while the
others call a function that does nothing. A binding in a function where no accelerator is reachable
is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from functools import cache
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import is_accelerator_method
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imports import add_import, imports_module
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.names import NameTable, ScopeKey
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import dotted, expression, statement
from accel_convert.codemods.engine.torch_names import CONSOLE_WRITES, NOTEBOOK_LAUNCHERS, PROGRESS_BARS
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of
from accel_convert.codemods.model.locality import mentions_rank
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis

#: Longest line a rewritten progress-bar call may leave on one line.
LINE_LIMIT = 100


class _Printing(RuleTransformer):
    def __init__(self, facts: ScriptFacts, accelerator: str, *, top_level_runs_once: bool = False) -> None:
        sites = [site for name in ("print", *PROGRESS_BARS, *CONSOLE_WRITES) for site in facts.call_sites.get(name, ())]
        # ``print = misc.logger.info``: the script's own print, rebound (pytorch-playground), and
        # ``log = logging.getLogger(__name__).info``.
        sites += [site for name in ("print", *facts.of(log_functions)) for site in facts.assign_sites.get(name, ())]
        super().__init__(facts, lines_of(sites))
        self.facts = facts
        #: The top level is one process (a notebook's kernel, its workers running a launched function).
        self.top_level_runs_once = top_level_runs_once or facts.of(launches_a_function)
        #: Module-level prints kept to the first process by ``RANK`` (they need ``import os``).
        self.guarded_prints = 0
        #: The script's helper classes (not models, datasets or training classes).
        self.helper_classes: set[str] = set()
        #: The functions and classes the script defines at module level.
        self.script_callables: set[str] = set()
        #: Names bound to what a guarded print's arguments called (``main_result = main()``).
        self.hoisted_names: set[str] = set()

    def visit_Module(self, node: cst.Module) -> bool:
        classes = [top for top in node.body if isinstance(top, cst.ClassDef)]
        # A base of another class of the script (a BaseTrainer) is the training-class rules' (ACC108).
        bases = {dotted(base.value) for top in classes for base in top.bases}
        self.helper_classes = {
            top.name.value for top in classes if top.name.value not in bases and _is_helper_class(top, self.facts)
        }
        self.helper_classes |= self.facts.of(models_built_on_every_rank)
        self.script_callables = {
            top.name.value for top in node.body if isinstance(top, (cst.FunctionDef, cst.ClassDef))
        }
        return True

    def _calls_the_scripts_code(self, call: cst.Call) -> bool:
        """Whether ``call`` calls a function or class the script defines (``main()``), which may do
        any work: training, writing files."""
        func = call.func
        return (
            isinstance(func, cst.Name)
            and func.value in self.script_callables
            and not self.facts.name_table.resolve(func.value, ())
        )

    def _hoisted(self, line: cst.SimpleStatementLine) -> tuple[list[cst.SimpleStatementLine], cst.SimpleStatementLine]:
        """``print(f"loss {main():.4f}")`` → ``main_result = main()`` and the print reading
        ``main_result``: what the print's arguments call of the script's own code runs on every
        process, as before; only the printing is kept to the first one."""
        hoister = _ScriptCallHoister(self._calls_the_scripts_code, self._fresh_name)
        printed = cast(cst.SimpleStatementLine, line.visit(hoister))
        assigns = [
            cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], call)])
            for name, call in hoister.hoisted
        ]
        return assigns, printed

    def _fresh_name(self, function: str) -> str:
        """``<function>_result``, numbered past any name the script or an earlier hoist binds."""
        base = name = f"{function}_result"
        number = 1
        while name in self.hoisted_names or self.facts.name_table.is_bound(name, self.scope):
            number += 1
            name = f"{base}_{number}"
        self.hoisted_names.add(name)
        return name

    def _in_helper_class_method(self) -> bool:
        """In a method of a helper class (an ``EarlyStopping`` printing its patience counter),
        which no accelerator reaches: its prints ran once per process."""
        return len(self.scope) >= 2 and self.scope[0] in self.helper_classes

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """A module-level ``print(...)`` that runs before the accelerator exists (``print(config)``
        in the ``__main__`` block before ``main(config)`` creates it) runs on every process: it
        is kept to the first one by the launcher's ``RANK`` (no process group needed yet)."""
        if self._is_console_write(updated_node) and self.accelerator_reachable():
            return self._on_main_process(original_node, updated_node)
        rebound = self._print_rebound(original_node, updated_node)
        if rebound is not None:
            return rebound
        if (
            (self.scope and not self._in_helper_class_method())
            or self.accelerator_reachable()
            or not self._is_plain_print(updated_node)
        ):
            return updated_node
        if self._under_if(mentions_rank):
            return updated_node  # already printed by one process only
        if not self.scope and self.top_level_runs_once:
            return updated_node  # the notebook's kernel: one process, the workers run a function
        if self.facts.name_table.scopes[()].binds("os") and self.facts.imports.get("os") != "os":
            return updated_node  # ``os`` is something else here
        where = "before the accelerator exists"
        if self.scope:
            model = self.scope[0] in self.facts.model_classes
            where = f"in a method of model {self.scope[0]}, built on every process" if model else "in a helper class"
        self.report(
            original_node, Printing.code, f"print {where} → first process only (launcher's RANK)", header_only=True
        )
        self.guarded_prints += 1
        hoisted, printed = self._hoisted(updated_node.with_changes(leading_lines=()))
        guarded = cst.If(
            test=expression(_LAUNCHER_MAIN_PROCESS),
            body=cst.IndentedBlock([printed]),
            leading_lines=() if hoisted else updated_node.leading_lines,
        )
        if not hoisted:
            return guarded
        hoisted[0] = hoisted[0].with_changes(leading_lines=updated_node.leading_lines)
        return cst.FlattenSentinel([*hoisted, guarded])

    def _print_rebound(
        self, original: cst.SimpleStatementLine, line: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | None:
        """``print = misc.logger.info`` → ``print = accelerator.on_main_process(misc.logger.info)``:
        every later ``print(...)`` calls what ``print`` is bound to, which is not the builtin this
        rule makes ``accelerator.print``; wrapped, it runs on the main process only (the others
        return None). So does a name bound to a logging logger's method (``log =
        logging.getLogger(__name__).info``, see :func:`log_functions`). At a module's top level
        where no accelerator is (a library module, or before ``main()`` creates it), the
        launcher's ``RANK`` picks the function on the first process and a function doing nothing
        on the others. None when ``line`` is not such a binding or neither can be done."""
        assign = line.body[0] if len(line.body) == 1 else None
        if (
            not isinstance(assign, cst.Assign)
            or len(assign.targets) != 1
            or not isinstance(assign.targets[0].target, cst.Name)
            or assign.targets[0].target.value not in {"print", *self.facts.of(log_functions)}
        ):
            return None
        value = assign.value
        if is_accelerator_method(value, self.facts, "on_main_process", "on_local_main_process"):
            return None  # already kept to one process
        if self.accelerator_reachable():
            accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
            kept: cst.BaseExpression = cst.Call(
                cst.Attribute(accelerator, cst.Name("on_main_process")), args=[cst.Arg(value)]
            )
            where = "runs on the main process only"
        elif not self.scope and self._os_is_the_module() and not _picks_by_rank(value):
            self.guarded_prints += 1
            kept = cst.IfExp(test=expression(_LAUNCHER_MAIN_PROCESS), body=value, orelse=expression(_DOES_NOTHING))
            where = "runs on the first process only (launcher's RANK)"
        else:
            return None
        name = assign.targets[0].target.value
        self.report(
            original,
            Printing.code,
            f"{name} bound to {dotted(value) or 'another function'} → {where}",
            header_only=True,
        )
        return line.with_changes(body=[assign.with_changes(value=kept)])

    def _os_is_the_module(self) -> bool:
        """Whether ``os`` at the top level is (or can be made) the standard library's module."""
        return not (self.facts.name_table.scopes[()].binds("os") and self.facts.imports.get("os") != "os")

    def _under_if(self, picks: Callable[[cst.BaseExpression], bool]) -> bool:
        """Inside an ``if`` whose test ``picks`` accepts."""
        return any(isinstance(node, cst.If) and picks(node.test) for node in self._anchors)

    def _is_console_write(self, line: cst.SimpleStatementLine) -> bool:
        """``sys.stdout.write(...)`` or ``tqdm.write(...)`` as a statement of its own."""
        if len(line.body) != 1 or not isinstance(line.body[0], cst.Expr):
            return False
        call = line.body[0].value
        return isinstance(call, cst.Call) and self.qualified_name(call.func) in CONSOLE_WRITES

    def _on_main_process(self, original: cst.SimpleStatementLine, line: cst.SimpleStatementLine) -> cst.BaseStatement:
        if self._under_if(mentions_rank):
            return line  # already written by one process only
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        test = cst.Attribute(accelerator, cst.Name("is_main_process"))
        self.report(original, Printing.code, "console write → main process only", header_only=True)
        return cst.If(
            test=test,
            body=cst.IndentedBlock([line.with_changes(leading_lines=())]),
            leading_lines=line.leading_lines,
        )

    def _is_plain_print(self, line: cst.SimpleStatementLine) -> bool:
        if len(line.body) != 1 or not isinstance(line.body[0], cst.Expr):
            return False
        call = line.body[0].value
        return isinstance(call, cst.Call) and self.facts.is_builtin(call.func, "print", self.scope)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if self.facts.is_builtin(func, "print", self.scope):
            # Under the launcher's RANK test this rule put around a print that ran before the
            # accelerator existed, the print already runs once: a second conversion, after a later
            # rule created the accelerator above it, must not print it another way.
            if not self.accelerator_reachable() or self._under_if(_is_launcher_rank_test):
                return updated_node
            if self.writes_per_rank_here():
                # StarGAN's ``print('Saved ... into {}'.format(result_path))`` per batch of a loop
                # whose processes each run their own batches: each prints its own, once.
                return updated_node
            self.report(
                original_node, Printing.code, f"print → {self.accelerator}.print (main process only)", header_only=True
            )
            return updated_node.with_changes(func=cst.Attribute(cst.Name(self.accelerator), cst.Name("print")))
        if self.qualified_name(func) in PROGRESS_BARS and self.accelerator_reachable():
            return self._progress_bar(original_node, updated_node)
        return updated_node

    def _progress_bar(self, original: cst.Call, call: cst.Call) -> cst.Call:
        only_local_main = f"not {self.accelerator}.is_local_main_process"
        existing = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "disable"), None)
        module = cst.Module([])
        if existing is not None:
            current = module.code_for_node(existing.value)
            if f"{self.accelerator}.is_local_main_process" in current:
                return call
            merged = expression(f"{_grouped(existing.value, current)} or {only_local_main}")
            self.report(original, Printing.code, "progress bar shown on the local main process only", header_only=True)
            return call.with_changes(
                args=[arg.with_changes(value=merged) if arg is existing else arg for arg in call.args]
            )
        self.report(original, Printing.code, "progress bar shown on the local main process only", header_only=True)
        args = list(call.args)
        if args and isinstance(args[-1].comma, cst.MaybeSentinel):
            args[-1] = args[-1].with_changes(
                comma=cst.Comma(whitespace_after=self._space_before_new_argument(original))
            )
        new = cst.Arg(
            expression(only_local_main),
            keyword=cst.Name("disable"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        return call.with_changes(args=[*args, new])

    def _space_before_new_argument(self, original: cst.Call) -> cst.BaseParenthesizableWhitespace:
        """A space, or — when the one-line call would grow past LINE_LIMIT — a line break that
        aligns the new argument under the first one, as a person would wrap it."""
        site = self.site(original)
        added = len(f", disable=not {self.accelerator}.is_local_main_process") + 3  # and ``)):``
        if site.line != site.end_line or site.end_column + added <= LINE_LIMIT:
            return cst.SimpleWhitespace(" ")
        opening = site.column + len(cst.Module([]).code_for_node(original.func)) + 1
        return cst.ParenthesizedWhitespace(indent=False, last_line=cst.SimpleWhitespace(" " * opening))


@rule_provider()
def launches_a_function(a: Analysis) -> bool:
    """Whether the module's top level calls ``notebook_launcher`` (a notebook restructured by
    ``--launcher``): the top level is the kernel's one process, and only the function it launches
    runs in every worker, so a print there prints once as written."""
    if "notebook_launcher" not in a.r.words:
        return False
    return any(
        not call.scope and a.r.names.qualified_name(call.node.func, call.scope) in NOTEBOOK_LAUNCHERS
        for call in a.r.calls
    )


@rule_provider(needs=("model_classes", "accessible_functions", "home_kind", "main_function"))
def models_built_on_every_rank(a: Analysis) -> frozenset[str]:
    """Model classes of the script built in code every process runs once converted (the home
    block and the functions the accelerator reaches): a ``print`` in their methods (the
    parameter count in ``__init__``) printed once per process. In a module of a program that is
    not its home, the model classes another module builds where it holds the accelerator."""
    facts = a.facts
    reached = set(facts.accessible_functions) | {facts.home_function}
    library = a.seeds is not None and facts.home_kind == "library"
    built_elsewhere = set(a.seeds.accelerator_reaches) if a.seeds is not None and library else set()
    return frozenset(
        name
        for call in a.r.calls
        for name in [dotted(call.node.func)]
        if name in facts.model_classes and call.function in reached
    ) | (built_elsewhere & set(facts.model_classes))


class _ScriptCallHoister(cst.CSTTransformer):
    """Replaces each outermost call ``hoists`` picks by a fresh name, keeping the calls in order."""

    def __init__(self, hoists: Callable[[cst.Call], bool], fresh_name: Callable[[str], str]) -> None:
        super().__init__()
        self.hoists, self.fresh_name = hoists, fresh_name
        self.hoisted: list[tuple[str, cst.Call]] = []

    def visit_Call(self, node: cst.Call) -> bool:
        return not self.hoists(node)  # what the hoisted call's arguments call goes with it

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not self.hoists(original_node):
            return updated_node
        name = self.fresh_name(cast(cst.Name, original_node.func).value)
        self.hoisted.append((name, updated_node))
        return cst.Name(name)


def _is_helper_class(node: cst.ClassDef, facts: ScriptFacts) -> bool:
    """A class of the script that is no model, dataset or training class (those print what they
    print on purpose, or reach the accelerator)."""
    name = node.name.value
    datasets = any((dotted(base.value) or "").endswith(("Dataset", "Module")) for base in node.bases)
    trains = name in facts.training_classes or name in facts.training_bases or name in facts.backward_functions
    return not datasets and name not in facts.model_classes and not trains


#: ``logging`` levels below WARNING, as a script names them: their records are progress chatter.
_CHATTY_LEVELS = {"logging.DEBUG": "DEBUG", "logging.INFO": "INFO"}
#: The launcher's rank test, for code that runs where no accelerator is reachable.
_LAUNCHER_MAIN_PROCESS = 'int(os.environ.get("RANK", "0")) == 0'
#: What a logging function rebound on the first process only is on the others.
_DOES_NOTHING = "(lambda *args, **kwargs: None)"
#: The methods of a ``logging`` logger (and the functions of the module) that emit a record.
_LOGGING_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})


def _picks_by_rank(value: cst.BaseExpression) -> bool:
    """``... if int(os.environ.get("RANK", "0")) == 0 else ...``: already rebound per process."""
    return isinstance(value, cst.IfExp) and _is_launcher_rank_test(value.test)


class _LoggingLevel(RuleTransformer):
    """``logging.basicConfig(..., level=logging.INFO)`` → ``level=logging.INFO if <main process>
    else logging.WARNING``."""

    def __init__(self, facts: ScriptFacts) -> None:
        sites = [*facts.call_sites.get("logging.basicConfig", ()), *facts.call_sites.get(".setLevel", ())]
        super().__init__(facts, lines_of(sites))
        #: Levels chosen by the launcher's ``RANK`` (they need ``import os``).
        self.by_rank = 0

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        index = self._level_argument(original_node)
        if index is None:
            return updated_node
        arg = updated_node.args[index]
        quieter = self._warning_like(arg.value)
        if quieter is None:
            return updated_node
        main = self._main_process()
        if main is None:
            return updated_node
        value = cst.IfExp(test=main, body=arg.value, orelse=quieter)
        self.report(
            original_node,
            Printing.code,
            "logging at this level on the main process only (the others log warnings and errors)",
            header_only=True,
        )
        args = list(updated_node.args)
        args[index] = arg.with_changes(value=value)
        return updated_node.with_changes(args=args)

    def _level_argument(self, call: cst.Call) -> int | None:
        """Where the level is: ``level=`` of ``logging.basicConfig(...)``, or the one argument of
        ``logger.setLevel(...)`` on a logger of ``logging.getLogger(...)`` (a name bound only to
        one, or the call itself: ``logging.getLogger().setLevel(logging.INFO)``)."""
        if self.qualified_name(call.func) == "logging.basicConfig":
            return next(
                (i for i, arg in enumerate(call.args) if arg.keyword is not None and arg.keyword.value == "level"),
                None,
            )
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "setLevel" or len(call.args) != 1:
            return None
        owner = func.value
        held = self.facts.of(loggers)
        logger = (isinstance(owner, cst.Call) and self.qualified_name(owner.func) == "logging.getLogger") or is_logger(
            held, self.facts.name_table, tuple(self.scope), dotted(owner)
        )
        return 0 if logger and not call.args[0].star else None

    def _warning_like(self, level: cst.BaseExpression) -> cst.BaseExpression | None:
        """``WARNING`` written the way ``level`` is (``logging.WARNING``, ``"WARNING"``, ``30``);
        None for a level that is not DEBUG or INFO (or not a plain one)."""
        if isinstance(level, (cst.Attribute, cst.Name)) and self.qualified_name(level) in _CHATTY_LEVELS:
            if isinstance(level, cst.Attribute):
                return level.with_changes(attr=cst.Name("WARNING"))
            return None  # ``from logging import INFO``: WARNING may not be imported
        if isinstance(level, cst.SimpleString) and level.evaluated_value in ("DEBUG", "INFO"):
            return cst.SimpleString(f"{level.prefix}{level.quote}WARNING{level.quote}")
        if isinstance(level, cst.Integer) and level.evaluated_value in (10, 20):
            return cst.Integer("30")
        return None

    def _main_process(self) -> cst.BaseExpression | None:
        instance = self.instance_accelerator()
        if instance is not None:
            return cst.Attribute(instance, cst.Name("is_main_process"))
        if self.accelerator_reachable():
            return cst.Attribute(cst.Name(self.accelerator), cst.Name("is_main_process"))
        if self.facts.name_table.scopes[()].binds("os") and self.facts.imports.get("os") != "os":
            return None  # ``os`` is something else here
        self.by_rank += 1
        return expression(_LAUNCHER_MAIN_PROCESS)


def _is_launcher_rank_test(test: cst.BaseExpression) -> bool:
    """The test this rule writes around an early print: ``int(os.environ.get("RANK", "0")) == 0``."""
    return isinstance(test, cst.Comparison) and test.deep_equals(_launcher_test())


@cache
def _launcher_test() -> cst.BaseExpression:
    return expression(_LAUNCHER_MAIN_PROCESS)


def _grouped(node: cst.BaseExpression, code: str) -> str:
    """Parenthesize an existing ``disable=`` value that is not a simple operand of ``or``."""
    simple = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.UnaryOperation, cst.Comparison)
    return code if isinstance(node, simple) else f"({code})"


@rule_provider()
def loggers(a: Analysis) -> frozenset[tuple[ScopeKey, str]]:
    """(scope binding it, name) of the variables every assignment of which is
    ``logging.getLogger(...)`` (an attribute, ``self.logger``, by the module's scope, ``()``):
    their ``setLevel`` sets the level of a logger. By scope: a helper's ``logger =
    logging.getLogger("train")`` configured there is a logger even where ``main()`` binds its own
    ``logger`` to what the helper returns (:func:`is_logger`)."""
    if "getLogger" not in a.r.words:
        return frozenset()
    bound: dict[tuple[ScopeKey, str], bool] = {}
    for assign in a.r.assigns:
        value = assign.value
        from_get_logger = isinstance(value, cst.Call) and (
            a.r.names.qualified_name(value.func, assign.scope) == "logging.getLogger"
        )
        for target in assign.targets:
            key = ((), target) if "." in target else (assign.scope, target)
            bound[key] = bound.get(key, True) and from_get_logger
    return frozenset(key for key, only_loggers in bound.items() if only_loggers)


def is_logger(held: AbstractSet[tuple[ScopeKey, str]], names: NameTable, scope: ScopeKey, name: str | None) -> bool:
    """Whether ``name``, read in ``scope``, is one of the loggers ``held`` (:func:`loggers`): by
    the scope whose binding it reads."""
    if name is None:
        return False
    if "." in name:
        return ((), name) in held
    return (names.binding_scope(name, scope) or (), name) in held


@rule_provider(needs=(loggers.name,))
def log_functions(a: Analysis) -> frozenset[str]:
    """Names bound to a function emitting a ``logging`` record: a logger's method (``log =
    logging.getLogger(__name__).info``, ``log = logger.info`` of ``logger = logging.getLogger(...)``)
    or the module's own (``log = logging.info``). Calling one logs on every rank, as ``print``
    printed; ``print`` itself rebound is matched by its name (see ``_Printing._print_rebound``)."""
    if "logging" not in a.r.words and "getLogger" not in a.r.words:
        return frozenset()
    held = cast(frozenset[tuple[ScopeKey, str]], a.rule_results[loggers.name])
    found: set[str] = set()
    for assign in a.r.assigns:
        value = assign.value
        if isinstance(value, cst.Attribute) and value.attr.value in _LOGGING_METHODS:
            owner = value.value
            named = a.r.names.qualified_name(value, assign.scope)
            from_logger = isinstance(owner, cst.Call) and a.r.names.qualified_name(owner.func, assign.scope) == (
                "logging.getLogger"
            )
            logger = is_logger(held, a.r.names, assign.scope, dotted(owner))
            if from_logger or logger or named == f"logging.{value.attr.value}":
                found.update(target for target in assign.targets if target != "print")
    return frozenset(found)


@rule_provider(needs=(log_functions.name,))
def output_rebound_at_top_level(a: Analysis) -> bool:
    """Whether the module binds ``print``, or a name to a logging function (:func:`log_functions`),
    at its top level (pytorch-playground's ``utee/misc.py``: ``print = logger.info``)."""
    if "print" not in a.r.words and not a.rule_results[log_functions.name]:
        return False
    bound = {"print", *cast(frozenset[str], a.rule_results[log_functions.name])}
    return any(not assign.scope and bound.intersection(assign.targets) for assign in a.r.assigns)


def rebinds_output_at_top_level(facts: ScriptFacts) -> bool:
    """The one answer to whether a module's top level rebinds what it prints or logs through
    (see :func:`output_rebound_at_top_level`): every process importing it would print each line,
    so such a module of a program is converted even when it uses no torch and no accelerator
    reaches it, the binding kept to the first process by the launcher's ``RANK``."""
    return facts.of(output_rebound_at_top_level)


class Printing(Rule):
    code = "ACC107"
    name = "print-progress"
    providers = (loggers, log_functions, output_rebound_at_top_level, models_built_on_every_rank, launches_a_function)
    examples = (
        # print rebound at the top level, before main() creates the accelerator: the launcher's RANK
        # keeps the logger's function on the first process, the others get one doing nothing.
        Example(
            before="""
                import logging

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                logger = logging.getLogger("train")
                print = logger.info


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()
                    print("trained")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import logging
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                logger = logging.getLogger("train")
                print = logger.info if int(os.environ.get("RANK", "0")) == 0 else (lambda *args, **kwargs: None)


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()
                    print("trained")


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A notebook launching its training function: the kernel's top level is one process, so
        # its prints stay as written; the function's print runs in every worker.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator, notebook_launcher
                from torch.utils.data import DataLoader, TensorDataset

                print("setting up")


                def training_function():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()
                    print("trained")


                notebook_launcher(training_function, num_processes=2)
                print("launched")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator, notebook_launcher
                from torch.utils.data import DataLoader, TensorDataset

                print("setting up")


                def training_function():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()
                    accelerator.print("trained")


                notebook_launcher(training_function, num_processes=2)
                print("launched")
            """,
        ),
        # A model built in the function creating the accelerator prints its parameter count in
        # ``__init__``: once per process, so kept to the first one by the launcher's RANK.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Net(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.fc = nn.Linear(8, 1)
                        print(f"{sum(p.numel() for p in self.parameters())} parameters")

                    def forward(self, x):
                        return self.fc(x)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = Net()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Net(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.fc = nn.Linear(8, 1)
                        if int(os.environ.get("RANK", "0")) == 0:
                            print(f"{sum(p.numel() for p in self.parameters())} parameters")

                    def forward(self, x):
                        return self.fc(x)


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = Net()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # ``print`` rebound to a logger (pytorch-playground's ``print = misc.logger.info``): the
        # calls are the logger's, kept to the main process where ``print`` is bound.
        Example(
            before="""
                import argparse
                import logging

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--epochs", type=int, default=2)
                args = parser.parse_args()
                logger = logging.getLogger("train")
                print = logger.warning

                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(args.epochs):
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    print("epoch {} loss {:.4f}".format(epoch, loss.item()))
            """,
            after="""
                import argparse
                import logging

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--epochs", type=int, default=2)
                args = parser.parse_args()
                accelerator = Accelerator()
                accelerator.agree_random_state()
                logger = logging.getLogger("train")
                print = accelerator.on_main_process(logger.warning)

                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for epoch in range(args.epochs):
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    print("epoch {} loss {:.4f}".format(epoch, loss.item()))
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset
                from tqdm import tqdm


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(3):
                        for data, target in tqdm(loader, desc="train"):
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        print(f"epoch {epoch}: loss {loss.item():.4f}")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                from tqdm import tqdm


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(3):
                        for data, target in tqdm(loader, desc="train",
                                                 disable=not accelerator.is_local_main_process):
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        accelerator.print(f"epoch {epoch}: loss {loss.item():.4f}")


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A print this rule kept to the first process by the launcher's RANK (it ran before the
        # accelerator existed when the script was first converted): converted again, it stays.
        Example(
            leaves_alone=True,
            before="""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                accelerator = Accelerator()
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                if int(os.environ.get("RANK", "0")) == 0:
                    print("Collecting experience...")
                for data, target in loader:
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(data), target)
                    accelerator.backward(loss)
                    optimizer.step()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # A library module's model class built where the accelerator is held prints through
        # the launcher's RANK: that module has no accelerator of its own.
        library_models = facts.home_kind == "library" and bool(facts.of(models_built_on_every_rank))
        # So does a module binding print or a name to a logging function at its top level.
        if facts.assign_sites.get("print") or facts.of(log_functions):
            return True
        return (facts.has_accelerator or library_models) and (
            bool(facts.called & {"print", "logging.basicConfig", *PROGRESS_BARS, *CONSOLE_WRITES})
            or ".setLevel" in facts.call_sites
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _Printing(
            facts, facts.existing_accelerator or facts.accelerator_name, top_level_runs_once=options.top_level_runs_once
        )
        converted = module.visit(transformer)
        changes = transformer.changes(module)
        by_rank = transformer.guarded_prints
        if "logging.basicConfig" in facts.call_sites or (facts.of(loggers) and ".setLevel" in facts.call_sites):
            levels = _LoggingLevel(facts)
            walked = converted
            converted = walked.visit(levels)
            by_rank += levels.by_rank
            changes = [*changes, *levels.changes(walked)]
        if by_rank and not imports_module(converted, "os"):
            converted = add_import(
                converted, cast(cst.SimpleStatementLine, statement("import os")), options.import_style
            )
        return converted, changes
