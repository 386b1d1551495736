"""An evaluation whose outputs cannot be gathered (the model runs inside its own ``predict``:
simple-faster-rcnn-pytorch's ``eval()`` collects variable-size detections per image and scores
them once at the end) and whose result decides work the processes share (a save under ``if
score > best:``, a path named after the score that every process loads) runs over every batch on
every process: the locality owner (``model/locality.deciding_evaluations``) keeps its loader
unprepared and the loop unsharded, so every process computes the original's score and takes the
same branches, and nothing is reported there. Before, each process scored its own shard: rank 0
saved ``detector_TIME_0.714`` and rank 1 loaded ``detector_TIME_0.702``, which does not exist
(``FileNotFoundError``). An evaluation whose result is only printed stays sharded and reported
(ACC944)."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from tests.codemods.support import converted_stably

SCRIPT = """\
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(x)

    def predict(self, x):
        self.eval()
        with torch.no_grad():
            scores = self(x).softmax(1)[:, 1]
        self.train()
        return [row[row > 0.5].numpy() for row in scores.view(-1, 4)]


def eval(dataloader, detector):
    found, wanted = list(), list()
    for x, y in dataloader:
        found += detector.predict(x)
        wanted += list(y.view(-1, 4).sum(1).numpy())
    return {{"map": sum(int(len(f) == int(w)) for f, w in zip(found, wanted)) / len(wanted)}}


def train():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    dataloader = DataLoader(data, batch_size=8, shuffle=True)
    test_dataloader = DataLoader(data, batch_size=8)
    detector = Detector()
    optimizer = torch.optim.SGD(detector.parameters(), lr=0.1)
    best_map = 0
    for epoch in range(3):
        for x, y in dataloader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(detector(x), y).backward()
            optimizer.step()
        eval_result = eval({evaluated}, detector)
{uses}


if __name__ == "__main__":
    train()
"""

SAVES_BEST = """\
        if eval_result["map"] > best_map:
            best_map = eval_result["map"]
            best_path = "best_%s_%s.pt" % (time.strftime("%m%d"), best_map)
            torch.save(detector.state_dict(), best_path)
        if epoch == 1:
            detector.load_state_dict(torch.load(best_path))"""

NAMES_THE_FILE = """\
        path = "epoch_%s.pt" % eval_result["map"]
        torch.save(detector.state_dict(), path)
        detector.load_state_dict(torch.load(path))"""

PRINTS = """\
        print("epoch %d map %.4f" % (epoch, eval_result["map"]))"""


def prepared(text: str, function: str = "train") -> str:
    """What the ``prepare`` call in ``function`` takes."""
    body = text.split(f"def {function}(")[1]
    return body.split("accelerator.prepare(")[1].split(")")[0]


def test_a_score_deciding_the_saved_and_loaded_path_is_computed_over_every_batch() -> None:
    text, codes = converted_stably(SCRIPT.format(evaluated="test_dataloader", uses=SAVES_BEST))
    # The training loader keeps its prepare: ``eval()``'s parameter ``dataloader`` is not
    # ``train()``'s (simple-faster-rcnn-pytorch names both so).
    assert " ".join(prepared(text).split()) == "detector, optimizer, dataloader"
    assert "gather" not in text
    assert "ACC944" not in codes
    # The branch is taken alike on every process now: the save's write waits, the load after it.
    assert text.count("accelerator.wait_for_everyone()") == 2


def test_a_score_naming_the_file_read_is_computed_over_every_batch() -> None:
    text, codes = converted_stably(SCRIPT.format(evaluated="test_dataloader", uses=NAMES_THE_FILE))
    assert "test_dataloader" not in prepared(text)
    assert "ACC944" not in codes


def test_a_score_only_printed_stays_sharded_and_reported() -> None:
    text, codes = converted_stably(SCRIPT.format(evaluated="test_dataloader", uses=PRINTS))
    assert "test_dataloader" in prepared(text)
    assert "ACC944" in codes


def test_an_evaluation_over_the_training_loader_stays_prepared_and_reported() -> None:
    text, codes = converted_stably(SCRIPT.format(evaluated="dataloader", uses=SAVES_BEST))
    assert " ".join(prepared(text).split()).startswith("detector, optimizer, dataloader")
    assert "ACC944" in codes


TRAINER = """\
import os
import time

import torch
import torch.nn as nn


class DetectorTrainer(nn.Module):
    def __init__(self, detector):
        super().__init__()
        self.detector = detector
        self.optimizer = torch.optim.SGD(detector.parameters(), lr=0.1)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        nn.functional.cross_entropy(self.detector(x), y).backward()
        self.optimizer.step()

    def save(self, **kwargs):
        save_path = "checkpoints/detector_%s" % time.strftime("%m%d%H%M")
        for k_, v_ in kwargs.items():
            save_path += "_%s" % v_
        os.makedirs("checkpoints", exist_ok=True)
        torch.save(self.detector.state_dict(), save_path)
        return save_path

    def load(self, path):
        self.detector.load_state_dict(torch.load(path))
"""

ENTRY = (
    SCRIPT.split("def train():")[0].replace("import time\n", "from trainer import DetectorTrainer\n")
    + """\
def train():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    dataloader = DataLoader(data, batch_size=8, shuffle=True)
    test_dataloader = DataLoader(data, batch_size=8)
    detector = Detector()
    trainer = DetectorTrainer(detector)
    best_map = 0
    for epoch in range(3):
        for x, y in dataloader:
            trainer.train_step(x, y)
        eval_result = eval(test_dataloader, detector)
        if eval_result["map"] > best_map:
            best_map = eval_result["map"]
            best_path = trainer.save(best_map=best_map)
        if epoch == 1:
            trainer.load(best_path)


if __name__ == "__main__":
    train()
"""
)


def test_the_trainer_of_another_module_saves_and_loads_what_every_process_names_alike() -> None:
    sources = {"train": ENTRY.replace("{{", "{").replace("}}", "}"), "trainer": TRAINER}
    modules = [ProgramModule(name, cst.parse_module(text), text) for name, text in sources.items()]
    outcomes = convert_program(modules, "train", Options())
    train = outcomes["train"].module.code
    assert " ".join(prepared(train).split()) == "detector, dataloader"
    assert not [change for outcome in outcomes.values() for change in outcome.changes if change.code == "ACC944"]
    # Every process reaches the save now: its folder is made once, and every process waits for it.
    trainer = outcomes["trainer"].module.code
    assert "if self.accelerator.is_main_process:\n            os.makedirs" in trainer
