"""On-demand loading and eviction through the server's core, with real (tiny) models over
a fake inventory: one load per model however many requests wait for it, the least
recently used idle model evicted, pinned and busy models kept, the budget never passed."""

from __future__ import annotations

import asyncio
import os
import random

import numpy as np
import pytest

from accel_base.errors import Unavailable
from backends.base import Device
from gateway.core.inference import InferRequest, Tensor
from gateway.core.placement.ledger import NoRoom

CPU = Device("cpu")
MB = 10**6

# A lone request waits out its whole batch window (Triton's rule), which keeps its model busy.
WAITS_OUT = ' parameters { key: "adaptive_batch_window" value: { string_value: "false" } }'


def sized(mb: int, extra: str = "") -> str:
    """Config text: the model's instance takes `mb` megabytes, and `extra`."""
    return f'parameters {{ key: "memory_bytes" value: {{ string_value: "{mb}MB" }} }}\n{extra}'


def request(model: str, value: int = 7) -> InferRequest:
    return InferRequest(model, inputs=[Tensor("INPUT0", "INT32", np.full((1, 3), value, np.int32))])


def states(core) -> dict[str, str]:
    return {row["name"]: row["state"] for row in core.repository.index()}


def test_fifty_concurrent_first_requests_share_one_load(models_dir, on_demand):
    core = on_demand(models_dir({"m": sized(100)}), budget_mb=1000)
    assert states(core) == {"m": "UNAVAILABLE"}
    assert "loads on its first request" in core.repository.index()[0]["reason"]

    async def scenario():
        return await asyncio.gather(*(core.infer(request("m", v)) for v in range(50)))

    answers = asyncio.run(scenario())
    for value, answer in enumerate(answers):
        np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 3), value))
    stats = core.repository.memory.stats
    assert stats.loads == 1 and stats.misses == 50
    (row,) = core.repository.index()
    assert row["state"] == "READY"
    assert row["memory"]["predicted_bytes"] == 100 * MB
    assert row["memory"]["devices"] == ["cpu"]
    assert row["memory"]["measured_bytes"] is not None  # RSS growth of a thread instance


def test_the_least_recently_used_idle_model_is_evicted_and_reloads_on_its_next_request(
    models_dir, on_demand
):
    root = models_dir({name: sized(100) for name in ("a", "b", "c", "d")})
    core = on_demand(root, budget_mb=300)  # room for three

    async def scenario():
        for name in ("a", "b", "c"):
            await core.infer(request(name))
        await core.infer(request("a"))  # a is used again: b is now the oldest
        await core.infer(request("d"))
        assert states(core) == {"a": "READY", "b": "UNAVAILABLE", "c": "READY", "d": "READY"}
        evicted = next(r for r in core.repository.index() if r["name"] == "b")
        assert "evicted" in evicted["reason"]
        await core.infer(request("b"))  # comes back, and c (now the oldest) goes
        assert states(core)["c"] == "UNAVAILABLE"

    asyncio.run(scenario())
    assert core.repository.memory.stats.evictions == 2
    assert core.repository.memory.ledger.used(CPU) <= 300 * MB


def test_pinned_models_load_at_start_and_are_never_evicted(models_dir, on_demand):
    pinned = sized(100, 'parameters { key: "pinned" value: { string_value: "true" } }')
    root = models_dir({"p": pinned, "x": sized(100), "y": sized(100), "z": sized(200)})
    core = on_demand(root, budget_mb=250)

    async def scenario():
        await core.repository.load_startup_models([])
        assert states(core)["p"] == "READY"
        await core.infer(request("x"))
        await core.infer(request("y"))  # p is the oldest, but pinned: x goes
        assert states(core) == {"p": "READY", "x": "UNAVAILABLE", "y": "READY",
                                "z": "UNAVAILABLE"}  # fmt: skip
        with pytest.raises(NoRoom, match="needs 190.7 MiB; cpu: 47.7 MiB free"):
            await core.infer(request("z"))  # y's place and the free 50 MB are not enough

    asyncio.run(scenario())


def test_a_model_with_a_request_in_flight_is_not_evicted(models_dir, on_demand):
    # b's batch window holds its request for a second, so it is busy meanwhile.
    slow = sized(100, "dynamic_batching { max_queue_delay_microseconds: 1000000 "
                 "preferred_batch_size: [ 8 ] }" + WAITS_OUT)  # fmt: skip
    core = on_demand(models_dir({"a": sized(100), "b": slow, "c": sized(100)}), budget_mb=200)

    async def scenario():
        await core.infer(request("b"))
        await core.infer(request("a"))  # b is the least recently used
        waiting = asyncio.ensure_future(core.infer(request("b", 5)))
        await asyncio.sleep(0.1)
        await core.infer(request("c"))  # b is busy: a goes though it is newer
        assert states(core) == {"a": "UNAVAILABLE", "b": "READY", "c": "READY"}
        answer = await waiting
        np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 3), 5))

    asyncio.run(scenario())


