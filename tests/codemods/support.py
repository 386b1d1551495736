"""Shared helpers of the rule tests (not a test module itself: no test functions).

A snippet is run through one rule either with the real analysis (``facts`` omitted: the snippet
is analysed below :data:`PREAMBLE`, which imports what the snippets use and builds the training
objects they name) or, for the few tests that pin a fact the analysis would not give a snippet,
with facts built by hand (:func:`make_facts`).
"""

from __future__ import annotations

import textwrap
from dataclasses import replace

import libcst as cst

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Rule

#: The imports the snippets use, as the analysis would resolve them.
IMPORTS = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "copy": "copy",
    "os": "os",
    "json": "json",
    "shutil": "shutil",
    "plt": "matplotlib.pyplot",
    "save_image": "torchvision.utils.save_image",
    "DataLoader": "torch.utils.data.DataLoader",
    "Accelerator": "accel_convert.runtime.Accelerator",
    "DDP": "torch.nn.parallel.DistributedDataParallel",
    "mp": "torch.multiprocessing",
    "GradScaler": "torch.cuda.amp.GradScaler",
    "autocast": "torch.cuda.amp.autocast",
}


#: What the snippets assume exists: their imports and module-level training objects, as a script
#: would build them (so the analysis finds ``model``, ``optimizer``, ``train_loader``...).
PREAMBLE = """\
import copy
import json
import os
import shutil

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda.amp import GradScaler, autocast
from torch.utils.data import DataLoader
from torchvision.utils import save_image

from accel_convert.runtime import Accelerator

args = parser.parse_args()
train_loader = DataLoader(list(range(8)), batch_size=args.batch_size)
test_loader = DataLoader(list(range(8)), batch_size=args.batch_size)
model = nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
device = torch.device("cuda")
"""


def make_facts(**fields: object) -> ScriptFacts:
    """ScriptFacts as the analysis fills them for the snippets: one model, one optimizer..."""
    values: dict[str, object] = {
        "imports": dict(IMPORTS),
        "uses_torch": True,
        "models": {"model"},
        "optimizers": {"optimizer"},
        "schedulers": {"scheduler"},
        "train_loaders": {"train_loader"},
        "eval_loaders": {"test_loader"},
        "device_names": {"device"},
    }
    values.update(fields)
    return ScriptFacts(**values)  # type: ignore[arg-type]


def code(text: str) -> str:
    """A snippet written indented in the test table, as file text."""
    return textwrap.dedent(text).lstrip("\n")


def apply(
    codemod: Rule,
    source: str,
    facts: ScriptFacts | None = None,
    options: Options | None = None,
    *,
    preamble: str = PREAMBLE,
) -> tuple[str, list[Change]]:
    """Run one rule on source text; the output must parse again. Without ``facts``, the snippet
    is analysed below ``preamble`` (which the rule must leave alone; ``""`` for a complete
    script) and the changes' lines count from the snippet's first line."""
    if facts is not None:
        module, changes = codemod.transform(cst.parse_module(source), facts, options or Options())
        cst.parse_module(module.code)
        return module.code, changes
    from accel_convert.codemods.engine.analysis import analyse

    whole = preamble + source
    parsed = cst.parse_module(whole)  # the analysis records positions by node: the same tree
    module, changes = codemod.transform(parsed, analyse(parsed, whole), options or Options())
    output = module.code
    cst.parse_module(output)
    assert output.startswith(preamble), "the rule changed the preamble"
    shift = preamble.count("\n")
    moved = [replace(c, line=c.line - shift, end_line=c.end_line - shift) for c in changes]
    return output[len(preamble) :], moved


def assert_rewrites(
    codemod: Rule,
    before: str,
    after: str,
    facts: ScriptFacts | None = None,
    options: Options | None = None,
    *,
    preamble: str = PREAMBLE,
) -> list[Change]:
    """The codemod turns ``before`` into exactly ``after``, and leaves ``after`` as it is."""
    output, changes = apply(codemod, code(before), facts, options, preamble=preamble)
    assert output == code(after)
    again, changes_again = apply(codemod, output, facts, options, preamble=preamble)
    assert again == output, "not idempotent"
    assert not [c for c in changes_again if c.fixed], changes_again
    return changes


# -- whole conversions (convert_module, every rule in order) ---------------------------------------

#: The imports a whole-conversion snippet starts with.
HEADER = """\
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


"""


def convert(body: str, options: Options = Options()) -> tuple[str, list[str]]:
    """``body`` below :data:`HEADER`, converted: the code, and its stripped lines followed by one
    ``#ACCnnn`` line per change."""
    source = HEADER + textwrap.dedent(body)
    outcome = convert_module(cst.parse_module(source), options)
    lines = [line.strip() for line in outcome.module.code.splitlines()]
    return outcome.module.code, lines + [f"#{change.code}" for change in outcome.changes]


def converted_stably(source: str) -> tuple[str, list[str]]:
    """``source`` converted by the pipeline, as ``train.py``: the code and the codes it reports,
    once checked that converting the code again changes nothing."""
    from accel_convert.converter.pipeline import convert_source

    result = convert_source(source.encode(), Options(), path="train.py")
    text = result.output.decode()
    assert convert_source(text.encode(), Options(), path="train.py").output.decode() == text
    return text, [change.code for change in result.changes]


def convert_text(code: str) -> tuple[str, list[Change]]:
    outcome = convert_module(cst.parse_module(code), Options())
    return outcome.module.code, outcome.changes


def check_expectations(body: str, expectations: list[str]) -> None:
    """The conversion of ``body`` holds every expected line, none of the ``-`` ones, and converts
    to itself."""
    code, lines = convert(body)
    for expected in expectations:
        if expected.startswith("-"):
            assert expected[1:] not in lines, f"still there: {expected[1:]}\n{code}"
        else:
            assert expected in lines, f"missing: {expected}\n{code}"
    again, _ = convert_text(code)
    assert again == code, "not idempotent"


LOOP = """\
def main():
    device = torch.device("cuda")
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for {target} in loader:
{body}
"""


def in_loop(body: str, target: str = "batch", prelude: str = "") -> str:
    """A training function whose loop body is ``body``."""
    return prelude + LOOP.format(target=target, body=textwrap.indent(textwrap.dedent(body), " " * 8))
