"""Calls refused before they exist (H2Server.refuse_early): while the shedder says so, a
ModelInfer call is answered UNAVAILABLE with retry pushback as soon as its headers are
read; its handler never runs and its message is not read; the connection goes on."""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace

import grpc
import hpack

from accel_base.errors import NotFound
from accel_base.proto import grpc_service_pb2 as pb
from benchmarks.h2_floods import call_headers, opening
from gateway.launch import free_port
from gateway.listeners import listen
from gateway.operation.shedding import REFUSAL
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.server import H2Server
from gateway.protocols.grpc.service import MODEL_INFER, add_services


class Shedder:
    def __init__(self) -> None:
        self.refusing = True
        self.asked = 0

    def refuse(self, waiting: int = 0) -> bool:
        self.asked += 1
        self.waiting = waiting  # the calls the server had open when asked
        return self.refusing

    def check(self) -> None:
        raise AssertionError("a call the frame layer admitted must not be drawn again")


def wait_until(condition, limit_s: float = 5.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "the server never asked the shedder"
        time.sleep(0.005)


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
                received = sock.recv(65536)
                assert received, "the connection closed before the refusal came"
                data += received
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


def test_the_calls_a_server_has_open_count_as_work_in_flight_for_the_shedder():
    """`simple` runs inline: between calls the core has nothing in flight, so the
    shedder is told how many calls the server holds open (an overloaded front has many)."""

    def scenario(port, shedder, infers):
        shedder.refusing = False
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(5)
            # Call 1 opens and waits for its message; call 3 is asked about meanwhile.
            block = call_headers(hpack.Encoder(), MODEL_INFER)
            sock.sendall(opening() + f.frame(f.HEADERS, f.END_HEADERS, 1, block))
            wait_until(lambda: shedder.asked == 1)
            first = shedder.waiting
            sock.sendall(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 3, block))
            wait_until(lambda: shedder.asked == 2)
        return first, shedder.waiting

    first, second = serve(scenario)
    assert (first, second) == (0, 1)