def test_a_request_waiting_past_the_load_timeout_gets_503_while_the_load_goes_on(
    models_dir, on_demand
):
    core = on_demand(models_dir({"m": sized(100)}), budget_mb=1000, load_timeout_s=0.001)

    async def scenario():
        with pytest.raises(Unavailable, match="still loading after 0.001 s"):
            await core.infer(request("m"))
        async with asyncio.timeout(60):  # the load finishes on its own
            while states(core)["m"] != "READY":
                await asyncio.sleep(0.01)
        await core.infer(request("m"))

    asyncio.run(scenario())
    assert core.repository.memory.stats.loads == 1


def test_requests_waiting_for_a_load_are_bounded(models_dir, on_demand):
    core = on_demand(models_dir({"m": sized(100)}), budget_mb=1000, max_queue_size=3)

    async def scenario():
        return await asyncio.gather(
            *(core.infer(request("m", v)) for v in range(5)), return_exceptions=True
        )

    results = asyncio.run(scenario())
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 2 and all("3 requests already wait" in str(r) for r in refused)
    assert core.repository.memory.stats.loads == 1


def test_evicting_a_model_in_a_worker_process_ends_the_worker(models_dir, on_demand):
    in_worker = 'parameters { key: "execution" value: { string_value: "process" } }'
    root = models_dir({"a": sized(100, in_worker), "b": sized(100, in_worker)})
    core = on_demand(root, budget_mb=150)

    async def scenario():
        await core.infer(request("a"))
        (instance,) = core.repository.get("a").pool.instances
        pid = instance.worker.pid
        await core.infer(request("b"))  # a is evicted: its worker and all it held go
        assert states(core) == {"a": "UNAVAILABLE", "b": "READY"}
        return pid

    pid = asyncio.run(scenario())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    asyncio.run(core.repository.unload_all())


def test_an_eviction_of_two_models_does_not_deadlock_with_a_reload_of_one_of_them(
    models_dir, on_demand
):
    core = on_demand(models_dir({"a": sized(100), "b": sized(100)}), 1000)
    repository, memory = core.repository, core.repository.memory

    async def placement_evicting_both():
        async with memory._placing:  # as a load that needs both places holds it
            return await repository.on_demand.evict(("a", "b"))

    async def scenario():
        await core.infer(request("a"))
        await core.infer(request("b"))
        # An operator reloads b while the eviction runs: the reload waits for b's lock
        # (taken with a's before the eviction's first wait), not the other way round.
        both = asyncio.gather(placement_evicting_both(), repository.load("b"))
        evicted, _ = await asyncio.wait_for(both, 30)
        return evicted

    assert asyncio.run(scenario()) == ["a", "b"]
    assert states(core) == {"a": "UNAVAILABLE", "b": "READY"}
    assert memory.ledger.used(CPU) == 100 * MB


def test_a_request_during_a_load_call_waits_for_that_load_instead_of_loading_again(
    models_dir, on_demand
):
    core = on_demand(models_dir({"m": sized(100)}), 1000)

    async def scenario():
        call = asyncio.ensure_future(core.repository.load("m"))
        await asyncio.sleep(0)  # the load call has the model's lock
        answer = await core.infer(request("m", 3))
        await call
        return answer

    answer = asyncio.run(scenario())
    np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 3), 3))
    assert core.repository.memory.stats.loads == 1


def test_a_model_evicted_after_a_load_with_a_config_override_comes_back_with_it(
    models_dir, on_demand
):
    core = on_demand(models_dir({"a": sized(100), "b": sized(100)}), 150)
    override = {"name": "a", "platform": "onnxruntime_onnx", "max_batch_size": 2,
                "parameters": {"memory_bytes": {"string_value": "100MB"}}}  # fmt: skip

    async def scenario():
        await core.repository.load("a", override)
        await core.infer(request("b"))  # a is evicted
        assert states(core)["a"] == "UNAVAILABLE"
        return await core.model_config("a")  # loads it again

    assert asyncio.run(scenario()).max_batch_size == 2


