"""Spare worker processes: started ahead of need, with the framework already imported,
so that a model loaded on demand does not wait for an interpreter and its framework to
start. On an H100, `import torch` took 4.4-5.2 s of a ResNet-50's 5.7 s load.

Kept on demand only, and for GPU instances only. A spare has not touched CUDA, so it
holds no GPU memory; its host memory (the interpreter and the framework) is what a GPU
worker's is, which the CPU's budget does not book either. A spare for a CPU instance
would hold host memory that no budget counts, so there are none.

`per_kind` spares (the loads that may run at once on a device) of each kind of worker:
the same environment (which GPU it sees, thread counts), priority and platform. A load
of that kind takes the oldest, which has had the longest to import, and starts its
successor. Spares are kept for the MAX_KINDS kinds loaded most recently; an older
kind's are ended, so their number is bounded however many GPUs and platforms there are.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from accel_base.logs import FORMAT_VARIABLE
from backends.base import Device
from workers.client import WorkerProcess

log = logging.getLogger(__name__)

SpareKey = tuple[frozenset, int, str]  # environment, nice, platform
MAX_KINDS = 4


class SpareWorkers:
    def __init__(self, per_kind: int = 2) -> None:
        self.per_kind = per_kind
        self._spares: OrderedDict[SpareKey, list[WorkerProcess]] = OrderedDict()
        self._lock = threading.Lock()  # loads take spares on worker threads
        self._closed = False

    def take(
        self, name: str, env: dict[str, str], nice: int, platform: str, device: Device
    ) -> WorkerProcess:
        """A worker for this instance: the oldest live spare of its kind, else a new
        one; for a GPU instance, spares start (importing) to make up `per_kind`."""
        # Not by log format: a run-time change of it would strand every spare started
        # before it (a worker logs in the format of its start, spares included).
        key = (frozenset(i for i in env.items() if i[0] != FORMAT_VARIABLE), nice, platform)
        worker = None
        while worker is None:
            with self._lock:
                queue = self._spares.get(key, [])
                spare = queue.pop(0) if queue else None
            if spare is None:
                worker = WorkerProcess(name, env, nice)
            elif spare.alive():
                worker = spare
            else:
                log.warning("a spare worker for %s %s", platform, spare.exit_description())
                spare.close()
        if device.kind == "gpu":
            while self._start(key, env, nice, platform):
                pass
            self._retire_old_kinds(key)
        return worker

    def _retire_old_kinds(self, newest: SpareKey) -> None:
        with self._lock:
            if newest in self._spares:
                self._spares.move_to_end(newest)
            retired = []
            while len(self._spares) > MAX_KINDS:
                retired += self._spares.popitem(last=False)[1]
        for spare in retired:
            spare.kill()
            spare.close()

    def _start(self, key: SpareKey, env: dict[str, str], nice: int, platform: str) -> bool:
        """One more spare of this kind, unless it has enough; whether one started."""
        with self._lock:
            if self._closed or len(self._spares.get(key, [])) >= self.per_kind:
                return False
        spare = WorkerProcess(f"spare-{platform}", env, nice)
        spare.prepare(platform)
        with self._lock:
            queue = self._spares.setdefault(key, [])
            if not self._closed and len(queue) < self.per_kind:
                queue.append(spare)
                return True
        spare.kill()
        spare.close()
        return False

    def close(self) -> None:
        """End every spare (the server is stopping; blocking: call from a thread)."""
        with self._lock:
            self._closed = True
            spares = [s for queue in self._spares.values() for s in queue]
            self._spares = OrderedDict()
        for spare in spares:
            spare.kill()
            spare.close()

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._spares.values())
