"""prepare (ACC103): models, optimizers, loaders and schedulers through accelerator.prepare (hard
cases 4, 5, 11 and 14 of shared/reference/conversion-cases.md, and objects built by factories)."""

from __future__ import annotations

import pytest

from tests.codemods.support import check_expectations, convert, convert_text

SCHEDULERS = """\
from torch.optim.lr_scheduler import StepLR, OneCycleLR

def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    per_epoch = StepLR(optimizer, step_size=1)
    per_batch = OneCycleLR(optimizer, max_lr=0.1, steps_per_epoch=len(loader), epochs=2)
    for epoch in range(2):
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
            per_batch.step()
        per_epoch.step()
"""


SIZED_FROM_LOADER = """\
from transformers import get_linear_schedule_with_warmup

def main():
    train_loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    total_steps = 3 * len(train_loader)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, total_steps)
    for epoch in range(3):
        for (x,) in train_loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            scheduler.step()
"""


GAN = """\
def main():
    dataloader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    device = torch.device("cuda:0")
    netG = nn.Linear(2, 4).to(device)
    netD = nn.Linear(4, 1).to(device)
    optimizerD = torch.optim.Adam(netD.parameters())
    optimizerG = torch.optim.Adam(netG.parameters())
    for (real,) in dataloader:
        real = real.to(device)
        noise = torch.randn(2, 2, device=device)
        errD_real = netD(real).mean()
        errD_real.backward()
        fake = netG(noise)
        errD_fake = netD(fake.detach()).mean()
        errD_fake.backward(retain_graph=True)
        optimizerD.step()
        errG = -netD(fake).mean()
        errG.backward()
        optimizerG.step()
"""


TRICKY_NAMES = """\
import torch.optim as optim

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def train(self, mode=True):
        print("switching mode")
        return super().train(mode)

    def forward(self, x):
        return self.fc(x)

def main():
    env = Environment()
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2)
    model = Tagger()
    opt = optim.SGD(model.parameters(), lr=0.1)
    for input, target in loader:
        state = env.step(1)
        loss = nn.functional.cross_entropy(model(input), target); loss.backward(); opt.step()
"""


HF_MODEL_FROM_CONFIG = """\
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

def main():
    tokenizer = BertTokenizerFast("vocab.txt")
    config = BertConfig(vocab_size=tokenizer.vocab_size, num_labels=2)
    model = BertForSequenceClassification(config)
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for (x,) in loader:
        model(x).loss.backward()
        optimizer.step()
"""

SWA = """\
from torch.optim.swa_utils import SWALR, AveragedModel

def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    swa_model = AveragedModel(model)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(3):
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
        swa_model.update_parameters(model)
        swa_scheduler.step()
"""

PROGRESS_BAR_LOOP = """\
from torch.optim.lr_scheduler import OneCycleLR
from tqdm import tqdm

def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = OneCycleLR(optimizer, max_lr=0.1, total_steps=2 * len(loader))
    for epoch in range(2):
        pbar = tqdm(loader)
        for (x,) in pbar:
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
"""

CASES = {
    # transformers' model, config and tokenizer classes are not optimizers (only AdamW, Adafactor).
    "transformers model from config": (
        HF_MODEL_FROM_CONFIG,
        ["model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"],
    ),
    # SWA: the averaged model is a copy of the prepared model, SWALR a scheduler stepped per epoch.
    "swa": (
        SWA,
        [
            "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
            "swa_model = AveragedModel(accelerator.unwrap_model(model))",
        ],
    ),
    # A loop over a progress bar bound to a name is a loop over its loader: stepped per batch.
    "progress bar bound to a name": (
        PROGRESS_BAR_LOOP,
        ["model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)"],
    ),
    # Hard case 4: a per-epoch StepLR is not prepared; a per-batch scheduler is.
    "4 per-epoch scheduler": (
        SCHEDULERS,
        [
            "model, optimizer, loader, per_batch = accelerator.prepare(model, optimizer, loader, per_batch)",
            "per_epoch.step()",
        ],
    ),
    # Hard case 5: a scheduler sized from len(loader) is built before prepare and prepared.
    "5 sized from loader": (
        SIZED_FROM_LOADER,
        [
            "model, optimizer, train_loader, scheduler = accelerator.prepare(",
            "total_steps = 3 * len(train_loader)",
        ],
    ),
    # Hard case 11: both models, both optimizers and the loader in one prepare; every backward.
    "11 gan": (
        GAN,
        [
            "netG, netD, optimizerD, optimizerG, dataloader = accelerator.prepare(",
            "accelerator.backward(errD_real)",
            "accelerator.backward(errD_fake, retain_graph=True)",
            "accelerator.backward(errG)",
            "noise = torch.randn(2, 2, device=device)",
            "-real = real.to(device)",
        ],
    ),
    # Hard case 14: names that fool pattern matching.
    "14 tricky names": (
        TRICKY_NAMES,
        [
            "model, opt, loader = accelerator.prepare(model, opt, loader)",
            "state = env.step(1)",
            "loss = nn.functional.cross_entropy(model(input), target); accelerator.backward(loss); opt.step()",
            'print("switching mode")',
        ],
    ),
}


