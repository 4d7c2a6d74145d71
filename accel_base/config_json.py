"""A model config as Triton's JSON shows it (the HTTP config route, the Python backend's
`args["model_config"]`): every field present, 64-bit integers as numbers."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, json_format

from accel_base.proto import model_config_pb2 as mc


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's HTTP API shows it: every field, int64 values as numbers."""
    data = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _int64_as_numbers(config, data)


def _int64_as_numbers(message, data: dict[str, Any]) -> dict[str, Any]:
    # Protobuf's JSON writes 64-bit integers as strings; Triton's clients expect numbers.
    for field in message.DESCRIPTOR.fields:
        if field.name not in data:
            continue
        value = getattr(message, field.name)
        if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                key_field = field.message_type.fields_by_name["key"]
                value_field = field.message_type.fields_by_name["value"]
                if value_field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
                    # JSON map keys are strings; integer-keyed maps need the int back.
                    as_key = (
                        int
                        if key_field.cpp_type != descriptor.FieldDescriptor.CPPTYPE_STRING
                        else str
                    )
                    data[field.name] = {
                        key: _int64_as_numbers(value[as_key(key)], item)
                        for key, item in data[field.name].items()
                    }
            elif field.is_repeated:
                data[field.name] = [
                    _int64_as_numbers(item, item_data)
                    for item, item_data in zip(value, data[field.name], strict=True)
                ]
            else:
                data[field.name] = _int64_as_numbers(value, data[field.name])
        elif field.cpp_type in (
            descriptor.FieldDescriptor.CPPTYPE_INT64,
            descriptor.FieldDescriptor.CPPTYPE_UINT64,
        ):
            if field.is_repeated:
                data[field.name] = [int(item) for item in data[field.name]]
            else:
                data[field.name] = int(data[field.name])
    return data
