"""Beacon values and Python values, both ways, without silent conversion.

| Beacon | Python |
| --- | --- |
| null | ``None`` |
| bool | ``bool`` |
| int (64-bit signed) | ``int`` within ``[-2**63, 2**63)`` |
| double | ``float`` |
| string | ``str`` |
| bytes | ``bytes`` |
| list | ``list`` |
| map (string keys) | ``dict`` with ``str`` keys |

Anything else — an ``int`` out of range, a dict with a key that is not a string, a ``tuple``, a
``bytearray`` or ``memoryview``, a set, a ``Decimal`` — is refused with :class:`TypeError` or
:class:`ValueError` instead of being converted: every value written reads back as what it was.
"""

from __future__ import annotations

from typing import Any, Dict, List, Union

from . import beacon_pb2 as pb

#: A Beacon value as Python holds it.
Value = Union[None, bool, int, float, str, bytes, List["Value"], Dict[str, "Value"]]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def to_wire(value: object, _depth: int = 0) -> pb.Value:
    """The ``beacon.v1.Value`` for a Python value."""
    if _depth > 100:
        raise ValueError("value nests more than 100 levels deep")
    wire = pb.Value()
    if value is None:
        wire.null_value = pb.NULL_VALUE
    elif isinstance(value, bool):
        wire.bool_value = value
    elif isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{value} does not fit Beacon's 64-bit integer")
        wire.int_value = value
    elif isinstance(value, float):
        wire.double_value = value
    elif isinstance(value, str):
        wire.string_value = value
    elif isinstance(value, bytes):
        wire.bytes_value = value
    elif isinstance(value, list):
        wire.list_value.SetInParent()
        for item in value:
            wire.list_value.items.append(to_wire(item, _depth + 1))
    elif isinstance(value, dict):
        wire.map_value.SetInParent()
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"a Beacon map's keys are strings, not {type(key).__name__} ({key!r})")
            wire.map_value.entries[key].CopyFrom(to_wire(item, _depth + 1))
    else:
        hint = {"tuple": ": write list(...)", "bytearray": ": write bytes(...)", "memoryview": ": write bytes(...)"}.get(type(value).__name__, "")
        raise TypeError(f"{type(value).__name__} is not a Beacon value (None, bool, int, float, str, bytes, list, dict){hint}")
    return wire


def from_wire(wire: pb.Value) -> Any:
    """The Python value of a ``beacon.v1.Value`` (a :data:`Value`, typed ``Any`` as ``json.loads`` is)."""
    kind = wire.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind == "bool_value":
        return wire.bool_value
    if kind == "int_value":
        return wire.int_value
    if kind == "double_value":
        return wire.double_value
    if kind == "string_value":
        return wire.string_value
    if kind == "bytes_value":
        return wire.bytes_value
    if kind == "list_value":
        return [from_wire(item) for item in wire.list_value.items]
    if kind == "map_value":
        return {key: from_wire(item) for key, item in wire.map_value.entries.items()}
    raise ValueError("a Beacon value with no kind set")
