"""``@record()``: a dataclass whose methods are closures, not code compiled when the class is made.

Why: ``dataclasses.dataclass`` writes each method it adds (``__init__``, ``__eq__``, ``__repr__``,
``__hash__``, a frozen class's ``__setattr__`` and ``__delattr__``) as Python source and compiles
it with ``exec`` when the class is made, about 0.1 ms a method: for the converter's and the rules'
classes, 35–45 ms of a one-file run's ~90 ms of imports (``benchmarks/README.md``, issue 41). A
record is made by ``dataclass`` itself with those methods switched off (so ``fields``,
``replace``, ``asdict``, ``is_dataclass``, defaults and ``kw_only`` are the standard library's),
then given the same methods as closures over the field names, which cost nothing to make.

What each does is what ``dataclass`` would generate for the same flags: ``__init__`` takes the
fields in order (``kw_only`` ones by keyword only), fills defaults and default factories and
refuses missing, repeated and unknown arguments with a ``TypeError``; a ``frozen`` record assigns
through ``object.__setattr__`` and refuses assignment and deletion with ``FrozenInstanceError``;
``eq`` compares the fields (``compare=True``) as a tuple, only with an instance of the same class,
and gives a frozen record the hash of that tuple (a mutable one none); ``repr`` names the class
and the ``repr=True`` fields. A method the class writes itself is kept, as ``dataclass`` keeps
it. ``tests/codemods/test_records.py`` holds each to what ``dataclass`` makes.

Left to ``dataclass``: what records do not need (``order``, ``slots``, ``InitVar``,
``__post_init__``, fields with ``init=False``, bases made by ``dataclass``), refused when the class
is made; a record may derive from records (frozen from frozen ones only, as ``dataclass`` says).
The one cost: an ``__init__`` that is not compiled for its fields takes ~1 µs a field more per
instance, so the classes made thousands of times a conversion (``Site``, the recorder's call
records) stay plain dataclasses.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
elif sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10: the marker is for type checkers only

    def dataclass_transform(**_: object) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return lambda decorator: decorator


__all__ = ["record"]

T = TypeVar("T", bound=type)

#: Every record class → whether it is frozen (what ``__dataclass_params__`` would say: the
#: standard library's part of a record is made unfrozen, with no methods).
_FROZEN: WeakKeyDictionary[type, bool] = WeakKeyDictionary()


@dataclass_transform(field_specifiers=(dataclasses.field, Field))
def record(*, frozen: bool = False, eq: bool = True, repr: bool = True) -> Callable[[T], T]:
    """``@record(frozen=..., eq=..., repr=...)``: as ``@dataclass`` with the same flags (module
    docstring)."""

    def make(cls: T) -> T:
        return _made(cls, frozen=frozen, eq=eq, repr=repr)

    return make


def _made(cls: T, *, frozen: bool, eq: bool, repr: bool) -> T:
    for refused in ("__post_init__", "__slots__"):
        if refused in cls.__dict__:
            raise TypeError(f"{cls.__qualname__}: a record has no {refused} (use dataclass)")
    for base in cls.__mro__[1:]:
        if base in _FROZEN:  # dataclass's rule: frozen classes derive from frozen ones only
            if _FROZEN[base] != frozen:
                kind = "frozen" if frozen else "non-frozen"
                raise TypeError(f"cannot inherit {kind} dataclass from a {'non-' * frozen}frozen one")
        elif dataclasses.is_dataclass(base):
            raise TypeError(f"{cls.__qualname__}: a record derives from records only, not from a dataclass")
    if frozen and ("__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__):
        raise TypeError(f"Cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")
    own_eq = "__eq__" in cls.__dict__
    own_hash = cls.__dict__.get("__hash__", MISSING)
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)  # fields only: nothing compiled (in place)
    made = cls
    fields = dataclasses.fields(made)
    for each in fields:
        if not each.init:
            raise TypeError(f"{cls.__qualname__}.{each.name}: a record's fields are all arguments (use dataclass)")
    _add(made, "__init__", _initialiser(made, fields, frozen))
    if repr:
        _add(made, "__repr__", _representer(made, tuple(each.name for each in fields if each.repr)))
    if eq:
        compared = tuple(each.name for each in fields if each.compare)
        _add(made, "__eq__", _comparer(made, compared))
        # dataclass's rule for __hash__ (eq without unsafe_hash): a hash the class writes is
        # kept; otherwise a frozen record hashes its hashed fields and a mutable one has none.
        explicit = not (own_hash is MISSING or (own_hash is None and own_eq))
        if not explicit:
            if frozen:
                hashed = tuple(each.name for each in fields if (each.compare if each.hash is None else each.hash))
                setattr(made, "__hash__", _hasher(made, hashed))  # noqa: B010 - a method of the class mypy would refuse
            else:
                setattr(made, "__hash__", None)  # noqa: B010
    _FROZEN[made] = frozen
    if frozen:
        names = frozenset(each.name for each in fields)
        setattr(made, "__setattr__", _frozen_setter(made, names))  # noqa: B010
        setattr(made, "__delattr__", _frozen_deleter(made, names))  # noqa: B010
    return made


def _add(cls: type, name: str, method: Callable[..., Any]) -> None:
    """``method`` as ``cls.name`` unless the class writes its own (as ``dataclass`` does)."""
    if name in cls.__dict__:
        return
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, method)


def _initialiser(cls: type, fields: tuple[Field[Any], ...], frozen: bool) -> Callable[..., None]:
    positional = tuple(each.name for each in fields if not each.kw_only)
    order = tuple(each.name for each in fields)
    known = frozenset(order)
    defaults = {each.name: each.default for each in fields if each.default is not MISSING}
    factories = {each.name: each.default_factory for each in fields if each.default_factory is not MISSING}
    seen_default = None
    for name in positional:  # dataclass refuses the same signature
        if name in defaults or name in factories:
            seen_default = name
        elif seen_default is not None:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    set_field = object.__setattr__ if frozen else setattr

    def __init__(self: object, *args: object, **given: object) -> None:
        if len(args) > len(positional):
            raise TypeError(
                f"__init__() takes {len(positional) + 1} positional arguments but {len(args) + 1} were given"
            )
        for name, value in zip(positional, args):
            if name in given:
                raise TypeError(f"__init__() got multiple values for argument {name!r}")
            given[name] = value
        if not known.issuperset(given):
            unknown = next(name for name in given if name not in known)
            raise TypeError(f"__init__() got an unexpected keyword argument {unknown!r}")
        for name in order:
            if name in given:
                value = given[name]
            elif name in defaults:
                value = defaults[name]
            elif name in factories:
                value = factories[name]()
            else:
                raise TypeError(f"__init__() missing 1 required argument: {name!r}")
            set_field(self, name, value)

    return __init__


def _values(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    """The tuple of ``names``' values of an instance (``attrgetter`` gives a bare value for one)."""
    if len(names) == 1:
        (name,) = names
        return lambda instance: (getattr(instance, name),)
    if not names:
        return lambda instance: ()
    return attrgetter(*names)


