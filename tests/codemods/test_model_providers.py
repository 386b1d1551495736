"""The program model's providers (``codemods/model/``): their order is checked, not hand-kept.

Each provider declares the facts it needs, provides and refines; ``check_order`` refuses an order in
which one needs what no earlier one provides. The declarations are only worth something if they are
true, so the last test runs the analysis on every fixture with each provider watched, and refuses a
provider that touches a fact it did not declare.
"""

from __future__ import annotations

import textwrap
from dataclasses import FrozenInstanceError, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import FactsDraft, ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.codemods.engine.registry import rule_providers
from accel_convert.codemods.model import runner
from accel_convert.codemods.model.plan import plan_of
from accel_convert.codemods.model.provider import (
    WORKING_FACTS,
    Provider,
    ProviderOrderError,
    check_order,
    provider,
    rule_provider,
)
from accel_convert.codemods.model.state import Analysis
from accel_convert.codemods.rewrites import printing

CASES = sorted((Path(__file__).parents[2] / "fixtures" / "cases").glob("*.py"))


def _nothing(analysis: Analysis) -> None:
    return None


def declared(name: str, needs: tuple[str, ...] = (), provides: tuple[str, ...] = ()) -> Provider:
    return Provider(name, _nothing, frozenset(needs), frozenset(provides))


def test_the_models_order_is_accepted() -> None:
    check_order(runner.PROVIDERS, runner.KNOWN_FACTS, given=runner.GIVEN)


def test_a_provider_needing_what_only_a_later_one_provides_is_refused() -> None:
    order = [declared("loops", needs=("models",)), declared("roles", provides=("models",))]
    with pytest.raises(ProviderOrderError, match="loops needs models, which no provider before it provides"):
        check_order(order, {"models"})
    check_order(order[::-1], {"models"})


def test_moving_a_real_provider_before_what_it_needs_is_refused() -> None:
    moved = [step for step in runner.PROVIDERS if step is not runner.loops.loops]
    moved.insert(moved.index(runner.roles.optimizers_and_models), runner.loops.loops)
    with pytest.raises(ProviderOrderError, match="loops needs .*models"):
        check_order(moved, runner.KNOWN_FACTS, given=runner.GIVEN)


def test_refining_what_nobody_provided_is_refused() -> None:
    @provider(refines=("models",))
    def flow(analysis: Analysis) -> None:
        return None

    with pytest.raises(ProviderOrderError, match="flow needs models"):
        check_order([flow], {"models"})


def test_a_fact_provided_twice_or_unknown_is_refused() -> None:
    with pytest.raises(ProviderOrderError, match="provides what an earlier provider provides: models"):
        check_order([declared("a", provides=("models",)), declared("b", provides=("models",))], {"models"})
    with pytest.raises(ProviderOrderError, match="do not exist: modles"):
        check_order([declared("a", provides=("modles",))], {"models"})


def test_the_rules_own_providers_run_after_the_models_in_a_checked_order() -> None:
    steps = runner.rule_steps(rule_providers())
    assert len(steps) >= 8, "the rules declare their providers elsewhere: this test would check little"
    check_order((*runner.PROVIDERS, *steps), runner.KNOWN_FACTS | {step.name for step in steps}, given=runner.GIVEN)
    # A rule's provider needing what no provider provides is refused like any other.
    wrong = rule_provider(needs=("modles",))(_nothing)
    with pytest.raises(ProviderOrderError, match="do not exist: modles"):
        check_order((*runner.PROVIDERS, wrong.step()), runner.KNOWN_FACTS | {wrong.name}, given=runner.GIVEN)


