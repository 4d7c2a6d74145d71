"""One remote endpoint over gRPC: the V2 GRPCInferenceService, tensors as raw contents.

A channel is one HTTP/2 connection that carries every call of every instance thread at
once (grpc channels are thread-safe), and reconnects by itself within a second of the
remote coming back.
"""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np

from accel_base.datatypes import from_raw, to_raw
from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from accel_base.proto import grpc_service_pb2 as pb
from accel_base.proto import grpc_service_pb2_grpc as pb_grpc
from accel_base.tensor_contents import contents_to_array
from backends.remote.failures import Lost, NotSent, answered_error, malformed
from backends.remote.settings import Endpoint, RemoteSettings

# How grpc's own message begins when it had no connection to send on (nothing was sent).
# Matched at the start only: a remote's answer may say anything in its details.
_NOT_CONNECTED = "failed to connect to all addresses"
# How grpc's own message begins for a connection that broke under a call (which may
# have run); at the start only, as above.
_CONNECTION_LOST = ("socket closed", "connection reset", "broken pipe", "goaway",
                    "keepalive watchdog", "stream removed", "recvmsg", "sendmsg")  # fmt: skip


class GrpcClient:
    def __init__(self, endpoint: Endpoint, settings: RemoteSettings) -> None:
        self.endpoint = str(endpoint)
        self._settings = settings
        options = [
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", -1),
            # Back within a connect timeout or two of the remote's return, not grpc's
            # default of up to 2 min.
            ("grpc.initial_reconnect_backoff_ms", 100),
            # grpc takes this as a connection attempt's shortest deadline too.
            ("grpc.min_reconnect_backoff_ms", round(settings.connect_timeout_s * 1000)),
            ("grpc.max_reconnect_backoff_ms", max(1000, round(settings.connect_timeout_s * 1000))),
            # A remote that vanished without a reset is noticed within seconds, not at
            # the next call's deadline.
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        if endpoint.tls:
            credentials = grpc.ssl_channel_credentials()
            self._channel = grpc.secure_channel(endpoint.address, credentials, options)
        else:
            self._channel = grpc.insecure_channel(endpoint.address, options)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        self._state = grpc.ChannelConnectivity.IDLE
        self._channel.subscribe(self._on_state, try_to_connect=True)

    def _on_state(self, state: grpc.ChannelConnectivity) -> None:
        self._state = state

    def _call(self, method: str, request: Any, timeout_s: float) -> Any:
        # A call would wait out its whole deadline for a connection that is not coming:
        # at most connect_timeout_s here, and then it was never sent.
        if self._state != grpc.ChannelConnectivity.READY:
            if self._state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                raise NotSent(f"{self.endpoint}: its connection is failing (refused or reset)")
            waited = self._settings.connect_timeout_s
            ready = grpc.channel_ready_future(self._channel)  # an idle channel connects
            try:
                ready.result(timeout=waited)
            except grpc.FutureTimeoutError:
                ready.cancel()  # else it stays subscribed to the channel
                raise NotSent(f"{self.endpoint}: no connection within {waited:g} s") from None
        try:
            return getattr(self._stub, method)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""
            if code == grpc.StatusCode.UNAVAILABLE:
                if details.lower().startswith(_NOT_CONNECTED):
                    raise NotSent(f"{self.endpoint}: {details}") from None
                if details.lower().startswith(_CONNECTION_LOST):
                    raise Lost(f"{self.endpoint}: {details}") from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                # Slow, not gone: this request fails, the endpoint stays in.
                raise Unavailable(
                    f"remote {self.endpoint} did not answer within {timeout_s:g} s "
                    "(parameter timeout_ms)"
                ) from None
            raise answered_error(code.name, self.endpoint, details) from None

    def ready(self) -> None:
        """Returns when the remote model is ready; raises NotSent, Lost or a GatewayError."""
        s = self._settings
        request = pb.ModelReadyRequest(name=s.model, version=s.version)
        if not self._call("ModelReady", request, s.connect_timeout_s).ready:
            raise answered_error("UNAVAILABLE", self.endpoint, f"model '{s.model}' is not ready")

    def metadata(self) -> dict[str, Any]:
        """The remote model's V2 metadata, as the HTTP JSON has it."""
        s = self._settings
        request = pb.ModelMetadataRequest(name=s.model, version=s.version)
        answer = self._call("ModelMetadata", request, s.connect_timeout_s)

        def tensors(declared) -> list[dict[str, Any]]:
            return [
                {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in declared
            ]

        return {"inputs": tensors(answer.inputs), "outputs": tensors(answer.outputs)}

    def max_batch_size(self) -> int | None:
        """The remote config's max_batch_size, or None where the server has no config call."""
        s = self._settings
        request = pb.ModelConfigRequest(name=s.model, version=s.version)
        try:
            return self._call("ModelConfig", request, s.connect_timeout_s).config.max_batch_size
        except GatewayError:
            return None

    def infer(
        self, inputs: dict[str, np.ndarray], datatypes: dict[str, str], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        s = self._settings
        request = pb.ModelInferRequest(model_name=s.model, model_version=s.version)
        for name, array in inputs.items():
            request.inputs.add(name=name, datatype=datatypes[name], shape=array.shape)
            request.raw_input_contents.append(to_raw(array, datatypes[name]))
        for name in output_names:
            request.outputs.add(name=name)
        answer = self._call("ModelInfer", request, s.timeout_s)
        return self._outputs(answer)

    def _outputs(self, answer: pb.ModelInferResponse) -> dict[str, np.ndarray]:
        raw = answer.raw_output_contents
        if raw and len(raw) != len(answer.outputs):
            raise malformed(self.endpoint, f"{len(answer.outputs)} outputs, {len(raw)} raw")
        outputs = {}
        for index, tensor in enumerate(answer.outputs):
            shape, where = tuple(tensor.shape), f"output '{tensor.name}'"
            try:
                if raw:
                    outputs[tensor.name] = from_raw(raw[index], tensor.datatype, shape, where)
                else:
                    outputs[tensor.name] = contents_to_array(
                        tensor.contents, tensor.datatype, shape, where
                    )
            except (InvalidArgument, KeyError, ValueError) as exc:
                raise malformed(self.endpoint, str(exc)) from None
        return outputs

    def close(self) -> None:
        self._channel.unsubscribe(self._on_state)
        self._channel.close()
