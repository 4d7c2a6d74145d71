"""System shared memory with front processes: the host's registry is the one of record,
and every front keeps a mirror of it, mapping each region itself, so that a region
registered through one front is usable from any (a client's next request may arrive on
another connection, and so at another front).

A register or unregister call, through whichever front, runs in the host first (which
checks it as it always does); then every front applies it to its mirror, and the call
returns once each has (or REGION_TIMEOUT_S passed). A front that (re)starts gets every
region registered then.

    host -> front: ("region", n, "register", name, key, offset, byte_size)
                   ("region", n, "unregister", name)      ('' : every region)
    front -> host: ("region_done", n, error or None)
"""

from __future__ import annotations

import itertools
import logging
import pickle

from accel_base.errors import Unavailable
from gateway.core.shared_memory import SharedMemoryRegistry
from gateway.front_processes.asking import AskingFronts
from gateway.front_processes.host import FrontLink

log = logging.getLogger(__name__)

REGION_TIMEOUT_S = 5.0


class Regions(AskingFronts):
    def __init__(self, registry: SharedMemoryRegistry, links: list[FrontLink]) -> None:
        super().__init__(links)
        self.registry = registry
        self._numbers = itertools.count(1)

    async def changed(self, method: str, arguments: bytes) -> None:
        """The host ran a register or unregister call (its pickled arguments, the token
        last): every front's mirror follows before the call returns."""
        n = next(self._numbers)
        values = pickle.loads(arguments)[:-1]
        kind = "register" if method == "register_system_shared_memory" else "unregister"
        errors = await self.ask_all(("region", n, kind, *values), "region_done", n,
                                    REGION_TIMEOUT_S)  # fmt: skip
        if not errors:
            return
        if kind == "unregister":  # gone from the host, which is what requests are checked by
            log.error("shared-memory region %r: %s", values[0], "; ".join(errors))
            return
        # A region some front cannot use is registered nowhere: the client hears why.
        self.registry.unregister(values[0])
        self.broadcast(("region", 0, "unregister", values[0]))
        raise Unavailable(
            f"system shared memory region {values[0]!r} could not be registered in every "
            f"front process: {'; '.join(errors)}"
        )

    def attached(self, link: FrontLink) -> None:
        channel = link.channel
        assert channel is not None
        for row in self.registry.status():
            channel.send(("region", 0, "register", row["name"], row["key"], row["offset"],
                          row["byte_size"]))  # fmt: skip

    def on_reply(self, index: int, message: tuple) -> None:
        if not self.answered("region_done", message[1], index, message[2]) and message[2]:
            log.error("front %d could not map a shared-memory region: %s", index, message[2])


def mirror(registry: SharedMemoryRegistry, message: tuple) -> tuple:
    """A front applies a "region" message to its registry; the answer to send back."""
    _, n, kind, name, *rest = message
    error = None
    try:
        if kind == "register":
            registry.unregister(name)  # a replay after a host restart of the front
            registry.register(name, *rest)
        else:
            registry.unregister(name)
    except Exception as exc:  # noqa: BLE001 - the host logs it; requests here then fail with 400
        error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    return ("region_done", n, error)
