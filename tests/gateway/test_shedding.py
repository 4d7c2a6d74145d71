"""Load shedding at the fronts: the event loop's lag and the share of requests refused."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.scheduling.admission import Overloaded
from gateway.shedding import KI, MAX_EXCESS, MAX_REFUSED_SHARE, LoopShedder


def test_the_share_rises_while_the_loop_stays_late_and_falls_once_on_time():
    shedder = LoopShedder(target_lag_s=0.004)
    shares = []
    for _ in range(20):
        shedder.observe(0.012)  # three times the target, lasting
        shares.append(shedder.refusal_share())
    assert shares == sorted(shares) and shares[1] > 0.4  # a surge is met within two ticks
    assert shares[-1] <= MAX_REFUSED_SHARE
    settled = shedder.integral
    for _ in range(200):
        shedder.observe(0.004)  # at the target: the integral part holds where it is
    assert shedder.integral == pytest.approx(settled)
    for _ in range(200):
        shedder.observe(0.0)
    assert shedder.refusal_share() == 0.0


def test_a_lone_stall_refuses_little():
    shedder = LoopShedder(target_lag_s=0.004)
    shedder.observe(0.5)  # one turn of the loop held for half a second
    assert shedder.refusal_share() == pytest.approx(KI * MAX_EXCESS)
    shedder.observe(0.0)
    assert shedder.refusal_share() < KI * MAX_EXCESS


def test_check_refuses_by_the_draw_and_counts():
    draws = iter([0.1, 0.9, 0.3])
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: next(draws))
    shedder.share = 0.5
    with pytest.raises(Overloaded, match="overloaded") as refused:
        shedder.check()
    assert refused.value.retry_after_s == 1 and refused.value.http_status == 503
    shedder.check()  # 0.9: admitted
    assert shedder.refuse()
    assert shedder.refused == 2
    shedder.share = 0.0
    shedder.check()  # never refused without lag


def test_off_refuses_nothing():
    shedder = LoopShedder(target_lag_s=0.0, draw=lambda: 0.0)
    for _ in range(10):
        shedder.observe(1.0)
    assert not shedder.enabled and shedder.refusal_share() == 0.0 and not shedder.refuse()


def test_watch_sees_a_blocked_loop_and_forgets_it():
    shedder = LoopShedder(target_lag_s=0.003)

    async def scenario() -> tuple[float, float]:
        watcher = asyncio.create_task(shedder.watch())
        await asyncio.sleep(0.02)
        time.sleep(0.05)  # the loop runs nothing else for 50 ms
        for _ in range(3):  # the overdue tick runs
            await asyncio.sleep(0)
        blocked = shedder.lag_s
        await asyncio.sleep(0.3)  # free again
        watcher.cancel()
        return blocked, shedder.refusal_share()

    blocked, calm = asyncio.run(scenario())
    assert blocked > 0.03
    assert calm == 0.0


def test_nothing_is_refused_while_no_other_request_is_in_flight():
    in_flight = [0]
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.0, busy=lambda: in_flight[0] > 0)
    shedder.share = 0.9  # very late, but from something else (a model loading)
    shedder.check()
    in_flight[0] = 3
    with pytest.raises(Overloaded):
        shedder.check()
    in_flight[0] = 0
    shedder.pending = 1  # admitted by a front, not yet in the core's count
    with pytest.raises(Overloaded):
        shedder.check()
