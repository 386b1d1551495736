"""Random draws and seeds: the one answer to "does this call draw from a global generator, and
has the script seeded it" (asked by the agreed-random rewrite and the unseeded-random check).

A draw is a call of one of torch's random tensor functions or of ``numpy.random`` (not given its
own ``generator=``); a seeding call is any call whose function's name says seed. A name the
conversion already made agree (``W = broadcast_object_list([W])[0]``) is no longer per process.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.torch_names import (
    NUMPY_RANDOM_NOT_DRAWS,
    PYTHON_RANDOM_NOT_DRAWS,
    RANDOM_TENSOR_FUNCTIONS,
    TORCH_ONLY_SEEDS,
)

#: The calls that give every process rank 0's state of the global generators, for each target:
#: the runtime's method, and Accelerate's ``synchronize_rng_states`` (with the object broadcasts
#: of Python's and NumPy's states written next to it).
AGREEING_METHOD = "agree_random_state"
AGREEING_FUNCTION = "synchronize_rng_states"


def agreed_names(module: cst.Module) -> set[str]:
    """Names a module-level ``W, b = broadcast_object_list([W, b])`` (or ``W =
    broadcast_object_list([W])[0]``) makes the same on every process (ACC124 agreed-random
    wrote it, or the script's author)."""
    names: set[str] = set()
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.Assign):
                continue
            value = small.value.value if isinstance(small.value, cst.Subscript) else small.value
            if isinstance(value, cst.Call) and (dotted(value.func) or "").rpartition(".")[2] == "broadcast_object_list":
                for target in small.targets:
                    node = target.target
                    elements = [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List)) else [node]
                    names.update(e.value for e in elements if isinstance(e, cst.Name))
    return names


def is_seeding_call(call: cst.Call, facts: ScriptFacts) -> bool:
    """A call of a library function (``torch.manual_seed``, accelerate's ``set_seed``,
    ``np.random.seed``) or of a plain-named function (the script's own ``set_seed(42)``) whose
    name says seed; a generator's own ``g.manual_seed(1)`` seeds only that generator."""
    name = facts.qualified_name(call.func) or (call.func.value if isinstance(call.func, cst.Name) else "")
    return "seed" in name.rpartition(".")[2]


def is_draw(qualified: str) -> bool:
    return qualified in RANDOM_TENSOR_FUNCTIONS or (
        qualified.startswith("numpy.random.") and qualified not in NUMPY_RANDOM_NOT_DRAWS
    )


def is_global_draw(qualified: str) -> bool:
    """A draw from torch's, NumPy's or Python's ``random`` global generator (``random.uniform``,
    ``random.choice``, ``np.random.rand``, ``torch.randn``)."""
    return is_draw(qualified) or (qualified.startswith("random.") and qualified not in PYTHON_RANDOM_NOT_DRAWS)


def seeds_generator_of(seeding: str, draw: str) -> bool:
    """Whether a seeding call (its qualified or plain name) seeds the generator ``draw`` draws
    from: ``torch.manual_seed`` seeds torch's alone, ``np.random.seed`` NumPy's, ``random.seed``
    Python's; any other (accelerate's ``set_seed``, the script's own) is taken to seed them all."""
    if seeding in TORCH_ONLY_SEEDS:
        return draw.startswith("torch.")
    if seeding.startswith(("numpy.random.", "random.")):
        return draw.startswith(seeding.rpartition(".")[0] + ".")
    return True


def is_agreeing_call(call: cst.Call) -> bool:
    """``accelerator.agree_random_state()``, ``PartialState().agree_random_state()`` or
    Accelerate's ``synchronize_rng_states(...)``: from here on every process draws what rank 0
    draws (ACC124 agreed-random wrote it). With ``--target accelerate``, a module-level agreement
    ends with torch's state broadcast from rank 0 (``torch.set_rng_state(broadcast_object_list(...)[0])``)."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else (dotted(func) or "")
    if name == "set_rng_state" and call.args:
        value = call.args[0].value
        inner = value.value if isinstance(value, cst.Subscript) else value
        return isinstance(inner, cst.Call) and (dotted(inner.func) or "").rpartition(".")[2] == "broadcast_object_list"
    return name in (AGREEING_METHOD, AGREEING_FUNCTION)


def unseeded_draw(call: cst.Call, facts: ScriptFacts) -> bool:
    """A draw from the global generator (not one given its own ``generator=``)."""
    if any(arg.keyword is not None and arg.keyword.value == "generator" for arg in call.args):
        return False
    return is_draw(facts.qualified_name(call.func) or "")
