"""A message written by our TF Serving protos (accel_base.proto.tfserving) reads the same
with tensorflow-serving-api 2.21's modules (and TensorFlow's) and the other way round,
text-format config files read alike, and the published client stubs call a server built
on ours. tests/proto/test_tfserving_schema.py holds the declarations field by field."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent import futures
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("tensorflow_serving.apis.predict_pb2")

import grpc  # noqa: E402
from google.protobuf import descriptor_pool, json_format, text_format  # noqa: E402
from google.protobuf.message import Message  # noqa: E402
from tensorflow_serving.apis import prediction_service_pb2_grpc as their_stubs  # noqa: E402

from accel_base.proto import POOL  # noqa: E402
from accel_base.proto.tfserving.tensorflow_serving.apis import (  # noqa: E402
    model_service_pb2_grpc,
    prediction_service_pb2_grpc,
)
from tests.proto.tfserving_sides import OUR_SIDE, THEIR_SIDE  # noqa: E402

# ---------------------------------------------------------------------------- messages


def _tensor(m: SimpleNamespace) -> Message:
    """A TensorProto with every one of its fields set."""
    t = m.tensor.TensorProto(dtype=m.types.DT_FLOAT, version_number=3)
    t.tensor_shape.dim.add(size=2, name="batch")
    t.tensor_shape.dim.add(size=-1)
    t.tensor_content = bytes(range(16))
    t.half_val.extend([0x3C00, 0xBC00])
    t.float_val.extend([0.5, -1.25, 3e38])
    t.double_val.extend([1e300, -0.125])
    t.int_val.extend([-(2**31), 7, 2**31 - 1])
    t.string_val.extend([b"\x00\xff", b"caf\xc3\xa9"])
    t.scomplex_val.extend([1.0, -2.0])
    t.int64_val.extend([-(2**63), 2**40])
    t.bool_val.extend([True, False, True])
    t.dcomplex_val.extend([0.25, 4.0])
    t.uint32_val.extend([2**32 - 1, 0])
    t.uint64_val.extend([2**64 - 1, 1])
    t.float8_val = b"\x38\xb8"
    handle = t.resource_handle_val.add(
        device="/cpu:0", container="c", name="var", hash_code=2**64 - 3, maybe_type_name="T"
    )
    spec = handle.dtypes_and_shapes.add(dtype=m.types.DT_INT64)
    spec.shape.unknown_rank = True
    variant = t.variant_val.add(type_name="tensorflow::Tensor", metadata=b"\x01")
    variant.tensors.add(dtype=m.types.DT_STRING).string_val.append(b"inner")
    return t


def _int_tensor(m: SimpleNamespace) -> Message:
    t = m.tensor.TensorProto(dtype=m.types.DT_INT64)
    t.tensor_shape.dim.add(size=3)
    t.int64_val.extend([1, 2, 3])
    return t


def _example(m: SimpleNamespace, seed: int = 0) -> Message:
    e = m.example.Example()
    features = e.features.feature
    features["image/encoded"].bytes_list.value.extend([b"\x89PNG", b""])
    features["score"].float_list.value.extend([0.25 + seed, -1.5])
    features["ids"].int64_list.value.extend([-(2**63), seed, 2**63 - 1])
    features["empty"].SetInParent()
    return e


def _sequence_example(m: SimpleNamespace) -> Message:
    s = m.example.SequenceExample()
    s.context.feature["user"].bytes_list.value.append(b"u1")
    frames = s.feature_lists.feature_list["frames"]
    frames.feature.add().float_list.value.extend([1.0, 2.0])
    frames.feature.add().int64_list.value.append(5)
    s.feature_lists.feature_list["none"].SetInParent()
    return s


def _predict_request(m: SimpleNamespace) -> Message:
    r = m.predict.PredictRequest(output_filter=["scores", "classes"], client_id=b"\x00c")
    r.model_spec.CopyFrom(m.model.ModelSpec(name="digits", signature_name="serving_default"))
    r.model_spec.version.value = 2
    r.inputs["images"].CopyFrom(_tensor(m))
    r.inputs["ids"].CopyFrom(_int_tensor(m))
    r.predict_streamed_options.request_state = 2
    r.predict_streamed_options.split_dimensions["images"] = 0
    r.predict_streamed_options.return_single_response = True
    options = r.request_options
    options.client_id = b"opt"
    options.deterministic_mode = 1
    options.return_additional_arrays_from_prefill = False
    options.return_stoptokens.extend([1, 2])
    options.return_all_stoptokens = True
    options.max_cache_length = 4096
    options.handshake.estimated_payload_bytes = 1 << 20
    return r


def _predict_response(m: SimpleNamespace) -> Message:
    r = m.predict.PredictResponse()
    r.model_spec.CopyFrom(m.model.ModelSpec(name="digits", version_label="stable"))
    r.outputs["scores"].CopyFrom(_tensor(m))
    r.outputs["classes"].CopyFrom(_int_tensor(m))
    return r


def _classification_request(m: SimpleNamespace) -> Message:
    r = m.classification.ClassificationRequest()
    r.model_spec.CopyFrom(m.model.ModelSpec(name="census", signature_name="classify"))
    r.model_spec.version.value = 7
    with_context = r.input.example_list_with_context
    with_context.examples.extend([_example(m, 1), _example(m, 2)])
    with_context.context.CopyFrom(_example(m, 3))
    return r


def _classification_response(m: SimpleNamespace) -> Message:
    r = m.classification.ClassificationResponse()
    r.model_spec.CopyFrom(m.model.ModelSpec(name="census", signature_name="classify"))
    first = r.result.classifications.add()
    first.classes.add(label="<=50K", score=0.75)
    first.classes.add(label=">50K", score=0.25)
    r.result.classifications.add().classes.add(label="", score=-1.0)
    return r


def _regression_request(m: SimpleNamespace) -> Message:
    r = m.regression.RegressionRequest()
    r.model_spec.name = "prices"
    r.input.example_list.examples.extend([_example(m), _example(m, 5)])
    return r


def _regression_response(m: SimpleNamespace) -> Message:
    r = m.regression.RegressionResponse()
    r.model_spec.CopyFrom(m.model.ModelSpec(name="prices"))
    r.model_spec.version.value = 1
    r.result.regressions.add(value=3.5)
    r.result.regressions.add(value=-0.0)
    return r


def _multi_inference_request(m: SimpleNamespace) -> Message:
    r = m.inference.MultiInferenceRequest()
    r.tasks.add(method_name="tensorflow/serving/classify").model_spec.name = "census"
    regress = r.tasks.add(method_name="tensorflow/serving/regress")
    regress.model_spec.CopyFrom(m.model.ModelSpec(name="census", signature_name="regress"))
    r.input.example_list.examples.append(_example(m))
    return r


def _multi_inference_response(m: SimpleNamespace) -> Message:
    r = m.inference.MultiInferenceResponse()
    classified = r.results.add()
    classified.model_spec.name = "census"
    classified.classification_result.classifications.add().classes.add(label="a", score=1)
    r.results.add().regression_result.regressions.add(value=2.0)
    return r


def _signature_def_map(m: SimpleNamespace) -> Message:
    signatures = m.metadata.SignatureDefMap()
    predict = signatures.signature_def["serving_default"]
    predict.method_name = "tensorflow/serving/predict"
    image = predict.inputs["images"]
    image.name, image.dtype = "serving_default_images:0", m.types.DT_FLOAT
    image.tensor_shape.dim.add(size=-1)
    image.tensor_shape.dim.add(size=28)
    sparse = predict.inputs["sparse"]
    sparse.coo_sparse.values_tensor_name = "v:0"
    sparse.coo_sparse.indices_tensor_name = "i:0"
    sparse.coo_sparse.dense_shape_tensor_name = "s:0"
    sparse.dtype = m.types.DT_INT64
    ragged = predict.inputs["ragged"]
    ragged.composite_tensor.type_spec.type_spec_class = 3  # RAGGED_TENSOR_SPEC
    ragged.composite_tensor.type_spec.type_spec_class_name = "RaggedTensorSpec"
    ragged.composite_tensor.type_spec.num_flat_components = 2
    state = ragged.composite_tensor.type_spec.type_state.tuple_value.values
    state.add().tensor_shape_value.dim.add(size=-1)
    state.add().tensor_dtype_value = m.types.DT_FLOAT
    state.add().int64_value = -1
    state.add().none_value.SetInParent()
    state.add().dict_value.fields["k"].string_value = "v"
    state.add().tensor_spec_value.name = "spec"
    bounded = state.add().bounded_tensor_spec_value
    bounded.minimum.CopyFrom(_int_tensor(m))
    named = state.add().named_tuple_value
    named.name = "Pair"
    named.values.add(key="a").value.bool_value = True
    state.add().list_value.values.add().float64_value = 0.5
    ragged.composite_tensor.components.add(name="values:0", dtype=m.types.DT_FLOAT)
    predict.outputs["scores"].name = "StatefulPartitionedCall:0"
    predict.outputs["scores"].dtype = m.types.DT_FLOAT
    predict.defaults["ids"].CopyFrom(_int_tensor(m))
    signatures.signature_def["classify"].method_name = "tensorflow/serving/classify"
    return signatures


def _saved_model(m: SimpleNamespace) -> Message:
    model = m.saved_model.SavedModel(saved_model_schema_version=1)
    graph = model.meta_graphs.add()
    graph.meta_info_def.meta_graph_version = "v2.21.0"
    graph.meta_info_def.tags.append("serve")
    graph.meta_info_def.tensorflow_version = "2.21.0"
    graph.meta_info_def.tensorflow_git_version = "unknown"
    for name, signature in _signature_def_map(m).signature_def.items():
        graph.signature_def[name].CopyFrom(signature)
    return model


def _metadata_request(m: SimpleNamespace) -> Message:
    r = m.metadata.GetModelMetadataRequest(metadata_field=["signature_def"])
    r.model_spec.name = "digits"
    return r


def _metadata_response(m: SimpleNamespace) -> Message:
    r = m.metadata.GetModelMetadataResponse()
    r.model_spec.CopyFrom(m.model.ModelSpec(name="digits"))
    r.model_spec.version.value = 2
    # Deterministic: the map entries in the packed bytes in one order on both sides.
    r.metadata["signature_def"].Pack(_signature_def_map(m), deterministic=True)
    return r


def _status_request(m: SimpleNamespace) -> Message:
    r = m.status.GetModelStatusRequest()
    r.model_spec.name = "digits"
    r.model_spec.version_label = "canary"
    return r


def _status_response(m: SimpleNamespace) -> Message:
    r = m.status.GetModelStatusResponse()
    r.model_version_status.add(version=2, state=m.status.ModelVersionStatus.AVAILABLE)
    failed = r.model_version_status.add(version=3, state=m.status.ModelVersionStatus.END)
    failed.status.error_code = m.error_codes.NOT_FOUND
    failed.status.error_message = "no SavedModel in version 3"
    return r


_MODEL_SERVER_CONFIG = """
model_config_list {
  config {
    name: "digits"
    base_path: "/models/digits"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 versions: 2 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
    logging_config {
      log_collector_config { type: "file" filename_prefix: "/tmp/log" }
      sampling_config {
        sampling_rate: 0.5
        attributes: 3
        per_task_sampling_configs { dc: "eu" task_index: 0 sampling_rate: 0.1 }
      }
    }
  }
  config {
    name: "latest" base_path: "/models/l" model_version_policy { latest { num_versions: 2 } }
  }
  config {
    name: "every" base_path: "/models/e" model_type: TENSORFLOW model_version_policy { all {} }
  }
}
"""


def _reload_request(m: SimpleNamespace) -> Message:
    r = m.management.ReloadConfigRequest(metric_names=[":tensorflow:serving:load_attempt_count"])
    text_format.Parse(_MODEL_SERVER_CONFIG, r.config)
    return r


def _reload_response(m: SimpleNamespace) -> Message:
    r = m.management.ReloadConfigResponse()
    r.status.error_code = 0
    r.metric.add(name="loads", int64_value_increase=2)
    r.metric.add(name="none")
    return r


def _prediction_log(m: SimpleNamespace) -> Message:
    log = m.prediction_log.PredictionLog()
    log.log_metadata.model_spec.name = "digits"
    log.log_metadata.saved_model_tags.append("serve")
    log.log_metadata.timestamp_secs = 1_700_000_000
    log.log_metadata.sampling_config.sampling_rate = 1.0
    log.predict_log.request.CopyFrom(_predict_request(m))
    log.predict_log.response.CopyFrom(_predict_response(m))
    return log


BUILDERS: dict[str, Callable[[SimpleNamespace], Message]] = {
    "tensor": _tensor,
    "example": _example,
    "sequence_example": _sequence_example,
    "predict_request": _predict_request,
    "predict_response": _predict_response,
    "classification_request": _classification_request,
    "classification_response": _classification_response,
    "regression_request": _regression_request,
    "regression_response": _regression_response,
    "multi_inference_request": _multi_inference_request,
    "multi_inference_response": _multi_inference_response,
    "signature_def_map": _signature_def_map,
    "saved_model": _saved_model,
    "metadata_request": _metadata_request,
    "metadata_response": _metadata_response,
    "status_request": _status_request,
    "status_response": _status_response,
    "reload_request": _reload_request,
    "reload_response": _reload_response,
    "prediction_log": _prediction_log,
}


def _json(message: Message, pool: descriptor_pool.DescriptorPool) -> Any:
    # Through json: an Any's object is an OrderedDict, "@type" where it happens to come.
    return json.loads(json_format.MessageToJson(message, descriptor_pool=pool))


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_each_side_reads_what_the_other_writes(build):
    ours, theirs = build(OUR_SIDE), build(THEIR_SIDE)
    assert ours.DESCRIPTOR.full_name == theirs.DESCRIPTOR.full_name
    assert ours.DESCRIPTOR.file.pool is POOL
    # A field of another number or type would land in the unknown fields (or not parse).
    assert type(theirs).FromString(ours.SerializeToString()) == theirs
    assert type(ours).FromString(theirs.SerializeToString()) == ours
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )
    # The same JSON (json_name included), an Any's contents resolved in each side's pool.
    as_json = _json(ours, POOL)
    assert as_json == _json(theirs, descriptor_pool.Default())
    # (Compared as JSON again: parsed, an Any is packed again, its map entries in any order.)
    assert (
        _json(json_format.ParseDict(as_json, type(ours)(), descriptor_pool=POOL), POOL) == as_json
    )
    assert text_format.MessageToString(ours) == text_format.MessageToString(theirs)


def test_the_signatures_unpack_from_the_stubs_metadata():
    theirs = _metadata_response(THEIR_SIDE)
    ours = OUR_SIDE.metadata.GetModelMetadataResponse.FromString(theirs.SerializeToString())
    packed = ours.metadata["signature_def"]
    assert packed.type_url == "type.googleapis.com/tensorflow.serving.SignatureDefMap"
    signatures = OUR_SIDE.metadata.SignatureDefMap()
    assert packed.Unpack(signatures)
    assert signatures == _signature_def_map(OUR_SIDE)
    assert signatures.signature_def["serving_default"].inputs["ragged"].WhichOneof("encoding") == (
        "composite_tensor"
    )


def test_a_saved_model_reads_for_its_tags_and_signatures():
    theirs = _saved_model(THEIR_SIDE)
    graph = theirs.meta_graphs[0]
    graph.graph_def.node.add(name="x", op="Placeholder")  # what ours skip
    graph.meta_info_def.stripped_default_attrs = True
    graph.collection_def["c"].bytes_list.value.append(b"v")
    ours = OUR_SIDE.saved_model.SavedModel.FromString(theirs.SerializeToString())
    assert list(ours.meta_graphs[0].meta_info_def.tags) == ["serve"]
    assert ours.meta_graphs[0].signature_def == _saved_model(OUR_SIDE).meta_graphs[0].signature_def


def test_a_status_is_written_in_json_as_tf_serving_writes_it():
    as_json = json_format.MessageToDict(_status_response(OUR_SIDE))
    assert as_json["model_version_status"][1]["status"] == {
        "error_code": "NOT_FOUND",
        "error_message": "no SavedModel in version 3",
    }


# --------------------------------------------------------------------- text files


def test_a_model_config_file_reads_the_same():
    ours = text_format.Parse(_MODEL_SERVER_CONFIG, OUR_SIDE.server_config.ModelServerConfig())
    theirs = text_format.Parse(_MODEL_SERVER_CONFIG, THEIR_SIDE.server_config.ModelServerConfig())
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )
    policy = ours.model_config_list.config[0].model_version_policy
    assert policy.DESCRIPTOR.full_name == (
        "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy"
    )
    assert list(policy.specific.versions) == [1, 2]
    assert ours.model_config_list.config[2].model_version_policy.WhichOneof("policy_choice") == (
        "all"
    )


def test_a_batching_parameters_file_reads():
    from accel_base.proto.tfserving.tensorflow_serving.servables.tensorflow import (
        session_bundle_config_pb2,
    )

    text = """
    max_batch_size { value: 128 }
    batch_timeout_micros { value: 1000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 8 }
    thread_pool_name { value: "batch_threads" }
    enable_large_batch_splitting { value: true }
    max_execution_batch_size { value: 32 }
    allowed_batch_sizes: 8
    allowed_batch_sizes: 32
    allowed_batch_sizes: 128
    pad_variable_length_inputs: true
    """
    params = text_format.Parse(text, session_bundle_config_pb2.BatchingParameters())
    assert params.max_batch_size.value == 128
    assert params.batch_timeout_micros.value == 1000
    assert params.max_enqueued_batches.value == 100
    assert params.num_batch_threads.value == 8
    assert params.thread_pool_name.value == "batch_threads"
    assert params.enable_large_batch_splitting.value is True
    assert params.max_execution_batch_size.value == 32
    assert list(params.allowed_batch_sizes) == [8, 32, 128]
    assert params.pad_variable_length_inputs is True
    unset = session_bundle_config_pb2.BatchingParameters()
    assert not unset.HasField("max_batch_size")  # the wrappers tell "not given" from 0


def test_monitoring_and_ssl_config_files_read():
    from accel_base.proto.tfserving.tensorflow_serving.config import (
        monitoring_config_pb2,
        ssl_config_pb2,
    )

    monitoring = text_format.Parse(
        'prometheus_config { enable: true, path: "/metrics" }',
        monitoring_config_pb2.MonitoringConfig(),
    )
    assert monitoring.prometheus_config.enable
    assert monitoring.prometheus_config.path == "/metrics"
    ssl = text_format.Parse(
        'server_key: "KEY" server_cert: "CERT" custom_ca: "CA" client_verify: true',
        ssl_config_pb2.SSLConfig(),
    )
    assert (ssl.server_key, ssl.server_cert, ssl.custom_ca, ssl.client_verify) == (
        "KEY", "CERT", "CA", True,
    )  # fmt: skip


# ------------------------------------------------------------------------------- calls


class _Prediction(prediction_service_pb2_grpc.PredictionServiceServicer):
    def Predict(self, request, context):  # noqa: N802
        response = OUR_SIDE.predict.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        for name, tensor in request.inputs.items():
            response.outputs[name].CopyFrom(tensor)
        return response

    def GetModelMetadata(self, request, context):  # noqa: N802
        return _metadata_response(OUR_SIDE)


class _Models(model_service_pb2_grpc.ModelServiceServicer):
    def GetModelStatus(self, request, context):  # noqa: N802
        return _status_response(OUR_SIDE)


def test_the_published_stubs_call_a_server_of_ours():
    from tensorflow_serving.apis import model_service_pb2_grpc as their_model_stubs

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(_Prediction(), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(_Models(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            predicted = their_stubs.PredictionServiceStub(channel).Predict(
                _predict_request(THEIR_SIDE), timeout=10
            )
            assert dict(predicted.outputs) == dict(_predict_request(THEIR_SIDE).inputs)
            assert predicted.model_spec.version.value == 2
            metadata = their_stubs.PredictionServiceStub(channel).GetModelMetadata(
                _metadata_request(THEIR_SIDE), timeout=10
            )
            assert metadata == _metadata_response(THEIR_SIDE)
            status = their_model_stubs.ModelServiceStub(channel).GetModelStatus(
                _status_request(THEIR_SIDE), timeout=10
            )
            assert status == _status_response(THEIR_SIDE)
            with pytest.raises(grpc.RpcError) as raised:  # not implemented by _Prediction
                their_stubs.PredictionServiceStub(channel).Classify(
                    _classification_request(THEIR_SIDE), timeout=10
                )
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(None)
