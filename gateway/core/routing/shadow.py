"""Shadow copies: a sample of a router's requests, sent to shadow variants after the
primary has answered, off the caller's path, bounded, and compared with the primary."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.routing.agreement import compare
from gateway.core.routing.stats import ShadowStats

log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 16
Resolve = Callable[[str, str], Awaitable[Any]]  # (model, version) -> a ready model


@dataclass(slots=True)
class Shadow:
    model: str
    version: str
    sample_rate: float
    rtol: float
    atol: float
    stats: ShadowStats = field(default_factory=ShadowStats)
    credit: float = 0.0  # sampling: a copy whenever it reaches 1

    def sampled(self) -> bool:
        """Exactly `sample_rate` of the calls, evenly spread (no random draws)."""
        self.credit += self.sample_rate
        if self.credit < 1.0:
            return False
        self.credit -= 1.0
        return True


def copy_request(request: InferRequest, model: str, version: str) -> InferRequest:
    """The request for a shadow: its own input arrays (a client may reuse a shared-memory
    region or a buffer once answered), no shared-memory outputs, no caller to wait for."""
    return InferRequest(
        model_name=model,
        model_version=version,
        id=request.id,
        parameters={k: v for k, v in request.parameters.items() if k != "timeout"},
        inputs=[Tensor(t.name, t.datatype, t.data.copy()) for t in request.inputs],
        outputs=[RequestedOutput(o.name) for o in request.outputs],
    )


class Shadows:
    """The shadow variants of one router and the copies they have in flight."""

    def __init__(self, shadows: list[Shadow], max_in_flight: int, resolve: Resolve) -> None:
        self.shadows = shadows
        self.max_in_flight = max_in_flight
        self.resolve = resolve
        self.tasks: set[asyncio.Task] = set()
        self.held = 0  # copies taken and not yet finished, waiting or running
        # Copies finish together (a shadow that batches answers a whole batch at once):
        # one comparison at a time, each in its own turn of the event loop, so that the
        # callers' requests run between them instead of waiting out all of them.
        self.turn = asyncio.Lock()

    def take(self, request: InferRequest) -> list[tuple[Shadow, InferRequest]]:
        """The copies this request gives, taken before it runs (its inputs may change
        after); a copy past the in-flight bound is dropped and counted."""
        copies = []
        for shadow in self.shadows:
            if not shadow.sampled():
                continue
            if self.held >= self.max_in_flight:
                shadow.stats.dropped += 1
                continue
            self.held += 1
            copies.append((shadow, copy_request(request, shadow.model, shadow.version)))
        return copies

    def send(
        self, copies: list[tuple[Shadow, InferRequest]], primary: InferResponse | None
    ) -> None:
        """Run the copies in the background; `primary` (None if it failed) is compared.
        Every list `take` gave must come here, or its copies stay held."""
        for shadow, request in copies:
            task = asyncio.create_task(self._run(shadow, request, primary))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _run(
        self, shadow: Shadow, request: InferRequest, primary: InferResponse | None
    ) -> None:
        stats = shadow.stats
        start = time.monotonic_ns()
        try:
            try:
                model = await self.resolve(shadow.model, shadow.version)
                response = await model.infer(request)
            except Exception as exc:  # a shadow's failure is only counted
                stats.record_failure(start, time.monotonic_ns())
                log.debug("shadow copy to '%s' failed: %s", shadow.model, exc)
                return
            except asyncio.CancelledError:  # the router closed before the copy finished
                stats.record_failure(start, time.monotonic_ns())
                raise
            stats.record_success(start, time.monotonic_ns())
            if primary is not None:
                await self._compare(shadow, primary, response)
        finally:
            self.held -= 1

    async def _compare(
        self, shadow: Shadow, primary: InferResponse, response: InferResponse
    ) -> None:
        async with self.turn:
            expected = {t.name: t.data for t in primary.outputs}
            got = {t.name: t.data for t in response.outputs}
            shadow.stats.record(compare(expected, got, shadow.rtol, shadow.atol))
            await asyncio.sleep(0)  # the next copy compares in a later turn

    async def close(self, timeout_s: float = 5.0) -> None:
        """Let copies in flight finish for a while, then cancel the rest."""
        if self.tasks:
            _, late = await asyncio.wait(set(self.tasks), timeout=timeout_s)
            for task in late:
                task.cancel()
