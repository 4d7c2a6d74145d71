"""Is a model's backlog growing? Arrivals that outrun service, measured over windows.

A closed loop of N clients (perf_analyzer, Locust, a pool of callers that each wait for
their answer) brings at most N requests: its backlog rises once, when the clients start,
and then stands still, however slow the model. Triton queues it, and so do we. An open
loop past saturation brings more than the model serves: its backlog grows for as long as
the load lasts, and every request in it waits longer than the one before. By default only
the second is shed (admission.py); a fixed budget cannot tell them apart, since a closed
loop's standing wait can be any length (64 clients of a model that runs 80 ms batches of
32 wait about 160 ms, always).

Time is cut into windows of WINDOW_RUNS runs of the model (at least MIN_WINDOW_S),
each starting at an arrival. A window *grew* when
- the backlog it always had, the least rows queued that any of its arrivals found, is
  more than the window before's: a standing queue that rose, not a burst on top of one;
- and the rows that arrived in it (refused ones too: that is the load offered) are more
  than 1 + GROWTH_FRACTION times the rows served in it: arrivals outran service.
Windows in a row that grew start the shedding once there are GROWING_WINDOWS of them and
they span HORIZON_S (a second). A closed loop's start is one rise that ends when its last
client has sent: a rise shorter than a window is seen growing by at most two windows in a
row (the one it began in and the next). A burst on a load that is below capacity over the
horizon is a rise too, however it arrives: a load generator that stalled for 300 ms and
then sends what it owes, or a front on the model's core that parses the burst ahead of
the model and starves it meanwhile, outruns service for a few short windows, and the
backlog drains before the horizon. (In the soak, three 50 ms windows were enough for such
bursts to be shed at half saturation.) Growth that lasts the horizon means arrivals above
1.25x what was served, over a second, with a backlog that never emptied: an overload.
The shedding lasts until arrivals have not outrun service (or not come) for CALM_S; a
short stall of the load, or of the event loop, does not end it. While it lasts,
admission refuses a request that would wait longer than the backlog before the growth
began (`base_rows`) would have made it wait, or than a couple of runs, whichever is more.
The price of the horizon: an open loop past saturation is queued for a second before it
is shed (at 3x, two seconds of backlog, which its first refusals then drain).

Pure: time comes in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_RUNS = 2.0  # a window spans this many runs: a closed loop's batches come and go in it
MIN_WINDOW_S = 0.05  # fast models: a closed loop's clients start within two windows
GROWTH_FRACTION = 0.25  # arrivals must outrun service by this much to count
GROWING_WINDOWS = 3  # windows in a row that grew before shedding starts
# ...and they must span this long: a burst after a client's pause (a late load generator
# catching up, a front starving the model's thread while it parses the burst) outruns
# service for a few short windows, and a load that is below capacity over a second clears
# it; only a backlog that keeps growing for this long is an overload.
HORIZON_S = 1.0
# Shedding ends once arrivals have not outrun service (or not come at all) for this long:
# a stall of the load generator or of the event loop is not the end of an overload, and
# its end would let the backlog grow for another horizon before it is shed again.
CALM_S = 0.5


@dataclass(slots=True)
class Growth:
    start: float | None = None  # when the current window opened (an arrival's time)
    least: int | None = None  # the least rows queued that an arrival in it found
    arrived: int = 0  # rows offered in the current window, admitted or not
    served: int = 0  # rows served since the meter began (a counter)
    served_before: int = 0  # `served` when the current window opened
    previous_least: int | None = None  # the window before's `least`
    streak: int = 0  # windows in a row that grew
    since: float = 0.0  # when the first of them opened
    calm_since: float | None = None  # while shedding: when arrivals last stopped outrunning
    base_rows: int = 0  # the standing backlog before the growth began
    shedding: bool = False

    def serve(self, rows: int) -> None:
        """A run of `rows` rows finished."""
        self.served += rows

    def arrive(self, now: float, queued_rows: int, rows: int, window_s: float) -> bool:
        """A request of `rows` rows arrived at `now` and found `queued_rows` rows queued;
        a window is `window_s` long. True while the backlog is being shed."""
        if self.start is None or now - self.start >= window_s:
            self._close(now, window_s)
        least = self.least  # (not min(): every request)
        if least is None or queued_rows < least:
            self.least = queued_rows
        self.arrived += rows
        return self.shedding

    def _close(self, now: float, window_s: float) -> None:
        """Close the current window (if any), judge it, and open the next at `now`."""
        if self.start is not None and self.least is not None:
            # A window passed with no arrival: whatever grew has stopped.
            quiet = now - self.start >= 2 * window_s
            served = self.served - self.served_before
            outran = self.arrived > (1 + GROWTH_FRACTION) * served
            before = self.previous_least
            grew = outran and before is not None and self.least > before
            if self.shedding:
                if outran and not quiet:
                    self.calm_since = None
                elif self.calm_since is None:
                    self.calm_since = self.start
                if self.calm_since is not None and now - self.calm_since >= CALM_S:
                    self.shedding, self.streak, self.calm_since = False, 0, None
            elif grew and not quiet:
                if self.streak == 0:
                    self.base_rows, self.since = before or 0, self.start
                self.streak += 1
                lasted = now - self.since >= HORIZON_S
                self.shedding = self.streak >= GROWING_WINDOWS and lasted
            else:
                self.streak = 0
            self.previous_least = None if quiet else self.least
        self.start, self.least, self.arrived = now, None, 0
        self.served_before = self.served
