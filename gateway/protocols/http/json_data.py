"""JSON tensor data -> numpy arrays, exactly: nothing truncated, wrapped or coerced.

numpy alone would turn 1.5 into 1 for INT32, "7" into 7, true into 1 and null into NaN.
So the leaves' Python types are checked first (one C-level pass, `set(map(type, ...))`),
and numpy converts only values of the right kind, refusing integers out of range.

Integer datatypes take JSON integers only: 2.0 is refused as Triton refuses it, because a
number written with a fraction or an exponent is a float on the client's side (where 1e19
or 2**53 + 1 has already lost digits), and the type mismatch is worth saying.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES, element_count
from accel_base.errors import InvalidArgument
from gateway.protocols.http.fields import brief

_INTEGERS = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")

# Python types of the JSON values each datatype takes, and how the message names them.
_ACCEPTED: dict[str, tuple[frozenset[type], str]] = {
    "BOOL": (frozenset({bool}), "true or false"),
    **{name: (frozenset({int}), "integers") for name in _INTEGERS},
    **{name: (frozenset({int, float}), "numbers") for name in ("FP16", "FP32", "FP64")},
    "BYTES": (frozenset({str}), "strings"),
}


def json_to_array(data: Any, datatype: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    """JSON tensor data (an array, flat or nested, row-major) -> an array of `shape`."""
    if datatype == "BF16":
        raise InvalidArgument(f"{where}: BF16 data can only be sent as binary data")
    if not isinstance(data, list):
        raise InvalidArgument(
            f"{where}: 'data' must be a JSON array (flat or nested, row-major), got {brief(data)}"
        )
    types = set(map(type, data))
    leaves = data
    if list in types:
        leaves = _flatten(data, where)
        types = set(map(type, leaves))
        if list in types:  # numpy stops at 64 dimensions, and at ragged levels
            raise InvalidArgument(
                f"{where}: 'data' is not a regular nested array of at most 64 dimensions"
            )
    expected = element_count(shape)
    if len(leaves) != expected:
        raise InvalidArgument(
            f"{where}: shape {list(shape)} needs {expected} elements, 'data' has {len(leaves)}"
        )
    allowed, wanted = _ACCEPTED[datatype]
    if not types <= allowed:
        position, value = next((i, v) for i, v in enumerate(leaves) if type(v) not in allowed)
        hint = (
            "; write integers without a decimal point or exponent"
            if isinstance(value, float) and wanted == "integers"
            else ""
        )
        raise InvalidArgument(
            f"{where}: {datatype} data must be {wanted}, got {brief(value)} "
            f"(element {position}){hint}"
        )
    if datatype == "BYTES":
        array = np.empty(expected, dtype=np.object_)
        try:
            array[:] = [leaf.encode() for leaf in leaves]
        except UnicodeEncodeError as exc:  # a lone surrogate, which parse_json keeps out
            raise InvalidArgument(f"{where}: a BYTES element is not Unicode text: {exc}") from None
        return array.reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    try:
        with np.errstate(over="ignore"):  # a float overflow is reported below, by value
            array = np.asarray(leaves, dtype=dtype)
    except OverflowError:  # numpy refuses Python integers out of the type's range
        raise _out_of_range(leaves, dtype, datatype, where) from None
    if dtype.kind == "f" and dtype.itemsize < 8:
        _check_float_range(array, leaves, datatype, where)
    return array.reshape(shape)


def _flatten(data: list, where: str) -> list:
    """The values of nested `data` in row-major order (lists where it is irregular)."""
    try:
        nested = np.asarray(data, dtype=np.object_)
    except ValueError as exc:
        raise InvalidArgument(f"{where}: 'data' is not a regular nested array: {exc}") from None
    return nested.reshape(-1).tolist()


def _range(dtype: np.dtype) -> tuple[int | float, int | float]:
    # Python numbers, whose int-float comparisons are exact and never overflow.
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    high = float(np.finfo(dtype).max)
    return -high, high


def _out_of_range(leaves: list, dtype: np.dtype, datatype: str, where: str) -> InvalidArgument:
    """The error for the first integer that `dtype` cannot hold (numpy names no position)."""
    low, high = _range(dtype)
    found = (i for i, v in enumerate(leaves) if isinstance(v, int) and not low <= v <= high)
    position = next(found, None)
    if position is None:  # not expected: only out-of-range integers overflow
        return InvalidArgument(f"{where}: a value is out of the range of {datatype}")
    return _range_error(leaves[position], position, dtype, datatype, where)


def _range_error(
    value: Any, position: int, dtype: np.dtype, datatype: str, where: str
) -> InvalidArgument:
    low, high = _range(dtype)
    return InvalidArgument(
        f"{where}: {brief(value)} (element {position}) is out of the range of {datatype} "
        f"({low} to {high})"
    )


def _check_float_range(array: np.ndarray, leaves: list, datatype: str, where: str) -> None:
    """Refuse finite values that became infinite in a narrower float (1e300 as FP16). Values a
    little past the largest finite one round to it, as IEEE rounding does."""
    if np.isfinite(array).all():
        return
    for position in np.flatnonzero(np.isinf(array.reshape(-1))).tolist():
        value = leaves[position]
        if not (isinstance(value, float) and math.isinf(value)):
            raise _range_error(value, position, array.dtype, datatype, where)
