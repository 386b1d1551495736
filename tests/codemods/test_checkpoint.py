"""checkpoint (ACC114): save once from the unwrapped model; load and call custom methods through it."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.checkpoint import CheckpointCodemod
from accel_convert.converter.pipeline import convert_source
from tests.codemods.support import apply, assert_rewrites, code, convert, convert_text

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
            model.load_state_dict(torch.load("init.pt", map_location={"cuda:0": str(accelerator.device)}))
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
            accelerator.unwrap_model(model).fc = None
            return sample, model.parameters()
        """,
        id="custom-methods-not-module-methods",
    ),
]


@pytest.mark.parametrize("before, after", CHECKPOINT_CASES)
def test_checkpoint(before: str, after: str) -> None:
    changes = assert_rewrites(CheckpointCodemod(), before, after)
    assert changes and all(c.code == "ACC114" and c.fixed for c in changes)


@pytest.mark.parametrize(
    ("load", "converted"),
    [
        (
            'state = torch.load("best.pt")',
            'state = torch.load("best.pt", map_location={"cuda:0": str(accelerator.device)})',
        ),
        (
            'state = torch.load("best.pt", weights_only=True)',
            'state = torch.load("best.pt", weights_only=True, map_location={"cuda:0": str(accelerator.device)})',
        ),
        ('state = torch.load("best.pt", map_location="cpu")', None),
        ('state = torch.load("best.pt", "cpu")', None),
        ("state = torch.load(*paths)", None),
    ],
    ids=["no-location", "other-keywords", "keyword-location", "positional-location", "starred"],
)
def test_loads_map_gpu_0_to_the_process_device(load: str, converted: str | None) -> None:
    """Without a map_location every process would load what the main process saved from GPU 0
    onto GPU 0; tensors saved on the CPU stay there."""
    before = code(
        f"""
        def main():
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            {load}
        """
    )
    output, changes = apply(CheckpointCodemod(), before)
    assert f"    {converted or load}" in output.splitlines(), output
    located = [change for change in changes if "map_location" in change.message]
    assert len(located) == (1 if converted else 0)


def test_every_object_a_save_unwraps_is_reported() -> None:
    """A model saved whole is unwrapped and reported as an optimizer saved whole and a model
    saved in a dict are: it was unwrapped without a word (a branch of its own)."""
    before = textwrap.dedent(
        """
        def main():
            accelerator = Accelerator()
            model, optimizer = accelerator.prepare(model, optimizer)
            torch.save(model, "model.pt")
            torch.save(optimizer, "optimizer.pt")
            torch.save({"model": model}, "both.pt")
        """
    )
    output, changes = apply(CheckpointCodemod(), before)
    assert 'accelerator.save(accelerator.unwrap_model(model), "model.pt")' in output
    unwraps = [(change.line, change.message) for change in changes if "→ accelerator.save" not in change.message]
    assert unwraps == [
        (5, "model saved whole → accelerator.unwrap_model(model)"),
        (6, "optimizer saved whole → optimizer.optimizer (the object it wraps)"),
        (7, "model saved in a dict → accelerator.unwrap_model(model)"),
    ]


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


LOSS_METHOD = """\
class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def forward(self, x):
        return self.net(x)

    def compute_loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def describe(self):
        return "regressor"


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        loss = model.compute_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(model.describe())
"""


def test_a_loss_method_running_the_model_goes_through_the_wrapper_with_the_runtime() -> None:
    code, lines = convert(LOSS_METHOD)
    assert "loss = accelerator.as_forward(model).compute_loss(batch)" in lines
    # A method that does not run the model is called on the unwrapped model, as before.
    assert "accelerator.print(accelerator.unwrap_model(model).describe())" in lines
    again, _ = convert_text(code)
    assert again == code


def test_a_loss_method_running_the_model_is_reported_for_accelerate() -> None:
    code, lines = convert(LOSS_METHOD, Options(target="accelerate"))
    assert "loss = accelerator.unwrap_model(model).compute_loss(batch)" in lines
    assert "#ACC921" in lines and "as_forward" not in code


