"""accumulate (ACC112): manual gradient accumulation → accelerator.accumulate."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.accumulate import AccumulateCodemod
from tests.codemods.support import apply, assert_rewrites, code

ACCUMULATE_CASES = [
    pytest.param(
        """
        def main():
            args = parser.parse_args()
            accelerator = Accelerator()
            for i, (data, target) in enumerate(train_loader):
                output = model(data)
                loss = F.nll_loss(output, target)
                loss = loss / args.accum_steps
                accelerator.backward(loss)
                if (i + 1) % args.accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
        """,
        """
        def main():
            args = parser.parse_args()
            accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps)
            for i, (data, target) in enumerate(train_loader):
                with accelerator.accumulate(model):
                    output = model(data)
                    loss = F.nll_loss(output, target)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
        """,
        id="divide-then-step-every-k",
    ),
    pytest.param(
        """
        ACCUM = 4
        accelerator = Accelerator()
        for step, batch in enumerate(train_loader):
            loss = model(**batch).loss
            loss /= ACCUM
            accelerator.backward(loss)
            if (step + 1) % ACCUM == 0 or step == len(train_loader) - 1:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                completed_steps += 1
        """,
        """
        ACCUM = 4
        accelerator = Accelerator(gradient_accumulation_steps=ACCUM)
        for step, batch in enumerate(train_loader):
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                    completed_steps += 1
        """,
        id="module-level-guard-also-counts",
    ),
]


@pytest.mark.parametrize("before, after", ACCUMULATE_CASES)
def test_accumulate(before: str, after: str) -> None:
    changes = assert_rewrites(AccumulateCodemod(), before, after)
    assert [c.code for c in changes] == ["ACC112"]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(
            """
            def main():
                accelerator = Accelerator()
                accum = compute_accumulation()
                for i, (data, target) in enumerate(train_loader):
                    loss = model(data, target) / accum
                    accelerator.backward(loss)
                    if (i + 1) % accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            """,
            id="k-computed-after-the-accelerator",
        ),
        pytest.param(
            """
            def main():
                accelerator = Accelerator()
                for i, (data, target) in enumerate(train_loader):
                    loss = model(data, target)
                    accelerator.backward(loss)
                    if (i + 1) % args.accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            """,
            id="no-loss-division",
        ),
    ],
)
def test_accumulate_reports_what_it_cannot_recognise(source: str) -> None:
    output, changes = apply(AccumulateCodemod(), code(source))
    assert output == code(source)
    assert [(c.code, c.fixed) for c in changes] == [("ACC912", False)]
    loop_line = next(i for i, line in enumerate(code(source).splitlines(), 1) if line.lstrip().startswith("for "))
    assert changes[0].line == loop_line


def test_a_generator_trained_every_n_critic_steps_is_not_accumulation() -> None:
    # WGAN: the critic steps every batch, the generator every n_critic batches with a backward
    # of its own inside that branch. Nothing accumulates: no rewrite, no ACC912.
    source = code(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def main():
            generator, critic = nn.Linear(2, 4), nn.Linear(4, 1)
            optimizer_g = torch.optim.Adam(generator.parameters())
            optimizer_d = torch.optim.Adam(critic.parameters())
            loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
            for i, (real,) in enumerate(loader):
                optimizer_d.zero_grad()
                d_loss = critic(generator(torch.randn(8, 2))).mean() - critic(real).mean()
                d_loss.backward()
                optimizer_d.step()
                if i % 5 == 0:
                    optimizer_g.zero_grad()
                    g_loss = -critic(generator(torch.randn(8, 2))).mean()
                    g_loss.backward()
                    optimizer_g.step()
        """
    )
    outcome = convert_module(cst.parse_module(source), Options(), source)
    assert "accumulate" not in outcome.module.code
    assert not {"ACC112", "ACC912"} & {change.code for change in outcome.changes}


def test_steps_held_in_a_local_alias_are_read_from_what_it_copies() -> None:
    # ``accum = args.accum_steps`` comes after the place the accelerator is created.
    source = """\
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accum-steps", type=int, default=4)
    args = parser.parse_args()
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accum = args.accum_steps
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    outcome = convert_module(cst.parse_module(source), Options())
    converted = outcome.module.code
    assert "accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps)" in converted
    assert "with accelerator.accumulate(model):" in converted
    assert "/ accum" not in converted
    assert not [change for change in outcome.changes if change.code == "ACC912"]
