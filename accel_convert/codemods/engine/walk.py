"""A read-only walk over a libcst tree that calls a ``CSTVisitor``'s methods as ``node.visit`` does.

Why not ``node.visit(visitor)``: libcst rebuilds every node it walks, even for a visitor that
cannot change anything (each ``_visit_and_replace_children`` constructs and validates a copy), and
calls two attribute hooks per field through string-built ``getattr``. For the analysis, which
walks the whole module, that machinery cost as much as parsing the file. This walk reads the
children straight off the nodes' fields, in the order libcst visits them (so in source order, which
the analysis relies on), and looks the per-field hooks up once per visitor class and node type.

Only for visitors (``on_visit``/``on_leave`` and ``visit_<Node>``/``leave_<Node>`` methods,
including ``visit_<Node>_<field>`` hooks); transformers still go through libcst.

The walk does not enter :data:`TRIVIA` — whitespace, comments, newlines, punctuation and operator
tokens — unless the visitor class has a ``visit_``/``leave_`` method for one of those types. They
are about half of a module's nodes and no analysis reads them (an operator is read off its parent,
``node.operator``); a visitor that overrides ``on_visit`` to see every node must use ``node.visit``.

A visitor that only needs the nodes of some types in visiting order (the analysis wants every
statement and call) names them in a ``collected_types`` class attribute and gets them appended to
its ``collected`` list: cheaper than overriding ``on_visit``, which costs a dispatch per node.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import fields
from operator import attrgetter
from typing import Any

import libcst as cst

#: (field name, field visit hook name or None, field leave hook name or None) per field.
_Fields = tuple[tuple[str, "str | None", "str | None"], ...]
#: How to enter and leave one node type with one visitor class: the class's own
#: ``visit_<Node>``/``leave_<Node>`` functions (None: it has none), or :data:`_DISPATCH` when the
#: visitor overrides ``on_visit``/``on_leave`` and must be called through them; then the fields, and
#: whether to append the node to ``visitor.collected``; last, where no field has a hook, a reader
#: of every field's value at once (see :func:`_fields_reader`), else None.
_Plan = tuple[object, object, _Fields, bool, "Callable[[cst.CSTNode], tuple[Any, ...]] | None"]
_DISPATCH = object()


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Visit ``node`` and everything below it (but :data:`TRIVIA`) with ``visitor``, without
    copying the tree."""
    visitor_type = type(visitor)
    plans = _plans.get(visitor_type)
    if plans is None:
        plans = _plans[visitor_type] = {}
    _walk(node, visitor, plans, _node_types_walked(visitor_type))


def _walk(node: cst.CSTNode, visitor: cst.CSTVisitor, plans: dict[type, _Plan], walked: frozenset[type]) -> None:
    plan = plans.get(type(node))
    if plan is None:
        plan = plans[type(node)] = _make_plan(type(visitor), node)
    enter, leave, fields, collect, read = plan
    if collect:
        visitor.collected.append(node)  # type: ignore[attr-defined]
    if enter is _DISPATCH:
        descend = visitor.on_visit(node)
    else:
        descend = enter is None or enter(visitor, node) is not False  # type: ignore[operator]
    if descend:
        if read is not None:
            for value in read(node):
                kind = type(value)
                if kind in walked:
                    _walk(value, visitor, plans, walked)
                elif kind is tuple or kind is list:
                    for child in value:
                        if type(child) in walked:
                            _walk(child, visitor, plans, walked)
        else:
            _walk_fields(node, visitor, plans, walked, fields)
    if leave is _DISPATCH:
        visitor.on_leave(node)
    elif leave is not None:
        leave(visitor, node)  # type: ignore[operator]


