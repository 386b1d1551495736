"""Loops: the only train/eval decision, and the batch names a prepared loader already places."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import BATCH_MOVER, seen_through_unwrap
from accel_convert.codemods.engine.devices import constructed
from accel_convert.codemods.engine.facts import MODULE, LoopFacts, callers_closure
from accel_convert.codemods.engine.imported_calls import program_callee
from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.names import BuiltinOf, builtins_at
from accel_convert.codemods.engine.syntax import (
    dotted,
    is_backward,
    is_host_number,
    names_in,
    names_variable,
    nodes_in,
    parameter_filled,
    target_names,
)
from accel_convert.codemods.engine.torch_names import CLIPPERS, LIST_GROWING_METHODS
from accel_convert.codemods.model.calls import nested_function, stepped
from accel_convert.codemods.model.classes import model_classes
from accel_convert.codemods.model.loaders import callee_parameters
from accel_convert.codemods.model.plan import ConversionPlan
from accel_convert.codemods.model.provider import provider, rule_provider
from accel_convert.codemods.model.recorder import (
    CallRecord,
    LoopRecord,
    WhileRecord,
)
from accel_convert.codemods.model.state import Analysis


def _batch_data_targets(assign: cst.Assign, batch: set[str], builtin: BuiltinOf) -> set[str]:
    """The targets of ``assign`` (whose value reads batch names without a call) that hold batch
    data: ``x`` of ``x = batch["input"]`` and of ``x, n = batch[0], batch[0].shape[0]``, not
    ``n``, nor ``b, c`` of ``b, c = x.shape``: sizes are Python numbers on the host
    (:func:`syntax.is_host_number`)."""
    found: set[str] = set()
    for target in assign.targets:
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(target.target, assign.value)]
        while pairs:
            bound, value = pairs.pop()
            if is_host_number(value, builtin) or not names_in(value) & batch:
                continue
            if (
                isinstance(bound, (cst.Tuple, cst.List))
                and isinstance(value, (cst.Tuple, cst.List))
                and len(bound.elements) == len(value.elements)
                and not any(isinstance(e, cst.StarredElement) for e in [*bound.elements, *value.elements])
            ):
                pairs.extend((b.value, v.value) for b, v in zip(bound.elements, value.elements))
            else:
                found.update(target_names(bound))
    return found


#: Tensor methods returning a copy of the tensor on its own device: what they return is batch
#: data as much as what they copy (``indx_target = target.clone()``, pytorch-playground).
_SAME_DEVICE_COPIES = frozenset({"clone", "detach"})


def _is_plain_access(value: cst.BaseExpression) -> bool:
    """Subscripts, attributes, names and tuples of them, and copies of them (``.clone()``): no
    call that could compute something."""
    if isinstance(value, (cst.Name, cst.Attribute)):
        return True
    if (
        isinstance(value, cst.Call)
        and not value.args
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _SAME_DEVICE_COPIES
    ):
        return _is_plain_access(value.func.value)
    if isinstance(value, cst.Subscript):
        return _is_plain_access(value.value)
    if isinstance(value, (cst.Tuple, cst.List)):
        return all(_is_plain_access(element.value) for element in value.elements)
    return False


@provider(
    needs=(
        "train_loaders",
        "prepared",
        "models",
        "optimizers",
        "input_optimizers",
        "schedulers",
        "frozen_models",
        "existing_accelerator",
        "call_graph",
        "arguments",
        "loop_calls",
        "evaluating_methods",
    ),
    provides=(
        "backward_functions",
        "backward_methods",
        "backward_site",
        "backward_trains",
        "trains_here",
        "backward_helpers",
        "training_backward_sites",
        "loss_names",
        "train_loops",
        "eval_loops",
        "eval_loaders",
        "loader_loops",
        "loader_comprehensions",
        "evaluating_calls_out",
        "training_calls_out",
        "backward_fed_elsewhere",
    ),
    refines=("train_loaders", "loop_backward"),
)
def loops(a: Analysis) -> None:
    """The only train/eval decision: a loop over a loader trains when a backward runs in it
    (directly, in a function it calls or a method of its class); it evaluates under
    ``no_grad``/``inference_mode``, after ``model.eval()``, or when it decodes with a model's
    ``generate``. Loaders are sorted into train and eval loaders by how they are looped over."""
    facts = a.facts
    facts.backward_helpers = _backward_helpers(a)
    facts.trains_here = _trains_here(a)
    facts.backward_trains = _steps_something(a)
    backward_functions = _functions_with_backward(a) if facts.backward_trains else set()
    facts.backward_functions = set(backward_functions)
    facts.training_backward_sites = _sites_of(a, training_backwards(a))
    switches = _mode_switches(a)
    created_loaders = _created_loaders(a)
    known = created_loaders | (facts.prepared - facts.models - facts.optimizers - facts.schedulers)
    decoding = _decoding_loops(a)
    called_to_evaluate = _called_only_to_evaluate(a, switches)
    train: set[str] = set()
    evaluation: set[str] = set()
    wrapped_evaluations: list[LoopRecord] = []
    for loop in a.r.loops:
        trains = _trains(a, loop, backward_functions)
        evaluates = (
            loop.no_grad
            or _switched_to_eval(switches, loop.function, loop.order)
            or id(loop) in decoding
            or not facts.backward_trains
            or (loop.function, loop.method) in called_to_evaluate
        )
        if loop.iterated is None or not _over_known_loader(a, loop.function, loop.iterated, known):
            # ``for batch in progress(test_loader)`` through a wrapper the roles do not know:
            # an evaluation all the same (the loader is prepared), though it says nothing of
            # the loader's role.
            if not trains and evaluates and loop.through_calls is not None:
                wrapped_evaluations.append(loop)
            continue
        origins = a.origins_of(loop.function, loop.iterated) | {loop.iterated}
        a.loader_loops.append((loop, origins))
        if trains or evaluates:
            kind: Literal["train", "eval"] = "train" if trains else "eval"
            record = LoopFacts(loop.function, loop.iterated, loop.targets, kind, a.site(loop.node), loop.nested)
            (facts.train_loops if trains else facts.eval_loops).append(record)
            (train if trains else evaluation).update(origins)
    train |= _read_by_hand_in_training(a, created_loaders - evaluation, backward_functions)
    _sort_loaders(a, created_loaders, train, evaluation)
    for loop in wrapped_evaluations:
        if loop.through_calls in facts.loaders:
            record = LoopFacts(
                loop.function, loop.through_calls or "", loop.targets, "eval", a.site(loop.node), loop.nested
            )
            facts.eval_loops.append(record)
    _comprehension_evaluations(a, switches, backward_functions)
    _training_calls_across_modules(a)


@provider(provides=("evaluating_methods",))
def evaluating_methods(a: Analysis) -> None:
    """Methods of the file's model classes that evaluate (``facts.evaluating_methods``, as
    ``"Class.method"``): they switch their instance to eval mode (``self.eval()``,
    ``self.train(False)``; faster-rcnn's ``predict``), or run it (``self(x)``, ``self.forward``)
    under ``no_grad`` only. A loop over a loader calling one on a model evaluates, though it
    has neither ``no_grad`` nor ``model.eval()`` itself (:func:`_decoding_loops`)."""
    for name in model_classes(a):
        owner = a.r.classes[name]
        runs: dict[str, list[bool]] = {}
        for call in a.r.calls:
            if len(call.scope) != 2 or call.scope[0] != name or call.scope[1] in ("forward", "__init__"):
                continue
            instance = owner.self_names.get(call.scope[1])
            callee = dotted(call.node.func)
            if instance is None or callee is None:
                continue
            if callee.startswith(f"{instance}.") and _mode_set(callee[len(instance) + 1 :], call.node.args) == "eval":
                a.facts.evaluating_methods.add(f"{name}.{call.scope[1]}")
            elif callee in (instance, f"{instance}.forward"):
                runs.setdefault(call.scope[1], []).append(call.no_grad)
        a.facts.evaluating_methods.update(f"{name}.{method}" for method, no_grad in runs.items() if all(no_grad))


def _training_calls_across_modules(a: Analysis) -> None:
    """The training loops' calls of other modules' functions and methods, and this module's
    training steps those calls run. Each module tells the program which of the others'
    functions it calls, by qualified name, inside a loop over a loader that trains or at least
    evaluates nothing (``training``: the loops' nodes, by id): ``trainer.train_step(x, y)`` in the
    entry's loop over ``train_loader`` is ``trainer.DetectorTrainer.train_step``
    (``training_calls_out``); the seeds hand the callee's module those that are its own
    (``fed_from_elsewhere``). A backward there trains on the batches those loops hand it, a
    prepared loader's (``backward_fed_elsewhere``): no loader of its own is missing (ACC901
    stays silent)."""
    facts = a.facts
    if a.seeds is None:
        return
    # A loop calling another module's training step per batch (``trainer.train_step(x, y)``)
    # runs no backward this module sees: every loop over a loader that evaluates nothing.
    evaluating = {record.site for record in facts.eval_loops}
    training = {id(loop.node) for loop, _ in a.loader_loops if a.site(loop.node) not in evaluating}
    calls_out: dict[str, bool] = {}
    for call in a.r.calls:
        imported = _program_callee_or_method(a, call) if call.loops else None
        if imported is not None:
            in_training = any(id(loop.node) in training for loop in call.loops)
            calls_out[imported] = calls_out.get(imported, True) and in_training
    facts.training_calls_out = calls_out
    fed = a.seeds.fed_from_elsewhere
    # A class counts among the functions running a backward through its methods: those are the steps.
    steps = {f"{owner}.{method}" for owner, method in a.backward_methods}
    steps |= set(facts.backward_functions) - set(a.r.classes)
    facts.backward_fed_elsewhere = bool(steps) and steps <= fed


def _sort_loaders(a: Analysis, created: set[str], train: set[str], evaluation: set[str]) -> None:
    """``train_loaders`` and ``eval_loaders``: by the loops over them; a loader both trained and
    evaluated on trains; loaders never looped over keep their name's hint."""
    unknown = created - train - evaluation
    a.facts.train_loaders = (train | {n for n in unknown if "train" in n.lower()}) - (evaluation - train)
    a.facts.eval_loaders = (evaluation | {n for n in unknown if "train" not in n.lower()}) - a.facts.train_loaders


#: (order of the call, function, "eval" or "train") for each ``x.eval()``/``x.train()``.
_ModeSwitch = tuple[int, str, str]


def _mode_switches(a: Analysis) -> list[_ModeSwitch]:
    """Every ``model.eval()`` and ``model.train()`` call, in walk order, with ``model.train(False)``
    (``train(mode=False)``) an ``.eval()`` and ``model.train(True)`` a ``.train()``: PyTorch's
    introductory training tutorial validates after ``model.train(False)``, without ``no_grad``.
    A mode given by a name (``model.train(is_training)``) says neither."""
    switches = []
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Attribute) and (mode := _mode_set(func.attr.value, call.node.args)) is not None:
            switches.append((call.order, call.function, mode))
    return switches


