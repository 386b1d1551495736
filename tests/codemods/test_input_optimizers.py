"""Training is what steps an optimizer over a model's parameters (issue 43, item 5), found by
converting pytorch-cnn-visualizations.

An optimizer over tensors the script makes (``SGD([delta])``, ``Adam([self.processed_image])``),
in a module that runs a model it evaluates, optimises an *input* (an attack's perturbation, a class
visualisation, deep dream): the roles owner (``model/roles.optimizers_and_models``) records it in
``facts.input_optimizers``, not ``facts.optimizers``, so it is not prepared, its steps train
nothing, its backward stays plain and the loop over the loader evaluates (its counts reduced or
gathered). Before, the loop was a training loop: its counts were each process's own (ACC919,
``robust 64/100`` on two processes), the optimizer was prepared once per batch, and a script with
no loader got ACC901 ("training data does not come from a DataLoader").

Across modules (``model/loops._steps_something``, ``engine/program``): a library of a program
none of whose modules trains keeps its backward plain (``ProgramSeeds.program_trains``), and the
function running it is no backward function for its callers. Before, the saliency class of
another module got ``self.accelerator.backward(output, gradient=...)`` and ACC901, and a
module-level loop calling a saliency function of another module was a training loop (ACC919).
"""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from tests.codemods.support import converted_stably
from tests.launching import REPO_ROOT

CASES = REPO_ROOT / "fixtures" / "cases"
PROJECTS = REPO_ROOT / "fixtures" / "projects"


@pytest.mark.parametrize("case", ["input_optimizer_module_level", "input_optimizer_function", "input_optimizer_class"])
def test_an_optimizer_over_an_input_is_not_prepared_and_its_loop_evaluates(case: str) -> None:
    code, codes = converted_stably((CASES / f"{case}.py").read_text())
    assert "prepare(optimizer)" not in code
    assert "loss.backward()" in code and "accelerator.backward" not in code  # plain backward
    assert "clip_grad_norm_(self.model" in code or "clip_grad" not in code  # clipped as written
    # The loop over the loader evaluates: its counts cover every process's samples.
    assert "gather_for_metrics((output, targets))" in code or "robust = accelerator.reduce(" in code
    assert not {"ACC901", "ACC904", "ACC919", "ACC957"} & set(codes)


#: pytorch-cnn-visualizations' generate_regularized_class_specific_samples.py, cut down: no
#: loader, an image optimised by a class, moved with ``.cuda()``, the frozen model's gradients
#: clipped.
VISUALISATION = """\
import torch
from torch.optim import SGD
from torchvision import models

use_cuda = torch.cuda.is_available()


class ClassSpecificImageGeneration:
    def __init__(self, model, target_class):
        self.model = model.cuda() if use_cuda else model
        self.model.eval()
        self.target_class = target_class

    def generate(self, iterations=150, clipping_value=0.1):
        for i in range(1, iterations):
            self.processed_image = torch.rand(1, 3, 224, 224, requires_grad=True)
            if use_cuda:
                self.processed_image = self.processed_image.cuda()
            optimizer = SGD([self.processed_image], lr=6, weight_decay=0.0001)
            output = self.model(self.processed_image)
            class_loss = -output[0, self.target_class]
            if i % 10 == 0:
                print("Iteration:", i, "Loss", class_loss.item())
            self.model.zero_grad()
            class_loss.backward()
            if clipping_value:
                torch.nn.utils.clip_grad_norm(self.model.parameters(), clipping_value)
            optimizer.step()
        return self.processed_image


if __name__ == "__main__":
    pretrained_model = models.alexnet(pretrained=True)
    csig = ClassSpecificImageGeneration(pretrained_model, 130)
    csig.generate()
"""


def test_a_class_visualisation_without_a_loader_is_left_as_written() -> None:
    code, codes = converted_stably(VISUALISATION)
    assert code == VISUALISATION
    assert codes == []


#: An optimizer over tensors that are the model: hand-made weights (no module is run), an
#: ``nn.Parameter`` temperature, a model's own attribute: each still trains.
TRAINED_TENSORS = [
    """\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
w = torch.zeros(8, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
optimizer = torch.optim.SGD([w, b], lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    optimizer.step()
""",
    """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
model = nn.Linear(8, 3)
model.eval()
temperature = nn.Parameter(torch.ones(1))
optimizer = torch.optim.SGD([temperature], lr=0.01)
for x, y in loader:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x) / temperature, y)
    loss.backward()
    optimizer.step()
""",
]


@pytest.mark.parametrize("source", TRAINED_TENSORS)
def test_an_optimizer_over_the_trained_tensors_is_still_prepared(source: str) -> None:
    code, _ = converted_stably(source)
    assert "accelerator.prepare(" in code and "optimizer" in code.split("accelerator.prepare(")[1].split(")")[0]
    assert "accelerator.backward(loss)" in code


def _project(name: str, entry: str) -> dict[str, str]:
    sources = {path.stem: path.read_text() for path in sorted((PROJECTS / name).glob("*.py"))}
    modules = [ProgramModule(module, cst.parse_module(text), text) for module, text in sources.items()]
    outcomes = convert_program(modules, entry, Options())
    assert all(outcome.changes is not None for outcome in outcomes.values())
    return {module: outcome.module.code for module, outcome in outcomes.items()} | {
        f"{module}:codes": " ".join(change.code for change in outcome.changes) for module, outcome in outcomes.items()
    }


def test_a_saliency_class_of_a_program_that_trains_nothing_keeps_its_backward() -> None:
    converted = _project("saliency_class_module", "saliency")
    original = (PROJECTS / "saliency_class_module" / "maps.py").read_text()
    assert converted["maps"] == original  # output.backward(gradient=one_hot), no accelerator
    assert "ACC901" not in converted["maps:codes"]


def test_a_saliency_function_of_another_module_makes_no_training_loop() -> None:
    converted = _project("saliency_function_module", "explain")
    assert converted["attribution"] == (PROJECTS / "saliency_function_module" / "attribution.py").read_text()
    # The module-level loop evaluates: not a training loop counting one process's samples.
    assert "ACC919" not in converted["explain:codes"]
    assert 'accelerator.print(f"salient hits {hits}/{total}")' in converted["explain"]
