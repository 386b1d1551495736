"""An attribute set to a constant until a method builds it (``self.unet = None`` and ``self.optimizer
= None`` in ``__init__``, ``build_model()`` assigning both; LeeJunHyun's Image_Segmentation) holds
no object of ``__init__``'s: the constant is no name a role flows from. Before, ``None`` became a
model (it flowed out of ``self.unet``) and with it every attribute set to ``None``: the optimizer was
prepared as a model and stepped as ``accelerator.unwrap_model(self.optimizer).step()``."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.model import runner

SOLVER = """\
import torch
import torch.nn as nn
from torch import optim


class Solver:
    def __init__(self, loader):
        self.loader = loader
        {placeholders}
        self.build_model()

    def build_model(self):
        self.unet = nn.Linear(4, 2)
        self.optimizer = optim.Adam(list(self.unet.parameters()), 0.1)

    def train(self):
        for x, y in self.loader:
            loss = nn.functional.cross_entropy(self.unet(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
"""


@pytest.mark.parametrize(
    "placeholders",
    [
        "self.unet = None\n        self.optimizer = None",
        "self.unet, self.optimizer = None, None",
        "self.unet = self.optimizer = None",
        "self.unet = None\n        self.optimizer = None\n        self.ready = False",
    ],
)
def test_attributes_set_to_a_constant_take_no_role_from_it(placeholders: str) -> None:
    source = SOLVER.format(placeholders=placeholders)
    facts = runner.analyse(cst.parse_module(source), source)
    assert "self.unet" in facts.models
    assert "self.optimizer" in facts.optimizers
    assert not {"None", "False", "self.optimizer", "self.ready"} & set(facts.models)
