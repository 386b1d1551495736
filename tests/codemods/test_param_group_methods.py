"""A model whose own methods hand out its parameter groups (deeplab's ``get_1x_lr_params()``) is
the optimizer's model, prepared with it; a factory's non-loader value unpacked into a trainer's
attribute (``self.nclass``) is no loader, and a factory's loaders are prepared once, by the caller."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from tests.launching import REPO_ROOT

CASES = REPO_ROOT / "fixtures" / "cases"


def _prepared(code: str) -> list[list[str]]:
    """The arguments of every ``accelerator.prepare(...)`` call of ``code``, as written."""
    module = cst.parse_module(code)
    found: list[list[str]] = []

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "prepare":
                found.append([module.code_for_node(arg.value) for arg in node.args])

    module.visit(Finder())
    return found


@pytest.mark.parametrize(
    ("shape", "model"),
    [("module", "net"), ("function", "model"), ("class", "self.model")],
)
def test_model_of_parameter_group_methods_is_prepared(shape: str, model: str) -> None:
    source = (CASES / f"param_group_methods_{shape}.py").read_text()
    result = convert_module(cst.parse_module(source), Options())
    prepared = _prepared(result.module.code)
    assert any(model in args for args in prepared), prepared
    assert not any(change.code == "ACC926" for change in result.changes)


def test_factory_values_in_trainer_prepared_once_and_only_loaders() -> None:
    source = (CASES / "param_group_methods_class.py").read_text()
    prepared = _prepared(convert_module(cst.parse_module(source), Options()).module.code)
    flat = [name for args in prepared for name in args]
    assert "self.nclass" not in flat
    assert flat.count("self.train_loader") == 1 and "train_loader" not in flat


def test_class_count_of_another_modules_factory_is_no_loader() -> None:
    """deeplab's ``self.train_loader, self.val_loader, self.test_loader, self.nclass =
    make_data_loader(...)``, the factory in another module: the class count is not prepared, the
    model (given its parameter groups by its own methods) is, and its local is never unwrapped."""
    folder = REPO_ROOT / "fixtures" / "projects" / "param_group_methods_package"
    files = {"train": folder / "train.py", "model": folder / "model.py", "loaders": folder / "loaders" / "__init__.py"}
    modules = [
        ProgramModule(name, cst.parse_module(path.read_text()), path.read_text(), is_package=name == "loaders")
        for name, path in files.items()
    ]
    code = convert_program(modules, "train", Options())["train"].module.code
    flat = [name for args in _prepared(code) for name in args]
    assert "self.nclass" not in flat
    assert {"self.model", "self.optimizer", "self.train_loader", "self.val_loader"} <= set(flat)
    assert "unwrap_model(model)" not in code