def test_the_budget_holds_over_a_thousand_random_requests_to_twenty_models(models_dir, on_demand):
    sizes = {f"m{i:02}": 50 + 10 * (i % 7) for i in range(20)}
    budget_mb = 400
    core = on_demand(models_dir({n: sized(mb) for n, mb in sizes.items()}), budget_mb=budget_mb)
    ledger = core.repository.memory.ledger
    rng = random.Random(20261125)
    names = sorted(sizes)
    weights = [1 / (rank + 1) for rank in range(len(names))]  # Zipf-like popularity

    async def scenario():
        for step in range(250):  # four at once, a thousand in all
            batch = rng.choices(names, weights, k=4)
            await asyncio.gather(*(core.infer(request(name, step)) for name in batch))
            assert ledger.used(CPU) <= budget_mb * MB, f"past the budget at step {step}"
            loaded = [r["name"] for r in core.repository.index() if r["state"] == "READY"]
            assert sum(sizes[n] for n in loaded) <= budget_mb

    asyncio.run(scenario())
    stats = core.repository.memory.stats
    assert stats.evictions > 0 and stats.hits > 0 and stats.load_failures == 0


SLOW = (
    "dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 8 ] }"
    + WAITS_OUT
)


def test_a_load_whose_room_busy_models_hold_waits_for_one_to_fall_idle(models_dir, on_demand):
    # a and b fill the budget, and each holds its request for 0.3 s (its batch window).
    root = models_dir({"a": sized(100, SLOW), "b": sized(100, SLOW), "c": sized(100)})
    core = on_demand(root, budget_mb=200)

    async def scenario():
        await core.infer(request("a"))
        await core.infer(request("b"))
        # Taken before the busy requests exist: their 0.3 s windows end after began + 0.3.
        began = asyncio.get_running_loop().time()
        busy = [asyncio.ensure_future(core.infer(request(m))) for m in ("a", "b")]
        await asyncio.sleep(0.05)
        answer = await core.infer(request("c", 3))  # waits, then evicts the first idle
        waited = asyncio.get_running_loop().time() - began
        await asyncio.gather(*busy)
        return answer, waited

    answer, waited = asyncio.run(scenario())
    np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 3), 3))
    assert 0.25 < waited < 30  # it waited for a window to end, and not for its 120 s timeout
    assert core.repository.memory.stats.evictions == 1
    assert sorted(states(core).values()) == ["READY", "READY", "UNAVAILABLE"]


def test_a_load_that_waits_for_room_past_the_load_timeout_says_so(models_dir, on_demand):
    busy_for_a_second = "dynamic_batching { max_queue_delay_microseconds: 1000000 " \
        "preferred_batch_size: [ 8 ] }" + WAITS_OUT  # fmt: skip
    root = models_dir({"a": sized(100, busy_for_a_second), "c": sized(100)})
    core = on_demand(root, budget_mb=100, load_timeout_s=0.2)

    async def scenario():
        await core.infer(request("a"))
        busy = asyncio.ensure_future(core.infer(request("a")))
        await asyncio.sleep(0.05)
        with pytest.raises(Unavailable) as refused:
            await core.infer(request("c"))
        await busy
        await asyncio.sleep(0.05)
        return refused.value, {row["name"]: row["reason"] for row in core.repository.index()}

    refused, reasons = asyncio.run(scenario())
    # The request gives up at the load timeout, and so does the load, saying why.
    assert "still loading after 0.2 s" in refused.message
    assert "waited 0.2 s (--model-load-timeout) for models busy with requests" in reasons["c"]
    assert core.repository.memory.stats.evictions == 0
    assert states(core)["a"] == "READY"


def test_a_reload_books_what_the_instance_measured_when_it_last_loaded(models_dir, on_demand):
    core = on_demand(models_dir({"a": sized(100), "b": sized(100)}), budget_mb=250)

    async def scenario():
        await core.infer(request("a"))
        memory = core.repository.memory
        assert "a/1/0" in memory.last_measured
        memory.last_measured["a/1/0"] = (CPU, 200 * MB)  # as if a had measured 200 MB
        await core.repository.unload("a")
        await core.infer(request("b"))
        await core.infer(request("a"))  # 200 MB booked before it loads: b must go first
        assert states(core) == {"a": "READY", "b": "UNAVAILABLE"}
        assert memory.ledger.used(CPU) >= 200 * MB
        (row,) = [r for r in core.repository.index() if r["name"] == "a"]
        assert row["memory"]["predicted_bytes"] == 100 * MB  # the prediction, still shown

    asyncio.run(scenario())