def test_a_rules_facts_are_read_through_its_provider() -> None:
    source = "import logging\nimport torch\nlog = logging.getLogger(__name__)\nother = logging.getLogger()\nother = 1\n"
    facts = analyse(cst.parse_module(source), source)
    # By the scope binding it (the module's): ``other`` is bound to something else too.
    assert facts.of(printing.loggers) == frozenset({((), "log")})
    assert not hasattr(facts, "loggers")  # the shared facts do not hold it
    with pytest.raises(ValueError, match="no accel_convert.codemods.rewrites.printing.loggers"):
        ScriptFacts().of(printing.loggers)  # facts built by hand have none


def test_the_facts_are_frozen_once_drawn_but_the_run_context_is_not() -> None:
    source = textwrap.dedent(PROGRAM["train"])
    facts = analyse(cst.parse_module(source), source)
    untyped: Any = facts  # what a caller without types might try
    with pytest.raises(FrozenInstanceError):
        untyped.main_function = "other"
    assert facts.models == frozenset({"model"}) and isinstance(facts.models, frozenset)
    assert isinstance(facts.train_loops, tuple) and isinstance(facts.call_sites, MappingProxyType)
    assert all(isinstance(sites, tuple) for sites in facts.call_sites.values())
    with pytest.raises(AttributeError):
        untyped.models.add("other")
    facts.context.changed_lines.add(12)  # what the conversion loop writes while the rules run
    assert facts.changed_lines == {12}


def test_every_fact_the_analysis_draws_has_a_provider() -> None:
    provided = {fact for step in runner.PROVIDERS for fact in step.provides} | runner.GIVEN
    assert {field.name for field in fields(ScriptFacts)} | WORKING_FACTS <= provided


# -- the declarations are true -----------------------------------------------------------------

#: ScriptFacts fields and working facts touched by the provider now running.
_touched: set[str] = set()
_FIELDS = frozenset(field.name for field in fields(ScriptFacts))


class _WatchedFacts(FactsDraft):
    def __getattribute__(self, name: str) -> object:
        if name in _FIELDS:
            _touched.add(name)
        return super().__getattribute__(name)


class _WatchedAnalysis(Analysis):
    def __getattribute__(self, name: str) -> object:
        if name in WORKING_FACTS:
            _touched.add(name)
        return super().__getattribute__(name)


def _watched_record(module: cst.Module, source: str | bytes | None = None, seeds: object = None) -> Analysis:
    analysis = _record(module, source, seeds)  # type: ignore[arg-type]
    analysis.facts.__class__ = _WatchedFacts
    analysis.__class__ = _WatchedAnalysis
    return analysis


_record = runner.record

PROGRAM = {
    "engine": """
        import torch

        def train_one_epoch(model, loader, optimizer, device):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()

        @torch.no_grad()
        def evaluate(model, loader):
            total = 0.0
            for x, y in loader:
                total += (model(x) - y).abs().sum().item()
            print(f"error {total:.3f}")
    """,
    "train": """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        import engine

        def main():
            device = "cuda" if torch.cuda.is_available() else "cpu"
            data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
            train_loader = DataLoader(data, batch_size=8, shuffle=True)
            test_loader = DataLoader(data, batch_size=8)
            model = torch.nn.Linear(4, 1).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                engine.train_one_epoch(model, train_loader, optimizer, device)
                engine.evaluate(model, test_loader)

        if __name__ == "__main__":
            main()
    """,
}


def undeclared_touches(
    monkeypatch: pytest.MonkeyPatch, providers: tuple[Provider, ...], sources: list[str]
) -> dict[str, set[str]]:
    """Provider → the facts it touched without declaring them, analysing ``sources``."""
    undeclared: dict[str, set[str]] = {}
    watched = []
    for step in (*providers, *runner.rule_steps(rule_providers())):

        def run(analysis: Analysis, step: Provider = step) -> None:
            _touched.clear()
            step(analysis)
            allowed = step.needs | step.provides | step.refines | runner.GIVEN
            if _touched - allowed:
                undeclared.setdefault(step.name, set()).update(_touched - allowed)

        watched.append(Provider(step.name, run, step.needs, step.provides, step.refines))
    monkeypatch.setattr(runner, "PROVIDERS", tuple(watched))
    monkeypatch.setattr(runner, "rule_steps", lambda rule_providers: ())  # watched above, after the model's
    monkeypatch.setattr(runner, "record", _watched_record)
    for source in sources:
        analyse(cst.parse_module(source), source)
    return undeclared


