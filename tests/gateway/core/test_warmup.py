"""model_warmup samples: read and checked against the config (gateway/core/warmup.py)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.placement.warm_up import warm_up_inputs
from gateway.core.warmup import read_samples

BASE = """
name: "m"
max_batch_size: 8
input [
  { name: "A", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "B", data_type: TYPE_INT32, dims: [ -1 ] },
  { name: "S", data_type: TYPE_STRING, dims: [ 2 ] }
]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""
SEQUENCE = """
name: "seq"
max_batch_size: 4
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START", control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] } ] },
    { name: "READY", control [ { kind: CONTROL_SEQUENCE_READY, fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "ACC_IN", output_name: "ACC_OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
}
"""


def config(text: str, *samples: str) -> mc.ModelConfig:
    warmup = "".join(f"model_warmup {{ {s} }}\n" for s in samples)
    return text_format.Parse(text + warmup, mc.ModelConfig())


def full_sample(name: str = "s", batch: int = 2, extra: str = "") -> str:
    return (
        f'name: "{name}" batch_size: {batch} {extra}'
        ' inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }'
        ' inputs { key: "B" value: { data_type: TYPE_INT32 dims: [ 3 ] random_data: true } }'
        ' inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "s" } }'
    )


def write_strings(model_dir, name: str, *values: bytes) -> None:
    (model_dir / "warmup").mkdir(exist_ok=True)
    blob = b"".join(struct.pack("<I", len(v)) + v for v in values)
    (model_dir / "warmup" / name).write_bytes(blob)


def test_samples_fill_every_input_for_each_row_of_the_batch(tmp_path):
    write_strings(tmp_path, "s", b"hello", b"")
    (sample,) = read_samples(config(BASE, full_sample(batch=3, extra="count: 4")), tmp_path)
    assert (sample.name, sample.runs, sample.rows) == ("s", 4, 3)
    assert sample.feed["A"].shape == (3, 4) and sample.feed["A"].dtype == np.float32
    assert not sample.feed["A"].any()
    assert sample.feed["B"].shape == (3, 3) and sample.feed["B"].dtype == np.int32
    assert sample.feed["S"].tolist() == [[b"hello", b""]] * 3
    # random_data is the same on every load (a fixed seed), so every instance sees it too
    (again,) = read_samples(config(BASE, full_sample(batch=3)), tmp_path)
    np.testing.assert_array_equal(again.feed["B"], sample.feed["B"])
    assert again.runs == 1  # count 0: once, as Triton
    assert not any(a.flags.writeable for a in again.feed.values())  # reused run after run
    # A sample of batch_size 0 is skipped, as Triton skips it
    assert (
        read_samples(config(BASE, full_sample(batch=0), full_sample("b")), tmp_path)[0].name == "b"
    )
    assert len(read_samples(config(BASE, full_sample(batch=0)), tmp_path)) == 0


def test_a_model_without_batching_gets_rows_without_a_batch_dimension(tmp_path):
    text = BASE.replace("max_batch_size: 8", "max_batch_size: 0")
    write_strings(tmp_path, "s", b"a", b"b")
    (sample,) = read_samples(config(text, full_sample(batch=1)), tmp_path)
    assert sample.rows == 0 and sample.feed["A"].shape == (4,)
    with pytest.raises(InvalidArgument, match="does not batch.*give batch_size 1"):
        read_samples(config(text, full_sample(batch=2)), tmp_path)


def test_raw_files_hold_one_row_in_little_endian(tmp_path):
    text = BASE.replace('"B", data_type: TYPE_INT32', '"B", data_type: TYPE_INT16')
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "b").write_bytes(struct.pack("<3h", 1, -2, 300))
    write_strings(tmp_path, "s", b"x", b"y")
    sample = full_sample().replace(
        "data_type: TYPE_INT32 dims: [ 3 ] random_data: true",
        'data_type: TYPE_INT16 dims: [ 3 ] input_data_file: "b"',
    )
    (read,) = read_samples(config(text, sample), tmp_path)
    assert read.feed["B"].tolist() == [[1, -2, 300]] * 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("batch_size: 2", "batch_size: 9"), "batch_size 9 is over the model's max_batch_size 8"),
        (('key: "B"', 'key: "C"'), "has no input 'C'"),
        (("TYPE_FP32 dims: [ 4 ]", "TYPE_FP16 dims: [ 4 ]"), "TYPE_FP16, but the model's input"),
        (("TYPE_FP32 dims: [ 4 ]", "TYPE_FP32 dims: [ 5 ]"), r"dims \[5\] do not fit"),
        (("TYPE_FP32 dims: [ 4 ]", "TYPE_FP32 dims: [ 2, 2 ]"), r"dims \[2, 2\] do not fit"),
        (("dims: [ 3 ] random_data: true", "dims: [ 3 ]"), "needs one of zero_data"),
        (('input_data_file: "s"', 'input_data_file: "none"'), "cannot read input_data_file"),
    ],
)
def test_a_bad_sample_fails_the_load_named(tmp_path, change, message):
    write_strings(tmp_path, "s", b"x", b"y")
    sample = full_sample("bad").replace(*change)
    with pytest.raises(InvalidArgument, match=message) as info:
        read_samples(config(BASE, sample), tmp_path)
    assert "warm-up sample 'bad'" in info.value.message