def test_a_load_from_an_opened_file_waits_before_the_file_is_opened() -> None:
    # The main process writes best.pt; the others must not open it before it exists.
    body = """\
def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    with open("best.pt", "wb") as f:
        torch.save(model, f)
    with open("best.pt", "rb") as f:
        model = torch.load(f, weights_only=False)
"""
    code, _ = convert(body)
    reading = code.index('    with open("best.pt", "rb") as f:\n')
    assert code[:reading].endswith("    accelerator.wait_for_everyone()\n")
    # One barrier between the write and the read: the save's and the load's are the same point.
    assert code.count("accelerator.wait_for_everyone()") == 1
    assert code.index("accelerator.save(") < code.index("accelerator.wait_for_everyone()") < reading
    again, _ = convert_text(code)
    assert again == code


def test_loads_in_a_row_wait_once_and_a_load_after_a_save_waits_again() -> None:
    body = """\
def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1)
    head = nn.Linear(1, 1)
    optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(head(model(x)), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), "model.pt")
    torch.save(head.state_dict(), "head.pt")
    model.load_state_dict(torch.load("model.pt"))
    head.load_state_dict(torch.load("head.pt"))
    torch.save(head.state_dict(), "head2.pt")
    head.load_state_dict(torch.load("head2.pt"))
"""
    code, _ = convert(body)
    lines = [line.strip() for line in code.splitlines()]
    first = next(i for i, line in enumerate(lines) if 'torch.load("model.pt"' in line)
    # Nothing is written between two loads in a row: the barrier before the first serves both.
    assert lines[first - 1] == "accelerator.wait_for_everyone()"
    assert 'torch.load("head.pt"' in lines[first + 1]
    last = next(i for i, line in enumerate(lines) if 'torch.load("head2.pt"' in line)
    assert lines[last - 1] == "accelerator.wait_for_everyone()"
    again, _ = convert_text(code)
    assert again == code


def test_an_export_after_training_traces_the_unwrapped_model() -> None:
    # On the main process alone, a forward through the DDP wrapper waits for the other ranks.
    body = """\
def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    torch.onnx.export(model, (torch.zeros(1, 4),), "model.onnx")
    scripted = torch.jit.script(model)
"""
    code, lines = convert(body)
    assert 'torch.onnx.export(accelerator.unwrap_model(model), (torch.zeros(1, 4),), "model.onnx")' in lines
    assert "scripted = torch.jit.script(accelerator.unwrap_model(model))" in lines
    again, _ = convert_text(code)
    assert again == code


def test_no_barrier_in_a_branch_on_a_value_each_rank_sums_over_its_own_shard() -> None:
    # ``val_loss`` adds up this rank's batches (nothing gathers it): ranks disagree on the branch,
    # and a barrier there would wait for ranks that never come.
    body = """\
def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(2):
        val_loss = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            val_loss += loss.item()
        if val_loss < best:
            best = val_loss
            torch.save(model.state_dict(), "best.pt")
"""
    code, lines = convert(body)
    assert 'accelerator.save(accelerator.unwrap_model(model).state_dict(), "best.pt")' in lines
    assert "accelerator.wait_for_everyone()" not in lines


def test_a_class_of_the_file_handed_the_prepared_model_reports_its_save() -> None:
    # Bjarten's EarlyStopping in the training script: no accelerator reaches its methods, so its
    # ``torch.save(model.state_dict(), ...)`` is reported (every rank writes DDP's keys).
    source = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class EarlyStopping:
    def __init__(self, path="checkpoint.pt"):
        self.path = path

    def __call__(self, val_loss, model):
        torch.save(model.state_dict(), self.path)


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stopper = EarlyStopping()
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        stopper(loss.item(), model)


if __name__ == "__main__":
    main()
"""
    _, changes = convert_text(source)
    assert [(change.line, change.fixed) for change in changes if change.code == "ACC914"] == [(10, False)]
    handed = [change for change in changes if change.code == "ACC914"]
    assert "handed the prepared model" in handed[0].message
    # Handed no model, its save still runs on every rank: reported, without the claim.
    _, unrelated = convert_text(source.replace("stopper(loss.item(), model)", "stopper(loss.item(), loader)"))
    reports = [change for change in unrelated if change.code == "ACC914"]
    assert [(change.line, change.fixed) for change in reports] == [(10, False)]
    assert "where the accelerator is not reachable: every rank writes this file" in reports[0].message


def test_saves_in_a_row_wait_once_and_keep_their_comments() -> None:
    body = """\
