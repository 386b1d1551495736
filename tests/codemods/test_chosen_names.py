"""A name chosen by an ``if`` chain (codemods/engine/chosen_names.py): the conversion plan places
``prepare`` after the chain, and the name-flow guard lets it stand, where the original's next read
of the name fails too when no branch bound it (YOLOv3's optimizer, read in the training loop)."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import Options, convert_module
from accel_convert.codemods.engine.chosen_names import next_reads_after_chains, statements_in_order
from accel_convert.codemods.engine.name_flow import name_flow_problems
from accel_convert.codemods.engine.positions import python_statements

CHAIN = """\
if cfg == "adam":
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
elif cfg == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
else:
    print("Unknown optimizer")
for epoch in range(2):
    model.train()
    for i, (x, y) in enumerate(loader):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if i % subdivisions == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

SETUP = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

cfg = "adam"
subdivisions = 2
model = torch.nn.Linear(4, 2)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 2)), batch_size=8)
"""


def _converted(source: str) -> str:
    outcome = convert_module(cst.parse_module(source), Options(), source)
    again = convert_module(outcome.module, Options(), outcome.module.code)
    assert again.module.code == outcome.module.code, "not stable"
    return outcome.module.code


def _module_level() -> tuple[str, str]:
    return SETUP + CHAIN, "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\nfor epoch"


def _in_function() -> tuple[str, str]:
    body = textwrap.indent(SETUP.split("\n", 3)[3] + CHAIN, "    ")
    source = "\n".join(SETUP.split("\n", 3)[:3]) + "\n\ndef main():\n" + body + "\n\nmain()\n"
    return source, "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n    for epoch"


def _in_main_block() -> tuple[str, str]:
    body = textwrap.indent(SETUP.split("\n", 3)[3] + CHAIN, "    ")
    source = "\n".join(SETUP.split("\n", 3)[:3]) + '\nif __name__ == "__main__":\n' + body
    return source, "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n    for epoch"


@pytest.mark.parametrize("shape", [_module_level, _in_function, _in_main_block])
def test_an_optimizer_chosen_by_a_chain_with_an_else_that_binds_nothing_is_prepared_after_it(shape) -> None:
    # Before, the optimizer was not prepared at all (``model, loader = accelerator.prepare(model,
    # loader)``): the plan and the guard both wanted a plain read right after the chain.
    source, expected = shape()
    code = _converted(source)
    assert expected in code
    assert code.index('accelerator.print("Unknown optimizer")') < code.index("accelerator.prepare(")


def test_the_plan_finds_the_next_read_among_the_small_statements_of_a_line() -> None:
    """The plan asks the module's own CPython tree (each original statement by its site): a read
    in the second statement of a line (``steps = 0; optimizer.zero_grad()``) is the next read."""
    source = SETUP + CHAIN.replace("for epoch in range(2):", "steps = 0; optimizer.zero_grad()\nfor epoch in range(2):")
    code = _converted(source)
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\nsteps = 0" in code


def test_python_statements_are_found_where_their_sites_start() -> None:
    """Every statement at any depth, by its start in characters as sites count them (CPython
    counts bytes: ``é`` is two); empty for a file CPython cannot parse."""
    at = python_statements('label = "é"; steps = 0\nif steps:\n    steps += 1\n')
    assert isinstance(at[(1, 13)], ast.Assign) and ast.unparse(at[(1, 13)]) == "steps = 0"
    assert isinstance(at[(2, 0)], ast.If) and isinstance(at[(3, 4)], ast.AugAssign)
    assert len(at) == 4
    assert python_statements("if :\n") == {}


def test_the_next_read_is_found_at_any_depth_unless_under_a_test_of_the_chosen_value() -> None:
    body = ast.parse(CHAIN).body
    assert [read.lineno for read in next_reads_after_chains(body, "optimizer")] == [13]
    flagged = ast.parse(CHAIN.replace("if i % subdivisions == 0:", 'if cfg != "none":')).body
    assert next_reads_after_chains(flagged, "optimizer") == []
    rebound = ast.parse(CHAIN.replace("    model.train()", "    optimizer = make()")).body
    assert next_reads_after_chains(rebound, "optimizer") == []


BLOCKS = """\
try:
    a = 1
except ValueError:
    b = 2
else:
    c = 3
finally:
    d = 4
for x in xs:
    e = 5
else:
    f = 6
match x:
    case 1:
        g = 7
    case _:
        h = 8
def helper():
    inner = 0
i = 9
"""


def test_statements_in_order_walks_every_block_in_source_order() -> None:
    """Bodies, ``except`` handlers, ``else`` and ``finally`` blocks and ``match`` cases, each
    statement after the compound statement holding it; a definition's body is not entered."""
    body = ast.parse(BLOCKS).body
    paths = list(statements_in_order(body))
    assert [path[-1].statement.lineno for path in paths] == [1, 2, 4, 6, 8, 9, 10, 12, 13, 15, 17, 18, 20]
    handler_line = next(path for path in paths if path[-1].statement.lineno == 4)
    assert [placed.statement.lineno for placed in handler_line] == [1, 4]
    statement, block, index = handler_line[-1]
    assert block[index] is statement and block is body[0].handlers[0].body


def test_a_read_in_a_match_case_waits_for_the_match_subject() -> None:
    """A ``match`` on the value the chain chose by decides whether its cases read the name, as an
    ``if`` testing it does; a ``match`` on anything else is a read the original makes anyway
    (before, the cases were not looked into)."""
    on_other = CHAIN.replace(
        "        if i % subdivisions == 0:\n            optimizer.step()\n            optimizer.zero_grad()",
        "        match i % subdivisions:\n            case 0:\n                optimizer.step()",
    )
    assert [read.lineno for read in next_reads_after_chains(ast.parse(on_other).body, "optimizer")] == [14]
    on_chosen = on_other.replace("match i % subdivisions:", "match cfg:")
    assert next_reads_after_chains(ast.parse(on_chosen).body, "optimizer") == []


def test_the_guard_lets_a_prepare_after_the_chain_stand_where_the_loop_reads_the_name_next() -> None:
    before = SETUP + CHAIN
    after = before.replace(
        "for epoch in range(2):",
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\nfor epoch in range(2):",
    ).replace(
        "import torch\n", "import torch\nfrom accel_convert.runtime import Accelerator\naccelerator = Accelerator()\n"
    )
    assert [p.name for p in name_flow_problems(ast.parse(before), ast.parse(after))] == []
    # Read only under a test of the value the chain chose by: unbound on purpose, a finding.
    flagged = before.replace("if i % subdivisions == 0:", 'if cfg != "none":')
    flagged_after = after.replace("if i % subdivisions == 0:", 'if cfg != "none":')
    assert [p.name for p in name_flow_problems(ast.parse(flagged), ast.parse(flagged_after))] == ["optimizer"]
