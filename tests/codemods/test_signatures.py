"""Adding the accelerator to a function's parameters and to its calls (``engine/signatures.py``)
keeps the layout the call or definition was written in: one argument per line with or without a
trailing comma, on one line, with a space before the closing bracket."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.signatures import parameter_index, with_argument, with_parameter


def _call(source: str) -> cst.Call:
    call = cst.parse_expression(source)
    assert isinstance(call, cst.Call)
    return call


def _rendered(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("load(root, 64)", "load(root, 64, accelerator)"),
        ("load(root, 64 )", "load(root, 64, accelerator )"),
        ("load(\n    root,\n    64\n)", "load(\n    root,\n    64,\n    accelerator\n)"),
        ("load(\n    root,\n    64,\n)", "load(\n    root,\n    64,\n    accelerator,\n)"),
        ("load(\n    root\n)", "load(\n    root, accelerator\n)"),
    ],
    ids=["one-line", "space-before-bracket", "one-per-line", "one-per-line-trailing-comma", "single-on-its-line"],
)
def test_a_positional_argument_keeps_the_calls_layout(source: str, expected: str) -> None:
    assert _rendered(with_argument(_call(source), 2 if "64" in source else 1, "accelerator")) == expected


def test_a_keyword_argument_after_keywords_one_per_line_takes_a_line_of_its_own() -> None:
    """pytorch-cifar100's ``get_training_dataloader(mean, std, num_workers=4, batch_size=args.b,
    shuffle=True)`` written one per line without a trailing comma: before, the new keyword went
    after ``shuffle=True, `` (a trailing space) on the closing bracket's line."""
    source = "get_loader(\n    mean,\n    std,\n    shuffle=True\n)"
    expected = "get_loader(\n    mean,\n    std,\n    shuffle=True,\n    accelerator=accelerator\n)"
    assert _rendered(with_argument(_call(source), None, "accelerator")) == expected


def test_a_parameter_one_per_line_takes_a_line_of_its_own() -> None:
    definition = cst.parse_statement("def get_loader(\n    root,\n    batch_size\n):\n    pass\n")
    assert isinstance(definition, cst.FunctionDef)
    assert parameter_index(definition.params) == 2
    params = with_parameter(definition.params, "accelerator")
    assert _rendered(definition.with_changes(params=params)).startswith(
        "def get_loader(\n    root,\n    batch_size,\n    accelerator\n):"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def load(root, workers=4):", "def load(root, workers=4, *, accelerator):"),
        (
            "def load(\n    root,\n    workers=4,\n):",
            "def load(\n    root,\n    workers=4,\n    *,\n    accelerator,\n):",
        ),
        ("def load(root, *, workers=4):", "def load(root, *, workers=4, accelerator):"),
        (
            "def load(\n    root,\n    *,\n    workers=4,\n):",
            "def load(\n    root,\n    *,\n    workers=4,\n    accelerator,\n):",
        ),
    ],
    ids=["one-line", "one-per-line-trailing-comma", "after-keyword-only", "after-keyword-only-one-per-line"],
)
def test_a_keyword_only_parameter_keeps_the_definitions_layout(source: str, expected: str) -> None:
    """recurrent-visual-attention's ``get_train_valid_loader(data_dir, ..., num_workers=4,
    pin_memory=False,)`` written one per line (black's layout): before, ``*, accelerator):`` went
    on the closing bracket's line, at its first column."""
    definition = cst.parse_statement(f"{source}\n    pass\n")
    assert isinstance(definition, cst.FunctionDef)
    assert parameter_index(definition.params) is None
    params = with_parameter(definition.params, "accelerator")
    assert _rendered(definition.with_changes(params=params)).startswith(expected)
