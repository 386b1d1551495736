"""``@record`` makes the classes ``@dataclass`` makes, with the methods as closures: the same class
declared both ways behaves the same (construction and its refusals, equality, hashing, repr,
frozenness, ``fields``, ``replace``, pickling), and what a record does not take is refused."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest

from accel_convert.records import record


def pair(**flags: Any) -> tuple[type, type]:
    """The same class made by ``dataclass`` and by ``record`` with ``flags``."""

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {"a": "int", "b": "str", "c": "int", "d": "list[int]", "e": "int | None"},
            "__module__": __name__,
            "__doc__": "A class.",
            "c": 3,
            "d": field(default_factory=list),
            "e": field(default=None, kw_only=True, compare=False, repr=False),
        }

    return dataclass(**flags)(type("Made", (), body())), record(**flags)(type("Made", (), body()))


FLAGS = [{}, {"frozen": True}, {"eq": False, "repr": False}, {"frozen": True, "eq": False, "repr": False}]
CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1, "x"), {}),
    ((1,), {"b": "y", "c": 4}),
    ((), {"a": 1, "b": "x", "d": [2], "e": 5}),
    ((1, "x", 3, [1]), {"e": None}),
    # refused alike
    ((), {"a": 1}),
    ((1, "x", 3, [], 5), {}),
    ((1, "x"), {"a": 2}),
    ((1, "x"), {"f": 2}),
]


def outcome(make: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    try:
        made = make(*args, **kwargs)
    except TypeError:
        return TypeError
    return [getattr(made, name) for name in ("a", "b", "c", "d", "e")], sorted(vars(made))


@pytest.mark.parametrize("flags", FLAGS)
def test_records_are_built_as_dataclasses_are(flags: dict[str, Any]) -> None:
    standard, own = pair(**flags)
    for args, kwargs in CALLS:
        assert outcome(own, args, kwargs) == outcome(standard, args, kwargs), (args, kwargs)
    assert [(each.name, each.default, each.kw_only) for each in dataclasses.fields(own)] == [
        (each.name, each.default, each.kw_only) for each in dataclasses.fields(standard)
    ]
    assert own.__match_args__ == standard.__match_args__  # type: ignore[attr-defined]
    assert dataclasses.is_dataclass(own)


@pytest.mark.parametrize("flags", FLAGS)
def test_records_compare_hash_and_show_as_dataclasses_do(flags: dict[str, Any]) -> None:
    standard, own = pair(**flags)
    for make in (standard, own):
        make.__qualname__ = "Made"
    values = [((1, "x"), {}), ((1, "x"), {"e": 9}), ((1, "y"), {}), ((1, "x"), {"d": [1]})]
    for left_args, left_kwargs in values:
        for right_args, right_kwargs in values:
            assert (own(*left_args, **left_kwargs) == own(*right_args, **right_kwargs)) == (
                standard(*left_args, **left_kwargs) == standard(*right_args, **right_kwargs)
            )
    assert (own(1, "x") == (1, "x")) is (standard(1, "x") == (1, "x")) is False
    assert repr(own(1, "x")).split(".")[-1] == repr(standard(1, "x")).split(".")[-1]
    assert (own.__hash__ is None) == (standard.__hash__ is None)
    if own.__hash__ is not None and flags.get("eq", True):
        assert hash(own(1, "x", d=())) == hash(standard(1, "x", d=()))  # type: ignore[arg-type]
        assert hash(own(1, "x", d=(), e=1)) == hash(own(1, "x", d=(), e=2))  # type: ignore[arg-type]


@pytest.mark.parametrize("flags", FLAGS)
def test_frozen_records_refuse_changes_as_dataclasses_do(flags: dict[str, Any]) -> None:
    standard, own = pair(**flags)
    for make in (standard, own):
        made = make(1, "x")
        if flags.get("frozen"):
            with pytest.raises(FrozenInstanceError, match="cannot assign to field 'a'"):
                made.a = 2
            with pytest.raises(FrozenInstanceError, match="cannot assign to field 'z'"):
                made.z = 2
            with pytest.raises(FrozenInstanceError, match="cannot delete field 'a'"):
                del made.a
        else:
            made.a = 2
            assert made.a == 2
        assert dataclasses.replace(made, b="y").b == "y"
        assert vars(copy.deepcopy(made)) == vars(made)


@record(frozen=True)
class Sent:
    """A record sent to another process (``--jobs``): pickled and read back."""

    a: int
    b: tuple[str, ...] = ()


def test_records_travel_between_processes() -> None:
    sent = Sent(1, ("x",))
    assert pickle.loads(pickle.dumps(sent)) == sent
    assert vars(pickle.loads(pickle.dumps(sent))) == {"a": 1, "b": ("x",)}


def test_a_subclass_of_a_frozen_record_keeps_its_fields_and_may_add_attributes() -> None:
    @record(frozen=True, eq=False, repr=False)
    class Base:
        a: int

    class Child(Base):
        pass

    child = Child(1)
    child.extra = 2  # type: ignore[attr-defined]
    assert child.extra == 2  # type: ignore[attr-defined]
    with pytest.raises(FrozenInstanceError):
        child.a = 3  # type: ignore[misc]


def test_records_derive_from_records_as_dataclasses_do() -> None:
    @record(frozen=True)
    class Base:
        a: int
        b: int = 0

    @record(frozen=True)
    class Derived(Base):
        c: int = 1

    assert [each.name for each in dataclasses.fields(Derived)] == ["a", "b", "c"]
    assert vars(Derived(1, c=2)) == {"a": 1, "b": 0, "c": 2}
    assert Derived(1) != Base(1) and Derived(1) == Derived(1)
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):

        @record()
        class Thawed(Base):
            c: int = 1


def test_methods_the_class_writes_are_kept() -> None:
    @record(frozen=True)
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert repr(Own(1)) == "own" and Own(1) == Own(2) and hash(Own(1)) == 7
    assert Own.__init__.__qualname__.endswith("Own.__init__")


def test_what_a_record_does_not_take_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @record()
        class Order:
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="__post_init__"):

        @record()
        class Post:
            a: int

            def __post_init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="all arguments"):

        @record()
        class Hidden:
            a: int = field(init=False, default=0)

    @dataclass
    class Standard:
        a: int

    with pytest.raises(TypeError, match="not from a dataclass"):

        @record()
        class Derived(Standard):
            b: int
