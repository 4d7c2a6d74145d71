"""Issue 12: every field of a JSON infer request is type-checked, and bad ones are a 400
(InvalidArgument) that names the field. Each case here was a 500 or silently accepted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from accel_base.errors import InvalidArgument
from gateway.protocols.http.codec import decode_request, parse_json
from gateway.protocols.http.fields import brief


def body_with(**fields) -> bytes:
    request = {"inputs": [{"name": "x", "shape": [2], "datatype": "INT32", "data": [1, 2]}]}
    request.update(fields)
    return json.dumps(request).encode()


def decode(body: bytes, header_length: int | None = None):
    return decode_request(body, header_length, "m", "")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"outputs": 5}, "'outputs' array, got integer 5"),  # was a 500 (TypeError)
        ({"outputs": {"name": "y"}}, "'outputs' array, got object"),
        ({"outputs": "ab"}, "'outputs' array, got string"),
        ({"outputs": [3]}, r"outputs\[0\] must be a JSON object, got integer 3"),
        ({"outputs": [{"name": 3}]}, r"outputs\[0\]: 'name' must be a string"),
        ({"outputs": [{"name": "y", "parameters": []}]}, "'parameters' must be a JSON object"),
        ({"outputs": [{"name": "y", "parameters": {"binary_data": 1}}]}, "true or false"),
        ({"inputs": {"name": "x"}}, "'inputs' array, got object"),
        ({"inputs": ["x"]}, r"inputs\[0\] must be a JSON object, got string 'x'"),
        ({"id": 5}, "'id' must be a string, got integer 5"),
        ({"id": ["a"]}, "'id' must be a string, got array"),
        ({"parameters": [1]}, "'parameters' must be a JSON object, got array"),
        ({"parameters": {"p": [1]}}, "parameter 'p' must be a string, number or boolean"),
        ({"parameters": {"p": None}}, "parameter 'p' must be a string, number or boolean"),
        ({"parameters": {"binary_data_output": "yes"}}, "'binary_data_output' must be true"),
    ],
)
def test_request_fields_have_their_types(fields, message):
    with pytest.raises(InvalidArgument, match=message):
        decode(body_with(**fields))


@pytest.mark.parametrize(
    ("input_", "message"),
    [
        ({"name": 1, "shape": [1], "datatype": "INT32", "data": [1]}, "'name' must be a string"),
        ({"name": "x", "shape": "1", "datatype": "INT32", "data": [1]}, "'shape' must be an array"),
        ({"name": "x", "shape": [1.0], "datatype": "INT32", "data": [1]}, "non-negative integers"),
        ({"name": "x", "shape": [True], "datatype": "INT32", "data": [1]}, "non-negative integers"),
        ({"name": "x", "shape": [1], "datatype": 5, "data": [1]}, "'datatype' must be a string"),
        ({"name": "x", "shape": [1], "datatype": "INT32", "data": 1}, "'data' must be a JSON"),
        ({"name": "x", "shape": [1], "datatype": "INT32", "data": [1], "parameters": 1}, "object"),
        ({"name": "x", "shape": [2], "datatype": "INT32", "data": [[1], [2, 3]]}, "regular nested"),
    ],
)
def test_input_fields_have_their_types(input_, message):
    with pytest.raises(InvalidArgument, match=f"input.*{message}"):
        decode(body_with(inputs=[input_]))


def test_null_is_absent_for_optional_fields():
    request = decode(body_with(id=None, parameters=None, outputs=None))
    assert (request.id, request.parameters, request.outputs) == ("", {}, [])


def test_more_than_64_dimensions_json_and_binary():
    shape = [1] * 65
    with pytest.raises(InvalidArgument, match="65 dimensions, at most 64"):
        decode(body_with(inputs=[{"name": "x", "shape": shape, "datatype": "INT8", "data": [1]}]))
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": shape,
                    "datatype": "INT8",
                    "parameters": {"binary_data_size": 1},
                }
            ]
        }
    ).encode()
    with pytest.raises(InvalidArgument, match="65 dimensions, at most 64"):
        decode(header + b"\x01", len(header))


def test_a_huge_shape_is_refused_before_anything_is_allocated():
    input_ = {"name": "x", "shape": [2**40, 2**40], "datatype": "FP32", "data": [1.0]}
    with pytest.raises(InvalidArgument, match="too large"):
        decode(body_with(inputs=[input_]))


@pytest.mark.parametrize("with_nan", [False, True])  # orjson, then json for NaN bodies
def test_deep_nesting_is_a_400_not_a_recursion_error(with_nan):
    leaf = "NaN" if with_nan else "1"
    deep = "[" * 5000 + leaf + "]" * 5000
    body = f'{{"inputs": [], "parameters": {{"p": {deep}}}}}'.encode()
    with pytest.raises(InvalidArgument, match="nests arrays or objects too deeply"):
        decode(body)


def test_nesting_within_the_limit_still_fails_cleanly():
    # 900 levels parse, and every use of the value must cope (repr would recurse).
    deep = "[" * 900 + "1" + "]" * 900
    for field in ("parameters", "outputs", "id"):
        with pytest.raises(InvalidArgument, match=field):
            decode(f'{{"inputs": [], "{field}": {deep}}}'.encode())
    body = f'{{"inputs": [{{"name": "x", "shape": [1], "datatype": "BYTES", "data": {deep}}}]}}'
    with pytest.raises(InvalidArgument, match="regular nested array of at most 64"):
        decode(body.encode())


def test_unpaired_surrogates_are_refused():
    # orjson refuses them; json (the NaN path) would let them through to an error message
    # that could not be encoded back (a 500 before).
    body = b'{"inputs": [{"name": "\\ud800", "shape": [1], "datatype": "FP32", "data": [NaN]}]}'
    with pytest.raises(InvalidArgument, match="unpaired surrogate"):
        decode(body)
    pair = b'{"id": "\\ud83d\\ude00", "inputs": [], "parameters": {"p": NaN}}'
    assert decode(pair).id == "\U0001f600"


def test_integers_past_4300_digits_are_invalid_json():
    with pytest.raises(InvalidArgument, match="not valid"):
        parse_json(b'{"a": [NaN, 1' + b"0" * 5000 + b"]}")


def test_brief_survives_any_value():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert brief(deep).startswith("array [[[")
    assert brief(10**5000) == "integer of 16610 bits"
    assert len(brief("x" * 10**6)) < 100


# ---- JSON tensor data: exact values only ----------------------------------------------


def json_input(datatype: str, data: list) -> list:
    entry = {"name": "x", "shape": [len(data)], "datatype": datatype, "data": data}
    return decode(body_with(inputs=[entry])).inputs[0].data.tolist()


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("INT32", [1, 1.5], r"INT32 data must be integers, got number 1.5 \(element 1\)"),
        ("INT64", [2.0], "got number 2.0 .* without a decimal point"),
        ("UINT8", [1, 300], r"integer 300 \(element 1\) is out of the range of UINT8 \(0 to 255\)"),
        ("UINT8", [-1], "out of the range of UINT8"),
        ("INT8", [128], "out of the range of INT8"),
        ("UINT64", [2**64], "UINT64"),  # orjson reads it as a float: not an integer
        ("INT64", [2**63], "out of the range of INT64"),
        ("INT32", [True], "must be integers, got boolean true"),
        ("INT32", ["1"], "must be integers, got string '1'"),
        ("BOOL", [1, 0], "BOOL data must be true or false, got integer 1"),
        ("BOOL", ["true"], "must be true or false"),
        ("FP32", [None], "FP32 data must be numbers, got null"),
        ("FP32", ["1.5"], "must be numbers, got string"),
        ("FP32", [False], "must be numbers, got boolean false"),
        ("FP16", [1e300], "out of the range of FP16"),
        ("FP32", [1e39], "out of the range of FP32"),
        ("BYTES", [1], "BYTES data must be strings, got integer 1"),
    ],
)
def test_json_data_must_be_exact(datatype, data, message):
    with pytest.raises(InvalidArgument, match=message):
        json_input(datatype, data)


def test_exact_json_data_is_kept():
    assert json_input("UINT64", [2**64 - 1, 1]) == [2**64 - 1, 1]
    assert json_input("INT8", [-128, 127]) == [-128, 127]
    assert json_input("BOOL", [True, False]) == [True, False]
    assert json_input("FP32", [1, 2.5]) == [1.0, 2.5]  # integers are numbers
    assert json_input("FP16", [65519.0]) == [65504.0]  # rounds to the largest finite value
    infinite = decode(
        b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP16", "data": [Infinity, NaN]}]}'
    ).inputs[0]
    assert np.isinf(infinite.data[0]) and np.isnan(infinite.data[1])
