"""The conversion plan (``codemods/model/plan.py``): one provider's answers to where the accelerator
is created, what is prepared where and where training starts, for the accelerator at module
level, in ``main()`` and with a training class, and with a loader prepared in another function;
and where each ``prepare`` goes (above the ``__main__`` block, a model only handed in, a wrapped
or rebuilt loader, a class method); each answer is what the converted code then does."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import Options, convert_module
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.model import runner
from accel_convert.codemods.model.plan import ConversionPlan, conversion_plan, creation_index, plan_of, prepared_by


def _planned(source: str) -> tuple[ConversionPlan, str, str]:
    """The plan for ``source``, the source, and its conversion."""
    source = textwrap.dedent(source)
    module = cst.parse_module(source)
    converted = convert_module(module, Options(), source).module.code
    return plan_of(analyse(module, source)), source, converted


def _line(source: str, text: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), 1) if line.strip() == text)


def _prepare_lines(converted: str) -> list[str]:
    return [line.strip() for line in converted.splitlines() if ".prepare(" in line]


def test_the_plan_is_a_provider_of_the_model() -> None:
    assert conversion_plan in runner.PROVIDERS
    assert conversion_plan.provides == {"plan"}


def test_module_level_script() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        """
    )
    assert plan.home_kind == "module" and plan.home == "<module>" and plan.creating_scope == "<module>"
    assert plan.to_prepare == ("model", "optimizer", "loader")
    assert dict(plan.preparations) == {"<module>": ("model", "optimizer", "loader")}
    assert plan.prepared_in("loader") == "<module>"
    assert plan.training_start_line == _line(source, "for x, y in loader:")
    # Created above the first line building a training object, and above the backward.
    assert {"model", "optimizer", "loader"} <= plan.created_before_binding
    assert _line(source, "nn.functional.mse_loss(model(x), y).backward()") in plan.created_before_lines
    # The converted module creates the accelerator at module level and prepares there, above the
    # line where training starts.
    lines = converted.splitlines()
    assert "accelerator = Accelerator()" in lines
    prepare = lines.index("model, optimizer, loader = accelerator.prepare(model, optimizer, loader)")
    assert prepare < lines.index("for x, y in loader:")


