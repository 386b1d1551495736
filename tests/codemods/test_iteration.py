"""What a loop iterates (codemods/engine/iteration.py): the loader under its wrappers and the
names of its target that are the batch, answered once for the model and every rule."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.iteration import enumerate_index, iterated, loop_batch_names
from accel_convert.codemods.engine.names import NameTable, builtins_at, collect_names


def loop_in(code: str) -> tuple[cst.For, NameTable]:
    module = cst.parse_module(code)
    loop = next(node for node in module.body if isinstance(node, cst.For))
    return loop, collect_names(module)


@pytest.mark.parametrize(
    ("header", "loader", "batch", "index"),
    [
        ("for x, y in loader:", "loader", ("x", "y"), None),
        ("for i, (x, y) in enumerate(loader):", "loader", ("x", "y"), "i"),
        ("for i, (x, y) in tqdm(enumerate(loader), total=len(loader)):", "loader", ("x", "y"), "i"),
        ("for step, batch in enumerate(tqdm(loader)):", "loader", ("batch",), "step"),
        ("for a, b in zip(train_loader, aux_loader):", "train_loader", ("a", "b"), None),
        ("for x, y in metric_logger.log_every(loader, 10, 'Test:'):", "loader", ("x", "y"), None),
        ("for x in sorted(loader):", None, ("x",), None),
    ],
)
def test_the_loader_and_the_batch_under_known_wrappers(
    header: str, loader: str | None, batch: tuple[str, ...], index: str | None
) -> None:
    loop, names = loop_in(f"from tqdm import tqdm\n{header}\n    pass\n")
    found = iterated(loop.iter, names)
    assert (found.value if isinstance(found, cst.Name) else None) == loader
    assert loop_batch_names(loop, names) == batch
    assert enumerate_index(loop, builtins_at(names)) == index


def test_any_call_is_looked_through_when_asked() -> None:
    """``progress(test_loader)``: a wrapper of the file's own still runs over the loader's batches."""
    loop, names = loop_in("for i, (x, y) in progress(enumerate(test_loader)):\n    pass\n")
    assert isinstance(iterated(loop.iter, names), cst.Call)
    found = iterated(loop.iter, names, through_any_call=True)
    assert isinstance(found, cst.Name) and found.value == "test_loader"
    assert loop_batch_names(loop, names, through_any_call=True) == ("x", "y")


def test_a_shadowed_enumerate_is_not_the_builtin() -> None:
    loop, names = loop_in("def enumerate(x):\n    return x\nfor i, batch in enumerate(loader):\n    pass\n")
    assert isinstance(iterated(loop.iter, names), cst.Call)
    assert loop_batch_names(loop, names) == ("i", "batch")


@pytest.mark.parametrize(
    "source",
    [
        "from mytools import enumerate\nfor i, (x, y) in enumerate(loader):\n    pass\n",
        "def enumerate(items):\n    return items\nfor i, (x, y) in enumerate(loader):\n    pass\n",
    ],
)
def test_a_scripts_own_enumerate_counts_no_batches(source: str) -> None:
    """``i`` of a loop over the script's own ``enumerate`` (imported or defined) is no batch index."""
    loop, names = loop_in(source)
    assert enumerate_index(loop, builtins_at(names)) is None
