"""Shared by the scheduler tests: a burst of requests, all at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from accel_base.errors import Unavailable

Refusal = tuple[Unavailable, float]  # the error, and seconds from the burst's start


async def _burst(
    infer: Callable[[Any], Awaitable[Any]], requests: list[Any]
) -> tuple[list[Any], list[Refusal]]:
    began = time.monotonic()

    async def timed(request: Any) -> Any:
        try:
            return await infer(request)
        except Unavailable as exc:
            return exc, time.monotonic() - began

    results = await asyncio.gather(*(timed(r) for r in requests))
    refused = [r for r in results if isinstance(r, tuple)]
    return [r for r in results if not isinstance(r, tuple)], refused


@pytest.fixture
def burst() -> Callable[..., Awaitable[tuple[list[Any], list[Refusal]]]]:
    """`await burst(infer, requests)`: every request at once; (answers, refusals)."""
    return _burst
