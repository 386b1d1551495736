"""backward (ACC105) and clip-grad (ACC106): the backward pass and clipping go through the accelerator."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from tests.codemods.support import HEADER, check_expectations, in_loop

REWRITES = {
    "backward keyword kept": (
        in_loop("loss = model(batch[0]).sum()\nloss.backward(retain_graph=True)"),
        ["accelerator.backward(loss, retain_graph=True)"],
    ),
    "backward of any expression": (
        in_loop("model(batch[0]).sum().backward()"),
        ["accelerator.backward(model(batch[0]).sum())"],
    ),
    "GradScaler left to the AMP pass": (
        in_loop("scaler.scale(model(batch[0]).sum()).backward()", prelude="scaler = None\n"),
        ["-accelerator.backward(scaler.scale(model(batch[0]).sum()))"],
    ),
    "torch.autograd.backward is a function": (
        in_loop("torch.autograd.backward(model(batch[0]).sum())"),
        ["torch.autograd.backward(model(batch[0]).sum())"],
    ),
    "clip by full name": (
        in_loop("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
        ["accelerator.clip_grad_norm_(model.parameters(), 1.0)"],
    ),
    "clip through nn alias": (
        in_loop("nn.utils.clip_grad_value_(model.parameters(), 1.0)"),
        ["accelerator.clip_grad_value_(model.parameters(), 1.0)"],
    ),
    "clip imported under another name": (
        in_loop("clip(model.parameters(), 1.0)", prelude="from torch.nn.utils import clip_grad_norm_ as clip\n"),
        ["accelerator.clip_grad_norm_(model.parameters(), 1.0)"],
    ),
    "a local function named like the clipper is not it": (
        in_loop("clip_grad_norm_(model.parameters(), 1.0)", prelude="def clip_grad_norm_(p, v):\n    pass\n"),
        ["clip_grad_norm_(model.parameters(), 1.0)"],
    ),
}


@pytest.mark.parametrize(("body", "expectations"), REWRITES.values(), ids=REWRITES.keys())
def test_rewrites(body: str, expectations: list[str]) -> None:
    check_expectations(body, expectations)


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_positions_count_characters_like_libcst(encoding: str) -> None:
    """ast counts UTF-8 bytes, libcst characters: a non-ASCII line must not shift columns, whether
    the caller passes the source bytes or not."""
    text = (
        f"# -*- coding: {encoding} -*-\n"
        + HEADER
        + textwrap.dedent(in_loop('loss = model(batch[0]).sum(); note = "café"; loss.backward()'))
    )
    source = text.encode(encoding)
    module = cst.parse_module(source)
    expected_column = text.splitlines()[-1].index("loss.backward()")
    for given in (None, source):
        changes = convert_module(module, Options(), source=given).changes
        backward = [c for c in changes if c.code == "ACC105"]
        assert [(c.line, c.column) for c in backward] == [(len(text.splitlines()), expected_column)]
