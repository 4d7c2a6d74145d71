"""The limit on inference requests admitted at once: Little's law on measured windows."""

from __future__ import annotations

import math
import time

import pytest

from gateway.operation.admitted_limit import (
    FIRST_WINDOW_S,
    HEADROOM,
    RATE_WINDOW_S,
    UNMEASURED_LIMIT,
    AdmittedLimit,
)
from gateway.operation.drain import InFlight


class Core:
    """InFlight.served's counters of one model, moved by hand."""

    def __init__(self) -> None:
        self.answered, self.inside = 0, 0.0

    def served(self) -> dict[str, tuple[int, int, float]]:
        return {"m": (0, self.answered, self.inside)}


def test_the_limit_is_the_answers_of_the_service_time_and_the_wait_allowed():
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    assert limit.value == UNMEASURED_LIMIT
    limit.follow(0.0, working=True)
    core.answered, core.inside = 50, 50 * 0.0002  # 5,000 a second, 0.2 ms inside each
    limit.follow(FIRST_WINDOW_S, working=True)
    assert limit.value == pytest.approx(5000 * (0.0002 + 0.004) + HEADROOM)
    assert limit.service_s["m"] == pytest.approx(0.0002)


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
    assert limit.service_s["m"] == pytest.approx(0.02, rel=0.05)


def test_the_least_time_inside_is_the_service_time_later_windows_queue_on():
    core = Core()
    limit = AdmittedLimit(wait_s=0.004, served=core.served)
    limit.follow(0.0, working=True)
    core.answered, core.inside = 40, 40 * 0.003  # 3 ms inside each
    limit.follow(FIRST_WINDOW_S, working=True)
    core.answered, core.inside = 440, core.inside + 400 * 0.030  # queued: 30 ms each
    limit.follow(FIRST_WINDOW_S + RATE_WINDOW_S, working=True)
    assert limit.service_s["m"] == pytest.approx(0.003)
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
    assert limit.value == UNMEASURED_LIMIT and not limit.service_s


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


def test_a_cheap_models_requests_do_not_pull_a_slow_ones_service_time_down():
    """A window of only a cheap model's answers beside a slow model's closed loop: each
    keeps its own service time, and the slow one's 64 clients stay admitted."""
    counts = {"slow": [0, 0, 0.0], "cheap": [1, 0, 0.0]}
    limit = AdmittedLimit(wait_s=0.004, served=lambda: {m: tuple(c) for m, c in counts.items()})
    limit.follow(0.0, working=True)
    now = 0.0
    for window in range(12):
        length = FIRST_WINDOW_S if window == 0 else RATE_WINDOW_S
        now += length
        counts["slow"][1] += round(3200 * length)  # 64 clients, 20 ms each
        counts["slow"][2] += 64 * length
        if window == 3:  # a burst of the cheap model's, 0.2 ms each
            counts["cheap"][1] += 500
            counts["cheap"][2] += 500 * 0.0002
        limit.follow(now, working=True)
        assert limit.value > 64
    assert limit.service_s["slow"] == pytest.approx(0.02, rel=0.05)
    assert limit.service_s["cheap"] == pytest.approx(0.0002)


def test_in_flight_counts_answers_with_a_result_and_the_time_requests_spent_inside():
    in_flight = InFlight()
    first, second = in_flight.enter("m"), in_flight.enter("m")
    time.sleep(0.02)
    in_flight.leave(first, answered=True)
    in_flight.leave(second, answered=False)  # failed fast: says nothing of serving's time
    [(_, answered, inside)] = in_flight.served().values()
    assert answered == 1 and in_flight.count == 0
    assert inside >= 2 * 0.02 * 0.9  # two requests, 20 ms each


def test_a_request_leaves_under_the_name_it_came_with():
    """A router renames the request it passes on to its variant; the request still
    leaves the router's count, and the count of requests in flight goes back to 0."""
    in_flight = InFlight()
    token = in_flight.enter("ab")
    in_flight.enter(None)  # a Python model's call inside it: for the drain only
    in_flight.leave(None, answered=True)
    in_flight.leave(token, answered=True)
    assert in_flight.count == 0 and list(in_flight.served()) == ["ab"]


def test_a_name_that_never_answered_is_not_kept():
    """Any client can name models that do not exist: their counters must not pile up."""
    in_flight = InFlight()
    for index in range(100):
        in_flight.leave(in_flight.enter(f"missing-{index}"), answered=False)
    assert in_flight.served() == {} and in_flight.count == 0


def test_counters_made_anew_within_a_window_start_from_zero():
    """A model's only request in flight fails (its counters go), and its next answers
    within the same window: measured from 0, not from the old counters (which gave a
    negative service time, and a limit that refused everything)."""
    in_flight = InFlight()
    limit = AdmittedLimit(wait_s=0.004, served=in_flight.served)
    slow = in_flight.enter("m")
    limit.follow(0.0, working=True)
    time.sleep(0.03)
    limit.follow(FIRST_WINDOW_S, working=True)  # in flight, none answered: no part
    time.sleep(0.02)  # the window's start now holds 50 ms inside
    in_flight.leave(slow, answered=False)
    in_flight.leave(in_flight.enter("m"), answered=True)  # a quick one, counted anew
    limit.follow(FIRST_WINDOW_S + RATE_WINDOW_S, working=True)
    assert 0.0 <= limit.service_s["m"] < 0.04  # the quick one's, not the 50 ms window's
    assert limit.value >= HEADROOM
