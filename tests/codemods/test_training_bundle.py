"""A training bundle used from outside its class: ``Experiment.__init__`` builds the model, the
optimizer and the loaders as attributes, and the block building it (``main()``, the ``__main__``
block, plain module code) hands them to module-level ``train()``/``evaluate()`` functions
(``train(exp.model, exp.train_loader, exp.optimizer)``). The conversion plan prepares the
bundle's attributes in that block right after the instance is bound (``plan.bundled``); the
evaluation over the prepared test loader is gathered, the save unwrapped, and the name-flow guard
leaves nothing out. Before, nothing was prepared: every process trained on every batch,
unsynchronised, and each printed its own accuracy."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import Options
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.name_flow import name_flow_problems
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.codemods.model.plan import plan_of
from accel_convert.converter.pipeline import convert_source

DEFINITIONS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Experiment:
    def __init__(self, lr):
        self.model = nn.Linear(8, 3)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
        self.test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)


def train(model, loader, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum().item()
    return correct


"""

USE = """\
exp = Experiment(0.1)
train(exp.model, exp.train_loader, exp.optimizer)
print(evaluate(exp.model, exp.test_loader))
torch.save(exp.model.state_dict(), "bundle.pt")
"""

PREPARE = (
    "exp.model, exp.optimizer, exp.train_loader, exp.test_loader = accelerator.prepare(\n"
    "{indent}    exp.model, exp.optimizer, exp.train_loader, exp.test_loader\n"
    "{indent})"
)

SHAPES = {
    "function": DEFINITIONS
    + "def main():\n"
    + textwrap.indent(USE, "    ")
    + '\n\nif __name__ == "__main__":\n    main()\n',
    "main_block": DEFINITIONS + 'if __name__ == "__main__":\n' + textwrap.indent(USE, "    "),
    "module": DEFINITIONS + USE,
}


def _converted(source: str) -> tuple[str, list[str]]:
    result = convert_source(source.encode(), Options(), path="train.py")
    return result.output.decode(), [change.code for change in result.changes]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_bundle_is_prepared_right_after_it_is_built(shape: str) -> None:
    text, codes = _converted(SHAPES[shape])
    indent = "" if shape == "module" else "    "
    lines = text.splitlines()
    built = lines.index(f"{indent}exp = Experiment(0.1)")
    assert "\n".join(lines[built + 1 : built + 4]) == indent + PREPARE.format(indent=indent)
    # The accelerator exists where the bundle is built: in ``main()``, in the ``__main__`` block.
    assert lines.index(f"{indent}accelerator = Accelerator()") < built
    assert "ACC937" not in codes  # the name-flow guard left no rewrite out
    assert "ACC904" not in codes


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_evaluation_is_gathered_and_the_save_unwrapped(shape: str) -> None:
    text, _ = _converted(SHAPES[shape])
    assert "accelerator.gather_for_metrics(" in text
    assert 'accelerator.save(accelerator.unwrap_model(exp.model).state_dict(), "bundle.pt")' in text
    assert "accelerator.backward(" in text


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_second_conversion_changes_nothing(shape: str) -> None:
    text, _ = _converted(SHAPES[shape])
    assert _converted(text)[0] == text


def test_the_plan_prepares_the_attributes_where_the_instance_is_bound() -> None:
    source = SHAPES["function"]
    plan = plan_of(analyse(cst.parse_module(source), source))
    attributes = ("exp.model", "exp.optimizer", "exp.train_loader", "exp.test_loader")
    assert dict(plan.bundled) == dict.fromkeys(attributes, "exp")
    assert plan.preparations["main"] == attributes
    line = source.splitlines().index("    exp = Experiment(0.1)") + 1
    assert dict(plan.built_before_training["main"]) == dict.fromkeys(attributes, (line, line))
    assert plan.creating_scope == "main"


def test_the_bundle_in_the_main_block_makes_it_the_home() -> None:
    source = SHAPES["main_block"]
    plan = plan_of(analyse(cst.parse_module(source), source))
    assert plan.home_kind == "main_guard"
    assert plan.preparations["<module>"] == ("exp.model", "exp.optimizer", "exp.train_loader", "exp.test_loader")


