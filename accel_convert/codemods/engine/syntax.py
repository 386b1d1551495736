"""Small readers and builders of libcst nodes that every part of the converter shares.

Everything here looks at one node (or a short list of statements) and never at the whole tree:
what a dotted name is, which names a statement binds, whether an ``if`` is the ``__main__``
guard. Whole-tree questions belong to the analysis (:mod:`codemods.engine.analysis`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.names import BuiltinOf
from accel_convert.codemods.engine.torch_names import ROW_JOINS
from accel_convert.codemods.engine.walk import child_nodes, walk

#: libcst's two kinds of statement; both carry ``leading_lines``, which BaseStatement does not declare.
Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


def as_statement(node: cst.BaseStatement) -> Statement:
    """``node`` typed as what it is: BaseStatement has exactly these two subclasses."""
    return cast(Statement, node)


def as_statements(nodes: Sequence[cst.BaseStatement]) -> list[Statement]:
    """A new list of ``nodes``, typed as :func:`as_statement` says."""
    return cast(list[Statement], list(nodes))


def dotted(node: cst.CSTNode | None) -> str | None:
    """``self.model`` for Name/Attribute chains, None for anything else."""
    # ``type() is``, not isinstance: a failed isinstance against a libcst class (an ABC) runs a
    # Python-level ``__instancecheck__``, and every rule asks this of most expressions it sees.
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base is not None else None
    return None


def constant_item(node: cst.CSTNode | None) -> tuple[str, int | str] | None:
    """``("loaders", 0)`` for ``loaders[0]`` (``-1`` for ``loaders[-1]``), ``("self.loaders", "train")`` for
    ``self.loaders["train"]``: a dotted name subscripted by one integer or string constant; None
    for anything else."""
    if type(node) is not cst.Subscript or len(node.slice) != 1:
        return None
    base = dotted(node.value)
    index = node.slice[0].slice
    if base is None or not isinstance(index, cst.Index):
        return None
    value = index.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        found = value.expression
        return (base, -int(found.value, 0)) if isinstance(found, cst.Integer) else None  # ``loaders[-1]``
    if isinstance(value, cst.Integer):
        return base, int(value.value, 0)
    if isinstance(value, cst.SimpleString):
        key = value.evaluated_value
        return (base, key) if isinstance(key, str) else None
    return None


def item_code(holder: str, key: int | str) -> str:
    """``loaders[0]``, ``loaders['train']``: how :func:`constant_item`'s parts read as code."""
    return f"{holder}[{key!r}]"


def root_name(node: cst.BaseExpression) -> str | None:
    """The Name at the root of an attribute/subscript/call chain: ``batch`` for ``batch["x"].to(d)``."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Attribute):
            node = node.value
        elif isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            return None


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def as_operand(value: cst.BaseExpression) -> cst.BaseExpression:
    """``value`` ready to be an operand that binds tightly (``not value``, ``value.items()``): a
    name, an attribute, a subscript, a call or anything already in parentheses as it is, anything
    else in parentheses (``(a if c else b).items()``)."""
    if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) or value.lpar:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def method_call(node: cst.CSTNode, *names: str) -> bool:
    """``node`` is a call ``<something>.<one of names>(...)``."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names


def names_in(node: cst.CSTNode) -> set[str]:
    """Every Name value inside ``node`` (a small subtree: used on conditions and arguments)."""
    collector = _NameGatherer()
    walk(node, collector)
    return collector.found