def test_every_needed_input_must_be_given_and_files_must_fit(tmp_path):
    write_strings(tmp_path, "s", b"x", b"y")
    without_a = full_sample().replace(
        ' inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }', ""
    )
    with pytest.raises(InvalidArgument, match="gives no data for input 'A'"):
        read_samples(config(BASE, without_a), tmp_path)
    optional = BASE.replace(
        '"A", data_type: TYPE_FP32, dims: [ 4 ]',
        '"A", data_type: TYPE_FP32, dims: [ 4 ], optional: true',
    )
    assert "A" not in read_samples(config(optional, without_a), tmp_path)[0].feed
    write_strings(tmp_path, "s", b"only one")
    with pytest.raises(InvalidArgument, match="'S'"):
        read_samples(config(BASE, full_sample()), tmp_path)
    (tmp_path / "warmup" / "b").write_bytes(b"\0" * 16)  # longer than a row: its first bytes
    longer = full_sample().replace(
        "dims: [ 3 ] random_data: true", 'dims: [ 3 ] input_data_file: "b"'
    )
    write_strings(tmp_path, "s", b"x", b"y", b"extra")
    (read,) = read_samples(config(BASE, longer), tmp_path)
    assert (
        read.feed["B"].tolist() == [[0, 0, 0]] * 2 and read.feed["S"].tolist() == [[b"x", b"y"]] * 2
    )
    (tmp_path / "warmup" / "b").write_bytes(b"\0" * 10)
    wrong_size = full_sample().replace(
        "dims: [ 3 ] random_data: true", 'dims: [ 3 ] input_data_file: "b"'
    )
    write_strings(tmp_path, "s", b"x", b"y")
    with pytest.raises(InvalidArgument, match="holds 10 bytes, but one row of TYPE_INT32"):
        read_samples(config(BASE, wrong_size), tmp_path)


def test_a_sequence_model_gets_its_controls_and_state_as_a_sequence_of_one(tmp_path):
    sample = (
        'name: "q" batch_size: 2'
        ' inputs { key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }'
    )
    (read,) = read_samples(config(SEQUENCE, sample), tmp_path)
    assert read.feed["START"].tolist() == [[1], [1]]
    assert read.feed["READY"].dtype == np.float32 and read.feed["READY"].tolist() == [[1], [1]]
    assert read.feed["CORRID"].dtype == np.uint64 and read.feed["ACC_IN"].shape == (2, 1)
    given = sample + (
        ' inputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }'
    )
    assert read_samples(config(SEQUENCE, given), tmp_path)[0].feed["START"].tolist() == [[0], [0]]
    wrong = given.replace(
        '"START" value: { data_type: TYPE_INT32', '"START" value: { data_type: TYPE_FP32'
    )
    with pytest.raises(InvalidArgument, match="TYPE_FP32, but the model's input is TYPE_INT32"):
        read_samples(config(SEQUENCE, wrong), tmp_path)
    # The zeros batch that measures memory without samples feeds them too (it fed INPUT
    # alone, and an ONNX sequence model refused it).
    zeros = warm_up_inputs(config(SEQUENCE))
    assert set(zeros) == {"INPUT", "START", "READY", "CORRID", "ACC_IN"}
    assert zeros["START"].shape == (4, 1)


def test_a_decoupled_model_refuses_samples(tmp_path):
    decoupled = BASE + "model_transaction_policy { decoupled: true }\n"
    with pytest.raises(InvalidArgument, match="not supported for a decoupled model"):
        read_samples(config(decoupled, full_sample()), tmp_path)
    assert read_samples(config(decoupled), tmp_path) == []
