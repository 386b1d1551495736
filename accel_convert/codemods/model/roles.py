"""Roles of names: model, optimizer, loader, scheduler, tracker, and how a role flows into the
parameters that receive it."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.devices import chooses_device, constructed
from accel_convert.codemods.engine.facts import FactsDraft
from accel_convert.codemods.engine.imported_calls import builds_model_of_program_class
from accel_convert.codemods.engine.syntax import (
    argument_for,
    dotted,
    nodes_in,
    parameters_filled,
)
from accel_convert.codemods.engine.torch_names import (
    ACCELERATORS,
    CUDA_AVAILABILITY,
    LIST_GROWING_METHODS,
    PARAMETER_CONSTRUCTORS,
    TRACKER_CONSTRUCTORS,
    is_model_constructor,
    is_optimizer,
    is_scheduler,
)
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.calls import instance_class, nested_def_named, step_calls
from accel_convert.codemods.model.classes import model_classes
from accel_convert.codemods.model.expressions import (
    moves_a_construction,
)
from accel_convert.codemods.model.loaders import loader_targets
from accel_convert.codemods.model.plan import is_any_prepare
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
)
from accel_convert.codemods.model.state import Analysis
from accel_convert.records import record


class _ParameterReceivers(cst.CSTVisitor):
    """Receivers of ``.parameters()`` / ``.named_parameters()`` in a small subtree."""

    def __init__(self) -> None:
        super().__init__()
        self.receivers: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in {"parameters", "named_parameters"}:
            receiver = dotted(func.value)
            if receiver is not None:
                self.receivers.add(receiver)


@provider(
    needs=("loader_factories", "loader_classes", "parsed_arguments", "parser_options"),
    provides=("existing_accelerator", "schedulers", "device_names", "cuda_flags", "prepared"),
    refines=("train_loaders",),
)
def constructor_roles(a: Analysis) -> None:
    """Roles by constructor, matched by qualified name: loaders (``DataLoader(...)`` or a loader
    factory of the file; sorted into train/eval by the loops), the accelerator already there,
    schedulers, devices (and names aliasing one), flags meaning "use CUDA", prepared names."""
    facts = a.facts
    factories = a.loader_factories
    for assign in a.r.assigns:
        value = constructed(assign.value)
        qualified = (
            a.r.names.qualified_name(value.func, assign.scope, strict=False) if isinstance(value, cst.Call) else None
        )
        targets = set(assign.targets)
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in factories:
            groups = a.loader_groups.get((value.func.value,), set())
            facts.train_loaders.update(loader_targets(assign, factories[value.func.value], groups))
        elif isinstance(value, cst.Call) and (method := _loader_method(a, assign, value)) is not None:
            facts.train_loaders.update(
                loader_targets(assign, a.loader_methods[method], a.loader_groups.get(method, set()))
            )
        elif isinstance(value, cst.Call) and facts.builds_data_loader(value.func, assign.scope, strict=False):
            facts.train_loaders.update(targets)  # sorted into train/eval by the loops below
        elif qualified in ACCELERATORS:
            facts.existing_accelerator = assign.targets[0] if assign.targets else None
        elif qualified is not None and is_scheduler(qualified):
            facts.schedulers.update(targets)
        elif chooses_device(assign.value, facts, assign.scope) or dotted(assign.value) in facts.device_names:
            facts.device_names.update(targets)  # ``DEV = device`` aliases it
        elif _mentions_cuda_availability(a, assign):
            facts.cuda_flags.update(targets)
        if is_any_prepare(assign.value):
            facts.prepared.update(targets)


def _mentions_cuda_availability(a: Analysis, assign: AssignRecord) -> bool:
    """``use_cuda = not args.no_cuda and torch.cuda.is_available()``."""
    return any(
        type(node) is cst.Attribute and a.r.names.qualified_name(node, assign.scope, strict=False) == CUDA_AVAILABILITY
        for node in nodes_in(assign.value)
    )


def _optimizer_factories(a: Analysis) -> dict[str, cst.Call]:
    """Module-level functions, and functions nested in a function (by their path, ``main.build``),
    that return a new optimizer → the constructor call they return."""
    factories = {}
    for function, value in [*a.r.returns, *a.r.nested_returns]:
        value = constructed(value)
        if isinstance(value, cst.Call):
            qualified = a.r.names.qualified_name(value.func, tuple(function.split(".")), strict=False)
            if qualified is not None and is_optimizer(qualified):
                factories[function] = value
    return factories


def _loader_method(a: Analysis, assign: AssignRecord, value: cst.Call) -> tuple[str, str] | None:
    """``(class, method)`` for ``self.loader = self.make_loader()`` in a method of the class,
    where ``make_loader`` returns loaders (:func:`~codemods.model.loaders.loader_factories`)."""
    record = a.r.classes.get(assign.scope[0]) if len(assign.scope) >= 2 else None
    func = value.func
    if record is None or not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
        return None
    if func.value.value != record.self_names.get(assign.scope[1]):
        return None
    key = (assign.scope[0], func.attr.value)
    return key if key in a.loader_methods else None


def _optimizer_methods(a: Analysis) -> set[str]:
    """Names of methods that return a new optimizer, built in the return or bound first to a local
    or to an attribute of the receiver, once or in each branch of an ``if`` (a model's
    ``configure_optimizers``, as in minGPT and nanoGPT; faster-rcnn's ``get_optimizer``:
    ``self.optimizer = t.optim.Adam(params)`` under ``if opt.use_adam``, ``t.optim.SGD(params,
    momentum=0.9)`` otherwise, then ``return self.optimizer``): of the file's classes (told to the
    program's other modules as ``facts.optimizer_methods``), and, through the seeds, of the
    program's model classes in other modules (``self.optimizer = self.faster_rcnn.get_optimizer()``
    in a trainer of another module than ``FasterRCNN``'s, whose method builds
    ``SGD(self.parameters())``)."""
    found = set()
    for scope, value in a.r.method_returns:
        value = constructed(value)
        returned = dotted(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
        if returned is not None:
            built = [
                constructed(assign.value)
                for assign in a.r.assigns
                if assign.scope[:2] == scope and assign.targets == (returned,)
            ]
        else:
            built = [value]
        if built and all(_builds_an_optimizer(a, each, scope) for each in built):
            found.add(scope[1])
            a.facts.optimizer_methods.add(f"{scope[0]}.{scope[1]}")
    seeds = a.seeds
    if seeds is not None:
        # Only a model class's: its receiver, wherever it is called, is the model it trains.
        found |= {
            method
            for owner, _, method in (qualified.rpartition(".") for qualified in seeds.optimizer_methods)
            if owner in seeds.model_classes
        }
    return found


def _builds_an_optimizer(a: Analysis, value: cst.BaseExpression, scope: tuple[str, ...]) -> bool:
    """Whether ``value`` calls an optimizer's constructor (matched by qualified name)."""
    if not isinstance(value, cst.Call):
        return False
    qualified = a.r.names.qualified_name(value.func, scope, strict=False)
    return qualified is not None and is_optimizer(qualified)


