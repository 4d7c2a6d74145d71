"""A front process's own copies of the models that may have them (gateway/core/copies.py):
loaded and dropped when the model host says, and serving this front's requests for them
without a trip to the host, each with its own scheduler (and so its own batches).

Messages from the host:
    ("copy", id, model_dir, version, config, instances, max_queue_size, queue_budget_ms, nice)
                                        load it; answered ("copied", id, error or None)
    ("drop", id, drain_s)               stop routing to it, let its requests finish, close
                                        it; answered ("dropped", id)
    ("routes", name, {version: id})     which copy serves each version string of a model
    ("local", on)                       serve copies here, or (off) send every request to
                                        the host (which logs or traces each one then)
    ("flush", n)                        report counters now; answered ("flushed", n)
Counters go to the host as ("stats", [(id, pickled ModelStatistics, requests pending)])
when they changed, every REPORT_EVERY_S, and on a flush.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import Callable
from pathlib import Path

from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from gateway.core.model import ModelVersion

log = logging.getLogger(__name__)

MESSAGES = frozenset({"copy", "drop", "routes", "local", "flush"})
REPORT_EVERY_S = 1.0  # how stale the host's sum of counters may be between flushes


def load_copy(
    model_dir: Path, version: int, config: mc.ModelConfig, instances: int,
    max_queue_size: int, queue_budget_ms: float | None, nice: int,
) -> ModelVersion:  # fmt: skip
    """The model version as the host loaded it, with the same number of instances, all
    threads on the CPU (blocking: call from a worker thread)."""
    del config.instance_group[:]
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=instances)
    plan = ModelVersion.plan(model_dir, version, config)
    if any(slot.in_worker for slot in plan.slots):  # the host checked; its config changed?
        raise RuntimeError("its instances would run in worker processes, which copies never do")
    devices = [Device("cpu")] * len(plan.slots)
    return ModelVersion.load(plan, devices, max_queue_size, queue_budget_ms, nice)


class FrontCopies:
    def __init__(self, send: Callable[[tuple], None]) -> None:
        self.send = send  # a message to the host
        self.models: dict[int, ModelVersion] = {}  # by copy id
        self.routes: dict[str, dict[str, int]] = {}  # model -> version string -> copy id
        self.local = True
        self._reported: dict[int, tuple[int, ...]] = {}  # counters last sent, by copy
        self._loading: set[int] = set()  # copies being loaded
        self._dropped: set[int] = set()  # ... that a drop reached first: closed once loaded
        self._tasks: set[asyncio.Task] = set()
        self._reporter: asyncio.Task | None = None

    def route(self, name: str, version: str) -> ModelVersion | None:
        """This front's copy for a request, or None: the host serves it."""
        table = self.routes.get(name) if self.local else None
        if table is None:
            return None
        copy_id = table.get(version)
        if copy_id is None and version.isdigit():  # "01" names version 1 as well
            copy_id = table.get(str(int(version)))
        return self.models.get(copy_id) if copy_id is not None else None

    def on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "copy":
            self._loading.add(message[1])
            self._spawn(self._load(*message[1:]))
        elif kind == "drop":
            if message[1] in self._loading:  # closed as soon as it has loaded
                self._dropped.add(message[1])
            model = self.models.pop(message[1], None)  # no new request reaches it
            self._spawn(self._drop(message[1], model, float(message[2])))
        elif kind == "routes":
            if message[2]:
                self.routes[message[1]] = message[2]
            else:
                self.routes.pop(message[1], None)
        elif kind == "local":
            self.local = bool(message[1])
        elif kind == "flush":
            self.report()
            self.send(("flushed", message[1]))

    def _spawn(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._reporter is None:
            self._reporter = asyncio.ensure_future(self._report_changes())

    async def _load(
        self, copy_id: int, model_dir: str, version: int, config: bytes, instances: int,
        max_queue_size: int, queue_budget_ms: float | None, nice: int,
    ) -> None:  # fmt: skip
        error = None
        try:
            model = await asyncio.to_thread(
                load_copy, Path(model_dir), version, mc.ModelConfig.FromString(config),
                instances, max_queue_size, queue_budget_ms, nice,
            )  # fmt: skip
            model.attach()
            try:  # as the host warms its own up: its samples' failure fails the load
                await model.warm_up()
            except BaseException:
                await model.close()
                raise
            model.copy_id = copy_id
            if copy_id in self._dropped:  # unloaded while it loaded
                await model.close()
            else:
                self.models[copy_id] = model
        except Exception as exc:  # noqa: BLE001 - the host says what failed, and fails the load
            error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        finally:
            self._loading.discard(copy_id)
            self._dropped.discard(copy_id)
        self.send(("copied", copy_id, error))

    async def _drop(self, copy_id: int, model: ModelVersion | None, drain_s: float) -> None:
        if model is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + drain_s
            while model.pending and loop.time() < deadline:
                await asyncio.sleep(0.01)
            self._report_one(copy_id, model)  # what it served is counted
            try:
                await model.close()
            except Exception:  # noqa: BLE001 - the host unloads its own version all the same
                log.exception("the copy of model '%s' did not close cleanly", model.name)
        self._reported.pop(copy_id, None)
        self.send(("dropped", copy_id))

    def report(self) -> None:
        """Send the counters of every copy whose counters changed since last sent."""
        for copy_id, model in list(self.models.items()):
            self._report_one(copy_id, model)

    def _report_one(self, copy_id: int, model: ModelVersion) -> None:
        stats = model.stats
        counters = (stats.success.count, stats.fail.count, stats.execution_count, model.pending)
        if self._reported.get(copy_id, (0, 0, 0, 0)) != counters:
            self._reported[copy_id] = counters
            self.send(("stats", [(copy_id, pickle.dumps(stats), model.pending)]))

    async def _report_changes(self) -> None:
        while True:
            await asyncio.sleep(REPORT_EVERY_S)
            self.report()

    async def close(self) -> None:
        """The front is stopping: its copies go (its requests have been answered)."""
        if self._reporter is not None:
            self._reporter.cancel()
        for task in list(self._tasks):
            task.cancel()
        models, self.models = list(self.models.values()), {}
        for model in models:
            try:
                await model.close()
            except Exception:  # noqa: BLE001 - exiting anyway
                log.exception("the copy of model '%s' did not close cleanly", model.name)