def test_a_class_training_what_it_holds_is_no_bundle() -> None:
    """A class whose own method trains its attributes is a training class: it prepares them in
    its ``__init__``, as before; nothing is prepared outside it."""
    source = DEFINITIONS.replace(
        "        self.test_loader = DataLoader(",
        "        self.epochs = 1\n        self.test_loader = DataLoader(",
    ) + textwrap.dedent(
        """\
        class Runner(Experiment):
            pass


        def main():
            exp = Experiment(0.1)
            exp.fit()
            train(exp.model, exp.train_loader, exp.optimizer)
        """
    )
    source = source.replace(
        "\n\ndef train(",
        "\n\n    def fit(self):\n        train(self.model, self.train_loader, self.optimizer)\n\n\ndef train(",
        1,
    )
    plan = plan_of(analyse(cst.parse_module(source), source))
    assert not plan.bundled
    text, _ = _converted(source)
    assert "exp.model, exp.optimizer" not in text
    assert "self.accelerator.prepare(" in text


def _program(entry_use: str) -> dict[str, str]:
    """The bundle in ``experiment.py``, its attributes handed on by ``train.py``, converted as a
    program."""
    bundle, functions = DEFINITIONS.split("\n\n\ndef train(", 1)
    entry = (
        "import torch\nimport torch.nn.functional as F\n\nfrom experiment import Experiment\n\n\ndef train("
        + functions
        + entry_use
    )
    sources = {"experiment": bundle + "\n", "train": entry}
    outcomes = convert_program(
        [ProgramModule(name, cst.parse_module(text), text) for name, text in sources.items()], "train", Options()
    )
    return {name: outcome.module.code for name, outcome in outcomes.items()} | {
        "original_experiment": sources["experiment"]
    }


def test_a_bundle_of_another_module_is_prepared_where_the_entry_builds_it() -> None:
    found = _program("def main():\n" + textwrap.indent(USE, "    ") + '\n\nif __name__ == "__main__":\n    main()\n')
    assert found["experiment"] == found["original_experiment"]  # the bundle's module is left as it is
    lines = found["train"].splitlines()
    built = lines.index("    exp = Experiment(0.1)")
    assert "\n".join(lines[built + 1 : built + 4]) == "    " + PREPARE.format(indent="    ")
    assert "accelerator.gather_for_metrics(" in found["train"]
    assert "model = accelerator.prepare(model)" not in found["train"]  # nothing prepared twice in train()
    assert 'accelerator.save(accelerator.unwrap_model(exp.model).state_dict(), "bundle.pt")' in found["train"]


def test_a_bundle_of_another_module_built_in_the_main_block() -> None:
    found = _program('if __name__ == "__main__":\n' + textwrap.indent(USE, "    "))
    lines = found["train"].splitlines()
    built = lines.index("    exp = Experiment(0.1)")
    assert lines.index("    accelerator = Accelerator()") < built
    assert "\n".join(lines[built + 1 : built + 4]) == "    " + PREPARE.format(indent="    ")


FIT_FROM_A_METHOD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def fit(model, loaders):
    train_loader, test_loader = loaders
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        print(sum((model(x).argmax(dim=1) == y).sum().item() for x, y in test_loader))


class Experiment:
    def run(self):
        model = nn.Linear(8, 3)
        train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
        test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
        loaders = (train_loader, test_loader)
        fit(model, loaders)


if __name__ == "__main__":
    Experiment().run()
"""


def test_a_model_a_method_builds_and_hands_to_fit_is_prepared_there() -> None:
    """``Experiment.run()`` builds the model and the loaders, binds the loaders into one tuple and
    hands both to ``fit(model, loaders)``, which builds the optimizer: the class gets no
    accelerator (it trains nothing), so ``fit()`` prepares the model it is handed with the rest
    (before, ACC926: the model trained unprepared on each process)."""
    source = FIT_FROM_A_METHOD
    plan = plan_of(analyse(cst.parse_module(source), source))
    assert plan.received_models["fit"] == ("model",)
    text, codes = _converted(source)
    assert "model, optimizer, train_loader, test_loader = accelerator.prepare(" in text
    assert "ACC926" not in codes
    assert _converted(text)[0] == text


CHOSEN = """\
from accel_convert.runtime import Accelerator


