"""The pool while every instance's worker restarts: a caller waits within the bound, or gets a
503 with Retry-After at once (scheduling/restarts.py). The real kill -9 through a gateway:
tests/integration/test_worker_deaths.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from accel_base.errors import Unavailable
from gateway.core.scheduling.pool import InstancePool


class Restarting:
    """What the pool sees of a ProcessInstance whose worker restarts until back(); with
    `down` False, one whose live worker runs a batch until then."""

    def __init__(
        self, wait_s: float, expected_in_s: float | None = None, down: bool = True
    ) -> None:
        self.retired = False
        self.restart_wait_s = wait_s
        self.down_reason: str | None = None
        if down:
            self.down_reason = "the worker process of instance i-0 died; restarting"
        self.running: asyncio.Future = asyncio.get_running_loop().create_future()
        self.back_at = time.monotonic() + expected_in_s if expected_in_s is not None else None

    @property
    def restarting(self) -> bool:
        return self.down_reason is not None

    def back(self) -> None:
        self.down_reason = self.back_at = None
        self.running.set_result(None)


def test_a_wait_ends_at_the_bound_and_later_callers_are_refused_at_once():
    async def scenario() -> None:
        instance = Restarting(wait_s=0.5)
        pool = InstancePool([instance], "m")
        assert pool.try_acquire() is None
        with pytest.raises(Unavailable, match="the 0.5 s a request waits") as waited:
            await asyncio.wait_for(pool.acquire(), 5)
        assert waited.value.retry_after_s == 1
        assert "model 'm'" in waited.value.message and "died" in waited.value.message
        started = time.monotonic()
        with pytest.raises(Unavailable, match="worker_restart_wait_s"):
            await pool.acquire()  # the restart is overdue: no second wait
        assert time.monotonic() - started < 0.25  # a second wait would take 0.5 s
        instance.back()
        await asyncio.sleep(0)  # the pool takes it back on the loop
        assert await asyncio.wait_for(pool.acquire(), 5) is instance

    asyncio.run(scenario())


def test_a_caller_gets_the_instance_that_comes_back_within_the_bound():
    async def scenario() -> None:
        instance = Restarting(wait_s=60)
        pool = InstancePool([instance], "m")
        assert pool.try_acquire() is None
        asyncio.get_running_loop().call_later(0.05, instance.back)
        assert await asyncio.wait_for(pool.acquire(), 5) is instance

    asyncio.run(scenario())


@pytest.mark.parametrize(("wait_s", "expected_in_s", "retry_after_s"), [(5, 30, 30), (0, 2, 2)])
def test_a_restart_expected_past_the_bound_is_refused_at_once(wait_s, expected_in_s, retry_after_s):
    async def scenario() -> None:
        pool = InstancePool([Restarting(wait_s, expected_in_s)], "m")
        assert pool.try_acquire() is None
        with pytest.raises(Unavailable, match="expected back in about") as refused:
            await asyncio.wait_for(pool.acquire(), 1)
        assert refused.value.retry_after_s == retry_after_s

    asyncio.run(scenario())


def test_a_live_instance_means_no_bound():
    """One instance restarting and one busy with a run: waiting for the busy one is
    queueing, as long as its run lasts."""

    async def scenario() -> None:
        busy = Restarting(wait_s=0.01, down=False)
        pool = InstancePool([Restarting(wait_s=0.01), busy], "m")
        assert pool.try_acquire() is None
        asyncio.get_running_loop().call_later(0.2, busy.back)
        assert await asyncio.wait_for(pool.acquire(), 5) is busy

    asyncio.run(scenario())


def test_every_waiter_is_answered_and_none_is_left_to_block_the_instance_back():
    async def scenario() -> None:
        instance = Restarting(wait_s=0.05)
        pool = InstancePool([instance], "m")
        assert pool.try_acquire() is None
        waits = [asyncio.ensure_future(pool.acquire()) for _ in range(50)]
        results = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), 5)
        assert all(isinstance(r, Unavailable) for r in results), results
        instance.back()
        await asyncio.sleep(0)
        assert pool.try_acquire() is instance  # no answered waiter holds it back

    asyncio.run(scenario())
