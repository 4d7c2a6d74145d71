"""Triton's rate limiter (`--rate-limit execution_count`): an instance runs only while the
resources its instance group names are free, across every model of the server.

A group's `rate_limiter` lists resources (a name, the units one run takes, and whether
the resource is `global` or one per device) and a `priority`. A resource's units are
what `--rate-limit-resource NAME:COUNT[:DEVICE]` declares (DEVICE a GPU's number; none:
every device), else the most any loaded instance needs, as Triton. A run takes its units
before it starts and gives them back when it ends, whatever the end.

Instances waiting for units are served in the order of their turns so far times their
priority (an instance of priority 2 gets half the turns of one of priority 1 while they
compete), oldest first among equals; a waiter whose units are not free holds back only
those who want the same resources, so nobody starves behind smaller runs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.scheduling.instance_api import after_run

MODES = ("off", "execution_count")
GLOBAL = "global"
MAX_WAIT_S = 300.0  # a run that waits longer for its units fails with 503
T = TypeVar("T")


@dataclass(eq=False)
class Needs:
    """What one instance takes to run: ((resource, device key), units) pairs."""

    model: str
    units: tuple[tuple[tuple[str, str], int], ...]
    priority: int = 1
    turns: int = 0  # runs granted so far


@dataclass(order=True)
class _Waiter:
    rank: int
    order: int
    needs: Needs = field(compare=False)
    granted: asyncio.Future = field(compare=False)


def parse_resource(value: str) -> tuple[str, int, int | None]:
    """One `--rate-limit-resource NAME:COUNT[:DEVICE]`."""
    parts = value.split(":")
    if not 2 <= len(parts) <= 3 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        raise InvalidArgument(
            f"--rate-limit-resource {value!r}: expected NAME:COUNT or NAME:COUNT:DEVICE "
            "(COUNT units of resource NAME, on GPU DEVICE or on every device)"
        )
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None


def needs_of(config: mc.ModelConfig, group: mc.ModelInstanceGroup, device: str) -> Needs | None:
    """An instance's needs from its group's rate_limiter (None: it names no resource)."""
    limits = group.rate_limiter
    if not limits.resources:
        return None
    units: dict[tuple[str, str], int] = {}
    for resource in limits.resources:
        if not resource.name or resource.count == 0:
            raise InvalidArgument(
                f"model '{config.name}': a rate_limiter resource needs a name and a count of "
                f"at least 1 (got {resource.name!r}, {resource.count})"
            )
        key = (resource.name, GLOBAL if getattr(resource, "global") else device)
        units[key] = units.get(key, 0) + resource.count
    return Needs(config.name, tuple(sorted(units.items())), max(limits.priority, 1))


class RateLimiter:
    def __init__(
        self, declared: list[tuple[str, int, int | None]] = (), max_wait_s: float = MAX_WAIT_S
    ) -> None:
        self._declared = declared
        self.max_wait_s = max_wait_s
        self._needs: list[Needs] = []  # every loaded instance's
        self.units: dict[tuple[str, str], int] = {}  # each resource's units
        self.taken: dict[tuple[str, str], int] = {}
        self._waiters: list[_Waiter] = []
        self._order = itertools.count()

    def _declared_units(self, key: tuple[str, str]) -> int | None:
        name, device = key
        found = None
        for declared, count, on in self._declared:
            # A device's count is its own; a global resource's, whatever device it names.
            if declared == name and (on is None or device in (f"gpu:{on}", GLOBAL)):
                found = count if on is not None or found is None else found
        return found

    def register(self, needs: Needs) -> None:
        """An instance loaded: its resources exist from now on (refused if it needs more
        units than its resource is declared to have: it could never run)."""
        for key, count in needs.units:
            declared = self._declared_units(key)
            if declared is not None and count > declared:
                raise InvalidArgument(
                    f"model '{needs.model}': an instance needs {count} units of rate-limit "
                    f"resource '{key[0]}' ({key[1]}), but --rate-limit-resource gives it "
                    f"{declared}; it could never run"
                )
        self._needs.append(needs)
        self._recount()

    def unregister(self, needs: Needs) -> None:
        if needs in self._needs:
            self._needs.remove(needs)
            self._recount()

    def _recount(self) -> None:
        units: dict[tuple[str, str], int] = {}
        for needs in self._needs:
            for key, count in needs.units:
                units[key] = max(units.get(key, 0), count)
        self.units = {key: self._declared_units(key) or most for key, most in units.items()}
        self._wake()

    def _fits(self, needs: Needs) -> bool:
        return all(self.taken.get(k, 0) + n <= self.units.get(k, n) for k, n in needs.units)

    def _take(self, needs: Needs) -> None:
        for key, count in needs.units:
            self.taken[key] = self.taken.get(key, 0) + count
        needs.turns += 1

    async def acquire(self, needs: Needs) -> None:
        """Wait until `needs`'s units are free, and take them (release() gives them back)."""
        keys = {key for key, _ in needs.units}
        wanted = any(keys & {key for key, _ in w.needs.units} for w in self._waiters)
        if not wanted and self._fits(needs):  # nobody waits for these: at once
            self._take(needs)
            return
        waiter = _Waiter(needs.turns * needs.priority, next(self._order), needs,
                         asyncio.get_running_loop().create_future())  # fmt: skip
        self._waiters.append(waiter)
        self._waiters.sort()
        self._wake()  # it may rank before those waiting, and fit
        try:
            async with asyncio.timeout(self.max_wait_s):
                await waiter.granted
        except BaseException as exc:  # cancelled, or out of time: nothing kept
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.granted.done() and not waiter.granted.cancelled():
                self.release(needs)  # granted in the same turn as it left
            if isinstance(exc, TimeoutError):
                wanted = ", ".join(f"'{name}' ({device})" for (name, device), _ in needs.units)
                raise Unavailable(
                    f"model '{needs.model}': its run waited {self.max_wait_s:g} s for "
                    f"rate-limit resources {wanted} in vain; retry later"
                ) from None
            raise

    def release(self, needs: Needs) -> None:
        for key, count in needs.units:
            self.taken[key] -= count
        self._wake()

    def _wake(self) -> None:
        held_back: set[tuple[str, str]] = set()  # wanted by an earlier waiter that waits on
        for waiter in list(self._waiters):
            if waiter.granted.done():  # its caller left, and has not run again to say so
                self._waiters.remove(waiter)
                continue
            keys = {key for key, _ in waiter.needs.units}
            if keys & held_back:
                continue
            if self._fits(waiter.needs):
                self._waiters.remove(waiter)
                self._take(waiter.needs)
                waiter.granted.set_result(None)
            else:
                held_back |= keys


async def run_limited(instance: Any, run: Callable[[], Awaitable[T]]) -> T:
    """`run()` once the instance's units are taken (its `limit`); they are given back when
    the run ends, which may be after its caller left (a run on a thread or in a worker
    goes on: `instance.running`)."""
    limiter, needs = instance.limit
    await limiter.acquire(needs)
    try:
        result = await run()
    except asyncio.CancelledError:
        after_run(instance, lambda: limiter.release(needs))
        raise
    except BaseException:
        limiter.release(needs)
        raise
    limiter.release(needs)
    return result


def apply_limits(model: Any, limiter: RateLimiter | None) -> None:
    """Give each instance of a loaded version (a ModelVersion: its `places`) what its
    group's rate_limiter asks, registered with the server's limiter (on: not None)."""
    config = model.config
    groups = list(config.instance_group) or [mc.ModelInstanceGroup()]
    for instance, (group, device) in zip(model.pool.instances, model.places, strict=True):
        needs = needs_of(config, groups[group], device)
        if needs is None or limiter is None:
            continue
        limiter.register(needs)
        instance.limit = (limiter, needs)
