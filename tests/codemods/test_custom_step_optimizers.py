"""An optimizer stepped by methods of its own (SAM's ``first_step()``/``second_step()``, never
``step()``): the model it is built from is trained, so it is prepared and its backward goes through
the accelerator; the optimizer, no kind ``prepare`` knows, stays as it is. Before, only the loaders
were prepared: on two processes each trained its own copy of the model on its shard, with nothing
said. Where no model is recognised at all, that state is reported (ACC958)."""

from __future__ import annotations

import textwrap

from tests.codemods.support import converted_stably

HEADER = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sam import SAM

loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
model = nn.Linear(4, 2).cuda()
"""


def test_a_model_stepped_by_first_and_second_step_is_prepared() -> None:
    source = HEADER + textwrap.dedent(
        """\
        optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)
        for x, y in loader:
            nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            optimizer.first_step(zero_grad=True)
            nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            optimizer.second_step(zero_grad=True)
        """
    )
    text, codes = converted_stably(source)
    assert "model, loader = accelerator.prepare(model, loader)" in text
    assert "accelerator.prepare(optimizer" not in text and ", optimizer" not in text.split("prepare(")[1]
    assert text.count("accelerator.backward(") == 2
    assert "ACC958" not in codes


def test_an_object_built_from_parameters_outside_training_trains_nothing() -> None:
    # Its method runs in a loop with no backward: the model is only evaluated.
    source = HEADER + textwrap.dedent(
        """\
        stats = ParameterStats(model.parameters())
        with torch.no_grad():
            for x, y in loader:
                stats.record(model(x.cuda()))
        """
    )
    text, codes = converted_stably(source)
    assert "model, loader = accelerator.prepare" not in text
    assert "ACC958" not in codes


def test_an_unrecognised_model_over_a_prepared_loader_is_reported() -> None:
    # The optimizer's methods run outside the loop with the backward: nothing says which model
    # it trains, so nothing but the loader is prepared, and the backward is reported.
    source = HEADER + textwrap.dedent(
        """\
        optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)


        def update():
            optimizer.first_step(zero_grad=True)


        for x, y in loader:
            nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            update()
        """
    )
    _, codes = converted_stably(source)
    assert codes.count("ACC958") == 1


def test_input_gradients_of_an_attack_are_not_reported() -> None:
    source = HEADER + textwrap.dedent(
        """\
        model.eval()
        for x, y in loader:
            x = x.cuda()
            x.requires_grad = True
            nn.functional.cross_entropy(model(x), y.cuda()).backward()
            x_adv = x + 0.1 * x.grad.sign()
        """
    )
    _, codes = converted_stably(source)
    assert "ACC958" not in codes
