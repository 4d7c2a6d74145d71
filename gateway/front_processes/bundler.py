"""A front's bundles in flight (bundles.py says what a bundle is): which models the host
takes them for, the requests gathered in this turn of the event loop, and the bundles
sent and not yet answered."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from accel_base.errors import Cancelled, Internal, PayloadTooLarge, Unavailable
from gateway.core.inference import InferRequest, InferResponse
from gateway.front_processes import bundles, wire
from workers.arena import Arena

if TYPE_CHECKING:
    from gateway.front_processes.remote import RemoteCore

log = logging.getLogger(__name__)

# How long the host's word on whether a model version takes bundles holds before it is
# asked again (a stale word costs one "unbundle" round trip), and for how many model
# versions it is kept (clients name models at will; past it, new names go unbundled).
BUNDLE_HINT_S = 2.0
MAX_BUNDLE_HINTS = 1024
# The host's replies that may be to a bundle.
BUNDLE_REPLIES = frozenset({"answer", "error", "unbundle"})

Member = tuple[int, InferRequest]  # (the member's own call, its request)


class Bundler:
    def __init__(self, core: RemoteCore) -> None:
        self.core = core
        # (model, version) -> (rows a bundle may carry, 0 for none; when the host said so)
        self.rows: dict[tuple[str, str], tuple[int, float]] = {}
        self._asking: set[tuple[str, str]] = set()
        self._forming: dict[Any, list[Member]] = {}  # this turn's members, by bundle key
        self._sent: dict[int, list[Member]] = {}  # bundles awaiting answers, by their call
        self._bundle_of: dict[int, int] = {}  # a sent member's call -> its bundle's call

    def takes_bundles(self, request: InferRequest) -> bool:
        """Whether the host said lately that the request's model version takes bundles;
        asks it again in the background when its word is old or missing."""
        model = (request.model_name, request.model_version)
        hint = self.rows.get(model)
        stale = hint is None or time.monotonic() - hint[1] > BUNDLE_HINT_S
        if stale and model not in self._asking and len(self._asking) < MAX_BUNDLE_HINTS:
            self._asking.add(model)
            asyncio.ensure_future(self._ask_rows(model))
        return hint is not None and hint[0] > 1

    async def _ask_rows(self, model: tuple[str, str]) -> None:
        try:
            rows = await self.core._call("bundle_rows", *model)
        except Exception:  # noqa: BLE001 - no word means no bundles
            rows = 0
        finally:
            self._asking.discard(model)
        self._heard(model, rows)

    def _heard(self, model: tuple[str, str], rows: int) -> None:
        if model in self.rows or len(self.rows) < MAX_BUNDLE_HINTS:
            self.rows[model] = (rows, time.monotonic())

    # ---- sending -------------------------------------------------------------------------

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
        try:
            return await core.in_flight.serve(request.model_name, waiter)
        finally:  # a member whose caller left is skipped, or its answer dropped
            core._waiting.pop(call, None)
            self._left(call)

    def _waits(self, call: int) -> bool:
        waiter = self.core._waiting.get(call)
        return waiter is not None and not waiter.done()

    def _send_formed(self) -> None:
        forming, self._forming = self._forming, {}
        for members in forming.values():
            members = [m for m in members if self._waits(m[0])]
            if not members:
                continue
            first = members[0][1]
            max_rows = self.rows.get((first.model_name, first.model_version), (1, 0.0))[0]
            calls = {id(request): call for call, request in members}
            for run in bundles.chunks([request for _, request in members], max(max_rows, 1)):
                self._send([(calls[id(request)], request) for request in run])

    def _send(self, run: list[Member]) -> None:
        """Send a run as one bundle (or alone, if it is one); whatever goes wrong fails
        its members, never the other runs of the turn."""
        call = next(self.core._calls) if len(run) > 1 else None
        try:
            if call is None:
                message, arena = self.core._message(*run[0])
            else:
                request = bundles.merged([r for _, r in run])
                inputs, arena = wire.pack_tensors(request.inputs)
                outputs = [(o.name, o.parameters) for o in request.outputs]
                message = ("bundle", call, request.model_name, request.model_version, inputs,
                           outputs, len(run))  # fmt: skip
                self._sent[call] = run
                for member, _ in run:
                    self._bundle_of[member] = call
            self._write(message, arena)
        except Exception as exc:  # noqa: BLE001 - every member must hear something
            if call is not None:
                self._forget(call)
            error = exc if isinstance(exc, Unavailable | PayloadTooLarge) else Internal(
                f"the request could not be sent to the model host: {exc}"
            )  # fmt: skip
            if not isinstance(error, Unavailable | PayloadTooLarge):
                log.exception("a front could not send requests to the model host")
            for member, _ in run:
                self._fail(member, error)

    def _write(self, message: tuple, arena: Arena | None) -> None:
        channel = self.core.channel
        if channel is None or channel.closed:
            if arena is not None:
                arena.close()
            raise Unavailable("the gateway's model host has stopped")
        try:
            channel.send(message, arena)  # closes the arena, sent or not
        except wire.MessageTooLarge as exc:
            raise PayloadTooLarge(f"the request is too large for the model host: {exc}") from None
        if channel.closed:
            raise Unavailable("the gateway's model host has stopped")

    def _fail(self, call: int, error: Exception) -> None:
        if self._waits(call):
            self.core._waiting[call].set_exception(error)

    def _forget(self, call: int) -> list[Member]:
        run = self._sent.pop(call, [])
        for member, _ in run:
            self._bundle_of.pop(member, None)
        return run

    # ---- callers that leave ------------------------------------------------------------

    def client_gone(self, call: int) -> bool:
        """A caller's client went away (an HTTP disconnect): if `call` is a bundle's
        member, end its wait (True); the host hears of it once the whole bundle is gone."""
        if call not in self._bundle_of and not any(
            call == c for members in self._forming.values() for c, _ in members
        ):
            return False
        self._fail(call, Cancelled("the client disconnected before the request ran"))
        return True

    def _left(self, call: int) -> None:
        """A member stopped waiting; once no member of its bundle waits, the host may
        drop the bundle before it runs."""
        bundle = self._bundle_of.pop(call, None)
        if bundle is None or bundle not in self._sent:
            return
        if not any(self._waits(member) for member, _ in self._sent[bundle]):
            self._forget(bundle)
            channel = self.core.channel
            if channel is not None and not channel.closed:
                channel.send(("cancel", bundle))

    # ---- answers -------------------------------------------------------------------------

    def answered(self, message: tuple, arena: Arena | None) -> bool:
        """Take the host's reply if it is to a bundle (else False): split an answer among
        the members, give each the error, or send each alone when the host says so."""
        run = self._forget(message[1]) if message[1] in self._sent else None
        if run is None:
            return False
        kind = message[0]
        if kind == "unbundle":  # ("unbundle", call, rows the model version takes now)
            first = run[0][1]
            self._heard((first.model_name, first.model_version), message[2])
            for member in run:
                if self._waits(member[0]):
                    self._send([member])
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
                if self._waits(call):
                    self.core._waiting[call].set_result(answer)
        return True

    def clear(self) -> None:
        """The host is gone: its waiters have failed already (RemoteCore.host_gone)."""
        self._sent.clear()
        self._bundle_of.clear()
        self._forming.clear()
