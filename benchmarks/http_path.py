"""The gateway's whole HTTP path for one request, in process (benchmarks/in_process.py):
raw HTTP/1.1 requests into uvicorn's httptools protocol (the gateway's own subclass, as
it serves) and the ASGI app, the response to a transport that reads its status."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import uvicorn
from uvicorn.server import ServerState

from benchmarks.in_process import CountingTransport
from benchmarks.open_loop import http_request
from gateway.core.service import InferenceCore
from gateway.protocols.http.app import create_app
from gateway.protocols.http.infer_route import with_infer_route
from gateway.protocols.http.timeouts import timed_protocol


def simple_request(model: str) -> bytes:
    """`simple`'s request as perf_analyzer sends it: both INT32 [1, 16] inputs binary."""
    data = np.arange(16, dtype=np.int32).tobytes()
    header = json.dumps({
        "inputs": [{"name": name, "datatype": "INT32", "shape": [1, 16],
                    "parameters": {"binary_data_size": len(data)}}
                   for name in ("INPUT0", "INPUT1")],
        "outputs": [{"name": name, "parameters": {"binary_data": True}}
                    for name in ("OUTPUT0", "OUTPUT1")],
    }).encode()  # fmt: skip
    return http_request(
        "127.0.0.1", 8000, f"/v2/models/{model}/infer", header + data + data,
        {"Inference-Header-Content-Length": str(len(header)),
         "Content-Type": "application/octet-stream"},
    )  # fmt: skip


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
        self._failed: dict[str, int] = {}  # answers other than 200 since failure() looked
        path = self

        class Measured(timed_protocol(60.0)):  # type: ignore[misc]
            def on_response_complete(self) -> None:
                super().on_response_complete()
                if path._answered is not None and not path._answered.done():
                    path._answered.set_result(None)

        self._protocol = Measured(config=config, server_state=ServerState(), app_state={})
        self._protocol.connection_made(CountingTransport(self._seen))

    def _seen(self, data: bytes) -> None:
        if data.startswith(b"HTTP/1.1 ") and data[9:12] != b"200":
            status = bytes(data[9:12]).decode("latin-1")
            self._failed[status] = self._failed.get(status, 0) + 1

    async def one(self, request: bytes) -> None:
        self._answered = asyncio.get_running_loop().create_future()
        self._protocol.data_received(request)
        await asyncio.wait_for(self._answered, 30)  # an app that never ends its answer

    def failure(self) -> str | None:
        if not self._failed:
            return None
        failed, self._failed = self._failed, {}
        return "the gateway answered " + ", ".join(f"{n} x {s}" for s, n in failed.items())

    def close(self) -> None:
        self._protocol.connection_lost(None)