def _walk_fields(
    node: cst.CSTNode, visitor: cst.CSTVisitor, plans: dict[type, _Plan], walked: frozenset[type], fields: _Fields
) -> None:
    """The children of ``node``, field by field, with the visitor's per-field hooks."""
    for name, visit_hook, leave_hook in fields:
        if visit_hook is not None:
            getattr(visitor, visit_hook)(node)
        value = getattr(node, name)
        for child in value if type(value) is tuple or type(value) is list else (value,):
            if type(child) in walked:
                _walk(child, visitor, plans, walked)
        if leave_hook is not None:
            getattr(visitor, leave_hook)(node)


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of ``node`` that libcst visits, in its order, but :data:`TRIVIA`."""
    read = _child_readers.get(type(node))
    if read is None:
        read = _child_reader(node)
    found = []
    for value in read(node):
        kind = type(value)
        if kind in SUBSTANCE:
            found.append(value)
        elif kind is tuple or kind is list:
            found.extend([child for child in value if type(child) in SUBSTANCE])
    return found


#: Node class → a function giving the values of the fields :func:`child_nodes` reads, as a tuple:
#: one ``attrgetter`` call reads them all in C (a ``getattr`` per field was a third of the walks'
#: time). Built once per class; libcst's node classes are fixed.
_child_readers: dict[type, Callable[[cst.CSTNode], tuple[Any, ...]]] = {}


def _child_reader(node: cst.CSTNode) -> Callable[[cst.CSTNode], tuple[Any, ...]]:
    read = _child_readers[type(node)] = _fields_reader(_child_fields(node))
    return read


def _fields_reader(names: tuple[str, ...]) -> Callable[[cst.CSTNode], tuple[Any, ...]]:
    """A function giving the values of the fields ``names`` of a node, as a tuple."""
    if not names:
        return _no_fields
    if len(names) == 1:
        return _single_field(attrgetter(names[0]))
    return attrgetter(*names)


def _no_fields(node: cst.CSTNode) -> tuple[Any, ...]:
    return ()


def _single_field(get: Callable[[cst.CSTNode], Any]) -> Callable[[cst.CSTNode], tuple[Any, ...]]:
    """A reader of one field that gives a tuple, as ``attrgetter`` of several names does."""
    return lambda node: (get(node),)


#: The last module :func:`module_nodes` listed, and its nodes.
_listed: tuple[cst.Module, tuple[cst.CSTNode, ...]] | None = None


def module_nodes(module: cst.Module) -> tuple[cst.CSTNode, ...]:
    """Every node of ``module`` but :data:`TRIVIA`, in the order ``syntax.nodes_in`` gives.

    Several rules read the whole file, and a rule that changes nothing hands the next one the
    very same tree: the list made for the last module asked about is kept (with that module, so
    its identity cannot be reused) and serves every rule until one rewrites the tree.
    """
    global _listed
    if _listed is None or _listed[0] is not module:
        found: list[cst.CSTNode] = []
        pending: list[cst.CSTNode] = [module]
        while pending:
            current = pending.pop()
            found.append(current)
            pending.extend(child_nodes(current))
        _listed = (module, tuple(found))
    return _listed[1]


def concrete_subclasses(*bases: type) -> frozenset[type]:
    """Every class deriving from ``bases`` (``bases`` included): a set lookup on ``type(node)``
    is several times cheaper than ``isinstance`` against libcst's abstract base classes."""
    found: set[type] = set()
    seen: set[type] = set()
    pending = list(bases)
    while pending:
        kind = pending.pop()
        if kind not in seen:
            seen.add(kind)
            if getattr(sys.modules[kind.__module__], kind.__name__, None) is kind:
                found.add(kind)
            # else: the stale twin of a class libcst's slots decorator replaced (it stays a
            # subclass of the base while alive); no node is ever one.
            pending.extend(kind.__subclasses__())
    return frozenset(found)


NODE_TYPES = concrete_subclasses(cst.CSTNode)

#: Node types that only carry layout or a fixed token: what the walk skips (see the module doc).
TRIVIA = concrete_subclasses(
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.ImportStar,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Asynchronous,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
)
#: What the walks enter by default: every node type but the trivia.
SUBSTANCE = NODE_TYPES - TRIVIA
_TRIVIA_NAMES = frozenset(kind.__name__ for kind in TRIVIA)

#: Visitor class → node class → plan.
_plans: dict[type, dict[type, _Plan]] = {}
_walked_types: dict[type, frozenset[type]] = {}


