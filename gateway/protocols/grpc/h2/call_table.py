"""The calls of one HTTP/2 connection: started as tasks (running.py runs them), ended
once (a response, or trailers with a status), and forgotten."""

from __future__ import annotations

import asyncio
import logging

from gateway.operation import heap
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.calls import CANCELLED, DEADLINE_EXCEEDED, CallError, Payload
from gateway.protocols.grpc.h2.headers import trailers
from gateway.protocols.grpc.h2.running import run_call
from gateway.protocols.grpc.h2.stream import Stream

log = logging.getLogger(__name__)


class CallTable:
    """Connection's part that owns its calls; the connection gives `streams`,
    `transport`, `writer`, `held`, `reset` and `_became_idle`."""

    def cancel_calls(self, message: str) -> None:
        """End every call in flight with CANCELLED (the server is stopping)."""
        for stream in list(self.streams.values()):
            self.end_call(stream, CANCELLED, message)
            if stream.task is not None:
                stream.task.cancel()

    def _start(self, stream: Stream) -> None:
        stream.task = asyncio.get_running_loop().create_task(run_call(self, stream))
        stream.task.add_done_callback(lambda task, s=stream: self._after(s, task))

    def _after(self, stream: Stream, task: asyncio.Task) -> None:
        """A call's task is over; a call it left unanswered (cancelled before it began, or
        a fault of ours) is answered now."""
        if not task.cancelled() and task.exception() is not None:
            log.error("gRPC call %s failed", stream.context.headers.path,
                      exc_info=task.exception())  # fmt: skip
        if stream.id in self.streams and not stream.ended:
            if stream.expired:
                self.end_call(stream, DEADLINE_EXCEEDED, "Deadline Exceeded")
            else:
                self.end_call(stream, CANCELLED, "the call ended without an answer")

    def _expire(self, stream: Stream) -> None:
        stream.expired = True
        if stream.task is not None:
            stream.task.cancel()
        else:
            self.end_call(stream, DEADLINE_EXCEEDED, "Deadline Exceeded")

    def answer(self, stream: Stream, payload: Payload, trailer_block: bytes) -> None:
        """A unary call's response message and trailers."""
        if stream.id not in self.streams or stream.ended:
            return
        stream.ended = True
        self.writer.answer(stream, payload, trailer_block)
        self._done(stream)

    def end_call(self, stream: Stream, status: int, message: str, metadata=()) -> None:
        """The call ends with `status`: trailers (after any held data), then forgotten."""
        if stream.id not in self.streams or stream.ended:
            return
        stream.ended = True
        self.writer.finish(stream, trailers(status, message, metadata))
        self._done(stream)

    def fail_call(self, stream: Stream, error: CallError) -> None:
        """End a call for what its client sent, and stop its handler."""
        self.end_call(stream, error.status, error.message)
        if stream.task is not None:
            stream.task.cancel()

    def _done(self, stream: Stream) -> None:
        # Its answer is given: what it holds of the client's messages goes now, even if
        # the answer waits for the client's credit.
        self._let_go(stream)
        if not stream.outbox:  # else the writer calls `_sent` once the credit comes
            self._sent(stream)

    def _sent(self, stream: Stream) -> None:
        """`stream`'s trailers have gone: if the client is still sending, RST_STREAM
        NO_ERROR tells it to stop; the call is forgotten."""
        if not stream.remote_closed:
            self.reset(stream.id, f.NO_ERROR)
        self.forget(stream)

    def forget(self, stream: Stream) -> None:
        if self.streams.pop(stream.id, None) is None:
            return
        if stream.unary:
            self.server.open_calls -= 1
        if stream.timer is not None:
            stream.timer.cancel()
        if stream.arrival is not None:
            stream.arrival.cancel()
        self._let_go(stream)
        stream.wake()
        stream.release()
        self.writer.forget(stream)
        if not self.streams and self.transport is not None and not self.transport.is_closing():
            self._became_idle()

    def drop(self, stream: Stream) -> None:
        """Forget a call unanswered and stop its handler (the client reset it, or its
        connection is gone)."""
        self.forget(stream)
        if stream.task is not None:
            stream.task.cancel()

    def _let_go(self, stream: Stream) -> None:
        """The client's messages `stream` holds go, and leave the connection's count."""
        stream.messages.clear()
        self.held -= stream.held
        if stream.held:  # a call that ended with its client's bytes untaken
            heap.released(stream.held)
        stream.held = 0
