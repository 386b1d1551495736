"""Loaders travelling as one tuple-valued name (``loaders = get_loaders(...)``, a factory returning
``train_loader, test_loader``; ``loaders = (train_loader, test_loader)``). Before, such a name was
prepared as one object (``model, loaders = accelerator.prepare(model, loaders)``), which ``prepare``
passes through unchanged: nothing was sharded, each process trained on all the data. A tuple bound
before ``prepare`` kept the unprepared loaders, and a function unpacking the tuple it is handed
(``train_loader, test_loader = loaders``) prepared them again and did not gather its evaluation
(128 of 200 counted on two processes)."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.model.plan import plan_of

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loaders():
    train_set = TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,)))
    test_set = TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,)))
    return DataLoader(train_set, batch_size=4, shuffle=True), DataLoader(test_set, batch_size=4)


def fit(model, loaders):
    train_loader, test_loader = loaders
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    correct = 0
    with torch.no_grad():
        for x, y in test_loader:
            correct += (model(x).argmax(1) == y).sum().item()
    print(correct)


def main():
    BOUND
    model = torch.nn.Linear(2, 2)
    fit(model, loaders)
"""

FROM_FACTORY = "loaders = get_loaders()"
BOUND_BEFORE = "train_loader, test_loader = get_loaders()\n    loaders = (train_loader, test_loader)"


def converted(bound: str) -> str:
    source = textwrap.dedent(SCRIPT).replace("BOUND", bound)
    return convert_module(cst.parse_module(source), Options()).module.code


def test_a_factory_tuple_held_in_one_name_is_prepared_by_its_elements() -> None:
    code = converted(FROM_FACTORY)
    assert "    loaders = accelerator.prepare(*loaders)\n" in code
    assert "accelerator.prepare(model, loaders)" not in code
    facts = analyse(cst.parse_module(textwrap.dedent(SCRIPT).replace("BOUND", FROM_FACTORY)))
    assert facts.loader_tuples == {"loaders": 2}


def test_a_tuple_bound_before_prepare_holds_the_prepared_loaders() -> None:
    code = converted(BOUND_BEFORE)
    main = code[code.index("def main") :]
    prepare = main.index("model, train_loader, test_loader = accelerator.prepare(model, train_loader, test_loader)")
    rebound = main.rindex("loaders = (train_loader, test_loader)")
    assert main.index("loaders = (train_loader, test_loader)") < prepare < rebound < main.index("fit(model, loaders")


def test_a_tuple_of_loaders_prepared_by_name_is_not_prepared_again() -> None:
    # Before, ``loaders = accelerator.prepare(*loaders)`` prepared each loader a second time.
    code = converted(BOUND_BEFORE)
    assert "prepare(*loaders)" not in code
    assert code.count("accelerator.prepare(") == 2  # main's, and fit's optimizer
    facts = analyse(cst.parse_module(textwrap.dedent(SCRIPT).replace("BOUND", BOUND_BEFORE)))
    assert facts.loader_tuple_parts == {"loaders": ("train_loader", "test_loader")}
    again = analyse(cst.parse_module(code))
    assert "loaders" in again.prepared
    assert convert_module(cst.parse_module(code), Options()).module.code == code


def test_a_factory_tuple_has_no_written_parts() -> None:
    facts = analyse(cst.parse_module(textwrap.dedent(SCRIPT).replace("BOUND", FROM_FACTORY)))
    assert not facts.loader_tuple_parts


def test_names_unpacked_from_a_handed_tuple_are_its_loaders_prepared_by_the_caller() -> None:
    for bound in (FROM_FACTORY, BOUND_BEFORE):
        source = textwrap.dedent(SCRIPT).replace("BOUND", bound)
        facts = analyse(cst.parse_module(source))
        assert "train_loader" in facts.train_loaders
        assert any(loop.loader == "test_loader" for loop in facts.eval_loops)
        assert ("fit", "test_loader") in facts.loaders_unpacked_from_parameters
        assert plan_of(facts).preparations["fit"] == ("optimizer",)
        code = converted(bound)
        fit = code[code.index("def fit") : code.index("def main")]
        assert "gather_for_metrics" in fit
        assert "optimizer = accelerator.prepare(optimizer)\n" in fit


def test_the_prepared_tuple_converts_to_itself() -> None:
    code = converted(FROM_FACTORY)
    assert convert_module(cst.parse_module(code), Options()).module.code == code


def test_a_tuple_of_other_values_is_no_loader_tuple() -> None:
    source = textwrap.dedent(SCRIPT).replace("BOUND", "loaders = (1, 2)")
    facts = analyse(cst.parse_module(source))
    assert "loaders" not in facts.loader_tuples
    assert not facts.loaders_unpacked_from_parameters


