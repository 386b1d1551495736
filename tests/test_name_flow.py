"""The name-flow guard's judgement of reads before binding (``engine/name_flow.py``) on code the
out-of-memory retry moves into a function that binds module names through ``global``: what is
bound there before a read is bound, what is not stays a problem."""

from __future__ import annotations

import ast
import textwrap

import pytest

from accel_convert.codemods.engine.name_flow import name_flow_problems, possibly_unbound_reads


def unbound(source: str) -> set[tuple[str, str]]:
    return set(possibly_unbound_reads(ast.parse(textwrap.dedent(source))))


RETRIED = """
    import torch

    def noise(n):
        return Tensor(n)

    class Critic:
        def forward(self, x):
            return helper(x)

    def helper(x):
        return Tensor(x)

    def inner_training_loop(batch_size):
        global Tensor
        critic = Critic()
        {before}
        Tensor = torch.FloatTensor
        {after}

    inner_training_loop()
"""


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        # A module function called after the global binding, and one only reached through a method.
        ("pass", "helper(1); critic.forward(noise(2))", set()),
        # A function nested after the binding reads the bound name.
        ("pass", "def sample(): return Tensor(3)\n        sample()", set()),
        # Called before the binding: unbound.
        ("noise(1)", "pass", {("noise", "Tensor")}),
        # Nested before the binding and called right away: unbound.
        ("def sample(): return Tensor(3)\n        sample()", "pass", {("inner_training_loop", "Tensor")}),
    ],
    ids=["called-after", "nested-after", "called-before", "nested-before"],
)
def test_names_a_function_binds_through_global_are_bound_after_that_binding(
    before: str, after: str, expected: set[tuple[str, str]]
) -> None:
    assert unbound(RETRIED.format(before=before, after=after)) == expected


ORIGINAL = """
import torch
for i in range(3):
    if i % 2 == 0:
        fake = torch.ones(1)
    print(fake)
"""

MOVED = """
import torch
def inner_training_loop(batch_size):
    for i in range(3):
        if i % 2 == 0:
            fake = torch.ones(1)
        print(fake)
        {extra}
inner_training_loop()
"""


def test_a_read_the_original_already_made_unbound_is_not_the_conversions() -> None:
    """Moved into the retried function, the flat script's own possibly unbound read (``fake``,
    bound only on some iterations) is the original's, not one the conversion added; a new one
    in the same function is the conversion's."""
    original = ast.parse(ORIGINAL)
    assert name_flow_problems(original, ast.parse(MOVED.format(extra="pass"))) == []
    added = name_flow_problems(original, ast.parse(MOVED.format(extra="print(real)\n        real = 1")))
    assert [(p.scope, p.name) for p in added] == [("inner_training_loop", "real")]