def test_each_provider_touches_only_the_facts_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(CASES) > 100, "the fixtures moved: this test would check little"
    undeclared = undeclared_touches(monkeypatch, runner.PROVIDERS, [path.read_text(encoding="utf-8") for path in CASES])
    modules = [
        ProgramModule(name, cst.parse_module(textwrap.dedent(text)), textwrap.dedent(text))
        for name, text in PROGRAM.items()
    ]
    outcomes = convert_program(modules, "train", Options())
    assert "accelerator.backward(loss)" in outcomes["engine"].module.code  # the library path ran
    assert undeclared == {}, f"providers touch facts they do not declare: {undeclared}"


def test_a_provider_reading_what_it_does_not_declare_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The print rule's ``models_built_on_every_rank`` reads the model classes, the functions the
    # accelerator reaches and the home block's kind: declared as needing nothing.
    understated = rule_provider()(printing.models_built_on_every_rank.compute)
    monkeypatch.setattr(runner, "rule_steps", lambda rule_providers: (understated.step(),))
    touched = undeclared_touches(monkeypatch, runner.PROVIDERS, [textwrap.dedent(PROGRAM["engine"])])
    assert touched == {understated.name: {"model_classes", "accessible_functions", "home_kind"}}


def test_a_training_method_called_on_a_trainer_instance_starts_the_training() -> None:
    # bentrevett's notebooks: an LRFinder trains the raw model before the epoch loop. Without its
    # call among the training lines, prepare went below it and the model's move was removed, so
    # on a GPU the finder met batches on the device and the model on the CPU.
    source = textwrap.dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class LRFinder:
            def __init__(self, model, optimizer):
                self.model, self.optimizer = model, optimizer

            def range_test(self, loader, steps=4):
                batches = iter(loader)
                for _ in range(steps):
                    x, y = next(batches)
                    self._train_batch(x, y)

            def _train_batch(self, x, y):
                self.optimizer.zero_grad()
                nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()


        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
        lr_finder = LRFinder(model, optimizer)
        lr_finder.range_test(loader)
        model.eval()
        """
    )
    facts = analyse(cst.parse_module(source), source)
    assert "LRFinder" in facts.training_classes
    assert facts.training_method_lines == {source.splitlines().index("lr_finder.range_test(loader)") + 1}
    # Its loop is over a range, not a loader: only the method's backward says it trains.
    assert plan_of(facts).training_start_line == min(facts.training_method_lines)


def test_calls_of_functions_nested_in_a_module_level_function_are_in_the_call_graph() -> None:
    # ``--oom-retry`` moves training into ``inner_training_loop(batch_size)``, which holds its
    # own ``train`` and ``test``: converting that output again, the plan saw no call reaching the
    # backward (its training start was None) and the model built again after training lost its
    # move to the device (an unstable rewrite).
    source = textwrap.dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def train(data):
            print("a module-level train, called from the module")


        def inner_training_loop(batch_size):
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=batch_size)
            model = nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

            def train(data):
                for x, y in data:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()

            def test(data):
                print(len(data))

            def epoch(data):
                train(data)
                test(data)

            for _ in range(2):
                epoch(loader)
            test(loader)
            model = nn.Linear(8, 1)


        inner_training_loop(8)
        train(None)
        """
    )
    facts = analyse(cst.parse_module(source), source)
    line = source.splitlines().index
    # A function of the graph by its path, called by the function whose code calls it: the
    # retried function's body, or a function nested beside it.
    assert {"inner_training_loop.test", "inner_training_loop.epoch"} <= facts.call_graph["inner_training_loop"]
    assert facts.call_graph["inner_training_loop.epoch"] == {"inner_training_loop.train", "inner_training_loop.test"}
    assert {"inner_training_loop.train", "inner_training_loop.epoch"} <= facts.backward_functions
    assert "inner_training_loop.test" not in facts.backward_functions
    assert [site.line for site in facts.call_sites["inner_training_loop.epoch"]] == [line("        epoch(loader)") + 1]
    # The module's own ``train`` is another function: the module's call of it reaches no nested one.
    assert facts.call_graph["<module>"] == {"inner_training_loop", "train"}
    assert plan_of(facts).training_start_line == line("        epoch(loader)") + 1