def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    encoder = nn.Linear(4, 4)
    decoder = nn.Linear(4, 1)
    optimizer = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(decoder(encoder(x)), y).backward()
            optimizer.step()
        torch.save(decoder.state_dict(), "decoder.pt")
        # the encoder too
        torch.save(encoder.state_dict(), "encoder.pt")
"""
    code, lines = convert(body)
    assert lines.count("accelerator.wait_for_everyone()") == 1
    save_decoder = lines.index('accelerator.save(accelerator.unwrap_model(decoder).state_dict(), "decoder.pt")')
    assert lines[save_decoder - 1] == "accelerator.wait_for_everyone()"
    assert lines[save_decoder + 1 : save_decoder + 3] == [
        "# the encoder too",
        'accelerator.save(accelerator.unwrap_model(encoder).state_dict(), "encoder.pt")',
    ]


def test_a_model_attribute_in_implicitly_joined_f_strings_is_read_through_unwrap_model() -> None:
    """U-Net's ``logging.info(f"..." f"{model.n_channels} input channels")`` after prepare: the
    DDP wrapper has no ``n_channels`` (AttributeError on two processes). Joined strings were taken
    for plain literals and the line skipped."""
    body = (
        "class UNet(nn.Module):\n"
        "    def __init__(self, n_channels):\n"
        "        super().__init__()\n"
        "        self.n_channels = n_channels\n"
        "        self.fc = nn.Linear(n_channels, 1)\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n\n\n"
        "def train(model, loader):\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n"
        "        optimizer.zero_grad()\n"
        "        nn.functional.mse_loss(model(x), y).backward()\n"
        "        optimizer.step()\n\n\n"
        'if __name__ == "__main__":\n'
        "    loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)\n"
        "    model = UNet(n_channels=3)\n"
        "    model = model.to('cpu')\n"
        '    print("Network:\\n" f"\\t{model.n_channels} input channels")\n'
        "    train(model, loader)\n"
    )
    _, lines = convert(body)
    assert 'accelerator.print("Network:\\n" f"\\t{accelerator.unwrap_model(model).n_channels} input channels")' in lines


RETURNING_MAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


{caller}
"""


def test_a_returned_model_the_main_block_saves_is_unwrapped_and_saved_once():
    caller = 'if __name__ == "__main__":\n    model = main()\n    torch.save(model.state_dict(), "m.pt")\n'
    output, changes = convert_text(RETURNING_MAIN.format(caller=caller))
    assert "    return accelerator.unwrap_model(model)\n" in output
    assert (
        '    if PartialState().is_main_process:\n        torch.save(model.state_dict(), "m.pt")\n'
        "    PartialState().wait_for_everyone()\n"
    ) in output
    assert "from accel_convert.runtime import Accelerator, PartialState\n" in output
    assert not [change for change in changes if change.code == "ACC914"]


@pytest.mark.parametrize(
    "caller",
    [
        # Trained further: the wrapper must stay (its gradients are averaged).
        'if __name__ == "__main__":\n    model = main()\n    model(torch.randn(2, 4)).sum().backward()\n'
        '    torch.save(model.state_dict(), "m.pt")\n',
        # Saved under an ``if``: not a statement of its own to guard.
        'if __name__ == "__main__":\n    model = main()\n    if True:\n        torch.save(model.state_dict(), "m.pt")\n',
        # Called from another function too: that caller may train it.
        'def again():\n    return main()\n\n\nif __name__ == "__main__":\n    model = main()\n'
        '    torch.save(model.state_dict(), "m.pt")\n',
    ],
    ids=["trained_further", "save_under_if", "called_elsewhere"],
)
def test_a_returned_model_is_left_wrapped_where_unwrapping_is_not_sound(caller: str):
    output, changes = convert_text(RETURNING_MAIN.format(caller=caller))
    assert "unwrap_model(model)" not in output.split("def main", 1)[1].split("\n\n\n", 1)[0]
    assert "PartialState" not in output
    assert [change for change in changes if change.code == "ACC914"]