def _make_plan(visitor_type: type[cst.CSTVisitor], node: cst.CSTNode) -> _Plan:
    if (
        visitor_type.on_visit_attribute is not cst.CSTVisitor.on_visit_attribute
        or visitor_type.on_leave_attribute is not cst.CSTVisitor.on_leave_attribute
    ):
        raise TypeError(f"{visitor_type.__name__} overrides the attribute hooks: use node.visit")
    kind = type(node).__name__
    plan = []
    every_field = _node_types_walked(visitor_type) is NODE_TYPES
    field_hooked = kind in _field_hooked_names(visitor_type)
    for name in _child_fields(node, with_trivia=every_field):
        visit_hook, leave_hook = f"visit_{kind}_{name}", f"leave_{kind}_{name}"
        plan.append(
            (
                name,
                visit_hook if field_hooked and _own_method(visitor_type, visit_hook) else None,
                leave_hook if field_hooked and _own_method(visitor_type, leave_hook) else None,
            )
        )
    enter: object = _DISPATCH
    if visitor_type.on_visit is cst.CSTVisitor.on_visit:
        enter = _own_method(visitor_type, f"visit_{kind}")
    leave: object = _DISPATCH
    if visitor_type.on_leave is cst.CSTVisitor.on_leave:
        leave = _own_method(visitor_type, f"leave_{kind}")
    collect = type(node) in getattr(visitor_type, "collected_types", ())
    hooked = any(visit_hook or leave_hook for _, visit_hook, leave_hook in plan)
    read = None if hooked else _fields_reader(tuple(name for name, _, _ in plan))
    return enter, leave, tuple(plan), collect, read


def _node_types_walked(visitor_type: type) -> frozenset[type]:
    """Every node type but the trivia, unless the visitor has a method for a trivia type; of
    those, only the types under which a node the visitor has a hook for can stand (a visitor of
    statements never enters an expression), unless it is called for every node (``on_visit``)."""
    walked = _walked_types.get(visitor_type)
    if walked is None:
        if wants_trivia(visitor_type):
            walked = NODE_TYPES
        elif _dispatches_every_node(visitor_type):
            walked = SUBSTANCE
        else:
            walked = types_leading_to(hooked_types(visitor_type) | set(getattr(visitor_type, "collected_types", ())))
        _walked_types[visitor_type] = walked
    return walked


def wants_trivia(visitor_type: type) -> bool:
    """Whether a visitor or transformer has a ``visit_``/``leave_`` method for a :data:`TRIVIA`
    type (``visit_Comma``), which a walk that skips them would never call."""
    return any(name.partition("_")[2] in _TRIVIA_NAMES for name in own_hooks(visitor_type))


def _field_hooked_names(visitor_type: type) -> frozenset[str]:
    """The names of the node types a visitor has a per-field hook for (``visit_Call_func``:
    ``"Call"``); a plan for any other type looks no field hook up."""
    names = _field_hooked_by_type.get(visitor_type)
    if names is None:
        names = _field_hooked_by_type[visitor_type] = frozenset(
            name.split("_")[1] for name in own_hooks(visitor_type) if name.count("_") > 1
        )
    return names


_field_hooked_by_type: dict[type, frozenset[str]] = {}


def _dispatches_every_node(visitor_type: type) -> bool:
    """Whether the visitor overrides ``on_visit`` or ``on_leave``: it is called for every node."""
    return getattr(visitor_type, "on_visit", None) is not cst.CSTVisitor.on_visit or (
        getattr(visitor_type, "on_leave", None) is not cst.CSTVisitor.on_leave
    )


def hooked_types(visitor_type: type) -> frozenset[type]:
    """The node types a visitor or transformer has a ``visit_``/``leave_`` method for (a field
    hook ``visit_Call_func`` counts for ``Call``)."""
    found = set()
    for name in own_hooks(visitor_type):
        kind = getattr(cst, name.split("_")[1], None)
        if isinstance(kind, type) and issubclass(kind, cst.CSTNode):
            found.add(kind)
    return frozenset(found)


