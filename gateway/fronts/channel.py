"""One end of a front's channel on an event loop: messages in through a callback, out
through a bounded outbox.

Reads take every message waiting at once (one wake-up for many), and sends go straight
to the socket until it is full; then they queue, up to MAX_OUTBOX, and the loop sends
them when it can. A channel past that bound, or whose other end is gone, is closed.
"""

from __future__ import annotations

import array
import asyncio
import collections
import logging
import os
import socket
from collections.abc import Callable

from gateway.fronts import wire
from workers.arena import Arena

log = logging.getLogger(__name__)

MAX_OUTBOX = 65536  # messages queued behind a full socket before the channel gives up

OnMessage = Callable[[tuple, Arena | None], None]


class Channel:
    def __init__(
        self, sock: socket.socket, on_message: OnMessage, on_close: Callable[[], None]
    ) -> None:
        self.sock = sock
        self.on_message = on_message
        self.on_close = on_close
        self.closed = False
        self._outbox: collections.deque[tuple[bytes, int | None]] = collections.deque()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)

    def send(self, message: tuple, arena: Arena | None = None) -> None:
        """Queue `message` (with `arena`'s descriptor, which is closed here once sent)."""
        if self.closed:
            if arena is not None:
                arena.close()
            return
        data = wire.encode(message)
        fd = arena.fd if arena is not None else None
        if self._outbox:
            self._queue(data, fd, arena)
            return
        try:
            self._send(data, fd)
        except BlockingIOError:
            self._queue(data, fd, arena)
            self._loop.add_writer(self.sock.fileno(), self._writable)
            return
        except OSError:
            self.close()
        if arena is not None:
            arena.close()

    def _queue(self, data: bytes, fd: int | None, arena: Arena | None) -> None:
        if len(self._outbox) >= MAX_OUTBOX:
            log.error("a front channel has %d messages queued; closing it", MAX_OUTBOX)
            self.close()
            return
        if arena is not None:  # the descriptor must outlive the arena's close
            fd = arena.fd
            arena.fd = -1
            arena.close()
        self._outbox.append((data, fd))

    def _send(self, data: bytes, fd: int | None) -> None:
        if fd is None:
            self.sock.send(data)
        else:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            self.sock.sendmsg([data], rights)

    def _writable(self) -> None:
        while self._outbox:
            data, fd = self._outbox[0]
            try:
                self._send(data, fd)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            self._outbox.popleft()
            if fd is not None:
                os.close(fd)
        self._loop.remove_writer(self.sock.fileno())

    def _readable(self) -> None:
        while not self.closed:
            try:
                message, arena = wire.receive(self.sock)
            except BlockingIOError:
                return
            except (EOFError, OSError, ValueError) as exc:
                if not isinstance(exc, EOFError):
                    log.error("front channel failed: %s", exc)
                self.close()
                return
            try:
                self.on_message(message, arena)
            except Exception:  # one bad message must not end the channel
                log.exception("front channel message %r failed", message[:2])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self.sock.fileno())
        self._loop.remove_writer(self.sock.fileno())
        for _, fd in self._outbox:
            if fd is not None:
                os.close(fd)
        self._outbox.clear()
        self.sock.close()
        self.on_close()