def _factory_roots(a: Analysis, call: cst.Call, factory: str, returned: cst.Call) -> set[str]:
    """``make_optimizer(net)`` whose factory returns ``SGD(model.parameters())``: ``net``. A
    nested factory's (``factory`` a path, ``main.build``) other receivers are the enclosing
    block's names it closes over (``def build(): return SGD(net.parameters())``: ``net``)."""
    finder = _ParameterReceivers()
    walk(returned, finder)
    nested = factory in a.r.nested_defs
    params = a.r.nested_defs[factory] if nested else a.r.defs.get(factory, ())
    passed = {param: dotted(arg.value) for param, arg in parameters_filled(call, params)}
    roots = set()
    for receiver in finder.receivers:
        head, _, rest = receiver.partition(".")
        argument = passed.get(head)
        if argument is not None:
            roots.add(argument)  # the model itself, also for ``model.fc.parameters()``
        elif nested and head not in params:
            roots.add(head)
    return roots


@provider(needs=("arguments",), provides=("stepped_objects",))
def stepped_objects(a: Analysis) -> None:
    """Names whose ``.step()`` is called here, or that the seeds say another module steps, with
    every parameter and attribute that receives one of them (``optimizer`` of ``train(model,
    optimizer)`` stepping it makes ``opt`` of ``train(net, opt)`` stepped)."""
    facts = a.facts
    for call, name in step_calls(a):
        facts.stepped_objects |= {name} | a.origins_of(call.function, name)
    seeded = set(a.seeds.stepped_elsewhere) if a.seeds is not None else set()
    facts.stepped_objects |= seeded
    for function, param in list(a.arguments):
        if param in seeded:
            facts.stepped_objects |= a.origins_of(function, param)


@provider(
    needs=("device_names", "train_loaders", "stepped_objects", "model_factories"),
    provides=(
        "optimizers",
        "models",
        "frozen_models",
        "optimizer_home",
        "optimizer_methods",
        "input_optimizers",
    ),
    refines=("schedulers",),
)
def optimizers_and_models(a: Analysis) -> None:
    """Optimizers (by constructor, a factory of the file, a model's ``configure_optimizers``) and
    the models they get the parameters of; models moved to the device but never trained.

    Training is what steps an optimizer over a model's parameters: an optimizer over tensors the
    script makes (``SGD([delta])``, ``Adam([self.processed_image])``), in a module that runs a
    model it evaluates, optimises an *input* of that model (an adversarial perturbation, a class
    visualisation, deep dream): it is no optimizer here (``facts.input_optimizers``), so it is not
    prepared, its steps train nothing, and its loops evaluate (:func:`_optimises_an_input`)."""
    facts = a.facts
    builders = _OptimizerBuilders(_optimizer_factories(a), _optimizer_methods(a), facts.stepped_objects)
    parameter_sources = _parameter_lists(a)
    selections: set[str] = set()  # names bound to a selection of a model's parameters
    new_models = _built_models(a)
    moved = {target for assign in a.r.assigns if moves_a_construction(assign.value) for target in assign.targets}
    moved |= _put_in_evaluation_mode(a)
    moved |= _models_called_on_batches(a)
    for assign in a.r.assigns:
        roots = _parameter_roots(a, assign.mentions.parameter_receivers) | _model_methods_read(assign, new_models)
        held = _grouped_parameters(assign, parameter_sources)
        for target in assign.targets:
            parameter_sources.setdefault(target, set()).update(roots | held)
            if roots and _is_a_selection(assign.value):
                selections.add(target)
        built = builders.models_trained(a, assign, selections)
        if built is None:
            if _steps_its_own_way(a, assign, selections):
                # SAM's ``first_step()``/``second_step()``: its model is trained and prepared;
                # the object itself is no optimizer ``prepare`` knows, so it stays as it is.
                facts.models.update(roots - {_instance_name(a, assign.scope)})
            continue
        if _optimises_an_input(a, assign, built is _PARAMETERS_PASSED and not roots and bool(moved), parameter_sources):
            facts.input_optimizers.update(assign.targets)
            continue
        roots = set(built) if built is not _PARAMETERS_PASSED else roots
        facts.optimizers.update(assign.targets)
        if a.optimizer_home is None:
            a.optimizer_home = assign.function
        for name in assign.names:
            roots |= parameter_sources.get(name, set())
        # ``AdamW(self.parameters())`` in a model's own method (minGPT's ``configure_optimizers``):
        # the instance is whatever model calls it, not a name of the script.
        facts.models.update(roots - {_instance_name(a, assign.scope)})
    _inline_optimizers(a)
    _returned_together(a)
    facts.frozen_models = {
        name
        for name in moved - facts.models
        # The loaders built so far: all in ``train_loaders`` until the loops sort them.
        if name not in facts.device_names and name not in facts.train_loaders and name[:1].islower()
    }