def test_devices_are_followed_through_parameters_attributes_returns_and_dictionaries() -> None:
    # pytorch/examples' DDP tutorial hands ``device = 0`` to ``Trainer(gpu_id)``, which moves the
    # model and every batch to ``self.gpu_id``: on two processes both would train on GPU 0.
    source = textwrap.dedent(
        """
        import argparse
        import torch


        def get_device(gpu):
            if torch.cuda.is_available():
                return torch.device(f"cuda:{gpu}")
            return torch.device("cpu")


        class Trainer:
            def __init__(self, model, gpu_id, settings, args):
                self.gpu_id = gpu_id
                self.settings = settings
                self.args = args
                self.model = model.to(gpu_id)

            def step(self, x):
                noise = torch.randn(3, device=self.settings["device"])
                return self.model(x.to(self.gpu_id) + noise.to(self.args.gpu))


        def evaluate(model, x, where):
            return model(x.to(where))


        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", type=int, default=0)
        parser.add_argument("--steps", type=int, default=2)
        args = parser.parse_args()
        device = 0
        settings = {"device": torch.device("cuda:0"), "steps": args.steps}
        chosen = get_device(args.gpu)
        cpu = "cpu"
        model = torch.nn.Linear(3, 3)
        trainer = Trainer(model, device, settings, args)
        evaluate(model, torch.randn(3), device)
        evaluate(model, torch.randn(3), cpu)
        x = torch.randn(3).to(args.steps * 0)
        y = torch.randn(3).to(chosen)
        """
    )
    facts = analyse(cst.parse_module(source), source)
    # An integer bound to a name, an ``int`` option and a dictionary's device, through a
    # constructor into attributes (and a part of one: ``self.args.gpu``).
    assert facts.gpu_index_names == {"gpu_id", "self.gpu_id", 'self.settings["device"]', "self.args.gpu"}
    # A helper returning a device on every path chooses the device.
    assert "chosen" in facts.device_names
    # ``where`` is the GPU index from one call and the CPU from the other: reported, not rewritten.
    assert facts.devices_unfollowed == {"where"}


_TESTED_AFTER_TRAINING = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torchvision
    from torch.utils.data import DataLoader, TensorDataset


    class Net(nn.Module):
        def forward(self, x):
            return x


    class SmoothedLoss(nn.Module):
        def forward(self, out, y):
            return (out - y).abs().mean()


    loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 3)), batch_size=4)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = SmoothedLoss()
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    best = Net()
    resnet = torchvision.models.resnet18()
    unused = Net()
    with torch.no_grad():
        for x, y in loader:
            inputs = x.float()
            out = best(inputs)
            print(criterion(out, y).item(), resnet(x).sum().item())
    """
)


def test_a_new_model_called_on_a_batch_is_a_model_to_test_without_eval() -> None:
    # No ``.eval()``, no move: called on a loader's batches, each is a model to test; the
    # criterion, called on what a model returns, and a model never called on a batch are none.
    facts = analyse(cst.parse_module(_TESTED_AFTER_TRAINING), _TESTED_AFTER_TRAINING)
    assert {"best", "resnet"} <= facts.frozen_models
    assert not {"criterion", "unused", "model"} & facts.frozen_models