class _NameGatherer(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        path = dotted(node)
        if path is not None:
            self.found.add(path)


def target_names(target: cst.BaseExpression, *, plain: bool = False) -> tuple[str, ...]:
    """Names bound by an assignment or loop target, in order: attribute paths too
    (``self.model``), or with ``plain`` only plain names (not ``self.x`` or ``a[i]``)."""
    if isinstance(target, cst.Name):
        return (target.value,)
    if isinstance(target, (cst.Tuple, cst.List)):
        return tuple(name for element in target.elements for name in target_names(element.value, plain=plain))
    if isinstance(target, cst.StarredElement):
        return target_names(target.value, plain=plain)
    path = dotted(target)
    return (path,) if path is not None and not plain else ()


def bound_by(node: cst.CSTNode) -> tuple[str, ...]:
    """The names one assignment-like node binds: ``=``, ``+=``, an annotated assignment, a ``for``
    target (nothing for other nodes)."""
    # Asked of every node of a function or file: ``type() is`` (libcst's node classes have no
    # subclasses) rather than ``isinstance``, a Python call per class with libcst's metaclass.
    if type(node) is cst.Assign:
        return tuple(name for target in node.targets for name in target_names(target.target))
    if type(node) is cst.AugAssign or type(node) is cst.AnnAssign or type(node) is cst.For:
        return target_names(node.target)
    return ()


def binds_locally(function: cst.FunctionDef, name: str, *, top_level_only: bool = False) -> bool:
    """Whether ``name`` is local to ``function``: a parameter (``*args``/``**kwargs`` too) or a
    name its body binds; ``top_level_only`` looks at the body's own ``name = ...`` lines only."""
    params = function.params
    stars = [param.name.value for param in (params.star_arg, params.star_kwarg) if isinstance(param, cst.Param)]
    if name in parameter_names(function) or name in stars:
        return True
    body = body_statements(function)
    return assigns_at_top(body, name) if top_level_only else name in names_bound(body)


#: Attributes of a tensor that are Python numbers (or a tuple of them): its sizes.
HOST_NUMBER_ATTRIBUTES = frozenset({"shape", "ndim"})
#: Methods of a tensor that return Python numbers (or lists of them), on the host whatever device
#: the tensor is on.
HOST_NUMBER_METHODS = frozenset(
    {"size", "numel", "nelement", "dim", "ndimension", "stride", "element_size", "item", "tolist"}
)
#: Builtins whose result is a Python number, whatever they are given.
HOST_NUMBER_BUILTINS = frozenset({"len", "int", "float"})


def is_host_number(node: cst.BaseExpression, builtin: BuiltinOf) -> bool:
    """Whether ``node`` is a Python number (or a tuple or list of them) read off a value:
    ``x.shape[0]``, ``x.shape`` (``b, c = x.shape``), ``x.size(0)``, ``x.size()[1]``,
    ``x.numel()``, ``len(x)``, ``loss.item()``, ``y.tolist()``. It lives on the host whatever
    device ``x`` is on: it never takes ``.cpu()`` or a device move, and a name bound to it is not
    batch data. ``builtin``: what a name denotes where ``node`` stands (a script's own ``len`` is
    no builtin)."""
    while isinstance(node, cst.Subscript):  # x.shape[0], x.size()[1:], y.tolist()[0]
        node = node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value in HOST_NUMBER_ATTRIBUTES
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute):
            return func.attr.value in HOST_NUMBER_METHODS
        return builtin(func) in HOST_NUMBER_BUILTINS
    return False


def parameter_names(function: cst.FunctionDef) -> tuple[str, ...]:
    """The names of a function's parameters, in order (not ``*args``/``**kwargs``)."""
    params = function.params
    return tuple(param.name.value for param in [*params.posonly_params, *params.params, *params.kwonly_params])


def positional_parameter_names(function: cst.FunctionDef) -> tuple[str, ...]:
    """The names of the parameters a positional argument can fill, in order (``a, b`` of
    ``def f(a, /, b, *rest, c)``)."""
    params = function.params
    return tuple(param.name.value for param in [*params.posonly_params, *params.params])


def class_methods(node: cst.ClassDef) -> list[cst.FunctionDef]:
    """The functions defined directly in a class body."""
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    return [statement for statement in body if isinstance(statement, cst.FunctionDef)]


#: ``keyword=value`` as PEP 8 writes a keyword argument.
TIGHT_EQUAL = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def keyword_is(call: cst.Call, keyword: str, literal: str) -> bool:
    """Whether the call passes ``keyword=<literal>`` (``batch_first=True``, ``enabled=False``)."""
    return any(
        arg.keyword is not None
        and arg.keyword.value == keyword
        and isinstance(arg.value, cst.Name)
        and arg.value.value == literal
        for arg in call.args
    )


def instance_parameter(method: cst.FunctionDef) -> str | None:
    """The instance parameter of a method (``self``); None for static and class methods."""
    decorators = {dotted(decorator.decorator) for decorator in method.decorators}
    params = [*method.params.posonly_params, *method.params.params]
    if not params or decorators & {"staticmethod", "classmethod"}:
        return None
    return params[0].name.value


