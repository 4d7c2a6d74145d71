"""Loads placed by bytes: where each instance goes, what must be evicted first, what it
measured, and (in on-demand mode) the one load that a model's first requests share.

The repository hands every version load to `MemoryManager.load`, which books each
instance on a device (ledger.py), evicts the least recently used idle models when the
control mode allows (on-demand), loads and warms the version up, and books what it
measured. A version that measures past its device's budget makes more room, or, where
nothing may be evicted, is unloaded again with the sizes in the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import Unavailable
from backends.base import Device
from gateway.core.placement.footprint import Footprint, resident_bytes, worker_bytes
from gateway.core.placement.inventory import DeviceMemory
from gateway.core.placement.ledger import Candidate, Ledger, NoRoom
from gateway.core.placement.room import RoomWaiters
from gateway.core.placement.sizes import format_bytes
from gateway.core.placement.stats import CacheStats
from gateway.operation.gpu import process_gpu_bytes

log = logging.getLogger(__name__)

DEFAULT_LOAD_TIMEOUT_S = 120.0
DEFAULT_LOAD_CONCURRENCY = 2  # loads at once per device


class MemoryManager:
    def __init__(
        self,
        devices: list[DeviceMemory],
        evicts: bool = False,
        load_concurrency: int = DEFAULT_LOAD_CONCURRENCY,
        load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
        pinned: frozenset[str] = frozenset(),
    ) -> None:
        self.ledger = Ledger(devices)
        self.evicts = evicts
        self.load_timeout_s = load_timeout_s
        self.pinned = pinned
        self.stats = CacheStats()
        self._load_slots = {d.device: asyncio.Semaphore(load_concurrency) for d in devices}
        self._placing = asyncio.Lock()  # one placement decision (and its evictions) at a time
        self._thread_loads = asyncio.Lock()  # one at a time, so RSS growth is theirs
        self._generation = itertools.count()
        self._first_loads: dict[str, asyncio.Future] = {}
        self._waiting: dict[str, int] = {}  # requests waiting for each model's load
        # Processes that each load a thread instance on the CPU: with front processes,
        # each front holds a copy too (gateway/core/copies.py). A model that may not have
        # copies (a sequence model, say) is booked as if it had: more, never less.
        self.cpu_copies = 1
        self.loaded_at: dict[str, float] = {}  # model -> when its newest version loaded
        self.room = RoomWaiters()  # loads waiting for busy models to fall idle
        self.load_concurrency = load_concurrency
        # What each instance ("model/version/index") measured when it last loaded: a
        # reload after an eviction books that, not the prediction (on an H100, 627 MiB
        # predicted for a ResNet-50 worker that measured 1006 MiB took the GPU past its
        # budget while several reloads ran at once).
        self.last_measured: dict[str, tuple[Device, int]] = {}

    # ---- loading a version -----------------------------------------------------------

    async def load(
        self,
        name: str,
        version: int,
        slots: list[Any],
        load: Callable[[list[Device]], Any],
        candidates: Callable[[str], list[Candidate]],
        evict: Callable[[tuple[str, ...]], Awaitable[list[str]]],
    ) -> Any:
        """Place, load (`load(devices)`, blocking, on a thread), warm up and measure one
        version; returns the loaded ModelVersion with its footprints. `evict(names)`
        unloads models to make room and returns those it unloaded."""
        footprints: list[Footprint] = []
        began = time.monotonic()
        try:
            while True:
                seen = self.room.generation
                if await self._book(name, version, slots, footprints, candidates, evict):
                    break
                if not await self.room.wait(seen, began + self.load_timeout_s):
                    # Books, or raises NoRoom saying how long it waited.
                    await self._book(name, version, slots, footprints, candidates, evict, True)
                    break
            devices = [f.device for f in footprints]
            model = await self._load_and_measure(slots, devices, load, footprints)
            model.footprints = footprints
            if self.evicts:
                model.on_idle = self.room.notify
            try:
                await self._settle(name, footprints, candidates, evict)
            except BaseException:
                await model.close()
                raise
            self._remember(footprints)
        except BaseException:
            self.stats.load_failures += 1
            for footprint in footprints:
                self.ledger.release(footprint.key)
            raise
        finally:  # loaded or not, it no longer holds room as a load: others may try
            self.room.notify()
        self.stats.loads += 1
        self.stats.load_seconds.observe(time.monotonic() - began)
        self.loaded_at[name] = model.last_used = time.monotonic()
        return model

    async def _book(
        self,
        name: str,
        version: int,
        slots: list[Any],
        footprints: list[Footprint],
        candidates: Callable[..., list[Candidate]],
        evict: Callable[[tuple[str, ...]], Awaitable[list[str]]],
        last_try: bool = False,
    ) -> bool:
        """Book every instance on the device it goes on, evicting what must go. False,
        with nothing booked, when the room is held by models that are busy now (on
        demand): the caller waits for one to fall idle. NoRoom when waiting cannot help,
        or on the `last_try`."""
        generation = next(self._generation)
        try:
            async with self._placing:
                for index, slot in enumerate(slots):
                    allowed = list(slot.allowed)
                    needed = self._needed(f"{name}/{version}/{index}", slot)
                    device = await self._make_room(name, needed, allowed, candidates, evict)
                    key = f"{name}/{version}/{index}#{generation}"
                    self.ledger.book(key, name, device, needed)
                    footprints.append(Footprint(key, device, slot.predicted * self._copies(slot)))
            return True
        except NoRoom as exc:
            for footprint in footprints:
                self.ledger.release(footprint.key)
            footprints.clear()
            if not self.evicts or not self._busy_hold_room(name, version, slots, candidates):
                raise
            if last_try:
                raise NoRoom(
                    f"{exc.message}; waited {self.load_timeout_s:g} s "
                    "(--model-load-timeout) for models busy with requests to fall idle"
                ) from None
            return False

    def _busy_hold_room(
        self, name: str, version: int, slots: list[Any], candidates: Callable[..., list[Candidate]]
    ) -> bool:
        """Whether every instance would fit once the models now busy were idle."""
        holders = candidates(name, busy_too=True)
        return all(
            any(
                device in self.ledger.devices
                and self.ledger.evictions(device, needed, holders) is not None
                for device in slot.allowed
            )
            for needed, slot in (
                (self._needed(f"{name}/{version}/{index}", slot), slot)
                for index, slot in enumerate(slots)
            )
        )

    def _remember(self, footprints: list[Footprint]) -> None:
        """What a version that loaded and fit measured, for its next load: at most its
        device's budget, so that a measurement swollen by traffic during a thread
        instance's load cannot keep it out for good."""
        for footprint in footprints:
            if footprint.measured is not None:
                budget = self.ledger.devices[footprint.device].budget_bytes
                instance = footprint.key.partition("#")[0]
                self.last_measured[instance] = (footprint.device, min(footprint.measured, budget))

    def _copies(self, slot: Any) -> int:
        """How many processes load this instance (see cpu_copies)."""
        if slot.in_worker or any(d.kind != "cpu" for d in slot.allowed):
            return 1
        return self.cpu_copies

    def _needed(self, instance: str, slot: Any) -> int:
        """What an instance ("model/version/index") books before it loads: its
        prediction, or what it measured when it last loaded on a device it may go on."""
        remembered = self.last_measured.get(instance)
        predicted = slot.predicted * self._copies(slot)
        if remembered is None or remembered[0] not in slot.allowed:
            return predicted
        return max(predicted, remembered[1])

    def _evictable(
        self, name: str, candidates: Callable[[str], list[Candidate]]
    ) -> list[Candidate]:
        """The repository's candidates, less the models requests are waiting to load:
        those just loaded, whose waiters have not run yet, stay."""
        if not self.evicts:
            return []
        busy = self._waiting.keys() | self._first_loads.keys()
        return [c for c in candidates(name) if c.model not in busy]

    async def _make_room(
        self,
        name: str,
        needed: int,
        allowed: list[Device],
        candidates: Callable[[str], list[Candidate]],
        evict: Callable[[tuple[str, ...]], Awaitable[list[str]]],
    ) -> Device:
        """The device an instance of `needed` bytes goes on, after evicting what must go
        (NoRoom when it cannot fit). A victim that became busy meanwhile is spared, and
        the plan made again."""
        for _ in range(3):
            placement = self.ledger.place(name, needed, allowed, self._evictable(name, candidates))
            if placement.evict:
                await self._evict(placement.evict, evict)
            if self.ledger.free(placement.device) >= needed:
                return placement.device
        # Room may have come free meanwhile; else NoRoom with the sizes.
        return self.ledger.place(name, needed, allowed, []).device

    async def _load_and_measure(
        self,
        slots: list[Any],
        devices: list[Device],
        load: Callable[[list[Device]], Any],
        footprints: list[Footprint],
    ) -> Any:
        threads = [i for i, slot in enumerate(slots) if not slot.in_worker]
        async with contextlib.AsyncExitStack() as stack:
            for device in sorted(set(devices), key=str):
                await stack.enter_async_context(self._load_slots[device])
            if threads:
                await stack.enter_async_context(self._thread_loads)
            before = resident_bytes()
            on_a_gpu = any(d.kind == "gpu" for d in devices)
            gpu_before = process_gpu_bytes(os.getpid()) if on_a_gpu else None
            model = await asyncio.to_thread(load, devices)
            try:
                model.attach()
                warming = time.monotonic()
                await model.warm_up()  # its model_warmup samples' failure fails the load
                if model.samples:
                    self.stats.warmup_seconds.observe(time.monotonic() - warming)
                grown = max(resident_bytes() - before, 0)
                gpu_grown = None
                if gpu_before is not None:
                    gpu_grown = max((process_gpu_bytes(os.getpid()) or 0) - gpu_before, 0)
            except BaseException:
                await model.close()
                raise
        instances = model.pool.instances
        on_gpu = [i for i in threads if devices[i].kind == "gpu"]
        on_cpu = [i for i in threads if devices[i].kind != "gpu"]
        for index, (instance, footprint) in enumerate(zip(instances, footprints, strict=True)):
            if index in on_cpu:  # every copy measures as the host's does
                footprint.measured = grown * self._copies(slots[index]) // len(on_cpu)
            elif index in on_gpu:
                footprint.measured = None if gpu_grown is None else gpu_grown // len(on_gpu)
            else:
                footprint.measured = worker_bytes(instance, footprint.device)
        return model

    async def _settle(
        self,
        name: str,
        footprints: list[Footprint],
        candidates: Callable[[str], list[Candidate]],
        evict: Callable[[tuple[str, ...]], Awaitable[list[str]]],
    ) -> None:
        """Book what was measured; past a budget, evict more or give up with the sizes."""
        async with self._placing:
            for footprint in footprints:
                if footprint.measured is None:
                    continue
                over = self.ledger.measure(footprint.key, footprint.measured)
                for _ in range(3):
                    if not over:
                        break
                    choices = self._evictable(name, candidates)
                    victims = self.ledger.evictions(footprint.device, 0, choices)
                    if not victims:
                        break
                    await self._evict(victims, evict)
                    over = max(-self.ledger.free(footprint.device), 0)
                if over:
                    budget = self.ledger.devices[footprint.device].budget_bytes
                    raise NoRoom(
                        f"model '{name}' does not fit: an instance measured "
                        f"{format_bytes(footprint.measured)} on {footprint.device} after its "
                        f"warm-up (predicted {format_bytes(footprint.predicted)}), "
                        f"{format_bytes(over)} past the device's budget of "
                        f"{format_bytes(budget)}; set its memory_bytes parameter, or raise "
                        "the budget"
                    )

    async def _evict(
        self, victims: tuple[str, ...], evict: Callable[[tuple[str, ...]], Awaitable[list[str]]]
    ) -> None:
        log.info("evicting %s to make room", ", ".join(f"model '{v}'" for v in victims))
        for victim in await evict(victims):
            self.stats.evictions += 1
            loaded = self.loaded_at.pop(victim, None)
            if loaded is not None:
                self.stats.eviction_ages.observe(time.monotonic() - loaded)

    def released(self, footprints: list[Footprint]) -> None:
        """A version was unloaded: its bytes are free again."""
        for footprint in footprints:
            self.ledger.release(footprint.key)
        self.room.notify()

    # ---- on demand -------------------------------------------------------------------

    async def first_load(
        self, name: str, load: Callable[[], Awaitable[None]], max_waiting: int
    ) -> None:
        """Wait for the model's load, starting it unless one is under way: concurrent
        first requests share one load. At most `max_waiting` requests wait (503 past
        that), each for --model-load-timeout at most (503 then; the load goes on)."""
        began = time.monotonic()
        waiting = self._waiting.get(name, 0)
        if waiting >= max_waiting:
            raise Unavailable(
                f"model '{name}' is loading and {waiting} requests already wait for it "
                "(--max-queue-size); retry shortly"
            )
        future = self._first_loads.get(name)
        if future is None:
            future = asyncio.ensure_future(load())
            self._first_loads[name] = future
            future.add_done_callback(lambda done: self._load_ended(name, done))
        self.stats.misses += 1
        self._waiting[name] = waiting + 1
        try:
            await asyncio.wait_for(asyncio.shield(future), self.load_timeout_s)
        except TimeoutError:
            raise Unavailable(
                f"model '{name}' is still loading after {self.load_timeout_s:g} s "
                "(--model-load-timeout); retry shortly"
            ) from None
        finally:
            self.stats.wait_s += time.monotonic() - began
            self._waiting[name] -= 1
            if not self._waiting[name]:
                del self._waiting[name]

    def _load_ended(self, name: str, done: asyncio.Future) -> None:
        self._first_loads.pop(name, None)
        if not done.cancelled():
            done.exception()  # seen here, should every waiter have timed out first
