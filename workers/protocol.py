"""What crosses the socket between the gateway and a worker, and how tensors sit in an arena.

Messages are small marshal'd tuples on a SOCK_SEQPACKET socketpair (one send is one
message, so no framing); a message may carry file descriptors (a new arena). Tensors
never cross the socket: a descriptor (name, dtype, shape, offset, nbytes) points into
an arena. BYTES tensors sit in the arena in the V2 wire form (4-byte little-endian
length before each element), every other datatype as its raw little-endian array.

Requests, gateway -> worker:
    ("load", platform, artifact, config bytes, device kind, device index)
    ("run", input descriptors, output names, output start, output limit, input arena size,
     requests)
        the input arena's descriptor travels with the first run that uses a new arena;
        `requests` is None, or for a per-request backend (backends.python) one
        (rows, output names, parameters, request id, correlation id, stream token,
        cancel token) per merged request (backends/per_request.py's RequestInfo)
    ("unload",)
Replies, worker -> gateway:
    ("loaded", inputs, outputs, allowed batch sizes or None, memory bytes, output arena size,
     completed config bytes or None)
        (like the load, it may be large: many tensors)
        with the output arena's descriptor; the config when the backend completed it
    ("ran", output descriptors, run ns, output arena size, failures)
        the output arena's descriptor travels with the first reply that uses a new arena;
        failures: (request index, error class name, message) of per-request runs
    ("failed", error class name, message)
    ("unloaded",)
"""

from __future__ import annotations

import array
import marshal
import os
import socket
from typing import Any

import numpy as np

from accel_base.datatypes import deserialize_bytes, element_count, serialize_bytes
from workers.arena import aligned

# The load message carries the model config, which may be large; every later message is
# small. Receiving allocates a buffer of the size asked for, which costs tens of
# microseconds at 1 MiB, so only the worker's first receive asks for that much.
MAX_MESSAGE_BYTES = 1 << 20
RUN_MESSAGE_BYTES = 1 << 16
BYTES = "BYTES"  # the dtype field of a BYTES tensor's descriptor

_FD_BYTES = array.array("i").itemsize
_FDS_SPACE = socket.CMSG_SPACE(4 * _FD_BYTES)  # a message carries one arena, room for four
# A plain int: the flag enums' operators run Python code, microseconds on every batch.
_TRUNCATED = int(socket.MSG_TRUNC) | int(socket.MSG_CTRUNC)

Descriptor = tuple[str, str, tuple[int, ...], int, int]  # name, dtype, shape, offset, nbytes


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """The (gateway end, worker end) of a new instance's socket."""
    ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for end in ends:
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_MESSAGE_BYTES)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2 * MAX_MESSAGE_BYTES)
    return ends  # type: ignore[return-value]


def send(sock: socket.socket, message: tuple, fds: tuple[int, ...] = ()) -> None:
    data = marshal.dumps(message)
    limit = MAX_MESSAGE_BYTES if message[0] in ("load", "loaded") else RUN_MESSAGE_BYTES
    if len(data) > limit:
        raise ValueError(f"a {message[0]!r} message of {len(data)} bytes is over {limit}")
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        sock.sendmsg([data], ancillary)
    else:
        sock.send(data)


def receive(
    sock: socket.socket, limit: int = RUN_MESSAGE_BYTES, buffer: bytearray | None = None
) -> tuple[tuple, list[int]]:
    """The next message and the descriptors it carried; EOFError when the other side is
    gone. With `buffer` (reused from call to call), the message is read into it, up to its
    length: no new buffer of `limit` bytes for each message."""
    # recvmsg itself rather than socket.recv_fds, whose Python wrapper costs microseconds
    # on every batch.
    data: bytes | memoryview
    if buffer is None:
        data, ancillary, flags, _ = sock.recvmsg(limit, _FDS_SPACE)
    else:
        size, ancillary, flags, _ = sock.recvmsg_into([buffer], _FDS_SPACE)
        data = memoryview(buffer)[:size]
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", payload[: len(payload) - len(payload) % _FD_BYTES])
    if not data or flags & _TRUNCATED:
        for fd in fds:
            os.close(fd)
        if not data:
            raise EOFError("the other end of the worker socket closed")
        raise ValueError("a worker message was truncated")
    for fd in fds:  # received descriptors are inheritable; no child of ours needs them
        os.set_inheritable(fd, False)
    return marshal.loads(data), fds


# ---- tensors in an arena --------------------------------------------------------------


def tensor_payload(tensor: np.ndarray) -> tuple[str, Any]:
    """(the descriptor's dtype field, the tensor's bytes as a flat uint8 view, without a
    copy when it is contiguous; BYTES in their wire form)."""
    if tensor.dtype.hasobject:
        return BYTES, serialize_bytes(tensor)
    return tensor.dtype.str, np.ascontiguousarray(tensor).reshape(-1).view(np.uint8)


def write_tensors(
    buffer: Any, arrays: dict[str, np.ndarray], start: int, limit: int
) -> tuple[list[Descriptor], int] | int:
    """Copy `arrays` into buffer[start:limit], in order; the descriptors and the end offset,
    or the number of bytes needed from `start` when they do not fit."""
    payloads: list[tuple[str, str, tuple[int, ...], Any, int]] = []
    offset = aligned(start)
    for name, tensor in arrays.items():
        dtype, data = tensor_payload(tensor)  # (an empty array is fine)
        payloads.append((name, dtype, tensor.shape, data, offset))
        offset = aligned(offset + len(data))
    if offset > limit:
        return offset - start
    descriptors: list[Descriptor] = []
    for name, dtype, shape, data, at in payloads:
        nbytes = len(data)
        buffer[at : at + nbytes] = data  # one memcpy through the buffer protocol
        descriptors.append((name, dtype, shape, at, nbytes))
    return descriptors, offset


def read_tensors(
    buffer: Any, descriptors: list[Descriptor], base: int = 0
) -> dict[str, np.ndarray]:
    """Arrays for the descriptors, whose offsets count from `base` in `buffer`: views into
    it (BYTES are parsed into objects)."""
    return {
        name: read_tensor(buffer, name, dtype, shape, offset - base, nbytes)
        for name, dtype, shape, offset, nbytes in descriptors
    }


def read_tensor(
    buffer: Any, name: str, dtype: str, shape: tuple[int, ...], offset: int, nbytes: int
) -> np.ndarray:
    """The array of buffer[offset:offset + nbytes]: a view (BYTES parsed into objects)."""
    if dtype == BYTES:
        view = memoryview(buffer)[offset : offset + nbytes]
        return deserialize_bytes(view, element_count(shape), name).reshape(shape)
    kind = _DTYPES.get(dtype) or _DTYPES.setdefault(dtype, np.dtype(dtype))
    if nbytes == 0:  # frombuffer refuses an offset at the very end of the buffer
        return np.empty(shape, kind)
    return np.frombuffer(buffer, kind, nbytes // kind.itemsize, offset).reshape(shape)


_DTYPES: dict[str, np.dtype] = {}  # parsed once: np.dtype(str) costs a microsecond a batch