def _mode_set(method: str, args: Sequence[cst.Arg]) -> str | None:
    """``"eval"`` or ``"train"``: the mode ``.eval()``/``.train(...)`` called with ``args`` sets."""
    if method == "eval" and not args:
        return "eval"
    if method != "train" or len(args) > 1:
        return None
    if not args:
        return "train"
    arg = args[0]
    if arg.keyword is not None and arg.keyword.value != "mode":
        return None
    value = arg.value
    if isinstance(value, cst.Name) and value.value in {"True", "False"}:
        return "train" if value.value == "True" else "eval"
    return None


def _switched_to_eval(switches: list[_ModeSwitch], function: str, order: int) -> bool:
    """Whether the last mode switch in ``function`` before ``order`` is an ``.eval()``."""
    last = max((switch for switch in switches if switch[1] == function and switch[0] < order), default=None)
    return last is not None and last[2] == "eval"


def _called_only_to_evaluate(a: Analysis, switches: list[_ModeSwitch]) -> set[tuple[str, str | None]]:
    """Module-level functions ``(name, None)`` and methods called on ``self`` ``(class, method)``
    every call of which is made under ``no_grad``/``inference_mode``/``set_grad_enabled(False)``
    or after the caller's ``model.eval()``: the calling context decides (a course's
    ``compute_accuracy(model, loader)``, with neither inside, called under ``with
    torch.set_grad_enabled(False):``), so their loops evaluate. The calls other modules of the
    program make count too (the helper in ``helper.py``, the call in the training script): each
    module tells the program how it calls the others' functions (``evaluating_calls_out``), and
    the seeds hand the joined verdicts to the callee's module.

    A call made in a function that is itself called only to evaluate evaluates as well, however
    many calls deep (deep-text-recognition-benchmark's ``test()`` calls ``benchmark_all_eval``
    under ``no_grad``, which calls ``validation`` with neither around it: ``validation``, also
    handed the training script's prepared loader, evaluates)."""
    elsewhere = _verdicts_from_elsewhere(a)
    lexical = [
        (call, call.no_grad or _switched_to_eval(switches, call.function, call.order), _callee(a, call))
        for call in a.r.calls
    ]
    found: set[tuple[str, str | None]] = set()
    while True:
        verdicts = dict(elsewhere)
        for call, evaluating, callee in lexical:
            if callee is not None:
                verdicts[callee] = verdicts.get(callee, True) and (evaluating or _caller(a, call) in found)
        now = {callee for callee, evaluating in verdicts.items() if evaluating}
        if now == found:
            break
        found = now
    a.facts.evaluating_calls_out = _evaluating_calls_out(a, lexical, found)
    return found


