"""64 keep-alive HTTP connections hammering the infer route: every one keeps being served.

Admission control queues a closed loop's backlog by default, however many clients, but
the fronts shed when their event loop falls behind (gateway/operation/shedding.py), so on a busy
machine some answers may be fast 503s with Retry-After, which the client sends again;
what must not happen is a connection that never gets a 200."""

from __future__ import annotations

import asyncio
import json

import numpy as np

CONNECTIONS = 64
ANSWERS = 10  # 200s that every connection gets while all of them keep sending
DEADLINE_S = 120.0  # a connection starved this long fails the test


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


async def hammer(port: int) -> list[int]:
    """200s per connection: every connection sends until each has ANSWERS of them."""
    request = raw_infer_request()
    answered = [0] * CONNECTIONS
    everyone_served = asyncio.Event()

    async def connection(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while not everyone_served.is_set():
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            refused = head.startswith(b"HTTP/1.1 503") and b"retry-after" in head.lower()
            if not (head.startswith(b"HTTP/1.1 200") or refused):
                raise AssertionError(head + await reader.read(300))

            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            answered[index] += not refused
            if min(answered) >= ANSWERS:
                everyone_served.set()
        writer.close()

    everyone = asyncio.gather(*(connection(i) for i in range(CONNECTIONS)))
    try:
        await asyncio.wait_for(everyone, timeout=DEADLINE_S)
    except TimeoutError:
        raise AssertionError(f"a connection starved: 200s by connection {answered}") from None
    return answered


def test_no_connection_starves(gateway):
    answered = asyncio.run(hammer(gateway.http_port))
    # Every connection was served, none stalled, while all of them kept sending.
    assert min(answered) >= ANSWERS, answered
