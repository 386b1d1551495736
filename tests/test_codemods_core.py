"""The issue-4 codemods on the hard cases of shared/reference/conversion-cases.md (1, 4, 5, 11, 14, 16).

Each case is a small complete script; the table says which lines the conversion must contain and
which it must no longer contain (``-``). Whole-file expectations live in the golden files; these
pin the tricky decisions one by one.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from codemods import convert_module
from codemods.base import Options

HEADER = """\
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


"""


def convert(body: str, options: Options = Options()) -> tuple[str, list[str]]:
    source = HEADER + textwrap.dedent(body)
    outcome = convert_module(cst.parse_module(source), options)
    lines = [line.strip() for line in outcome.module.code.splitlines()]
    return outcome.module.code, lines + [f"#{change.code}" for change in outcome.changes]


MOVES = """\
def batchify(data, bsz, device):
    return data.view(bsz, -1).t().contiguous().to(device)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if args.cuda else "cpu")
    DEV = device
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8)), batch_size=2)
    model = nn.Linear(4, 1)
    if args.cuda:
        model.cuda()
    transformer = nn.Linear(4, 4).to(device)
    optimizer = torch.optim.SGD(list(model.parameters()) + list(transformer.parameters()), lr=0.1)
    style = torch.ones(1, 4).to(device)
    for images, labels in loader:
        images = images.to(device=device, dtype=torch.float32)
        labels = labels.to(DEV).float()
        idx = labels.type(torch.long).to(DEV)
        noise = torch.randn(2, 4, 1, 1, device=device)
        fill = torch.full((2,), 0.5, dtype=images.dtype, device=device)
        styled = style.repeat(2, 1).to(device)
        out = model(images.to(device))
        seq = out.double()
        loss = (out - labels).pow(2).mean()
        loss.backward()
        optimizer.step()
        kept = out.cpu()
    transformer.eval().cpu()
    transformer.to(device).train()
"""

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

FROZEN_HELPER = """\
class Vgg16(nn.Module):
    def __init__(self, requires_grad=False):
        super().__init__()
        self.features = nn.Linear(4, 4)

def main():
    device = torch.device("cuda")
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 4).to(device)
    vgg = Vgg16(requires_grad=False).to(device)
    critic = Vgg16(requires_grad=False).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for (x,) in loader:
        x = x.to(device)
        loss = (vgg.features(model(x)) - critic.features(x)).pow(2).mean()
        loss.backward()
        optimizer.step()
"""

CASES = {
    # Hard case 1: only moves made redundant by prepare go.
    "1 moves": (MOVES, [
        "device = accelerator.device",
        "DEV = device",
        "return data.view(bsz, -1).t().contiguous().to(device)",
        "images = images.to(dtype=torch.float32)",
        "labels = labels.float()",
        "idx = labels.type(torch.long)",
        "noise = torch.randn(2, 4, 1, 1, device=device)",
        "fill = torch.full((2,), 0.5, dtype=images.dtype, device=device)",
        "styled = style.repeat(2, 1).to(device)",
        "out = model(images)",
        "seq = out.double()",
        "kept = out.cpu()",
        "transformer = nn.Linear(4, 4)",
        "transformer.eval().cpu()",
        "transformer.to(device).train()",
        "-if args.cuda:",
        "-model.cuda()",
    ]),
    # Hard case 4: a per-epoch StepLR is not prepared; a per-batch scheduler is.
    "4 per-epoch scheduler": (SCHEDULERS, [
        "model, optimizer, loader, per_batch = accelerator.prepare(model, optimizer, loader, per_batch)",
        "per_epoch.step()",
    ]),
    # Hard case 5: a scheduler sized from len(loader) is built before prepare and prepared.
    "5 sized from loader": (SIZED_FROM_LOADER, [
        "model, optimizer, train_loader, scheduler = accelerator.prepare(",
        "total_steps = 3 * len(train_loader)",
    ]),
    # Hard case 11: both models, both optimizers and the loader in one prepare; every backward.
    "11 gan": (GAN, [
        "netG, netD, optimizerD, optimizerG, dataloader = accelerator.prepare(",
        "accelerator.backward(errD_real)",
        "accelerator.backward(errD_fake, retain_graph=True)",
        "accelerator.backward(errG)",
        "noise = torch.randn(2, 2, device=device)",
        "-real = real.to(device)",
    ]),
    # Hard case 14: names that fool pattern matching.
    "14 tricky names": (TRICKY_NAMES, [
        "model, opt, loader = accelerator.prepare(model, opt, loader)",
        "state = env.step(1)",
        "loss = nn.functional.cross_entropy(model(input), target); accelerator.backward(loss); opt.step()",
        'print("switching mode")',
    ]),
    # Hard case 16: frozen helper models keep their move, to the accelerator's device.
    "16 frozen helper": (FROZEN_HELPER, [
        "vgg = Vgg16(requires_grad=False).to(device)",
        "critic = Vgg16(requires_grad=False).to(accelerator.device)",
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
        "model = nn.Linear(4, 4)",
        "-x = x.to(device)",
    ]),
}


@pytest.mark.parametrize(("body", "expectations"), CASES.values(), ids=CASES.keys())
def test_hard_cases(body: str, expectations: list[str]) -> None:
    code, lines = convert(body)
    for expected in expectations:
        if expected.startswith("-"):
            assert expected[1:] not in lines, f"still there: {expected[1:]}\n{code}"
        else:
            assert expected in lines, f"missing: {expected}\n{code}"
    again, _ = convert_text(code)
    assert again == code, "not idempotent"


def convert_text(code: str) -> tuple[str, list]:
    outcome = convert_module(cst.parse_module(code), Options())
    return outcome.module.code, outcome.changes
