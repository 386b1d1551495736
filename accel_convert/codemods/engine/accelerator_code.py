"""Writing and finding accelerator code: the name converted code uses for the accelerator, calls
on it, the statement that creates it, and which identifiers a call must contain (for the passes'
statement targeting).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.facts import FactQuestions, ScriptFacts
from accel_convert.codemods.engine.syntax import argument_for, names_variable, statement

#: The function the out-of-memory retry wraps training code in (decorated with
#: ``find_executable_batch_size``; it takes the batch size).
RETRIED_TRAINING_FUNCTION = "inner_training_loop"
#: Its parameter: the batch size each try runs with, read where the original read the loader's.
RETRIED_BATCH_SIZE = "batch_size"
#: The line each attempt of the retried training prints (``format`` takes the batch size): the
#: only output a conversion adds on purpose, which ``verify`` leaves out of its comparisons.
RETRY_ANNOUNCEMENT = "Training with batch size {}"
#: The function a converted loop moves its batch with where no ``prepare`` does (a loader left
#: unsharded, ACC127): ``accelerate.utils``'s, and the runtime's of the same name and behaviour.
BATCH_MOVER = "send_to_device"

#: Longest one-line prepare statement before the arguments go on their own line.
PREPARE_LINE_LIMIT = 100


def callee_words(facts: ScriptFacts, qualified_names: Iterable[str]) -> set[str]:
    """The identifiers a call to one of ``qualified_names`` must contain, however it is written:
    the last part (``save`` of ``torch.save``, ``np.save``) or a local alias
    (``from torch import save as save_to``): for ``ScriptFacts.lines_mentioning``."""
    wanted = set(qualified_names)
    words = {qualified.rpartition(".")[2] for qualified in wanted}
    return words | {local for local, qualified in facts.imports.items() if qualified in wanted}


def name_words(names: Iterable[str]) -> set[str]:
    """The identifier every mention of a (dotted) name contains: its last part (``model`` of
    ``self.model``; ``loaders`` of ``loaders[0]``, an item of a loader tuple)."""
    return {name.partition("[")[0].rpartition(".")[2] for name in names}


def accelerator_name(facts: FactQuestions) -> str:
    """The variable converted code uses for the accelerator."""
    return facts.existing_accelerator or facts.accelerator_name


def accelerator_call(facts: ScriptFacts, method: str, *args: cst.BaseExpression | cst.Arg) -> cst.Call:
    """``accelerator.<method>(args...)``."""
    return cst.Call(
        func=cst.Attribute(value=cst.Name(accelerator_name(facts)), attr=cst.Name(method)),
        args=[a if isinstance(a, cst.Arg) else cst.Arg(a) for a in args],
    )


def unwrap_model(facts: ScriptFacts, model: cst.BaseExpression) -> cst.Call:
    """``accelerator.unwrap_model(model)``."""
    return accelerator_call(facts, "unwrap_model", model)


def is_accelerator_method(node: cst.CSTNode | None, facts: FactQuestions, *methods: str) -> bool:
    """Whether ``node`` is a call ``accelerator.<one of methods>(...)``."""
    # ``type() is`` rather than ``isinstance``: asked of most nodes of a file, mostly of other
    # types, where ``isinstance`` against libcst's classes (their metaclass is ABCMeta) costs a
    # Python call each.
    return (
        type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and names_variable(node.func.value, accelerator_name(facts))
        and node.func.attr.value in methods
    )


def seen_through_unwrap(node: cst.BaseExpression, facts: FactQuestions) -> cst.BaseExpression:
    """``node`` as the original script wrote it: ``model`` for ``accelerator.unwrap_model(model)``,
    ``self.attack`` for ``self.accelerator.unwrap_model(self).attack`` (a script converted already
    reads its model through the accelerator, and a second conversion must judge the object it
    unwraps); any other expression as it is: another object's ``unwrap_model``, a function of that
    name, a call without the model."""
    if isinstance(node, cst.Attribute):
        inner = seen_through_unwrap(node.value, facts)
        return node if inner is node.value else node.with_changes(value=inner)
    if isinstance(node, cst.Call) and is_accelerator_method(node, facts, "unwrap_model"):
        model = argument_for(node, 0, "model")
        return node if model is None else model.value
    return node


def prepare_statements(
    accelerator: str,
    names: list[str],
    indent: str,
    tuples: Mapping[str, int],
    parts: Mapping[str, tuple[str, ...]] | None = None,
    prepared: AbstractSet[str] = frozenset(),
    dicts: AbstractSet[str] = frozenset(),
) -> list[cst.BaseStatement]:
    """:func:`prepare_statement` for ``names``, but each name holding a tuple of loaders
    (``tuples``: ``loaders = get_loaders(...)``) prepared by its elements on a line of its own,
    ``loaders = accelerator.prepare(*loaders)``: ``prepare`` passes a tuple through unchanged, and
    returns a tuple for several objects (the runtime's and Accelerate's), so the name holds as
    many prepared loaders, in the same order. A tuple written of loader names (``parts``) whose
    every loader is prepared by its name here or before (``names``, ``prepared``) is bound again
    to them instead, ``loaders = (train_loader, test_loader)``: each loader is prepared once. A
    dict of loaders (``dicts``) is prepared by its values, ``loaders = {key:
    accelerator.prepare(loader) for key, loader in loaders.items()}``."""
    plain = [name for name in names if name not in tuples and name not in dicts]
    found = [prepare_statement(accelerator, plain, indent)] if plain else []
    done = set(prepared) | set(plain)
    for name in names:
        written = (parts or {}).get(name)
        if name in dicts:
            found.append(
                statement(f"{name} = {{key: {accelerator}.prepare(loader) for key, loader in {name}.items()}}")
            )
        if name not in tuples:
            continue
        if written is not None and done.issuperset(written):
            found.append(statement(f"{name} = ({', '.join(written)})"))
        else:
            found.append(statement(f"{name} = {accelerator}.prepare(*{name})"))
    return found


def prepare_statement(accelerator: str, names: list[str], indent: str) -> cst.BaseStatement:
    """``a, b = accelerator.prepare(a, b)``, its arguments on their own line when too long;
    ``indent`` is where the statement goes, ``accelerator`` how the code there reaches it."""
    joined = ", ".join(names)
    one_line = f"{joined} = {accelerator}.prepare({joined})"
    if len(indent) + len(one_line) <= PREPARE_LINE_LIMIT:
        return statement(one_line)
    return statement(f"{joined} = {accelerator}.prepare(\n    {joined}\n)")
