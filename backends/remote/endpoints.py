"""The endpoints of one remote model: which one takes the next call, which are out.

Each call goes to the healthy endpoint with the fewest calls outstanding (ties to the
one after the last chosen, so that idle endpoints share the load). An endpoint whose
connection fails is out until a health check passes; a thread checks every endpoint
each `health_interval_s`. When every endpoint is out, a call fails at once with each
endpoint's reason, never waiting for one to come back.

The instances of a model version share one pool (`shared_pool`): least-outstanding
means nothing within one instance, which runs one batch at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from accel_base.errors import GatewayError, Unavailable
from backends.remote.failures import Lost, NotSent
from backends.remote.grpc_client import GrpcClient
from backends.remote.http_client import HttpClient
from backends.remote.settings import RemoteSettings

log = logging.getLogger(__name__)


class Client(Protocol):
    endpoint: str

    def ready(self) -> None: ...
    def metadata(self) -> dict[str, Any]: ...
    def max_batch_size(self) -> int | None: ...
    def infer(
        self, inputs: dict[str, np.ndarray], datatypes: dict[str, str], output_names: list[str]
    ) -> dict[str, np.ndarray]: ...
    def close(self) -> None: ...


class Endpoint:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.outstanding = 0
        self.down_reason: str | None = None  # None while healthy
        self.failures = 0  # connection failures so far: a health check older than one
        # of them may not bring the endpoint back


class EndpointPool:
    def __init__(
        self, name: str, settings: RemoteSettings, clients: list[Client] | None = None
    ) -> None:
        self.name = name
        self.settings = settings
        if clients is None:
            clients = [
                GrpcClient(e, settings) if e.protocol == "grpc" else HttpClient(e, settings)
                for e in settings.endpoints
            ]
        self.endpoints = [Endpoint(c) for c in clients]
        self._lock = threading.Lock()
        self._next = 0
        self._closed = threading.Event()
        self._checker: threading.Thread | None = None

    # ---- choosing ------------------------------------------------------------------

    def _choose(self, tried: list[Endpoint]) -> Endpoint:
        with self._lock:
            # From the one after the last chosen, so that idle endpoints take turns.
            order = self.endpoints[self._next :] + self.endpoints[: self._next]
            healthy = [e for e in order if e not in tried and e.down_reason is None]
            if not healthy:
                raise self.unavailable()
            chosen = min(healthy, key=lambda e: e.outstanding)
            chosen.outstanding += 1
            self._next = (self.endpoints.index(chosen) + 1) % len(self.endpoints)
            return chosen

    @contextmanager
    def _using(self, endpoint: Endpoint) -> Iterator[None]:
        try:
            yield
        finally:
            with self._lock:
                endpoint.outstanding -= 1

    def unavailable(self) -> Unavailable:
        reasons = "; ".join(
            f"{e.client.endpoint}: {e.down_reason or 'tried'}" for e in self.endpoints
        )
        return Unavailable(f"model '{self.name}': no remote endpoint can take the call ({reasons})")

    def call(self, run: Callable[[Client], Any]) -> Any:
        """`run(client)` on the best endpoint; on others while it was never sent."""
        tried: list[Endpoint] = []
        while True:
            endpoint = self._choose(tried)
            with self._using(endpoint):
                try:
                    return run(endpoint.client)
                except NotSent as exc:
                    self.mark_down(endpoint, str(exc))
                    tried.append(endpoint)
                    if len(tried) > self.settings.retries:
                        raise self.unavailable() from None
                except Lost as exc:  # it may have run: not retried
                    self.mark_down(endpoint, str(exc))
                    raise Unavailable(
                        f"model '{self.name}': the call to remote {endpoint.client.endpoint} "
                        f"failed ({exc}); it is not retried, since it may have run there"
                    ) from None

    # ---- health --------------------------------------------------------------------

    def mark_down(self, endpoint: Endpoint, reason: str) -> None:
        with self._lock:
            was_up = endpoint.down_reason is None
            endpoint.down_reason = reason
            endpoint.failures += 1
        if was_up:
            log.warning("model '%s': remote %s is out: %s", self.name, endpoint.client.endpoint,
                        reason)  # fmt: skip

    def check(self, endpoint: Endpoint) -> None:
        """Ask the endpoint whether the model is ready there; in or out by the answer."""
        before = endpoint.failures
        try:
            endpoint.client.ready()
        except (NotSent, Lost, GatewayError) as exc:
            self.mark_down(endpoint, str(exc))
            return
        with self._lock:
            if endpoint.failures != before:  # a call failed while this check ran
                return
            came_back = endpoint.down_reason is not None
            endpoint.down_reason = None
        if came_back:
            log.warning("model '%s': remote %s is back", self.name, endpoint.client.endpoint)

    def start_checking(self) -> None:
        self._checker = threading.Thread(
            target=self._check_forever, name=f"{self.name}-health", daemon=True
        )
        self._checker.start()

    def _check_forever(self) -> None:
        while not self._closed.wait(self.settings.health_interval_s):
            for endpoint in self.endpoints:
                if self._closed.is_set():
                    return
                try:
                    self.check(endpoint)
                except Exception as exc:  # a client's own bug must not end the checking
                    log.exception("model '%s': checking %s failed", self.name,
                                  endpoint.client.endpoint)  # fmt: skip
                    self.mark_down(endpoint, f"its health check failed: {exc}")

    def close(self) -> None:
        self._closed.set()
        if self._checker is not None:
            # A check in progress takes up to a connection's and a call's deadline.
            self._checker.join(timeout=2 * self.settings.connect_timeout_s + 1)
        for endpoint in self.endpoints:
            endpoint.client.close()


# (model, settings) -> [pool, users]: the instances of a version share its endpoints.
_POOLS: dict[tuple[str, RemoteSettings], list[Any]] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(name: str, settings: RemoteSettings) -> EndpointPool:
    """The pool of these settings, made by its first user; give it back with release()."""
    with _POOLS_LOCK:
        entry = _POOLS.get((name, settings))
        if entry is None:
            entry = _POOLS[name, settings] = [EndpointPool(name, settings), 0]
            entry[0].start_checking()
        entry[1] += 1
        return entry[0]


def release(name: str, settings: RemoteSettings) -> None:
    """One user fewer; the last one closes the pool."""
    with _POOLS_LOCK:
        entry = _POOLS[name, settings]
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _POOLS[name, settings]
    entry[0].close()