def test_main_function_with_a_loader_prepared_in_the_function_that_trains() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def train(model, data):
            loader = DataLoader(data, batch_size=8)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        def main():
            data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
            model = nn.Linear(8, 1)
            train(model, data)


        if __name__ == "__main__":
            main()
        """
    )
    assert plan.home_kind == "function" and plan.home == "main" and plan.creating_scope == "main"
    assert plan.preparing_functions == {"train"}
    assert dict(plan.preparations) == {"train": ("optimizer", "loader"), "main": ("model",)}
    assert plan.prepared_in("loader") == "train" and plan.prepared_in("model") == "main"
    assert plan.training_start_line == _line(source, "train(model, data)")
    # ``train``'s own prepare goes before its loop; ``main`` is handed no model.
    assert set(plan.function_training_lines) == {"train"}
    assert _line(source, "for x, y in loader:") in plan.training_lines_of("train")
    assert plan.training_lines_of("main") == () and dict(plan.received_models) == {"main": ()}
    assert _prepare_lines(converted) == [
        "optimizer, loader = accelerator.prepare(optimizer, loader)",
        "model = accelerator.prepare(model)",
    ]
    converted_module = cst.parse_module(converted)
    main = next(s for s in converted_module.body if isinstance(s, cst.FunctionDef) and s.name.value == "main")
    assert isinstance(main.body, cst.IndentedBlock)
    assert creation_index(main.body.body, _facts_of(converted)) == 0


def test_training_class_built_in_main() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def __init__(self, data):
                self.model = nn.Linear(8, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.loader = DataLoader(data, batch_size=8)

            def fit(self):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    nn.functional.mse_loss(self.model(x), y).backward()
                    self.optimizer.step()


        def main():
            trainer = Trainer(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)))
            trainer.fit()


        if __name__ == "__main__":
            main()
        """
    )
    assert plan.home_kind == "function" and plan.creating_scope == "main"
    assert dict(plan.class_preparations) == {"Trainer": ("self.model", "self.optimizer", "self.loader")}
    assert plan.prepared_in("self.loader") == "Trainer"
    # What ``main`` prepares itself: nothing (the class prepares what it builds).
    assert "main" not in plan.preparations
    # The analysis takes a training class as one unit: building it is where training starts.
    start = _line(source, "trainer = Trainer(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)))")
    assert plan.training_start_line == start and _line(source, "trainer.fit()") in plan.training_lines
    # The class's ``__init__`` ends with the one prepare of what the plan has it prepare.
    trainer = next(s for s in cst.parse_module(converted).body if isinstance(s, cst.ClassDef))
    init = next(s for s in trainer.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__")
    assert isinstance(init.body, cst.IndentedBlock)
    assert prepared_by(init.body.body[-1], _facts_of(converted)) == plan.class_preparations["Trainer"]


def test_the_recognisers_find_the_prepare_line_of_a_training_class() -> None:
    line = cst.parse_statement("self.model, self.loader = self.accelerator.prepare(self.model, self.loader)\n")
    assert prepared_by(line, _facts_of("")) == ("self.model", "self.loader")
    other = cst.parse_statement("self.model, self.loader = self.helper.prepare(self.model, self.loader)\n")
    assert prepared_by(other, _facts_of("")) is None


def test_facts_built_by_hand_get_the_plan_they_decide() -> None:
    facts = ScriptFacts(
        models=frozenset({"net"}),
        optimizers=frozenset({"opt"}),
        train_loaders=frozenset({"dl"}),
        main_function="main",
        home_kind="function",
    )
    plan = plan_of(facts)
    assert plan.creating_scope == "main" and plan.home_blocks == {"main", None}
    assert dict(plan.preparations) == {"main": ("net", "opt", "dl")}


def _facts_of(source: str) -> ScriptFacts:
    return analyse(cst.parse_module(source), source)


def test_training_class_preparing_a_loader_its_method_builds() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def __init__(self):
                self.model = nn.Linear(8, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def fit(self, data):
                loader = DataLoader(data, batch_size=8)
                for x, y in loader:
                    self.optimizer.zero_grad()
                    nn.functional.mse_loss(self.model(x), y).backward()
                    self.optimizer.step()


        def main():
            trainer = Trainer()
            trainer.fit(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)))


        if __name__ == "__main__":
            main()
        """
    )
    assert dict(plan.class_preparations) == {"Trainer": ("self.model", "self.optimizer")}
    assert plan.prepared_in("loader") == "Trainer.fit" and dict(plan.preparations) == {}
    # The placement in a class method: the accelerator is created in ``main``, training starts
    # where ``main`` calls ``fit``, and the loader ``fit`` builds is prepared right where it is built.
    assert plan.creates_accelerator and plan.prepares and plan.creating_scope == "main"
    fit = _line(source, "trainer.fit(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)))")
    assert fit in plan.training_lines_of(None)
    assert _prepare_lines(converted) == [
        "self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)",
        "loader = self.accelerator.prepare(loader)",
    ]


def test_training_without_a_loader_starts_at_its_backward() -> None:
    """No loader: the home block's training is the loop holding its backward, so ``prepare`` goes
    above that loop, not after a model built again later for inference."""
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn

        x, y = torch.randn(64, 8), torch.randn(64, 1)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        model = nn.Linear(8, 1)
        print(model(x).sum().item())
        """
    )
    assert plan.training_lines == ()
    assert plan.backward_lines == (_line(source, "nn.functional.mse_loss(model(x), y).backward()"),)
    lines = [line.strip() for line in converted.splitlines()]
    assert lines.index("model, optimizer = accelerator.prepare(model, optimizer)") < lines.index(
        "for step in range(10):"
    )


# Where each prepare goes: the plan answers from the original program, prepare.py only applies it.


def test_placement_at_module_level_above_the_main_block() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        net = nn.Linear(8, 1)


        def train(model, loader, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        if __name__ == "__main__":
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            train(net, loader, optimizer)
        """
    )
    assert plan.home_kind == "main_guard" and plan.creates_accelerator and plan.prepares
    # ``net`` is built by module code above the block: the block's one prepare takes it too.
    assert plan.built_above_guard == {"net"}
    assert plan.prepared_where_created("<module>") == ("net",)
    assert _line(source, "train(net, loader, optimizer)") in plan.training_lines_of(None)
    lines = [line.strip() for line in converted.splitlines()]
    prepare = lines.index("net, optimizer, loader = accelerator.prepare(net, optimizer, loader)")
    assert lines[prepare - 1].startswith("optimizer = ") and lines[prepare + 1] == "train(net, loader, optimizer)"


def test_placement_in_a_function_handed_its_model() -> None:
    plan, _, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def main(model):
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        if __name__ == "__main__":
            main(nn.Linear(8, 1))
        """
    )
    assert plan.home == "main" and plan.built_above_guard == frozenset()
    # Nothing in the file builds ``model`` but as ``main``'s parameter: ``main`` prepares it.
    assert dict(plan.received_models) == {"main": ("model",)}
    assert _prepare_lines(converted) == ["model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"]


