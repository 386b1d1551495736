"""ACC101 accelerator: import ``Accelerator`` and create one accelerator, early.

The accelerator sets up the process group and picks the device, so it is created before anything
uses the device: at the top of the function that builds the model and optimizer (right after the
command line is parsed, when that happens there), or — for scripts without such a function — after
argument parsing in the ``__main__`` block or module. Never at import time of a module that
DataLoader workers re-import: a module-level script without a ``__main__`` guard gets it just before
the first statement that needs it (a training object, a backward, a dataset download run on the
main process first, the construction of a training class that is handed it, a random draw no
seed makes agree), not among its imports. A script that already creates one is left alone.

A rewrite that would make the converted program read a name before binding it, or call a changed
function without its new argument (also a function used as a value, such as a callback, where the
value cannot carry it as ``functools.partial(f, accelerator=accelerator)``: ACC104), is left
out, or the whole file left as written, and reported (ACC937); where the accelerator would be
created below its first use, its creation is moved up instead where it can be.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imports import with_accelerate_import
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    as_statement,
    assigned_in,
    dotted,
    first_statement_index,
    parses_arguments,
    statement,
)
from accel_convert.codemods.engine.transformers import HomeBlockTransformer
from accel_convert.codemods.engine.walk import variables_read
from accel_convert.codemods.model.locality import statement_downloads
from accel_convert.codemods.model.plan import plan_of
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.recorder import IfRecord
from accel_convert.codemods.model.state import Analysis


@rule_provider(needs=("device_names", "cuda_flags"))
def device_switches(a: Analysis) -> tuple[tuple[str, bool], ...]:
    """The flags the device choice tests, in source order, and whether each is under ``not``:
    ``use_cuda = not args.no_cuda and ...`` gives ``("args.no_cuda", True)``; ``if args.cuda:
    model.cuda()`` gives ``("args.cuda", False)`` (read by :func:`cpu_flag`)."""
    facts = a.facts
    device = facts.device_names | facts.cuda_flags
    found: list[tuple[str, bool]] = []
    for record in a.r.assigns_and_ifs:
        if isinstance(record, IfRecord):
            # ``if not args.disable_cuda and torch.cuda.is_available(): args.device = ...``
            if record.body_moves_to_cuda or record.body_assigns & facts.device_names:
                _read_switch(record.node.test, False, found)
            continue
        value = record.value
        # ``device = get_device(args.gpu)``: what a function of the file is given is no switch.
        helper = isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in a.r.defs
        if set(record.targets) & device and not helper:
            _read_switch(value, False, found)
    return tuple(found)


def _read_switch(node: cst.CSTNode, negated: bool, found: list[tuple[str, bool]]) -> None:
    """The flags (``args.no_cuda``) a device decision tests, and whether each is under ``not``."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        _read_switch(node.expression, not negated, found)
    elif isinstance(node, cst.Attribute) and dotted(node) is not None:
        found.append((dotted(node), negated))  # type: ignore[arg-type]
    elif isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
        _read_switch(node.left, negated, found)
        _read_switch(node.right, negated, found)
    elif isinstance(node, cst.IfExp):
        _read_switch(node.test, negated, found)
    elif isinstance(node, cst.Call):
        for arg in node.args:  # torch.device("cuda" if args.cuda else "cpu")
            _read_switch(arg.value, negated, found)


@rule_provider(needs=("argument_parsing_functions",))
def argument_parsing_functions(a: Analysis) -> frozenset[str]:
    """Module-level functions returning the parse result (``def get_args(): ... return
    parser.parse_args()``): a call of one parses the command line, and reaches nothing that
    needs the accelerator (the model's ``arguments`` provider finds them)."""
    return frozenset(a.argument_parsing_functions)


@rule_provider(needs=("batch_size_expr", "parser_options", "parsed_arguments"))
def loader_batch_size(a: Analysis) -> int | None:
    """The batch size the training loader is built with, where the converter can read it: an
    integer literal (``batch_size=64``) or the integer default of the parser option it reads
    (``batch_size=args.batch_size`` with ``add_argument("--batch-size", type=int, default=64)``).
    The summary of a conversion says what it comes to on several processes."""
    expression = a.facts.batch_size_expr
    if expression is None:
        return None
    literal = _integer(cst.parse_expression(expression))
    if literal is not None:
        return literal
    root, _, option = expression.partition(".")
    if root not in a.facts.parsed_arguments or option not in a.facts.parser_options:
        return None
    defaults = [_option_default(call.node, option) for call in a.r.calls]
    found = {default for default in defaults if default is not None}
    return found.pop() if len(found) == 1 else None