def _verdicts_from_elsewhere(a: Analysis) -> dict[tuple[str, str | None], bool]:
    """The seeds' joined verdicts on how the program's other modules call this one's functions
    and methods: evaluating only when every call of theirs evaluates."""
    verdicts: dict[tuple[str, str | None], bool] = {}
    for function, evaluating in a.seeds.evaluated_from_elsewhere if a.seeds is not None else ():
        owner, _, method = function.rpartition(".")
        key = (owner, method) if owner else (function, None)
        verdicts[key] = verdicts.get(key, True) and evaluating
    return verdicts


def _evaluating_calls_out(
    a: Analysis,
    lexical: list[tuple[CallRecord, bool, tuple[str, str | None] | None]],
    evaluating_here: set[tuple[str, str | None]],
) -> dict[str, bool]:
    """How this module calls the other modules' functions and methods (``evaluating_calls_out``):
    evaluating when every call is made under ``no_grad``, after ``model.eval()``, or in a function
    that is itself only called to evaluate."""
    calls_out: dict[str, bool] = {}
    if a.seeds is None:
        return calls_out
    for call, evaluating, callee in lexical:
        if callee is None and (imported := _program_callee_or_method(a, call)) is not None:
            calls_out[imported] = calls_out.get(imported, True) and (evaluating or _caller(a, call) in evaluating_here)
    return calls_out


