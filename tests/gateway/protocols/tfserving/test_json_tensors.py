"""TF Serving's JSON tensors (gateway/protocols/tfserving/json_tensors.py): row and
columnar requests to arrays, by the signature's datatypes; answers back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.json_tensors import request_inputs, response_text


def test_rows_of_one_input_stack_into_its_tensor() -> None:
    inputs, row = request_inputs({"instances": [[1, 2], [3, 4]]}, {"x": "FP32"})
    assert row and inputs["x"].dtype == np.float32 and inputs["x"].tolist() == [[1, 2], [3, 4]]
    named, _ = request_inputs({"instances": [{"x": [1, 2]}]}, {"x": "INT64"})
    assert named["x"].dtype == np.int64 and named["x"].shape == (1, 2)


def test_rows_of_several_inputs_are_objects() -> None:
    body = {"instances": [{"a": 1, "b": "x"}, {"a": 2, "b": {"b64": "eQ=="}}]}
    inputs, _ = request_inputs(body, {"a": "INT32", "b": "BYTES"})
    assert inputs["a"].tolist() == [1, 2] and inputs["b"].tolist() == [b"x", b"y"]
    with pytest.raises(TfsError, match="keys must be equal to: a,b"):
        request_inputs({"instances": [{"a": 1}]}, {"a": "INT32", "b": "BYTES"})
    with pytest.raises(TfsError, match="does not have named input: c"):
        request_inputs({"instances": [{"a": 1, "c": 2}]}, {"a": "INT32", "b": "BYTES"})
    with pytest.raises(TfsError, match="instances is a plain list"):
        request_inputs({"instances": [[1]]}, {"a": "INT32", "b": "BYTES"})
    with pytest.raises(TfsError, match="got list at item 1"):
        request_inputs({"instances": [{"a": 1, "b": "x"}, [1]]}, {"a": "INT32", "b": "BYTES"})


def test_columnar_inputs_are_whole_tensors() -> None:
    inputs, row = request_inputs(
        {"inputs": {"a": [[1.5]], "b": [True]}}, {"a": "FP64", "b": "BOOL"}
    )
    assert not row and inputs["a"].shape == (1, 1) and inputs["b"].dtype == np.bool_
    lone, _ = request_inputs({"inputs": [1, 2, 3]}, {"x": "UINT8"})
    assert lone["x"].dtype == np.uint8
    with pytest.raises(TfsError, match="inputs is a plain value/list"):
        request_inputs({"inputs": [1]}, {"a": "INT32", "b": "INT32"})
    with pytest.raises(TfsError, match="Missing named input: b in 'inputs' object"):
        request_inputs({"inputs": {"a": [1]}}, {"a": "INT32", "b": "INT32"})
    # Other keys are left alone, as TF Serving leaves them.
    extra, _ = request_inputs({"inputs": {"a": [1], "zz": 0}}, {"a": "INT32"})
    assert list(extra) == ["a"]


@pytest.mark.parametrize(
    ("body", "specs", "words"),
    [
        ({"instances": [1], "inputs": [1]}, {"x": "FP32"}, "only one of 'inputs' or 'instances'"),
        ({}, {"x": "FP32"}, "Missing 'inputs' or 'instances' key"),
        ([], {"x": "FP32"}, "Is not object"),
        ({"instances": []}, {"x": "FP32"}, "No values in 'instances' array"),
        ({"instances": 3}, {"x": "FP32"}, "Expecting 'instances' to be an list/array"),
        ({"instances": [[1, 2], [3]]}, {"x": "FP32"}, "unexpected size: 1 at level: 1 .*ragged"),
        ({"inputs": [[1, 2], 3]}, {"x": "FP32"}, "found at incorrect level"),
        ({"inputs": [1, [2]]}, {"x": "FP32"}, "unexpected level"),
        (
            {"inputs": ["a"]},
            {"x": "FP32"},
            'JSON Value: "a" Type: String is not of expected type: float',
        ),
        ({"inputs": [1.5]}, {"x": "INT32"}, "Type: Number is not of expected type: int32"),
        ({"inputs": [300]}, {"x": "UINT8"}, "out of range"),
        ({"inputs": [1]}, {"x": "BOOL"}, "expected type: bool"),
        ({"inputs": [True]}, {"x": "INT32"}, "Type: True"),
        ({"inputs": [1]}, {"x": "BYTES"}, "expected type: string"),
        ({"inputs": [{"b64": "%%"}]}, {"x": "BYTES"}, "Unable to base64 decode"),
        ({"inputs": [{"b64": 1}]}, {"x": "BYTES"}, "not formatted correctly for base64"),
        (
            {"inputs": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
            {"x": "FP32"},
            "nests deeper than 32",
        ),
    ],
)
def test_bad_bodies_are_refused_with_what_was_wrong(body, specs, words) -> None:
    with pytest.raises(TfsError, match=words) as refused:
        request_inputs(body, specs)
    assert refused.value.http_status == 400


def test_bfloat16_is_not_read_from_json_as_in_tf_serving() -> None:
    with pytest.raises(TfsError, match="bfloat16") as refused:
        request_inputs({"inputs": [1.5]}, {"x": "BF16"})
    assert refused.value.http_status == 501


def test_b64_padding_may_be_left_out() -> None:
    inputs, _ = request_inputs({"inputs": [{"b64": "YQ"}, {"b64": "YWI="}]}, {"x": "BYTES"})
    assert inputs["x"].tolist() == [b"a", b"ab"]


def test_nan_and_infinity_in_and_out() -> None:
    body = json.loads('{"inputs": [NaN, Infinity, -Infinity, 1]}')
    inputs, _ = request_inputs(body, {"x": "FP32"})
    answer = response_text({"y": (inputs["x"], "FP32")}, row=False)
    assert answer == '{"outputs": [NaN, Infinity, -Infinity, 1.0]}'


def test_answers_by_format_and_output_count() -> None:
    y = np.array([[1.0], [2.5]], dtype=np.float32)
    z = np.array([7, 8], dtype=np.int64)
    assert response_text({"y": (y, "FP32")}, row=True) == '{"predictions": [[1.0], [2.5]]}'
    both = {"y": (y, "FP32"), "z": (z, "INT64")}
    assert json.loads(response_text(both, row=True)) == {
        "predictions": [{"y": [1.0], "z": 7}, {"y": [2.5], "z": 8}]
    }
    assert json.loads(response_text(both, row=False)) == {
        "outputs": {"y": [[1.0], [2.5]], "z": [7, 8]}
    }
    assert response_text({"y": (np.zeros((0, 2), np.float32), "FP32")}, True) == (
        '{"predictions": []}'
    )
    with pytest.raises(TfsError, match="inconsistent batch size: 1 expecting: 2"):
        response_text({"y": (y, "FP32"), "z": (np.array([1]), "INT64")}, row=True)


def test_floats_are_written_as_tf_serving_writes_them() -> None:
    # %g when it reads back as the same float, else all its digits; ".0" on whole numbers.
    values = np.array([3, 9e6, 999999, 3e-05, 555557.5, 0.5, 0.1, 0.123456789], np.float32)
    assert response_text({"y": (values, "FP32")}, False) == (
        '{"outputs": [3.0, 9e+06, 999999.0, 3e-05, 555557.5, 0.5, 0.1, 0.123456791]}'
    )
    double = np.array([0.1, 1 / 3], np.float64)
    assert response_text({"y": (double, "FP64")}, False) == (
        '{"outputs": [0.1, 0.33333333333333331]}'
    )
    assert response_text({"b": (np.array([True, False]), "BOOL")}, False) == (
        '{"outputs": [true, false]}'
    )


def test_bytes_outputs_are_b64_and_text_is_text() -> None:
    data = np.array([b"\xff\x00", b"ok"], dtype=object)
    assert json.loads(response_text({"image_bytes": (data, "BYTES")}, row=False)) == {
        "outputs": [{"b64": "/wA="}, {"b64": "b2s="}]
    }
    assert response_text({"word": (data[1:], "BYTES")}, row=True) == '{"predictions": ["ok"]}'