def types_leading_to(wanted: AbstractSet[type]) -> frozenset[type]:
    """The substance node types a node of ``wanted`` types can stand under (or be): a walk for
    those types needs to enter no others. Read from the types libcst declares for each field
    (``tests/codemods/test_walk.py`` checks every fixture's tree against them)."""
    return frozenset().union(*(_types_leading_to_one(kind) for kind in wanted if kind in SUBSTANCE))


def _types_leading_to_one(wanted: type) -> frozenset[type]:
    """:func:`types_leading_to` of one substance type, found once per type (the walks of a run
    ask it about the same few dozen types: calls, names, assignments, statements)."""
    found = _leading_to.get(wanted)
    if found is None:
        parents = _parent_types()
        reached = {wanted}
        pending = [wanted]
        while pending:
            for parent in parents.get(pending.pop(), ()):
                if parent not in reached:
                    reached.add(parent)
                    pending.append(parent)
        found = _leading_to[wanted] = frozenset(reached)
    return found


_leading_to: dict[type, frozenset[type]] = {}
_parents: dict[type, set[type]] = {}


def _parent_types() -> dict[type, set[type]]:
    """Node type → the substance types with a field declared to hold it (built once)."""
    if not _parents:
        for kind in SUBSTANCE:
            for child in child_types(kind):
                _parents.setdefault(child, set()).add(kind)
    return _parents


def child_types(kind: type) -> frozenset[type]:
    """The substance node types libcst declares ``kind``'s fields may hold."""
    return frozenset().union(*declared_field_types(kind).values())


_field_types: dict[type, dict[str, frozenset[type]]] = {}


def declared_field_types(kind: type) -> dict[str, frozenset[type]]:
    """Field name → the substance node types libcst declares the field of ``kind`` may hold
    (empty for a ``str``, a ``Literal`` or a field of trivia only: ``Call.lpar``)."""
    known = _field_types.get(kind)
    if known is None:
        namespace = vars(sys.modules[kind.__module__])
        known = _field_types[kind] = {each.name: _declared_node_types(each.type, namespace) for each in fields(kind)}
    return known


def _declared_node_types(annotation: object, namespace: dict[str, Any]) -> frozenset[type]:
    if isinstance(annotation, typing.ForwardRef):
        annotation = annotation.__forward_arg__
    if isinstance(annotation, str):
        annotation = namespace.get(annotation, Any)
    if isinstance(annotation, type):
        return _substance_under().get(annotation, frozenset())
    if typing.get_origin(annotation) is typing.Literal:
        return frozenset()
    arguments = typing.get_args(annotation)
    if not arguments:
        return SUBSTANCE  # a form this reading does not know: anything, to be safe
    found: set[type] = set()
    for argument in arguments:
        found |= _declared_node_types(argument, namespace)
    return frozenset(found)


_under: dict[type, frozenset[type]] = {}


def _substance_under() -> dict[type, frozenset[type]]:
    """Class → the substance node types deriving from it (itself included)."""
    if not _under:
        grouped: dict[type, set[type]] = {}
        for kind in SUBSTANCE:
            for ancestor in kind.__mro__:
                grouped.setdefault(ancestor, set()).add(kind)
        _under.update((ancestor, frozenset(kinds)) for ancestor, kinds in grouped.items())
    return _under


def _own_method(visitor_type: type, name: str) -> Callable[..., Any] | None:
    """The visitor's method ``name``, or None where it is only libcst's empty stub (CSTVisitor
    declares a no-op for every node and field: calling them was half of a walk's time)."""
    return own_hooks(visitor_type).get(name)


_own_hooks_by_type: dict[type, dict[str, Callable[..., Any]]] = {}


def own_hooks(visitor_type: type) -> dict[str, Callable[..., Any]]:
    """A visitor's or transformer's own ``visit_``/``leave_`` methods, by name: read once per
    class from the dictionaries of its classes outside libcst (libcst's own classes hold only the
    no-op stubs it declares for every node and field; asking ``getattr`` name by name found one
    of those for almost every hook a plan might use)."""
    hooks = _own_hooks_by_type.get(visitor_type)
    if hooks is None:
        names = {
            name
            for klass in visitor_type.__mro__
            if not klass.__module__.startswith("libcst")
            for name in vars(klass)
            if name.startswith(("visit_", "leave_"))
        }
        hooks = _own_hooks_by_type[visitor_type] = {name: getattr(visitor_type, name) for name in names}
    return hooks