def _caller(a: Analysis, call: CallRecord) -> tuple[str, str | None]:
    """The function ``(name, None)`` or method ``(class, method)`` a call is made in, keyed as
    :func:`_callee` keys what it calls."""
    if call.function in a.r.classes and len(call.scope) >= 2:
        return call.function, call.scope[1]
    return call.function, None


def _program_callee_or_method(a: Analysis, call: CallRecord) -> str | None:
    """The qualified name of the other module's function a call runs (``helper.accuracy``), or of
    the method of another module's class it runs on an instance built in the call or bound in
    the same function or class (``pkg.evalu.Evaluator.accuracy`` for
    ``Evaluator(device).accuracy(...)``, ``evaluator.accuracy(...)`` after ``evaluator =
    Evaluator(device)``, ``self.evaluator.accuracy(...)`` after ``self.evaluator = ...``)."""
    func = call.node.func
    found = program_callee(a.facts, func, call.scope)
    if found is not None or not isinstance(func, cst.Attribute):
        return found
    receiver = func.value
    instance = dotted(receiver)
    if instance is not None:
        built = [
            assign.value for assign in a.r.assigns if assign.function == call.function and assign.targets == (instance,)
        ]
        receiver = constructed(built[0]) if len(built) == 1 else receiver
    if not isinstance(receiver, cst.Call):
        return None
    owner = program_callee(a.facts, receiver.func, call.scope)
    return f"{owner}.{func.attr.value}" if owner is not None else None


def _callee(a: Analysis, call: CallRecord) -> tuple[str, str | None] | None:
    """``(function, None)`` for a call of a module-level function of the file from elsewhere,
    ``(class, method)`` for ``self.method(...)`` in another method of the class; None otherwise."""
    func = call.node.func
    if isinstance(func, cst.Name) and func.value in a.r.defs and func.value != call.function:
        return func.value, None
    owner = a.r.classes.get(call.function)
    if (
        owner is not None
        and len(call.scope) >= 2
        and isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == owner.self_names.get(call.scope[1])
        and func.attr.value in owner.self_names
        and func.attr.value != call.scope[1]
    ):
        return call.function, func.attr.value
    return None


def _created_loaders(a: Analysis) -> set[str]:
    """The loaders the roles know (all in ``train_loaders`` until sorted here), and prepared names
    a loop iterates (a script converted already)."""
    facts = a.facts
    return set(facts.train_loaders) | {
        name
        for name in facts.prepared - facts.models - facts.optimizers - facts.schedulers
        if any(loop.iterated == name for loop in a.r.loops)
    }


def _decoding_loops(a: Analysis) -> set[int]:
    """Loops (by id) decoding with a model's own ``generate``, or calling a method of the model
    that evaluates (:func:`evaluating_methods`, here or, through the seeds, of the program's
    model classes: faster-rcnn's ``faster_rcnn.predict(imgs, sizes)``, which calls
    ``self.eval()``): they evaluate even without ``no_grad`` or ``model.eval()`` (sampling loops
    often have neither). Only where they count or collect something (a metric): a loop that only
    writes samples out has no per-process figure to gather or report."""
    facts = a.facts
    models = facts.models | facts.frozen_models
    evaluating = {"generate"} | {qualified.rpartition(".")[2] for qualified in facts.evaluating_methods}
    if a.seeds is not None:
        evaluating |= {
            method
            for owner, _, method in (qualified.rpartition(".") for qualified in a.seeds.evaluating_methods)
            if owner in a.seeds.model_classes
        }
    collecting = {id(loop) for aug in a.r.aug_assigns for loop in aug.loops} | {
        id(loop)
        for call in a.r.calls
        if isinstance(call.node.func, cst.Attribute) and call.node.func.attr.value in LIST_GROWING_METHODS
        for loop in call.loops
    }
    return {
        id(call.loops[-1])
        for call in a.r.calls
        if call.loops
        and isinstance(call.node.func, cst.Attribute)
        and call.node.func.attr.value in evaluating
        and dotted(seen_through_unwrap(call.node.func.value, facts)) in models
        and id(call.loops[-1]) in collecting
    }