def main(kind):
    if kind == "small":
        exp = Small()
    elif kind == "big":
        exp = Big()
{wait}    train(exp.model, exp.loader, exp.optimizer)
"""

PREPARED = "    exp.model, exp.optimizer, exp.loader = accelerator.prepare(exp.model, exp.optimizer, exp.loader)\n"


def _flow(original: str, converted: str) -> list[tuple[str, str]]:
    converted = converted.replace("def main(kind):\n", "def main(kind):\n    accelerator = Accelerator()\n")
    return [(problem.scope, problem.name) for problem in name_flow_problems(ast.parse(original), ast.parse(converted))]


def test_the_guard_agrees_with_a_bundle_prepared_after_the_chain_choosing_it() -> None:
    """A bundle chosen by an ``if`` chain with no ``else``: where the original's next read of the
    instance waits for no test, it fails there when no branch bound it, so the prepare right after
    the chain (which binds the instance's attributes again, not the instance) fails no more
    often: the guard takes it, as the plan placed it. Where the read waits for a test of what the
    chain chose by, the instance is left unbound on purpose: the guard refuses the prepare."""
    original = CHOSEN.format(wait="")
    converted = original.replace("    train(", PREPARED + "    train(")
    assert _flow(original, converted) == []
    waiting = original.replace("    train(", '    if kind != "none":\n        train(')
    assert _flow(waiting, waiting.replace('    if kind != "none"', PREPARED + '    if kind != "none"')) == [
        ("main", "exp")
    ]


def test_a_bundle_chosen_in_a_chain_is_prepared_and_the_guard_leaves_it_in() -> None:
    source = SHAPES["function"].replace(
        "    exp = Experiment(0.1)\n",
        '    if len("small") > 3:\n        exp = Experiment(0.1)\n    elif len("big") > 2:\n        exp = Experiment(0.2)\n',
    )
    text, codes = _converted(source)
    assert "ACC937" not in codes
    lines = text.splitlines()
    built = lines.index("        exp = Experiment(0.2)")
    assert "\n".join(lines[built + 1 : built + 4]) == "    " + PREPARE.format(indent="    ")


def test_out_of_memory_retry_of_a_bundle_is_left_to_a_person() -> None:
    """The bundle's class builds the loaders with their batch size, which a retry cannot shrink
    (and a retry preparing the prepared attributes again would wrap them twice): reported at the
    bundle (ACC917) and not wrapped, on the first conversion and the second alike."""
    source = SHAPES["function"]
    result = convert_source(source.encode(), Options(oom_retry=True), path="train.py")
    text = result.output.decode()
    assert "find_executable_batch_size" not in text
    line = source.splitlines().index("    exp = Experiment(0.1)") + 1
    assert [(change.line, change.fixed) for change in result.changes if change.code == "ACC917"] == [(line, False)]
    assert convert_source(text.encode(), Options(oom_retry=True), path="train.py").output.decode() == text


DATA_OBJECT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Cifar:
    def __init__(self, batch_size):
        data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        self.train = DataLoader(data, batch_size=batch_size, shuffle=True)
        self.test = DataLoader(data, batch_size=batch_size)


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = Cifar(8)
    model = nn.Linear(8, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        print(len(dataset.train))
        for batch in dataset.train:
            inputs, targets = (b.to(device) for b in batch)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
"""


def test_a_class_holding_only_loaders_is_no_bundle() -> None:
    """SAM's ``Cifar``: a data object whose loaders the script loops over directly is no training
    bundle (before, its loaders were prepared while the loops kept their batch moves, and a
    second conversion changed the script again)."""
    facts = analyse(cst.parse_module(DATA_OBJECT), DATA_OBJECT)
    assert dict(facts.bundle_classes) == {}
    once = convert_source(DATA_OBJECT.encode(), Options(), path="train.py").output.decode()
    assert "dataset.train" not in "".join(line for line in once.splitlines() if "prepare(" in line)
    assert convert_source(once.encode(), Options(), path="train.py").output.decode() == once
