"""A transport whose writes within one turn of the event loop leave in one send.

Under load one turn answers many calls of a connection, and a send per answer cost
more than the rest of the answer (about a quarter of a `simple` call's server time at
concurrency 64, profiled). The bytes keep their order, and leave at the latest when
the loop next turns, or at once when the transport closes. A connection with at most
one call in flight has nothing to gather: its bytes leave at once (waiting for the
turn cost a lone client 10% of its calls a second).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class CoalescingTransport:
    __slots__ = ("_transport", "_loop", "_busy", "_pending", "_scheduled", "_ended", "_views")

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        busy: Callable[[], bool],
    ) -> None:
        """`busy`: whether the connection has more than one call in flight."""
        self._transport = transport
        self._loop = loop
        self._busy = busy
        self._pending: list[bytes | memoryview] = []
        self._views = False  # pending holds a large piece: sent as it is, never joined
        self._scheduled = False
        self._ended = False  # write_eof: nothing more may be written

    def write(self, data: bytes) -> None:
        if self._ended:
            return
        if not self._pending and not self._busy():
            if not self._transport.is_closing():
                self._transport.write(data)
            return
        self._pending.append(data)
        self._schedule()

    def writelines(self, pieces: list[bytes | memoryview]) -> None:
        """Send pieces in order without joining them: the socket takes them as they are
        (a large tensor's bytes are not copied on their way out)."""
        if self._ended:
            return
        if not self._pending and not self._busy():
            if not self._transport.is_closing():
                self._transport.writelines(pieces)
            return
        self._pending.extend(pieces)
        self._views = True
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        views, self._views = self._views, False
        if self._transport.is_closing():
            return
        if views:
            self._transport.writelines(pending)
        else:
            self._transport.write(b"".join(pending) if len(pending) > 1 else pending[0])

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self.flush()
        self._ended = True
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._ended or self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)
