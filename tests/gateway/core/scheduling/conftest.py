"""Shared by the scheduler tests: a burst of requests, all at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from accel_base.errors import Unavailable

Refusal = tuple[Unavailable, Any]  # the error, and `mark()` when it came


async def _burst(
    infer: Callable[[Any], Awaitable[Any]], requests: list[Any], mark: Callable[[], Any]
) -> tuple[list[Any], list[Refusal]]:
    """`mark`: what to note at each refusal, e.g. how many runs the backend had made
    (a refusal "at once" is one before any of the burst ran)."""

    async def timed(request: Any) -> Any:
        try:
            return await infer(request)
        except Unavailable as exc:
            return exc, mark()

    results = await asyncio.gather(*(timed(r) for r in requests))
    refused = [r for r in results if isinstance(r, tuple)]
    return [r for r in results if not isinstance(r, tuple)], refused


@pytest.fixture
def burst() -> Callable[..., Awaitable[tuple[list[Any], list[Refusal]]]]:
    """`await burst(infer, requests, mark)`: every request at once; (answers, refusals)."""
    return _burst
