"""The gateway's whole HTTP path for one request, in process (benchmarks/in_process.py):
raw HTTP/1.1 requests into uvicorn's httptools protocol (the gateway's own subclass, as
it serves) and the ASGI app, the response to a transport that reads its status."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvicorn
from uvicorn.server import ServerState

from benchmarks.in_process import CountingTransport, path_ns
from gateway.core import InferenceCore
from gateway.http.app import create_app
from gateway.http.infer_route import with_infer_route
from gateway.http.timeouts import timed_protocol


class HttpPath:
    """One kept-alive HTTP connection of the server's, in process."""

    def __init__(self, core: InferenceCore) -> None:
        limit = 64 * 1024 * 1024
        app = with_infer_route(create_app(core, limit), core, limit)  # as gateway.listeners
        config = uvicorn.Config(
            app, loop="none", lifespan="off", access_log=False,
            log_config=None, proxy_headers=False, server_header=False, date_header=False,
        )  # fmt: skip
        config.load()
        self._answered: asyncio.Future | None = None
        self._status = b""  # the latest response's
        path = self

        class Measured(timed_protocol(60.0)):  # type: ignore[misc]
            def on_response_complete(self) -> None:
                super().on_response_complete()
                if path._answered is not None and not path._answered.done():
                    path._answered.set_result(None)

        self._protocol = Measured(config=config, server_state=ServerState(), app_state={})
        self._protocol.connection_made(CountingTransport(self._seen))

    def _seen(self, data: bytes) -> None:
        if data.startswith(b"HTTP/1.1 "):
            self._status = bytes(data[9:12])

    async def one(self, request: bytes) -> None:
        self._answered = asyncio.get_running_loop().create_future()
        self._protocol.data_received(request)
        await asyncio.wait_for(self._answered, 30)  # an app that never ends its answer

    def failure(self) -> str | None:
        return None if self._status == b"200" else f"the gateway answered {self._status!r}"

    def close(self) -> None:
        self._protocol.connection_lost(None)


def http_path_ns(
    repository: Path,
    requests: dict[str, bytes],
    core: int,
    rounds: int = 200,
    per_round: int = 200,
    before_round: Callable[[InferenceCore, str], None] | None = None,
    after: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, list[float]]:
    """CPU ns per request through the whole HTTP path (in_process.path_ns), for each
    named raw HTTP request."""
    return path_ns(repository, requests, core, HttpPath, rounds, per_round, before_round, after)
