"""A model a function or a non-training class builds for itself, under the name the training
prepares (a ``predict()`` building its own ``model``), is never wrapped nor placed by ``prepare``:
the plan says so (``models_never_prepared``, asked through ``own_models``), so its moves stay and
its conversion is stable. What the training hands over, returns or prepares is not such a model."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.model.plan import plan_of
from tests.codemods.support import converted_stably

TRAINING = """\
def main():
    model = nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=8)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.save(model.state_dict(), "m.pt")
    {call}


if __name__ == "__main__":
    main()
"""

HEADER = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

"""

PREDICT_WRAPPED = """\
def predict(path):
    model = nn.Linear(4, 2)
    model.load_state_dict(torch.load(path))
    model = torch.nn.DataParallel(model).to(device)
    return model(torch.randn(2, 4).to(device))
"""

PREDICT_MOVED = """\
def predict(path):
    model = nn.Linear(4, 2)
    model.load_state_dict(torch.load(path))
    model = model.to(device)
    return model(torch.randn(2, 4).to(device))
"""

PREDICTOR = """\
class Predictor:
    def __init__(self, path):
        model = nn.Linear(4, 2)
        model.load_state_dict(torch.load(path))
        model = model.cuda()
        self.model = model
"""


def _script(helper: str, call: str) -> str:
    return HEADER + helper + "\n\n" + TRAINING.replace("{call}", call)


@pytest.mark.parametrize(
    ("helper", "call", "scope", "kept"),
    [
        (PREDICT_WRAPPED, 'predict("m.pt")', ("predict",), "model = model.to(device)"),
        (PREDICT_MOVED, 'predict("m.pt")', ("predict",), "model = model.to(device)"),
        (PREDICTOR, 'Predictor("m.pt")', ("Predictor", "__init__"), "model = model.cuda()"),
    ],
    ids=["wrapped-in-function", "moved-in-function", "moved-in-class"],
)
def test_a_model_built_for_itself_keeps_its_move_and_converts_stably(
    helper: str, call: str, scope: tuple[str, ...], kept: str
) -> None:
    source = _script(helper, call)
    assert "model" in plan_of(analyse(cst.parse_module(source))).own_models(scope)
    code, _ = converted_stably(source)
    assert kept in code, code


def test_the_ranks_wait_after_a_save_a_class_without_the_accelerator_reads() -> None:
    code, _ = converted_stably(_script(PREDICTOR, 'Predictor("m.pt")'))
    save = code.index("accelerator.save(")
    assert code[save:].split("\n", 2)[1].strip() == "accelerator.wait_for_everyone()", code


HANDED = """\
def evaluate(model):
    model = model.eval()
    return model(torch.randn(2, 4).to(device))
"""

RETURNED = """\
def build():
    model = nn.Linear(4, 2)
    model = model.to(device)
    return model
"""

CALLBACK = """\
class Callback:
    def __init__(self, model):
        self.model = model

    def run(self):
        model = self.model.eval()
        return model(torch.randn(2, 4).to(device))
"""


@pytest.mark.parametrize(
    ("helper", "call", "scope"),
    [
        (HANDED, "evaluate(model)", ("evaluate",)),
        (RETURNED, "build()", ("build",)),
        (CALLBACK, "Callback(model).run()", ("Callback", "run")),
    ],
    ids=["handed-the-prepared-model", "returning-its-model", "switching-a-held-model"],
)
def test_a_model_handed_over_returned_or_held_is_not_its_own(helper: str, call: str, scope: tuple[str, ...]) -> None:
    plan = plan_of(analyse(cst.parse_module(_script(helper, call))))
    assert "model" not in plan.own_models(scope)