def _optimises_an_input(a: Analysis, assign: AssignRecord, plain: bool, parameter_sources: dict[str, set[str]]) -> bool:
    """Whether the optimizer ``assign`` builds is an input optimizer: ``plain`` (built by a
    constructor, given no model's ``.parameters()``, in a module running a model it evaluates)
    and given tensors the script makes (:func:`_optimised_inputs`)."""
    return plain and _optimised_inputs(a, assign, parameter_sources)


def _optimised_inputs(a: Analysis, assign: AssignRecord, parameter_sources: dict[str, set[str]]) -> bool:
    """Whether the optimizer ``assign`` builds is given a list of tensors the script makes and
    nothing else (``SGD([delta], lr=0.05)``, ``Adam([self.processed_image])``, ``params=[image]``):
    none holds a model's parameters, is used as a module (``.to``, ``.parameters()``, a part of
    one: ``model.fc.weight``), is built as an ``nn.Parameter``, or is an attribute of a model
    class's own instance (``SGD([self.w])`` in the model's method)."""
    value = constructed(assign.value)
    if not isinstance(value, cst.Call):
        return False
    argument = argument_for(value, 0, "params")
    given = argument.value if argument is not None else None
    if not isinstance(given, (cst.List, cst.Tuple)) or not given.elements:
        return False
    instance = _instance_name(a, assign.scope)
    own = instance if instance is not None and assign.scope[0] in model_classes(a) else None
    for element in given.elements:
        name = dotted(element.value) if isinstance(element, cst.Element) else None
        if name is None or parameter_sources.get(name) or parameter_sources.get(name.split(".")[0]):
            return False
        parts = name.split(".")
        if own is not None and parts[0] == own:
            return False
        if any(_used_as_module(a, ".".join(parts[:k]), _ONLY_MODULE_METHODS) for k in range(1, len(parts) + 1)):
            return False
        if _built_as_parameter(a, name):
            return False
    return True


def _built_as_parameter(a: Analysis, name: str) -> bool:
    """Whether the script binds ``name`` to a new ``nn.Parameter`` anywhere."""
    for assign in a.r.assigns:
        if name not in assign.targets:
            continue
        value = constructed(assign.value)
        if isinstance(value, cst.Call):
            qualified = a.r.names.qualified_name(value.func, assign.scope, strict=False)
            if qualified in PARAMETER_CONSTRUCTORS:
                return True
    return False


def _instance_name(a: Analysis, scope: tuple[str, ...]) -> str | None:
    """The instance parameter (``self``) of the method of the file's class ``scope`` is in."""
    owner = a.r.classes.get(scope[0]) if len(scope) >= 2 else None
    return owner.self_names.get(scope[1]) if owner is not None else None


def _put_in_evaluation_mode(a: Analysis) -> set[str]:
    """Names the script assigns and puts in evaluation mode (``model.eval()``): a model to be
    tested, also where it is never moved to a device (a CPU script, an evaluation-only one)."""
    assigned = {target for assign in a.r.assigns for target in assign.targets}
    found = set()
    for call in a.r.calls:
        func = call.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "eval" and not call.node.args:
            receiver = dotted(func.value)
            if receiver is not None and receiver in assigned:
                found.add(receiver)
    return found


def _built_models(a: Analysis) -> set[tuple[tuple[str, ...], str]]:
    """(scope, name) of the names bound to a new model: a ``torch.nn`` module class of the
    program, or a library's model constructor such as ``torchvision.models.resnet18``."""
    classes = model_classes(a)
    built: set[tuple[tuple[str, ...], str]] = set()
    for assign in a.r.assigns:
        value = constructed(assign.value)
        if not isinstance(value, cst.Call):
            continue
        qualified = a.r.names.qualified_name(value.func, assign.scope, strict=False) or ""
        if builds_model_of_program_class(a.facts, value.func, assign.scope, classes) or is_model_constructor(qualified):
            built.update((assign.scope, target) for target in assign.targets)
    return built