def test_a_module_training_nothing_creates_no_accelerator_and_prepares_nothing() -> None:
    plan, source, converted = _planned(
        """
        import torch.nn as nn


        class Net(nn.Module):
            def forward(self, x):
                return x
        """
    )
    assert not plan.creates_accelerator and not plan.prepares
    assert converted == source


def test_placement_of_a_loader_wrapped_at_module_level() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class DeviceDataLoader:
            def __init__(self, loader, device):
                self.loader, self.device = loader, device

            def __iter__(self):
                for x, y in self.loader:
                    yield x.to(self.device), y.to(self.device)


        device = torch.device("cuda")
        train_dl = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        train_dl = DeviceDataLoader(train_dl, device)
        model = nn.Linear(8, 1).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train_dl:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        """
    )
    # ``prepare`` passes the wrapper through: the loader is prepared right before it is wrapped.
    wrap = _line(source, "train_dl = DeviceDataLoader(train_dl, device)")
    assert dict(plan.loader_wrappings) == {wrap: (("train_dl", "DeviceDataLoader"),)}
    assert {block: dict(lines) for block, lines in plan.prepared_before_wrapping.items()} == {
        "<module>": {wrap: (("train_dl", "DeviceDataLoader"),)}
    }
    lines = [line.strip() for line in converted.splitlines()]
    wrapped = lines.index("train_dl = DeviceDataLoader(train_dl, device)")
    assert lines[wrapped - 1] == "train_dl = accelerator.prepare(train_dl)"


def test_placement_of_a_loader_a_function_builds_again_in_its_training() -> None:
    plan, _, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def main():
            data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
            model = nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(data, batch_size=8)
            for epoch in range(3):
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                loader = DataLoader(data, batch_size=8 * (epoch + 2))


        if __name__ == "__main__":
            main()
        """
    )
    assert {block: set(names) for block, names in plan.rebuilt_loaders.items()} == {"main": {"loader"}}
    assert _prepare_lines(converted) == [
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
        "loader = accelerator.prepare(loader)",
    ]


def test_placement_of_objects_handed_to_training_again() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def train_model(model, loader, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        def main():
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            model = nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            train_model(model, loader, optimizer)
            model_conv = nn.Linear(8, 1)
            optimizer_conv = torch.optim.SGD(model_conv.parameters(), lr=0.1)
            train_model(model_conv, loader, optimizer_conv)


        if __name__ == "__main__":
            main()
        """
    )
    # ``train_model`` trains what it is handed: what ``main`` builds after training began and
    # hands it is prepared right before that call.
    assert dict(plan.handed_for_training) == {"train_model": ("model", "loader", "optimizer")}
    second_call = _line(source, "train_model(model_conv, loader, optimizer_conv)")
    assert {block: dict(found) for block, found in plan.prepared_before_handing.items()} == {
        "main": {second_call: ("model_conv", "optimizer_conv")}
    }
    lines = [line.strip() for line in converted.splitlines()]
    second = lines.index("train_model(model_conv, loader, optimizer_conv, accelerator)")
    assert lines[second - 1] == "model_conv, optimizer_conv = accelerator.prepare(model_conv, optimizer_conv)"


def _line_after(converted: str, text: str) -> str:
    """The line of ``converted`` right after the one reading ``text``."""
    lines = [line.strip() for line in converted.splitlines()]
    return lines[lines.index(text) + 1]


def test_where_the_prepare_goes_at_module_level() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = nn.Linear(8, 1)
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        criterion = nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model = model.to(device)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
        """
    )
    # Each object's last binding before the training starts, as the original has it: the move
    # of ``model`` binds it last (the conversion takes it out: the prepare goes above it).
    assert dict(plan.prepare_after("<module>")) == {
        "model": _line(source, "model = model.to(device)"),
        "loader": _line(
            source, "loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)"
        ),
        "optimizer": _line(source, "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"),
    }
    assert plan.first_built("<module>")["model"] == _line(source, "model = nn.Linear(8, 1)")
    assert _line_after(converted, "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)") == (
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"
    )


