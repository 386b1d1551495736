"""checkpoint (ACC114): save once from the unwrapped model; load and call custom methods through it."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.rules.checkpoint import CheckpointCodemod
from tests.codemods.support import apply, assert_rewrites, code

CHECKPOINT_CASES = [
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model, optimizer = accelerator.prepare(model, optimizer)
            if args.save_model:
                torch.save(model.state_dict(), "mnist_cnn.pt")
        """,
        """
        def main():
            accelerator = Accelerator()
            model, optimizer = accelerator.prepare(model, optimizer)
            if args.save_model:
                accelerator.wait_for_everyone()
                accelerator.save(accelerator.unwrap_model(model).state_dict(), "mnist_cnn.pt")
        """,
        id="state-dict",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            # the whole model
            torch.save(model, "model.pt")
        """,
        """
        def main():
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            # the whole model
            accelerator.wait_for_everyone()
            accelerator.save(accelerator.unwrap_model(model), "model.pt")
        """,
        id="pickled-model-keeps-comment-above",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model.load_state_dict(torch.load("init.pt"))
            model, optimizer = accelerator.prepare(model, optimizer)
            best_state = copy.deepcopy(model.state_dict())
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}, path)
            model.load_state_dict(best_state)
        """,
        """
        def main():
            accelerator = Accelerator()
            accelerator.wait_for_everyone()
            model.load_state_dict(torch.load("init.pt"))
            model, optimizer = accelerator.prepare(model, optimizer)
            best_state = copy.deepcopy(accelerator.unwrap_model(model).state_dict())
            accelerator.wait_for_everyone()
            accelerator.save({"model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}, path)
            accelerator.unwrap_model(model).load_state_dict(best_state)
        """,
        id="checkpoint-dict-deepcopy-load-after-prepare-unwrapped-loads-wait",
    ),
    pytest.param(
        """
        def generate(model, accelerator):
            model.eval()
            hidden = model.init_hidden(1)
            model.rnn.flatten_parameters()
            sample = model.decode(z).cpu()
            model.fc = None
            return sample, model.parameters()
        """,
        """
        def generate(model, accelerator):
            model.eval()
            hidden = accelerator.unwrap_model(model).init_hidden(1)
            accelerator.unwrap_model(model).rnn.flatten_parameters()
            sample = accelerator.unwrap_model(model).decode(z).cpu()
            model.fc = None
            return sample, model.parameters()
        """,
        id="custom-methods-not-module-methods",
    ),
]


@pytest.mark.parametrize("before, after", CHECKPOINT_CASES)
def test_checkpoint(before: str, after: str) -> None:
    changes = assert_rewrites(CheckpointCodemod(), before, after)
    assert changes and all(c.code == "ACC114" and c.fixed for c in changes)


def test_checkpoint_reports_saves_without_the_accelerator() -> None:
    source = code(
        """
        def save_checkpoint(state, filename):
            torch.save(state, filename)
        """
    )
    output, changes = apply(CheckpointCodemod(), source)
    assert output == source
    assert [(c.code, c.line, c.fixed) for c in changes] == [("ACC914", 2, False)]


def test_checkpoint_uses_accessible_functions_from_the_analysis() -> None:
    """A function the training code calls gets the accelerator from the helpers pass."""
    source = code(
        """
        def sample(z):
            return model.decode(z)


        accelerator = Accelerator()
        model, optimizer = accelerator.prepare(model, optimizer)
        sample(torch.randn(2))
        """
    )
    output, _ = apply(CheckpointCodemod(), source)
    assert "return accelerator.unwrap_model(model).decode(z)" in output


def test_an_optimizer_received_as_a_parameter_is_not_taken_for_a_model() -> None:
    """A helper module's ``train(model, loader, optimizer)`` with no optimizer constructor in the
    file: ``optimizer.zero_grad()``/``optimizer.step()`` name an optimizer, never a model to unwrap."""
    from accel_convert.codemods import convert_module
    from accel_convert.codemods.engine.model import Options

    source = (
        "import torch\n\n\ndef train(model, loader, optimizer):\n    for data, target in loader:\n"
        "        optimizer.zero_grad()\n        loss = torch.nn.functional.cross_entropy(model(data), target)\n"
        "        loss.backward()\n        optimizer.step()\n"
    )
    code = convert_module(cst.parse_module(source), Options()).module.code
    assert "        optimizer.step()\n" in code
    assert "unwrap_model(optimizer)" not in code
