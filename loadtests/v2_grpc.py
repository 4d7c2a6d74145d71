"""The V2 gRPC user: `inference.GRPCInferenceService/ModelInfer` over grpcio.

Locust runs users as gevent greenlets; grpcio cooperates with gevent only after
`grpc.experimental.gevent.init_gevent()`, called here before any channel exists. Each call
is timed here (Locust does not know gRPC) and reported to `events.request` with its latency
in milliseconds and the size of the answer; an RPC error is a failure.

The request message is serialized once per model (from the project's generated stubs) and
sent as bytes, and the answer is kept as bytes: the load generator spends its CPU on calls,
not on protobuf.
"""

from __future__ import annotations

import time
import urllib.parse

import grpc
from grpc.experimental import gevent as grpc_gevent
from locust import User, constant, task
from locust.exception import StopUser

from accel_base.proto import grpc_service_pb2 as pb
from accel_base.proto import grpc_service_pb2_grpc as pb_grpc
from loadtests.common import MetadataError, Prepared, plan_of
from loadtests.inputs import ModelInputs

grpc_gevent.init_gevent()

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
MODEL_INFER = f"/{SERVICE}/ModelInfer"


class GrpcError(Exception):
    """An RPC that ended with a status other than OK: `CODE: details`."""


def infer_request(inputs: ModelInputs) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=inputs.model)
    for tensor in inputs.inputs:
        request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
        request.raw_input_contents.append(tensor.raw)
    for name in inputs.outputs:
        request.outputs.add(name=name)
    return request


def metadata_dict(reply: pb.ModelMetadataResponse) -> dict:
    def tensors(items) -> list[dict]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in items]

    return {"name": reply.name, "inputs": tensors(reply.inputs), "outputs": tensors(reply.outputs)}


class V2GrpcUser(User):
    protocol = "grpc"
    wait_time = constant(0)  # closed loop: the next request as soon as the answer is in

    def on_start(self) -> None:
        self.plan = plan_of(self.environment)
        options = self.plan.options
        host = options.grpc_host or urllib.parse.urlsplit(self.host or "").hostname or "127.0.0.1"
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        self.target = f"{host}:{options.grpc_port}"
        self.timeout = options.request_timeout
        self.channel = grpc.insecure_channel(
            self.target, options=[("grpc.max_receive_message_length", -1)]
        )
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        # Bytes in, bytes out: no per-call protobuf work.
        self.model_infer = self.channel.unary_unary(MODEL_INFER)

    def on_stop(self) -> None:
        self.channel.close()

    def _prepare(self, model: str) -> Prepared:
        try:
            reply = self.stub.ModelMetadata(
                pb.ModelMetadataRequest(name=model), timeout=self.timeout
            )
        except grpc.RpcError as exc:
            raise MetadataError(
                f"ModelMetadata {model} at {self.target}: {exc.code().name}: {exc.details()}"
            ) from None
        request = infer_request(self.plan.inputs(metadata_dict(reply)))
        return Prepared(model, f"ModelInfer {model}", request.SerializeToString(), {}, True)

    def _fire(self, name: str, started: float, length: int, exc: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type="grpc",
            name=name,
            response_time=(time.perf_counter() - started) * 1000.0,
            response_length=length,
            exception=exc,
            context={},
        )

    @task
    def infer(self) -> None:
        model = self.plan.choose()
        started = time.perf_counter()
        try:
            prepared = self.plan.prepared("grpc", model, self._prepare)
        except Exception as exc:  # noqa: BLE001 - reported as a failure, then this user stops
            self._fire(f"ModelMetadata {model}", started, 0, exc)
            raise StopUser() from exc
        started = time.perf_counter()
        try:
            answer = self.model_infer(prepared.payload, timeout=self.timeout)
        except grpc.RpcError as exc:
            self._fire(prepared.name, started, 0, GrpcError(f"{exc.code().name}: {exc.details()}"))
        except Exception as exc:  # noqa: BLE001 - any other error is a failed request too
            self._fire(prepared.name, started, 0, exc)
        else:
            self._fire(prepared.name, started, len(answer), None)