#: A saliency map of a trained classifier, loaded from disk: the script trains nothing, so it gets
#: no accelerator and its load needs no ``map_location`` for one (an ``accelerator.device`` written
#: there, where no accelerator exists, made the guard leave the rewrite out and report ACC937).
LOAD_WITHOUT_TRAINING = {
    "module-level": """
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
        model.load_state_dict(torch.load("classifier.pt"))
        model.eval()
        images = torch.randn(4, 8, requires_grad=True)
        model(images).max(dim=1).values.sum().backward()
        print(images.grad.abs().mean(dim=0))
    """,
    "in-a-function": """
        def main():
            model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
            model.load_state_dict(torch.load("classifier.pt"))
            model.eval()
            images = torch.randn(4, 8, requires_grad=True)
            model(images).max(dim=1).values.sum().backward()
            print(images.grad.abs().mean(dim=0))


        if __name__ == "__main__":
            main()
    """,
    "in-a-class": """
        class Explainer:
            def __init__(self, path):
                self.model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
                self.model.load_state_dict(torch.load(path))
                self.model.eval()

            def saliency(self, images):
                images.requires_grad_(True)
                self.model(images).max(dim=1).values.sum().backward()
                return images.grad.abs()


        print(Explainer("classifier.pt").saliency(torch.randn(4, 8)).mean(dim=0))
    """,
}


@pytest.mark.parametrize("body", LOAD_WITHOUT_TRAINING.values(), ids=LOAD_WITHOUT_TRAINING.keys())
def test_a_load_in_a_script_that_trains_nothing_stays_as_written(body: str) -> None:
    source = "import torch\nimport torch.nn as nn\n\n" + textwrap.dedent(body).lstrip("\n")
    conversion = convert_source(source.encode(), Options(), path="saliency.py")
    assert conversion.output.decode() == source
    assert not conversion.changes, [(change.code, change.message) for change in conversion.changes]


#: A model class of the script keeping a layer as ``self.module`` (a residual block around it):
#: after ``prepare`` the DDP wrapper's own ``module`` (the block) hides it, so the script's
#: ``block.module.weight`` must read through ``accelerator.unwrap_model``.
OWN_MODULE_ATTRIBUTE = {
    "module-level": (
        """
        block = Residual(nn.Linear(8, 8))
        optimizer = torch.optim.SGD(block.parameters(), lr=0.1)
        for data, target in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(block(data), target).backward()
            optimizer.step()
        print(block.module.weight.norm())
        """,
        "accelerator.unwrap_model(block).module.weight.norm()",
    ),
    "in-a-function": (
        """
        def main():
            block = Residual(nn.Linear(8, 8))
            optimizer = torch.optim.SGD(block.parameters(), lr=0.1)
            for data, target in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(block(data), target).backward()
                optimizer.step()
            print(block.module.weight.norm())


        main()
        """,
        "accelerator.unwrap_model(block).module.weight.norm()",
    ),
    "in-a-class": (
        """
        class Trainer:
            def __init__(self):
                self.block = Residual(nn.Linear(8, 8))
                self.optimizer = torch.optim.SGD(self.block.parameters(), lr=0.1)

            def train(self):
                for data, target in loader:
                    self.optimizer.zero_grad()
                    nn.functional.mse_loss(self.block(data), target).backward()
                    self.optimizer.step()
                print(self.block.module.weight.norm())


        Trainer().train()
        """,
        "self.accelerator.unwrap_model(self.block).module.weight.norm()",
    ),
}

RESIDUAL = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Residual(nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return x + self.module(x)


loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 8)), batch_size=8)
"""


@pytest.mark.parametrize(("body", "read"), OWN_MODULE_ATTRIBUTE.values(), ids=OWN_MODULE_ATTRIBUTE.keys())
def test_a_models_own_module_attribute_is_read_from_the_unwrapped_model(body: str, read: str) -> None:
    source = RESIDUAL + textwrap.dedent(body)
    output = convert_source(source.encode(), Options(), path="residual.py").output.decode()
    assert read in output, output


TWO_MODELS_ONE_BLOCK = """
first = nn.Linear(8, 4)
first.head = nn.Linear(4, 1)
first = first.to(device)
opt_first = torch.optim.SGD(first.parameters(), lr=0.1)
fit(first, opt_first)