def _comparer(cls: type, names: tuple[str, ...]) -> Callable[[object, object], object]:
    values = _values(names)

    def __eq__(self: object, other: object) -> object:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hasher(cls: type, names: tuple[str, ...]) -> Callable[[object], int]:
    values = _values(names)

    def __hash__(self: object) -> int:
        return hash(values(self))

    __hash__.__qualname__ = f"{cls.__qualname__}.__hash__"
    return __hash__


def _representer(cls: type, names: tuple[str, ...]) -> Callable[[object], str]:
    """``Class(a=1, b='x')``; an instance met again inside its own repr is ``...`` (as
    ``dataclass``'s ``reprlib.recursive_repr``)."""
    running: set[tuple[int, int]] = set()

    def __repr__(self: object) -> str:
        key = (id(self), threading.get_ident())
        if key in running:
            return "..."
        running.add(key)
        try:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        finally:
            running.discard(key)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _frozen_setter(cls: type, names: frozenset[str]) -> Callable[[object, str, object], None]:
    def __setattr__(self: object, name: str, value: object) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

    __setattr__.__qualname__ = f"{cls.__qualname__}.__setattr__"
    return __setattr__


def _frozen_deleter(cls: type, names: frozenset[str]) -> Callable[[object, str], None]:
    def __delattr__(self: object, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]

    __delattr__.__qualname__ = f"{cls.__qualname__}.__delattr__"
    return __delattr__
