"""inline-loader (ACC120): a DataLoader built in the arguments of a call of the script's own
function is prepared where it stands, and the function's parameter is a prepared loader (its
evaluation is gathered, no ACC901 "not from a DataLoader")."""

from __future__ import annotations

import ast
import textwrap

from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def loader_for(dataset):
    return DataLoader(dataset, batch_size=16)


def fit(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


@torch.no_grad()
def accuracy(model, loader):
    correct = 0
    for x, y in loader:
        logits = model(x)
        correct += (logits.argmax(1) == y).sum().item()
    return correct


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        fit(model, DataLoader(data, batch_size=8, shuffle=True), optimizer)
        print(accuracy(model, loader=loader_for(data)))
{extra}

if __name__ == "__main__":
    main()
"""


def convert(extra: str = "") -> tuple[str, list[tuple[str, int]]]:
    conversion = convert_source(SCRIPT.replace("{extra}", extra).encode(), Options(), path="train.py")
    return conversion.output.decode(), [(change.code, change.line) for change in conversion.changes]


def test_loaders_built_in_call_arguments_are_prepared_where_they_stand() -> None:
    code, changes = convert()
    # The script is black-clean, so the converter lays the longer calls out over several lines
    # (converter/layout.py): read the calls as code, one line each.
    code = ast.unparse(ast.parse(code))
    assert "fit(model, accelerator.prepare(DataLoader(data, batch_size=8, shuffle=True)), optimizer" in code
    # a keyword argument, filled by the script's own function returning one loader
    assert "accuracy(model, loader=accelerator.prepare(loader_for(data))" in code
    lines = SCRIPT.splitlines()
    fit_line = next(n for n, line in enumerate(lines, 1) if "fit(model, DataLoader(" in line)
    assert ("ACC120", fit_line) in changes and ("ACC120", fit_line + 1) in changes
    assert "ACC901" not in {code_ for code_, _ in changes}


def test_the_function_receiving_it_gathers_its_evaluation() -> None:
    code, _ = convert()
    assert "logits, y = accelerator.gather_for_metrics((logits, y))" in code


def test_a_call_where_no_accelerator_can_be_read_is_reported_not_rewritten() -> None:
    # A function nothing of the training calls: the accelerator never reaches it.
    extra = textwrap.dedent(
        """
        def smoke_test():
            fit(nn.Linear(4, 2), DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))), None)
        """
    )
    code, changes = convert(extra)
    assert "fit(nn.Linear(4, 2), DataLoader(TensorDataset(" in code
    assert any(code_ == "ACC931" for code_, _ in changes), changes
