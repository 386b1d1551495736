"""Hugging Face Accelerate's side of the checkpoint differential, in one process (no launch).

    python accelerate_checkpoint.py save CHECKPOINT STATE   # train, save_state(CHECKPOINT)
    python accelerate_checkpoint.py load CHECKPOINT STATE   # a fresh run, load_state(CHECKPOINT)

Either way STATE gets :func:`training_state` (``torch.save``) after the save or the load; the
test compares it with what our runtime saved or loaded. :func:`build` and :func:`train` are the
body both sides run, with Accelerate's ``Accelerator`` here and ours in the test.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn


class Tally:
    """A ``register_for_checkpointing`` object."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


class TiedModel(nn.Module):
    """A tied weight: safetensors stores it once, under its first name."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(6, 4)
        self.body = nn.Linear(4, 4).double()
        self.head = nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens).double()).float())


def build(accelerator: Any, seed: int) -> dict[str, Any]:
    """A seeded model, its optimizer and scheduler and a tally, prepared and registered."""
    torch.manual_seed(seed)
    model = TiedModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    tally = Tally()
    accelerator.register_for_checkpointing(tally)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return {"accelerator": accelerator, "model": model, "optimizer": optimizer, "scheduler": scheduler, "tally": tally}


def train(t: dict[str, Any], steps: int = 3) -> None:
    for step in range(steps):
        tokens = torch.arange(6).roll(step)
        loss = t["model"](tokens).pow(2).mean()
        t["optimizer"].zero_grad()
        t["accelerator"].backward(loss)
        t["optimizer"].step()
        t["scheduler"].step()
        t["tally"].value += 1


def training_state(t: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint must bring back, as plain tensors and numbers."""
    model = t["accelerator"].unwrap_model(t["model"])
    optimizer = getattr(t["optimizer"], "optimizer", t["optimizer"])
    return {
        "parameters": {name: tensor.detach().clone() for name, tensor in model.state_dict().items()},
        "tied": model.head.weight is model.embed.weight,
        "adam": [{key: value.clone() for key, value in state.items()} for state in optimizer.state.values()],
        "lr": t["scheduler"].get_last_lr(),
        "tally": t["tally"].value,
    }


def main(mode: str, checkpoint: str, state: str) -> None:
    from accelerate import Accelerator

    t = build(Accelerator(cpu=True), seed=0 if mode == "save" else 1)
    if mode == "save":
        train(t)
        t["accelerator"].save_state(checkpoint)
    else:
        t["accelerator"].load_state(checkpoint)
    torch.save(training_state(t), state)


if __name__ == "__main__":
    main(*sys.argv[1:])
