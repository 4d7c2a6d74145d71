from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pytest

from backends.base import Backend, TensorSpec
from gateway.core.scheduling.instances import INLINE_BELOW_NS, Instance
from gateway.core.scheduling.pool import InstancePool
from tests.clocks import runs_take


class RecordingBackend(Backend):
    """Records the thread each run happens on; a run may wait for a gate the test opens."""

    def __init__(self, inline: bool, gate: threading.Event | None = None) -> None:
        self.inline = inline
        self.gate = gate
        self.threads: list[str] = []

    def inline_capable(self) -> bool:  # type: ignore[override]
        return self.inline

    def inputs(self):
        return [TensorSpec("x", "FP32", (-1,))]

    def outputs(self):
        return [TensorSpec("x", "FP32", (-1,))]

    def run(self, inputs, output_names):
        if self.gate is not None:
            self.gate.wait(10)
        self.threads.append(threading.current_thread().name)
        return inputs

    def unload(self) -> None:
        self.threads.clear()


def run(coro):
    return asyncio.run(coro)


def run_times(instance: Instance, count: int) -> None:
    async def go():
        for _ in range(count):
            await instance.run({"x": np.zeros(1)}, ["x"])

    run(go())


def test_fast_inline_backend_moves_onto_the_event_loop():
    backend = RecordingBackend(inline=True)
    instance = Instance(backend, "fast", cores=2, clock_ns=runs_take(INLINE_BELOW_NS // 20))

    run_times(instance, 30)
    threads = list(backend.threads)
    instance.close()
    assert threads[0].startswith("fast")  # the first run measures, on its thread
    # Its run time is under the threshold: every run after it is on the loop's thread.
    assert threads[1:] == [threading.main_thread().name] * 29


def test_a_slow_run_sends_an_inline_backend_back_to_its_thread():
    backend = RecordingBackend(inline=True)
    times = iter([0, 5_000, 0, 5_000, 0, 50 * INLINE_BELOW_NS, 0, 5_000])
    instance = Instance(backend, "mixed", cores=2, clock_ns=lambda: next(times))

    run_times(instance, 4)
    threads = list(backend.threads)
    instance.close()
    main = threading.main_thread().name
    # Measured on the thread; inline; a 5 ms run (inline); its average sends the next back.
    assert [name == main for name in threads] == [False, True, True, False]


@pytest.mark.parametrize(("inline", "run_ns"), [(False, 1_000), (True, 2 * INLINE_BELOW_NS)])
def test_slow_or_incapable_backend_stays_on_its_thread(inline, run_ns):
    backend = RecordingBackend(inline=inline)
    instance = Instance(backend, "slow", cores=2, clock_ns=runs_take(run_ns))

    run_times(instance, 3)
    threads = list(backend.threads)
    instance.close()
    assert threads and all(name.startswith("slow") for name in threads)


def test_pool_hands_instances_out_in_arrival_order_and_skips_cancelled_waiters():
    async def go():
        pool = InstancePool([Instance(RecordingBackend(False), "i")])
        held = await pool.acquire()
        order = []

        async def waiter(tag):
            instance = await pool.acquire()
            order.append(tag)
            pool.release(instance)

        first = asyncio.create_task(waiter("first"))
        cancelled = asyncio.create_task(waiter("cancelled"))
        last = asyncio.create_task(waiter("last"))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        pool.release(held)
        await asyncio.gather(first, last)
        pool.close()
        return order

    assert run(go()) == ["first", "last"]


def test_instance_of_a_cancelled_caller_is_free_only_when_its_run_ends():
    gate = threading.Event()
    backend = RecordingBackend(inline=False, gate=gate)
    pool = InstancePool([Instance(backend, "busy", cores=2)])

    async def go() -> tuple[bool, bool]:
        async def use():
            instance = await pool.acquire()
            try:
                await instance.run({"x": np.zeros(1)}, ["x"])
            finally:
                pool.release(instance)

        first = asyncio.create_task(use())
        for _ in range(3):  # until the run is on the instance's thread
            await asyncio.sleep(0)
        first.cancel()  # the run goes on in the instance's thread
        next_caller = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.05)
        free_while_running = next_caller.done()
        gate.set()  # the orphaned run ends
        instance = await asyncio.wait_for(next_caller, 10)
        ran = len(backend.threads)
        pool.release(instance)
        pool.close()
        return free_while_running, ran == 1

    assert run(go()) == (False, True)  # the next caller waited for the orphaned run to end


def test_a_single_core_process_runs_longer_runs_inline():
    # 200 us runs: too long to run inline with two cores, short enough with one.
    backend = RecordingBackend(inline=True)
    instance = Instance(backend, "one", cores=1, clock_ns=runs_take(2 * INLINE_BELOW_NS))

    run_times(instance, 3)
    threads = list(backend.threads)
    instance.close()
    assert threads[0].startswith("one")  # the first run measures, on its thread
    assert threads[1:] == [threading.main_thread().name] * 2


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_loaded_instance_makes_and_runs_its_backend_below_the_loops_priority():
    seen: dict[str, int] = {}

    class PriorityBackend(RecordingBackend):
        def __init__(self) -> None:
            super().__init__(inline=False)
            seen["load"] = _priority()  # a framework's pools started here inherit it

        def run(self, inputs, output_names):
            seen["run"] = _priority()
            return super().run(inputs, output_names)

    instance = Instance.load(PriorityBackend, "low", nice=3)
    try:
        run_times(instance, 1)
        base = _priority()
        assert seen == {"load": min(base + 3, 19), "run": min(base + 3, 19)}
        assert instance.backend.threads == ["low_0"]
    finally:
        instance.close()


def test_a_backend_that_fails_to_load_leaves_no_thread_behind():
    before = threading.active_count()

    def broken() -> Backend:
        raise RuntimeError("no such model")

    with pytest.raises(RuntimeError, match="no such model"):
        Instance.load(broken, "broken", nice=3)
    assert threading.active_count() == before
