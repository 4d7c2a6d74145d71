"""Our TorchServe protos (protos/torchserve/) declare what TorchServe 0.12's own do: the
same packages, services and methods (with their streaming), messages, field names,
numbers, types and presence, read from the .proto files in TorchServe's jar."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2

pytest.importorskip("ts")

from torchserve_grpc_support import descriptors  # noqa: E402

from accel_base.proto.torchserve import inference_pb2, management_pb2, status_pb2  # noqa: E402


def _fields(message: descriptor_pb2.DescriptorProto) -> dict[str, Any]:
    shape: dict[str, Any] = {
        field.name: (
            field.number,
            field.label,
            field.type,
            field.type_name,
            field.proto3_optional,
        )  # fmt: skip
        for field in message.field
    }
    shape["map_entry"] = message.options.map_entry
    for nested in message.nested_type:
        shape[nested.name] = _fields(nested)
    return shape


def _shape(file: descriptor_pb2.FileDescriptorProto, only: set[str] | None = None) -> dict:
    messages = {m.name: _fields(m) for m in file.message_type if only is None or m.name in only}
    services = {
        service.name: {
            method.name: (
                method.input_type,
                method.output_type,
                method.client_streaming,
                method.server_streaming,
            )  # fmt: skip
            for method in service.method
        }
        for service in file.service
    }
    return {"package": file.package, "messages": messages, "services": services}


def _ours(module: Any) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(file)
    return file


@pytest.fixture(scope="module")
def theirs(tmp_path_factory) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    return descriptors(tmp_path_factory.mktemp("torchserve-protos"))


@pytest.mark.parametrize(
    "module, name",
    [
        (inference_pb2, "ts_grpc_client/inference.proto"),
        (management_pb2, "ts_grpc_client/management.proto"),
    ],
)
def test_each_service_file_declares_torchserves(theirs, module, name):
    ours = _shape(_ours(module))
    assert ours == _shape(theirs[name])
    assert ours["services"]  # the comparison saw the services and messages
    assert ours["messages"]


def test_the_google_rpc_messages_are_googles(theirs):
    ours = _ours(status_pb2)
    assert _shape(ours, {"Status"}) == _shape(theirs["google/rpc/status.proto"], {"Status"})
    error_info = _shape(theirs["google/rpc/error_details.proto"], {"ErrorInfo"})
    assert _shape(ours, {"ErrorInfo"})["messages"] == error_info["messages"]