def _model_methods_read(assign: AssignRecord, built: AbstractSet[tuple[tuple[str, ...], str]]) -> set[str]:
    """The new models (``built``) whose own methods ``assign``'s value calls: a model handing out
    groups of its parameters (deeplab's ``[{'params': model.get_1x_lr_params(), 'lr': lr}, ...]``,
    the optimizer built from them trains ``model``), as ``model.parameters()`` does."""
    return {
        receiver
        for node in nodes_in(assign.value)
        if isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and (receiver := dotted(node.func.value)) is not None
        and (assign.scope, receiver) in built
    }


def _models_called_on_batches(a: Analysis) -> set[str]:
    """Names bound to a new model (``best = Net()``: see :func:`_built_models`) and called on a
    batch of a loader in a loop over it (``best(x)``): a model to be tested, also where the script
    neither moves it nor puts it in evaluation mode (built once training is over, loading the
    saved weights, evaluated under ``no_grad`` alone). A module of the script called on what a
    model returns (a criterion: ``criterion(best(x), y)``, ``loss_fn(out, y)``) is none."""
    built = _built_models(a)
    if not built:
        return set()
    batches = _batch_values(a)
    return {
        name
        for call in a.r.calls
        if (name := dotted(call.node.func)) is not None
        and (call.scope, name) in built
        and call.node.args
        and _holds_a_batch(a, call.node.args[0].value, batches.get(call.function, set()))
    }


def _batch_values(a: Analysis) -> dict[str, set[str]]:
    """Function → the names holding a batch there: the targets of its loops over a loader
    (``x, y``), and names bound from them with no call of the script's objects
    (``inputs = data[0].to(device)``, not ``out = model(x)``)."""
    loaders = a.facts.train_loaders  # every loader, until the loops sort them
    found: dict[str, set[str]] = {}
    for loop in a.r.loops:
        if loop.iterated is not None and loop.iterated in loaders:
            found.setdefault(loop.function, set()).update(loop.targets)
    for assign in a.r.assigns:
        names = found.get(assign.function)
        if names and _holds_a_batch(a, assign.value, names):
            names.update(assign.targets)
    return found


def _holds_a_batch(a: Analysis, value: cst.BaseExpression, batches: AbstractSet[str]) -> bool:
    """Whether ``value`` reads one of the ``batches`` and calls none of the script's objects
    (a model, a criterion: ``x.to(device)`` or ``torch.flatten(x, 1)``, not ``model(x)``)."""
    inner = list(nodes_in(value))
    if not any(isinstance(node, cst.Name) and node.value in batches for node in inner):
        return False
    return not any(isinstance(node, cst.Call) and dotted(node.func) in a.assigned for node in inner)


#: An optimizer whose models are the receivers of the ``.parameters()`` its arguments mention.
_PARAMETERS_PASSED: frozenset[str] = frozenset({"<the receivers of .parameters()>"})


@record(frozen=True, eq=False, repr=False)
class _OptimizerBuilders:
    """What builds an optimizer in this file besides the name tables' constructors."""

    #: Module-level functions returning a new optimizer → the constructor call they return.
    factories: dict[str, cst.Call]
    #: Methods of the file's classes returning a new optimizer (``configure_optimizers``).
    methods: set[str]
    #: Names whose ``.step()`` is called (``ScriptFacts.stepped_objects``).
    stepped: AbstractSet[str]

    def models_trained(
        self, a: Analysis, assign: AssignRecord, selections: AbstractSet[str]
    ) -> AbstractSet[str] | None:
        """The models the optimizer ``assign`` builds trains; :data:`_PARAMETERS_PASSED` when
        they are the receivers of the ``.parameters()`` it is given; None when it builds none.
        ``selections``: names bound so far to a selection of a model's parameters."""
        value = constructed(assign.value)
        if not isinstance(value, cst.Call):
            return None
        factory = (
            nested_def_named(a, value.func.value, assign.scope) or value.func.value
            if isinstance(value.func, cst.Name)
            else None
        )
        if factory is not None and factory in self.factories:
            return _factory_roots(a, value, factory, self.factories[factory])
        if isinstance(value.func, cst.Attribute) and value.func.attr.value in self.methods:
            # ``optimizer = model.configure_optimizers(config)``: the model's own parameters.
            receiver = dotted(value.func.value)
            return {receiver} if receiver is not None else set()
        qualified = a.r.names.qualified_name(value.func, assign.scope, strict=False)
        if (qualified is not None and is_optimizer(qualified)) or (
            set(assign.targets) & self.stepped
            and _takes_parameters(value, selections)
            and not _wraps_an_optimizer(a, value, assign.scope)
        ):
            return _PARAMETERS_PASSED
        return None


def _grouped_parameters(assign: AssignRecord, parameter_sources: dict[str, set[str]]) -> set[str]:
    """The models whose parameters ``assign`` groups from names already holding them, written
    as a display, a comprehension or a sum rather than a call (``groups = [{"params": decay},
    {"params": no_decay}]`` after ``decay = [p for n, p in model.named_parameters() if ...]``):
    what the optimizer built from ``groups`` trains."""
    if isinstance(constructed(assign.value), cst.Call):
        return set()
    return {model for name in assign.names for model in parameter_sources.get(name, ())}


