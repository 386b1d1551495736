"""model_trains_itself (ACC925): a model class whose own method runs the backward leaves the
script unconverted and is reported; models trained by their caller, and training classes that are
not models, are converted as before."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from tests.codemods.support import code

FIT_METHOD = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x)

    def fit(self, loader, epochs=3):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        for _ in range(epochs):
            for x, y in loader:
                loss = nn.functional.mse_loss(self(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


class Wide(Regressor):
    pass


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = {built}
    model.fit(loader)
    print("done")


if __name__ == "__main__":
    main()
"""

CALLER_TRAINS = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 1)

    def forward(self, x):
        return self.body(x)


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def run(source: str) -> tuple[str, list[tuple[str, int]]]:
    outcome = convert_module(cst.parse_module(source), Options(), source)
    return outcome.module.code, [(change.code, change.line) for change in outcome.changes]


@pytest.mark.parametrize("built", ["Regressor()", "Wide()"], ids=["the class itself", "a subclass of it"])
def test_a_model_fitting_itself_leaves_the_script_as_it_is(built: str) -> None:
    source = code(FIT_METHOD.replace("{built}", built))
    output, changes = run(source)
    assert output == source
    class_line = source.splitlines().index("class Regressor(nn.Module):") + 1
    assert ("ACC925", class_line) in changes
    assert all(code.startswith("ACC9") for code, _ in changes)


def test_a_model_its_caller_trains_is_converted() -> None:
    output, changes = run(code(CALLER_TRAINS))
    assert "accelerator.backward(loss)" in output
    assert "ACC925" not in {code for code, _ in changes}


def test_a_model_class_never_constructed_here_does_not_stop_the_conversion() -> None:
    # A fit method nobody calls in this file (the class is used elsewhere) is not this script's
    # training: the script trains its own model the usual way.
    fit_class = FIT_METHOD.split("\n\n\ndef main():")[0]
    usual_training = "\n\n\ndef main():" + CALLER_TRAINS.split("\n\n\ndef main():")[1]
    output, changes = run(code(fit_class + usual_training.replace("Regressor()", "nn.Linear(8, 1)")))
    assert "accelerator.backward(loss)" in output
    assert "ACC925" not in {code for code, _ in changes}


WRAPPING_TRAINER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 1)

    def forward(self, x):
        return self.body(x)


class Trainer(nn.Module):
    def __init__(self, net, lr):
        super().__init__()
        self.net = net
        self.criterion = nn.MSELoss(){own_layer}
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=lr)

    def forward(self, x, y):
        return self.criterion(self.net(x), y)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = self(x, y)
        loss.backward()
        self.optimizer.step()


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    trainer = Trainer(Net(), 0.1)
    for x, y in loader:
        trainer.train_step(x, y)
    print("done")


if __name__ == "__main__":
    main()
"""


def test_an_nn_module_trainer_holding_the_model_it_trains_is_a_training_class() -> None:
    """An ``nn.Module`` trainer (faster-rcnn's ``FasterRCNNTrainer``) whose ``train_step`` runs
    the backward, holding the network handed to it (``Trainer(Net(), lr)``) and no layer of its
    own (a loss module aside): its parameters are the network's, so the trainer receives the
    accelerator and prepares the network and the optimizer in ``__init__`` (before, ACC925 and
    nothing converted)."""
    output, changes = run(code(WRAPPING_TRAINER.replace("{own_layer}", "")))
    assert "ACC925" not in {code for code, _ in changes}
    assert "        self.net, self.optimizer = self.accelerator.prepare(self.net, self.optimizer)\n" in output
    assert "        self.accelerator.backward(loss)\n" in output
    assert "    trainer = Trainer(Net(), 0.1, accelerator)\n" in output


def test_an_nn_module_trainer_with_layers_of_its_own_trains_itself() -> None:
    """The same trainer with a layer of its own (``self.head = nn.Linear(...)``): a model
    training itself, still reported (ACC925) and left as written."""
    source = code(WRAPPING_TRAINER.replace("{own_layer}", "\n        self.head = nn.Linear(1, 1)"))
    output, changes = run(source)
    assert output == source
    assert "ACC925" in {code for code, _ in changes}