def _over_known_loader(a: Analysis, function: str, iterated: str, known: set[str]) -> bool:
    """Whether a loop in ``function`` over ``iterated`` iterates one of the ``known`` loaders
    (under its own name or one its callers pass)."""
    return bool(a.origins_of(function, iterated) & known) or iterated in known


def _trains(a: Analysis, loop: LoopRecord, backward_functions: set[str]) -> bool:
    """A backward runs in the loop: directly, in a function it calls, or in a method of its class."""
    return (
        loop.has_backward
        or bool(loop.calls & backward_functions)
        or any((loop.function, method) in a.backward_methods for method in loop.method_calls)
    )


def _read_by_hand_in_training(a: Analysis, loaders: set[str], backward_functions: set[str]) -> set[str]:
    """Of ``loaders``, those read batch by batch in a function that runs the backward: with
    ``next(iter(loader))``, or through what the script builds around them and then draws from
    there (an iterator kept in a name, ``InfiniteDataLoader(loader)``, a generator ``cycle(loader)``
    that re-iterates it forever): they train."""
    wrapped = _wrapped_loaders(a, loaders)
    found = set()
    for call in a.r.calls:
        drawn = _builtin_draw(a, call)
        if drawn is None or len(call.node.args) != 1 or call.function not in backward_functions:
            continue
        name = dotted(call.node.args[0].value)
        if name is None:
            continue
        if drawn == "iter" and name in loaders:
            found.add(name)
        found |= _wrapped_in(a, wrapped, call.function, name)
    for loop in a.r.loops:
        if loop.iterated is not None and _trains(a, loop, backward_functions):
            found |= _wrapped_in(a, wrapped, loop.function, loop.iterated)
    return found


def _builtin_draw(a: Analysis, call: CallRecord) -> str | None:
    """``"iter"`` or ``"next"`` where ``call`` calls that builtin (not a name the script binds)."""
    drawn = a.r.names.builtin(call.node.func, call.scope)
    return drawn if drawn in ("iter", "next") else None


def _wrapped_in(a: Analysis, wrapped: dict[str, set[str]], function: str, name: str) -> set[str]:
    """The loaders wrapped in what ``name`` holds in ``function``, also under the name its callers
    pass it by (``train_steps(model, batches)`` drawing from ``batches``)."""
    return {loader for origin in {name} | a.origins_of(function, name) for loader in wrapped.get(origin, ())}


def _wrapped_loaders(a: Analysis, loaders: set[str]) -> dict[str, set[str]]:
    """Name → the loaders what the call bound to it holds: ``batches = InfiniteDataLoader(
    train_loader)`` (or ``cycle(loader)``, ``iter(loader)``, ``iter(forever)`` of such a wrapper);
    for a loader built in the call's arguments (``InfiniteDataLoader(DataLoader(...))``), the
    parameter of the file's class or function receiving it, a loader itself (``inline_loaders``)."""
    found: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        value = constructed(assign.value)
        held = _loaders_held(a, value, loaders, found) if isinstance(value, cst.Call) else set()
        if held:
            for target in assign.targets:
                found.setdefault(target, set()).update(held)
    return found


def _loaders_held(a: Analysis, call: cst.Call, loaders: set[str], wrapped: dict[str, set[str]]) -> set[str]:
    """The loaders ``call``'s arguments pass: by name (or a name wrapping them already), or
    built there and received by a parameter of the file's own callee that the roles know as a
    loader; through calls nested in the arguments (``iter(Forever(DataLoader(...)))``)."""
    params = callee_parameters(a, call.func)
    held: set[str] = set()
    for index, arg in enumerate(call.args):
        name = dotted(arg.value)
        if arg.star:
            continue
        if name is not None:
            held |= ({name} & loaders) | wrapped.get(name, set())
        elif isinstance(arg.value, cst.Call):
            param = parameter_filled(arg, index, params) if params is not None else None
            held |= ({param} & loaders if param is not None else set()) | _loaders_held(a, arg.value, loaders, wrapped)
    return held


def _comprehension_evaluations(a: Analysis, switches: list[_ModeSwitch], backward_functions: set[str]) -> None:
    """``[loss_batch(model, xb, yb) for xb, yb in valid_dl]``: an evaluation written as a
    comprehension over a loader (outside training functions, under ``no_grad``, or after
    ``model.eval()``, as for loops)."""
    for function, iterated, index, no_grad, order in a.r.comprehension_loops:
        if iterated is None or not (a.origins_of(function, iterated) | {iterated}) & a.facts.loaders:
            continue
        if function not in backward_functions or no_grad or _switched_to_eval(switches, function, order):
            a.facts.loader_comprehensions.append((iterated, a.site(a.r.collected[index])))


