"""Run code written for Accelerate against ``runtime``: ``import accelerate...`` yields runtime's objects.

:func:`install` puts a finder first on ``sys.meta_path`` that answers every ``accelerate`` module
Accelerate's distributed test scripts import with a stand-in module whose attributes come from
runtime (``accelerate.utils`` -> ``runtime.utils``, ``accelerate.state`` -> the state objects,
...). Only the test helpers that are plain torch stay Accelerate's own: ``RegressionModel`` and
``RegressionDataset`` are loaded from Accelerate's ``test_utils/training.py`` file (whose own
``accelerate`` imports then resolve to runtime too). A name runtime lacks raises ImportError /
AttributeError, which is exactly what a case should report.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any


def accelerate_root() -> str:
    """The installed ``accelerate`` package's folder, found without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("accelerate")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the accelerate package is not installed")
    return next(iter(spec.submodule_search_locations))


# -- the few test helpers written on Accelerate's API, rewritten on runtime's -------------------
def are_the_same_tensors(tensor: Any) -> bool:
    """True when every rank holds a tensor equal to this rank's."""
    import torch

    from accel_convert.runtime.operations import gather
    from accel_convert.runtime.state_objects import PartialState

    mine = tensor[None].clone().to(PartialState().device)
    return all(torch.equal(other.cpu(), mine[0].cpu()) for other in gather(mine))


@contextlib.contextmanager
def assert_exception(exception_class: type[BaseException], msg: str | None = None) -> Iterator[None]:
    """The block must raise ``exception_class`` (with ``msg`` in its text, if given)."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 (checked right here)
        assert isinstance(error, exception_class), f"expected {exception_class}, got {type(error)}: {error}"
        assert msg is None or msg in str(error), f"expected {msg!r} in {error}"
        return
    raise AssertionError(f"expected {exception_class.__name__}, nothing was raised")


def _available(module: str) -> Callable[..., bool]:
    return lambda *args, **kwargs: importlib.util.find_spec(module) is not None


def _cuda_available(*args: Any, **kwargs: Any) -> bool:
    import torch

    return torch.cuda.is_available()


def _mps_available(*args: Any, **kwargs: Any) -> bool:
    import torch

    return torch.backends.mps.is_available()


#: ``accelerate.utils``'s environment probes the scripts call (not part of runtime's API).
_PROBES: dict[str, Any] = {
    "is_bf16_available": lambda *args, **kwargs: True,
    "is_fp16_available": lambda *args, **kwargs: True,
    "is_cuda_available": _cuda_available,
    "is_mps_available": _mps_available,
    "is_hpu_available": lambda *args, **kwargs: False,
    "is_xpu_available": lambda *args, **kwargs: False,
    "is_datasets_available": _available("datasets"),
    "is_pytest_available": _available("pytest"),
    "is_torchdata_stateful_dataloader_available": _available("torchdata"),
}


def _training_helpers() -> types.ModuleType:
    """Accelerate's ``test_utils/training.py`` (RegressionModel, RegressionDataset: plain torch)."""
    name = "accelerate.test_utils.training"
    path = os.path.join(accelerate_root(), "test_utils", "training.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: accelerate module -> where its names come from, in order (runtime module names, or callables
#: giving a namespace). Packages are the modules that have submodules here.
_SOURCES: dict[str, list[Any]] = {
    "accelerate": ["runtime"],
    "accelerate.accelerator": ["runtime.accelerator", "runtime"],
    "accelerate.state": ["runtime.state_objects", "runtime.gradient_state"],
    "accelerate.data_loader": ["runtime.data_loader"],
    "accelerate.logging": ["runtime.logging"],
    "accelerate.utils": ["runtime.utils", "runtime", _PROBES],
    "accelerate.utils.dataclasses": ["runtime.utils", "runtime"],
    "accelerate.utils.operations": ["runtime.operations"],
    "accelerate.utils.random": ["runtime.utils"],
    "accelerate.test_utils": [
        {"are_the_same_tensors": are_the_same_tensors},
        lambda: vars(importlib.import_module("accelerate.test_utils.training")),
    ],
    "accelerate.test_utils.testing": [
        {"assert_exception": assert_exception, "are_the_same_tensors": are_the_same_tensors}
    ],
}
_PACKAGES = {"accelerate", "accelerate.utils", "accelerate.test_utils"}


def _stand_in(name: str) -> types.ModuleType:
    module = types.ModuleType(name, f"runtime standing in for {name}")
    if name in _PACKAGES:
        module.__path__ = []  # a package, so that submodules are looked up (and found below)

    def lookup(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        for source in _SOURCES[name]:
            namespace = source() if callable(source) else source
            if isinstance(namespace, str):
                namespace = vars(importlib.import_module(namespace))
                if attribute not in namespace:
                    try:  # lazily exported names (module __getattr__)
                        return getattr(importlib.import_module(source), attribute)
                    except AttributeError:
                        continue
            if attribute in namespace:
                return namespace[attribute]
        raise AttributeError(f"runtime has no counterpart for {name}.{attribute}")

    module.__getattr__ = lookup  # type: ignore[method-assign]
    return module


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "accelerate.test_utils.training":
            return None  # loaded from Accelerate's file by _training_helpers
        if fullname in _SOURCES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname in _PACKAGES)
        if fullname == "accelerate" or fullname.startswith("accelerate."):
            raise ImportError(f"runtime has no counterpart for module {fullname}")
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _stand_in(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == "accelerate.test_utils":
            _training_helpers()


def install() -> None:
    """From now on ``import accelerate...`` in this process resolves to runtime."""
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return
    for name in [name for name in sys.modules if name == "accelerate" or name.startswith("accelerate.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _Finder())
