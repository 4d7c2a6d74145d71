"""A call's headers: HPACK in (decoded once per distinct block), gRPC's meaning of them,
and the few header blocks the server sends (RFC 7541, gRPC over HTTP/2).

A client such as grpc's own sends the same header block bytes for call after call once
its headers sit in the dynamic table, so a block that left the table as it was is
decoded once and looked up after: HPACK's pure-Python decoding cost more than the rest
of a small call. The time blocks take to decode counts against the connection's budget
of decoding a second (guard.py), and a decoded list must be well formed (RFC 9113
section 8.2): lowercase names, pseudo-headers first and known, no connection headers.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import hpack

from gateway.protocols.grpc.h2.frames import COMPRESSION_ERROR, ENHANCE_YOUR_CALM, H2Error

# Bytes of decoded headers a call may carry (as RFC 7541 counts them): twice grpc's own
# servers' default; past it the call ends with RESOURCE_EXHAUSTED.
MAX_HEADER_LIST = 16 * 1024
# ... and what any block may decode to, or be: past it the connection ends (HPACK's table
# cannot be kept in step with a block given up half-way).
MAX_DECODED_LIST = 64 * 1024
MAX_HEADER_BLOCK = MAX_DECODED_LIST + 1024
_RESOURCE_EXHAUSTED = 8
_PSEUDO = frozenset((b":method", b":scheme", b":path", b":authority"))
# Headers of HTTP/1.1 connections, which HTTP/2 forbids (RFC 9113 section 8.2.2).
_CONNECTION_HEADERS = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)


class MalformedHeaders(Exception):
    """A header list HTTP/2 calls malformed: the stream is reset (PROTOCOL_ERROR)."""


class BadCall(Exception):
    """Headers that do not make a gRPC call; the call ends with `status` (a gRPC status
    code's number) and the message."""

    def __init__(self, status: int, message: str, http_status: int = 200) -> None:
        super().__init__(message)
        self.status = status
        self.http_status = http_status


_CACHED_BLOCKS = 256
_CACHED_BLOCK_BYTES = 512  # a call's repeated block is tens of bytes; larger ones are not kept
# Blocks decoded on an empty table that left it empty, for every connection: they mean
# the same on any connection whose table is still empty (a client that never indexes, or
# any client's first call). A thousand new connections would otherwise each decode
# their first block in full, at once (some 90 ms of falling behind, measured). Not one
# with a never-indexed field (a credential, usually): whether another connection sent
# the same block must not show in how fast a block decodes.
_FRESH: dict[bytes, list[tuple[bytes, bytes]]] = {}


class _CountingTable(hpack.table.HeaderTable):
    """HPACK's dynamic table, counting its changes: a block decoded while the count
    stayed put means the same thing every time it comes again."""

    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.changes += 1
        super().add(name, value)

    def _shrink(self) -> None:
        self.changes += 1
        super()._shrink()


class HeaderDecoder:
    """One connection's HPACK decoder, with decoded blocks kept by (table state, bytes)."""

    def __init__(self, spend: Callable[[float], None] = lambda seconds: None) -> None:
        """`spend(seconds)`: counts the time a block took to decode (raises to refuse
        the connection more): what a block costs is not its size, as a Huffman-coded
        byte takes some 30 times a literal one, and a byte naming a table entry can
        decode to 4 KB."""
        self._spend = spend
        self._decoder = hpack.Decoder(max_header_list_size=MAX_DECODED_LIST)
        self._table = _CountingTable()
        self._decoder.header_table = self._table
        self._blocks: dict[tuple[int, bytes], list[tuple[bytes, bytes]]] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        key = (self._table.changes, block)
        found = self._blocks.get(key) or (_FRESH.get(block) if key[0] == 0 else None)
        if found is not None:
            return found
        # A block that opens with a table size update (001xxxxx) resizes or clears the
        # table, which `add` and `_shrink` do not always see: it counts as a change, and
        # is never kept (the update must not be skipped next time).
        resizes = bool(block) and block[0] & 0xE0 == 0x20
        if resizes:
            self._table.changes += 1
        before = self._table.changes
        # This thread's CPU time: a wait for the GIL (a model's thread) is not the block's.
        started = time.thread_time()
        try:
            decoded = self._decoder.decode(block, raw=True)
            headers = [(bytes(n), bytes(v)) for n, v in decoded]
        except hpack.OversizedHeaderListError:
            message = f"a header list past {MAX_DECODED_LIST} bytes"
            raise H2Error(ENHANCE_YOUR_CALM, message) from None
        except hpack.HPACKError as exc:
            raise H2Error(COMPRESSION_ERROR, f"a header block did not decode: {exc}") from None
        finally:
            self._spend(time.thread_time() - started)
        # Checked after decoding: the table has taken the block's changes.
        if _check_fields(headers) > MAX_HEADER_LIST:
            message = f"the call's headers are past {MAX_HEADER_LIST} bytes"
            raise BadCall(_RESOURCE_EXHAUSTED, message)
        if self._table.changes == before and not resizes and len(block) <= _CACHED_BLOCK_BYTES:
            if len(self._blocks) >= _CACHED_BLOCKS:
                self._blocks.clear()  # a client whose blocks all differ gains nothing
            self._blocks[key] = headers
            if before == 0 and all(field.indexable for field in decoded):
                if len(_FRESH) >= _CACHED_BLOCKS:
                    _FRESH.clear()
                _FRESH[block] = headers
        return headers


def _check_fields(headers: list[tuple[bytes, bytes]]) -> int:
    """The list's size (RFC 7541 section 4.1); MalformedHeaders where it is malformed."""
    regular, size = False, 0
    for name, value in headers:
        size += len(name) + len(value) + 32
        if name.startswith(b":"):
            if regular or name not in _PSEUDO:
                raise MalformedHeaders(f"pseudo-header {name!r} misplaced or unknown")
        else:
            regular = True
            if name != name.lower() or not name:
                raise MalformedHeaders(f"header name {name!r} is not lowercase")
            if name in _CONNECTION_HEADERS or (name == b"te" and value != b"trailers"):
                raise MalformedHeaders(f"connection-specific header {name!r}")
    return size


@dataclass(slots=True)
class CallHeaders:
    """What a call's headers say."""

    path: str
    timeout_s: float | None  # grpc-timeout
    encoding: str  # grpc-encoding of the request's messages ("identity" if none)
    metadata: tuple[tuple[str, str | bytes], ...]  # the rest, as grpc.aio gives it


_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
# Headers that are the call's, not its metadata (grpc.aio leaves them out too).
_NOT_METADATA = frozenset(
    (b"te", b"content-type", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding")
)


def call_headers(headers: list[tuple[bytes, bytes]]) -> CallHeaders:
    """A call's headers read, or BadCall saying what is wrong."""
    found = dict(headers)
    if found.get(b":method") != b"POST":
        raise BadCall(12, "gRPC calls are POST requests", http_status=405)  # UNIMPLEMENTED
    content_type = found.get(b"content-type", b"")
    if not content_type.startswith(b"application/grpc"):
        raise BadCall(2, f"content-type must be application/grpc, not {content_type!r}", 415)
    path = found.get(b":path")
    if not path:
        raise BadCall(12, "the call names no method (:path)")
    timeout = found.get(b"grpc-timeout")
    return CallHeaders(
        path=path.decode("latin-1"),
        timeout_s=_timeout(timeout) if timeout is not None else None,
        encoding=found.get(b"grpc-encoding", b"identity").decode("latin-1"),
        metadata=tuple(_metadata(headers)),
    )


def _timeout(value: bytes) -> float:
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit() or value[-1:] not in _TIMEOUT_UNITS:
        raise BadCall(13, f"grpc-timeout {value!r} is not a count (up to 8 digits) and a unit")
    return int(value[:-1]) * _TIMEOUT_UNITS[value[-1:]]


def _metadata(headers: list[tuple[bytes, bytes]]):
    for name, value in headers:
        if name.startswith(b":") or name in _NOT_METADATA:
            continue
        key = name.decode("latin-1")
        if key.endswith("-bin"):
            try:  # senders may leave the padding out
                yield key, base64.b64decode(value + b"=" * (-len(value) % 4), validate=True)
            except binascii.Error:
                raise BadCall(13, f"metadata {key} is not base64") from None
        else:
            yield key, value.decode("latin-1")


# ---- what the server sends (no dynamic table, no Huffman: the blocks never change) ----


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal header field without indexing, with a new name."""
    return b"\x00" + _length(name) + name + _length(value) + value


def _length(data: bytes) -> bytes:
    size = len(data)
    if size < 127:
        return bytes([size])
    size -= 127
    out = bytearray([127])
    while size >= 128:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


_STATUS_200 = b"\x88"  # the static table's ":status: 200"
RESPONSE_HEADERS = _STATUS_200 + _literal(b"content-type", b"application/grpc")
OK_TRAILERS = _literal(b"grpc-status", b"0")
_UNSAFE = re.compile(rb"[^\x20-\x24\x26-\x7e]")  # grpc-message percent-encodes these
MAX_MESSAGE_BYTES = 4096  # of grpc-message, encoded: clients take 16 KiB header frames


def trailers(status: int, message: str, metadata: tuple = ()) -> bytes:
    """The trailers of a call that ended with gRPC `status`."""
    if status == 0 and not message and not metadata:
        return OK_TRAILERS
    block = _literal(b"grpc-status", str(status).encode())
    if message:
        encoded = _UNSAFE.sub(lambda m: b"%%%02X" % m.group()[0], message.encode())
        if len(encoded) > MAX_MESSAGE_BYTES:  # cut whole escapes only
            cut = encoded.rfind(b"%", MAX_MESSAGE_BYTES - 2, MAX_MESSAGE_BYTES)
            encoded = encoded[: cut if cut >= 0 else MAX_MESSAGE_BYTES] + b"..."
        block += _literal(b"grpc-message", encoded)
    for key, value in metadata:
        name = key.lower().encode("latin-1")
        if name.endswith(b"-bin"):
            raw = value if isinstance(value, bytes) else str(value).encode()
            block += _literal(name, base64.b64encode(raw).rstrip(b"="))
        else:
            block += _literal(name, str(value).encode("latin-1", "replace"))
    return block


def error_response(http_status: int, status: int, message: str, metadata: tuple = ()) -> bytes:
    """A trailers-only answer: the whole response in one header block."""
    code = str(http_status).encode()
    head = _STATUS_200 if http_status == 200 else _literal(b":status", code)
    block = trailers(status, message, metadata)
    return head + _literal(b"content-type", b"application/grpc") + block
