"""The component schemas of the OpenAPI document (gateway.protocols.http.openapi): the JSON bodies
of the V2 HTTP routes, as the handlers read and write them."""

from __future__ import annotations

from typing import Any

from accel_base.datatypes import ALL_DATATYPES, MAX_DIMS

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


# Where a field is optional, null is taken as absent.
_PARAMETERS: Schema = {
    "type": ["object", "null"],
    "description": "Parameters: string, number or boolean values.",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}
_TENSOR_META = {
    "type": "object",
    "required": ["name", "datatype", "shape"],
    "properties": {
        "name": {"type": "string"},
        "datatype": {"type": "string", "enum": list(ALL_DATATYPES)},
        "shape": {"type": "array", "items": {"type": "integer"}},
    },
}
_DURATION = {
    "type": "object",
    "required": ["count", "ns"],
    "properties": {"count": {"type": "integer"}, "ns": {"type": "integer"}},
}
_SHM_REGION = {
    "type": "object",
    "required": ["name", "key", "offset", "byte_size"],
    "properties": {
        "name": {"type": "string"},
        "key": {"type": "string"},
        "offset": {"type": "integer"},
        "byte_size": {"type": "integer"},
    },
}

SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
    "Parameters": _PARAMETERS,
    "ServerMetadata": {
        "type": "object",
        "required": ["name", "version", "extensions"],
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "extensions": {"type": "array", "items": {"type": "string"}},
        },
    },
    "ModelMetadata": {
        "type": "object",
        "required": ["name", "versions", "platform", "inputs", "outputs"],
        "properties": {
            "name": {"type": "string"},
            "versions": {"type": "array", "items": {"type": "string"}},
            "platform": {"type": "string"},
            "inputs": {"type": "array", "items": _TENSOR_META},
            "outputs": {"type": "array", "items": _TENSOR_META},
        },
    },
    "ModelConfig": {
        "type": "object",
        "description": "Triton's ModelConfig (model_config.proto) in its JSON form.",
        "properties": {
            "name": {"type": "string"},
            "platform": {"type": "string"},
            "backend": {"type": "string"},
            "max_batch_size": {"type": "integer"},
            "input": {"type": "array", "items": {"type": "object"}},
            "output": {"type": "array", "items": {"type": "object"}},
        },
    },
    "ModelStatistics": {
        "type": "object",
        "required": ["model_stats"],
        "properties": {
            "model_stats": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "version", "inference_count", "execution_count"],
                    "properties": {
                        "name": {"type": "string"},
                        "version": {"type": "string"},
                        "last_inference": {"type": "integer"},
                        "inference_count": {"type": "integer"},
                        "execution_count": {"type": "integer"},
                        "inference_stats": {
                            "type": "object",
                            "additionalProperties": _DURATION,
                        },
                        "batch_stats": {"type": "array", "items": {"type": "object"}},
                    },
                },
            }
        },
    },
    "InferInput": {
        "type": "object",
        "required": ["name", "shape", "datatype"],
        "description": (
            "One input tensor. Its values are in 'data' (JSON, flat or nested row-major), or "
            "in the binary part of the body (parameter binary_data_size), or in a registered "
            "system shared-memory region (parameters shared_memory_region, "
            "shared_memory_byte_size and shared_memory_offset)."
        ),
        "properties": {
            "name": {"type": "string"},
            "shape": {
                "type": "array",
                "maxItems": MAX_DIMS,
                "items": {"type": "integer", "minimum": 0},
            },
            "datatype": {"type": "string", "enum": list(ALL_DATATYPES)},
            "parameters": ref("Parameters"),
            "data": {
                "type": ["array", "null"],
                "description": (
                    "BOOL: true/false; integer datatypes: JSON integers in the type's range "
                    "(2.0 is refused); FP16/FP32/FP64: numbers, NaN and Infinity included; "
                    "BYTES: strings. BF16 only as binary data."
                ),
            },
        },
    },
    "InferRequestedOutput": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "parameters": ref("Parameters")},
    },
    "InferRequest": {
        "type": "object",
        "required": ["inputs"],
        "examples": [
            {
                "id": "42",
                "inputs": [
                    {"name": "INPUT0", "shape": [1, 2], "datatype": "INT32", "data": [1, 2]},
                    {"name": "INPUT1", "shape": [1, 2], "datatype": "INT32", "data": [[3, 4]]},
                ],
                "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
            }
        ],
        "properties": {
            "id": {"type": ["string", "null"]},
            "parameters": ref("Parameters"),
            "inputs": {"type": "array", "items": ref("InferInput")},
            "outputs": {"type": ["array", "null"], "items": ref("InferRequestedOutput")},
        },
    },
    "InferResponse": {
        "type": "object",
        "required": ["model_name", "model_version", "outputs"],
        "properties": {
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "id": {"type": "string"},
            "parameters": ref("Parameters"),
            "outputs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "datatype", "shape"],
                    "properties": {
                        **_TENSOR_META["properties"],
                        "parameters": ref("Parameters"),
                        "data": {"type": "array"},
                    },
                },
            },
        },
    },
    "RepositoryIndex": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name", "version", "state", "reason"],
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "state": {"type": "string"},
                "reason": {"type": "string"},
                "memory": {
                    "description": "A loaded version's devices and bytes (gateway/core/placement)",
                    "type": "object",
                    "properties": {
                        "devices": {"type": "array", "items": {"type": "string"}},
                        "predicted_bytes": {"type": "integer"},
                        "measured_bytes": {"type": ["integer", "null"]},
                    },
                },
            },
        },
    },
    "LogSettings": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "log_file": {"type": "string", "description": "Always empty: standard error."},
            "log_info": {"type": "boolean"},
            "log_warning": {"type": "boolean"},
            "log_error": {"type": "boolean"},
            "log_verbose_level": {"type": "integer", "minimum": 0, "maximum": 4294967295},
            "log_format": {"enum": ["default", "ISO8601", "json"]},
        },
    },
    "TraceSettings": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "trace_level": {
                "type": "array",
                "items": {"enum": ["OFF", "TIMESTAMPS", "TENSORS"]},
            },
            "trace_rate": {"type": "string", "description": "1 of every N requests is traced."},
            "trace_count": {"type": "string", "description": "Traces left; -1: no limit."},
            "log_frequency": {"type": "string"},
            "trace_file": {"const": "", "description": "Always empty: spans go over OTLP."},
            "trace_mode": {"const": "opentelemetry"},
        },
    },
    "TraceSettingsChange": {
        "type": "object",
        "description": "Settings to change; a model's setting given null is cleared.",
        "additionalProperties": {
            "anyOf": [
                {"type": "string"},
                {"type": "integer"},
                {"type": "null"},
                {"type": "array", "items": {"type": "string"}},
            ]
        },
    },
    "SystemSharedMemoryStatus": {"type": "array", "items": _SHM_REGION},
    "CudaSharedMemoryStatus": {"type": "array", "maxItems": 0},
}
