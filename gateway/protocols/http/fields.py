"""Type checks for the fields of V2 JSON bodies; each failure is a 400 naming the field.

A field that is optional may be absent or null; otherwise it must have its type. Values
are quoted through `brief`, which bounds their size and nesting, because a client's value
can be megabytes long or nested a thousand levels deep (where `repr` would recurse).
"""

from __future__ import annotations

import reprlib
from typing import Any

from accel_base.errors import InvalidArgument


class _Brief(reprlib.Repr):
    """reprlib with small limits, and integers too long for int->str shown by size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict = 3, 6, 6
        self.maxstring = self.maxother = self.maxlong = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 1000:  # Python refuses int->str past 4300 digits
            return f"of {x.bit_length()} bits"
        return super().repr_int(x, level)


_REPR = _Brief()

JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def brief(value: Any) -> str:
    """A short rendering of a client's value for an error message: its JSON type and a
    truncated form."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    kind = JSON_TYPES.get(type(value), type(value).__name__)
    return f"{kind} {_REPR.repr(value)}"


def is_int(value: Any) -> bool:
    """A JSON integer (Python's bool is an int, but JSON's true is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def get_object(container: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """The optional object `container[key]`, {} when absent or null."""
    value = container.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: '{key}' must be a JSON object, got {brief(value)}")
    return value


def get_list(container: dict[str, Any], key: str, where: str, required: bool = False) -> list:
    value = container.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        need = "needs" if value is None else "must have"
        raise InvalidArgument(f"{where} {need} an '{key}' array, got {brief(value)}")
    return value


def get_string(container: dict[str, Any], key: str, where: str, required: bool = True) -> str:
    value = container.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: '{key}' must be a string, got {brief(value)}")
    return value


def get_bool(container: dict[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = container.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidArgument(f"{where}: '{key}' must be true or false, got {brief(value)}")
    return value


def parameters(container: dict[str, Any], where: str) -> dict[str, Any]:
    """The optional 'parameters' object, a copy; V2 parameter values are scalars (string,
    number or boolean), as Triton requires."""
    found = get_object(container, "parameters", where)
    for key, value in found.items():
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise InvalidArgument(
                f"{where}: parameter '{key}' must be a string, number or boolean, "
                f"got {brief(value)}"
            )
    return dict(found)


def check_bool_parameter(params: dict[str, Any], key: str, where: str) -> None:
    value = params.get(key)
    if value is not None and not isinstance(value, bool):
        raise InvalidArgument(
            f"{where}: parameter '{key}' must be true or false, got {brief(value)}"
        )


def non_negative_int(value: Any, what: str) -> int:
    if not is_int(value) or value < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {brief(value)}")
    return value
