"""The default admission under a bursty load below saturation: never refused.

The soak's load generators run late now and then (a pause of 50 to 300 ms, then the late
requests sent as fast as they can go), so arrivals come in bursts while their average
stays at half of what the model serves. A catch-up burst outruns service for a few short
windows; the growth rule must wait until the backlog has grown for a horizon (about a
second) before it sheds, which such a burst never does. Pure, with a simulated clock."""

from __future__ import annotations

import math
import random

import pytest

from gateway.core.scheduling import growth
from gateway.core.scheduling.admission import Admission
from tests.gateway.core.scheduling.test_growth import Run, simulate

MODELS = {
    # (seconds a run, seconds a row, rows a batch, the front's share of a request's cost
    # at saturation: a front parsing on the model's core, ahead of it)
    "slow batched": (0.08, 0.0, 32, 0.0),  # the perf_analyzer model: 400 rows/s
    "fast batched": (0.001, 0.0001, 64, 0.0),  # a run costs by its rows too: 8,600 rows/s
    "unbatched": (0.005, 0.0, 1, 0.0),  # 200 rows/s
    # The soak's: `mlp` on the gateway's one core, the front taking about 150 us of a
    # request's 220. A burst the front parses starves the model while it lasts.
    "soak": (0.001, 0.0001, 64, 0.7),
}


def saturation(model: str) -> tuple[float, float]:
    """(Requests a second served at saturation, seconds of front a request)."""
    run_s, per_row_s, max_batch, share = MODELS[model]
    per_row = (run_s + per_row_s * max_batch) / max_batch  # in full batches
    front_s = share / (1 - share) * per_row
    return 1 / (front_s + per_row), front_s


def half_saturation(model: str, seed: int) -> tuple[Admission, Run]:
    """A load generator due at half of saturation that stalls and catches up; the seed
    varies the rest: Poisson or paced, catching up at once, or at 2x or 1.3x saturation
    (the slower, the longer its catch-up outruns service)."""
    run_s, per_row_s, max_batch, _ = MODELS[model]
    rate, front_s = saturation(model)
    catch_up = [math.inf, 2.0, 1.3][seed % 3] * rate
    arrivals = late_generator(0.5 * rate, 8.0, seed, catch_up, paced=seed % 2 == 0)
    admission = Admission("m", instances=1, budget_ms=None, max_batch=max_batch)
    run = simulate(
        admission, arrivals, run_s, max_batch, 10.0, False, per_row_s=per_row_s, front_s=front_s
    )
    assert run.served + len(run.refused) == len(arrivals)  # all answered
    return admission, run


def late_generator(
    rate: float,
    seconds: float,
    seed: int,
    catch_up: float,
    paced: bool,
    stall_every_s: float = 1.0,
    stalls_s: tuple[float, float] = (0.05, 0.3),
) -> list[float]:
    """Send times of an open-loop generator due to send `rate` requests a second (Poisson,
    or `paced` evenly) that stalls now and then (for `stalls_s`, about every
    `stall_every_s`) and then sends what it owes at `catch_up` a second (inf: at once)."""
    rng = random.Random(seed)
    due, t = [], 0.0
    while (t := t + (1 / rate if paced else rng.expovariate(rate))) < seconds:
        due.append(t)
    stalls, t = [], 0.0
    while t < seconds:
        start = t + rng.expovariate(1 / stall_every_s)
        t = start + rng.uniform(*stalls_s)
        stalls.append((start, t))
    stalls.append((math.inf, math.inf))
    sends, last, at = [], -math.inf, 0
    for when in due:
        when = max(when, last + 1 / catch_up)
        while stalls[at][1] <= when:
            at += 1
        if stalls[at][0] <= when:  # stalled: it sends when it wakes, then as fast as it can
            when = stalls[at][1]
        sends.append(when)
        last = when
    return sends


def test_the_generator_stalls_and_catches_up_but_keeps_its_average():
    sends = late_generator(1000, 20.0, seed=1, catch_up=3000, paced=True)
    assert len(sends) == 19_999 and sends == sorted(sends)
    gaps = [b - a for a, b in zip(sends, sends[1:], strict=False)]
    assert max(gaps) > 0.05  # it stalled
    assert sum(gap < 0.0005 for gap in gaps) > 1000  # and caught up at 3,000 a second
    assert sends[-1] < 20.5  # but never fell behind for long


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8])
def test_bursts_at_half_saturation_are_never_refused(model, seed):
    admission, run = half_saturation(model, seed)
    assert run.refused == []
    assert not admission.growth.shedding


def test_the_soaks_bursts_were_refused_by_the_short_rule(monkeypatch):
    # The rule before the horizon (three windows that grew, 150 ms here) shed the soak's
    # catch-up bursts: so the test above can fail.
    monkeypatch.setattr(growth, "HORIZON_S", 0.0)
    assert sum(len(half_saturation("soak", seed)[1].refused) for seed in range(1, 9)) > 0