def _parameter_lists(a: Analysis) -> dict[str, set[str]]:
    """Lists of parameters filled in a loop over a model's parameters, as detection code groups
    biases apart for their own learning rate (``for name, param in model.named_parameters():
    biases.append(param)``, then ``SGD(params=[{'params': biases, ...}, ...])``), also over a
    selection of them (deep-text-recognition-benchmark's ``for p in filter(lambda p:
    p.requires_grad, model.parameters()): filtered_parameters.append(p)``, then
    ``Adadelta(filtered_parameters)``): list → the model."""
    found: dict[str, set[str]] = {}
    for call in a.r.calls:
        func = call.node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in LIST_GROWING_METHODS and call.loops):
            continue
        collected = dotted(func.value)
        source = call.loops[-1].node.iter
        if collected is not None and isinstance(source, cst.Call) and _is_a_selection(source):
            receivers = _parameter_receivers_in(source)
            if receivers:
                found.setdefault(collected, set()).update(_parameter_roots(a, receivers))
    return found


def _wraps_an_optimizer(a: Analysis, call: cst.Call, scope: tuple[str, ...]) -> bool:
    """Whether one of ``call``'s arguments builds an optimizer (``ScheduledOptim(optim.Adam(
    model.parameters()), ...)``): the call builds a wrapper stepping it, no optimizer itself."""
    for arg in call.args:
        inner = arg.value
        if isinstance(inner, cst.Call):
            qualified = a.r.names.qualified_name(inner.func, scope, strict=False)
            if qualified is not None and is_optimizer(qualified):
                return True
    return False


def optimizer_wrappers(a: Analysis) -> set[str]:
    """Names bound to an object built around an optimizer the script constructs in its arguments
    (``ScheduledOptim(optim.Adam(model.parameters()), ...)`` in attention-is-all-you-need,
    ``Lookahead(torch.optim.AdamW(...))``): they step and zero the gradients for it, and are
    neither a model nor an optimizer ``prepare`` knows."""
    found: set[str] = set()
    for assign in a.r.assigns:
        value = constructed(assign.value)
        if isinstance(value, cst.Call) and _wraps_an_optimizer(a, value, assign.scope):
            found.update(assign.targets)
    return found


def _steps_its_own_way(a: Analysis, assign: AssignRecord, selections: AbstractSet[str]) -> bool:
    """Whether ``assign`` builds an object from a model's parameters (``optimizer =
    SAM(model.parameters(), torch.optim.SGD, lr=0.1)``) that is no optimizer the tables know and
    has no ``.step()``, and a method of which a loop running a backward calls
    (``optimizer.first_step(zero_grad=True)``): it updates the model by methods of its own."""
    value = constructed(assign.value)
    if not (isinstance(value, cst.Call) and _takes_parameters(value, selections)):
        return False
    targets = set(assign.targets)
    return any(
        isinstance(call.node.func, cst.Attribute)
        and dotted(call.node.func.value) in targets
        and any(loop.backward_calls for loop in call.loops)
        for call in a.r.calls
    )


def _takes_parameters(call: cst.Call, selections: AbstractSet[str]) -> bool:
    """Whether one of ``call``'s arguments holds a model's ``.parameters()``, written there or
    bound to a name first (``trainable = filter(lambda p: p.requires_grad, model.parameters())``).

    With a ``.step()`` called on what it returns, this is an optimizer whatever its class: one
    chosen at run time (``getattr(optim, args.optim)(model.parameters(), lr=lr)``, as TCN's
    scripts do; pytorch-template's ``config.init_obj('optimizer', torch.optim, trainable)``, whose
    parameters come third), or one from the project or a library the name tables do not list
    (``Lamb(model.parameters())``). Its model is trained, so it is prepared: left out, it would
    train on each process alone, its gradients never averaged."""
    if _given_parameters_of(call):
        return True
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.Name):
            if value.value in selections:
                return True
        elif _is_a_selection(value) and _parameter_receivers_in(value):
            return True
    return False


#: Calls that only select or join the parameters they are given.
_SELECTING_CALLS = frozenset({"filter", "list", "tuple", "sorted", "chain", "itertools.chain"})


def _is_a_selection(value: cst.BaseExpression) -> bool:
    """Whether ``value``, which mentions a model's parameters, has the shape of their selection or
    join (``model.parameters()``, ``filter(lambda p: p.requires_grad, model.parameters())``, ``[p
    for p in model.parameters() if ...]``, parameter groups), not of an object built from them
    (``StepLR(optimizer)`` is no selection of parameters, nor ``ScheduledOptim(Adam(model.parameters()))``)."""
    if isinstance(value, cst.Call):
        return (
            isinstance(value.func, cst.Attribute) and value.func.attr.value in ("parameters", "named_parameters")
        ) or dotted(value.func) in _SELECTING_CALLS
    return isinstance(value, (cst.ListComp, cst.GeneratorExp, cst.List, cst.Tuple, cst.Dict))


def _parameter_receivers_in(value: cst.BaseExpression) -> set[str]:
    """The receivers of the ``.parameters()`` / ``.named_parameters()`` calls inside ``value``."""
    finder = _ParameterReceivers()
    walk(value, finder)
    return finder.receivers