def nodes_in(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node`` and every node inside it (a small subtree: an expression, a loop, a function), but
    layout and punctuation (:data:`walk.TRIVIA`): read off the fields, not libcst's ``children``,
    which builds a visitor per node and is several times slower."""
    found, pending = [], [node]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(child_nodes(current))
    return found


def rows_counted(node: cst.CSTNode, builtin: BuiltinOf) -> str | None:
    """The name whose rows ``node`` counts, a Python int: ``x`` for ``x.size(0)``, ``x.size()[0]``,
    ``x.shape[0]``, ``len(x)``; None for anything else. Such a count is no tensor to gather: after
    a gather it is read again from the gathered ``x``. ``builtin``: what a name denotes where
    ``node`` stands (``len`` the builtin, not a parameter of that name)."""
    if isinstance(node, cst.Call):
        return _rows_counted_by_call(node, builtin)
    if isinstance(node, cst.Subscript) and _is_first_item(node):
        owner = node.value
        # ``x.shape[0]``, ``x.size()[0]``.
        if isinstance(owner, cst.Call):
            return _name_before(owner.func, "size") if not owner.args else None
        return _name_before(owner, "shape")
    return None


def _rows_counted_by_call(call: cst.Call, builtin: BuiltinOf) -> str | None:
    """``x`` of ``len(x)`` and ``x.size(0)``."""
    if len(call.args) != 1:
        return None
    argument = call.args[0].value
    if isinstance(call.func, cst.Name):
        return argument.value if builtin(call.func) == "len" and isinstance(argument, cst.Name) else None
    return _name_before(call.func, "size") if _is_zero(argument) else None


def _is_first_item(node: cst.Subscript) -> bool:
    """``[0]``."""
    return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) and _is_zero(node.slice[0].slice.value)


def _is_zero(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer) and node.value == "0"


def _name_before(node: cst.BaseExpression, attribute: str) -> str | None:
    """``x`` of ``x.<attribute>``; None when ``node`` is anything else."""
    if isinstance(node, cst.Attribute) and node.attr.value == attribute and isinstance(node.value, cst.Name):
        return node.value.value
    return None


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call inside a (small) expression."""
    return [current for current in nodes_in(node) if type(current) is cst.Call]


def names_variable(node: cst.CSTNode, name: str) -> bool:
    """``name`` itself, or the attribute of that name on a variable (``self.accelerator``, as a
    training class holds the accelerator)."""
    if isinstance(node, cst.Name):
        return node.value == name
    return isinstance(node, cst.Attribute) and node.attr.value == name and isinstance(node.value, cst.Name)


def is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def is_main_guard(node: cst.CSTNode) -> bool:
    """``if __name__ == "__main__":``."""
    if type(node) is not cst.If or type(node.test) is not cst.Comparison:
        return False
    test = node.test
    return (
        isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].comparator, cst.SimpleString)
        and test.comparisons[0].comparator.evaluated_value == "__main__"
    )


def assigned_in(statement: cst.CSTNode) -> set[str]:
    """Names (and attribute paths, ``self.model``) a statement binds by assignment, as a loop
    target or with ``with ... as``, at any depth except inside nested defs/classes."""
    finder = _Bindings(every_binding=False)
    walk(statement, finder)
    return finder.names


def names_bound(statements: Sequence[cst.CSTNode]) -> set[str]:
    """Every plain name these statements bind, not looking into nested defs/classes: what
    :func:`assigned_in` finds but attribute paths, and augmented assignments, every ``as``
    (``import``, ``except``, ``with``) and the names of the defs and classes themselves."""
    finder = _Bindings(every_binding=True)
    for statement in statements:
        walk(statement, finder)
    return finder.names


