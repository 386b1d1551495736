"""Values that are DataLoaders: the one answer to "does this expression build a DataLoader, or a
dict of them" (asked by the loader-dict rewrite and the no-DataLoader check).

A DataLoader is built by a call of one of :data:`~torch_names.DATA_LOADERS`, matched by its
qualified name (``torch.utils.data.DataLoader`` however it was imported); a dict of loaders is a
dict comprehension building one per key or a dict literal with one among its values.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import FactQuestions


def builds_loader(value: cst.CSTNode, facts: FactQuestions) -> bool:
    """``DataLoader(...)``."""
    return isinstance(value, cst.Call) and facts.builds_data_loader(value.func)


def holds_loaders(value: cst.BaseExpression, facts: FactQuestions) -> bool:
    """``{split: DataLoader(...) for split in ...}`` or ``{"train": DataLoader(...), ...}``."""
    if isinstance(value, cst.DictComp):
        return builds_loader(value.value, facts)
    return isinstance(value, cst.Dict) and any(
        isinstance(element, cst.DictElement) and builds_loader(element.value, facts) for element in value.elements
    )
