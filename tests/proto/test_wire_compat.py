"""Our protos must be wire-compatible with Triton's, as shipped in tritonclient.

Every message is built once with each set of bindings, serialized by one side and
parsed by the other; a field whose number or type disagreed would be dropped into
unknown fields (or fail to parse) and the comparison would fail.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as triton_mc
from tritonclient.grpc import service_pb2 as triton_svc

from accel_base.proto import grpc_service_pb2 as ours_svc
from accel_base.proto import model_config_pb2 as ours_mc

# --------------------------------------------------------------------------- schema


def _enum_shape(enum: EnumDescriptor) -> dict[str, int]:
    return {v.name: v.number for v in enum.values}


def _message_shapes(msg: Descriptor, out: dict[str, Any]) -> None:
    out[msg.full_name] = {
        f.name: (
            f.number,
            f.type,
            f.is_repeated,
            f.message_type.full_name if f.message_type else None,
            f.enum_type.full_name if f.enum_type else None,
            f.containing_oneof.name if f.containing_oneof else None,
        )
        for f in msg.fields
    }
    for enum in msg.enum_types:
        out[enum.full_name] = _enum_shape(enum)
    for nested in msg.nested_types:
        _message_shapes(nested, out)


def _file_shape(fd: FileDescriptor) -> dict[str, Any]:
    out: dict[str, Any] = {"package": fd.package}
    for enum in fd.enum_types_by_name.values():
        out[enum.full_name] = _enum_shape(enum)
    for msg in fd.message_types_by_name.values():
        _message_shapes(msg, out)
    for svc in fd.services_by_name.values():
        out[svc.full_name] = {
            m.name: (
                m.input_type.full_name,
                m.output_type.full_name,
                m.client_streaming,
                m.server_streaming,
            )
            for m in svc.methods
        }
    return out


OUR_FIELDS = 1000  # field numbers from here on are ours (protos/model_config.proto)


def _without_our_fields(shape: dict[str, Any]) -> dict[str, Any]:
    """The schema less our fields, and less the messages (with what they nest) that are
    the types of those fields alone."""
    ours: set[str] = set()
    kept: dict[str, Any] = {}
    for name, fields in shape.items():
        if not isinstance(fields, dict) or not all(isinstance(f, tuple) for f in fields.values()):
            kept[name] = fields
            continue
        kept[name] = {}
        for field, (number, *rest) in fields.items():
            if isinstance(number, int) and number >= OUR_FIELDS:
                ours.add(rest[2])  # the field's message type
            else:
                kept[name][field] = (number, *rest)
    return {
        name: fields
        for name, fields in kept.items()
        if not any(name == own or name.startswith(own + ".") for own in ours if own)
    }


def test_our_own_fields_are_numbered_past_tritons():
    shape = _file_shape(ours_mc.DESCRIPTOR)
    assert shape["inference.ModelConfig"]["routing"][0] == OUR_FIELDS
    assert "inference.ModelRouting.Variant" not in _without_our_fields(shape)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(ours_mc.DESCRIPTOR, triton_mc.DESCRIPTOR), (ours_svc.DESCRIPTOR, triton_svc.DESCRIPTOR)],
    ids=["model_config", "grpc_service"],
)
def test_schema_matches_triton(ours: FileDescriptor, theirs: FileDescriptor) -> None:
    """Same messages, enums, RPCs; same field names, numbers, types and oneofs, but for
    our own fields (numbers from OUR_FIELDS on) and the messages only they use."""
    mine, triton = _without_our_fields(_file_shape(ours)), _file_shape(theirs)
    assert sorted(mine) == sorted(triton)
    for name in triton:
        assert mine[name] == triton[name], name


# ------------------------------------------------------------------------- messages


def _infer_request(m: ModuleType) -> Message:
    req = m.ModelInferRequest(model_name="digits", model_version="2", id="req-7")
    req.parameters["sequence_id"].int64_param = 42
    req.parameters["sequence_start"].bool_param = True
    req.parameters["priority"].uint64_param = 2**63 + 1
    req.parameters["temperature"].double_param = 0.25
    req.parameters["tag"].string_param = "a/b"
    image = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    image.parameters["binary_data_size"].int64_param = 16
    req.inputs.add(name="TEXT", datatype="BYTES", shape=[2])
    req.raw_input_contents.append(struct.pack("<4f", 1.0, -2.5, 3.0, 0.0))
    req.raw_input_contents.append(struct.pack("<I3sI1s", 3, b"abc", 1, b"z"))
    top = req.outputs.add(name="OUTPUT0")
    top.parameters["classification"].int64_param = 3
    req.outputs.add(name="OUTPUT1")
    return req


def _infer_request_typed(m: ModuleType) -> Message:
    req = m.ModelInferRequest(model_name="mixed")
    for name, datatype, field, values in [
        ("B", "BOOL", "bool_contents", [True, False]),
        ("I", "INT32", "int_contents", [-1, 7]),
        ("L", "INT64", "int64_contents", [-(2**40), 5]),
        ("U", "UINT16", "uint_contents", [65535, 1]),
        ("Q", "UINT64", "uint64_contents", [2**64 - 1, 0]),
        ("F", "FP32", "fp32_contents", [0.5, -1.0]),
        ("D", "FP64", "fp64_contents", [1e300, -0.125]),
        ("S", "BYTES", "bytes_contents", [b"\x00\xff", b"hi"]),
    ]:
        tensor = req.inputs.add(name=name, datatype=datatype, shape=[2])
        getattr(tensor.contents, field).extend(values)
    return req


def _infer_response(m: ModuleType) -> Message:
    resp = m.ModelInferResponse(model_name="digits", model_version="2", id="req-7")
    resp.parameters["triton_final_response"].bool_param = True
    out = resp.outputs.add(name="OUTPUT0", datatype="INT64", shape=[1, 3])
    out.parameters["binary_data_size"].int64_param = 24
    resp.raw_output_contents.append(struct.pack("<3q", 9, 4, 1))
    typed = resp.outputs.add(name="OUTPUT1", datatype="FP32", shape=[2])
    typed.contents.fp32_contents.extend([0.75, 0.25])
    return resp


def _stream_ok(m: ModuleType) -> Message:
    return m.ModelStreamInferResponse(infer_response=_infer_response(m))


def _stream_error(m: ModuleType) -> Message:
    return m.ModelStreamInferResponse(error_message="model 'x' is not ready")


_MODEL_CONFIG_TEXT = """
name: "resnet50"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
runtime: "model.py"
max_batch_size: 16
version_policy { specific { versions: [1, 3] } }
input {
  name: "images" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [3, -1, -1]
  reshape { shape: [3, 224, 224] } allow_ragged_batch: true optional: true
}
input { name: "shape" data_type: TYPE_INT64 dims: [2] is_shape_tensor: true }
output { name: "probs" data_type: TYPE_FP16 dims: [1000] label_filename: "labels.txt" }
output { name: "emb" data_type: TYPE_BF16 dims: [-1] reshape { shape: [] } }
batch_input {
  kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "acc" data_type: TYPE_FP32
  source_input: "images"
}
batch_output { target_name: "emb" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "images" }
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 500
  preserve_ordering: true
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy {
    timeout_action: DELAY default_timeout_microseconds: 100000
    allow_timeout_override: true max_queue_size: 64
  }
  priority_queue_policy { key: 1 value { timeout_action: REJECT max_queue_size: 8 } }
  priority_queue_policy { key: 3 value { default_timeout_microseconds: 18446744073709551615 } }
}
instance_group {
  name: "gpu_pool" kind: KIND_GPU count: 2 gpus: [0, 1] profile: ["0"] passive: false
  host_policy: "numa0"
  rate_limiter { resources { name: "R1" global: true count: 4 } priority: 2 }
  secondary_devices { kind: KIND_NVDLA device_id: 1 }
}
instance_group { kind: KIND_CPU count: 1 }
optimization {
  graph { level: 1 }
  priority: PRIORITY_MAX
  cuda {
    graphs: true busy_wait_events: true output_copy_stream: true
    graph_spec {
      batch_size: 8
      input { key: "images" value { dim: [3, 224, 224] } }
      graph_lower_bound { batch_size: 1 input { key: "images" value { dim: [3, 32, 32] } } }
    }
  }
  execution_accelerators {
    gpu_execution_accelerator {
      name: "tensorrt"
      parameters { key: "precision_mode" value: "FP16" }
      parameters { key: "max_workspace_size_bytes" value: "1073741824" }
    }
    cpu_execution_accelerator { name: "openvino" }
  }
  input_pinned_memory { enable: true }
  output_pinned_memory { enable: false }
  gather_kernel_buffer_threshold: 2
  eager_batching: true
}
default_model_filename: "model.onnx"
cc_model_filenames { key: "8.0" value: "model_a100.onnx" }
metric_tags { key: "team" value: "vision" }
parameters { key: "intra_op_thread_count" value { string_value: "4" } }
model_warmup {
  name: "zeros" batch_size: 4 count: 2
  inputs { key: "images" value { data_type: TYPE_FP32 dims: [3, 224, 224] zero_data: true } }
  inputs { key: "shape" value { data_type: TYPE_INT64 dims: [2] input_data_file: "shape.bin" } }
}
model_warmup {
  name: "noise"
  inputs { key: "images" value { data_type: TYPE_FP32 dims: [3, 8, 8] random_data: true } }
}
model_operations { op_library_filename: "libcustom.so" }
model_transaction_policy { decoupled: true }
model_repository_agents { agents { name: "checksum" parameters { key: "MD5" value: "x" } } }
response_cache { enable: true }
model_metrics {
  metric_control {
    metric_identifier { family: "nv_inference_first_response_histogram_ms" }
    histogram_options { buckets: [1, 10, 100] }
  }
}
"""

_SEQUENCE_CONFIG_TEXT = """
name: "stateful" backend: "python" max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [2] preserve_ordering: true }
  control_input {
    name: "START"
    control { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }
  }
  control_input { name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
  state {
    input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_FP32 dims: [-1]
    initial_state { name: "init" data_type: TYPE_FP32 dims: [1] zero_data: true }
    use_same_buffer_for_input_output: true use_growable_memory: true
  }
}
"""

_ENSEMBLE_CONFIG_TEXT = """
name: "pipeline" platform: "ensemble" max_batch_size: 8
ensemble_scheduling {
  max_inflight_requests: 16
  step {
    model_name: "preprocess" model_version: -1
    input_map { key: "RAW" value: "IMAGE_BYTES" }
    output_map { key: "PIXELS" value: "pixels" }
  }
  step { model_name: "resnet50" model_version: 3 input_map { key: "images" value: "pixels" } }
}
"""


def _config_response(text: str) -> Callable[[ModuleType], Message]:
    def build(m: ModuleType) -> Message:
        resp = m.ModelConfigResponse()
        text_format.Parse(text, resp.config)
        return resp

    return build


def _statistics(m: ModuleType) -> Message:
    resp = m.ModelStatisticsResponse()
    stats = resp.model_stats.add(
        name="digits",
        version="1",
        last_inference=1_700_000_000_123,
        inference_count=1000,
        execution_count=250,
    )
    for i, name in enumerate(
        [
            "success",
            "fail",
            "queue",
            "compute_input",
            "compute_infer",
            "compute_output",
            "cache_hit",
            "cache_miss",
        ]
    ):
        getattr(stats.inference_stats, name).CopyFrom(
            m.StatisticDuration(count=10 + i, ns=10_000 * (i + 1))
        )
    batch = stats.batch_stats.add(batch_size=4)
    batch.compute_input.count, batch.compute_input.ns = 5, 500
    batch.compute_infer.count, batch.compute_infer.ns = 5, 9_000
    batch.compute_output.count, batch.compute_output.ns = 5, 300
    stats.memory_usage.add(type="GPU", id=0, byte_size=123_456_789)
    stats.memory_usage.add(type="CPU", id=-1, byte_size=4096)
    first = stats.response_stats["0"]
    for i, name in enumerate(
        ["compute_infer", "compute_output", "success", "fail", "empty_response", "cancel"]
    ):
        getattr(first, name).CopyFrom(m.StatisticDuration(count=i + 1, ns=2**40 + i))
    resp.model_stats.add(name="idle", version="3")
    return resp


def _repository_index(m: ModuleType) -> Message:
    resp = m.RepositoryIndexResponse()
    resp.models.add(name="digits", version="1", state="READY")
    resp.models.add(name="broken", version="2", state="UNAVAILABLE", reason="bad config")
    return resp


def _model_metadata(m: ModuleType) -> Message:
    resp = m.ModelMetadataResponse(name="digits", versions=["1", "2"], platform="onnxruntime_onnx")
    resp.inputs.add(name="pixels", datatype="FP32", shape=[-1, 64])
    resp.outputs.add(name="label", datatype="INT64", shape=[-1])
    resp.outputs.add(name="names", datatype="BYTES", shape=[-1, 1])
    return resp


def _server_metadata(m: ModuleType) -> Message:
    return m.ServerMetadataResponse(
        name="accel-gateway", version="0.1.0", extensions=["classification", "statistics"]
    )


def _repository_load(m: ModuleType) -> Message:
    req = m.RepositoryModelLoadRequest(repository_name="", model_name="digits")
    req.parameters["config"].string_param = '{"max_batch_size": 4}'
    req.parameters["file:1/model.onnx"].bytes_param = b"\x08\x07onnx"
    req.parameters["poll"].bool_param = False
    req.parameters["retries"].int64_param = -3
    return req


def _shared_memory(m: ModuleType) -> Message:
    resp = m.SystemSharedMemoryStatusResponse()
    region = resp.regions["in0"]
    region.name, region.key, region.offset, region.byte_size = "in0", "/shm_in0", 64, 4096
    return resp


def _cuda_shared_memory(m: ModuleType) -> Message:
    return m.CudaSharedMemoryRegisterRequest(
        name="out0", raw_handle=bytes(range(64)), device_id=1, byte_size=1 << 20
    )


def _cuda_status(m: ModuleType) -> Message:
    resp = m.CudaSharedMemoryStatusResponse()
    resp.regions["out0"].CopyFrom(
        m.CudaSharedMemoryStatusResponse.RegionStatus(name="out0", device_id=1, byte_size=1 << 20)
    )
    return resp


def _trace(m: ModuleType) -> Message:
    req = m.TraceSettingRequest(model_name="digits")
    req.settings["trace_level"].value.extend(["TIMESTAMPS", "TENSORS"])
    req.settings["trace_rate"].value.append("1000")
    req.settings["log_frequency"].SetInParent()
    return req


def _log(m: ModuleType) -> Message:
    resp = m.LogSettingsResponse()
    resp.settings["log_info"].bool_param = True
    resp.settings["log_verbose_level"].uint32_param = 2
    resp.settings["log_format"].string_param = "ISO8601"
    return resp


def _unload(m: ModuleType) -> Message:
    req = m.RepositoryModelUnloadRequest(model_name="digits")
    req.parameters["unload_dependents"].bool_param = True
    return req


BUILDERS: dict[str, Callable[[ModuleType], Message]] = {
    "ModelInferRequest": _infer_request,
    "ModelInferRequest/typed": _infer_request_typed,
    "ModelInferResponse": _infer_response,
    "ModelStreamInferResponse/ok": _stream_ok,
    "ModelStreamInferResponse/error": _stream_error,
    "ModelConfigResponse/full": _config_response(_MODEL_CONFIG_TEXT),
    "ModelConfigResponse/sequence": _config_response(_SEQUENCE_CONFIG_TEXT),
    "ModelConfigResponse/ensemble": _config_response(_ENSEMBLE_CONFIG_TEXT),
    "ModelConfigResponse/empty-sequence": _config_response("name: 'x' sequence_batching {}"),
    "ModelStatisticsResponse": _statistics,
    "RepositoryIndexResponse": _repository_index,
    "ModelMetadataResponse": _model_metadata,
    "ServerMetadataResponse": _server_metadata,
    "RepositoryModelLoadRequest": _repository_load,
    "RepositoryModelUnloadRequest": _unload,
    "SystemSharedMemoryStatusResponse": _shared_memory,
    "CudaSharedMemoryRegisterRequest": _cuda_shared_memory,
    "CudaSharedMemoryStatusResponse": _cuda_status,
    "TraceSettingRequest": _trace,
    "LogSettingsResponse": _log,
}


def _as_dict(msg: Message) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_round_trip_with_tritonclient(case: str) -> None:
    ours, theirs = BUILDERS[case](ours_svc), BUILDERS[case](triton_svc)
    assert _as_dict(ours) == _as_dict(theirs), "builders disagree; test bug"
    assert _as_dict(ours), "empty message proves nothing"

    # ours -> Triton
    parsed = type(theirs).FromString(ours.SerializeToString())
    assert _as_dict(parsed) == _as_dict(ours)
    assert parsed == theirs

    # Triton -> ours
    back = type(ours).FromString(theirs.SerializeToString())
    assert _as_dict(back) == _as_dict(theirs)
    assert back == ours

    # Same schema, same bytes.
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )


@pytest.mark.parametrize("text", [_MODEL_CONFIG_TEXT, _SEQUENCE_CONFIG_TEXT, _ENSEMBLE_CONFIG_TEXT])
def test_config_pbtxt_parses_identically(text: str) -> None:
    """A Triton config.pbtxt means the same thing to our ModelConfig."""
    ours = text_format.Parse(text, ours_mc.ModelConfig())
    theirs = text_format.Parse(text, triton_mc.ModelConfig())
    assert _as_dict(ours) == _as_dict(theirs)
    assert text_format.MessageToString(ours) == text_format.MessageToString(theirs)


def test_gateway_extension_numbers_survive_triton() -> None:
    """Fields >= 1000 (our extensions) pass through Triton's parser as unknown fields."""
    # Field 1000, wire type 2 (length-delimited): a future accel-gateway extension.
    extension = bytes([0xC2, 0x3E, 0x03]) + b"a/b"
    payload = ours_mc.ModelConfig(name="m").SerializeToString() + extension
    theirs = triton_mc.ModelConfig.FromString(payload)
    assert theirs.name == "m"
    assert theirs.SerializeToString().endswith(extension)
