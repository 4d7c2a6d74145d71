"""The model host's front processes: started with the host, restarted when one dies,
drained and ended with the host.

Each front is `python -m gateway.front_processes.main` with one end of a channel (wire.py); the
host keeps the other end and a FrontLink that answers it. A front that exits or closes
its channel while the host runs is started again after a backoff that doubles with each
quick death in a row (a front that ran RESET_AFTER_S counts as healthy again). The
models are not touched: they live in the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.core.service import InferenceCore
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel
from gateway.front_processes.host import FrontLink
from gateway.front_processes.regions import Regions
from gateway.front_processes.replicas import Replicas

log = logging.getLogger("accel_gateway")

FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
RESET_AFTER_S = 10.0  # a front that ran this long before dying restarts at once
STOP_MARGIN_S = 5.0  # past the drain, a front that has not exited is killed


@dataclass(slots=True)
class _Front:
    link: FrontLink
    process: subprocess.Popen | None = None
    started: float = 0.0
    backoff_s: float = FIRST_BACKOFF_S
    restarts: int = 0
    exited: asyncio.Event = field(default_factory=asyncio.Event)


class FrontSupervisor:
    def __init__(
        self, core: InferenceCore, count: int, options: Any, log_level: str, copies: bool = True
    ) -> None:
        """`options`: the ServerOptions the fronts serve with (ports, limits, TLS);
        `copies`: whether fronts hold copies of the models that may have them."""
        self.core = core
        self.options = options
        self.log_level = log_level
        self.fronts = [_Front(FrontLink(i, core)) for i in range(count)]
        # Each front's own copies of the models that may have them (front_processes/copies.py).
        self.replicas: Replicas | None = None
        if copies:
            self.replicas = Replicas(
                core.repository, self.links,
                lambda: not (core.access_log or core.tracing.settings.enabled),
            )  # fmt: skip
            core.repository.copies = self.replicas
            core.repository.memory.cpu_copies = count + 1  # the host's and one a front
            for link in self.links:
                link.on_reply = self.replicas.on_reply
                link.on_settings = self.replicas.settings_changed
            core.tracing.settings.on_ended = self.replicas.settings_changed
        # Every front's mirror of the shared-memory regions (front_processes/regions.py).
        self.regions: Regions | None = None
        if core.shared_memory.enabled:
            self.regions = Regions(core.shared_memory, self.links)
            for link in self.links:
                link.on_region = self.regions.changed
                link.on_region_done = self.regions.on_reply
        self.serving = False
        self.stopping = False
        self._watchers: set[asyncio.Task] = set()

    def _followers(self) -> list[Replicas | Regions]:
        """What every front keeps a copy of: models, shared-memory regions."""
        return [f for f in (self.replicas, self.regions) if f is not None]

    @property
    def links(self) -> list[FrontLink]:
        return [front.link for front in self.fronts]

    def requests(self, link: FrontLink) -> int:
        """Inference requests a front served: handed to the host, or answered by its
        copies (as of their last report)."""
        copies = self.replicas.served.get(link.index, 0) if self.replicas is not None else 0
        return link.requests + copies

    def restarts(self) -> int:
        return sum(front.restarts for front in self.fronts)

    def start(self) -> None:
        for front in self.fronts:
            self._launch(front)

    def _launch(self, front: _Front) -> None:
        # What can fail without a process is done before there is one.
        hello = ("hello", front.link.index, pickle.dumps(self.options), self.core.server_metadata())
        host_end, front_end = wire.channel_pair()
        command = [
            sys.executable, "-m", "gateway.front_processes.main",
            "--channel-fd", str(front_end.fileno()), "--log-level", self.log_level,
        ]  # fmt: skip
        try:
            process = subprocess.Popen(command, pass_fds=[front_end.fileno()])
        except OSError:
            host_end.close()
            raise
        finally:
            front_end.close()
        channel = None
        try:
            channel = Channel(host_end, front.link.on_message, lambda: None)
            channel.send(hello)
            channel.flush()  # alone: the front reads it before it has a channel of its own
            channel.send(("serving", self.serving))
        except BaseException:  # a front that never got its hello must not linger
            if channel is not None:
                channel.close()
            else:
                host_end.close()
            process.kill()
            process.wait()  # just killed: a moment
            raise
        front.process = process
        front.started = time.monotonic()
        front.exited.clear()
        front.link.attach(channel)
        for follower in self._followers():
            follower.attached(front.link)
        watcher = asyncio.ensure_future(self._watch(front, channel))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, front: _Front, channel: Channel) -> None:
        process = front.process
        assert process is not None
        while process.poll() is None and not channel.closed:
            await asyncio.sleep(0.05)
        channel.close()
        front.link.detach()
        for follower in self._followers():
            follower.detached(front.link.index)
        if process.poll() is None:  # its channel broke: end it before a new one starts
            process.kill()
        code = await asyncio.to_thread(process.wait)
        front.exited.set()
        if self.stopping:
            return
        ran_s = time.monotonic() - front.started
        if ran_s >= RESET_AFTER_S:
            front.backoff_s = FIRST_BACKOFF_S
        log.error(
            "front %d exited with %s after %.1f s; starting it again in %.1f s",
            front.link.index, code, ran_s, front.backoff_s,
        )  # fmt: skip
        while not self.stopping:
            await asyncio.sleep(front.backoff_s)
            front.backoff_s = min(front.backoff_s * 2, MAX_BACKOFF_S)
            if self.stopping:
                return
            try:
                self._launch(front)
            except Exception as exc:  # out of processes or descriptors: try again later
                log.error("front %d could not start: %s", front.link.index, exc)
                continue
            front.restarts += 1
            return

    def set_serving(self, serving: bool) -> None:
        self.serving = serving
        for front in self.fronts:
            if front.link.channel is not None:
                front.link.channel.send(("serving", serving))

    async def stop(self, drain_s: float) -> None:
        """Fronts refuse new requests, answer those in flight (the host still runs them),
        and exit; one that outlasts the drain is killed."""
        self.stopping = True
        for front in self.fronts:
            if front.link.channel is not None:
                front.link.channel.send(("stop", drain_s))
        waits = [front.exited.wait() for front in self.fronts if front.process is not None]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waits), drain_s + STOP_MARGIN_S)
        for front in self.fronts:
            if front.process is not None and front.process.poll() is None:
                log.warning("front %d did not exit after the drain; killing it", front.link.index)
                front.process.kill()
        for watcher in list(self._watchers):
            watcher.cancel()