@pytest.mark.parametrize(("body", "expectations"), CASES.values(), ids=CASES.keys())
def test_hard_cases(body: str, expectations: list[str]) -> None:
    check_expectations(body, expectations)


def test_optimizer_built_by_a_factory_function() -> None:
    body = (
        "def make_optimizer(model, lr):\n    return torch.optim.SGD(model.parameters(), lr=lr)\n\n"
        "def main():\n    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    net = nn.Linear(4, 1)\n    opt = make_optimizer(net, 0.1)\n"
        "    for (x,) in loader:\n        net(x).sum().backward()\n        opt.step()\n"
    )
    _, lines = convert(body)
    assert "net, opt, loader = accelerator.prepare(net, opt, loader)" in lines


@pytest.mark.parametrize(
    "factory_return",
    [
        "return DataLoader(data, batch_size=2, shuffle=True), DataLoader(data, batch_size=2)",
        "train_dl = DataLoader(data, batch_size=2, shuffle=True)\n    valid_dl = DataLoader(data, batch_size=2)\n"
        "    return train_dl, valid_dl",
    ],
    ids=["returns-constructors", "returns-names-bound-to-loaders"],
)
def test_loaders_built_by_a_factory_function_are_prepared(factory_return: str) -> None:
    """``tr, te = build_loaders(...)`` (the side_effects fixture): the names at the call site are
    loaders, whatever the factory calls them inside."""
    body = (
        "def build_loaders():\n    data = TensorDataset(torch.randn(8, 4), torch.zeros(8))\n"
        f"    {factory_return}\n\n"
        "def main():\n    tr, te = build_loaders()\n    net = nn.Linear(4, 1)\n"
        "    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "    for x, y in tr:\n        net(x).sum().backward()\n        opt.step()\n"
    )
    _, lines = convert(body)
    assert "net, opt, tr, te = accelerator.prepare(net, opt, tr, te)" in lines


LOADER_PER_EPOCH = """\
def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    val_data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        loader = DataLoader(data, batch_size=8 * (epoch + 1), shuffle=True)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        if epoch % 2 == 0:
            val_loader = DataLoader(val_data, batch_size=4)
            with torch.no_grad():
                total = sum(nn.functional.mse_loss(model(x.to(device)), y.to(device)).item() for x, y in val_loader)
"""


def test_a_loader_built_inside_the_training_loop_is_prepared_where_it_is_built() -> None:
    # Left unprepared, its batches would stay whole on every rank and, with the batch moves
    # gone, on the CPU while the model is on the GPU.
    check_expectations(
        LOADER_PER_EPOCH,
        [
            "model, optimizer = accelerator.prepare(model, optimizer)",
            "loader = accelerator.prepare(loader)",
            "val_loader = accelerator.prepare(val_loader)",
            "-x, y = x.to(device), y.to(device)",
        ],
    )
    code, _ = convert(LOADER_PER_EPOCH)
    built = code.index("        loader = DataLoader(data")
    assert code.index("        loader = accelerator.prepare(loader)\n") > built
    assert "            val_loader = accelerator.prepare(val_loader)\n" in code  # inside the if


def test_a_model_whose_optimizer_is_built_inline_as_an_argument_is_prepared() -> None:
    body = """\
class Fitter:
    def __init__(self, model, loader, optimizer):
        self.model, self.loader, self.optimizer = model, loader, optimizer

    def fit(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()


loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
model = nn.Linear(4, 1)
Fitter(model, loader, torch.optim.SGD(model.parameters(), lr=0.1)).fit()
"""
    # Unprepared, the model would train on every rank without DDP averaging its gradients.
    check_expectations(body, ["model, loader = accelerator.prepare(model, loader)"])


TRAIN_MODEL_FROM_MAIN_GUARD = """\
def train_model(model, device, epochs, batch_size, learning_rate):
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=learning_rate)
    for epoch in range(epochs):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(4, 1)
    model.to(device=device)
    train_model(model=model, device=device, epochs=2, batch_size=8, learning_rate=0.1)
"""