def _backward_helpers(a: Analysis) -> set[str]:
    """The file's classes defining a ``backward`` method, and the names bound to their instances
    (``penalty = L2Penalty(model)``, ``self.penalty = ...``), of those classes or of such a class
    another module of the program defines (``from penalty import L2Penalty``): their
    ``.backward(...)`` is the class's own method, not a loss tensor's."""
    classes = {name for name, record in a.r.classes.items() if "backward" in record.self_names}
    imported = a.seeds.backward_helper_classes if a.seeds is not None else frozenset()
    helpers = set(classes)
    for assign in a.r.assigns:
        value = constructed(assign.value)
        if not isinstance(value, cst.Call):
            continue
        if (isinstance(value.func, cst.Name) and value.func.value in classes) or (
            imported and program_callee(a.facts, value.func, assign.scope) in imported
        ):
            helpers.update(assign.targets)
    # Handed to a function under another name (``def train(..., reg)``): a helper there too.
    helpers |= {param for function, param in a.arguments if a.origins_of(function, param) & helpers}
    return helpers


def training_backwards(a: Analysis) -> list[CallRecord]:
    """The ``backward()`` calls that train, in the order written: a loss tensor's (not a helper
    object's own method), in a module that steps something (:func:`_steps_something`); none where
    the backward only takes gradients for an input."""
    if not a.facts.backward_trains:
        return []
    return [call for call in a.r.calls if _is_loss_backward(a, call.node)]


def _sites_of(a: Analysis, calls: list[CallRecord]) -> set[Site]:
    return {a.site(call.node) for call in calls}


def _is_loss_backward(a: Analysis, call: cst.Call) -> bool:
    """``X.backward(...)`` whose receiver may be a loss tensor (not one of the file's helpers)."""
    if not is_backward(call):
        return False
    receiver = dotted(call.func.value)  # type: ignore[attr-defined]
    return receiver is None or receiver not in a.facts.backward_helpers


def _steps_something(a: Analysis) -> bool:
    """Training is what steps an optimizer: whether the module builds or receives an optimizer,
    steps anything (``optimizer.step()`` on a parameter, a scheduler), or updates parameters by
    hand (reads ``model.parameters()`` in a loop running a backward): :func:`_trains_here`. A
    module that does none of these takes gradients for an input (an FGSM attack's ``data.grad``,
    a saliency map, feature visualisation, an optimizer over the input itself:
    ``facts.input_optimizers``): its model is not wrapped for gradient synchronisation, its
    ``backward()`` stays plain, and its loops evaluate. Another module of the program may train
    what this one is handed (a library, a parameter seeded as a model or an optimizer): trains,
    as before; not a library of a program none of whose modules trains
    (``seeds.program_trains``: a saliency script importing the class that computes the map)."""
    if a.facts.trains_here:
        return True
    seeds = a.seeds
    return seeds is not None and (
        (seeds.library and seeds.program_trains)
        or any(role in ("models", "optimizers") and names for role, names in seeds.parameter_roles)
    )


def _trains_here(a: Analysis) -> bool:
    """Whether the module trains on its own (:func:`_steps_something` but for what another
    module of the program may train): it builds or receives an optimizer, steps something but an
    optimizer over an input, or updates parameters by hand."""
    facts = a.facts
    if facts.optimizers or facts.models or stepped(a) - facts.input_optimizers:
        return True
    return _updates_parameters_by_hand(a)


def _updates_parameters_by_hand(a: Analysis) -> bool:
    """Whether ``model.parameters()`` is read in a loop running a backward, or iterated to read
    each gradient in a function running one. Parameters handed to a clipping function
    (``clip_grad_norm_(model.parameters(), 1.0)``) are clipped, not updated: a class
    visualisation clips the frozen model's gradients and steps only its image."""
    backward_calls = [call for call in a.r.calls if _is_loss_backward(a, call.node)]
    backward_loops = {id(loop) for call in backward_calls for loop in call.loops}
    clipped = {
        id(arg.value)
        for call in a.r.calls
        if a.r.names.qualified_name(call.node.func, call.scope, strict=False) in CLIPPERS
        for arg in call.node.args
    }
    if any(
        isinstance(call.node.func, cst.Attribute)
        and call.node.func.attr.value in ("parameters", "named_parameters")
        and id(call.node) not in clipped
        and any(id(loop) in backward_loops for loop in call.loops)
        for call in a.r.calls
    ):
        return True
    backward_functions = {call.function for call in backward_calls}
    return any(loop.function in backward_functions and _updates_by_hand(loop) for loop in a.r.loops)


def _updates_by_hand(loop: LoopRecord) -> bool:
    """``for p in model.parameters(): p.data.add_(p.grad, ...)``: a loop over parameters that
    reads each one's gradient (a hand-written optimizer step), not one that freezes them."""
    iterated = loop.node.iter
    if not (
        isinstance(iterated, cst.Call)
        and isinstance(iterated.func, cst.Attribute)
        and iterated.func.attr.value in ("parameters", "named_parameters")
    ):
        return False
    return any(
        isinstance(node, cst.Attribute) and node.attr.value == "grad" and dotted(node.value) in loop.targets
        for node in nodes_in(loop.node.body)
        if isinstance(node, cst.Attribute)
    )