def test_a_factory_returning_a_list_of_loaders_is_a_loader_tuple_factory() -> None:
    # Before, the list was prepared as one object (passed through: nothing sharded).
    source = textwrap.dedent(SCRIPT).replace("BOUND", FROM_FACTORY)
    source = source.replace(
        "return DataLoader(train_set, batch_size=4, shuffle=True), DataLoader(test_set, batch_size=4)",
        "return [DataLoader(train_set, batch_size=4, shuffle=True), DataLoader(test_set, batch_size=4)]",
    )
    assert "return [DataLoader(" in source
    facts = analyse(cst.parse_module(source))
    assert facts.loader_tuple_factories == {"get_loaders": 2}
    assert facts.loader_tuples == {"loaders": 2}
    code = convert_module(cst.parse_module(source), Options()).module.code
    assert "    loaders = accelerator.prepare(*loaders)\n" in code
    assert "gather_for_metrics" in code[code.index("def fit") : code.index("def main")]


INDEXED = (
    SCRIPT.replace("    train_loader, test_loader = loaders\n", "")
    .replace("in train_loader:", "in loaders[0]:")
    .replace("in test_loader:", "in loaders[-1]:")
)


def test_loops_over_items_of_a_loader_tuple_train_and_evaluate_over_its_loaders() -> None:
    # Before, neither loop was over a loader: the evaluation was not gathered.
    source = textwrap.dedent(INDEXED).replace("BOUND", FROM_FACTORY)
    assert "for x, y in loaders[0]:" in source
    facts = analyse(cst.parse_module(source))
    assert [(loop.function, loop.loader) for loop in facts.train_loops] == [("fit", "loaders[0]")]
    assert [(loop.function, loop.loader) for loop in facts.eval_loops] == [("fit", "loaders[-1]")]
    code = convert_module(cst.parse_module(source), Options()).module.code
    fit = code[code.index("def fit") : code.index("def main")]
    assert "accelerator.gather_for_metrics(" in fit
    assert "    loaders = accelerator.prepare(*loaders)\n" in code
    assert convert_module(cst.parse_module(code), Options()).module.code == code


def test_an_item_of_a_container_that_holds_no_loaders_is_no_loader() -> None:
    source = textwrap.dedent(INDEXED).replace("BOUND", "loaders = ([1, 2], [3])")
    facts = analyse(cst.parse_module(source))
    assert not facts.eval_loops
    assert "loaders[0]" not in facts.loaders


KEYED = (
    SCRIPT.replace("    train_loader, test_loader = loaders\n", "")
    .replace("in train_loader:", 'in loaders["train"]:')
    .replace("in test_loader:", 'in loaders["test"]:')
    .replace(
        "return DataLoader(train_set, batch_size=4, shuffle=True), DataLoader(test_set, batch_size=4)",
        'return {"train": DataLoader(train_set, batch_size=4, shuffle=True), "test": DataLoader(test_set, batch_size=4)}',
    )
)


def test_a_dict_of_loaders_a_factory_returns_is_prepared_by_its_values() -> None:
    # Before, the dict was not prepared at all (each process read every batch), and neither loop
    # over ``loaders["train"]``/``loaders["test"]`` was seen as over a loader.
    source = textwrap.dedent(KEYED).replace("BOUND", FROM_FACTORY)
    assert 'return {"train": DataLoader(' in source
    facts = analyse(cst.parse_module(source))
    assert facts.loader_dict_names == {"loaders"}
    assert [(loop.function, loop.loader) for loop in facts.train_loops] == [("fit", "loaders['train']")]
    assert [(loop.function, loop.loader) for loop in facts.eval_loops] == [("fit", "loaders['test']")]
    code = convert_module(cst.parse_module(source), Options()).module.code
    assert "    loaders = {key: accelerator.prepare(loader) for key, loader in loaders.items()}\n" in code
    assert "accelerator.gather_for_metrics(" in code[code.index("def fit") : code.index("def main")]
    again = analyse(cst.parse_module(code))
    assert "loaders" in again.prepared
    assert convert_module(cst.parse_module(code), Options()).module.code == code


def test_a_dict_holding_other_values_is_no_loader_dict() -> None:
    source = textwrap.dedent(KEYED).replace("BOUND", "loaders = {'train': [1], 'test': [2]}")
    facts = analyse(cst.parse_module(source))
    assert not facts.loader_dict_names
    assert not facts.eval_loops
