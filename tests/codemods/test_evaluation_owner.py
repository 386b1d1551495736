"""One owner of "this loop evaluates": the program model (``codemods/model/loops.py``), asked through
``RuleTransformer.evaluates``. A rule with its own reading of ``no_grad``/``model.eval()`` disagrees
with the analysis sooner or later: prepare shards a loader the metrics rule does not gather, and the
accuracy comes out 1/N without a word (issue 26)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import libcst as cst

import accel_convert.codemods as codemods_package
from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options

#: Every rule module: the ordered rewrites and the checks, the parts of a rule split into a package included.
RULE_FILES = sorted(
    path
    for folder in ("rewrites", "checks")
    for path in (Path(codemods_package.__file__).parent / folder).rglob("*.py")
)
#: Names of predicates that decide evaluation or disabled gradients.
PREDICATE = re.compile(
    r"^_*(is_eval|evaluates|is_no_grad|no_grad|under_no_grad|disables?_grad|grad_disabled|eval_mode|in_eval)",
    re.IGNORECASE,
)
#: The torch_names tables (and torch names) only the analysis reads to decide it.
OWNED_NAMES = {"NO_GRAD_CONTEXTS", "GRAD_SWITCHES", "no_grad", "inference_mode", "set_grad_enabled"}


def test_no_rule_defines_its_own_evaluation_predicate() -> None:
    assert len(RULE_FILES) > 30, "the rule folders moved: this test would check nothing"
    offenders = []
    for path in RULE_FILES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and PREDICATE.match(node.name):
                offenders.append(f"{path.name}:{node.lineno} defines {node.name}")
            elif isinstance(node, ast.Name) and node.id in OWNED_NAMES:
                offenders.append(f"{path.name}:{node.lineno} reads {node.id}")
            elif isinstance(node, ast.Attribute) and node.attr in OWNED_NAMES:
                offenders.append(f"{path.name}:{node.lineno} reads .{node.attr}")
            elif isinstance(node, ast.alias) and node.name in OWNED_NAMES:
                offenders.append(f"{path.name} imports {node.name}")
    assert not offenders, "ask RuleTransformer.evaluates instead:\n" + "\n".join(offenders)


SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


{decorator}def test(model, loader):
    correct = 0
{switch}    {context}for x, y in loader:
        {indent}out = model(x)
        {indent}correct += (out.argmax(1) == y).sum().item()
    return correct


def main():
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))), batch_size=4)
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(test(model, test_loader))


main()
"""

SPELLINGS = {
    "no_grad": dict(context="with torch.no_grad():\n        "),
    "inference_mode": dict(context="with torch.inference_mode():\n        "),
    "set_grad_enabled": dict(context="with torch.set_grad_enabled(False):\n        "),
    "decorator": dict(decorator="@torch.no_grad()\n"),
    "eval": dict(switch="    model.eval()\n"),
}


def _script(decorator: str = "", switch: str = "", context: str = "") -> str:
    indent = "    " if context else ""
    return SCRIPT.format(decorator=decorator, switch=switch, context=context, indent=indent)


def test_every_spelling_is_an_evaluation_that_gets_gathered() -> None:
    for spelling, parts in SPELLINGS.items():
        source = _script(**parts)
        module = cst.parse_module(source)
        facts = analyse(module)
        assert [loop.function for loop in facts.eval_loops] == ["test"], spelling
        output = convert_module(module, Options()).module.code
        assert "accelerator.gather_for_metrics((out, y))" in output, spelling


def test_set_grad_enabled_on_a_flag_is_not_an_evaluation() -> None:
    source = _script(context='with torch.set_grad_enabled(phase == "train"):\n        ').replace(
        "correct = 0", 'correct = 0\n    phase = "val"'
    )
    facts = analyse(cst.parse_module(source))
    assert facts.eval_loops == ()


def test_a_decorated_nested_function_does_not_make_its_parent_evaluate() -> None:
    source = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))), batch_size=4)

    @torch.no_grad()
    def report():
        print(model.weight.sum())

    for x, y in loader:
        print(model(x).sum())
    report()
