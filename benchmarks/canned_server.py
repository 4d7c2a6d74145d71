"""A server that refuses everything at once, the floor under benchmarks/overload.py.

    python -m benchmarks.canned_server HTTP_PORT GRPC_PORT

Every HTTP/1.1 request gets a prepared 503, every gRPC call (a HEADERS frame opening a
stream) a prepared trailers-only UNAVAILABLE, with no parsing beyond finding where a
request ends. What a generator measures against it at some rate is what the generator
and the machine add to any answer at that rate: the floor a gateway's refusals are
read against. Only for 127.0.0.1 and the generators of benchmarks/open_loop.py and
benchmarks/grpc_open_loop.py (one request at a time per connection, Content-Length bodies).
"""

from __future__ import annotations

import asyncio
import re
import sys

from benchmarks.grpc_open_loop import END_HEADERS, END_STREAM, HEADERS, PREFACE, frame, literal

_BODY = b'{"error":"refused"}'
HTTP_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")
# :status 200 (static table entry 8), then literal fields: the generator finds grpc-status.
_TRAILERS = (
    b"\x88"
    + literal(b"content-type", b"application/grpc")
    + literal(b"grpc-status", b"14")
    + literal(b"grpc-message", b"refused")
)


class _Http(asyncio.Protocol):
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = _LENGTH.search(self.buffer, 0, end + 2)
            total = end + 4 + (int(length[1]) if length else 0)
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            self.transport.write(HTTP_REFUSAL)


class _Grpc(asyncio.Protocol):
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buffer = bytearray()
        self.preface = True

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.preface:
            if len(self.buffer) < len(PREFACE):
                return
            del self.buffer[: len(PREFACE)]
            self.preface = False
        buffer, start, out = self.buffer, 0, []
        while len(buffer) - start >= 9:
            end = start + 9 + int.from_bytes(buffer[start : start + 3], "big")
            if len(buffer) < end:
                break
            if buffer[start + 3] == HEADERS:
                stream = int.from_bytes(buffer[start + 5 : start + 9], "big") & 0x7FFFFFFF
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream, _TRAILERS))
            start = end
        del buffer[:start]
        if out:
            self.transport.write(b"".join(out))


async def serve(http_port: int, grpc_port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(_Http, "127.0.0.1", http_port)
    await loop.create_server(_Grpc, "127.0.0.1", grpc_port)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
