"""The default admission (no queue budget): a closed loop's backlog, however long its wait,
is never refused; a backlog that grows because arrivals outrun service is. Pure, with a
simulated clock: a model of one instance running batches, fed by closed or open loops."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from dataclasses import dataclass, field

import pytest

from gateway.core.scheduling.admission import EXEMPT_PER_INSTANCE, Admission, Overloaded
from gateway.core.scheduling.growth import CALM_S, GROWING_WINDOWS, HORIZON_S, MIN_WINDOW_S, Growth
from tests.clocks import FakeClock


@dataclass
class Run:
    """What a simulated run saw."""

    served: int = 0
    refused: list[float] = field(default_factory=list)  # when each refusal came
    waits: list[float] = field(default_factory=list)  # admitted requests' queue waits
    most_queued: int = 0
    served_after: dict[float, int] = field(default_factory=dict)


def simulate(
    admission: Admission,
    arrivals: list[float],
    run_s: float,
    max_batch: int,
    until: float,
    closed_loop: bool,
    rtt_s: float = 0.0005,
    per_row_s: float = 0.0,
    front_s: float = 0.0,
) -> Run:
    """Requests arrive at `arrivals` (each a client); one instance runs batches of up to
    `max_batch` queued rows, each `run_s` plus `per_row_s` a row. A front on the same core
    parses each arrival first, in turn, for `front_s` and ahead of the model: the request
    reaches admission then, and the running batch ends that much later. In a closed loop every
    answered client sends again `rtt_s` later; refused ones too (as a client that ignores
    Retry-After would)."""
    run, order = Run(), itertools.count()
    started = ends = 0.0  # the running batch's
    front_free = 0.0  # when the front has parsed what arrived so far
    events = [(t, next(order), "arrive") for t in arrivals]
    heapq.heapify(events)
    queue: list[float] = []  # arrival times of queued requests
    batch: list[float] = []  # the running batch's

    def start(now: float) -> None:
        nonlocal batch, started, ends
        batch, queue[:] = queue[:max_batch], queue[max_batch:]
        run.waits.extend(now - t for t in batch)
        started, ends = now, now + run_s + per_row_s * len(batch)
        heapq.heappush(events, (ends, next(order), "done"))

    while events and events[0][0] < until:
        now, _, what = heapq.heappop(events)
        if what == "done" and now < ends:  # the front took the core meanwhile
            heapq.heappush(events, (ends, next(order), "done"))
            continue
        if what == "done":
            admission.observe(now - started, len(batch))
            run.served += len(batch)
            if closed_loop:
                for _ in batch:
                    heapq.heappush(events, (now + rtt_s, next(order), "arrive"))
            batch = []
            if queue:
                start(now)
            continue
        if what == "arrive" and front_s:  # parsed in turn, then admitted or refused
            front_free = max(now, front_free) + front_s
            heapq.heappush(events, (front_free, next(order), "parsed"))
            continue
        if batch:
            ends += front_s
        try:
            admission.check(1 if batch else 0, len(queue), len(queue) + len(batch), now)
        except Overloaded:
            run.refused.append(now)
            if closed_loop:
                heapq.heappush(events, (now + rtt_s, next(order), "arrive"))
            continue
        queue.append(now)
        run.most_queued = max(run.most_queued, len(queue))
        if not batch:
            start(now)
    return run


def burst(clients: int, over_s: float, at: float = 0.0) -> list[float]:
    return [at + over_s * i / clients for i in range(clients)]


def steady(rate: float, start: float, end: float) -> list[float]:
    return [start + i / rate for i in range(int((end - start) * rate))]


@pytest.mark.parametrize("ramp_s", [0.0, 0.005, 0.05, 0.2, 0.5])
def test_a_closed_loop_on_a_slow_batched_model_is_never_refused(ramp_s):
    # The case: 64 clients, 80 ms a batch of 32. Every one waits about 160 ms,
    # always: past any small fixed budget, and not growing.
    admission = Admission("m", instances=1, budget_ms=None, max_batch=32)
    run = simulate(admission, burst(64, ramp_s), 0.08, 32, until=10.0, closed_loop=True)
    assert run.refused == []
    assert run.served > 0.9 * 10.0 / 0.08 * 32  # the instance never idled
    assert max(run.waits) > 0.05  # longer than the old 50 ms default budget allowed


@pytest.mark.parametrize(("clients", "run_s", "max_batch"), [
    (64, 0.001, 32),  # fast and batched: many windows to a ramp
    (64, 0.01, 1),  # unbatched: 64 runs queued, 630 ms of wait
    (256, 0.08, 32),  # many clients: eight batches deep
    (16, 0.3, 4),  # slower than a window is long at the start
    (1000, 0.08, 32),  # a thousand clients: 2.5 s of queue, always
    (1000, 0.002, 64),
])  # fmt: skip
@pytest.mark.parametrize("ramp_s", [0.0, 0.03, 0.1])
def test_closed_loops_of_any_size_and_speed_are_never_refused(clients, run_s, max_batch, ramp_s):
    admission = Admission("m", instances=1, budget_ms=None, max_batch=max_batch)
    arrivals = burst(clients, ramp_s)
    run = simulate(admission, arrivals, run_s, max_batch, until=5.0, closed_loop=True)
    assert run.refused == []
    assert run.served > 0.8 * (5.0 - ramp_s) / run_s * max_batch


def test_a_closed_loop_that_adds_clients_slowly_is_never_refused():
    # Locust-style: a client more every 50 ms, up to 100, on a model serving 400 rows/s.
    admission = Admission("m", instances=1, budget_ms=None, max_batch=32)
    run = simulate(admission, burst(100, 5.0), 0.08, 32, until=8.0, closed_loop=True)
    assert run.refused == []


@pytest.mark.parametrize(("run_s", "max_batch"), [(0.08, 32), (0.002, 32), (0.01, 1)])
def test_an_open_loop_past_saturation_is_shed_once_it_grows(run_s, max_batch):
    capacity = max_batch / run_s  # rows a second
    admission = Admission("m", instances=1, budget_ms=None, max_batch=max_batch)
    arrivals = steady(3 * capacity, 0.0, 5.0)
    run = simulate(admission, arrivals, run_s, max_batch, until=7.0, closed_loop=False)
    assert run.refused, "an open loop at 3x saturation was never shed"
    first = run.refused[0]
    # Found once it has grown for the horizon, judged within a window or two after (each
    # a couple of runs, at least MIN_WINDOW_S).
    window = max(MIN_WINDOW_S, 2 * run_s)
    assert HORIZON_S <= first < HORIZON_S + 3 * window + 2 * run_s
    # The queue stopped growing: what piled up before the shedding is all it ever held
    # (an unshed queue would reach 2/3 of the 5 s of arrivals).
    assert run.most_queued < 3 * capacity * (first + 2 * run_s)
    assert run.most_queued < 0.2 * len(arrivals)
    # Served at full speed throughout: shedding keeps full batches queued.
    assert run.served > 0.85 * 5.0 * capacity
    # Admitted requests after the first refusals waited about a couple of runs (or the
    # exempt few requests ahead, unbatched), not the whole backlog's time.
    late = run.waits[-int(capacity) :]  # the last second's worth
    assert max(late) < (4 if max_batch > 1 else EXEMPT_PER_INSTANCE + 1) * run_s
    assert max(run.refused) < 5.0 + run_s  # nothing refused once the load stopped


def test_shedding_stops_when_the_load_falls_back_under_saturation():
    admission = Admission("m", instances=1, budget_ms=None, max_batch=32)
    arrivals = steady(1200, 0.0, 2.0) + steady(200, 2.0, 6.0)  # 3x, then half
    run = simulate(admission, arrivals, 0.08, 32, until=7.0, closed_loop=False)
    # The refusals end once the load has stayed under saturation for CALM_S (a window or
    # two later); until then the requests would have joined the backlog of the overload.
    assert run.refused and max(run.refused) < 2.0 + CALM_S + 2 * 0.16
    assert not admission.growth.shedding


def test_an_explicit_budget_still_refuses_a_closed_loop_past_it():
    admission = Admission("m", instances=1, budget_ms=50, max_batch=32)
    run = simulate(admission, burst(64, 0.0), 0.08, 32, until=2.0, closed_loop=True)
    assert run.refused  # the old behaviour, asked for: 160 ms of wait is past 50 ms


def test_a_deadline_refuses_while_nothing_grows():
    admission = Admission("m", instances=1, budget_ms=None, max_batch=32)
    admission.observe(0.08, 32)
    with pytest.raises(Overloaded, match="deadline"):
        admission.check(1, 64, requests_ahead=65, now=0.0, deadline=0.1)
    admission.check(1, 64, requests_ahead=65, now=0.0)  # no deadline, no growth: queued


# ---- the meter on its own ---------------------------------------------------------------


def feed(growth: Growth, windows: list[tuple[int, int, int]], window_s: float = 0.1) -> list[bool]:
    """Each window: (least rows queued at its arrivals, rows arrived, rows served); one
    arrival opens it at the least, the rest arrive a little later at the least + 1.
    Returns whether each window's first arrival found the backlog being shed (the
    window before is judged then)."""
    shedding = []
    for index, (least, arrived, served) in enumerate(windows):
        now = index * window_s * 1.01  # past the window's end, whatever the rounding
        shedding.append(growth.arrive(now, least, 1, window_s))
        for _ in range(arrived - 1):
            growth.arrive(now + window_s / 2, least + 1, 1, window_s)
        growth.serve(served)
    return shedding


def test_the_meter_sheds_after_windows_that_grew_for_the_horizon_and_stops_when_they_stop():
    window_s = 0.1
    # Judged at the next window's start, once the windows that grew (the first is the
    # second window) span the horizon. The feed's windows start 1.01 window apart.
    needed = max(GROWING_WINDOWS, math.ceil(HORIZON_S / (window_s * 1.01)))
    grew = needed + 3
    growing = [(0, 10, 10)] + [(100 * i, 300, 100) for i in range(1, grew + 1)]
    # It ends once arrivals have not outrun service for CALM_S.
    calm = math.ceil(CALM_S / (window_s * 1.01))
    shedding = feed(Growth(), growing + [(100 * grew, 10, 100)] * (calm + 1), window_s)
    assert shedding == [False] * (needed + 1) + [True] * (3 + calm) + [False]


def test_growth_shorter_than_the_horizon_is_never_shed():
    # A catch-up burst: arrivals at 3x service for most of the horizon, then it drains.
    windows = int(HORIZON_S / 0.1) - 1
    burst = [(0, 10, 10)] + [(100 * i, 300, 100) for i in range(1, windows)]
    assert windows > GROWING_WINDOWS
    assert not any(feed(Growth(), burst + [(0, 10, 1000)] * 3))


def test_the_meter_ignores_a_backlog_that_rose_without_arrivals_outrunning_service():
    # The least rose but no more arrived than were served: a closed loop settling.
    assert not any(feed(Growth(), [(i, 100, 100) for i in range(10)]))
    # Arrivals outran service, but the standing queue did not rise: a burst that drained.
    assert not any(feed(Growth(), [(0, 300, 100)] * 10))


def test_a_quiet_window_ends_the_shedding():
    growth = Growth()
    feed(growth, [(100 * i, 300, 100) for i in range(int(HORIZON_S / 0.1) + 3)])
    assert growth.shedding
    assert not growth.arrive(10.0, 0, 1, 0.1)  # long after: the load stopped


# ---- the dynamic batcher, on a real event loop, with the default -------------------------


def test_the_batcher_queues_a_closed_loop_and_sheds_an_open_one_by_default():
    """On a clock of its own: a batch moves it 20 ms (run on the loop, as on one core),
    and a turn of the loop with nothing to run moves it 5 ms, so what the meter sees is
    the same on any machine."""
    from tests.gateway.core.scheduling.test_dynamic import InlineBackend, make_batcher, request

    clock = FakeClock()

    class Clocked(InlineBackend):
        def run(self, inputs, output_names):
            clock.advance(0.02)  # 20 ms a batch of up to 32: 1,600 rows a second
            return super().run(inputs, output_names)

    backend = Clocked()
    batcher = make_batcher(
        [backend], batching="", max_batch_size=32, max_queue_size=10_000, cores=1,
        run_ns=20_000, clock=clock,
    )  # fmt: skip

    async def client(until: float, refused: list) -> None:
        while clock() < until:
            try:
                await batcher.infer(request(1.0))
            except Overloaded as exc:
                refused.append(exc)
                return

    async def turn() -> None:
        before = clock()
        await asyncio.sleep(0)
        if clock() == before:
            clock.advance(0.005)  # nothing ran: time passes all the same

    async def go() -> tuple[list, list]:
        closed: list = []
        # 64 clients that each wait for their answer: two batches of queue, always.
        until = clock() + 1.0
        clients = asyncio.gather(*(client(until, closed) for _ in range(64)))
        while not clients.done():
            await turn()
        # Then an open loop of 4,000 requests a second for 2 s, 2.5x what the model serves
        # at most: its backlog grows for the horizon before it is shed.
        opened, tasks = [], []
        began = clock()
        while len(tasks) < 8000:
            owed = min(8000, int(4000 * (clock() - began)) + 1) - len(tasks)
            for _ in range(owed):
                tasks.append(asyncio.ensure_future(batcher.infer(request(1.0))))
            await turn()
        answers = asyncio.gather(*tasks, return_exceptions=True)
        while not answers.done():
            await turn()
        opened = [result for result in answers.result() if isinstance(result, Exception)]
        await batcher.close()
        return closed, opened

    closed, opened = asyncio.run(go())
    assert closed == []
    assert opened and all(isinstance(exc, Overloaded) for exc in opened)
    assert "outrun service" in opened[0].message and opened[0].retry_after_s >= 1
    # Unshed, all 8,000 would have queued (max_queue_size is 10,000); shed after about a
    # second, most of the second second's 4,000 are refused.
    assert len(opened) > 1000, len(opened)
