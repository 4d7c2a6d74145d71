"""Load shedding at the fronts: the event loop's lag, the share of requests refused, and
the refusals past the limit on requests admitted at once
(tests/gateway/operation/test_admitted_limit.py tests the limit itself)."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.core.scheduling.admission import Overloaded
from gateway.operation.admitted_limit import UNMEASURED_LIMIT
from gateway.operation.shedding import (
    ENTER_TARGETS,
    IDLE_TICK_S,
    KI,
    LIMITED_TICKS,
    MAX_EXCESS,
    MAX_REFUSED_SHARE,
    OVERDUE_ALL,
    OVERDUE_FROM,
    TICK_S,
    LoopShedder,
)
from tests.clocks import FakeClock


def test_a_growing_lag_starts_shedding_and_the_share_rises_then_falls_once_on_time():
    shedder = LoopShedder(target_lag_s=0.004)
    for lag in (0.006, 0.012):  # each turn half as long again as the last: falling behind
        shedder.observe(lag)
    assert shedder.shedding
    shares = [shedder.refusal_share()]
    for _ in range(20):
        shedder.observe(0.012)  # three times the target, lasting
        shares.append(shedder.refusal_share())
    assert shares == sorted(shares) and shares[1] > 0.4  # met within two ticks
    assert shares[-1] <= MAX_REFUSED_SHARE
    settled = shedder.integral
    for _ in range(200):
        shedder.observe(0.004)  # at the target: the integral part holds where it is
    assert shedder.integral == pytest.approx(settled)
    for _ in range(200):
        shedder.observe(0.0)
    assert shedder.refusal_share() == 0.0 and not shedder.shedding


def test_a_lag_that_does_not_grow_is_a_bounded_backlog_and_refuses_nothing():
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.0)
    for _ in range(100):  # a closed loop of clients: every turn as long, 4.5 targets
        shedder.observe(0.018)
    assert not shedder.shedding and shedder.refusal_share() == 0.0 and not shedder.refuse()


def test_a_steady_lag_while_the_admitted_limit_refuses_starts_shedding():
    """The limit holds the backlog steady, so the lag no longer grows; still late, the
    loop is serving and refusing more than it can: the share takes the rest."""
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.0, served=lambda: {})
    for _ in range(LIMITED_TICKS - 1):
        shedder.pending = UNMEASURED_LIMIT
        assert shedder.refuse()  # by the limit
        shedder.observe(0.018)
    assert not shedder.shedding
    shedder.observe(0.018)  # a tick with no refusal by the limit: the count starts again
    for _ in range(LIMITED_TICKS):
        assert shedder.refuse()
        shedder.observe(0.018)
    assert shedder.shedding
    shedder.pending = 1
    assert shedder.refuse() and shedder.limit_refused == 2 * LIMITED_TICKS - 1


def test_the_limit_refusing_while_the_loop_is_on_time_starts_nothing():
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.0, served=lambda: {})
    for _ in range(10 * LIMITED_TICKS):
        shedder.pending = UNMEASURED_LIMIT
        assert shedder.refuse()  # by the limit: a closed loop past it, say
        shedder.observe(0.004)  # at the target, not past it
    assert not shedder.shedding


def test_a_lag_past_the_entry_mark_starts_shedding_at_once():
    shedder = LoopShedder(target_lag_s=0.004)
    shedder.observe(0.004 * ENTER_TARGETS)
    assert shedder.shedding and shedder.refusal_share() > 0.0


def test_a_lone_stall_refuses_little():
    shedder = LoopShedder(target_lag_s=0.004)
    shedder.observe(0.5)  # one turn of the loop held for half a second
    assert shedder.refusal_share() == pytest.approx(KI * MAX_EXCESS)
    shedder.observe(0.0)
    assert shedder.refusal_share() < KI * MAX_EXCESS


def test_an_overdue_tick_refuses_within_the_turn_while_shedding():
    now = [0.0]
    shedder = LoopShedder(target_lag_s=0.004, clock=lambda: now[0])
    shedder.due = 1.0
    now[0] = 1.0 + 0.004 * (OVERDUE_ALL + 1)  # the tick is five targets late, and due
    assert shedder.refusal_share() == 0.0  # not shedding: a long turn of a closed loop
    shedder.shedding = True
    assert shedder.refusal_share() == MAX_REFUSED_SHARE
    now[0] = 1.0 + 0.004 * (OVERDUE_FROM + OVERDUE_ALL) / 2
    assert shedder.refusal_share() == pytest.approx(MAX_REFUSED_SHARE / 2, abs=0.02)
    shedder.shedding = False
    now[0] = 1.0 + 0.004 * ENTER_TARGETS  # so late that it is a surge: refused anyway
    assert shedder.refusal_share() == MAX_REFUSED_SHARE


def test_past_the_limit_a_request_is_refused_at_once_whatever_the_draw():
    shedder = LoopShedder(target_lag_s=0.002, draw=lambda: 1.0, served=lambda: {})
    assert shedder.limit.value == UNMEASURED_LIMIT  # no rate yet
    shedder.pending = UNMEASURED_LIMIT - 1
    assert not shedder.refuse()  # under the limit, and the loop on time
    assert shedder.refuse(waiting=1)  # at it
    assert not shedder.refuse(waiting=1, counted=True)  # one of them is this request
    assert shedder.refused == 1


def test_a_lone_request_is_never_refused_for_lag_even_if_counted_already():
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.0, busy=lambda: False)
    shedder.share, shedder.pending = 0.9, 1  # the request itself, counted by its front
    shedder.check(counted=True)
    shedder.pending = 2
    with pytest.raises(Overloaded):
        shedder.check(counted=True)


def test_without_a_count_of_answers_nothing_is_limited():
    shedder = LoopShedder(target_lag_s=0.002, draw=lambda: 1.0)
    shedder.pending = 10_000
    assert not shedder.refuse()


def test_off_limits_nothing_however_many_are_in_flight():
    """The default: a closed loop of any size is queued, as Triton would."""
    shedder = LoopShedder(target_lag_s=0.0, draw=lambda: 0.0, served=lambda: {})
    shedder.pending = 10_000
    assert not shedder.refuse(waiting=10_000)


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
    # The shedder's clock moves only when the test says: after the 50 ms block, every
    # tick is on time by it, however busy this machine is.
    clock = FakeClock()
    shedder = LoopShedder(target_lag_s=0.003, clock=clock)

    async def scenario() -> tuple[float, float]:
        watcher = asyncio.create_task(shedder.watch())
        await asyncio.sleep(0.02)
        clock.advance(0.05)  # the loop ran nothing else for 50 ms
        for _ in range(200):  # until the overdue tick has run
            if shedder.lag_s > 0:
                break
            await asyncio.sleep(0.001)
        blocked = shedder.lag_s
        await asyncio.sleep(0.3)  # free again
        watcher.cancel()
        return blocked, shedder.refusal_share()

    blocked, calm = asyncio.run(scenario())
    assert blocked > 0.03
    assert calm == 0.0


def test_watch_reads_the_lag_on_the_shedders_own_clock_not_the_loops():
    """uvloop's clock counts whole milliseconds (a 1 ms target read through it saw 0, 1
    or 2 ms): the tick is due, and found late, on the shedder's clock, here 1,000 s
    behind the loop's. Due on the loop's, the tick would sit 1,000 s ahead of the clock
    the overdue check reads; found late on it, every tick would be 1,000 s late."""
    import uvloop

    # (A target of 100 ms: what is checked is the clock, not this machine's stalls.)
    shedder = LoopShedder(target_lag_s=0.1, clock=lambda: time.monotonic() - 1000.0)

    async def scenario() -> tuple[float, float, float]:
        watcher = asyncio.create_task(shedder.watch())
        await asyncio.sleep(0.05)
        watcher.cancel()
        return shedder.due, shedder.lag_s, shedder.refusal_share()

    due, lag, share = uvloop.run(scenario())
    assert due < time.monotonic() - 999.0
    assert lag < 100 and share == 0.0  # read on the other clock, it would be 1000 s


def test_the_first_request_wakes_an_idle_watch_and_it_ticks_while_requests_come():
    """Idle, the watch sleeps 50 ms; a surge that began in that sleep went unseen for
    60 ms. `simple` runs inline, so no request is in flight at any tick: the requests
    asked about since the last tick keep it ticking."""
    # On a clock the test moves: each due time is read exactly, however late this
    # machine wakes the loop.
    clock = FakeClock()
    shedder = LoopShedder(target_lag_s=0.001, busy=lambda: False, clock=clock)

    async def scenario() -> tuple[float, float, float]:
        watcher = asyncio.create_task(shedder.watch())
        await asyncio.sleep(0.01)
        idle = shedder.due - clock()
        shedder.refuse()  # a request
        for _ in range(3):
            await asyncio.sleep(0)
        woken, tick_due = shedder.due - clock(), shedder.due
        shedder.refuse()  # another, before that tick
        clock.advance(TICK_S)
        for _ in range(2000):  # until the tick has come and the next is set
            if shedder.due > tick_due:
                break
            await asyncio.sleep(0.0005)
        ticking = shedder.due - clock()
        watcher.cancel()
        return idle, woken, ticking

    idle, woken, ticking = asyncio.run(scenario())
    assert idle == pytest.approx(IDLE_TICK_S)  # the idle tick's own due time
    assert woken == pytest.approx(TICK_S) and ticking == pytest.approx(TICK_S)


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


def test_a_stall_while_idle_is_measured_and_what_it_piled_up_is_refused():
    """Idle, the loop blocks for 300 ms (a collection, a synchronous load): the requests
    read in the turn after are overdue, not on time (review: an idle watch had no due
    time, so nothing could be refused for lag until it ticked again)."""
    shedder = LoopShedder(target_lag_s=0.001, draw=lambda: 0.0, busy=lambda: False)

    async def scenario() -> bool:
        watcher = asyncio.create_task(shedder.watch())
        await asyncio.sleep(0.01)  # the watch is asleep on its idle tick
        time.sleep(IDLE_TICK_S + 0.3)  # the loop stalls past that tick
        shedder.pending = 1  # a request read in the turn after the stall
        try:
            shedder.check()
        except Overloaded:
            return True
        finally:
            watcher.cancel()
        return False

    assert asyncio.run(scenario())