def _given_parameters_of(call: cst.Call) -> set[str]:
    """The receivers of the ``.parameters()`` / ``.named_parameters()`` an optimizer's first
    argument (or ``params=``) holds, also through what only selects or joins them:
    ``filter(lambda p: p.requires_grad, G.parameters())``, ``[p for p in model.parameters() if
    p.requires_grad]``, ``itertools.chain(G.parameters(), D.parameters())``, ``list(...)``, or
    parameter groups (``[{"params": G.parameters()}, {"params": D.head.parameters(), "lr": 0.1}]``):
    ``{"G"}``, ``{"model"}``, ``{"G", "D"}``, ``{"G", "D.head"}``."""
    params = argument_for(call, 0, "params")
    return _parameter_receivers_in(params.value) if params is not None else set()


def _inline_optimizers(a: Analysis) -> None:
    """``Trainer(model, ..., torch.optim.SGD(model.parameters(), lr=0.1))``: an optimizer built
    as an argument and bound to no name. The model it takes the parameters of is trained all
    the same, so it is prepared (DDP averages its gradients); the optimizer itself has no name
    to prepare."""
    assigned = {id(constructed(assign.value)) for assign in a.r.assigns}
    for call in a.r.calls:
        if id(call.node) in assigned:
            continue
        qualified = a.qualified(call)
        if qualified is None or not is_optimizer(qualified) or not call.node.args:
            continue
        receivers = _given_parameters_of(call.node) - {_instance_name(a, call.scope)}
        if receivers:
            a.facts.models.update(receivers)
            if a.optimizer_home is None:
                a.optimizer_home = call.function


#: What builds and returns a model or an optimizer: a module-level function by name, or a
#: method of a module-level class by (class, method).
Builder = str | tuple[str, str]


def _returned_together(a: Analysis) -> None:
    """``def build(): model = Net(); return model, SGD(model.parameters())`` called as ``model,
    opt = build()``: the names the caller unpacks take the roles of what the function returns at
    their positions (a model, an optimizer, by name or built in the ``return``), and the first
    caller unpacking an optimizer is where the optimizers are built: it prepares them (the
    accelerator created there reaches its training loop), not the function that returns them.
    A method of the file's classes returning them is followed the same way, called on its own
    instance (``self.model, self.optimizer = self.build()``) or on another one
    (``model, opt = builder.build(lr)``, ``Builder().build(lr)``)."""
    returned = _roles_returned(a)
    if not returned:
        return
    facts = a.facts
    for assign in a.r.assigns:
        builder = _builder_called(a, assign)
        roles = returned.get(builder) if builder is not None else None
        names = _unpacked_names(assign)
        if roles is None or names is None or _builds_itself(assign, builder):
            continue
        for index, role in roles.items():
            # ``_, name = build()`` throws the model away: nothing to prepare under ``_``.
            if index < len(names) and names[index] != "_":
                _role_set(facts, role).add(names[index])
        if "optimizer" in roles.values() and a.optimizer_home in (None, _builder_function(builder)):
            a.optimizer_home = assign.function
    # The builder's own names for what it returns are handed out, not trained under that name:
    # the caller prepares them under its names (left in, ``model`` of ``build()`` is reported as
    # a trained model no prepare can follow).
    for name in _returned_names(a, returned):
        if all(_in_builder(assign, returned) for assign in a.r.assigns if name in assign.targets):
            for role in ("model", "optimizer", "scheduler"):
                _role_set(facts, role).discard(name)


def _builder_called(a: Analysis, assign: AssignRecord) -> Builder | None:
    """``build`` for ``... = build()``, ``("Trainer", "build")`` for ``... = self.build()`` in a
    method of ``Trainer`` or ``... = trainer.build()`` on an instance of it; None otherwise."""
    value = assign.value
    if not isinstance(value, cst.Call):
        return None
    if isinstance(value.func, cst.Name):
        return value.func.value
    if not isinstance(value.func, cst.Attribute):
        return None
    owner = instance_class(a, assign, value.func.value)
    return (owner, value.func.attr.value) if owner is not None else None


def _builder_function(builder: Builder | None) -> str | None:
    """The analysis' "function" a builder runs in (a method's is its class)."""
    return builder[0] if isinstance(builder, tuple) else builder


def _builds_itself(assign: AssignRecord, builder: Builder | None) -> bool:
    """Whether ``assign`` is in the builder it calls (a recursive call)."""
    if isinstance(builder, tuple):
        return assign.scope[:2] == builder
    return assign.function == builder


def _in_builder(assign: AssignRecord, returned: dict[Builder, dict[int, str]]) -> bool:
    """Whether ``assign`` is in one of the builders of ``returned``."""
    return assign.function in returned or assign.scope[:2] in returned


def _role_set(facts: FactsDraft, role: str) -> set[str]:
    """The facts' names of ``role``'s objects: models, optimizers or schedulers."""
    return facts.optimizers if role == "optimizer" else facts.schedulers if role == "scheduler" else facts.models


