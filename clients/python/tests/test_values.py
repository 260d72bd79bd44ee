"""Every Beacon type both ways, and what is refused instead of converted."""

import math
from typing import Any, List, Type

import pytest

from beacon_signals import from_wire, to_wire
from beacon_signals import beacon_pb2 as pb

VALUES: List[Any] = [
    None, True, False, 0, -1, (1 << 63) - 1, -(1 << 63), 0.0, -0.0, 1.0, 1e300, float("inf"), float("-inf"),
    "", "text", "ünï©ødé ✓", b"", b"\x00\xff", [], [1, 1.0, "1", b"1", None, [True]], {}, {"a": {"b": [1, {"c": None}]}},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_type_round_trips_and_keeps_its_kind(value: Any) -> None:
    wire = to_wire(value)
    back = from_wire(pb.Value.FromString(wire.SerializeToString()))
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_round_trips() -> None:
    assert math.isnan(from_wire(to_wire(float("nan"))))


def test_ints_and_floats_stay_apart_inside_lists_and_maps() -> None:
    back = from_wire(to_wire({"i": [1], "f": [1.0]}))
    assert type(back["i"][0]) is int and type(back["f"][0]) is float


@pytest.mark.parametrize("value", [(1, 2), bytearray(b"ab"), memoryview(b"ab"), [1, (2,)], {"k": bytearray(b"x")}])
def test_tuples_bytearrays_and_memoryviews_are_refused_not_converted(value: Any) -> None:
    with pytest.raises(TypeError, match="list|bytes"):
        to_wire(value)


@pytest.mark.parametrize("value, error", [
    (1 << 63, ValueError), (-(1 << 63) - 1, ValueError), ({1: "a"}, TypeError), ({"a": {2: 1}}, TypeError),
    ({1, 2}, TypeError), (object(), TypeError), (1j, TypeError),
])
def test_what_does_not_fit_is_refused_not_converted(value: Any, error: Type[Exception]) -> None:
    with pytest.raises(error):
        to_wire(value)


def test_a_value_with_no_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        from_wire(pb.Value())
