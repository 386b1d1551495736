"""ACC933 packed-lengths-on-device: ``pack_padded_sequence`` needs its lengths on the CPU.

A collate function that returns the sequence lengths as a tensor (``torch.tensor([len(x) for x
in xs])``) hands them to the loop on the CPU, and ``pack_padded_sequence(x, lengths, ...)`` takes
them there. A prepared loader puts every tensor of the batch on the accelerator's device, so on a
GPU the lengths arrive as a CUDA tensor and ``pack_padded_sequence`` raises ("'lengths' argument
should be a 1D CPU int64 tensor"). Whether the lengths reaching the call are that tensor (often
through the model's ``forward``) or a list is not visible to the converter, so it is reported:
pass ``lengths.cpu()`` where they are a tensor. Lengths already read with ``.cpu()``/``.tolist()``,
or written as a list, are left alone, and so is a name every assignment of which in its function
binds such host values (``decode_lengths = (caplens - 1).tolist()``). Nor is anything reported
where the original moved every element of every batch to the device itself (``caplens =
caplens.to(device)`` beside the images and captions, in each loop over a loader): the lengths
reached the call there as they do once converted, whatever the model's ``forward`` made of them.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.devices import is_move, peel_moves
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.engine.syntax import dotted, is_host_number, method_call, target_names
from accel_convert.codemods.engine.transformers import lines_of
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis

PACK = "torch.nn.utils.rnn.pack_padded_sequence"

MESSAGE = (
    "pack_padded_sequence needs its lengths on the CPU, and a prepared loader puts the batch's tensors "
    "on the accelerator's device: pass lengths.cpu() where they come from the batch as a tensor"
)


@rule_provider(needs=("loader_loops",))
def batches_moved_by_hand(a: Analysis) -> bool:
    """Whether the original moves every element of every batch to a device itself, in each loop of
    this module over a loader (``for i, (imgs, caps, caplens) in enumerate(loader):`` then
    ``imgs = imgs.to(device)`` ... ``caplens = caplens.to(device)``); False where it loops over
    none."""
    return bool(a.loader_loops) and all(_moves_every_element(loop.node) for loop, _ in a.loader_loops)


def _moves_every_element(loop: cst.For) -> bool:
    """Whether the loop's body rebinds each name its target unpacks (past an ``enumerate`` index)
    to the same name moved to a device (``x = x.to(device)``, ``x, y = x.cuda(), y.cuda()``)."""
    target: cst.BaseExpression = loop.target
    iterated = loop.iter
    if (
        isinstance(iterated, cst.Call)
        and isinstance(iterated.func, cst.Name)
        and iterated.func.value == "enumerate"
        and isinstance(target, cst.Tuple)
        and len(target.elements) == 2
    ):
        target = target.elements[1].value
    elements = set(target_names(target))
    return bool(elements) and elements <= _moved_in(loop.body)


def _moved_in(body: cst.CSTNode) -> set[str]:
    """The names rebound to themselves moved to a device in ``body`` (not to the CPU)."""
    moved: set[str] = set()
    for assign in _assignments(body):
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
        for target in assign.targets:
            if isinstance(target.target, cst.Tuple) and isinstance(assign.value, cst.Tuple):
                pairs += zip(
                    (element.value for element in target.target.elements),
                    (element.value for element in assign.value.elements),
                )
            else:
                pairs.append((target.target, assign.value))
        for name, value in pairs:
            if (
                isinstance(name, cst.Name)
                and is_move(value)
                and not method_call(value, "cpu")
                and dotted(peel_moves(value)) == name.value
            ):
                moved.add(name.value)
    return moved


class PackedLengthsOnDevice(WalkingCheck):
    code = "ACC933"
    name = "packed-lengths-on-device"
    fixes = {
        "ACC933": (
            "Pass the lengths on the CPU: ``pack_padded_sequence(x, lengths.cpu(), batch_first=True)`` where the lengths come from the batch as a tensor."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader


                def collate(batch):
                    xs, ys = zip(*batch)
                    lengths = torch.tensor([len(x) for x in xs])
                    return nn.utils.rnn.pad_sequence(xs, batch_first=True), lengths, torch.tensor(ys)


                class Model(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.rnn = nn.GRU(4, 8, batch_first=True)
                        self.fc = nn.Linear(8, 2)

                    def forward(self, x, lengths):
                        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                        _, h = self.rnn(packed)
                        return self.fc(h[-1])


                data = [(torch.randn(n, 4), n % 2) for n in range(3, 19)]
                loader = DataLoader(data, batch_size=4, collate_fn=collate)
                model = Model()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, lengths, y in loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x, lengths), y).backward()
                    optimizer.step()
            """,
            message=MESSAGE,
        ),
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.nn.utils.rnn import pack_padded_sequence
                from torch.utils.data import DataLoader

                data = [(torch.randn(6, 4), torch.tensor(n % 5 + 2)) for n in range(16)]
                loader = DataLoader(data, batch_size=4)
                rnn = nn.GRU(4, 8, batch_first=True)
                optimizer = torch.optim.SGD(rnn.parameters(), lr=0.1)
                for x, lengths in loader:
                    host_lengths = lengths.tolist()
                    packed = pack_padded_sequence(x, host_lengths, batch_first=True, enforce_sorted=False)
                    _, h = rnn(packed)
                    optimizer.zero_grad()
                    h.pow(2).mean().backward()
                    optimizer.step()
            """,
        ),
    )

    providers = (batches_moved_by_hand,)

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return (
            facts.has_accelerator
            and bool(facts.loaders)
            and PACK in facts.call_sites
            and not facts.of(batches_moved_by_hand)
        )

    def lines(self, facts: ScriptFacts) -> set[int]:
        return lines_of(facts.call_sites.get(PACK, ()))

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        self._scopes: list[cst.CSTNode] = []

    def visit_Module(self, node: cst.Module) -> None:
        self._scopes.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if self.walk.qualified_name(node.func) != PACK:
            return
        lengths = next(
            (arg.value for arg in node.args if arg.keyword is not None and arg.keyword.value == "lengths"), None
        )
        if lengths is None:
            positional = [arg for arg in node.args if arg.keyword is None]
            lengths = positional[1].value if len(positional) > 1 else None
        if isinstance(lengths, cst.Name) and _always_on_host(self._scopes[-1], lengths.value, self.walk.builtin):
            return
        if isinstance(lengths, (cst.Name, cst.Attribute, cst.Subscript)):
            self.walk.report(node, self.code, MESSAGE, False)


def _always_on_host(scope: cst.CSTNode, name: str, builtin: BuiltinOf) -> bool:
    """Whether ``name`` is assigned in ``scope`` and every assignment binds host values: a list,
    ``.tolist()``/``len()`` numbers, or a tensor moved with ``.cpu()``."""
    values = [
        assign.value
        for assign in _assignments(scope)
        if any(isinstance(t.target, cst.Name) and t.target.value == name for t in assign.targets)
    ]
    return bool(values) and all(_host_value(value, builtin) for value in values)


def _host_value(value: cst.BaseExpression, builtin: BuiltinOf) -> bool:
    if isinstance(value, (cst.List, cst.ListComp)) or is_host_number(value, builtin):
        return True
    return isinstance(value, cst.Call) and method_call(value, "cpu")


def _assignments(scope: cst.CSTNode) -> list[cst.Assign]:
    found: list[cst.Assign] = []

    class _Collect(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is scope  # a nested function's names are its own

    walk(scope, _Collect())
    return found
