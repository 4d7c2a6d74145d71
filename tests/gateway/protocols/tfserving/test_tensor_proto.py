"""TensorProto to and from numpy (gateway/protocols/tfserving/tensor_proto.py), held
against TensorFlow's own reading of the same protos (tf.make_ndarray)."""

from __future__ import annotations

import numpy as np
import pytest

from accel_base.proto.tfserving.tensorflow.core.framework import tensor_pb2
from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.tensor_proto import fill, to_array

LIMIT = 1 << 20


def _proto(dtype: int, shape: list[int], **values) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype, **values)
    for size in shape:
        proto.tensor_shape.dim.add().size = size
    return proto


def test_val_fields_as_tensorflow_reads_them() -> None:
    # The last value repeats to fill the shape; no value is zeros; extra values are left.
    assert to_array(_proto(1, [2, 2], float_val=[1, 2]), "x", LIMIT)[0].tolist() == [
        [1, 2], [2, 2]]  # fmt: skip
    assert to_array(_proto(9, [3], int64_val=[]), "x", LIMIT)[0].tolist() == [0, 0, 0]
    assert to_array(_proto(1, [0], float_val=[5]), "x", LIMIT)[0].shape == (0,)
    array, datatype = to_array(_proto(7, [2], string_val=[b"a"]), "x", LIMIT)
    assert datatype == "BYTES" and array.tolist() == [b"a", b"a"]
    # int8 and kin travel in int_val as int32: the low bits stay, as a C cast keeps them.
    assert to_array(_proto(6, [2], int_val=[300, -1]), "x", LIMIT)[0].tolist() == [44, -1]
    half = np.array([1.5, -2], np.float16).view(np.uint16).astype(np.int32).tolist()
    assert to_array(_proto(19, [2], half_val=half), "x", LIMIT)[0].tolist() == [1.5, -2]


def test_tensor_content_is_read_as_it_is() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    array, _ = to_array(_proto(1, [2, 3], tensor_content=data.tobytes()), "x", LIMIT)
    assert np.array_equal(array, data)
    with pytest.raises(TfsError, match="tensor_content holds 24 bytes"):
        to_array(_proto(1, [2, 2], tensor_content=data.tobytes()), "x", LIMIT)


@pytest.mark.parametrize(
    ("proto", "words"),
    [
        (_proto(1, [10**10], float_val=[1]), "over the server's limit"),
        (_proto(1, [2**32, 2**32], float_val=[1]), "over the server's limit"),
        (_proto(1, [-1], float_val=[1]), "none negative"),
        (_proto(1, [1] * 40, float_val=[1]), "at most 32 dimensions"),
        (_proto(8, [1]), "not served"),  # complex64
        (tensor_pb2.TensorProto(dtype=1, tensor_shape={"unknown_rank": True}), "unknown rank"),
    ],
)
def test_what_cannot_be_a_tensor_is_refused_naming_the_input(proto, words) -> None:
    with pytest.raises(TfsError, match=words) as refused:
        to_array(proto, "pixels", LIMIT)
    assert "'pixels'" in refused.value.message and refused.value.http_status == 400


def test_outputs_in_the_typed_fields_read_back_by_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow")
    for array, datatype in [
        (np.array([[1.5, 2.5]], np.float32), "FP32"),
        (np.array([1, -2], np.int8), "INT8"),
        (np.array([2**40], np.int64), "INT64"),
        (np.array([True, False]), "BOOL"),
        (np.array([0.5, -3], np.float16), "FP16"),
        (np.array([b"x", b"\xff"], dtype=object), "BYTES"),
    ]:
        proto = tensor_pb2.TensorProto()
        fill(proto, array, datatype)
        theirs = tf.make_ndarray(tf.make_tensor_proto(0).FromString(proto.SerializeToString()))
        assert theirs.shape == array.shape and theirs.tolist() == array.tolist(), datatype