def test_a_training_function_given_the_model_by_the_main_block_prepares_only_what_it_builds() -> None:
    """The U-Net shape: ``__main__`` builds the model and calls ``train_model(model=model, ...)``,
    which builds the loader and the optimizer. The model is prepared where it is built (one
    accelerator, there), the loader and optimizer inside the function, before its loop."""
    check_expectations(
        TRAIN_MODEL_FROM_MAIN_GUARD,
        [
            "model = accelerator.prepare(model)",
            "optimizer, train_loader = accelerator.prepare(optimizer, train_loader)",
            "-x, y = x.to(device), y.to(device)",
        ],
    )
    code, _ = convert(TRAIN_MODEL_FROM_MAIN_GUARD)
    assert code.count("Accelerator()") == 1
    assert code.index("    accelerator = Accelerator()") > code.index('if __name__ == "__main__":')
    assert "accelerator.prepare(model, optimizer" not in code  # the parameter is not prepared again


def test_a_model_built_after_the_training_began_is_prepared_where_it_is_built() -> None:
    """Knowledge distillation: ``train_model(student, ...)`` after a first ``train_model(...)``,
    with the student built between the two: it is prepared right after it is built (before,
    nothing prepared it and each rank trained its own copy, reported as ACC926)."""
    body = TRAIN_MODEL_FROM_MAIN_GUARD + (
        "    student = nn.Linear(4, 1)\n    train_model(student, device, epochs=2, batch_size=8, learning_rate=0.1)\n"
    )
    check_expectations(body, ["student = accelerator.prepare(student)", "model = accelerator.prepare(model)"])
    code, lines = convert(body)
    assert "#ACC926" not in lines
    assert code.index("student = accelerator.prepare(student)") < code.index("train_model(student, device")


def test_a_model_bound_twice_in_the_block_handing_it_over_is_reported() -> None:
    """Two students under one name: which binding a single prepare would meet is not one object,
    so neither is prepared and the conversion says so rather than guess."""
    body = TRAIN_MODEL_FROM_MAIN_GUARD + (
        "    student = nn.Linear(4, 1)\n    train_model(student, device, epochs=2, batch_size=8, learning_rate=0.1)\n"
        "    student = nn.Linear(4, 1)\n    train_model(student, device, epochs=2, batch_size=8, learning_rate=0.1)\n"
    )
    _, lines = convert(body)
    assert lines.count("#ACC926") == 2
    assert "student = accelerator.prepare(student)" not in lines


MODEL_ABOVE_THE_MAIN_BLOCK = """\
def train(net, loader, lr):
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()


net = nn.Linear(4, 1)

if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    train(net, loader, 0.1)
"""


def test_a_model_built_above_the_main_block_is_prepared_in_it() -> None:
    """d2l's shape: ``net = nn.Sequential(...)`` at module level, ``train_ch6(net, ...)`` called from
    the ``__main__`` block. The block runs at module level, so the model is prepared there with
    the loader (it was left out: every rank trained its own copy)."""
    check_expectations(
        MODEL_ABOVE_THE_MAIN_BLOCK,
        ["net, loader = accelerator.prepare(net, loader)", "optimizer = accelerator.prepare(optimizer)"],
    )


def test_a_module_level_model_trained_by_main_is_prepared_where_it_is_built() -> None:
    """A module-level model trained by ``main()``: a prepare inside ``main`` would make ``net``
    local to it, so the module, which builds it, is the home: the accelerator is created there
    and ``net`` prepared after it is built; ``main()`` prepares the optimizer and the loader it
    builds itself. (Before: reported, ACC926, with nothing prepared for it; earlier still, silent.)"""
    body = (
        "net = nn.Linear(4, 1)\n\n"
        "def main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)\n"
        "    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n"
        "        optimizer.zero_grad()\n"
        "        nn.functional.mse_loss(net(x), y).backward()\n"
        "        optimizer.step()\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    )
    code, lines = convert(body)
    assert "#ACC926" not in lines
    assert "net = accelerator.prepare(net)" in lines
    assert "optimizer, loader = accelerator.prepare(optimizer, loader)" in lines
    assert lines.index("accelerator = Accelerator()") < lines.index("net = nn.Linear(4, 1)")


def test_a_scheduler_stepped_per_epoch_under_a_parameter_name_is_not_prepared() -> None:
    """The transfer-learning tutorial's ``train_model(model, criterion, optimizer, scheduler,
    ...)``: ``scheduler.step()`` after the batch loop steps ``exp_lr_scheduler`` once per epoch;
    prepared, it would step once per process."""
    body = (
        "def train_model(model, optimizer, scheduler, loader, num_epochs):\n"
        "    for epoch in range(num_epochs):\n"
        "        for x, y in loader:\n"
        "            optimizer.zero_grad()\n"
        "            nn.functional.mse_loss(model(x), y).backward()\n"
        "            optimizer.step()\n"
        "        scheduler.step()\n\n"
        "def main():\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)\n"
        "    net = nn.Linear(4, 1)\n"
        "    optimizer_ft = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "    exp_lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer_ft, step_size=2)\n"
        "    train_model(net, optimizer_ft, exp_lr_scheduler, loader, 4)\n"
    )
    _, lines = convert(body)
    assert "net, optimizer_ft, loader = accelerator.prepare(net, optimizer_ft, loader)" in lines


