"""Load shedding at the fronts: the event loop's lag and the share of requests refused."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.scheduling.admission import Overloaded
from gateway.shedding import MAX_REFUSED_SHARE, LoopShedder


def test_the_refused_share_grows_with_the_lag_past_the_target():
    shedder = LoopShedder(target_lag_s=0.004)
    for lag, share in ((0.0, 0.0), (0.004, 0.0), (0.006, 0.25), (0.008, 0.5), (0.1, 0.95)):
        shedder.lag_s = lag
        assert shedder.refusal_share() == pytest.approx(min(share, MAX_REFUSED_SHARE))


def test_check_refuses_by_the_draw_and_counts():
    draws = iter([0.1, 0.9, 0.3])
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: next(draws))
    shedder.lag_s = 0.008  # refuse half
    with pytest.raises(Overloaded, match="overloaded") as refused:
        shedder.check()
    assert refused.value.retry_after_s == 1 and refused.value.http_status == 503
    shedder.check()  # 0.9: admitted
    with pytest.raises(Overloaded):
        shedder.check()
    assert shedder.refused == 2
    shedder.lag_s = 0.0
    shedder.check()  # never refused without lag


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
        return blocked, shedder.lag_s

    blocked, calm = asyncio.run(scenario())
    assert blocked > 0.004  # a tenth of the 50 ms, after smoothing: not yet refusing
    assert calm < 0.004


def test_nothing_is_refused_while_no_other_request_is_in_flight():
    in_flight = [0]
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.0, busy=lambda: in_flight[0] > 0)
    shedder.lag_s = 1.0  # very late, but from something else (a model loading)
    shedder.check()
    in_flight[0] = 3
    with pytest.raises(Overloaded):
        shedder.check()