def _methods_calling_training_functions(a: Analysis, backward_functions: AbstractSet[str]) -> set[tuple[str, str]]:
    """The methods (class, method) handing a model or an optimizer they hold as an attribute to a
    function running a backward, of this module (``train(self.model, self.train_loader,
    self.optimizer)``) or imported from another module of the program: they train, as a method
    calling a method with backward does, so their class keeps the accelerator and prepares the
    attributes it hands over. A method handing other things (``fit_and_reload(self.args)``,
    which builds its own) does not."""
    elsewhere = a.seeds.backward_functions if a.seeds is not None else frozenset()
    held = {name for name in a.facts.models | a.facts.optimizers if "." in name}
    found: set[tuple[str, str]] = set()
    for call in a.r.calls:
        if call.function not in a.r.classes or len(call.scope) < 2:
            continue
        if not any(dotted(arg.value) in held for arg in call.node.args):
            continue
        func = call.node.func
        local = isinstance(func, cst.Name) and func.value in a.r.defs and func.value in backward_functions
        if local or (elsewhere and program_callee(a.facts, func, call.scope) in elsewhere):
            found.add((call.function, call.scope[1]))
    return found


def _mark_while_loops(a: Analysis) -> None:
    """A ``while`` loop a ``break`` leaves trains when a loss's backward runs in it (not a helper
    object's ``.backward()``)."""
    for _, exits, _, _ in a.r.breaks:
        for exit_loop in exits:
            if isinstance(exit_loop, WhileRecord):
                exit_loop.has_backward = any(_is_loss_backward(a, call) for call in exit_loop.backward_calls)


def _functions_with_backward(a: Analysis) -> set[str]:
    facts = a.facts
    direct: set[str] = set()
    accelerator = facts.existing_accelerator or facts.accelerator_name
    for call in a.r.calls:
        if _is_loss_backward(a, call.node):
            receiver = call.node.func.value  # type: ignore[attr-defined]
            name = dotted(receiver)
            if names_variable(receiver, accelerator):  # accelerator.backward(loss): already converted
                name = dotted(call.node.args[0].value) if call.node.args else None
            if name is not None:
                facts.loss_names.add(name)
            if facts.backward_site is None:
                facts.backward_site = a.site(call.node)
            direct.add(call.function)
            nested = nested_function(a, call.scope)
            if nested is not None:  # the function nested in it that its callers call
                direct.add(nested)
            if call.function in a.r.classes and len(call.scope) >= 2:
                a.backward_methods.add((call.function, call.scope[1]))
            for loop in call.loops:
                loop.has_backward = True
    _mark_while_loops(a)
    closure = callers_closure(direct, facts.call_graph)
    a.backward_methods |= _methods_calling_training_functions(a, closure)
    # Methods that call a method with backward (``self._run_batch(...)``) train too.
    changed = True
    while changed:
        changed = False
        for owner_name, owner in a.r.classes.items():
            for method, callees in owner.method_calls.items():
                if (owner_name, method) not in a.backward_methods and any(
                    (owner_name, callee) in a.backward_methods for callee in callees
                ):
                    a.backward_methods.add((owner_name, method))
                    changed = True
    # Functions that call a function with backward train too.
    return closure


@provider(
    needs=(
        "main_function",
        "creating_function",
        "training_functions",
        "prepared",
        "class_prepare",
        "loader_loops",
        "unsharded_loaders",
        "models",
    ),
    provides=("batch_names_by_function", "batch_names", "unsharded_batches_moved"),
)
def batch_names(a: Analysis) -> None:
    """Targets of loops over loaders that will be prepared (whatever the loop does, prepare
    puts their batches on the device), and names taken out of them without a call
    (``x = batch["input"]``). A loader the home block does not build is not prepared, so
    its batches still need their moves, and so does a loader kept unprepared (an evaluation
    writing a file per batch, :func:`~codemods.model.file_flow.per_batch_file_loaders`) —
    unless the loop moves none (:func:`_unmoved_unsharded_batches`): there the conversion moves
    the whole batch, and its names are batch names like a prepared loader's."""
    homes = {a.facts.main_function or MODULE, a.facts.creating_function, *a.facts.training_functions}
    built_at_home = {name for assign in a.r.assigns if assign.function in homes for name in assign.targets}
    prepared = built_at_home | a.facts.prepared
    prepared |= {name for names in a.facts.class_prepare.values() for name in names}
    prepared -= a.unsharded_loaders
    by_function = a.facts.batch_names_by_function
    for loop, loaders in a.loader_loops:
        if loaders & prepared:
            by_function.setdefault(loop.function, set()).update(loop.targets)
    moved = _unmoved_unsharded_batches(a)
    for loop, loaders in a.loader_loops:
        if loaders & a.unsharded_loaders and id(loop) not in moved:
            # Its batches stay where the loader puts them, whichever loop binds the same names.
            by_function.get(loop.function, set()).difference_update(loop.targets)
    for loop in moved.values():
        by_function.setdefault(loop.function, set()).update(loop.targets)
        a.facts.unsharded_batches_moved.add(a.site(loop.node).line)
    _take_batch_data(a, by_function)