def test_only_the_loaders_a_factory_returns_in_a_tuple_are_loaders() -> None:
    """``n_words, _, loader = get_dataloader(...)`` (the seq2seq tutorial): the vocabulary sizes
    are not loaders, so they are not prepared."""
    body = (
        "def get_dataloader(batch_size):\n"
        "    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))\n"
        "    return 4, 1, DataLoader(data, batch_size=batch_size)\n\n"
        "def main():\n"
        "    n_in, n_out, loader = get_dataloader(2)\n"
        "    net = nn.Linear(n_in, n_out)\n"
        "    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n        nn.functional.mse_loss(net(x), y).backward()\n        opt.step()\n"
    )
    _, lines = convert(body)
    assert "net, opt, loader = accelerator.prepare(net, opt, loader)" in lines


def test_a_model_rebuilt_after_training_is_moved_to_the_device_of_the_prepared_batches() -> None:
    """The CIFAR-10 tutorial: ``net = Net()`` and ``load_state_dict`` after training, then
    evaluated on the prepared test loader, whose batches are on the accelerator's device."""
    body = (
        "train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)\n"
        "test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)\n"
        "net = nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for x, y in train_loader:\n    nn.functional.mse_loss(net(x), y).backward()\n    optimizer.step()\n"
        "torch.save(net.state_dict(), 'net.pt')\n"
        "net = nn.Linear(4, 1)\n"
        "net.load_state_dict(torch.load('net.pt'))\n"
        "with torch.no_grad():\n    for x, y in test_loader:\n        print(net(x).sum())\n"
    )
    _, lines = convert(body)
    built = [index for index, line in enumerate(lines) if line == "net = nn.Linear(4, 1)"]
    assert len(built) == 2
    assert lines[built[1] + 1] == "net.to(accelerator.device)"  # the rebuilt one, right after it
    assert lines.count("net.to(accelerator.device)") == 1  # the trained one is prepared


def test_a_model_handed_back_by_the_training_function_is_not_moved_again() -> None:
    """``model = train_model(model, ...)`` returns the prepared model it trained: a move after it
    would be one the next conversion removes (an unstable rewrite), and is not needed."""
    body = (
        "def train_model(model, loader, optimizer):\n"
        "    for x, y in loader:\n        nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n"
        "    return model\n\n\n"
        "loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)\n"
        "model = nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model = train_model(model, loader, optimizer)\n"
        "print(model(torch.randn(2, 4)).sum())\n"
    )
    code, lines = convert(body)
    assert "model.to(accelerator.device)" not in lines
    assert convert_text(code)[0] == code


def test_a_model_built_under_a_flag_and_handed_to_the_training_function_is_prepared_in_its_branch() -> None:
    """A single prepare after the branch could meet an unbound name: the model is prepared inside
    the branch that builds it (before, it was left unprepared)."""
    body = TRAIN_MODEL_FROM_MAIN_GUARD + (
        "    if device.type == 'cpu':\n"
        "        student = nn.Linear(4, 1)\n"
        "        train_model(student, device, epochs=2, batch_size=8, learning_rate=0.1)\n"
    )
    check_expectations(body, ["student = accelerator.prepare(student)"])
    code, _ = convert(body)
    assert "        student = nn.Linear(4, 1)\n        student = accelerator.prepare(student)\n" in code


def test_a_home_function_given_the_models_it_trains_prepares_them_with_its_optimizer() -> None:
    # An ensemble: ``train(m, loader)`` for each model of a list; no other block builds ``model``.
    code, _ = convert_text(
        """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    models = [nn.Linear(4, 1) for _ in range(3)]
    for m in models:
        train(m, loader)
"""
    )
    assert "    model, optimizer = accelerator.prepare(model, optimizer)\n    for x, y in loader:" in code
    assert "    loader = accelerator.prepare(loader)\n" in code


