"""Where Python models call other models of this gateway (Triton's business-logic scripting):
a Unix socket in a private directory, started when the first Python model loads. Each
call goes through `InferenceCore.infer`, so the called model's own scheduler batches it.

The wire is accel_base/call_wire.py; the worker's side is backends/python/model_calls.py.
A model's `is_cancelled()` asks here too ("cancelled", token) -> ("ok", bool).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from accel_base import call_wire
from accel_base.errors import GatewayError, InvalidArgument
from gateway.core.decoupled import ResponseStreams, Sent
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.scheduling.per_request import cancelled

log = logging.getLogger(__name__)
SOCKET_NAME = "calls.sock"
# sockaddr_un holds 108 bytes with the ending NUL: a longer path fails to bind.
MAX_SOCKET_PATH = 107


def socket_directory() -> str:
    """A new private directory (0700: only this user's processes can call) for the socket:
    under the temporary directory, or under /tmp where that one's path leaves no room for
    the socket's name (a deep TMPDIR)."""
    directory = tempfile.mkdtemp(prefix="accel-gateway-calls-")
    if len(os.fsencode(directory)) + 1 + len(SOCKET_NAME) > MAX_SOCKET_PATH:
        os.rmdir(directory)
        directory = tempfile.mkdtemp(prefix="accel-gateway-calls-", dir="/tmp")
    return directory


Infer = Callable[[InferRequest], Awaitable[InferResponse]]


class ModelCalls:
    def __init__(self, infer: Infer) -> None:
        self.infer = infer
        self.path: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._directory: str | None = None
        self._starting = asyncio.Lock()
        self._connections: set[asyncio.Task] = set()
        self.streams = ResponseStreams()  # decoupled models' responses, by stream token

    async def start(self) -> str:
        """The socket's path, listening from the first call on."""
        async with self._starting:
            if self.path is None:
                self._directory = socket_directory()
                path = str(Path(self._directory) / SOCKET_NAME)
                self._server = await asyncio.start_unix_server(self._serve, path)
                self.path = path
        return self.path

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                header = await reader.readexactly(call_wire.HEADER_BYTES)
                body = await reader.readexactly(call_wire.frame_length(header))
                message = call_wire.decode(body)
                if message[0] == "respond":  # a decoupled model's response: no answer
                    await self._deliver(message)
                    continue
                writer.write(call_wire.encode(await self._answer(message)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker ended or closed its connection
        except ValueError as exc:  # a frame over the limit: this connection is done
            log.warning("a Python model's call was refused: %s", exc)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _deliver(self, message: tuple) -> None:
        token = str(message[1]) if len(message) > 1 else ""
        try:
            _, token, outputs, parameters, final, error = message
            tensors = [call_wire.from_wire(wire, "output") for wire in outputs]
            sent = Sent(tensors, dict(parameters or {}), bool(final), error)
        except (ValueError, TypeError, GatewayError) as exc:  # ends its request, said why
            detail = exc.message if isinstance(exc, GatewayError) else str(exc)
            error = ("Internal", f"the model sent a response that could not be read: {detail}")
            sent = Sent([], {}, True, error)
        await self.streams.deliver(str(token), sent)

    def cancelled(self, token: str) -> bool:
        """A Python model's is_cancelled(): a decoupled request's stream ("s...") is
        closed, or a running request's caller left (scheduling/per_request.py)."""
        if token.startswith("s"):
            return self.streams.cancelled(token)
        return cancelled(token)

    async def _answer(self, message: tuple) -> tuple:
        if message[0] == "cancelled" and len(message) == 2:  # is_cancelled(), not a call
            return ("ok", self.cancelled(str(message[1])))
        try:
            request = _request(message)
            response = await self.infer(request)
            outputs = [call_wire.to_wire(t.name, t.data, t.datatype) for t in response.outputs]
            return (
                "ok", response.model_name, response.model_version, response.id,
                dict(response.parameters), outputs,
            )  # fmt: skip
        except GatewayError as exc:
            return ("error", type(exc).__name__, exc.message)
        except (ValueError, TypeError, EOFError) as exc:  # a malformed call
            return ("error", "InvalidArgument", f"a malformed model call: {exc}")
        except Exception as exc:  # the called model's own failure, said as such
            log.exception("a Python model's call failed")
            return ("error", "Internal", f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = self.path = None


def _request(message: tuple) -> InferRequest:
    if message[0] != "infer" or len(message) != 7:
        raise InvalidArgument(f"unknown model call {message[0]!r}")
    _, model, version, request_id, parameters, inputs, output_names = message
    if not isinstance(model, str) or not model:
        raise InvalidArgument("a model call must name the model (model_name)")
    tensors = []
    for wire in inputs:
        name, datatype, array = call_wire.from_wire(wire, "input")
        tensors.append(Tensor(name, datatype, array))
    return InferRequest(
        model_name=model,
        model_version=str(version or ""),
        id=str(request_id or ""),
        parameters=dict(parameters or {}),
        inputs=tensors,
        outputs=[RequestedOutput(str(name), {}) for name in output_names],
    )