def test_where_the_prepare_goes_in_a_function_choosing_its_model() -> None:
    plan, source, converted = _planned(
        """
        import sys

        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                scheduler.step()


        def main(net="small", schedule="none"):
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            if net == "small":
                model = nn.Linear(8, 1)
            else:
                sys.exit(f"unknown network {net}")
            if schedule == "sgd":
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
            train(model, loader)


        if __name__ == "__main__":
            main()
        """
    )
    # The ``if`` whose ``else`` exits binds ``model`` on every path; the loader built again
    # only under a flag is not where the prepare goes (its first binding above is).
    assert dict(plan.prepare_after("main")) == {
        "loader": _line(source, 'if schedule == "sgd":'),
        "model": _line(source, 'if net == "small":'),
    }
    # ``train`` prepares what it builds, after the last of it and before its loop.
    assert dict(plan.prepare_after("train")) == {
        "optimizer": _line(source, "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"),
        "scheduler": _line(source, "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)"),
    }
    assert _line_after(converted, "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)") == (
        "optimizer, scheduler = accelerator.prepare(optimizer, scheduler)"
    )
    lines = [line.strip() for line in converted.splitlines()]
    assert lines[lines.index("train(model, loader, accelerator)") - 1] == (
        "model, loader = accelerator.prepare(model, loader)"
    )


_TRAINER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, optimizer, loader):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader

    def fit(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()


def main():
    model = nn.Linear(8, 1)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(model, optimizer, loader)
    trainer.fit()
    model = nn.Linear(8, 1)


if __name__ == "__main__":
    main()
"""


def test_where_the_prepare_goes_with_a_training_class() -> None:
    plan, source, converted = _planned(_TRAINER)
    # Building the training class is where training starts: the model built again below it is
    # another object, which the prepare does not wait for.
    assert dict(plan.prepare_after("main")) == {
        "model": _line(source, "model = nn.Linear(8, 1)"),
        "loader": _line(
            source, "loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)"
        ),
        "optimizer": _line(source, "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"),
    }
    # The class's ``__init__`` parameters are not objects of their own to prepare.
    assert plan.to_prepare == ("model", "optimizer", "loader")
    assert _line_after(converted, "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)") == (
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"
    )


_REBUILT_BODY = """\
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
torch.save(model.state_dict(), "model.pt")
model = nn.Linear(8, 1)
model.load_state_dict(torch.load("model.pt"))
for x, y in loader:
    print(model(x).sum().item())
model = nn.Linear(8, 1)
print(model(torch.ones(1, 8)))
"""
_HEADER = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"


@pytest.mark.parametrize(
    ("source", "block"),
    [
        (_HEADER + _REBUILT_BODY, "<module>"),
        (
            _HEADER
            + "def main():\n"
            + textwrap.indent(_REBUILT_BODY, "    ")
            + '\n\nif __name__ == "__main__":\n    main()\n',
            "main",
        ),
        (_HEADER + 'if __name__ == "__main__":\n' + textwrap.indent(_REBUILT_BODY, "    "), "<module>"),
    ],
    ids=["module", "function", "main_guard"],
)
def test_a_model_built_again_after_training_is_moved_where_it_meets_prepared_batches(source: str, block: str) -> None:
    plan, source, converted = _planned(source)
    rebuilt = [
        number for number, line in enumerate(source.splitlines(), 1) if line.strip() == "model = nn.Linear(8, 1)"
    ]
    # The first rebuild meets the prepared loader's batches; the last only a tensor of its own.
    assert dict(plan.rebuilt_models_to_move) == {block: {rebuilt[1]: "model"}}
    lines = [line.strip() for line in converted.splitlines()]
    assert lines.count("model.to(accelerator.device)") == 1
    built = [index for index, line in enumerate(lines) if line == "model = nn.Linear(8, 1)"]
    assert lines[built[1] + 1] == "model.to(accelerator.device)"


def test_a_model_built_in_a_training_class_call_is_no_object_of_the_caller() -> None:
    plan, _, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)

            def fit(self):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    nn.functional.mse_loss(self.model(x), y).backward()
                    self.optimizer.step()


        def main():
            trainer = Trainer(nn.Linear(8, 1))
            trainer.fit()


        if __name__ == "__main__":
            main()
        """
    )
    # ``__init__`` prepares the model it is handed; ``main`` holds no ``model`` to prepare.
    assert "model" not in plan.to_prepare and plan.prepared_in("model") is None
    assert dict(plan.preparations) == {}
    assert plan.prepared_in("self.model") == "Trainer"
    assert _prepare_lines(converted) == [
        "self.model, self.optimizer, self.loader = self.accelerator.prepare(",
    ]