def _option_default(call: cst.Call, option: str) -> int | None:
    """The integer ``default=`` of ``parser.add_argument("--<option>", ...)``, if it is one."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
        return None
    names = [arg.value.evaluated_value for arg in call.args if isinstance(arg.value, cst.SimpleString)]
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    dest = keywords.get("dest")
    spelled = [dest.evaluated_value] if isinstance(dest, cst.SimpleString) else names
    if not any(isinstance(name, str) and name.lstrip("-").replace("-", "_") == option for name in spelled):
        return None
    default = keywords.get("default")
    return _integer(default) if default is not None else None


def _integer(node: cst.BaseExpression) -> int | None:
    return int(node.value, 0) if isinstance(node, cst.Integer) else None


#: What ``--fsdp`` passes (the same for both targets: Accelerate's plugin defaults to FSDP1, the
#: runtime runs FSDP2 either way); the wrap policy and the rest come from the launcher's FSDP_*.
FSDP_PLUGIN = "FullyShardedDataParallelPlugin(fsdp_version=2)"


def split_batches_argument(options: Options) -> str | None:
    """What ``--split-batches`` passes: ``split_batches=True`` to the runtime, which honours it;
    Accelerate (since 1.0) ignores that argument and reads it from its data loader
    configuration only."""
    if not options.split_batches:
        return None
    if options.target == "accelerate":
        return "dataloader_config=DataLoaderConfiguration(split_batches=True)"
    return "split_batches=True"


class _CreateAccelerator(HomeBlockTransformer):
    def __init__(self, facts: ScriptFacts, cpu_flag: str | None, options: Options) -> None:
        super().__init__(facts)
        self.cpu_flag = cpu_flag
        self.fsdp = options.fsdp
        self.split_batches = split_batches_argument(options)

    @property
    def home_names(self) -> set[str | None]:
        plan = plan_of(self.facts)
        return {plan.creating_function or plan.home_function}

    def edit_home(self, body: list[cst.BaseStatement], anchor: cst.CSTNode) -> list[cst.BaseStatement]:
        index = creation_index(body, self.facts, at_top=self.facts.home_kind == "function")
        if self.cpu_flag:
            # ``cpu=args.no_cuda`` reads what argument parsing binds: never before it (a default
            # device chosen before the parser runs would otherwise pull the creation up).
            needed = variables_read(cst.parse_expression(self.cpu_flag))
            bound = [i + 1 for i in range(index, len(body)) if assigned_in(body[i]) & needed]
            if bound:
                index = bound[0]
        anchor_node = body[index] if index < len(body) else anchor
        arguments = ", ".join(
            [
                *([f"cpu={self.cpu_flag}"] if self.cpu_flag else []),
                *([f"fsdp_plugin={FSDP_PLUGIN}"] if self.fsdp else []),
                *([self.split_batches] if self.split_batches else []),
            ]
        )
        created = statement(f"{self.accelerator} = Accelerator({arguments})")
        self.report(
            anchor_node if index < len(body) else anchor,
            Accelerator.code,
            f"create the accelerator: {self.accelerator} = Accelerator({arguments})",
            header_only=True,
        )
        after_definition = 0 < index < len(body) and isinstance(body[index - 1], (cst.FunctionDef, cst.ClassDef))
        following = as_statement(body[index]) if after_definition else None
        blank = 0
        while following is not None and blank < len(following.leading_lines):
            if following.leading_lines[blank].comment is not None:
                break
            blank += 1
        if following is not None and blank:
            # Right after a ``def``: the blank lines that separate it from the module's code go
            # above the creation (a comment stays with the statement it describes).
            created = created.with_changes(leading_lines=following.leading_lines[:blank])
            rest = following.with_changes(leading_lines=following.leading_lines[blank:])
            return [*body[:index], created, rest, *body[index + 1 :]]
        return [*body[:index], created, *body[index:]]


def creation_index(body: list[cst.BaseStatement], facts: ScriptFacts, *, at_top: bool) -> int:
    """Right after argument parsing, but before the first statement that binds the device or a
    training object, holds a backward, downloads a dataset, constructs a training class or draws
    at random before any seed (ACC124 agrees the generators right after the creation); a
    function with no argument parsing gets it at its top."""
    start = first_statement_index(body)
    plan = plan_of(facts)
    # What the plan says must come after the creation: a backward (a module-level script with no
    # training object the analysis could name must not get it after its first use), a training
    # class's construction (ACC108), a draw the processes agree on (ACC124), a call reaching it.
    users = plan.created_before_binding
    reading_lines = list(plan.created_before_lines)
    first_use = next(
        (
            i
            for i in range(start, len(body))
            if assigned_in(body[i]) & users
            # A definition's calls run when it is called (a recursive ``to_device``), not here.
            or (
                not isinstance(body[i], (cst.FunctionDef, cst.ClassDef))
                and _holds_any_line(body[i], reading_lines, facts)
            )
            # A dataset download runs on the main process first (ACC115), through the accelerator.
            or statement_downloads(body[i], facts)
        ),
        len(body),
    )
    parsed = [i + 1 for i in range(start, first_use) if parses_arguments(body[i], facts.of(argument_parsing_functions))]
    if parsed:
        return parsed[-1]
    return start if at_top else first_use


class Accelerator(Rule):
    code = "ACC101"
    name = "accelerator"
    fixes = {
        "ACC937": (
            "Bind the name the rewrite needs before its first use: move ``accelerator = Accelerator()`` (or the definition the message names) above the reported line, or pass the new argument to the function used as a callback; then convert again so the rewrite that was left out is applied."
        ),
    }
    providers = (device_switches, argument_parsing_functions, loader_batch_size)
    extra_codes = {
        # Reported by the converter's last check (converter/guard.py), which this rule's promise
        # of an accelerator created before it is used rests on.
        "ACC937": "rewrite-left-out: a rewrite left out (or the whole file left as written) because with it the "
        "converted program would read a name before binding it, or call a changed function without its "
        "new argument (also a function used as a value, such as a callback, that some call would miss); the "
        "accelerator created below its first use is moved up instead where it can be",
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
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


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
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
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
            code="ACC937",
            # The logger prints on every rank once printing is main-process only, through the
            # accelerator: constructed above the line that parses what the accelerator needs
            # (--no-cuda), it would run before any accelerator could exist.
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Logger:
                    def __init__(self, name):
                        self.name = name
                        self.log("start")

                    def log(self, text):
                        print(f"[{self.name}] {text}")


                logger = Logger("run")
                parser = argparse.ArgumentParser()
                parser.add_argument("--no-cuda", action="store_true")
                args = parser.parse_args()
                device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(data), target)
                    loss.backward()
                    optimizer.step()
                    logger.log(f"loss {loss.item():.3f}")
            """,
            message="ACC107 print-progress left out here: with it, 'accelerator' would be read in Logger.log before it is bound",
        ),
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            leaves_alone=True,
        ),
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Logger:
                    def __init__(self, name):
                        self.name = name

                    def log(self, text):
                        print(f"[{self.name}] {text}")


                logger = Logger("run")
                parser = argparse.ArgumentParser()
                parser.add_argument("--no-cuda", action="store_true")
                args = parser.parse_args()
                device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(data), target)
                    loss.backward()
                    optimizer.step()
                    logger.log(f"loss {loss.item():.3f}")
            """,
            code="ACC937",
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # A library of a program gets the accelerator from its entry script, never its own.
        return plan_of(facts).creates_accelerator

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        transformer = _CreateAccelerator(facts, cpu_flag(facts), options)
        converted = module.visit(transformer)
        names = ["Accelerator", *(["FullyShardedDataParallelPlugin"] if options.fsdp else [])]
        if options.split_batches and options.target == "accelerate":
            names.append("DataLoaderConfiguration")
        for name in names:
            with_import = with_accelerate_import(converted, options, name)
            if with_import is not converted:
                facts.origins.carry(converted, with_import)
                converted = with_import
        return converted, transformer.changes(module)


#: Words that make a command-line flag a "use the GPU" switch (``--no-cuda``, ``--accel``).
_GPU_WORDS = ("cuda", "gpu", "accel")


def cpu_flag(facts: ScriptFacts) -> str | None:
    """The ``cpu=`` argument that keeps the script's own switch between GPU and CPU.

    ``use_cuda = not args.no_cuda and torch.cuda.is_available()`` gives ``args.no_cuda``;
    ``device = "cuda" if args.accel and ... else "cpu"`` gives ``not args.accel``;
    ``torch.device(args.device)`` gives ``args.device == "cpu"``. Without it a
    script that trains on the CPU unless asked would take the GPU after the conversion. The
    analysis read the switches (:func:`device_switches`) and the parser's options.
    """
    if not facts.parsed_arguments:
        return None
    terms = []
    for flag, negated in dict.fromkeys(facts.of(device_switches)):
        root = flag.partition(".")[0]
        # Only a flag the parser defines: one the script sets itself (``args.cuda = not
        # args.no_cuda and ...``) does not exist yet where the accelerator is created.
        name = flag.rpartition(".")[2]
        if root not in facts.parsed_arguments or name not in facts.parser_options:
            continue
        # ``torch.device(f"cuda:{args.gpu}")``: an ``int`` option names which GPU, not whether
        # (``--gpu 0`` is GPU 0; read as a switch it would put the script on the CPU).
        if flag in facts.gpu_index_values:
            continue
        if any(word in name for word in _GPU_WORDS):
            terms.append(flag if negated else f"not {flag}")
        elif "device" in name and not negated:
            # ``--device cpu`` read whole (``torch.device(args.device)``): a device string.
            terms.append(f'{flag} == "cpu"')
    return " or ".join(dict.fromkeys(terms)) or None


def _holds_any_line(statement: cst.BaseStatement, lines: list[int], facts: ScriptFacts) -> bool:
    site = facts.origins.site(statement)
    return site is not None and any(site.line <= line <= site.end_line for line in lines)
