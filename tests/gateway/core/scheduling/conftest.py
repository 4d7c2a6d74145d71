"""Shared by the scheduler tests: a burst of requests, all at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from accel_base.errors import Unavailable

Refusal = tuple[Unavailable, Any]  # the error, and `mark()` when it came


async def _burst(
    infer: Callable[[Any], Awaitable[Any]],
    requests: list[Any],
    mark: Callable[[], Any],
    hold: threading.Event | None = None,
) -> tuple[list[Any], list[Refusal]]:
    """`mark`: what to note at each refusal, e.g. how many runs the backend had made
    (a refusal "at once" is one before any of the burst ran). `hold`: a gate the
    backend's runs wait for, closed until every request of the burst was decided (its
    first run's thread would otherwise run meanwhile and move the mark)."""

    async def timed(request: Any) -> Any:
        try:
            return await infer(request)
        except Unavailable as exc:
            return exc, mark()

    if hold is not None:
        hold.clear()
    gathered = asyncio.gather(*(timed(r) for r in requests))
    if hold is not None:
        for _ in range(3):  # the burst's requests each take their first step
            await asyncio.sleep(0)
        hold.set()
    results = await gathered
    refused = [r for r in results if isinstance(r, tuple)]
    return [r for r in results if not isinstance(r, tuple)], refused


@pytest.fixture
def burst() -> Callable[..., Awaitable[tuple[list[Any], list[Refusal]]]]:
    """`await burst(infer, requests, mark, hold=None)`: every request at once; (answers,
    refusals)."""
    return _burst
