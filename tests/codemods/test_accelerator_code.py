"""engine/accelerator_code.py: the owner of calls on the accelerator answers what a converted
script's ``accelerator.unwrap_model(model)`` unwraps, for the backward rule, the metrics rule and
the loops provider alike."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.accelerator_code import seen_through_unwrap
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import expression_code

SEEN_THROUGH = {
    "the accelerator's unwrap_model": ("accelerator.unwrap_model(model)", "model"),
    "a training class's accelerator": ("self.accelerator.unwrap_model(self.model)", "self.model"),
    "an attribute read through it": ("self.accelerator.unwrap_model(self).attack", "self.attack"),
    "the model by keyword": ("accelerator.unwrap_model(model=net)", "net"),
    "beside its other arguments": ("accelerator.unwrap_model(model, keep_fp32_wrapper=False)", "model"),
}

LEFT_AS_WRITTEN = {
    "another object's unwrap_model": "helper.unwrap_model(model)",
    "a function named unwrap_model": "unwrap_model(model)",
    "another method of the accelerator": "accelerator.prepare(model)",
    "no model passed": "accelerator.unwrap_model()",
    "models hidden behind *args": "accelerator.unwrap_model(*models)",
    "a plain attribute": "self.model.encoder",
    "the unwrapped model called, not read": "accelerator.unwrap_model(model)(x)",
}


@pytest.mark.parametrize(("written", "original"), SEEN_THROUGH.values(), ids=SEEN_THROUGH.keys())
def test_unwrap_model_is_seen_through(written: str, original: str) -> None:
    facts = ScriptFacts(imports={"torch": "torch"})
    assert expression_code(seen_through_unwrap(cst.parse_expression(written), facts)) == original


@pytest.mark.parametrize("written", LEFT_AS_WRITTEN.values(), ids=LEFT_AS_WRITTEN.keys())
def test_other_expressions_are_left_as_written(written: str) -> None:
    node = cst.parse_expression(written)
    assert seen_through_unwrap(node, ScriptFacts(imports={"torch": "torch"})) is node


def test_the_accelerator_the_script_already_binds_is_the_one_recognised() -> None:
    """A script converted already names its accelerator ``acc``: ``acc.unwrap_model(model)`` is
    seen through; ``accelerator`` is then an object of its own."""
    facts = ScriptFacts(imports={"torch": "torch"}, existing_accelerator="acc")
    assert expression_code(seen_through_unwrap(cst.parse_expression("acc.unwrap_model(model)"), facts)) == "model"
    other = cst.parse_expression("accelerator.unwrap_model(model)")
    assert seen_through_unwrap(other, facts) is other
