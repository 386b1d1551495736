"""The name-flow guard's judgement of reads before binding (``engine/name_flow.py``) on code the
out-of-memory retry moves into a function that binds module names through ``global``: what is
bound there before a read is bound, what is not stays a problem."""

from __future__ import annotations

import ast
import textwrap

import pytest

from accel_convert.codemods.engine import name_flow
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


MOVED_BATCH = {
    "module": """
import torch
device = "cpu"
mode = "plain"
for label in torch.ones(4, 2):
    {early}
    if mode == "plain":
        target = label.clone()
    elif mode == "scaled":
        target = label * 2
    {move}
    {before_use}
    print(target.sum())
""",
    "function": """
import torch
def train(loader, mode, device):
    for label in loader:
        {early}
        if mode == "plain":
            target = label.clone()
        elif mode == "scaled":
            target = label * 2
        {move}
        {before_use}
        print(target.sum())
train(torch.ones(4, 2), "plain", "cpu")
""",
    "method": """
import torch
class Solver:
    def train(self, loader):
        for label in loader:
            {early}
            if self.mode == "plain":
                target = label.clone()
            elif self.mode == "scaled":
                target = label * 2
            {move}
            {before_use}
            print(target.sum())
""",
}


@pytest.mark.parametrize("shape", sorted(MOVED_BATCH))
def test_a_read_after_the_originals_own_unbound_read_in_its_block_is_not_the_conversions(shape: str) -> None:
    """StarGAN's ``c_trg = c_trg.to(self.device)`` after an ``if``/``elif`` binding ``c_trg``
    (module level, a function, a method): the conversion removes the move, so the name's later
    reads (``print(target.sum())``, a statement the conversion changed too) are possibly unbound
    where the original's move read it first, in the same block: the original stops there with
    the same error, so nothing is found. A new read placed before the original's own (a
    statement the conversion added above the move's place) is the conversion's."""
    source = MOVED_BATCH[shape]
    original = ast.parse(source.format(early="y = 0", move="target = target.to(device)", before_use="pass"))
    converted = ast.parse(source.format(early="y = 0", move="pass", before_use="pass"))
    assert name_flow_problems(original, converted) == []
    changed = ast.parse(source.format(early="y = 0", move="pass", before_use="target = target.float()"))
    assert name_flow_problems(original, changed) == []
    earlier = ast.parse(source.format(early="print(target)", move="pass", before_use="pass"))
    assert [problem.name for problem in name_flow_problems(original, earlier)] == ["target"]


def test_a_read_in_another_block_than_the_originals_own_is_the_conversions() -> None:
    """The original reads ``target`` possibly unbound only inside an ``if``; the converted read
    after that ``if`` is not preceded by it on every path, so it is a finding."""
    original = ast.parse(
        "import torch\nfor label in torch.ones(4, 2):\n    if label[0] > 0:\n        target = label\n"
        "    if label[1] > 0:\n        target = target.float()\n    y = 1\n"
    )
    converted = ast.parse(
        "import torch\nfor label in torch.ones(4, 2):\n    if label[0] > 0:\n        target = label\n"
        "    if label[1] > 0:\n        pass\n    y = 1\n    print(target)\n    print(target + 1)\n"
    )
    assert [problem.name for problem in name_flow_problems(original, converted)] == ["target"]


def test_a_scope_s_statements_are_indexed_once_for_all_its_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two names of one scope (``target`` and ``weight``, each chosen by the chain and moved by
    the original, the move removed): both are the original's, and the scope's statements are
    walked and printed once for the two questions, not once per name."""
    source = """
import torch
def train(loader, mode):
    for label in loader:
        if mode == "plain":
            target, weight = label.clone(), label
        elif mode == "scaled":
            target, weight = label * 2, label
        {move}
        print(target.sum(), weight.sum())
        print(target.mean(), weight.mean())
train(torch.ones(4, 2), "plain")
"""
    original = ast.parse(source.format(move="target, weight = target.to('cpu'), weight.to('cpu')"))
    converted = ast.parse(source.format(move="pass"))
    walked: list[int] = []
    walk = name_flow._statement_chains
    monkeypatch.setattr(name_flow, "_statement_chains", lambda body: walked.append(len(body)) or walk(body))
    assert name_flow_problems(original, converted) == []
    assert len(walked) == 2, "the original's and the converted scope's statements, once each"
