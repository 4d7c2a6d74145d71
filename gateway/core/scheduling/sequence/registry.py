"""The live sequences of one model: which instance (and, under the direct strategy, which
batch slot) each holds, the requests each has waiting, its implicit state, and when it
was last seen. Pure bookkeeping; the batcher (batcher.py) runs what it says."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from accel_base.errors import InvalidArgument, Unavailable
from gateway.core.inference import InferRequest

CorrelationId = int | str


@dataclass(slots=True)
class Queued:
    """One request of a sequence, waiting for its turn in a batch."""

    request: InferRequest
    feed: dict[str, Any]
    output_names: list[str]
    start: bool
    end: bool
    arrived: float  # clock seconds
    start_ns: int  # perf_counter_ns, for the statistics
    future: Any = None


@dataclass(slots=True)
class Sequence:
    id: CorrelationId
    instance: int  # index of the instance it is bound to
    slot: int  # its row in that instance's batches (direct), or -1 (oldest)
    last_seen: float
    waiting: deque = field(default_factory=deque)  # of Queued, in arrival order
    running: bool = False  # one of its requests is in a batch now
    state: dict[str, Any] = field(default_factory=dict)  # implicit state, by input name


def correlation_id(request: InferRequest, model: str) -> tuple[CorrelationId, bool, bool]:
    """(id, start, end) from the request's sequence parameters, as Triton reads them."""
    parameters = request.parameters
    value = parameters.get("sequence_id", 0)
    if isinstance(value, bool) or not isinstance(value, int | str) or value in (0, ""):
        raise InvalidArgument(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID (the sequence_id parameter)"
        )
    if isinstance(value, int) and not 0 < value < 2**64:
        raise InvalidArgument(f"sequence_id {value} of model '{model}' is not a uint64")
    flags = []
    for key in ("sequence_start", "sequence_end"):
        flag = parameters.get(key, False)
        if not isinstance(flag, bool):
            raise InvalidArgument(f"parameter {key} must be a boolean, got {flag!r}")
        flags.append(flag)
    return value, flags[0], flags[1]


class Registry:
    def __init__(self, model: str, instances: int, slots: int, direct: bool, limit: int) -> None:
        """`slots` rows per instance; `limit` live sequences at most (the direct strategy
        has no more than its slots)."""
        self.model = model
        self.direct = direct
        self.limit = min(limit, instances * slots) if direct else limit
        self.free = [(i, s) for s in range(slots) for i in range(instances)] if direct else []
        self.load = [0] * instances  # live sequences per instance
        self.live: dict[CorrelationId, Sequence] = {}

    def sequence_for(self, sequence_id: CorrelationId, start: bool, now: float) -> Sequence:
        """The live sequence a request belongs to, started now if it asks to start."""
        sequence = self.live.get(sequence_id)
        if sequence is not None:
            sequence.last_seen = now
            return sequence
        if not start:
            raise InvalidArgument(
                f"inference request for sequence {sequence_id} to model '{self.model}' must "
                "specify the START flag on the first request of the sequence (or the "
                "sequence ended, or was idle too long and was released)"
            )
        if len(self.live) >= self.limit:
            raise Unavailable(
                f"model '{self.model}' has {len(self.live)} live sequences, its limit; end "
                "one (sequence_end) or retry later"
            )
        if self.direct:
            instance, slot = self.free.pop(0)
        else:
            instance, slot = min(range(len(self.load)), key=self.load.__getitem__), -1
        self.load[instance] += 1
        sequence = self.live[sequence_id] = Sequence(sequence_id, instance, slot, now)
        return sequence

    def release(self, sequence: Sequence) -> None:
        if self.live.get(sequence.id) is not sequence:
            return
        del self.live[sequence.id]
        self.load[sequence.instance] -= 1
        if self.direct:
            self.free.append((sequence.instance, sequence.slot))
            self.free.sort(key=lambda place: (place[1], place[0]))  # low slots first

    def idle(self, now: float, idle_s: float) -> list[Sequence]:
        """Sequences with nothing waiting or running, unseen for `idle_s`."""
        return [
            s
            for s in self.live.values()
            if not s.waiting and not s.running and now - s.last_seen >= idle_s
        ]
