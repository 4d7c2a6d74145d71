"""Spare worker processes: started ahead of need, with the framework already imported,
so that a model loaded on demand does not wait for an interpreter and its framework to
start. On an H100, `import torch` took 4.4-5.2 s of a ResNet-50's 5.7 s load.

Kept on demand only, and for GPU instances only. A spare has not touched CUDA, so it
holds no GPU memory; its host memory (the interpreter and the framework) is what a GPU
worker's is, which the CPU's budget does not book either. A spare for a CPU instance
would hold host memory that no budget counts, so there are none.

One spare per kind of worker: the same environment (which GPU it sees, thread counts),
priority and platform. The next load of that kind takes it and starts its successor.
"""

from __future__ import annotations

import logging
import threading

from backends.base import Device
from workers.client import WorkerProcess

log = logging.getLogger(__name__)

SpareKey = tuple[frozenset, int, str]  # environment, nice, platform


class SpareWorkers:
    def __init__(self) -> None:
        self._spares: dict[SpareKey, WorkerProcess] = {}
        self._lock = threading.Lock()  # loads take spares on worker threads
        self._closed = False

    def take(
        self, name: str, env: dict[str, str], nice: int, platform: str, device: Device
    ) -> WorkerProcess:
        """A worker for this instance: the spare of its kind if one is alive, else a new
        one; for a GPU instance, a successor spare starts (importing) meanwhile."""
        key = (frozenset(env.items()), nice, platform)
        with self._lock:
            spare = self._spares.pop(key, None)
        worker = None
        if spare is not None:
            if spare.alive():
                worker = spare
            else:
                log.warning(
                    "a spare worker for %s had ended: %s", platform, spare.exit_description()
                )
                spare.close()
        if worker is None:
            worker = WorkerProcess(name, env, nice)
        if device.kind == "gpu":
            self._start(key, env, nice, platform)
        return worker

    def _start(self, key: SpareKey, env: dict[str, str], nice: int, platform: str) -> None:
        spare = WorkerProcess(f"spare-{platform}", env, nice)
        spare.prepare(platform)
        with self._lock:
            if self._closed or key in self._spares:
                spare.kill()
                spare.close()
                return
            self._spares[key] = spare

    def close(self) -> None:
        """End every spare (the server is stopping)."""
        with self._lock:
            self._closed = True
            spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            spare.kill()
            spare.close()

    def __len__(self) -> int:
        return len(self._spares)
