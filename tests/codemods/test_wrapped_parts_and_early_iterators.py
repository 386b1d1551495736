"""Two shapes found on published code (issue 43).

A part of a model wrapped in ``nn.DataParallel`` (bearpaw's pytorch-classification:
``model.features = torch.nn.DataParallel(model.features)``) saves keys with the wrapper's
``module.`` after the part's name (``features.module.0.weight``); the converted model, no longer
wrapped, loads the original's checkpoints with that segment taken out (the DataParallel rule, as
it takes the whole model's ``module.`` prefix off), and ``model.features.module`` reads the part.
The wrap goes and the model is prepared once.

An iterator taken from a loader before the block's ``prepare`` (``it = iter(loader)``, the re-ID
baseline's ``DGloader_iter = enumerate(dataloaders['DG'])`` of an entry added to a dict of
loaders) reads that loader from then on: the plan prepares the loader right before the iterator
is taken, at module level, in a function, in a branch, and in a training class's ``__init__``."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.model.plan import plan_of
from tests.codemods.support import converted_stably

HEADER = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.classifier = nn.Linear(16, 2)

    def forward(self, x):
        return self.classifier(self.features(x))


def data():
    return TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))


"""

PART_WRAPPED = """\
def main(resume):
    loader = DataLoader(data(), batch_size=8)
    model = Net()
    model.features = torch.nn.DataParallel(model.features)
    model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    checkpoint = torch.load(resume)
    model.load_state_dict(checkpoint["state_dict"])
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(model.features.module[0].out_features)
    torch.save({"state_dict": model.state_dict()}, "checkpoint.th")
"""


def _load_argument(text: str) -> cst.DictComp:
    """The dict comprehension the converted ``model.load_state_dict(...)`` is given."""
    for node in cst.parse_module(text).body:
        if isinstance(node, cst.FunctionDef) and node.name.value == "main":
            for line in node.body.body:
                if isinstance(line, cst.SimpleStatementLine) and isinstance(call := line.body[0].value, cst.Call):
                    func = call.func
                    if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict":
                        argument = call.args[0].value
                        assert isinstance(argument, cst.DictComp)
                        return argument
    raise AssertionError("no load_state_dict in main()")


def test_a_wrapped_part_loads_the_originals_keys() -> None:
    text, _ = converted_stably(HEADER + PART_WRAPPED)
    assert "DataParallel" not in text
    assert "model.cuda()" not in text
    assert text.count("accelerator.prepare(") == 1
    assert "accelerator.unwrap_model(model).features[0].out_features" in text  # the part itself
    comprehension = cst.Module(body=[]).code_for_node(_load_argument(text))
    saved = {"features.module.0.weight": 1, "features.module.0.bias": 2, "classifier.weight": 3}
    loaded = eval(comprehension, {}, {"checkpoint": {"state_dict": saved}})  # noqa: S307 - our own conversion
    assert loaded == {"features.0.weight": 1, "features.0.bias": 2, "classifier.weight": 3}
    # A checkpoint the converted script saved (unwrapped keys) loads as it is.
    plain = {"features.0.weight": 1, "classifier.weight": 3}
    assert eval(comprehension, {}, {"checkpoint": {"state_dict": plain}}) == plain  # noqa: S307


def test_a_part_or_the_whole_model_wrapped_on_either_branch_loads_both_layouts() -> None:
    source = PART_WRAPPED.replace(
        "    model.features = torch.nn.DataParallel(model.features)\n    model.cuda()\n",
        "    if resume.endswith('vgg.th'):\n"
        "        model.features = torch.nn.DataParallel(model.features)\n"
        "        model.cuda()\n"
        "    else:\n"
        "        model = torch.nn.DataParallel(model).cuda()\n",
    )
    text, _ = converted_stably(HEADER + source)
    comprehension = cst.Module(body=[]).code_for_node(_load_argument(text))
    for saved in (
        {"features.module.0.weight": 1, "classifier.weight": 3},
        {"module.features.0.weight": 1, "module.classifier.weight": 3},
    ):
        loaded = eval(comprehension, {}, {"checkpoint": {"state_dict": saved}})  # noqa: S307
        assert loaded == {"features.0.weight": 1, "classifier.weight": 3}


def _line_of(text: str, fragment: str) -> int:
    return next(number for number, line in enumerate(text.splitlines()) if fragment in line)


LOOP = """\
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        x, y = next(it)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
"""


def test_an_iterator_taken_before_the_prepare_reads_the_prepared_loader_in_a_function() -> None:
    source = HEADER + "def main():\n    loader = DataLoader(data(), batch_size=8)\n    it = iter(loader)\n" + LOOP
    text, _ = converted_stably(source)
    assert _line_of(text, "loader = accelerator.prepare(loader)") < _line_of(text, "it = iter(loader)")
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in text  # the loader is prepared once


def test_an_iterator_of_a_dict_entry_added_under_a_flag_reads_the_prepared_entry() -> None:
    body = """\
dg = True
loaders = {x: DataLoader(data(), batch_size=8) for x in ["train", "val"]}
if dg:
    loaders["DG"] = DataLoader(data(), batch_size=4)
    it = enumerate(loaders["DG"])
"""
    loop = textwrap.dedent(LOOP).replace("next(it)", "next(it)[1]")
    loop = loop.replace("for step in range(4):", "for x, y in loaders['train']:").replace(
        "x, y = next", "xd, yd = next"
    )
    text, _ = converted_stably(HEADER + body + loop)
    entry = _line_of(text, "loaders['DG'] = accelerator.prepare(loaders['DG'])")
    assert entry < _line_of(text, 'it = enumerate(loaders["DG"])')
    assert text.splitlines()[entry].startswith("    ")  # in the branch that builds the entry
    assert _line_of(text, "loaders = {key: accelerator.prepare(loader)") > entry
    facts = analyse(cst.parse_module(HEADER + body + loop), HEADER + body + loop)
    assert [wraps for wraps in plan_of(facts).prepared_before_wrapping["<module>"].values()] == [
        (("loaders['DG']", "enumerate"),)
    ]


def test_iterators_taken_in_a_training_class_init_read_the_prepared_loaders() -> None:
    source = HEADER + textwrap.dedent(
        """\
        class Trainer:
            def __init__(self):
                self.train_loader = DataLoader(data(), batch_size=8)
                self.loaders = {"val": DataLoader(data(), batch_size=8)}
                self.loaders["extra"] = DataLoader(data(), batch_size=4)
                self.it = iter(self.train_loader)
                self.extra = enumerate(self.loaders["extra"])
                self.model = Net()
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def fit(self):
                for step in range(4):
                    x, y = next(self.it)
                    _, (ex, ey) = next(self.extra)
                    self.optimizer.zero_grad()
                    (nn.functional.cross_entropy(self.model(x), y) + nn.functional.cross_entropy(self.model(ex), ey)).backward()
                    self.optimizer.step()


        def main():
            Trainer().fit()
        """
    )
    text, _ = converted_stably(source)
    prepared = _line_of(text, "self.train_loader = self.accelerator.prepare(self.train_loader)")
    assert prepared < _line_of(text, "self.it = iter(self.train_loader)")
    entry = _line_of(text, "self.loaders['extra'] = self.accelerator.prepare(self.loaders['extra'])")
    assert entry < _line_of(text, 'self.extra = enumerate(self.loaders["extra"])')
    assert "self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)" in text
