from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pytest

from backends.base import Backend, TensorSpec
from gateway.scheduling.instances import INLINE_BELOW_NS, Instance
from gateway.scheduling.pool import InstancePool


class RecordingBackend(Backend):
    """Records the thread each run happens on; sleeps to simulate a slow model."""

    def __init__(self, inline: bool, sleep_s: float = 0.0) -> None:
        self.inline = inline
        self.sleep_s = sleep_s
        self.threads: list[str] = []

    def inline_capable(self) -> bool:  # type: ignore[override]
        return self.inline

    def inputs(self):
        return [TensorSpec("x", "FP32", (-1,))]

    def outputs(self):
        return [TensorSpec("x", "FP32", (-1,))]

    def run(self, inputs, output_names):
        import time

        time.sleep(self.sleep_s)
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
    instance = Instance(backend, "fast", cores=2)

    run_times(instance, 30)
    threads = list(backend.threads)
    instance.close()
    assert threads[0].startswith("fast")  # the first run measures, on its thread
    # Once the moving average is under the threshold, runs move to the loop's thread
    # (a rare slow run on a loaded machine may send a few back for a while).
    inline = sum(name == threading.main_thread().name for name in threads[-20:])
    assert inline >= 10


@pytest.mark.parametrize(("inline", "sleep_s"), [(False, 0.0), (True, 2 * INLINE_BELOW_NS / 1e9)])
def test_slow_or_incapable_backend_stays_on_its_thread(inline, sleep_s):
    backend = RecordingBackend(inline=inline, sleep_s=sleep_s)
    instance = Instance(backend, "slow", cores=2)

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
    backend = RecordingBackend(inline=False, sleep_s=0.2)
    pool = InstancePool([Instance(backend, "busy", cores=2)])

    async def go():
        async def use():
            instance = await pool.acquire()
            try:
                await instance.run({"x": np.zeros(1)}, ["x"])
            finally:
                pool.release(instance)

        first = asyncio.create_task(use())
        await asyncio.sleep(0.05)
        first.cancel()  # the run goes on in the instance's thread
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        instance = await pool.acquire()
        waited = loop.time() - start
        pool.release(instance)
        pool.close()
        return waited

    assert run(go()) >= 0.1  # the next caller waited for the orphaned run to finish


def test_a_single_core_process_runs_longer_runs_inline():
    # 200 us runs: too long to run inline with two cores, short enough with one.
    backend = RecordingBackend(inline=True, sleep_s=2 * INLINE_BELOW_NS / 1e9)
    instance = Instance(backend, "one", cores=1)

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
