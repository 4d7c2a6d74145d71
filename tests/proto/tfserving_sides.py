"""Both sides of the TF Serving protos for tests/proto/test_tfserving_*.py: our modules
(accel_base.proto.tfserving) and the published ones (tensorflow-serving-api's and
TensorFlow's), message module by message module. Import it only where
tensorflow_serving imports."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

OURS = "accel_base.proto.tfserving."


def module(proto: str, prefix: str = OURS) -> Any:
    return importlib.import_module(prefix + proto.removesuffix(".proto").replace("/", ".") + "_pb2")


# The modules the messages below are built from: ours, and the stubs' (TensorFlow's).
MODULES = {
    "tensor": "tensorflow.core.framework.tensor_pb2",
    "tensor_shape": "tensorflow.core.framework.tensor_shape_pb2",
    "types": "tensorflow.core.framework.types_pb2",
    "resource_handle": "tensorflow.core.framework.resource_handle_pb2",
    "example": "tensorflow.core.example.example_pb2",
    "feature": "tensorflow.core.example.feature_pb2",
    "meta_graph": "tensorflow.core.protobuf.meta_graph_pb2",
    "struct": "tensorflow.core.protobuf.struct_pb2",
    "saved_model": "tensorflow.core.protobuf.saved_model_pb2",
    "error_codes": "tensorflow.core.protobuf.error_codes_pb2",
    "model": "tensorflow_serving.apis.model_pb2",
    "predict": "tensorflow_serving.apis.predict_pb2",
    "input": "tensorflow_serving.apis.input_pb2",
    "classification": "tensorflow_serving.apis.classification_pb2",
    "regression": "tensorflow_serving.apis.regression_pb2",
    "inference": "tensorflow_serving.apis.inference_pb2",
    "metadata": "tensorflow_serving.apis.get_model_metadata_pb2",
    "status": "tensorflow_serving.apis.get_model_status_pb2",
    "management": "tensorflow_serving.apis.model_management_pb2",
    "prediction_log": "tensorflow_serving.apis.prediction_log_pb2",
    "logging": "tensorflow_serving.apis.logging_pb2",
    "server_config": "tensorflow_serving.config.model_server_config_pb2",
}


def namespace(prefix: str) -> SimpleNamespace:
    return SimpleNamespace(
        **{key: importlib.import_module(prefix + name) for key, name in MODULES.items()}
    )


OUR_SIDE, THEIR_SIDE = namespace(OURS), namespace("")
