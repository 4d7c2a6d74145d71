"""The model host's side of one front's channel: each request the front decoded runs on
the host's one InferenceCore (its queues, batchers, instances, statistics), and the
answer goes back on the channel.

Besides inference, a front may ask for the calls in REMOTE_CALLS, whose answers must be
the same whichever front is asked (statistics, readiness, the repository).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import operator
import pickle
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import GatewayError, Internal, InvalidArgument, NotFound, Unavailable
from accel_base.logs import REQUEST_ID
from gateway.core.inference import InferRequest, RequestedOutput
from gateway.core.interface import MODEL_CALLS
from gateway.core.model import ModelVersion
from gateway.core.scheduling.dynamic import DynamicBatcher
from gateway.core.service import InferenceCore
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel
from gateway.operation.tracing.tracer import traced
from workers.arena import Arena

log = logging.getLogger(__name__)

# Python 3.12+: a request runs at once, up to its first wait, without a trip through the
# event loop first; one for an idle in-process instance is answered right there. The
# host's per-request cost bounds what N fronts serve together (benchmarks/model_host.py).
_EAGER: dict[str, bool] = {"eager_start": True} if sys.version_info >= (3, 12) else {}

# A front's answers about its copies of models (gateway/front_processes/replicas.py).
COPY_REPLIES = frozenset({"copied", "dropped", "stats", "flushed"})
# Calls whose change every front's shared-memory mirror follows (front_processes/regions.py).
REGION_CALLS = frozenset({"register_system_shared_memory", "unregister_system_shared_memory"})
# Calls after which whether fronts serve copies may change (a log line or a trace each).
SETTINGS_CALLS = frozenset({"update_log_settings", "update_trace_settings"})
# The Core calls a front may ask of the host by name (gateway/core/interface.py).
REMOTE_CALLS = MODEL_CALLS | REGION_CALLS


class FrontLink:
    """One front, seen from the host: counts what it sent, answers it."""

    def __init__(self, index: int, core: InferenceCore) -> None:
        self.index = index
        self.core = core
        self.channel: Channel | None = None
        self.requests = 0  # inference requests this front has sent, over its restarts
        self.bundles = 0  # bundles among them (gateway/front_processes/bundles.py), run as one
        self.bundled = 0  # the requests those bundles carried
        self._gone: set[int] = set()  # calls whose callers went away
        self._active: set[int] = set()  # calls not answered yet
        self._tasks: set[asyncio.Task] = set()
        # Set by the supervisor: a copy's answer, and settings that changed.
        self.on_reply: Callable[[int, tuple], None] | None = None
        self.on_settings: Callable[[], None] | None = None
        self.on_region: Callable[[str, bytes], Awaitable[None]] | None = None
        self.on_region_done: Callable[[int, tuple], None] | None = None

    def attach(self, channel: Channel) -> None:
        self.channel = channel
        self._gone = set()  # a new front numbers its calls from 0 again
        self._active = set()

    def on_message(self, message: tuple, arena: Arena | None) -> None:
        kind = message[0]
        if kind == "infer":
            self.requests += 1
            self._active.add(message[1])
            self._spawn(self._infer(message, arena))
        elif kind == "bundle":  # its requests are counted as they run, or come again alone
            self._spawn(self._bundle(message, arena))
        elif kind == "cancel":
            if message[1] in self._active:  # else its answer has crossed the cancel
                self._gone.add(message[1])
        elif kind == "call":
            self._spawn(self._call(message))
        elif kind in COPY_REPLIES and self.on_reply is not None:
            self.on_reply(self.index, message)
        elif kind == "region_done" and self.on_region_done is not None:
            self.on_region_done(self.index, message)
        else:
            log.error("front %d sent an unknown message %r", self.index, kind)

    def _spawn(self, work: Any) -> None:
        # The loop named: 3.12's eager start asks the argument, not the default, whether it runs.
        task = asyncio.Task(work, loop=asyncio.get_running_loop(), **_EAGER)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _infer(self, message: tuple, arena: Arena | None) -> None:
        call = message[1]
        channel, gone, active = self.channel, self._gone, self._active
        try:
            request = wire.request_of(message, arena)
            request.client_gone = functools.partial(operator.contains, gone, call)
            REQUEST_ID.set(request.id)  # the host's lines while serving it name it
            reply, reply_arena = await self._answer(call, request)
        except Exception as exc:  # noqa: BLE001 - a GatewayError, or a 500
            reply, reply_arena = self._failure(call, exc, "request"), None
        finally:
            gone.discard(call)
            active.discard(call)
        self._reply(channel, call, reply, reply_arena)

    async def _answer(self, call: int, request: InferRequest) -> tuple[tuple, Arena | None]:
        tracing = self.core.tracing
        # The front's part is not in the trace: it starts where the host takes the request.
        started = time.perf_counter_ns() if tracing.settings.enabled else 0
        # The host's own loop may be the one running late (--shed-lag-ms).
        self.core.shedder.check()
        trace = tracing.start(request, "front", started, request.header) if started else None
        if trace is None:
            return wire.answer_message(call, await self.core.infer(request))
        _, answer = await traced(
            trace, self.core.infer(request), lambda response: wire.answer_message(call, response)
        )
        return answer

    async def _bundle(self, message: tuple, arena: Arena | None) -> None:
        """A front's bundle (gateway/front_processes/bundles.py): run as one request of many rows
        where the model's batcher would merge its members anyway; else, or when the
        request is refused as malformed, "unbundle", and the members come one by one,
        each to hear its own words."""
        _, call, model, version, inputs, outputs, count = message
        channel, gone, active, reply_arena = self.channel, self._gone, self._active, None
        try:
            rows = self.bundle_rows(model, version)
            if not rows:
                reply = ("unbundle", call, rows)
            else:
                self.requests += count
                self.bundles += 1
                self.bundled += count
                active.add(call)  # the front cancels it once every member's caller has left
                request = InferRequest(
                    model, version, "", {}, wire.unpack_tensors(inputs, arena),
                    [RequestedOutput(name, params) for name, params in outputs], count=count,
                    client_gone=functools.partial(operator.contains, gone, call),
                )  # fmt: skip
                reply, reply_arena = await self._answer(call, request)
        except InvalidArgument:  # its members come again alone, and are counted then
            self.requests -= count
            self.bundles -= 1
            self.bundled -= count
            reply = ("unbundle", call, rows)
        except Exception as exc:  # noqa: BLE001 - a GatewayError, or a 500
            reply = self._failure(call, exc, "bundle")
        finally:
            gone.discard(call)
            active.discard(call)
        self._reply(channel, call, reply, reply_arena)

    def bundle_rows(self, model: str, version: str = "") -> int:
        """The rows a bundle for `model` may carry: its max_batch_size where its dynamic
        batcher merges requests as they are (not a per-request backend, not decoupled),
        else 0; 0 too while requests are logged or traced one by one."""
        if self.core.access_log or self.core.tracing.settings.enabled:
            return 0
        try:
            found = self.core.repository.get(model, version)
        except (NotFound, Unavailable, InvalidArgument):
            return 0
        if not isinstance(found, ModelVersion) or found.decoupled:
            return 0
        scheduler = found.scheduler
        if not isinstance(scheduler, DynamicBatcher) or scheduler.per_request:
            return 0
        return max(found.config.max_batch_size, 0)

    async def _call(self, message: tuple) -> None:
        _, call, method, arguments = message
        channel = self.channel
        try:
            if method == "bundle_rows":
                result = self.bundle_rows(*pickle.loads(arguments))
            elif method not in REMOTE_CALLS:
                raise Internal(f"a front asked for '{method}', which the host does not serve")
            else:
                result = getattr(self.core, method)(*pickle.loads(arguments))
            if inspect.isawaitable(result):
                result = await result
            if method == "model_config":
                result = result.SerializeToString()
            elif method in SETTINGS_CALLS and self.on_settings is not None:
                self.on_settings()
            elif method in REGION_CALLS and self.on_region is not None:
                await self.on_region(method, arguments)
            limit = channel.limit if channel is not None else wire.MAX_MESSAGE_BYTES
            reply, arena = wire.result_message(call, pickle.dumps(result), limit)
        except Exception as exc:  # noqa: BLE001 - a GatewayError, or a 500
            reply, arena = self._failure(call, exc, f"call to {method}"), None
        self._reply(channel, call, reply, arena)

    def _failure(self, call: int, exc: Exception, what: str) -> tuple:
        """The error message for a failed call: a GatewayError's own, anything else as a
        500 (and logged: a bug or a backend's own failure)."""
        if isinstance(exc, GatewayError):
            return wire.error_message(call, exc)
        log.exception("a %s from front %d failed", what, self.index)
        return wire.error_message(call, Internal(f"{type(exc).__name__}: {exc}"))

    def _reply(
        self, channel: Channel | None, call: int, reply: tuple, arena: Arena | None = None
    ) -> None:
        """Send the reply; with the front gone (channel None), only let its arena go."""
        if channel is None:
            if arena is not None:
                arena.close()
            return
        try:
            channel.send(reply, arena)
        except wire.MessageTooLarge as exc:  # the caller must hear something
            channel.send(wire.error_message(call, Internal(f"the answer is too large: {exc}")))

    def detach(self) -> None:
        """The front is gone: what it asked for still runs; nobody reads the answers."""
        self.channel = None

    async def wait_idle(self, timeout_s: float) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
