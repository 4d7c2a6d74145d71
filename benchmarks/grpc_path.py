"""The gateway's whole gRPC path for one request, in process (benchmarks/in_process.py):
HTTP/2 frames of unary ModelInfer calls into the gateway's own HTTP/2 server's
connection (gateway/protocols/grpc/h2, `--grpc-server gateway`, the default) and the V2 service,
the answer's frames to a transport that reads each call's trailers."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

import hpack
import numpy as np

from accel_base.proto import grpc_service_pb2 as pb
from benchmarks.in_process import CountingTransport
from gateway.core.service import InferenceCore
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.connection import Connection
from gateway.protocols.grpc.h2.headers import OK_TRAILERS
from gateway.protocols.grpc.h2.server import H2Server
from gateway.protocols.grpc.service import add_services

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def simple_grpc_request(model: str) -> bytes:
    """`simple`'s ModelInfer message as perf_analyzer sends it: both INT32 [1, 16] inputs
    as raw contents, no outputs named."""
    data = np.arange(16, dtype=np.int32).tobytes()
    request = pb.ModelInferRequest(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(data)
    return request.SerializeToString()


class GrpcPath:
    """One HTTP/2 connection of the server's, in process, with one call at a time."""

    def __init__(self, core: InferenceCore) -> None:
        server = H2Server(64 * 1024 * 1024, 100, 3600.0, max_connections=4)
        add_services(server, core, 1000)
        self._connection = Connection(server)
        self._connection.connection_made(CountingTransport(self._seen))
        # The client's half of the connection's start, and credit for every answer.
        self._connection.data_received(
            f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0)
            + f.window_update(0, f.MAX_WINDOW - f.DEFAULT_WINDOW)
        )  # fmt: skip
        # As a client's HPACK encoder sends them: the first call's headers as literals the
        # server's table keeps, every later call's as references to those entries.
        encoder = hpack.Encoder()
        headers = [
            (":method", "POST"), (":scheme", "http"), (":path", MODEL_INFER),
            (":authority", "127.0.0.1:8001"), ("content-type", "application/grpc"),
            ("te", "trailers"), ("user-agent", "grpc-c++/1.67.0"),
        ]  # fmt: skip
        self._first_block, self._block = encoder.encode(headers), encoder.encode(headers)
        self._stream = -1
        self._answered: asyncio.Future | None = None
        self._failed: dict[str, int] = {}  # calls not OK since failure() looked, by status

    def _seen(self, data: bytes) -> None:
        position = 0
        while len(data) - position >= 9:
            high, low, kind, flags, stream = f.HEADER.unpack_from(data, position)
            size = (high << 8) | low
            if kind == f.HEADERS and flags & f.END_STREAM and stream == self._stream:
                trailers = bytes(data[position + 9 : position + 9 + size])
                if trailers != OK_TRAILERS:
                    self._count(trailers)
                if self._answered is not None and not self._answered.done():
                    self._answered.set_result(None)
            position += 9 + size

    async def one(self, request: bytes) -> None:
        self._stream += 2
        block = self._block if self._stream > 1 else self._first_block
        self._answered = asyncio.get_running_loop().create_future()
        message = b"\x00" + len(request).to_bytes(4, "big") + request
        self._connection.data_received(
            f.frame(f.HEADERS, f.END_HEADERS, self._stream, block)
            + f.frame(f.DATA, f.END_STREAM, self._stream, message)
        )
        await asyncio.wait_for(self._answered, 30)  # a call that never ends

    def _count(self, trailers: bytes) -> None:
        # The server's blocks index nothing (gateway/protocols/grpc/h2/headers.py): any
        # decoder reads them. OK with trailing metadata is still OK.
        fields = dict(hpack.Decoder().decode(trailers))
        status = fields.get("grpc-status", "no grpc-status")
        if status != "0":
            said = f"{status} ({unquote(fields.get('grpc-message', ''))})"
            self._failed[said] = self._failed.get(said, 0) + 1

    def failure(self) -> str | None:
        if not self._failed:
            return None
        failed, self._failed = self._failed, {}
        return "calls ended with grpc-status " + ", ".join(
            f"{n} x {said}" for said, n in failed.items()
        )

    def close(self) -> None:
        self._connection.connection_lost(None)
