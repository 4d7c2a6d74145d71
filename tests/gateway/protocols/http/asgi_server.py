"""A plain ASGI app served by the gateway's own uvicorn set-up (its protocols, limits
and loop) on a free port of 127.0.0.1, for the HTTP protocol tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gateway.listeners import listen, uvicorn_server
from gateway.operation.limits import ConnectionLimits
from gateway.operation.shedding import LoopShedder
from gateway.protocols.http.direct import DirectPath


@contextlib.asynccontextmanager
async def serving(
    app: Any,
    read_timeout_s: float,
    shedder: LoopShedder | None = None,
    direct: DirectPath | None = None,
) -> AsyncIterator[int]:
    """The port `app` is served on while the block runs; stopped after it. `direct`: what
    the protocol answers without ASGI (gateway/protocols/http/direct.py)."""
    sock = listen("127.0.0.1", 0, "HTTP")
    limits = ConnectionLimits(read_timeout_s=read_timeout_s)
    server = uvicorn_server(app, limits, None, shedder, direct)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task