def _tuples_returned(a: Analysis) -> list[tuple[Builder, tuple[str, ...], cst.Tuple]]:
    """(builder, its scope, the tuple it returns) for the module-level functions and the methods
    of module-level classes that return a tuple."""
    found: list[tuple[Builder, tuple[str, ...], cst.Tuple]] = []
    for function, value in a.r.returns:
        if function in a.r.defs and isinstance(value, cst.Tuple):
            found.append((function, (function,), value))
    for scope, value in a.r.method_returns:
        if len(scope) == 2 and isinstance(value, cst.Tuple):
            found.append(((scope[0], scope[1]), tuple(scope), value))
    return found


def _roles_returned(a: Analysis) -> dict[Builder, dict[int, str]]:
    """Builders returning a tuple holding a model, an optimizer or a scheduler → position →
    ``"model"``, ``"optimizer"`` or ``"scheduler"``."""
    found: dict[Builder, dict[int, str]] = {}
    for builder, scope, value in _tuples_returned(a):
        roles: dict[int, str] = {}
        for index, element in enumerate(value.elements):
            role = _role_of(a, element.value, scope)
            if role is not None:
                roles[index] = role
        if roles:
            found[builder] = roles
    return found


def _role_of(a: Analysis, element: cst.BaseExpression, scope: tuple[str, ...]) -> str | None:
    """``"optimizer"``, ``"scheduler"`` or ``"model"`` for an element of a returned tuple (a name
    of that role or a construction of an optimizer or scheduler); None for anything else."""
    facts = a.facts
    item = constructed(element)
    name = dotted(item)
    qualified = a.r.names.qualified_name(item.func, scope, strict=False) if isinstance(item, cst.Call) else None
    if name in facts.optimizers or (qualified is not None and is_optimizer(qualified)):
        return "optimizer"
    if name in facts.schedulers or (qualified is not None and is_scheduler(qualified)):
        return "scheduler"
    return "model" if name in facts.models else None


def _returned_names(a: Analysis, returned: dict[Builder, dict[int, str]]) -> set[str]:
    """The names the builders of ``returned`` return their models and optimizers under."""
    found = set()
    for builder, _, value in _tuples_returned(a):
        for index in returned.get(builder, {}):
            name = dotted(value.elements[index].value)
            if name is not None:
                found.add(name)
    return found


def _unpacked_names(assign: AssignRecord) -> list[str] | None:
    """``["model", "opt"]`` for ``model, opt = build()``; None for any other target."""
    targets = assign.node.targets
    target = targets[0].target if len(targets) == 1 else None
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    names = [dotted(element.value) for element in target.elements]
    return None if None in names else [name for name in names if name is not None]


def _parameter_roots(a: Analysis, receivers: set[str]) -> set[str]:
    """``model`` for ``model.parameters()`` / ``model.fc.named_parameters()``, also where the
    script replaced the head it trains (the transfer-learning tutorial's ``model_conv.fc =
    nn.Linear(num_ftrs, 2)`` then ``SGD(model_conv.fc.parameters())``): the model is the
    outermost name used as a module (moved, put in a mode, asked for its parameters), which
    holds the head; an assigned attribute of anything else (``args.model``) is the model."""
    roots = set()
    for receiver in receivers:
        parts = receiver.split(".")
        while len(parts) > 1 and ".".join(parts) not in a.assigned:
            parts.pop()
        holders = [".".join(parts[:k]) for k in range(1, len(parts))]
        root = next((holder for holder in holders if holder in a.assigned and _used_as_module(a, holder)), None)
        roots.add(root or ".".join(parts))
    return roots


#: Methods only a module answers: a name they are called on holds parameters.
_MODULE_METHODS = frozenset({"to", "cuda", "parameters", "named_parameters", "state_dict", "eval", "train"})


#: Methods of a module a tensor does not have (a tensor is moved with ``.to``/``.cuda`` too).
_ONLY_MODULE_METHODS = _MODULE_METHODS - {"to", "cuda"}


def _used_as_module(a: Analysis, name: str, methods: AbstractSet[str] = _MODULE_METHODS) -> bool:
    """Whether the script calls a module's own method (one of ``methods``) on ``name``
    (``model_conv.to(device)``)."""
    return any(
        isinstance(call.node.func, cst.Attribute)
        and call.node.func.attr.value in methods
        and dotted(call.node.func.value) == name
        for call in a.r.calls
    )


@provider(provides=("trackers",))
def trackers(a: Analysis) -> None:
    """Names bound to an experiment tracker (``SummaryWriter(...)``, ``wandb.init(...)``)."""
    for assign in a.r.assigns:
        value = assign.value
        if isinstance(value, cst.Call) and (a.r.names.qualified_name(value.func, assign.scope) in TRACKER_CONSTRUCTORS):
            a.facts.trackers.update(assign.targets)