def test_a_loader_wrappers_parameter_is_no_object_to_prepare() -> None:
    plan, _, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


        class DeviceDataLoader:
            def __init__(self, loader, device):
                self.loader = loader
                self.device = device

            def __iter__(self):
                for x, y in self.loader:
                    yield x.to(self.device), y.to(self.device)


        def main():
            train_dl = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            train_dl = DeviceDataLoader(train_dl, device)
            model = nn.Linear(8, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in train_dl:
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()


        if __name__ == "__main__":
            main()
        """
    )
    assert plan.to_prepare == ("model", "opt", "train_dl")
    assert dict(plan.preparations) == {"main": ("model", "opt", "train_dl")}
    assert _prepare_lines(converted) == [
        "train_dl = accelerator.prepare(train_dl)",
        "model, opt = accelerator.prepare(model, opt)",
    ]


def test_an_optimizer_built_again_at_module_level_is_prepared_before_each_training() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def fit(model, opt, loader):
            for data, target in loader:
                opt.zero_grad()
                nn.functional.mse_loss(model(data), target).backward()
                opt.step()


        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        fit(model, opt, loader)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        fit(model, opt, loader)
        fit(model, opt, loader)
        """
    )
    calls = [number for number, line in enumerate(source.splitlines(), 1) if line == "fit(model, opt, loader)"]
    # The first call trains what the one prepare took; the second a new optimizer; the third the
    # same one, prepared already.
    assert {block: dict(found) for block, found in plan.prepared_before_handing.items()} == {
        "<module>": {calls[1]: ("opt",)}
    }
    assert _prepare_lines(converted) == [
        "model, opt, loader = accelerator.prepare(model, opt, loader)",
        "opt = accelerator.prepare(opt)",
    ]


