"""Our TF Serving protos (protos/tfserving/, accel_base.proto.tfserving) declare what
tensorflow-serving-api 2.21's modules (and TensorFlow's, which they import) do: the same
services and methods, messages, field names, numbers, types, presence and JSON names.
tests/proto/test_tfserving_wire.py holds the messages themselves, both ways.

The stubs register their files in protobuf's default pool, ours are in
accel_base.proto.POOL under the same file names: both load in one process."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("tensorflow_serving.apis.predict_pb2")

from google.protobuf import descriptor_pool  # noqa: E402
from google.protobuf.descriptor import (  # noqa: E402
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    FileDescriptor,
)
from tensorflow_serving.apis import model_service_pb2 as their_model_service  # noqa: E402
from tensorflow_serving.apis import prediction_service_pb2 as their_prediction  # noqa: E402

from accel_base.proto import POOL  # noqa: E402
from accel_base.proto.tfserving.tensorflow_serving.apis import (  # noqa: E402
    model_service_pb2,
    prediction_service_pb2,
)
from gateway.tools.proto.regenerate import TFSERVING_PROTOS  # noqa: E402
from tests.proto.tfserving_sides import OUR_SIDE, module  # noqa: E402

# ------------------------------------------------------------------------------ schema

# Fields of the published messages that ours leave out; parsed, they are kept as unknown
# fields. SessionRun's would bring most of TensorFlow's config.proto; of a SavedModel's
# MetaGraphDef, the tags and signatures are read.
LEFT_OUT = {
    "tensorflow.serving.SessionRunRequest": {"options"},
    "tensorflow.serving.SessionRunResponse": {"metadata"},
    "tensorflow.MetaGraphDef": {
        "graph_def", "saver_def", "collection_def", "asset_file_def", "object_graph_def",
    },
    "tensorflow.MetaGraphDef.MetaInfoDef": {
        "stripped_op_list", "any_info", "stripped_default_attrs", "function_aliases",
    },
}  # fmt: skip
# Messages tensorflow-serving-api does not ship modules of: checked against the published
# .proto files' field lists below instead.
NOT_IN_STUBS = {
    "tensorflow.serving.BatchingParameters",
    "tensorflow.serving.MonitoringConfig",
    "tensorflow.serving.PrometheusConfig",
    "tensorflow.serving.SSLConfig",
}


def _field_shape(field: Any) -> tuple:
    return (
        field.number,
        field.type,
        field.is_repeated,
        field.has_presence,
        field.message_type.full_name if field.message_type else None,
        field.enum_type.full_name if field.enum_type else None,
        field.containing_oneof.name if field.containing_oneof else None,
        field.json_name,
        field.is_packed,
    )


def _message_shape(message: Descriptor, left_out: set[str] = frozenset()) -> dict[str, Any]:
    fields = [f for f in message.fields if f.name not in left_out]
    # Less the map entries of the fields left out.
    used = {f.message_type.full_name for f in fields if f.message_type}
    nested = [
        n for n in message.nested_types if not n.GetOptions().map_entry or n.full_name in used
    ]
    return {
        "fields": {f.name: _field_shape(f) for f in fields},
        "oneofs": sorted(o.name for o in message.oneofs),
        "map_entry": message.GetOptions().map_entry,
        "nested": sorted(n.name for n in nested),
        "enums": sorted(e.name for e in message.enum_types),
    }


def _enum_shape(enum: EnumDescriptor) -> dict[str, int]:
    return {value.name: value.number for value in enum.values}


def _declared(file: FileDescriptor) -> dict[str, Descriptor | EnumDescriptor]:
    """The messages and enums `file` declares (or re-exports: TensorFlow 2.21's
    error_codes.proto, xla's), nested ones too, by full name."""
    found: dict[str, Descriptor | EnumDescriptor] = {}

    def message(descriptor: Descriptor) -> None:
        found[descriptor.full_name] = descriptor
        for enum in descriptor.enum_types:
            found[enum.full_name] = enum
        for nested in descriptor.nested_types:
            message(nested)

    for enum in file.enum_types_by_name.values():
        found[enum.full_name] = enum
    for descriptor in file.message_types_by_name.values():
        message(descriptor)
    for public in file.public_dependencies:
        found |= _declared(public)
    return found


OUR_TYPES = {
    name: descriptor
    for proto in TFSERVING_PROTOS
    for name, descriptor in _declared(module(proto).DESCRIPTOR).items()
}


def test_our_files_are_in_our_pool_under_the_published_names():
    for proto in TFSERVING_PROTOS:
        file = module(proto).DESCRIPTOR
        assert (file.name, file.pool) == (proto, POOL)


@pytest.mark.parametrize("name", sorted(set(OUR_TYPES) - NOT_IN_STUBS))
def test_each_message_and_enum_is_the_published_one(name):
    ours, default = OUR_TYPES[name], descriptor_pool.Default()
    if isinstance(ours, EnumDescriptor):
        theirs = default.FindEnumTypeByName(name)
        assert _enum_shape(ours) == _enum_shape(theirs)
    else:
        theirs = default.FindMessageTypeByName(name)
        left_out = LEFT_OUT.get(name, set())
        assert _message_shape(ours) == _message_shape(theirs, left_out)
        assert {f.name for f in theirs.fields} - {f.name for f in ours.fields} == left_out
    assert ours.file.package == theirs.file.package


# Files of which ours declare a part: of meta_graph.proto the signatures (not the graph),
# and saved_model.proto declares (beside SavedModel) the MetaGraphDef it reads.
PARTIAL = {
    "tensorflow/core/protobuf/meta_graph.proto",
    "tensorflow/core/protobuf/saved_model.proto",
}


def test_our_files_declare_all_the_published_types():
    """Each published file's messages and enums are all ours, but of the PARTIAL ones (and
    ours declare no others: each is a published one, by the test above)."""
    for proto in TFSERVING_PROTOS:
        try:
            theirs = set(_declared(module(proto, "").DESCRIPTOR))
        except ModuleNotFoundError:
            assert proto.endswith(
                ("monitoring_config.proto", "ssl_config.proto", "bundle_config.proto")
            )
            continue  # not in the stubs: PUBLISHED below
        ours = set(_declared(module(proto).DESCRIPTOR))
        assert ours == theirs or proto in PARTIAL, proto
    meta_graph = _declared(OUR_SIDE.meta_graph.DESCRIPTOR)
    assert {"tensorflow.TensorInfo", "tensorflow.SignatureDef"} < set(meta_graph)


_SERVICES = [
    (prediction_service_pb2, their_prediction, "tensorflow.serving.PredictionService"),
    (model_service_pb2, their_model_service, "tensorflow.serving.ModelService"),
]


@pytest.mark.parametrize(("ours", "theirs", "full_name"), _SERVICES)
def test_the_services_are_the_stubs(ours, theirs, full_name):
    def shape(module: Any) -> dict[str, tuple]:
        (service,) = module.DESCRIPTOR.services_by_name.values()
        assert service.full_name == full_name
        return {
            m.name: (m.full_name, m.input_type.full_name, m.output_type.full_name)
            + (m.client_streaming, m.server_streaming)
            for m in service.methods
        }

    assert shape(ours) == shape(theirs)
    methods = {
        "tensorflow.serving.PredictionService": {
            "Classify", "Regress", "Predict", "MultiInference", "GetModelMetadata",
        },
        "tensorflow.serving.ModelService": {"GetModelStatus", "HandleReloadConfigRequest"},
    }  # fmt: skip
    assert set(shape(ours)) == methods[full_name]


# The fields of the messages the stubs do not ship, as TF Serving publishes them:
# name -> (number, type, repeated, message type).
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_INT64, _BOOL = FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_BOOL
_STRING = FieldDescriptor.TYPE_STRING
_I64, _STR = "google.protobuf.Int64Value", "google.protobuf.StringValue"
PUBLISHED = {
    "tensorflow.serving.BatchingParameters": {
        "max_batch_size": (1, _MESSAGE, False, _I64),
        "batch_timeout_micros": (2, _MESSAGE, False, _I64),
        "max_enqueued_batches": (3, _MESSAGE, False, _I64),
        "num_batch_threads": (4, _MESSAGE, False, _I64),
        "thread_pool_name": (5, _MESSAGE, False, _STR),
        "enable_large_batch_splitting": (8, _MESSAGE, False, "google.protobuf.BoolValue"),
        "max_execution_batch_size": (9, _MESSAGE, False, _I64),
        "allowed_batch_sizes": (6, _INT64, True, None),
        "pad_variable_length_inputs": (7, _BOOL, False, None),
    },
    "tensorflow.serving.MonitoringConfig": {
        "prometheus_config": (1, _MESSAGE, False, "tensorflow.serving.PrometheusConfig"),
    },
    "tensorflow.serving.PrometheusConfig": {
        "enable": (1, _BOOL, False, None),
        "path": (2, _STRING, False, None),
    },
    "tensorflow.serving.SSLConfig": {
        "server_key": (1, _STRING, False, None),
        "server_cert": (2, _STRING, False, None),
        "custom_ca": (3, _STRING, False, None),
        "client_verify": (4, _BOOL, False, None),
    },
}


@pytest.mark.parametrize("name", sorted(NOT_IN_STUBS))
def test_the_messages_the_stubs_lack_are_the_published_ones(name):
    fields = {
        f.name: (f.number, f.type, f.is_repeated, f.message_type and f.message_type.full_name)
        for f in OUR_TYPES[name].fields
    }
    assert fields == PUBLISHED[name]
