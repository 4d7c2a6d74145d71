"""A front's bundles in flight (bundles.py says what a bundle is): which models the host
takes them for, the requests gathered in this turn of the event loop, and the bundles
sent and not yet answered."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from accel_base.errors import Internal, PayloadTooLarge, Unavailable
from gateway.fronts import bundles, wire
from gateway.inference import InferRequest, InferResponse
from workers.arena import Arena

if TYPE_CHECKING:
    from gateway.fronts.remote import RemoteCore

# How long the host's word on whether a model takes bundles holds before it is asked
# again (a stale word costs one "unbundle" round trip), and for how many models it is
# kept (clients name models at will).
BUNDLE_HINT_S = 2.0
MAX_BUNDLE_HINTS = 1024
# The host's replies that may be to a bundle.
BUNDLE_REPLIES = frozenset({"answer", "error", "unbundle"})

Member = tuple[int, InferRequest]  # (the member's own call, its request)


class Bundler:
    def __init__(self, core: RemoteCore) -> None:
        self.core = core
        self.rows: dict[str, tuple[int, float]] = {}  # model -> (rows a bundle may carry, when)
        self._asking: set[str] = set()
        self._forming: dict[Any, list[Member]] = {}  # this turn's members, by bundle key
        self._sent: dict[int, list[Member]] = {}  # bundles awaiting answers, by their call

    def takes_bundles(self, model: str) -> bool:
        """Whether the host said lately that `model` takes bundles; asks it again in the
        background when its word is old or missing."""
        hint = self.rows.get(model)
        stale = hint is None or time.monotonic() - hint[1] > BUNDLE_HINT_S
        if stale and model not in self._asking and len(self._asking) < MAX_BUNDLE_HINTS:
            self._asking.add(model)
            asyncio.ensure_future(self._ask_rows(model))
        return hint is not None and hint[0] > 1

    async def _ask_rows(self, model: str) -> None:
        try:
            rows = await self.core._call("bundle_rows", model)
        except Exception:  # noqa: BLE001 - no word means no bundles
            rows = 0
        finally:
            self._asking.discard(model)
        if len(self.rows) >= MAX_BUNDLE_HINTS:
            self.rows.clear()
        self.rows[model] = (rows, time.monotonic())

    async def infer(self, call: int, key: Any, request: InferRequest) -> InferResponse:
        """This request's answer; it leaves at the end of the turn with the others that
        share its key."""
        core = self.core
        if core.channel is None or core.channel.closed:
            raise Unavailable("the gateway's model host has stopped")
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        core._waiting[call] = waiter
        if not self._forming:
            loop.call_soon(self._send_formed)
        self._forming.setdefault(key, []).append((call, request))
        core.in_flight.enter()
        try:
            return await waiter
        finally:  # a member whose caller left is skipped, or its answer dropped
            core._waiting.pop(call, None)
            core.in_flight.leave()

    def _send_formed(self) -> None:
        forming, self._forming = self._forming, {}
        waiting = self.core._waiting
        for members in forming.values():
            members = [m for m in members if m[0] in waiting]
            if not members:
                continue
            max_rows = self.rows.get(members[0][1].model_name, (1, 0.0))[0]
            calls = {id(request): call for call, request in members}
            for run in bundles.chunks([request for _, request in members], max(max_rows, 1)):
                self._send([(calls[id(request)], request) for request in run])

    def _send(self, run: list[Member]) -> None:
        if len(run) == 1:
            self._send_alone(*run[0])
            return
        call = next(self.core._calls)
        request = bundles.merged([r for _, r in run])
        inputs, arena = wire.pack_tensors(request.inputs)
        outputs = [(o.name, o.parameters) for o in request.outputs]
        message = ("bundle", call, request.model_name, request.model_version, inputs, outputs,
                   len(run))  # fmt: skip
        self._sent[call] = run
        self._send_or_fail(call, message, arena, run)

    def _send_alone(self, call: int, request: InferRequest) -> None:
        message, arena = self.core._message(call, request)
        self._send_or_fail(None, message, arena, [(call, request)])

    def _send_or_fail(
        self, call: int | None, message: tuple, arena: Arena | None, run: list[Member]
    ) -> None:
        channel = self.core.channel
        error: Exception
        try:
            if channel is None or channel.closed:
                raise Unavailable("the gateway's model host has stopped")
            channel.send(message, arena)
            if not channel.closed:
                return
            error = Unavailable("the gateway's model host has stopped")
        except Unavailable as exc:
            if arena is not None:
                arena.close()
            error = exc
        except wire.MessageTooLarge as exc:  # the channel closed the arena
            error = PayloadTooLarge(f"the request is too large for the model host: {exc}")
        if call is not None:
            self._sent.pop(call, None)
        for member, _ in run:
            self._fail(member, error)

    def _fail(self, call: int, error: Exception) -> None:
        waiter = self.core._waiting.get(call)
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def answered(self, message: tuple, arena: Arena | None) -> bool:
        """Take the host's reply if it is to a bundle (else False): split an answer among
        the members, give each the error, or send each alone when the host says so."""
        run = self._sent.pop(message[1], None)
        if run is None:
            return False
        kind = message[0]
        if kind == "unbundle":  # the model does not take bundles (any more)
            self.rows.pop(run[0][1].model_name, None)
            for call, request in run:
                if call in self.core._waiting:
                    self._send_alone(call, request)
        elif kind == "error":
            for call, _ in run:
                self._fail(call, wire.error_of(message))
        else:
            try:
                answers = bundles.split(wire.response_of(message, arena), [r for _, r in run])
            except Exception as exc:  # noqa: BLE001 - every member must hear something
                for call, _ in run:
                    self._fail(call, Internal(f"unreadable answer from the model host: {exc}"))
                return True
            for (call, _), answer in zip(run, answers, strict=True):
                waiter = self.core._waiting.get(call)
                if waiter is not None and not waiter.done():
                    waiter.set_result(answer)
        return True

    def clear(self) -> None:
        """The host is gone: its waiters have failed already (RemoteCore.host_gone)."""
        self._sent.clear()
        self._forming.clear()