def test_an_optimizer_built_again_after_a_training_class_ran_is_prepared_before_its_loop() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class LRFinder:
            def __init__(self, model, optimizer):
                self.model = model
                self.optimizer = optimizer

            def range_test(self, loader):
                for x, y in loader:
                    self.optimizer.zero_grad()
                    nn.functional.mse_loss(self.model(x), y).backward()
                    self.optimizer.step()


        def train(model, loader, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        def main():
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            model = nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
            LRFinder(model, optimizer).range_test(loader)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                train(model, loader, optimizer)


        if __name__ == "__main__":
            main()
        """
    )
    loop = _line(source, "for epoch in range(2):")
    assert {block: dict(found) for block, found in plan.prepared_before_handing.items()} == {
        "main": {loop: ("optimizer",)}
    }
    lines = [line.strip() for line in converted.splitlines()]
    assert lines[lines.index("for epoch in range(2):") - 1] == "optimizer = accelerator.prepare(optimizer)"


_SEQUENTIAL_BODY = """\
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
first = nn.Linear(8, 1)
opt_first = torch.optim.SGD(first.parameters(), lr=0.1)
for x, y in loader:
    opt_first.zero_grad()
    nn.functional.mse_loss(first(x), y).backward()
    opt_first.step()
second = nn.Linear(8, 1)
opt_second = torch.optim.SGD(second.parameters(), lr=0.1)
print("second model")
for x, y in loader:
    opt_second.zero_grad()
    nn.functional.mse_loss(second(x), y).backward()
    opt_second.step()
first = nn.Linear(8, 1)
for x, y in loader:
    print(first(x).sum().item())
"""


@pytest.mark.parametrize(
    ("source", "block"),
    [
        (_HEADER + _SEQUENTIAL_BODY, "<module>"),
        (
            _HEADER
            + "def main():\n"
            + textwrap.indent(_SEQUENTIAL_BODY, "    ")
            + '\n\nif __name__ == "__main__":\n    main()\n',
            "main",
        ),
        (_HEADER + 'if __name__ == "__main__":\n' + textwrap.indent(_SEQUENTIAL_BODY, "    "), "<module>"),
    ],
    ids=["module", "function", "main_guard"],
)
def test_a_model_first_built_after_training_began_is_prepared_before_its_own_training(source: str, block: str) -> None:
    plan, source, converted = _planned(source)
    # The second model and its optimizer are prepared after the last of them is built (above the
    # print), not moved as a model built again; the first model, built again and evaluated over
    # the prepared loader, is moved to its batches' device as before.
    after = _line(source, "opt_second = torch.optim.SGD(second.parameters(), lr=0.1)")
    assert {name: dict(found) for name, found in plan.prepared_after_binding.items()} == {
        block: {after: ("second", "opt_second")}
    }
    rebuilt = [
        number for number, line in enumerate(source.splitlines(), 1) if line.strip() == "first = nn.Linear(8, 1)"
    ]
    assert dict(plan.rebuilt_models_to_move) == {block: {rebuilt[1]: "first"}}
    assert _prepare_lines(converted) == [
        "first, opt_first, loader = accelerator.prepare(first, opt_first, loader)",
        "second, opt_second = accelerator.prepare(second, opt_second)",
    ]
    assert _line_after(converted, "opt_second = torch.optim.SGD(second.parameters(), lr=0.1)") == (
        "second, opt_second = accelerator.prepare(second, opt_second)"
    )
    # Nothing left unprepared to report (ACC926).
    changes = convert_module(cst.parse_module(source), Options(), source).changes
    assert "ACC926" not in {change.code for change in changes}


def test_a_loader_wrapped_twice_is_prepared_before_its_first_wrap_only() -> None:
    plan, source, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class DeviceDataLoader:
            def __init__(self, loader, device):
                self.loader, self.device = loader, device

            def __iter__(self):
                for x, y in self.loader:
                    yield x.to(self.device), y.to(self.device)


        def main():
            device = torch.device("cuda")
            train_dl = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            train_dl = DeviceDataLoader(train_dl, device)
            train_dl = DeviceDataLoader(train_dl, device)
            model = nn.Linear(8, 1).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in train_dl:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    first = _line(source, "train_dl = DeviceDataLoader(train_dl, device)")
    assert {block: dict(lines) for block, lines in plan.prepared_before_wrapping.items()} == {
        "main": {first: (("train_dl", "DeviceDataLoader"),)}
    }
    assert _prepare_lines(converted) == [
        "train_dl = accelerator.prepare(train_dl)",
        "model, optimizer = accelerator.prepare(model, optimizer)",
    ]


def test_a_model_no_prepare_can_follow_is_the_plans_to_report() -> None:
    plan, _, converted = _planned(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        net = nn.Linear(4, 1)


        def main():
            loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
            head = nn.Linear(1, 1)
            optimizer = torch.optim.SGD([*net.parameters(), *head.parameters()], lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(head(net(x)), y).backward()
                optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    # ``main`` builds a model of its own (``head``), so it is the home; a prepare in it would make
    # the module's ``net`` local to it: no prepare of the plan takes it. (A function training the
    # module's model alone makes the module the home, test_module_globals_trained.py.)
    assert plan.models_left_unprepared == ("net",)
    assert "accelerator.prepare(net" not in converted


_EVALUATED_AFTER_TRAINING = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(x)


def test(test_set):
    loader = DataLoader(test_set, batch_size=8)
    best = Net()
    best.load_state_dict(torch.load("model.pt"))
    best.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (best(x).argmax(1) == y).sum().item()
    print(correct)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), "model.pt")
    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))
"""


def test_a_helper_evaluating_after_training_prepares_its_own_loader_and_moves_its_model() -> None:
    plan, source, converted = _planned(_EVALUATED_AFTER_TRAINING)
    assert dict(plan.evaluation_preparations) == {"test": ("loader",)}
    assert dict(plan.rebuilt_models_to_move["test"]) == {_line(source, "best = Net()"): "best"}
    assert _line_after(converted, "loader = DataLoader(test_set, batch_size=8)") == (
        "loader = accelerator.prepare(loader)"
    )
    assert _line_after(converted, "best = Net()") == "best.to(accelerator.device)"


def test_a_helper_evaluating_during_training_prepares_its_own_loader() -> None:
    # Called inside the training loop too (an evaluation each epoch): the accelerator exists
    # there, so its loader is prepared where it is built, not read whole by every process.
    source = _EVALUATED_AFTER_TRAINING.replace(
        "        optimizer.step()\n",
        "        optimizer.step()\n        test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))\n",
    )
    plan, _, converted = _planned(source)
    assert dict(plan.evaluation_preparations) == {"test": ("loader",)}
    assert (
        _line_after(converted, "loader = DataLoader(test_set, batch_size=8)") == "loader = accelerator.prepare(loader)"
    )


def test_a_helper_evaluating_before_the_training_loop_prepares_its_own_loader() -> None:
    # Called before the first epoch: that call is where training starts (it loops over a loader),
    # so the block's prepare goes before it and the accelerator exists there too.
    source = _EVALUATED_AFTER_TRAINING.replace(
        "    for x, y in loader:\n        optimizer.zero_grad()",
        "    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))\n"
        "    for x, y in loader:\n        optimizer.zero_grad()",
    )
    plan, _, converted = _planned(source)
    assert dict(plan.evaluation_preparations) == {"test": ("loader",)}
    in_main = [line.strip() for line in converted.split("def main", 1)[1].splitlines()]
    first_test = next(index for index, line in enumerate(in_main) if line.startswith("test("))
    assert any(line.startswith("model, optimizer, loader = accelerator.prepare(") for line in in_main[:first_test])


def test_a_helper_called_where_no_accelerator_exists_keeps_its_own_loader() -> None:
    # Called by main() after training, and by a function outside the home block too (no
    # accelerator reaches it there): its loader is read whole, as the original reads it.
    source = _EVALUATED_AFTER_TRAINING.replace(
        "def main():",
        "def evaluate_saved():\n    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))\n\n\ndef main():",
    )
    plan, _, _ = _planned(source)
    assert "test" not in plan.evaluation_preparations


def test_a_model_first_built_after_training_and_evaluated_is_moved() -> None:
    source = _EVALUATED_AFTER_TRAINING.replace(
        "    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))\n",
        "    best = Net()\n    best.eval()\n    for x, y in loader:\n        print(best(x).sum().item())\n",
    )
    plan, source, converted = _planned(source)
    built = max(number for number, line in enumerate(source.splitlines(), 1) if line.strip() == "best = Net()")
    assert dict(plan.rebuilt_models_to_move["main"]) == {built: "best"}
    in_main = converted.split("def main", 1)[1].splitlines()
    assert in_main[in_main.index("    best = Net()") + 1] == "    best.to(accelerator.device)"


def test_a_model_a_helper_builds_over_the_loader_it_is_handed_is_moved() -> None:
    # ``test(loader)`` is handed the prepared loader (it builds none) and builds the model it
    # evaluates with no ``.eval()``: moved to the device of the prepared batches; one the helper
    # moves itself keeps its own move.
    source = _EVALUATED_AFTER_TRAINING.replace(
        "def test(test_set):\n    loader = DataLoader(test_set, batch_size=8)\n", "def test(loader):\n"
    ).replace("    best.eval()\n", "")
    source = source.replace(
        "    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))\n", "    test(loader)\n"
    )
    plan, source, converted = _planned(source)
    built = min(number for number, line in enumerate(source.splitlines(), 1) if line.strip() == "best = Net()")
    assert dict(plan.rebuilt_models_to_move["test"]) == {built: "best"}
    assert _line_after(converted, "best = Net()") == "best.to(accelerator.device)"
    moved = source.replace("    best = Net()\n", "    best = Net()\n    best.to('cpu')\n")
    assert "test" not in _planned(moved)[0].rebuilt_models_to_move


_INLINE_MODEL_TRAINER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, config, model, loader):
        self.config = config
        self.model = model
        self.loader = loader

    def run(self):
        ALIAS
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
        for x, y in self.loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


