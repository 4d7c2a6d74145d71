"""What each device holds, where a new instance fits best, and which models must make
room for it. Pure bookkeeping: no loading, no clock, no I/O.

An instance is booked on its device before it loads, at its predicted size, and keeps
the larger of prediction and measurement once measured, so concurrent loads never
promise the same bytes twice. A model leaves as a whole (all its versions and
instances): its bytes come back on every device it held.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_base.errors import GatewayError
from backends.base import Device
from gateway.core.placement.inventory import DeviceMemory
from gateway.core.placement.sizes import format_bytes


class NoRoom(GatewayError):
    """A model does not fit its devices, even after evicting what may be evicted."""

    http_status = 503  # the V2 routes; SageMaker's /models answers 507
    grpc_status = "RESOURCE_EXHAUSTED"


@dataclass(slots=True)
class Booking:
    model: str
    device: Device
    predicted: int
    measured: int | None = None

    @property
    def bytes(self) -> int:
        return max(self.predicted, self.measured or 0)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A model that may be evicted: loaded, idle, not pinned; `last_used` orders them."""

    model: str
    last_used: float


@dataclass(frozen=True, slots=True)
class Placement:
    device: Device
    evict: tuple[str, ...]  # models to unload first, least recently used first


class Ledger:
    def __init__(self, devices: list[DeviceMemory]) -> None:
        self.devices = {d.device: d for d in devices}
        self.bookings: dict[str, Booking] = {}  # by instance key

    def used(self, device: Device) -> int:
        return sum(b.bytes for b in self.bookings.values() if b.device == device)

    def free(self, device: Device) -> int:
        return self.devices[device].budget_bytes - self.used(device)

    def model_bytes(self, model: str, device: Device | None = None) -> int:
        return sum(
            b.bytes
            for b in self.bookings.values()
            if b.model == model and (device is None or b.device == device)
        )

    def book(self, key: str, model: str, device: Device, predicted: int) -> None:
        self.bookings[key] = Booking(model, device, predicted)

    def measure(self, key: str, measured: int) -> int:
        """Record an instance's measured bytes; returns how far its device is now over
        its budget (0 when within)."""
        booking = self.bookings[key]
        booking.measured = measured
        return max(-self.free(booking.device), 0)

    def release(self, key: str) -> None:
        self.bookings.pop(key, None)

    def release_model(self, model: str) -> None:
        for key in [k for k, b in self.bookings.items() if b.model == model]:
            del self.bookings[key]

    def place(
        self, model: str, needed: int, allowed: list[Device], candidates: list[Candidate]
    ) -> Placement:
        """Where an instance of `needed` bytes goes. Without eviction if any allowed device
        has room: the one it fills best (least room left). Otherwise the device that needs
        the fewest models evicted (then the fewest bytes), taking the least recently used
        first. NoRoom, with the sizes, when no device can make room."""
        fits = [d for d in allowed if d in self.devices and self.free(d) >= needed]
        if fits:
            return Placement(min(fits, key=lambda d: (self.free(d) - needed, str(d))), ())
        plans = []
        for device in allowed:
            if device not in self.devices:
                continue
            evict = self.evictions(device, needed, candidates)
            if evict is not None:
                freed = sum(self.model_bytes(m, device) for m in evict)
                plans.append((len(evict), freed, str(device), Placement(device, evict)))
        if plans:
            return min(plans, key=lambda plan: plan[:3])[3]
        raise NoRoom(self._no_room_message(model, needed, allowed, candidates))

    def evictions(
        self, device: Device, needed: int, candidates: list[Candidate]
    ) -> tuple[str, ...] | None:
        """The fewest of the least recently used candidates whose bytes on `device` make
        room for `needed`; None if all of them together do not."""
        if needed > self.devices[device].budget_bytes:
            return None
        short = needed - self.free(device)
        holding = [
            (c, self.model_bytes(c.model, device))
            for c in sorted(candidates, key=lambda c: (c.last_used, c.model))
        ]
        holding = [(c, size) for c, size in holding if size > 0]
        chosen: list[tuple[Candidate, int]] = []
        for candidate, size in holding:  # oldest first, until there is room
            if short <= 0:
                break
            chosen.append((candidate, size))
            short -= size
        if short > 0:
            return None
        # Newer ones taken on the way may be spared if older ones already made room.
        for candidate, size in sorted(chosen, key=lambda cs: -cs[0].last_used):
            if short + size <= 0:
                chosen.remove((candidate, size))
                short += size
        return tuple(c.model for c, _ in sorted(chosen, key=lambda cs: cs[0].last_used))

    def _no_room_message(
        self, model: str, needed: int, allowed: list[Device], candidates: list[Candidate]
    ) -> str:
        known = [d for d in allowed if d in self.devices]
        if not known:
            where = ", ".join(map(str, allowed))
            return f"model '{model}' may only run on {where}, which this server does not have"
        parts = []
        for device in known:
            evictable = sum(self.model_bytes(c.model, device) for c in candidates)
            parts.append(
                f"{device}: {format_bytes(self.free(device))} free of its "
                f"{format_bytes(self.devices[device].budget_bytes)} budget, "
                f"{format_bytes(evictable)} more held by idle models that may be evicted"
            )
        return (
            f"model '{model}' does not fit: an instance needs {format_bytes(needed)}; "
            + "; ".join(parts)
            + " (raise --host-memory-budget / --gpu-memory-budget, or unload models)"
        )