second = nn.Linear(8, 4)
width = second.out_features
second.head = nn.Linear(width, 1)
second = second.to(device)
opt_second = torch.optim.SGD(second.head.parameters(), lr=0.1)
fit(second, opt_second)
print(second.out_features)
"""

FIT = """
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def fit(model, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y[:, :4]).backward()
        optimizer.step()

"""


def _in_a_function(body: str) -> str:
    return "def main():\n" + textwrap.indent(body, "    ") + "\n\nmain()\n"


def _under_the_main_guard(body: str) -> str:
    return 'if __name__ == "__main__":\n' + textwrap.indent(body, "    ")


@pytest.mark.parametrize("shape", [str, _in_a_function, _under_the_main_guard], ids=["module", "function", "guard"])
def test_a_model_prepared_below_another_models_prepare_is_read_as_built_until_its_own(shape) -> None:
    # The first model's prepare line is behind; the second's is ahead: its attributes are the
    # script's own module's until then, and the wrapped module's after.
    source = RESIDUAL + FIT + shape(TWO_MODELS_ONE_BLOCK)
    output = convert_source(source.encode(), Options(), path="two_models.py").output.decode()
    assert "width = second.out_features" in output, output
    assert "torch.optim.SGD(second.head.parameters()" in output, output
    assert "second, opt_second = accelerator.prepare(second, opt_second)" in output, output
    assert "accelerator.unwrap_model(second).out_features)" in output, output


#: A script that trains in ``main()`` and also has an inference path the training never calls:
#: what that path builds (or loads) is the script's own model, never a prepared one.
INFERENCE_PATH = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def encode(self, x):
        return self.body(x)

    def forward(self, x):
        return self.head(self.encode(x))


{inference}


def main():
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), "net.pt")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--infer", action="store_true")
    if parser.parse_args().infer:
        {entry}
    else:
        main()
"""


@pytest.mark.parametrize(
    ("inference", "entry"),
    [
        # Built in the inference function, its custom method called in a helper it hands it to.
        (
            "def decode(model, x):\n    return model.encode(x)\n\n\n"
            "def infer():\n    model = Net().to('cpu')\n    model.load_state_dict(torch.load('net.pt'))\n"
            "    print(decode(model, torch.randn(1, 4)))",
            "infer()",
        ),
        # Loaded whole from disk in the inference function itself.
        (
            "def infer(path):\n    model = torch.load(path)\n    print(model.encode(torch.randn(1, 4)))",
            "infer('net.pt')",
        ),
        # Handed down two helpers from where it is built.
        (
            "def encode_all(model, xs):\n    return [model.encode(x) for x in xs]\n\n\n"
            "def report(model):\n    print(encode_all(model, [torch.randn(1, 4)]))\n\n\n"
            "def infer():\n    model = Net()\n    model.load_state_dict(torch.load('net.pt'))\n    report(model)",
            "infer()",
        ),
    ],
    ids=["helper_parameter", "loaded_whole", "two_helpers_down"],
)
def test_a_model_an_inference_path_builds_itself_needs_no_unwrap(inference: str, entry: str):
    """langtrans's ``inference()`` builds its own ``Translator`` and hands it to
    ``greedy_decode(model, ...)``: the training never calls either, so no prepared model reaches
    them; ``model.encode`` there is the model's own method (no ACC914 "needs unwrap_model")."""
    output, changes = convert_text(INFERENCE_PATH.format(inference=inference, entry=entry))
    assert "def main" in output and "accelerator.prepare(" in output
    assert not [change for change in changes if change.code == "ACC914" and "unwrap_model" in change.message]
    assert "unwrap_model(model).encode" not in output


def test_a_model_returned_by_the_training_stays_unknown_on_the_inference_path():
    """``model = main()`` hands the prepared model to code the accelerator does not reach: its
    custom method there still needs ``unwrap_model`` (reported, ACC914)."""
    inference = "def infer():\n    model = main()\n    print(model.encode(torch.randn(1, 4)))"
    source = INFERENCE_PATH.format(inference=inference, entry="infer()").replace(
        '    torch.save(model.state_dict(), "net.pt")\n', "    return model\n"
    )
    _, changes = convert_text(source)
    assert [change for change in changes if change.code == "ACC914" and "model.encode" in change.message]
