"""64 keep-alive HTTP connections hammering the infer route: every one keeps being served.

64 clients are more than admission control exempts from the queue budget (8 an
instance), so on a busy machine some answers may be fast 503s: an answer all the same.
What must not happen is a connection that gets none."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

CONNECTIONS = 64
SECONDS = 2.0


def raw_infer_request() -> bytes:
    header = json.dumps({
        "inputs": [
            {"name": name, "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}}
            for name in ("INPUT0", "INPUT1")
        ],
        "parameters": {"binary_data_output": True},
    }).encode()  # fmt: skip
    body = header + np.arange(16, dtype=np.int32).tobytes() * 2
    return (
        "POST /v2/models/simple/infer HTTP/1.1\r\nHost: gateway\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def hammer(port: int) -> tuple[list[int], int]:
    """Answers per connection, and how many of them were 200."""
    request = raw_infer_request()
    answered = [0] * CONNECTIONS
    succeeded = 0
    stop = time.monotonic() + SECONDS

    async def connection(index: int) -> None:
        nonlocal succeeded
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < stop:
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            refused = head.startswith(b"HTTP/1.1 503") and b"retry-after" in head.lower()
            if not (head.startswith(b"HTTP/1.1 200") or refused):
                raise AssertionError(head + await reader.read(300))
            succeeded += not refused
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            answered[index] += 1
        writer.close()

    await asyncio.gather(*(connection(i) for i in range(CONNECTIONS)))
    return answered, succeeded


def test_no_connection_starves(gateway):
    answered, succeeded = asyncio.run(hammer(gateway.http_port))
    assert min(answered) > 0, answered  # every connection was served, none stalled
    assert succeeded > CONNECTIONS * 5
