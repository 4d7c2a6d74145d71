"""Calls refused before they exist (H2Server.refuse_early): while the shedder says so, a
ModelInfer call is answered UNAVAILABLE with retry pushback as soon as its headers are
read; its handler never runs and its message is not read; the connection goes on."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import grpc
import hpack

from accel_base.errors import NotFound
from accel_base.proto import grpc_service_pb2 as pb
from benchmarks.h2_floods import call_headers, opening
from gateway.grpc.h2 import frames as f
from gateway.grpc.h2.server import H2Server
from gateway.grpc.service import MODEL_INFER, add_services
from gateway.launch import free_port
from gateway.listeners import listen
from gateway.shedding import REFUSAL


class Shedder:
    def __init__(self) -> None:
        self.refusing = True
        self.asked = 0

    def refuse(self) -> bool:
        self.asked += 1
        return self.refusing

    def check(self) -> None:
        raise AssertionError("a call the frame layer admitted must not be drawn again")


def serve(scenario):
    """`scenario(port, shedder, infers)` in a thread, against the V2 service on a fresh
    H2Server whose core counts the inferences it was asked for."""
    shedder, infers = Shedder(), []

    async def infer(request):
        infers.append(request.model_name)
        raise NotFound("no such model here")  # the call ran

    core = SimpleNamespace(
        shedder=shedder,
        infer=infer,
        tracing=SimpleNamespace(settings=SimpleNamespace(enabled=False)),
        shared_memory=SimpleNamespace(input_array=None),
    )

    async def run():
        server = H2Server(1 << 20, 64, 30.0, max_connections=8)
        add_services(server, core, 10, refused_early=True)
        port = free_port()
        await server.start(listen("127.0.0.1", port, "gRPC"))
        try:
            return await asyncio.to_thread(scenario, port, shedder, infers)
        finally:
            await server.stop(0.5)

    return asyncio.run(run())


def test_a_refused_model_infer_is_answered_from_its_headers_and_never_runs():
    def scenario(port, shedder, infers):
        message = pb.ModelInferRequest(model_name="m").SerializeToString()
        framed = b"\x00" + len(message).to_bytes(4, "big") + message
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(5)
            sock.sendall(
                opening()
                + f.frame(f.HEADERS, f.END_HEADERS, 1, call_headers(hpack.Encoder(), MODEL_INFER))
                + f.frame(f.DATA, f.END_STREAM, 1, framed)
            )
            data = b""
            while data.count(f.rst_stream(1, f.NO_ERROR)) == 0:
                data += sock.recv(65536)
        return data, list(infers), shedder.asked

    data, infers, asked = serve(scenario)
    position, blocks = 0, []
    while position + 9 <= len(data):
        high, low, kind, flags, stream = f.HEADER.unpack_from(data, position)
        size = (high << 8) | low
        if kind == f.HEADERS and stream == 1:
            blocks.append((flags, data[position + 9 : position + 9 + size]))
        position += 9 + size
    [(flags, block)] = blocks
    trailers = dict(hpack.Decoder().decode(block))
    assert flags & f.END_STREAM and trailers["grpc-status"] == "14"
    assert "overloaded" in trailers["grpc-message"] and trailers["grpc-retry-pushback-ms"]
    assert infers == [] and asked == 1


def test_a_client_hears_unavailable_then_is_served_once_the_shedder_admits():
    def scenario(port, shedder, infers):
        request = pb.ModelInferRequest(model_name="m")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(
                MODEL_INFER,
                request_serializer=pb.ModelInferRequest.SerializeToString,
                response_deserializer=pb.ModelInferResponse.FromString,
            )
            try:
                call(request, timeout=5)
            except grpc.RpcError as exc:
                refused = (exc.code(), exc.details())
            shedder.refusing = False
            try:
                call(request, timeout=5)
            except grpc.RpcError as exc:
                served = exc.code()
        return refused, served, list(infers)

    refused, served, infers = serve(scenario)
    assert refused == (grpc.StatusCode.UNAVAILABLE, REFUSAL)
    assert served == grpc.StatusCode.NOT_FOUND and infers == ["m"]
