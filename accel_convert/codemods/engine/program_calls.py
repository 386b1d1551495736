"""What crosses module boundaries in a program (:mod:`codemods.engine.program`): calls of another
module's functions and classes with the names they pass (:class:`CrossCalls`), and instances of
another module's classes with what is handed to them (:class:`InstanceCalls`)."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import construction, held_name, is_gpu_index
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imported_calls import builds_model_of_program_class, program_callee
from accel_convert.codemods.engine.names import NameCollector, NameTable, ScopeKey, is_builtin
from accel_convert.codemods.engine.program_shapes import ModuleShape
from accel_convert.codemods.engine.syntax import constant_item, dotted, parameter_filled, takes_every_argument
from accel_convert.codemods.engine.torch_names import WORKER_CALLBACKS
from accel_convert.codemods.model.file_flow import file_logger_class
from accel_convert.records import record


@record(frozen=True)
class CrossCall:
    """A call from one module to a module-level function of another."""

    caller_module: str
    #: The calling module-level function ("<module>" outside any).
    function: str
    callee_module: str
    callee: str
    #: (parameter the argument fills, argument as written) for plain-name arguments.
    arguments: tuple[tuple[str, str], ...]
    #: ``super().__init__(...)`` in a subclass: the base's ``__init__`` runs, nothing is built.
    through_super: bool = False


#: A GPU index written in the call (``Trainer(model, gpu_id=0)``, ``0 if torch.cuda.is_available()
#: else "cpu"``): the parameter holds the same GPU on every process. Not an identifier either.
INLINE_GPU_INDEX = "<GPU index>"
#: (``engine.train(model, DataLoader(...))``): the caller prepares it where it stands (ACC120), so
#: the parameter is a prepared loader in the callee's module. Not an identifier: no name matches it.
INLINE_LOADER = "<DataLoader(...)>"
#: A model built in the call (``Trainer(config, Regressor(), loader)``, ``nn.Linear(8, 1)``): no
#: caller's name holds it to prepare, so the callee prepares what keeps it. Not an identifier.
INLINE_MODEL = "<model built in the call>"
#: A file logger built in the call (``fit(loader, CSVLogger("log.csv"))``): the caller builds it on
#: the main process only, so the parameter is a tracker in the callee's module. Not an identifier.
INLINE_FILE_LOGGER = "<file logger built in the call>"


class CrossCalls(NameCollector):
    """Calls of module-level functions of other program modules, with their arguments."""

    def __init__(
        self,
        facts: ScriptFacts,
        name: str,
        functions: dict[str, dict[str, tuple[str, ...]]],
        bases: dict[str, tuple[str, str]],
        initialisers: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        super().__init__()
        self.facts, self.name, self.functions = facts, name, functions
        #: This module's classes → the class of another program module they derive from.
        self.bases = bases
        #: Program classes without an ``__init__`` (qualified) → the class whose ``__init__``
        #: constructing them runs.
        self.initialisers = initialisers or {}
        self.found: list[CrossCall] = []
        #: Functions of other modules named as values (``hooks = [log_epoch]``,
        #: ``functools.partial(save_weights, ...)``, ``{"log": log_epoch}``): called out of sight by
        #: whatever receives them, from the code that hands them over (no arguments known).
        self.values: list[CrossCall] = []
        #: Calls of a callable held as a value, with their function and the name holding it.
        self._out_of_sight: list[tuple[str, cst.Call, str]] = []
        #: The names bound by the ``for`` loops around the code being visited, with what each iterates.
        self._loop_targets: list[tuple[set[str], str | None]] = []
        #: Name → the other modules' functions it can hold (``callbacks = [save_ckpt]``,
        #: ``saver = functools.partial(save_weights, ...)``, ``hooks.append(log_epoch)``).
        self._held: dict[str, set[tuple[str, str]]] = {}
        #: (module, function) → positional arguments ``functools.partial`` binds first (-1: several).
        self._partial_bound: dict[tuple[str, str], int] = {}

    def visit_For(self, node: cst.For) -> None:
        super().visit_For(node)
        self._loop_targets.append(({name.value for name in _names_in(node.target)}, dotted(node.iter)))

    def leave_For(self, original_node: cst.For) -> None:
        self._loop_targets.pop()

    def _holder(self, func: cst.BaseExpression) -> str | None:
        """The name holding the callable a call calls: a name bound to one (``saver(...)``), what
        a loop iterates (``hooks`` for ``for hook in hooks: hook(...)``), a table (``table`` for
        ``table["save"](...)``); None for any other call."""
        if isinstance(func, cst.Subscript):
            return dotted(func.value)
        if not isinstance(func, cst.Name):
            return None
        if func.value in self._held:
            return func.value
        return next((iterated for targets, iterated in reversed(self._loop_targets) if func.value in targets), None)

    def _functions_named(self, value: cst.BaseExpression) -> set[tuple[str, str]]:
        """Other modules' functions named anywhere in ``value`` (a list, a dict, a partial)."""
        found = set()
        for node in _expressions_in(value):
            callee = program_callee(self.facts, node, tuple(self.scope))
            module, _, function = (callee or "").rpartition(".")
            if module and module != self.name and function in self.functions.get(module, {}):
                found.add((module, function))
        return found

    def _partial_of(self, node: cst.Call) -> None:
        """``functools.partial(save_weights, path)``: how many parameters it fills first."""
        if self.facts.callee_name(node.func, tuple(self.scope)) != "functools.partial" or not node.args:
            return
        callee = program_callee(self.facts, node.args[0].value, tuple(self.scope))
        module, _, function = (callee or "").rpartition(".")
        bound = sum(arg.keyword is None and not arg.star for arg in node.args[1:])
        key = (module, function)
        self._partial_bound[key] = bound if self._partial_bound.get(key, bound) == bound else -1

    def leave_Module(self, original_node: cst.Module) -> None:
        """Each call of a callable held as a value counts as a call of each other module's
        function handed over here whose parameters take its arguments (``callback(classifier)``
        after ``callbacks = [save_ckpt]``): what it passes fills them, as a call's arguments do."""
        for caller, node, holder in self._out_of_sight:
            for module, function in sorted(self._held.get(holder, ())):
                bound = self._partial_bound.get((module, function), 0)
                params = self.functions[module][function]
                if bound < 0 or not takes_every_argument(node, params[bound:]):
                    continue
                arguments = call_arguments(self.facts, (), node, params[bound:])
                self.found.append(CrossCall(self.name, caller, module, function, arguments))

    def visit_Call(self, node: cst.Call) -> None:
        self._values_handed_to(node)
        self._partial_of(node)
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("append", "extend", "insert", "add"):
            holder = dotted(func.value)
            filled = {named for arg in node.args for named in self._functions_named(arg.value)}
            if holder is not None and filled:
                self._held.setdefault(holder, set()).update(filled)
        holder = self._holder(func)
        if holder is not None:
            self._out_of_sight.append((self.scope[0] if self.scope else "<module>", node, holder))
        found = self._callee(node)
        if found is None:
            return
        callee, through_super = found
        module, _, function = callee.rpartition(".")
        if module == self.name or function not in self.functions.get(module, {}):
            return
        arguments = self._arguments(node, self.functions[module][function])
        caller = self.scope[0] if self.scope else "<module>"
        self.found.append(CrossCall(self.name, caller, module, function, arguments, through_super))

    def _values_handed_to(self, node: cst.Call) -> None:
        """The call's arguments that name another module's function, except those handed to
        DataLoader workers (``collate_fn=``): called in a worker process, never where the
        accelerator is."""
        qualified = self.facts.callee_name(node.func, tuple(self.scope)) or ""
        workers = WORKER_CALLBACKS.get(qualified, frozenset())
        for arg in node.args:
            if arg.keyword is None or arg.keyword.value not in workers:
                self._value(arg.value)

    def visit_Element(self, node: cst.Element) -> None:
        self._value(node.value)

    def visit_DictElement(self, node: cst.DictElement) -> None:
        self._value(node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.note_alias(node)
        self._value(node.value)
        found = self._functions_named(node.value)
        for target in node.targets if found else ():
            holder = dotted(target.target)
            if holder is not None:
                self._held.setdefault(holder, set()).update(found)

    def _value(self, value: cst.BaseExpression) -> None:
        if not isinstance(value, (cst.Name, cst.Attribute)):
            return
        callee = program_callee(self.facts, value, tuple(self.scope))
        module, _, function = (callee or "").rpartition(".")
        if module and module != self.name and function in self.functions.get(module, {}):
            caller = self.scope[0] if self.scope else "<module>"
            self.values.append(CrossCall(self.name, caller, module, function, ()))

    def _callee(self, node: cst.Call) -> tuple[str, bool] | None:
        """The qualified name of the program function or class whose code the call runs, and
        whether it runs through ``super().__init__(...)``; None for anything else."""
        if _calls_super_init(node, self.facts.names, self.scope) and self.scope and self.scope[0] in self.bases:
            return ".".join(self.bases[self.scope[0]]), True
        callee = program_callee(self.facts, node.func, self.scope)
        if callee is None:
            callee = self._local_class_initialised_elsewhere(node.func)
        if callee is None:
            return None
        if callee in self.initialisers:
            # ``ClassifierTrainer(model, ...)`` with no ``__init__`` of its own runs its base's
            # (in another module): the arguments fill the base's parameters, as if it were built.
            return ".".join(self.initialisers[callee]), False
        return callee, False

    def _local_class_initialised_elsewhere(self, func: cst.BaseExpression) -> str | None:
        """A class of this module without ``__init__`` whose base is another module's (its
        qualified name), unless a local of that name shadows it."""
        if not isinstance(func, cst.Name):
            return None
        local = f"{self.name}.{func.value}"
        scope = self.facts.name_table.scopes.get(tuple(self.scope)) if self.scope else None
        shadowed = scope is not None and scope.binds(func.value)
        return local if local in self.initialisers and not shadowed else None

    def _arguments(self, node: cst.Call, params: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        return call_arguments(self.facts, tuple(self.scope), node, params)


def call_arguments(
    facts: ScriptFacts, scope: ScopeKey, node: cst.Call, params: tuple[str, ...], positional: int | None = None
) -> tuple[tuple[str, str], ...]:
    """(parameter filled, argument as written) for the call's plain-name arguments (and loaders
    built in the call, as :data:`INLINE_LOADER`, file loggers, as :data:`INLINE_FILE_LOGGER`, GPU indices written there, as
    :data:`INLINE_GPU_INDEX`, or kept in a container, ``gpus[0]``; a GPU index in a dictionary or
    list written there fills that part of the parameter, ``config["gpu"]`` of ``Runner({"gpu":
    0})``); ``positional``: how many of ``params`` positional arguments fill."""
    arguments = []
    for index, arg in enumerate(node.args):
        if arg.star or (positional is not None and arg.keyword is None and index >= positional):
            continue
        param = parameter_filled(arg, index, params)
        if param is None:
            continue
        arguments += [(param + part, INLINE_GPU_INDEX) for part in gpu_index_parts(arg.value)]
        arguments += [(param + part, loader) for part, loader in _loaders_in_sequence(facts, arg.value)]
        value = _argument_as_written(facts, scope, arg.value)
        if value is not None:
            arguments.append((param, value))
    return tuple(arguments)


def _loaders_in_sequence(facts: ScriptFacts, value: cst.BaseExpression) -> list[tuple[str, str]]:
    """``[("[1]", "test_loader")]`` for ``(train_loader, test_loader)`` written in the call: each
    loader of a tuple or list written out fills that part of the parameter (a trainer unpacking
    ``self.train_loader, self.test_loader = loaders`` takes each loader's role and preparation);
    ``[("[0]", "loaders"), ("[1]", "loaders")]`` for a name holding a loader tuple."""
    held = dotted(value)
    length = facts.loader_tuple_length(held) if held is not None else None
    if held is not None and length is not None:
        # A name holding a tuple of loaders (``loaders = get_loaders(...)``), always or on some
        # paths: each part of the parameter is one of the loaders it holds, prepared with it.
        return [(f"[{index}]", held) for index in range(length)]
    if not isinstance(value, (cst.List, cst.Tuple)):
        return []
    if any(isinstance(element, cst.StarredElement) for element in value.elements):
        return []
    found = []
    for index, element in enumerate(value.elements):
        name = dotted(element.value)
        if name is not None and name in facts.loaders:
            found.append((f"[{index}]", name))
    return found


def _argument_as_written(facts: ScriptFacts, scope: ScopeKey, value: cst.BaseExpression) -> str | None:
    """The name an argument is held under, or what stands for a loader, a model or a GPU index
    written right in the call; None for anything else."""
    written = dotted(value)
    if written is None and isinstance(value, cst.Call):
        loader = facts.builds_data_loader(value.func, scope)
        written = INLINE_LOADER if loader else INLINE_MODEL if _builds_a_model(facts, scope, value) else None
        if written is None and file_logger_class(facts, value.func, scope) is not None:
            written = INLINE_FILE_LOGGER
    if written is None and is_gpu_index(value):
        written = INLINE_GPU_INDEX
    if written is None and (held := held_name(value, indexed=True)) in facts.gpu_index_values:
        written = held  # ``gpus[0]``, ``cfg["gpu"]``: a GPU index kept in a container
    item = constant_item(value) if written is None else None
    if item is not None and (item[0] in facts.loader_tuples or item[0] in facts.loader_dict_names):
        written = item[0]  # ``loaders["test"]``: one of the loaders the container holds, prepared with it
    return written


def gpu_index_parts(value: cst.BaseExpression) -> list[str]:
    """``["gpu"]`` of ``{"gpu": 0}``, ``[0]`` of ``[0, 1]``, ``["gpus"][0]`` of ``{"gpus": [0, 1]}``:
    the parts of a dictionary, list or tuple written out that hold a GPU index written there."""
    if isinstance(value, cst.Dict):
        parts = [
            (f'["{element.key.evaluated_value}"]', element.value)
            for element in value.elements
            if isinstance(element, cst.DictElement)
            and isinstance(element.key, cst.SimpleString)
            and isinstance(element.key.evaluated_value, str)
        ]
    elif isinstance(value, (cst.List, cst.Tuple)):
        elements = [element for element in value.elements if not isinstance(element, cst.StarredElement)]
        parts = [(f"[{index}]", element.value) for index, element in enumerate(elements)]
        parts = parts if len(elements) == len(value.elements) else []
    else:
        return []
    return [
        part + rest for part, element in parts for rest in ([""] if is_gpu_index(element) else gpu_index_parts(element))
    ]


def _builds_a_model(facts: ScriptFacts, scope: ScopeKey, value: cst.Call) -> bool:
    """``Regressor()`` of the program's model classes (the file's own or another module's), or a
    ``torch.nn`` module (``nn.Linear(8, 1)``)."""
    return builds_model_of_program_class(facts, value.func, scope) or (
        facts.callee_name(value.func, scope) or ""
    ).startswith("torch.nn.")


def _calls_super_init(node: cst.Call, names: NameTable | None, scope: ScopeKey) -> bool:
    """``super().__init__(...)`` (or ``super(Trainer, self).__init__(...)``)."""
    func = node.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value == "__init__"
        and isinstance(func.value, cst.Call)
        and is_builtin(func.value.func, "super", names, scope)
    )


class InstanceCalls(NameCollector):
    """Instances of other program modules' classes (``stopper = pytorchtools.EarlyStopping(...)``)
    and the plain names passed to them: to the constructor, to the instance itself
    (``stopper(val_loss, model)``) or to one of its methods (``stopper.step(model)``).
    Names are file-wide, as facts are."""

    def __init__(self, facts: ScriptFacts, name: str, shapes: dict[str, ModuleShape]) -> None:
        super().__init__()
        self.facts, self.name, self.shapes = facts, name, shapes
        self.classes = {module: shape.classes for module, shape in shapes.items()}
        #: Instance name → (module, class).
        self.instances: dict[str, tuple[str, str]] = {}
        #: (module, class) → names passed to it, with the calling function.
        self.passed: dict[tuple[str, str], set[tuple[str, str]]] = {}
        #: (module, parameter of one of its methods, name passed) for calls of an instance.
        self.filled: set[tuple[str, str, str]] = set()
        #: Calls of an instance's methods (``trainer.fit(model, loader, gpu=0)``), as calls of its
        #: class with the method's parameters: what they hand over is followed as for a function.
        self.method_calls: list[CrossCall] = []

    def _program_class(self, func: cst.BaseExpression) -> tuple[str, str] | None:
        callee = program_callee(self.facts, func, self.scope)
        if callee is None:
            return None
        module, _, cls = callee.rpartition(".")
        return (module, cls) if module != self.name and cls in self.classes.get(module, set()) else None

    def _instance_called(self, func: cst.BaseExpression) -> tuple[str, str] | None:
        """The class of the instance a call runs a method of: a name bound to an instance
        (``stopper(...)``, ``stopper.step(...)``) or an instance built in the call
        (``Evaluator(device).accuracy(...)``)."""
        receiver = func.value if isinstance(func, cst.Attribute) else func
        if isinstance(receiver, cst.Call) and isinstance(func, cst.Attribute):
            return self._program_class(receiver.func)
        instance = dotted(receiver)
        return self.instances.get(instance) if instance is not None else None

    def visit_Assign(self, node: cst.Assign) -> None:
        self.note_alias(node)
        # Through moves and mode switches: ``trainer = FasterRCNNTrainer(net).cuda()`` binds the
        # instance the construction builds (an ``nn.Module`` trainer moves itself and what it holds).
        built = construction(node.value)
        if built is not None and len(node.targets) == 1:
            found = self._program_class(built.func)
            target = dotted(node.targets[0].target)
            if found is not None and target is not None:
                self.instances[target] = found

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        found = self._program_class(func) or self._instance_called(func)
        if found is None:
            return
        caller = self.scope[0] if self.scope else "<module>"
        names = {(caller, value) for arg in node.args if not arg.star and (value := dotted(arg.value)) is not None}
        self.passed.setdefault(found, set()).update(names)
        if self._program_class(func) is not None:
            return  # the constructor: its arguments are followed as calls (``CrossCalls``)
        method = func.attr.value if isinstance(func, cst.Attribute) else "__call__"
        params, positional = self.shapes[found[0]].methods.get(found[1], {}).get(method, ((), 0))
        arguments = call_arguments(self.facts, tuple(self.scope), node, params, positional)
        # Keyed by the class, the analysis' "function" for every method of it.
        self.method_calls.append(CrossCall(self.name, caller, found[0], found[1], arguments))
        for index, arg in enumerate(node.args):
            value = dotted(arg.value)
            if value is None or arg.star:
                continue
            param = arg.keyword.value if arg.keyword is not None else (params[index] if index < positional else None)
            if param is not None and param in params:
                self.filled.add((found[0], param, value))


def _names_in(target: cst.BaseExpression) -> list[cst.Name]:
    """The plain names an assignment or loop target binds (``hook``, ``(name, hook)``)."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _names_in(element.value)]
    return []


def _expressions_in(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The names and attribute chains in ``value``, outermost first."""
    found: list[cst.BaseExpression] = []

    class Finder(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            found.append(node)
            return False

    value.visit(Finder())
    return found
