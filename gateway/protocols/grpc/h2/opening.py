"""A call's header block: decoded (whatever follows, so that HPACK's table stays in
step), then a new call opened, refused early (H2Server.refuse_early) or refused for its
headers, or the client's trailers; and the CONTINUATION frames a block may come in."""

from __future__ import annotations

import asyncio
import logging

from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.calls import UNIMPLEMENTED, CallError, Context, Messages
from gateway.protocols.grpc.h2.headers import (
    MAX_HEADER_BLOCK,
    BadCall,
    MalformedHeaders,
    call_headers,
    error_response,
)
from gateway.protocols.grpc.h2.running import send_message
from gateway.protocols.grpc.h2.stream import Stream

log = logging.getLogger(__name__)


class CallOpening:
    """Connection's part for header blocks; the connection gives `server`, `transport`,
    `writer`, `decoder`, `guard`, `streams`, `last_stream`, `resets`, `closing`, `peer`,
    `idle_since`, `_idle`, `_continued`, `_now`, `_data`, `_start`, `_expire`,
    `_too_slow`, `reset`, `count_reset` and `fail_stream`."""

    def _refused(self, stream_id: int, flags: int, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the call is refused early (H2Server.refuse_early), and answered so."""
        for name, value in headers:
            if name == b":path":
                refusal = self.server.refusals.get(value)
                if refusal is None or not refusal[0]():
                    return False
                self._answer_at_once(stream_id, flags, refusal[1])
                return True
        return False

    def _answer_at_once(self, stream_id: int, flags: int, block: bytes) -> None:
        """A trailers-only answer to a call that never opened; a message it is still
        sending is not wanted."""
        answer = f.header_frames(stream_id, block, True, self.writer.max_frame)
        if flags & f.END_STREAM:
            self.transport.write(answer)
        else:  # one send for both: under overload, a refusal's sends are most of its cost
            self.reset(stream_id, f.NO_ERROR, answer)

    def _header_time(self, seconds: float) -> None:
        self.guard.spend("header_decoding_ms", self._now(), seconds * 1000.0)

    def _check_block(self, size: int) -> None:
        if size > MAX_HEADER_BLOCK:
            raise f.H2Error(f.ENHANCE_YOUR_CALM, f"a header block past {MAX_HEADER_BLOCK} bytes")

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is None or self._continued[0] != stream_id:
            raise f.H2Error(f.PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        _, first_flags, block, count = self._continued
        if count >= self.guard.limits.continuations:
            limit = self.guard.limits.continuations
            raise f.H2Error(f.ENHANCE_YOUR_CALM, f"a header block in more than {limit} frames")
        if not payload and not flags & f.END_HEADERS:
            self.guard.spend("empty", self._now())
        block += payload
        self._check_block(len(block))
        if flags & f.END_HEADERS:
            self._continued = None
            self._headers(stream_id, first_flags, bytes(block))
        else:
            self._continued = (stream_id, first_flags, block, count + 1)

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        # Always decoded, whatever follows: HPACK's table must stay in step.
        too_large: BadCall | None = None
        try:
            headers = self.decoder.decode(block)
        except MalformedHeaders as exc:
            if stream_id in self.streams:
                self.fail_stream(self.streams[stream_id], f.PROTOCOL_ERROR)
            elif stream_id > self.last_stream and stream_id % 2:
                self.last_stream = stream_id
                self.reset(stream_id, f.PROTOCOL_ERROR)
                self.count_reset()
            elif stream_id not in self.resets:
                message = f"malformed headers on stream {stream_id}: {exc}"
                raise f.H2Error(f.PROTOCOL_ERROR, message) from None
            log.debug("gRPC call from %s with malformed headers: %s", self.peer, exc)
            return
        except BadCall as exc:  # decoded, but too large for a call
            headers, too_large = [], exc
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client end its messages
            if too_large is not None:
                self.fail_call(stream, CallError(too_large.status, str(too_large)))
            elif not flags & f.END_STREAM:
                self.fail_stream(stream, f.PROTOCOL_ERROR)  # a second header block
            else:
                self._data(f.END_STREAM, stream_id, b"")
            return
        if stream_id % 2 == 0:
            raise f.H2Error(f.PROTOCOL_ERROR, f"a client stream with an even id, {stream_id}")
        if stream_id <= self.last_stream:
            if stream_id in self.resets:
                return  # trailers of a call we reset: ignored
            raise f.H2Error(
                f.PROTOCOL_ERROR,
                f"stream {stream_id} is not above the last one opened ({self.last_stream})",
            )
        self.last_stream = stream_id
        if self.idle_since is not None:  # a call came, even one refused: not idle
            self.idle_since = self._now()
        if self.closing or len(self.streams) >= self.server.max_streams:
            self.reset(stream_id, f.REFUSED_STREAM)
            self.count_reset()
            return
        if self.server.refusals and self._refused(stream_id, flags, headers):
            return
        try:
            if too_large is not None:
                raise too_large
            call = call_headers(headers)
            handler = self.server.methods.get(call.path)
            if handler is None:
                raise BadCall(UNIMPLEMENTED, f"Method not found: {call.path}")
            single = not handler.request_streaming
            messages = Messages(call.encoding, self.server.max_message_bytes, single)
        except (BadCall, CallError) as exc:
            block = error_response(getattr(exc, "http_status", 200), exc.status, str(exc))
            self._answer_at_once(stream_id, flags, block)
            return
        context = Context(call, None, self.peer)
        stream = Stream(stream_id, handler, context, messages, self.writer.initial_window)
        stream.window = self.server.receive_window
        if handler.response_streaming:
            context.write = lambda message, s=stream: send_message(self, s, message)
        self.streams[stream_id] = stream
        if stream.unary:
            self.server.open_calls += 1
        self.idle_since = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        loop = asyncio.get_running_loop()
        if call.timeout_s is not None:
            stream.timer = loop.call_later(call.timeout_s, self._expire, stream)
        if flags & f.END_STREAM:
            stream.remote_closed = True
        elif not handler.request_streaming:
            stream.arrival = loop.call_later(self.server.read_timeout_s, self._too_slow, stream)
        if handler.request_streaming or stream.remote_closed:
            self._start(stream)
