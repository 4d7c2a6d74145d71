"""The rate limiter's units, order and bounds (gateway/core/scheduling/rate_limiter.py)."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.scheduling.rate_limiter import (
    Needs,
    RateLimiter,
    needs_of,
    parse_resource,
    run_limited,
)


def needs(model: str, *units: tuple[str, int], priority: int = 1) -> Needs:
    return Needs(model, tuple(((name, "global"), n) for name, n in units), priority)


def test_resource_flags_and_groups_read_as_triton_writes_them():
    assert parse_resource("R:4") == ("R", 4, None)
    assert parse_resource("R:4:1") == ("R", 4, 1)
    for bad in ("R", "R:x", ":4", "R:4:1:2"):
        with pytest.raises(InvalidArgument, match="NAME:COUNT"):
            parse_resource(bad)
    config = text_format.Parse(
        'name: "m" instance_group [ { rate_limiter { resources [ { name: "A" count: 2 }, '
        '{ name: "G" global: true count: 1 } ] priority: 3 } } ]',
        mc.ModelConfig(),
    )
    found = needs_of(config, config.instance_group[0], "gpu:1")
    assert found is not None and found.priority == 3
    assert found.units == ((("A", "gpu:1"), 2), (("G", "global"), 1))
    assert needs_of(config, mc.ModelInstanceGroup(), "cpu") is None
    config.instance_group[0].rate_limiter.resources[0].count = 0
    with pytest.raises(InvalidArgument, match="count of at least 1"):
        needs_of(config, config.instance_group[0], "cpu")


def test_units_default_to_the_most_an_instance_needs_and_flags_set_them():
    limiter = RateLimiter()
    limiter.register(needs("a", ("R", 1)))
    limiter.register(needs("b", ("R", 3)))
    assert limiter.units == {("R", "global"): 3}
    declared = RateLimiter([("R", 2, None)])
    with pytest.raises(InvalidArgument, match="needs 3 units .* gives it 2; it could never run"):
        declared.register(needs("b", ("R", 3)))
    declared.register(needs("a", ("R", 1)))
    assert declared.units == {("R", "global"): 2}


def test_a_run_waits_for_its_units_and_nobody_else_wanting_them_passes_it():
    async def main() -> list[str]:
        limiter = RateLimiter()
        big, small, other = needs("big", ("R", 2)), needs("small", ("R", 1)), needs("o", ("S", 1))
        for n in (big, small, other):
            limiter.register(n)
        order: list[str] = []
        await limiter.acquire(small)  # holds one of R's two units

        async def run(n: Needs) -> None:
            await limiter.acquire(n)
            order.append(n.model)
            limiter.release(n)

        waiting_big = asyncio.ensure_future(run(big))
        await asyncio.sleep(0)
        waiting_small = asyncio.ensure_future(run(needs("small2", ("R", 1))))
        await asyncio.gather(run(other))  # another resource: not held back
        await asyncio.sleep(0)
        assert order == ["o"]  # small2 would fit, but big came first for R
        limiter.release(small)
        await asyncio.gather(waiting_big, waiting_small)
        return order

    assert asyncio.run(main()) == ["o", "big", "small2"]


def test_priority_weighs_turns_and_a_cancelled_waiter_takes_nothing():
    async def main() -> tuple[list[int], dict]:
        limiter = RateLimiter()
        # Two instances of priority 1 and one of priority 2 always want the one unit: at
        # each release the other two wait, and the lower turns x priority goes first.
        contenders = [
            needs("a", ("R", 1)),
            needs("b", ("R", 1)),
            needs("slow", ("R", 1), priority=2),
        ]
        for n in contenders:
            limiter.register(n)
        done = asyncio.Event()

        async def loop(n: Needs) -> None:
            while not done.is_set():
                await limiter.acquire(n)
                await asyncio.sleep(0)  # holding the unit: the others queue meanwhile
                limiter.release(n)
                if sum(c.turns for c in contenders) >= 60:
                    done.set()

        await asyncio.gather(*(loop(n) for n in contenders))
        turns = [n.turns for n in contenders]
        first = contenders[0]
        await limiter.acquire(first)
        gone = asyncio.ensure_future(limiter.acquire(contenders[2]))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        limiter.release(first)
        return turns, dict(limiter.taken)

    (a, b, slow), taken = asyncio.run(main())
    assert abs(a - b) <= 1 and slow <= 0.6 * a  # priority 2: about half the turns of 1
    assert taken == {("R", "global"): 0}  # the cancelled waiter took nothing


def test_a_waiter_cancelled_in_the_turn_its_units_free_takes_none():
    async def main() -> dict:
        limiter = RateLimiter()
        holder, waiting = needs("a", ("R", 1)), needs("b", ("R", 1))
        limiter.register(holder)
        limiter.register(waiting)
        await limiter.acquire(holder)
        task = asyncio.ensure_future(limiter.acquire(waiting))
        await asyncio.sleep(0)  # it waits
        task.cancel()
        limiter.release(holder)  # in the same turn: the waiter has not run to leave yet
        await asyncio.gather(task, return_exceptions=True)
        return dict(limiter.taken)

    assert asyncio.run(main()) == {("R", "global"): 0}


def test_a_wait_past_its_bound_is_a_503_and_keeps_nothing():
    async def main() -> tuple[str, dict]:
        limiter = RateLimiter(max_wait_s=0.05)
        holder, waiting = needs("a", ("R", 1)), needs("b", ("R", 1))
        limiter.register(holder)
        limiter.register(waiting)
        await limiter.acquire(holder)
        try:
            await limiter.acquire(waiting)
        except Unavailable as exc:
            message = exc.message
        limiter.release(holder)
        return message, dict(limiter.taken)

    message, taken = asyncio.run(main())
    assert "model 'b': its run waited 0.05 s for rate-limit resources 'R' (global)" in message
    assert taken == {("R", "global"): 0}


def test_units_go_back_when_the_run_ends_not_when_its_caller_leaves():
    class Instance:  # what run_limited reads of an instance: its limit and its run
        def __init__(self, limiter: RateLimiter, n: Needs) -> None:
            self.limit = (limiter, n)
            self.running: asyncio.Future | None = None

    async def main() -> tuple[dict, dict]:
        limiter = RateLimiter()
        n = needs("a", ("R", 1))
        limiter.register(n)
        instance = Instance(limiter, n)

        async def run() -> None:  # a run on a thread or in a worker: shielded from its caller
            instance.running = asyncio.get_running_loop().create_future()
            await asyncio.shield(instance.running)

        caller = asyncio.ensure_future(run_limited(instance, run))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        while_running = dict(limiter.taken)
        assert instance.running is not None
        instance.running.set_result(None)
        await asyncio.sleep(0)
        return while_running, dict(limiter.taken)

    while_running, after = asyncio.run(main())
    assert while_running == {("R", "global"): 1} and after == {("R", "global"): 0}


def test_a_declared_count_with_a_device_holds_for_a_global_resource():
    limiter = RateLimiter([("R", 2, 0)])
    with pytest.raises(InvalidArgument, match="gives it 2"):
        limiter.register(needs("a", ("R", 3)))
    per_device = Needs("b", ((("R", "gpu:1"), 3),))
    limiter.register(per_device)  # another GPU: the most needed there
    assert limiter.units == {("R", "gpu:1"): 3}
