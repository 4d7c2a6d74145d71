from __future__ import annotations

import numpy as np
import pytest

from accel_base.datatypes import (
    WIRE_DTYPES,
    datatype_of,
    deserialize_bytes,
    from_raw,
    serialize_bytes,
    to_raw,
)
from accel_base.errors import InvalidArgument


@pytest.mark.parametrize("datatype", sorted(WIRE_DTYPES))
def test_fixed_size_round_trip_is_zero_copy(datatype):
    array = np.arange(6).astype(WIRE_DTYPES[datatype]).reshape(2, 3)
    raw = to_raw(array, datatype)
    back = from_raw(raw, datatype, (2, 3), "input 'x'")
    assert back.shape == (2, 3)
    np.testing.assert_array_equal(back, array)
    assert back.base is not None  # a view of the wire bytes, not a copy


def test_raw_size_mismatch_names_the_input():
    with pytest.raises(
        InvalidArgument,
        match=r"input 'x' got unexpected byte size 60, expected 64 \(INT32 shape \[1, 16\]\)",
    ):
        from_raw(b"\0" * 60, "INT32", (1, 16), "input 'x'")


def test_bytes_round_trip():
    array = np.array([b"", b"a\x00b", "é".encode()], dtype=np.object_)
    raw = serialize_bytes(array)
    assert raw[:4] == b"\0\0\0\0"
    assert deserialize_bytes(raw, 3, "input 'x'").tolist() == array.tolist()


@pytest.mark.parametrize(
    ("raw", "count", "message"),
    [
        (b"\x05\0\0\0abc", 1, "declares 5 bytes but only 3 remain"),
        (b"\x01\0\0\0abcd", 2, "ends after 1 of 2 elements"),
        (b"\x01\0\0\0a", 2_000_000_000, "5 bytes cannot hold 2000000000 BYTES elements"),
        (b"\x01\0\0\0ab", 1, "1 bytes left over"),
    ],
)
def test_malformed_bytes_are_rejected(raw, count, message):
    with pytest.raises(InvalidArgument, match=message):
        deserialize_bytes(raw, count, "input 'x'")


def test_datatype_of():
    assert datatype_of(np.zeros(1, np.float16)) == "FP16"
    assert datatype_of(np.array([b"a"], dtype=object)) == "BYTES"
    with pytest.raises(InvalidArgument):
        datatype_of(np.zeros(1, np.complex64))


def test_check_shape_refuses_what_numpy_cannot_hold():
    from accel_base.datatypes import check_shape

    assert check_shape((2, 0, 3), "input 'x'") == (2, 0, 3)
    with pytest.raises(InvalidArgument, match="input 'x': shape \\[4611686018427387904, 0\\]"):
        check_shape((2**62, 0), "input 'x'")
    with pytest.raises(InvalidArgument, match="65 dimensions, at most 64"):
        check_shape((1,) * 65, "input 'x'")