def _unmoved_unsharded_batches(a: Analysis) -> dict[int, LoopRecord]:
    """The loops over a loader left unsharded (every process reads every batch where the
    original put it, on the CPU) that call a model — prepared, so on the accelerator's device —
    and move nothing themselves (no ``.to``/``.cuda`` call in their body: a script written for
    the CPU), by identity. A statistics pass over loaders with no model, or a loop that moves
    its batch (``x.to(device)``, kept), is none. A loop whose batch the conversion moved already
    (a converted script converted again) is one, so that its names stay batch names."""
    unsharded = {id(loop): loop for loop, loaders in a.loader_loops if loaders & a.unsharded_loaders and loop.iterated}
    if not unsharded:
        return {}
    models = a.facts.models
    moves: set[int] = set()
    feeds: set[int] = set()
    for call in a.r.calls:
        inside = [id(loop) for loop in call.loops if id(loop) in unsharded]
        if not inside:
            continue
        func = call.node.func
        callee = dotted(func) or ""
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda"):
            moves.update(inside)
        # A converted script's loop, converted again, calls the mover: still one of these.
        if callee == BATCH_MOVER or any(callee == name or callee.startswith(name + ".") for name in models):
            feeds.update(inside)
    return {key: loop for key, loop in unsharded.items() if key in feeds and key not in moves}


def _take_batch_data(a: Analysis, by_function: dict[str, set[str]]) -> None:
    """Adds to ``by_function`` the names taken out of its batch names without a call
    (``x = batch["input"]``), and sets ``batch_names`` from it."""
    for assign in a.r.assigns:
        names = by_function.get(assign.function)
        if names and _is_plain_access(assign.value) and assign.names & names:
            names.update(_batch_data_targets(assign.node, names, builtins_at(a.r.names, assign.scope)))
    a.facts.batch_names = {name for names in by_function.values() for name in names}


@provider(needs=("plan", "loader_loops", "method_prepare"), refines=("batch_names_by_function", "batch_names"))
def planned_evaluation_batches(a: Analysis) -> None:
    """The targets of loops over a loader the plan prepares where an evaluation helper builds it
    (``ConversionPlan.evaluation_preparations``), or where a training class's method builds it
    (``Validator.run`` building ``loader = DataLoader(self.val_set)``): batch names of that
    helper or method, as the home block's are (``prepare`` puts its batches on the device, so
    their moves go, in the first conversion as in a second one reading the written prepare)."""
    plan = a.facts.plan
    preparations = plan.evaluation_preparations if isinstance(plan, ConversionPlan) else {}
    by_function = a.facts.batch_names_by_function
    for loop, loaders in a.loader_loops:
        in_method = a.method_prepare.get(loop.function, {}).get(loop.method, ()) if loop.method else ()
        if loaders & {*preparations.get(loop.function, ()), *in_method}:
            by_function.setdefault(loop.function, set()).update(loop.targets)
    _take_batch_data(a, by_function)


@rule_provider(needs=("train_loops", "batch_names_by_function"))
def sharded_training_loops(a: Analysis) -> frozenset[int]:
    """The original lines of the training loops over a loader that ``prepare`` shards (their
    targets are batch names of their function, :func:`batch_names`): what a process adds up there
    covers its shard only (ACC919). A training loop over a loader left unprepared is no such loop."""
    by_function = a.facts.batch_names_by_function
    return frozenset(
        loop.site.line for loop in a.facts.train_loops if set(loop.targets) & by_function.get(loop.function, set())
    )


@provider(needs=("optimizers", "loop_backward", "backward_trains", "backward_helpers"), refines=("existing_features",))
def manual_accumulation(a: Analysis) -> None:
    """An optimizer stepped every k batches after a backward on every batch: gradient
    accumulation written by hand (``if (i + 1) % k == 0: optimizer.step()``)."""
    backward_branches = {id(branch) for call in training_backwards(a) for branch in call.ifs}
    for call in a.r.calls:
        func = call.node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "step"
            and dotted(func.value) in a.facts.optimizers
            and any(loop.has_backward for loop in call.loops)
        ):
            # Accumulation steps every k batches after a backward on every batch; a branch
            # with a backward of its own trains something else every k batches (a GAN's
            # generator every n_critic steps).
            if any(branch.modulo and id(branch) not in backward_branches for branch in call.ifs):
                a.facts.existing_features.add("manual_accumulation")
