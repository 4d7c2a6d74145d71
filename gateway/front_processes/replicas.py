"""The model host's side of the fronts' copies (gateway/core/copies.py,
gateway/front_processes/copies.py): each version that may have copies is loaded in every
front before it is published, routed to by version, dropped from every front before the
host unloads its own, and counted in the host's statistics.

The host keeps its own instance of every copied version: a front that (re)starts serves
through it until its copies have loaded, and the host's own callers (ensembles, routers,
Python models, the SageMaker, TorchServe and TF Serving fronts) use it.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel_base.errors import Unavailable
from gateway.core.copies import copyable, routes
from gateway.core.model import ModelVersion
from gateway.core.model_entry import ModelEntry
from gateway.core.statistics import ModelStatistics, merged
from gateway.front_processes.asking import AskingFronts
from gateway.front_processes.host import FrontLink

log = logging.getLogger(__name__)

COPY_TIMEOUT_S = 600.0  # as a worker's load timeout: a copy loads what the host loaded
FLUSH_TIMEOUT_S = 2.0  # statistics answer with a late front's last report past this
DROP_MARGIN_S = 5.0  # past the drain, a front that has not dropped its copy is not waited for


def _answered(stats: ModelStatistics) -> int:
    return stats.success.count + stats.fail.count


class Replicas(AskingFronts):
    def __init__(self, repository: Any, links: list[FrontLink], local: Callable[[], bool]) -> None:
        """`local`: whether fronts may serve their copies now (not while the host logs or
        traces each request)."""
        super().__init__(links)
        self.repository = repository
        self.local = local
        # By copy id: the host's version and the message that loads its copies.
        self.held: dict[int, tuple[ModelVersion, tuple]] = {}
        self.routes: dict[str, dict[str, int]] = {}
        self._ids = itertools.count(1)
        self._flushes = itertools.count(1)
        # A front's counters by (front, its start): a restarted front counts from zero.
        self._starts: dict[int, int] = {}
        self.served: dict[int, int] = {}  # requests each front's copies answered, ever

    # ---- the repository's calls (gateway/core/copies.py) ------------------------------

    async def copy(self, model: ModelVersion, model_dir: Path) -> None:
        if not copyable(model):
            return
        copy_id = next(self._ids)
        repository = self.repository
        message = (
            "copy", copy_id, str(model_dir), model.version, model.config.SerializeToString(),
            len(model.pool.instances), repository.max_queue_size, repository.queue_budget_ms,
            repository.backend_nice,
        )  # fmt: skip
        model.copy_id = copy_id
        self.held[copy_id] = (model, message)
        errors = ["the load was cancelled"]  # unless the fronts answer
        try:
            errors = await self.ask_all(message, "copied", copy_id, COPY_TIMEOUT_S)
        finally:
            if errors:  # never routed to: the copies that loaded close without a drain
                self.held.pop(copy_id, None)
                self.broadcast(("drop", copy_id, 0.0))
        if errors:
            raise Unavailable(
                f"model '{model.name}' version {model.version}: a front process could not "
                f"load its copy: {errors[0]}"
            )

    async def drop(self, model: ModelVersion) -> None:
        copy_id = getattr(model, "copy_id", None)  # a router or an ensemble has none
        if copy_id is None or copy_id not in self.held:
            return
        drain_s = self.repository.drain_s
        try:  # (held until the fronts answer: their last counts are still taken)
            errors = await self.ask_all(("drop", copy_id, drain_s), "dropped", copy_id,
                                        drain_s + DROP_MARGIN_S)  # fmt: skip
        finally:
            self.held.pop(copy_id, None)
        for error in errors:
            log.warning("model '%s' version %d: %s", model.name, model.version, error)

    def routes_changed(self, name: str, entry: ModelEntry) -> None:
        table = routes(entry)
        if table:
            self.routes[name] = table
        elif self.routes.pop(name, None) is None:
            return  # it had none and has none
        self.broadcast(("routes", name, table))

    async def gather(self) -> None:
        """Every front's counters as of now (statistics are exact when asked for)."""
        if self.held:
            n = next(self._flushes)
            await self.ask_all(("flush", n), "flushed", n, FLUSH_TIMEOUT_S)

    # ---- the fronts ------------------------------------------------------------------

    def attached(self, link: FrontLink) -> None:
        """A front (re)started: it gets every copy and route there is."""
        self._starts[link.index] = self._starts.get(link.index, 0) + 1
        channel = link.channel
        assert channel is not None
        channel.send(("local", self.local()))
        for _, message in self.held.values():
            channel.send(message)
        for name, table in self.routes.items():
            channel.send(("routes", name, table))

    def detached(self, index: int) -> None:
        super().detached(index)
        for model, _ in self.held.values():  # what it held died with it
            model.copy_pending.pop(index, None)

    def settings_changed(self) -> None:
        self.broadcast(("local", self.local()))

    def on_reply(self, index: int, message: tuple) -> None:
        kind = message[0]
        if kind == "stats":
            self._counted(index, message[1])
            return
        key, result = message[1], message[2] if kind == "copied" else None
        if self.answered(kind, key, index, result):
            return
        if result is not None and key in self.held:  # a restarted front's: it serves
            log.error(  # through the host's instance instead
                "front %d could not load its copy of model '%s': %s",
                index, self.held[key][0].name, result,
            )  # fmt: skip

    def _counted(self, index: int, items: list[tuple[int, bytes, int]]) -> None:
        start = (index, self._starts.get(index, 0))
        for copy_id, blob, pending in items:
            held = self.held.get(copy_id)
            if held is None:
                continue  # dropped: its version is going
            stats: ModelStatistics = pickle.loads(blob)
            model = held[0]
            before = model.copy_stats.get(start)
            grown = _answered(stats) - (_answered(before) if before is not None else 0)
            if grown > 0:
                model.last_used = time.monotonic()  # eviction sees the fronts' use
                self.served[index] = self.served.get(index, 0) + grown
            model.copy_stats[start] = stats
            model.copy_pending[index] = pending  # eviction leaves a model busy in a front
            self._fold_old_starts(model, index, start)

    @staticmethod
    def _fold_old_starts(model: ModelVersion, index: int, start: tuple[int, int]) -> None:
        """A front's earlier processes' counters, kept as one entry once it restarted."""
        old = [key for key in model.copy_stats if key[0] == index and key != start and key[1] >= 0]
        if old:
            parts = [model.copy_stats.pop(key) for key in old]
            previous = model.copy_stats.pop((index, -1), None)
            model.copy_stats[(index, -1)] = merged(parts + ([previous] if previous else []))