class _Bindings(cst.CSTVisitor):
    """The one "names bound by a statement" reader (see :func:`assigned_in`, :func:`names_bound`)."""

    def __init__(self, *, every_binding: bool) -> None:
        super().__init__()
        self.every_binding = every_binding
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self.every_binding:
            self.names.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if self.every_binding:
            self.names.add(node.name.value)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._add(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._add(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self.every_binding:
            self._add(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._add(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None and not self.every_binding:  # every ``as``: visit_AsName
            self._add(node.asname.name)

    def visit_AsName(self, node: cst.AsName) -> None:
        if self.every_binding:
            self._add(node.name)

    def _add(self, target: cst.BaseExpression) -> None:
        names = target_names(target)
        if self.every_binding:
            names = tuple(name for name in names if "." not in name)  # plain names only
        self.names.update(names)


def first_statement_index(body: Sequence[cst.BaseStatement]) -> int:
    """Index after a leading docstring and ``from __future__`` imports."""
    index = 0
    while index < len(body) and (is_docstring(body[index]) if index == 0 else False):
        index += 1
    while index < len(body) and _is_future_import(body[index]):
        index += 1
    return index


def _is_future_import(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.ImportFrom)
        and dotted(statement.body[0].module) == "__future__"
    )


def parses_arguments(statement: cst.BaseStatement, parsing_functions: Collection[str] = ()) -> bool:
    """``args = parser.parse_args()`` / ``args, _ = parse_known_args()`` / ``opt = parse_args()``,
    or ``args = get_args()`` where ``get_args`` is one of ``parsing_functions`` (functions of the
    file returning the parse result)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call):
            name = dotted(small.value.func) or ""
            if name.rsplit(".", 1)[-1] in {"parse_args", "parse_known_args", "parse_args_into_dataclasses"}:
                return True
            if name in parsing_functions:
                return True
    return False


def assigns_at_top(statements: Sequence[cst.CSTNode], name: str) -> bool:
    """Whether one of these statements itself (not a nested block) is ``name = ...``: the
    accelerator is created at the top level of its body, and looking no deeper keeps the scope
    bookkeeping from walking every function twice."""
    for statement in statements:
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                targets = small.targets if type(small) is cst.Assign else []
                if any(name in target_names(t.target) for t in targets):
                    return True
    return False


def binds_name(statements: Sequence[cst.CSTNode], name: str) -> bool:
    """Whether any of these statements (not looking into nested functions) binds ``name``."""
    return any(name in assigned_in(statement) for statement in statements)


def body_statements(node: cst.FunctionDef | cst.If) -> Sequence[cst.CSTNode]:
    """The statements of a function's or an ``if``'s block (a one-line block is one statement)."""
    body = node.body
    return body.body if isinstance(body, cst.IndentedBlock) else [body]


def branch_blocks(node: cst.CSTNode) -> list[cst.IndentedBlock]:
    """The indented blocks of a statement whose bodies run as the statements around it do, not
    repeated: each branch of an ``if`` chain (its ``elif`` branches and final ``else`` too), a
    ``with`` block, and a ``try``'s body, handlers, ``else`` and ``finally``. Nothing for any
    other statement (a loop's body runs again; a definition's when it is called), nor for a
    one-line block."""
    suites: list[cst.BaseSuite] = []
    if isinstance(node, cst.If):
        current: cst.If | cst.Else | None = node
        while isinstance(current, cst.If):
            suites.append(current.body)
            current = current.orelse
        if current is not None:
            suites.append(current.body)
    elif isinstance(node, cst.With):
        suites.append(node.body)
    elif isinstance(node, (cst.Try, cst.TryStar)):
        suites += [node.body, *(handler.body for handler in node.handlers)]
        suites += [part.body for part in (node.orelse, node.finalbody) if part is not None]
    return [suite for suite in suites if isinstance(suite, cst.IndentedBlock)]


StatementsEdit = Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]


def with_blocks_edited(node: cst.BaseStatement, edit: StatementsEdit) -> cst.BaseStatement:
    """``node`` with ``edit`` applied to the statements of each of its indented blocks: those of
    :func:`branch_blocks`, and a loop's body and ``else``. Any other statement as it is."""
    if isinstance(node, cst.If):
        node = node.with_changes(body=_block_edited(node.body, edit))
        if isinstance(node.orelse, cst.If):
            return node.with_changes(orelse=with_blocks_edited(node.orelse, edit))
        if node.orelse is not None:
            return node.with_changes(orelse=node.orelse.with_changes(body=_block_edited(node.orelse.body, edit)))
        return node
    if isinstance(node, (cst.For, cst.While, cst.Try, cst.TryStar)):
        edited = node.with_changes(body=_block_edited(node.body, edit))
        if edited.orelse is not None:
            edited = edited.with_changes(
                orelse=edited.orelse.with_changes(body=_block_edited(edited.orelse.body, edit))
            )
        if isinstance(edited, (cst.Try, cst.TryStar)):
            handlers = [handler.with_changes(body=_block_edited(handler.body, edit)) for handler in edited.handlers]
            edited = edited.with_changes(handlers=handlers)
            if edited.finalbody is not None:
                finalbody = edited.finalbody.with_changes(body=_block_edited(edited.finalbody.body, edit))
                edited = edited.with_changes(finalbody=finalbody)
        return edited
    if isinstance(node, cst.With):
        return node.with_changes(body=_block_edited(node.body, edit))
    return node


def _block_edited(suite: cst.BaseSuite, edit: StatementsEdit) -> cst.BaseSuite:
    """``suite`` with ``edit`` applied to its statements (a one-line block as it is)."""
    if not isinstance(suite, cst.IndentedBlock):
        return suite
    return suite.with_changes(body=edit(list(suite.body)))


def expression_code(node: cst.CSTNode) -> str:
    """Source text of an expression, for messages and for comparing two expressions."""
    return cst.Module(body=[]).code_for_node(node)


def parameter_filled(arg: cst.Arg, index: int, params: Sequence[str]) -> str | None:
    """The parameter a call's ``index``-th argument fills: its keyword, or the positional
    parameter at that index (None past the last one)."""
    if arg.keyword is not None:
        return arg.keyword.value
    return params[index] if index < len(params) else None


def parameters_filled(call: cst.Call, params: Sequence[str]) -> Iterator[tuple[str, cst.Arg]]:
    """Each parameter a call's arguments fill (:func:`parameter_filled`), with the argument
    filling it; ``*args`` and ``**kwargs`` fill none we can name, nor a positional argument past
    the last parameter."""
    for index, arg in enumerate(call.args):
        param = parameter_filled(arg, index, params) if not arg.star else None
        if param is not None:
            yield param, arg


def takes_every_argument(call: cst.Call, params: Sequence[str]) -> bool:
    """Whether a function with ``params`` takes every argument of ``call`` (no more positional
    ones, no other keyword, no ``*args``): what a call of a function held as a value (a hook)
    passes then fills them, position by position."""
    if any(arg.star for arg in call.args):
        return False
    positional = sum(arg.keyword is None for arg in call.args)
    keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    return positional <= len(params) and keywords <= set(params[positional:])


def argument_for(call: cst.Call, index: int | None, param: str) -> cst.Arg | None:
    """The argument ``call`` passes for the parameter named ``param``, at ``index`` among the
    positional parameters (None: keyword-only): by keyword, else the ``index``-th positional
    argument; None when it passes none, or when a ``*args`` hides the positions. The other way
    round from :func:`parameter_filled`."""
    keyword = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == param), None)
    if keyword is not None:
        return keyword
    if index is None or any(arg.star == "*" for arg in call.args):
        return None
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return positional[index] if index < len(positional) else None


def built_from_parameters(node: cst.CSTNode) -> bool:
    """A call handed ``<something>.parameters()`` (``SAM(model.parameters(), ...)``): an optimizer
    of some class, built to update a model."""
    return isinstance(node, cst.Call) and any(
        isinstance(arg.value, cst.Call)
        and isinstance(arg.value.func, cst.Attribute)
        and arg.value.func.attr.value == "parameters"
        for arg in node.args
    )


def is_backward(node: cst.CSTNode) -> bool:
    """``loss.backward()``, ``accelerator.backward(loss)``: a call of a ``backward`` method."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward"


def defines_method(node: cst.ClassDef, name: str) -> bool:
    """Whether a class defines a method called ``name`` in its own body."""
    return any(method.name.value == name for method in class_methods(node))


def is_plain_class(node: cst.ClassDef, builtin: BuiltinOf) -> bool:
    """A class with no ``__init__``, no base but the builtin ``object`` and no decorator (an
    ``Evaluator`` of methods only): constructing it runs ``object.__init__`` and takes no argument,
    so an ``__init__`` of its own can be written for it. A dataclass (its decorator writes an
    ``__init__``) or a class with a base (whose ``__init__`` runs) is not one. ``builtin``
    answers where the class statement stands."""
    return (
        not defines_method(node, "__init__")
        and not node.decorators
        and all(builtin(base.value) == "object" and base.keyword is None for base in node.bases)
    )


def defines_backward(node: cst.ClassDef) -> bool:
    """Whether a class defines a ``backward`` method (a weight penalty, an autograd helper): the
    ``backward()`` of its instances is that method, not a loss tensor's."""
    return defines_method(node, "backward")


def name_assigned(statement: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """``(NAME, value)`` of a line that is exactly ``NAME = value`` (one target, one statement)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    return (target.value, assign.value) if isinstance(target, cst.Name) else None


#: Methods of a tensor that return Python numbers or lists, or a NumPy array: not gatherable.
_PYTHON_VALUE_METHODS = frozenset({"tolist", "item", "numpy"})


#: Builtins that build a Python value (a list of ints, a number) from what they are given.
_PYTHON_VALUE_BUILTINS = frozenset({"list", "tuple", "sorted", "int", "float", "sum", "max", "min"})


def python_value(value: cst.BaseExpression, builtin: BuiltinOf) -> bool:
    """Whether ``value`` builds a Python value, not a tensor: a comprehension, a
    ``.tolist()``/``.item()``/``.numpy()``, the builtin ``list(...)``/``int(...)``... (``builtin``:
    what a name denotes where ``value`` stands)."""
    # A list or tuple display may hold tensors (gathered as nested tensors); a comprehension
    # makes one entry per element of what it runs over.
    if isinstance(value, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
        return True
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _PYTHON_VALUE_METHODS:
            return True
        return builtin(func) in _PYTHON_VALUE_BUILTINS
    return False


def forward_python_outputs(class_def: cst.ClassDef, builtin: BuiltinOf) -> frozenset[int]:
    """Positions of what a model class's ``forward`` returns that are Python values it made
    (``decode_lengths = (caption_lengths - 1).tolist()`` ... ``return scores, decode_lengths``:
    {1}; -1 for the only output); empty for a class without such outputs. ``builtin``: what a
    name denotes inside ``forward``."""
    forward = next((method for method in class_methods(class_def) if method.name.value == "forward"), None)
    if forward is None:
        return frozenset()
    return _returned_positions(forward, lambda value: python_value(value, builtin))


def concatenated_rows(
    function: cst.FunctionDef, qualified: Callable[[cst.BaseExpression], str | None]
) -> frozenset[int]:
    """Positions of what a collate function returns that join the samples' own rows
    (``bb_targets = torch.cat(bb_targets, 0)`` ... ``return paths, imgs, bb_targets``: {2}; -1 for
    the only output): a detector's boxes, a varying number of rows per sample, so a row is not a
    sample. A join of one row per sample (``torch.cat([x.unsqueeze(0) for x in xs])``) is a
    stack, not counted. ``qualified``: the qualified name of a callee inside ``function``."""

    def joins_rows(value: cst.BaseExpression) -> bool:
        if not (isinstance(value, cst.Call) and value.args and qualified(value.func) in ROW_JOINS):
            return False
        joined = value.args[0].value
        return not (isinstance(joined, (cst.ListComp, cst.GeneratorExp)) and _one_row(joined.elt))

    return _returned_positions(function, joins_rows)


def _returned_positions(function: cst.FunctionDef, made: Callable[[cst.BaseExpression], bool]) -> frozenset[int]:
    """Positions in the tuples ``function`` returns of the values ``made`` accepts, written there
    or bound to a name by an assignment whose value it accepts (-1: the only output)."""
    inside = nodes_in(function)
    bound = {
        name
        for found in inside
        if isinstance(found, cst.Assign) and made(found.value)
        for target in found.targets
        for name in target_names(target.target)
    }

    def accepted(value: cst.BaseExpression) -> bool:
        return (isinstance(value, cst.Name) and value.value in bound) or made(value)

    positions: set[int] = set()
    for found in inside:
        if not isinstance(found, cst.Return) or found.value is None:
            continue
        if isinstance(found.value, cst.Tuple):
            positions.update(i for i, element in enumerate(found.value.elements) if accepted(element.value))
        elif accepted(found.value):
            positions.add(-1)
    return frozenset(positions)


def _one_row(value: cst.BaseExpression) -> bool:
    """``x.unsqueeze(0)`` or ``x[None]``: one sample made a row of its own."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "unsqueeze":
        return bool(value.args) and isinstance(value.args[0].value, cst.Integer) and value.args[0].value.value == "0"
    return (
        isinstance(value, cst.Subscript)
        and isinstance(value.slice[0].slice, cst.Index)
        and isinstance(value.slice[0].slice.value, cst.Name)
        and value.slice[0].slice.value.value == "None"
    )
