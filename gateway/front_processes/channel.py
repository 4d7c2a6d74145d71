"""One end of a front's channel on an event loop: messages in through a callback, out
through a bounded outbox.

Reads take every message waiting at once (one wake-up for many), and sends go straight
to the socket until it is full; then they queue, up to MAX_OUTBOX_BYTES and
MAX_OUTBOX_ARENAS, and the loop sends them when it can. A channel past that bound, or
whose other end is gone, is closed.
"""

from __future__ import annotations

import array
import asyncio
import collections
import logging
import os
import socket
from collections.abc import Callable

from gateway.front_processes import wire
from workers.arena import Arena

log = logging.getLogger(__name__)

# Queued behind a full socket, past these the peer is taken for stuck and the channel
# closes: bytes of messages, and arenas (each holds a descriptor and a memfd).
MAX_OUTBOX_BYTES = 64 * 1024 * 1024
MAX_OUTBOX_ARENAS = 64

OnMessage = Callable[[tuple, Arena | None], None]


class Channel:
    def __init__(
        self, sock: socket.socket, on_message: OnMessage, on_close: Callable[[], None]
    ) -> None:
        self.sock = sock
        self.on_message = on_message
        self.on_close = on_close
        self.closed = False
        # One receive buffer, reused: a new one of MAX_MESSAGE_BYTES per message costs
        # tens of microseconds to allocate.
        self._buffer = bytearray(wire.MAX_MESSAGE_BYTES)
        # A datagram must fit the socket's send buffer (the kernel's wmem_max may have
        # granted less than asked for).
        sndbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.limit = min(wire.MAX_MESSAGE_BYTES, sndbuf - 4096)
        self._outbox: collections.deque[tuple[bytes, int | None]] = collections.deque()
        self._outbox_bytes = 0
        self._outbox_arenas = 0
        self._pending: list[bytes] = []  # this turn's messages, marshal'd
        self._pending_bytes = 0
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)

    def send(self, message: tuple, arena: Arena | None = None) -> None:
        """Send `message` (with `arena`'s descriptor, which is closed here once sent).
        Messages without an arena sent in one turn of the event loop leave together, as
        one list, at the end of the turn: one send and one wake-up of the other side for
        many requests or answers. wire.MessageTooLarge when it cannot fit the channel."""
        if self.closed:
            if arena is not None:
                arena.close()
            return
        try:
            blob = wire.encode(message, self.limit)
        except Exception:  # too large, or not marshal-able: the arena goes with it
            if arena is not None:
                arena.close()
            raise
        if arena is not None:
            self.flush()  # in order
            self._write(blob, arena)
            return
        if self._pending_bytes + len(blob) > self.limit - 64:
            self.flush()
        self._pending.append(blob)
        self._pending_bytes += len(blob)
        if len(self._pending) == 1:
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send the messages gathered in this turn now."""
        pending = self._pending
        if not pending or self.closed:
            return
        self._pending, self._pending_bytes = [], 0
        self._write(pending[0] if len(pending) == 1 else wire.join(pending), None)

    def _write(self, data: bytes, arena: Arena | None) -> None:
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
        arenas = self._outbox_arenas + (arena is not None)
        if self._outbox_bytes + len(data) > MAX_OUTBOX_BYTES or arenas > MAX_OUTBOX_ARENAS:
            log.error(
                "a front channel has %d bytes and %d arenas queued for a peer that does not "
                "read them; closing it", self._outbox_bytes, self._outbox_arenas,
            )  # fmt: skip
            if arena is not None:
                arena.close()
            self.close()
            return
        if arena is not None:  # the descriptor must outlive the arena's close
            fd = arena.fd
            arena.fd = -1
            arena.close()
        self._outbox.append((data, fd))
        self._outbox_bytes += len(data)
        self._outbox_arenas = arenas

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
            self._outbox_bytes -= len(data)
            if fd is not None:
                os.close(fd)
                self._outbox_arenas -= 1
        self._loop.remove_writer(self.sock.fileno())

    def _readable(self) -> None:
        while not self.closed:
            try:
                message, arena = wire.receive(self.sock, self._buffer)
            except BlockingIOError:
                return
            except (EOFError, OSError, ValueError) as exc:
                if not isinstance(exc, EOFError):
                    log.error("front channel failed: %s", exc)
                self.close()
                return
            for one in message if type(message) is list else (message,):
                try:
                    self.on_message(one, arena)
                except Exception:  # one bad message must not end the channel
                    log.exception("front channel message %r failed", one[:2])

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
        self._pending.clear()
        self.sock.close()
        self.on_close()