WRAPPED_LOADERS = """\
class DeviceDataLoader:
    def __init__(self, dl, device):
        self.dl = dl
        self.device = device

    def __iter__(self):
        for batch in self.dl:
            yield [t.to(self.device) for t in batch]


def main():
    device = torch.device("cuda")
    train_dl = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    train_dl = DeviceDataLoader(train_dl, device)
    valid_dl = DeviceDataLoader(DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1))), device)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_dl:
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


def test_a_loader_wrapped_in_another_class_is_prepared_before_the_wrap() -> None:
    """prepare passes objects it does not know through: preparing the wrapper would leave the
    data unsharded, so the DataLoader is prepared right before it is wrapped."""
    code, lines = convert(WRAPPED_LOADERS)
    wrap = lines.index("train_dl = DeviceDataLoader(train_dl, device)")
    assert lines[wrap - 1] == "train_dl = accelerator.prepare(train_dl)"
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in lines
    assert not any("prepare(" in line and "train_dl," in line for line in lines), code
    assert convert_text(code)[0] == code


def test_a_loader_handed_to_an_iterable_class_of_the_file_is_prepared_before_it() -> None:
    """``batches = DeviceDataLoader(train_dl, device)``: a class of the file with ``__iter__``
    stands for the loader under another name; a ``Trainer(model, optimizer, loader)`` does not."""
    body = WRAPPED_LOADERS.replace(
        "    train_dl = DeviceDataLoader(train_dl, device)\n", "    batches = DeviceDataLoader(train_dl, device)\n"
    ).replace("for x, y in train_dl:", "for x, y in batches:")
    code, lines = convert(body)
    wrap = lines.index("batches = DeviceDataLoader(train_dl, device)")
    assert lines[wrap - 1] == "train_dl = accelerator.prepare(train_dl)", code
    trainer = WRAPPED_LOADERS.replace("def main():", "class Trainer:\n    pass\n\n\ndef main():").replace(
        "    train_dl = DeviceDataLoader(train_dl, device)\n", "    trainer = Trainer(model, train_dl)\n"
    )
    code, lines = convert(trainer)
    assert "train_dl = accelerator.prepare(train_dl)" not in lines, code


def test_a_second_model_and_optimizer_handed_to_the_training_function_are_prepared_before_it() -> None:
    """The transfer-learning tutorial's second part: after ``train_model(model_ft, ...)`` it builds
    ``model_conv`` and ``optimizer_conv`` (over ``model_conv.fc`` only) and trains them with the
    same function: they are prepared right before that call, or that training would run on each
    process alone over the sharded data."""
    code, _ = convert_text(
        """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train_model(model, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 2)), batch_size=2)
model_ft = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
optimizer_ft = torch.optim.SGD(model_ft.parameters(), lr=0.1)
model_ft = train_model(model_ft, optimizer_ft, loader)

model_conv = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
optimizer_conv = torch.optim.SGD(model_conv[1].parameters(), lr=0.1)
model_conv = train_model(model_conv, optimizer_conv, loader)
"""
    )
    lines = [line.strip() for line in code.splitlines()]
    at = lines.index("model_conv, optimizer_conv = accelerator.prepare(model_conv, optimizer_conv)")
    assert lines[at + 1 :] == ["model_conv = train_model(model_conv, optimizer_conv, loader)"]
    assert "model_ft, optimizer_ft, loader = accelerator.prepare(model_ft, optimizer_ft, loader)" in lines
    assert convert_text(code)[0] == code, "converting the output again changes nothing"


REBUILT_FOR_INFERENCE = """
test_data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)
test_loader = DataLoader(test_data, batch_size=8)
model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
torch.save(model.state_dict(), "model.pt")
model = nn.Linear(8, 2)
model.load_state_dict(torch.load("model.pt"))
{after}
"""


@pytest.mark.parametrize(
    ("after", "moved"),
    [
        # It meets the prepared loader's batches (on the accelerator's device): moved there.
        ("for x, y in test_loader:\n    print(model(x).argmax(1))", True),
        # It only meets a sample the script holds (the quickstart): left on the CPU, as written.
        ("print(model(test_data[0][0]).argmax(0))", False),
    ],
    ids=["meets-loader-batches", "meets-own-sample"],
)
def test_a_model_built_again_is_moved_only_to_meet_the_prepared_batches(after: str, moved: bool) -> None:
    _, lines = convert(REBUILT_FOR_INFERENCE.format(after=after))
    assert ("model.to(accelerator.device)" in lines) is moved
