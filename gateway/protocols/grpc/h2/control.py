"""The frames of one HTTP/2 connection that are not a call's headers or data: SETTINGS,
PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY and types we do not know; each held to
its budget (guard.py) and to RFC 9113's rules on which stream it may name."""

from __future__ import annotations

import asyncio
import time

from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.guard import FloodGuard

RESETS_REMEMBERED = 1024  # streams we reset whose client's late frames are ignored
DEADLINE_SLACK_S = 0.05  # a reset this close to the call's deadline is the client's timer
MIN_LIFE_S = 0.1  # ... of a call that lived this long: a short deadline is no excuse


def _at_its_deadline(context) -> bool:
    """Whether a reset call had lived a while and reached its own deadline (the client's
    timer racing ours), which is no sign of a flood."""
    if context.deadline is None:
        return False
    now = time.monotonic()
    lived = now - (context.deadline - context.headers.timeout_s)
    return now >= context.deadline - DEADLINE_SLACK_S and lived >= MIN_LIFE_S


class ControlFrames:
    """Connection's part for control frames; the connection gives `transport`, `writer`,
    `streams`, `last_stream`, `resets`, `settings_acked`, `earned_seen`, `drop`,
    `go_away` and `guard`."""

    guard: FloodGuard
    resets: dict[int, None]  # insertion-ordered: the oldest is dropped first
    settings_acked: bool
    earned_seen: int  # the writer's `earned` already refunded

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == f.SETTINGS:
            if stream_id != 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "SETTINGS on a stream")
            if flags & f.ACK:
                if payload:
                    raise f.H2Error(f.FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
                self._settings_acked()
                return
            self.guard.spend("settings", self._now())
            values = f.parse_settings(payload)
            self.transport.write(f.frame(f.SETTINGS, f.ACK, 0))
            self.writer.configure(values, self.streams.values())
        elif kind == f.WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == f.PING:
            if stream_id != 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "PING on a stream")
            if len(payload) != 8:
                raise f.H2Error(f.FRAME_SIZE_ERROR, "a PING payload must be 8 bytes")
            if flags & f.ACK:  # we send none: an answer to nothing
                self.guard.spend("idle", self._now())
            else:
                self.guard.spend("pings", self._now())
                self.transport.write(f.frame(f.PING, f.ACK, 0, payload))
        elif kind == f.RST_STREAM:
            f.parse_u32(payload, "RST_STREAM")
            self._check_not_idle(stream_id, "RST_STREAM")
            stream = self.streams.get(stream_id)
            if stream is None:  # closed already: nothing to do, within a budget
                self.guard.spend("idle", self._now())
            else:  # the client gave up on the call
                if not _at_its_deadline(stream.context):
                    self.count_reset()  # a call reset at its deadline is no flood
                else:
                    self.guard.spend("idle", self._now())
                self.drop(stream)
        elif kind == f.GOAWAY:
            if stream_id != 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "GOAWAY on a stream")
            self.go_away()
        elif kind == f.PUSH_PROMISE:
            raise f.H2Error(f.PROTOCOL_ERROR, "a client may not push")
        elif kind == f.PRIORITY:
            if stream_id == 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "PRIORITY on stream 0")
            stream = self.streams.get(stream_id)
            if len(payload) != 5 and stream is not None:  # (no RST_STREAM for idle ones)
                self.fail_stream(stream, f.FRAME_SIZE_ERROR)
            self.guard.spend("idle", self._now())  # advice we do not take
        else:  # a type we do not know: ignored, as the protocol says, within a budget
            self.guard.spend("idle", self._now())

    def _settings_acked(self) -> None:
        """The client took our SETTINGS (one frame, at the start): a second ACK is idle."""
        if self.settings_acked:
            self.guard.spend("idle", self._now())
        self.settings_acked = True

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        increment = f.parse_u32(payload, "WINDOW_UPDATE")
        earned = self.writer.earned - self.earned_seen
        if earned:  # what we sent since earns the client its WINDOW_UPDATEs
            self.guard.refund("window_updates", earned)
            self.earned_seen += earned
        self.guard.spend("window_updates", self._now())
        if stream_id == 0:
            self.writer.credit(0, increment, None)
            return
        self._check_not_idle(stream_id, "WINDOW_UPDATE")
        stream = self.streams.get(stream_id)
        if stream is None:
            return  # a closed stream's late credit
        if increment == 0:
            self.fail_stream(stream, f.PROTOCOL_ERROR)
        elif stream.send_window + increment > f.MAX_WINDOW:
            self.fail_stream(stream, f.FLOW_CONTROL_ERROR)
        else:
            self.writer.credit(stream_id, increment, stream)

    def _check_not_idle(self, stream_id: int, what: str) -> None:
        """Frames that need a stream the client has opened (RFC 9113 section 5.1)."""
        if stream_id == 0:
            raise f.H2Error(f.PROTOCOL_ERROR, f"{what} on stream 0")
        if stream_id > self.last_stream:
            raise f.H2Error(f.PROTOCOL_ERROR, f"{what} on stream {stream_id}, never opened")

    # ---- streams we end with RST_STREAM ----------------------------------------------

    def count_reset(self) -> None:
        self.guard.spend("resets", self._now())

    def reset(self, stream_id: int, code: int, before: bytes = b"") -> None:
        """RST_STREAM `code` (after `before`, in one send); frames the client had already
        sent on it are then ignored."""
        self.transport.write(before + f.rst_stream(stream_id, code))
        resets = self.resets
        resets[stream_id] = None
        if len(resets) > RESETS_REMEMBERED:
            del resets[next(iter(resets))]

    def fail_stream(self, stream, code: int) -> None:
        """A stream error (RFC 9113 section 5.4.2): reset, forgotten, its handler stopped."""
        self.reset(stream.id, code)
        self.drop(stream)