"""
    facts = analyse(cst.parse_module(source))
    assert facts.eval_loops == ()


_INPUT_GRADIENTS = """
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(4, 2).to("cpu")
loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)), batch_size=1)
correct = 0
for data, target in loader:
    data.requires_grad = True
    loss = F.cross_entropy(model(data), target)
    model.zero_grad()
    loss.backward()
    correct += int(data.grad.abs().sum() > 0)
print(correct)
"""


def test_a_backward_nothing_steps_is_an_evaluation_not_training() -> None:
    """Training is what steps an optimizer (issue 43): gradients for an input (an FGSM attack)
    wrap no model, keep the backward plain, and the loop evaluates."""
    facts = analyse(cst.parse_module(_INPUT_GRADIENTS))
    assert not facts.backward_trains
    assert not facts.models and not facts.train_loops
    assert [loop.kind for loop in facts.eval_loops] == ["eval"]
    converted = convert_module(cst.parse_module(_INPUT_GRADIENTS), Options()).module.code
    assert "loss.backward()" in converted and "accelerator.backward" not in converted
    assert "accelerator.reduce(torch.tensor(correct" in converted


def test_a_backward_an_optimizer_steps_after_trains() -> None:
    source = _INPUT_GRADIENTS.replace(
        "correct = 0\n", "correct = 0\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ).replace("    correct += ", "    optimizer.step()\n    correct += ")
    facts = analyse(cst.parse_module(source))
    assert facts.backward_trains and facts.train_loops


_HELPER_CALLED_UNDER_NO_GRAD = """
import torch
from torch.utils.data import DataLoader, TensorDataset


def accuracy(model, loader):
    correct = 0
    for x, y in loader:
        logits, probas = model(x)
        correct += (probas.argmax(1) == y).sum().item()
    return correct


model = torch.nn.Linear(4, 2).to("cpu")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)), batch_size=4)
test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)), batch_size=4)
for x, y in train_loader:
    optimizer.zero_grad()
    model(x)[0].sum().backward()
    optimizer.step()
with torch.set_grad_enabled(False):
    print(accuracy(model, test_loader))
"""


def test_a_helper_called_only_under_no_grad_evaluates() -> None:
    """The calling context decides (issue 43): a helper with neither ``eval()`` nor ``no_grad``
    inside, called only under ``set_grad_enabled(False)``, evaluates; called once with gradients
    on, it does not."""
    facts = analyse(cst.parse_module(_HELPER_CALLED_UNDER_NO_GRAD))
    assert [(loop.function, loop.kind) for loop in facts.eval_loops] == [("accuracy", "eval")]
    also_with_gradients = _HELPER_CALLED_UNDER_NO_GRAD + "print(accuracy(model, test_loader))\n"
    assert not analyse(cst.parse_module(also_with_gradients)).eval_loops


_THROUGH_ANOTHER_HELPER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def benchmark_all_eval(model):
    for seed in (3, 4):
        evaluation_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)), batch_size=4)
        print(validation(model, evaluation_loader))


def validation(model, evaluation_loader):
    correct = 0
    for x, y in evaluation_loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct


def train():
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)), batch_size=4)
    valid_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)), batch_size=4)
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        print(validation(model, valid_loader))
    with torch.no_grad():
        benchmark_all_eval(model)
"""


def test_a_helper_called_through_another_evaluation_helper_evaluates() -> None:
    """deep-text-recognition-benchmark's ``validation``, called under ``no_grad`` by the training
    and, with nothing around the call, by ``benchmark_all_eval``, itself only called under
    ``no_grad``: every call evaluates, so its loop does (issue 43; it was left ungathered)."""
    facts = analyse(cst.parse_module(_THROUGH_ANOTHER_HELPER))
    assert [(loop.function, loop.kind) for loop in facts.eval_loops] == [("validation", "eval")]


def test_a_helper_also_called_with_gradients_on_does_not_evaluate() -> None:
    """The verdict carried through a caller is still every call's: a caller running with gradients
    on (``benchmark_all_eval`` called outside ``no_grad`` too) leaves the helper undecided."""
    source = _THROUGH_ANOTHER_HELPER + "\n\ndef again(model):\n    benchmark_all_eval(model)\n"
    facts = analyse(cst.parse_module(source))
    assert facts.eval_loops == ()
