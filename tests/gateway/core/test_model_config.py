from __future__ import annotations

import pytest

from accel_base.config_json import config_to_json
from accel_base.proto import model_config_pb2 as mc
from backends.base import TensorSpec
from gateway.core.model_config import ConfigError, complete_config, read_config


def write_model(tmp_path, name: str, filename: str, text: str):
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / filename).write_text(text)
    return model_dir


def test_pbtxt_and_yaml_read_the_same(tmp_path):
    pbtxt = write_model(
        tmp_path / "a",
        "m",
        "config.pbtxt",
        """
        platform: "onnxruntime_onnx"
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
        dynamic_batching { preferred_batch_size: [ 2, 4 ] }
        instance_group [ { count: 2 kind: KIND_CPU } ]
    """,
    )
    yaml = write_model(
        tmp_path / "b",
        "m",
        "config.yaml",
        """
platform: onnxruntime_onnx
max_batch_size: 4
input:
  - {name: x, data_type: TYPE_FP32, dims: [3]}
dynamic_batching: {preferred_batch_size: [2, 4]}
instance_group: [{count: 2, kind: KIND_CPU}]
""",
    )
    assert read_config(pbtxt) == read_config(yaml)
    assert read_config(pbtxt).name == "m"  # the directory names the model


def test_name_must_match_directory(tmp_path):
    model_dir = write_model(
        tmp_path, "m", "config.pbtxt", 'name: "other" platform: "onnxruntime_onnx"'
    )
    with pytest.raises(ConfigError, match="'other' but its directory is 'm'"):
        read_config(model_dir)


def test_unknown_field_names_the_file(tmp_path):
    model_dir = write_model(tmp_path, "m", "config.pbtxt", "platform: 'x' max_batchsize: 3")
    with pytest.raises(ConfigError, match=r"config.pbtxt.*max_batchsize"):
        read_config(model_dir)


def test_missing_config_inferred_from_artifact(tmp_path):
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.onnx").write_bytes(b"")
    assert read_config(model_dir).platform == "onnxruntime_onnx"


def test_bad_dims(tmp_path):
    model_dir = write_model(
        tmp_path,
        "m",
        "config.pbtxt",
        """
        platform: "onnxruntime_onnx"
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 0 ] } ]""",
    )
    with pytest.raises(ConfigError, match="input 'x' dims"):
        read_config(model_dir)


def test_complete_from_artifact_strips_the_batch_dimension():
    config = mc.ModelConfig(name="m", platform="onnxruntime_onnx", max_batch_size=8)
    complete_config(config, [TensorSpec("x", "FP32", (-1, 64))], [TensorSpec("y", "INT64", (-1,))])
    assert [(t.name, list(t.dims), t.data_type) for t in config.input] == [
        ("x", [64], mc.TYPE_FP32)
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [])]


def test_declared_datatype_checked_against_artifact():
    config = mc.ModelConfig(name="m", platform="onnxruntime_onnx")
    config.input.add(name="x", data_type=mc.TYPE_INT32, dims=[3])
    with pytest.raises(ConfigError, match="TYPE_INT32 in the config but FP32 in the artifact"):
        complete_config(config, [TensorSpec("x", "FP32", (3,))], [])


def test_json_has_every_field_and_int64_as_numbers():
    config = mc.ModelConfig(name="m", platform="onnxruntime_onnx", max_batch_size=4)
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[3, -1])
    config.dynamic_batching.max_queue_delay_microseconds = 100
    config.dynamic_batching.priority_queue_policy[2].max_queue_size = 5
    data = config_to_json(config)
    assert data["input"][0]["dims"] == [3, -1]
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert data["dynamic_batching"]["priority_queue_policy"]["2"]["max_queue_size"] == 5
    assert data["backend"] == "" and data["instance_group"] == []