@provider(
    needs=("arguments",),
    refines=(
        "models",
        "optimizers",
        "train_loaders",
        "schedulers",
        "device_names",
        "cuda_flags",
        "trackers",
        "frozen_models",
        "prepared",
    ),
)
def flow_into_parameters(a: Analysis) -> None:
    """A parameter that receives a model is a model too (file-wide name sets), and back: a class
    training the model its caller passed in (``Trainer(config, net, loader)`` whose ``train()``
    runs ``model = self.model`` and builds the optimizer from ``model.parameters()``) makes the
    caller's name a model, which its caller prepares.

    A name bound only to what a function of the file returns when that is always one of its
    models (``trained = fit(loader)``, ``fit`` ending ``return model``) holds that model, prepared
    where the function prepares it (:func:`_models_returned`).

    Followed to a fixed point: what the way back finds flows forward again (``net`` a model makes
    the attribute ``self.model`` one, held prepared, so ``model = self.model`` stands for the
    prepared object, no model of its own left unprepared, ACC926). Each round adds a name to a
    role or stops, so the rounds are at most the names the parameters receive."""
    facts = a.facts
    roles = [
        facts.models,
        facts.optimizers,
        facts.train_loaders,
        facts.schedulers,
        facts.device_names,
        facts.cuda_flags,
        facts.trackers,
    ]
    origins = {key: a.origins_of(*key) for key in a.arguments}
    for _ in range(len(origins) + 1):
        before = sum(len(role) for role in roles)
        _roles_into_parameters(origins, roles)
        _models_handed_in(a, origins)
        _models_returned(a)
        if sum(len(role) for role in roles) == before:
            break
    # A parameter receiving a model only moved to the device (``evaluate(self.net, loader)``, the
    # evaluator's network from its ``__init__``) is one too, where it is no trained model.
    for (_, param), received in origins.items():
        if received & facts.frozen_models and param not in facts.models:
            facts.frozen_models.add(param)


def _models_returned(a: Analysis) -> None:
    """A name bound to what a function of the file returns, when every return of that function is
    one of its models (``trained = fit(loader)`` where ``fit`` builds, trains and ``return model``):
    the caller holds that model (prepared where the function prepares it), a model too."""
    facts = a.facts
    returning: dict[Builder, set[str | None]] = {}
    for function, value in a.r.returns:
        if function in a.r.defs:
            returning.setdefault(function, set()).add(dotted(value))
    for scope, value in a.r.method_returns:
        if len(scope) == 2:
            returning.setdefault((scope[0], scope[1]), set()).add(dotted(value))
    trained = {builder for builder, names in returning.items() if None not in names and names <= facts.models}
    holding: set[str] = set()
    other: set[str] = set()
    for assign in a.r.assigns:
        builder = _builder_called(a, assign)
        if builder in trained and len(assign.targets) == 1 and not _builds_itself(assign, builder):
            holding.update(assign.targets)
        else:
            other.update(assign.targets)
    # Only a name bound to nothing else: a model's own name bound again (``model =
    # train_model(model, ...)``) stays the model it is, which the plan prepares where it is built.
    found = holding - other - facts.models
    facts.models.update(found)
    facts.prepared.update(found)


def models_into_parameters(a: Analysis, models: AbstractSet[str]) -> None:
    """The parameters receiving one of ``models``, found a model after the roles flowed (a model
    built in the block handing it to a training function, prepared there: see
    ``model.home``), are models too (``test(model, ...)`` handed the distilled student)."""
    origins = {key: a.origins_of(*key) for key in a.arguments}
    _roles_into_parameters(origins, [a.facts.models], set(models))


def _roles_into_parameters(
    origins: dict[tuple[str, str], set[str]], roles: list[set[str]], only: AbstractSet[str] | None = None
) -> None:
    """Each parameter (attribute, loop target) takes the roles of the names it receives (of
    ``only`` when given)."""
    for (_, param), received in origins.items():
        received = received if only is None else received & only
        for role in roles:
            if received & role:
                role.add(param)


def _models_handed_in(a: Analysis, origins: dict[tuple[str, str], set[str]]) -> None:
    """A class that builds the optimizer from ``self.model.parameters()`` trains the model its
    caller passed in (``Trainer(args, model, ...)``), which the caller prepares."""
    facts = a.facts
    for (function, param), received in origins.items():
        if function in a.r.classes and param in facts.models:
            handed_in = received - {param}
            facts.models |= handed_in
            facts.frozen_models -= handed_in


@provider(
    needs=("schedulers", "train_loaders", "eval_loaders", "call_graph", "arguments", "loop_calls"),
    provides=("per_epoch_schedulers",),
)
def per_epoch_schedulers(a: Analysis) -> None:
    """A scheduler stepped inside a batch loop (or in a function called from one) steps per
    batch; one stepped only outside them steps per epoch and is not prepared (ACC103)."""
    facts = a.facts
    loader_loops = [loop for loop in a.r.loops if loop.iterated is not None and a.is_loader(loop)]
    per_batch_functions = a.reachable(set().union(*(loop.calls for loop in loader_loops)))
    per_batch: set[str] = set()
    stepped: set[str] = set()
    for call in a.r.calls:
        func = call.node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
            continue
        name = dotted(func.value)
        if name not in facts.schedulers:
            continue
        # Stepped under a parameter's name (``scheduler.step()`` in ``train_model(...,
        # scheduler, ...)``): what steps is the scheduler its callers pass in.
        names = {name} | a.origins_of(call.function, name)
        stepped |= names
        if any(loop in loader_loops for loop in call.loops) or call.function in per_batch_functions:
            per_batch |= names
    facts.per_epoch_schedulers = stepped - per_batch
    if a.seeds is not None:
        facts.per_epoch_schedulers |= a.seeds.per_epoch_schedulers & facts.schedulers
