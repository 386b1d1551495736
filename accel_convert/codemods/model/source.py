"""Where things are in the file: imports, the lines each word and assignment is on, where calls are, and
the distributed machinery already there."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.positions import handler_sites
from accel_convert.codemods.engine.torch_names import (
    FEATURES,
)
from accel_convert.codemods.model.calls import nested_callee
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.state import Analysis


@provider(provides=("imports", "uses_torch"))
def imports(a: Analysis) -> None:
    """Local name → qualified name of everything imported; whether torch is imported at all."""
    a.facts.imports = a.r.names.imported_names()
    a.facts.uses_torch = a.r.names.any_import_of("torch")


@provider(provides=("word_lines",))
def word_lines(a: Analysis) -> None:
    """``facts.word_lines``: the line of the statement or call each identifier was met in.
    In pre-order, the last statement or call entered before a name lies inside the innermost
    statement holding the name, so its first line is inside that statement's lines."""
    line_of = [a.site(node).line for node in a.r.collected]
    for word, indices in a.r.words.items():
        a.facts.word_lines[word] = sorted({line_of[index] for index in indices})


@provider(refines=("call_sites",), provides=("called", "existing_features"))
def calls_and_features(a: Analysis) -> None:
    """Where calls are, by qualified name, plain name and ``.method`` (a function nested in a
    module-level function's body also by its path, as the call graph names it); the distributed machinery
    already there (DDP, ``mp.spawn``, a GradScaler...)."""
    facts = a.facts
    for call in a.r.calls:
        qualified = a.r.names.qualified_name(call.node.func, call.scope)
        func = call.node.func
        key = qualified or (func.value if isinstance(func, cst.Name) else None)
        if key is not None:
            facts.called.add(key)
            facts.call_sites.setdefault(key, []).append(a.site(call.node))
        if isinstance(func, cst.Attribute):
            facts.call_sites.setdefault("." + func.attr.value, []).append(a.site(call.node))
        nested = nested_callee(a, call)
        if nested is not None:
            facts.call_sites.setdefault(nested, []).append(a.site(call.node))
        if qualified is None:  # a strict answer is also the lenient one
            qualified = a.qualified(call)
        feature = FEATURES.get(qualified or "")
        if feature is not None:
            facts.existing_features.add(feature)


@provider(provides=("assign_sites",))
def assign_sites(a: Analysis) -> None:
    """Where each name (or dotted path) is assigned."""
    for assign in a.r.assigns:
        site = a.site(assign.node)
        for target in assign.targets:
            a.facts.assign_sites.setdefault(target, []).append(site)


def exception_handlers(a: Analysis, exception: str) -> tuple[Site, ...]:
    """The ``except`` clauses naming ``exception`` (``except KeyboardInterrupt:``, ``except
    torch.cuda.OutOfMemoryError:``; the ``except`` keyword of each), found in the text only when the
    walk met the name: for the rule provider of the check that reports them."""
    if exception not in a.r.words:
        return ()
    module = a.module
    assert module is not None, "the handlers are read from the module the recorder walked"
    text = a.source if a.source is not None else module.code
    return tuple(handler_sites(text, module.encoding, exception))