def main(config):
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    BUILD
"""


@pytest.mark.parametrize(
    "alias",
    ["model, config = self.model, self.config", "model = self.model\n        config = self.config"],
    ids=["tuple", "single"],
)
def test_a_name_bound_only_to_a_prepared_attribute_is_no_model_left_unprepared(alias: str) -> None:
    # ``model`` in ``run()`` stands for ``self.model``, built inline by the caller and prepared in
    # ``__init__``: nothing is left unprepared to report (ACC926).
    build = "Trainer(config, nn.Linear(8, 1), loader).run()"
    plan, source, converted = _planned(_INLINE_MODEL_TRAINER.replace("ALIAS", alias).replace("BUILD", build))
    assert plan.models_left_unprepared == ()
    changes = convert_module(cst.parse_module(source), Options(), source).changes
    assert "ACC926" not in {change.code for change in changes}
    assert "self.model = self.accelerator.prepare(self.model)" in converted


def test_a_name_bound_to_a_model_besides_the_alias_is_still_prepared() -> None:
    # ``model`` is also what ``main`` builds and trains by hand: it stays an object to prepare.
    source = _INLINE_MODEL_TRAINER.replace("ALIAS", "model, config = self.model, self.config").replace(
        "BUILD",
        "model = nn.Linear(8, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n        opt.zero_grad()\n        model(x).sum().backward()\n        opt.step()\n"
        "    Trainer(config, model, loader).run()",
    )
    plan, _, converted = _planned(source)
    assert "model" in plan.to_prepare
    assert "model, opt, loader = accelerator.prepare(model, opt, loader)" in converted


EVALUATION_ONLY = {
    "module": (
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        loader = DataLoader(TensorDataset(torch.randn(20, 8), torch.randint(0, 2, (20,))), batch_size=4)
        net = nn.Linear(8, 2)
        net.eval()
        with torch.no_grad():
            for x, y in loader:
                print((net(x).argmax(1) == y).sum().item())
        """,
        "<module>",
        "net = nn.Linear(8, 2)",
        "net",
        "net.to(accelerator.device)",
    ),
    "class": (
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Evaluator:
            def __init__(self):
                self.loader = DataLoader(TensorDataset(torch.randn(20, 8), torch.randint(0, 2, (20,))), batch_size=4)
                self.net = nn.Linear(8, 2)

            def run(self):
                self.net.eval()
                with torch.no_grad():
                    for x, y in self.loader:
                        print((self.net(x).argmax(1) == y).sum().item())


        Evaluator().run()
        """,
        "Evaluator.__init__",
        "self.net = nn.Linear(8, 2)",
        "self.net",
        "self.net.to(self.accelerator.device)",
    ),
}


@pytest.mark.parametrize("shape", sorted(EVALUATION_ONLY))
def test_a_model_only_evaluated_is_moved_where_it_is_built(shape: str) -> None:
    """A script that trains nothing (a test script: a model given its weights, evaluated over a
    loader; at module level, or kept by a class in ``__init__`` and called in ``run()``): the
    prepared loader's batches are on the accelerator's device, so the model is moved there right
    where it is built, before its first loop (before, it stayed where the original left it: on
    the CPU, or on the GPU only under a flag)."""
    source, block, built, model, move = EVALUATION_ONLY[shape]
    plan, source, converted = _planned(source)
    assert dict(plan.rebuilt_models_to_move[block]) == {_line(source, built): model}
    lines = [line.strip() for line in converted.splitlines()]
    assert lines[lines.index(built) + 1] == move


_HAND_SGD_OVER_A_LOADER_FACTORY = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_loaders():
    train_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
    return train_loader, test_loader


def main():
    train_loader, test_loader = get_loaders()
    model = nn.Linear(2, 2)
    for x, y in train_loader:
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= 0.1 * param.grad
    with torch.no_grad():
        for x, y in test_loader:
            print((model(x).argmax(1) == y).sum().item())


main()
"""


@pytest.mark.parametrize("shape", ["function", "module"])
def test_a_loader_factory_is_no_home_without_an_optimizer(shape: str) -> None:
    """No optimizer to go by (parameters updated by hand): the home is the block that binds the
    loaders a factory returns and trains over them, not the factory binding them to return
    (before, the accelerator was created in ``get_loaders()``: the backward and the evaluation
    could not reach it, ACC904/ACC939)."""
    source = _HAND_SGD_OVER_A_LOADER_FACTORY
    if shape == "module":
        main = source[source.index("def main():") : source.index("\n\nmain()")]
        body = textwrap.dedent(main.removeprefix("def main():\n"))
        source = source[: source.index("def main():")] + body
    facts = analyse(cst.parse_module(source), source)
    assert facts.creating_function == ("main" if shape == "function" else None)
    assert facts.home_kind == shape
    converted = convert_module(cst.parse_module(source), Options(), source).module.code
    factory = converted[converted.index("def get_loaders") : converted.index("return train_loader")]
    assert "Accelerator()" not in factory
    assert "accelerator.backward(" in converted
    assert "gather_for_metrics" in converted


RETURNED_BY_TRAINING = """\
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    def train(loader):
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        return model


    def evaluate(model, loader):
        with torch.no_grad():
            return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)


    {home}
"""


@pytest.mark.parametrize(
    "home",
    [
        # The __main__ block, main() and module level, each binding what train() returns.
        'if __name__ == "__main__":\n'
        "        loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)\n"
        "        model = train(loader)\n"
        "        print(evaluate(model, loader))",
        "def main():\n"
        "        loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)\n"
        "        model = train(loader)\n"
        "        print(evaluate(model, loader))",
        "loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)\n"
        "    model = train(loader)\n"
        "    print(evaluate(model, loader))",
        # ENet's: the __main__ block also builds a model of that name once training is done.
        'if __name__ == "__main__":\n'
        "        loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)\n"
        "        model = train(loader)\n"
        "        if len(loader) > 8:\n"
        "            model = torch.nn.Linear(4, 3)\n"
        "        print(evaluate(model, loader))",
    ],
    ids=["main_guard", "main_function", "module", "main_guard_built_again"],
)
def test_a_model_a_training_function_builds_and_returns_is_prepared_there_once(home: str) -> None:
    plan, _, converted = _planned(RETURNED_BY_TRAINING.format(home=home))
    assert "model" in plan.preparations["train"]  # its gradients averaged while it trains
    assert not any("model" in names for lines in plan.prepared_after_binding.values() for names in lines.values())
    assert plan.models_left_unprepared == ()
    assert _prepare_lines(converted).count("model, optimizer = accelerator.prepare(model, optimizer)") == 1
    assert "model = accelerator.prepare(model)" not in _prepare_lines(converted)  # not wrapped again