_child_field_order: dict[type, tuple[str, ...]] = {}
_substance_field_order: dict[type, tuple[str, ...]] = {}


def _child_fields(node: cst.CSTNode, *, with_trivia: bool = False) -> tuple[str, ...]:
    """The fields libcst visits for ``node``'s class, in its order: learned from the first node of
    the class seen (the order is fixed per class). Without ``with_trivia``, only those whose
    declared type can hold a node that is not :data:`TRIVIA` (``Call.lpar`` and
    ``Call.whitespace_after_func`` never can: the walks that skip trivia never read them)."""
    kind = type(node)
    order = _substance_field_order.get(kind) if not with_trivia else _child_field_order.get(kind)
    if order is not None:
        return order
    every = _child_field_order.get(kind)
    if every is None:
        recorder = _FieldOrder(node)
        node._visit_and_replace_children(recorder)  # noqa: SLF001 - the order lives only there
        # A field libcst skips when it is None (an f-string's format spec) is missed when the
        # first node seen has none; such fields come last in source order, so they go last.
        missing = [field.name for field in fields(node) if field.name not in recorder.fields]
        every = _child_field_order[kind] = (*recorder.fields, *missing)
    declared = declared_field_types(kind)
    # A field this reading has no type for (none so far) is walked, to be safe.
    _substance_field_order[kind] = tuple(name for name in every if declared.get(name, SUBSTANCE))
    return every if with_trivia else _substance_field_order[kind]


class _FieldOrder(cst.CSTVisitor):
    """Records which fields of one node libcst visits, in order, without descending."""

    def __init__(self, node: cst.CSTNode) -> None:
        super().__init__()
        self.node = node
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if node is self.node:
            self.fields.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


class StatementFilter(cst.CSTVisitor):
    """A read-only visitor (for :func:`walk`) that enters only the statements
    :meth:`enters_statement` accepts: one hook per kind of statement, so the walk calls nothing
    for the other nodes (an ``on_visit`` override would be called for every node). Subclasses
    with their own hook for a statement kind call ``super()``'s."""

    def enters_statement(self, node: cst.CSTNode) -> bool:
        return True

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return self.enters_statement(node)

    def visit_If(self, node: cst.If) -> bool:
        return self.enters_statement(node)

    def visit_For(self, node: cst.For) -> bool:
        return self.enters_statement(node)

    def visit_While(self, node: cst.While) -> bool:
        return self.enters_statement(node)

    def visit_With(self, node: cst.With) -> bool:
        return self.enters_statement(node)

    def visit_Try(self, node: cst.Try) -> bool:
        return self.enters_statement(node)

    def visit_TryStar(self, node: cst.TryStar) -> bool:
        return self.enters_statement(node)

    def visit_Match(self, node: cst.Match) -> bool:
        return self.enters_statement(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return self.enters_statement(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.enters_statement(node)


def variables_read(*nodes: cst.CSTNode) -> set[str]:
    """Every variable name used inside ``nodes`` (an attribute name after a dot is not a variable:
    ``args.batch_size`` reads ``args``)."""
    return _names_in(nodes, attribute_names=False)


def identifiers(*nodes: cst.CSTNode) -> set[str]:
    """Every name inside ``nodes``, attribute names after a dot included (``args.amp`` gives
    ``args`` and ``amp``): the words ``ScriptFacts.lines_mentioning`` looks up."""
    return _names_in(nodes, attribute_names=True)


def _names_in(nodes: tuple[cst.CSTNode, ...], *, attribute_names: bool) -> set[str]:
    reader = _NameReader(attribute_names)
    for node in nodes:
        walk(node, reader)
    return reader.names


class _NameReader(cst.CSTVisitor):
    def __init__(self, attribute_names: bool) -> None:
        self.names: set[str] = set()
        self.attribute_names = attribute_names

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if self.attribute_names:
            return True
        walk(node.value, self)
        return False
