"""The limit on inference requests admitted at once: Little's law on measured windows."""

from __future__ import annotations

import math
import time

import pytest

from gateway.admitted_limit import (
    FIRST_WINDOW_S,
    HEADROOM,
    RATE_WINDOW_S,
    UNMEASURED_LIMIT,
    AdmittedLimit,
)
from gateway.drain import InFlight


class Core:
    """InFlight.served's counters, moved by hand."""

    def __init__(self) -> None:
        self.answered, self.inside = 0, 0.0

    def served(self) -> tuple[int, float]:
        return self.answered, self.inside


def test_the_limit_is_the_answers_of_the_service_time_and_the_wait_allowed():
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    assert limit.value == UNMEASURED_LIMIT
    limit.follow(0.0, working=True)
    core.answered, core.inside = 50, 50 * 0.0002  # 5,000 a second, 0.2 ms inside each
    limit.follow(FIRST_WINDOW_S, working=True)
    assert limit.value == pytest.approx(5000 * (0.0002 + 0.004) + HEADROOM)
    assert limit.service_s == pytest.approx(0.0002)


def test_a_slow_model_keeps_its_closed_loop():
    """64 clients of a model that answers each in 20 ms: by Little's law, 3,200 a second.
    The wait allowed is 4 ms, yet the limit must not cut the 64 (a limit of the answers
    in the wait alone would settle near 10, and serve a sixth as much)."""
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    limit.follow(0.0, working=True)
    now = 0.0
    for length in (FIRST_WINDOW_S, *[RATE_WINDOW_S] * 20):
        now += length
        core.answered += round(3200 * length)
        core.inside += 64 * length
        limit.follow(now, working=True)
        assert limit.value > 64
    assert limit.service_s == pytest.approx(0.02, rel=0.05)


def test_the_least_time_inside_is_the_service_time_later_windows_queue_on():
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    limit.follow(0.0, working=True)
    core.answered, core.inside = 40, 40 * 0.003  # 3 ms inside each
    limit.follow(FIRST_WINDOW_S, working=True)
    core.answered, core.inside = 440, core.inside + 400 * 0.030  # queued: 30 ms each
    limit.follow(FIRST_WINDOW_S + RATE_WINDOW_S, working=True)
    assert limit.service_s == pytest.approx(0.003)
    assert limit.value == pytest.approx(4000 * (0.003 + 0.004) + HEADROOM)


def test_runs_longer_than_a_window_leave_the_limit_and_idleness_forgets_it():
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    limit.follow(0.0, working=True)
    core.answered, core.inside = 10, 10 * 0.001
    limit.follow(FIRST_WINDOW_S, working=True)
    measured = limit.value
    limit.follow(FIRST_WINDOW_S + RATE_WINDOW_S, working=True)  # in flight, none answered
    assert limit.value == measured
    limit.follow(FIRST_WINDOW_S + 2 * RATE_WINDOW_S, working=False)  # nothing at all
    assert limit.value == UNMEASURED_LIMIT and limit.service_s == math.inf


def test_answers_count_as_work_though_none_was_in_flight_when_asked():
    """`simple` runs inline: each request starts and ends within one turn of the loop,
    so the shedder's tick never finds one in flight on a busy server."""
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    limit.follow(0.0, working=False)
    core.answered, core.inside = 30, 30 * 0.0002
    limit.follow(FIRST_WINDOW_S, working=False)
    assert limit.value == pytest.approx(3000 * (0.0002 + 0.004) + HEADROOM)


def test_no_limit_when_off_or_without_counters():
    for limit in (AdmittedLimit(0.0, Core().served), AdmittedLimit(0.004, None)):
        limit.follow(0.0, working=True)
        limit.follow(1.0, working=True)
        assert limit.value == math.inf


def test_in_flight_counts_answers_with_a_result_and_the_time_requests_spent_inside():
    in_flight = InFlight()
    answered, inside = in_flight.served()
    in_flight.enter()
    in_flight.enter()
    time.sleep(0.02)
    in_flight.leave()  # answered
    in_flight.leave(answered=False)  # failed fast: says nothing of serving's time
    after, inside_after = in_flight.served()
    assert after - answered == 1 and in_flight.count == 0
    assert inside_after - inside >= 2 * 0.02 * 0.9  # two requests, 20 ms each
