"""System shared-memory regions (the V2 `system_shared_memory` extension), transport-free.

A client creates a POSIX shared-memory object, registers a window of it under a name, then
names that window in infer requests instead of sending tensor bytes: inputs are read from
it and outputs written into it, one copy each (shared_memory_window.py: through a mapping
guarded against the client shrinking its object, which is a 400, never a crash). Only
plain objects under /dev/shm can be opened, never another file.
"""

from __future__ import annotations

import errno
import os
import resource
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel_base.datatypes import WIRE_DTYPES, deserialize_bytes, element_count, serialize_bytes
from accel_base.errors import InvalidArgument, PermissionDenied, Unavailable
from gateway.core.inference import InferResponse, RequestedOutput, Tensor
from gateway.core.shared_memory_window import Window

SHM_DIR = "/dev/shm"
# Each region holds a file descriptor: leave most of the process's for connections.
MAX_REGIONS = max(16, min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4))
MAX_NAME = 255  # NAME_MAX: no longer key can exist, and names are echoed in errors
# Names and keys come from clients, so errors show them with !r: text that the JSON
# encoder refuses (a lone surrogate) then never reaches an error body.

# The tensor parameters that put a tensor's data in a region (Triton's names).
REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"

# What the fronts' decoders call for an input in a region: (where, datatype, shape,
# parameters) -> array. A bound `SharedMemoryRegistry.input_array`.
InputSource = Callable[[str, str, tuple[int, ...], dict[str, Any]], np.ndarray]

OFF = "system shared memory is off on this server: start the server with --allow-shared-memory"


class Region:
    """One registered window [offset, offset + byte_size) of a shared-memory object."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self._window: Window | None = Window(fd, offset, byte_size)  # closed on release
        self.writers = 0  # requests that will still write outputs here
        self.retired = False  # unregistered; closed once nobody uses it

    def read(self, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
        """A copy of `count` elements at `offset` in the window."""
        array = np.empty(count, dtype)
        buffer = array.view(np.uint8)
        if not self._open().read_into(memoryview(buffer), offset):
            raise InvalidArgument(
                f"region {self.name!r}: shared-memory key {self.key!r} ends before "
                f"{self.offset + offset + buffer.size} bytes; was it truncated?"
            )
        return array

    def write(self, data: np.ndarray, offset: int) -> None:
        """Write the bytes of a contiguous array at `offset` in the window."""
        buffer = memoryview(data.reshape(-1).view(np.uint8))
        window = self._open()
        end = self.offset + offset + len(buffer)
        try:
            if window.write_from(buffer, offset):
                return
            if window.file_size() >= end:  # whole, so a page tmpfs could not allocate
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:  # ENOSPC: /dev/shm is full
            raise Unavailable(f"cannot write into region {self.name!r}: {exc.strerror}") from None
        raise InvalidArgument(
            f"region {self.name!r}: shared-memory key {self.key!r} ends before {end} bytes; "
            "was it truncated?"
        )

    def release(self) -> None:
        """Close now if no request will still write here, else leave it to the last one."""
        if self.writers or self._window is None:
            return
        self._window.close()
        self._window = None

    def _open(self) -> Window:
        if self._window is None:  # a request that looked it up before it was released
            raise InvalidArgument(f"system shared memory region {self.name!r} was unregistered")
        return self._window

    def status(self) -> dict[str, Any]:
        keys = ("name", "key", "offset", "byte_size")
        return {key: getattr(self, key) for key in keys}


@dataclass(slots=True)
class OutputTarget:
    """Where one requested output goes: a window of a region, checked before the run."""

    region: Region
    offset: int
    byte_size: int
    parameters: dict[str, Any]  # set on the response tensor: "no data here"


def _count(value: Any, what: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgument(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _shm_path(key: Any) -> str:
    """The /dev/shm path of a POSIX shm key ("/name" or "name"); nothing else is accepted."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"the shared-memory key must be a non-empty string, got {key!r}")
    if len(key) > MAX_NAME + 1:
        raise InvalidArgument(f"the shared-memory key is {len(key)} characters, over {MAX_NAME}")
    name = key[1:] if key.startswith("/") else key
    if not name or "/" in name or "\0" in name or name in (".", "..") or not _utf8(name):
        raise InvalidArgument(
            f"shared-memory key {key!r} is not a POSIX shm name: expected '/name' "
            "(an object in /dev/shm) with no other '/' and no '..'"
        )
    return os.path.join(SHM_DIR, name)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class SharedMemoryRegistry:
    """Registered regions by name. The fronts call it on the event loop; the lock keeps the
    table consistent should a worker thread ever look a region up."""

    def __init__(self, enabled: bool, max_regions: int = MAX_REGIONS) -> None:
        self.enabled = enabled
        self.max_regions = max_regions
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    # ---- register, unregister, status ------------------------------------------------

    def register(self, name: Any, key: Any, offset: Any, byte_size: Any) -> None:
        if not self.enabled:
            raise PermissionDenied(OFF)
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or not _utf8(name):
            raise InvalidArgument(f"a region needs a name of 1 to {MAX_NAME} characters")
        path = _shm_path(key)
        offset = _count(offset, f"region {name!r}: offset", 0)
        byte_size = _count(byte_size, f"region {name!r}: byte_size", 1)
        with self._lock:
            if name in self._regions:
                raise InvalidArgument(
                    f"system shared memory region {name!r} is already registered; "
                    "unregister it first"
                )
            if len(self._regions) >= self.max_regions:
                raise InvalidArgument(
                    f"{self.max_regions} regions are registered, the most this server holds; "
                    "unregister some first"
                )
            self._regions[name] = self._open(name, key, path, offset, byte_size)

    def _open(self, name: str, key: str, path: str, offset: int, byte_size: int) -> Region:
        # O_NOFOLLOW: a symlink planted in /dev/shm must not lead elsewhere; O_NONBLOCK: a
        # FIFO there must not hang the server (it is refused below as not a regular file).
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except OSError as exc:  # the key's text was checked above, so no ValueError here
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise Unavailable(f"cannot open more files to register {name!r}") from None
            raise InvalidArgument(
                f"cannot open shared-memory key {key!r} for region {name!r}: {exc.strerror} "
                "(create it with shm_open before registering)"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_dev != os.stat(SHM_DIR).st_dev:
                raise InvalidArgument(f"shared-memory key {key!r} is not a shared-memory object")
            if offset + byte_size > info.st_size:
                raise InvalidArgument(
                    f"region {name!r}: offset {offset} + byte_size {byte_size} is beyond the "
                    f"{info.st_size} bytes of shared-memory key {key!r}"
                )
        except BaseException:
            os.close(fd)
            raise
        return Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str = "") -> None:
        """Unregister one region, or every one when `name` is empty; unknown names are a
        no-op, as in Triton. A request that will still write into a region keeps it open."""
        with self._lock:
            if name:
                regions = [r for r in (self._regions.pop(name, None),) if r is not None]
            else:
                regions, self._regions = list(self._regions.values()), {}
            for region in regions:
                region.retired = True
                region.release()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [region.status() for region in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise InvalidArgument(f"no system shared memory region {name!r} is registered")
        return [region.status()]

    # ---- tensors in regions ----------------------------------------------------------

    def _locate(self, where: str, parameters: dict[str, Any]) -> tuple[Region, int, int]:
        """The region, offset and byte size named by a tensor's parameters, bounds-checked."""
        name = parameters.get(REGION)
        if not isinstance(name, str):
            raise InvalidArgument(f"{where}: parameter {REGION} must be a string, got {name!r}")
        size = _count(parameters.get(BYTE_SIZE), f"{where}: parameter {BYTE_SIZE}", 0)
        offset = _count(parameters.get(OFFSET, 0), f"{where}: parameter {OFFSET}", 0)
        if not self.enabled:
            raise InvalidArgument(f"{where} names region {name!r}, but {OFF}")
        with self._lock:
            region = self._regions.get(name)
        if region is None:
            raise InvalidArgument(f"{where}: no system shared memory region {name!r} is registered")
        if offset + size > region.byte_size:
            raise InvalidArgument(
                f"{where}: {OFFSET} {offset} + {BYTE_SIZE} {size} is beyond region {name!r} "
                f"({region.byte_size} bytes)"
            )
        return region, offset, size

    def input_array(
        self, where: str, datatype: str, shape: tuple[int, ...], parameters: dict[str, Any]
    ) -> np.ndarray:
        """An input tensor read from its region (a copy), parsed elements for BYTES (the
        region holds the length-prefixed serialization)."""
        region, offset, size = self._locate(where, parameters)
        count = element_count(shape)
        if datatype == "BYTES":
            blob = region.read(np.dtype(np.uint8), size, offset)
            return deserialize_bytes(blob, count, where).reshape(shape)
        wire = WIRE_DTYPES[datatype]
        if size != count * wire.itemsize:
            raise InvalidArgument(
                f"{where} got unexpected byte size {size}, expected {count * wire.itemsize} "
                f"({BYTE_SIZE} is {size} but {datatype} shape {list(shape)} needs "
                f"{count * wire.itemsize} bytes)"
            )
        return region.read(wire, count, offset).reshape(shape)

    def output_targets(self, outputs: list[RequestedOutput]) -> dict[str, OutputTarget]:
        """The regions that requested outputs go to, checked before the model runs. Each
        target holds its region until `release_targets`, even through an unregister."""
        targets: dict[str, OutputTarget] = {}
        for output in outputs:
            if REGION in output.parameters:
                region, offset, size = self._locate(f"output '{output.name}'", output.parameters)
                echo = {REGION: region.name, BYTE_SIZE: size}
                if offset:
                    echo[OFFSET] = offset
                targets[output.name] = OutputTarget(region, offset, size, echo)
        for target in targets.values():
            target.region.writers += 1
        return targets

    def write_outputs(self, targets: dict[str, OutputTarget], response: InferResponse) -> None:
        """Write each targeted output into its region. Its response tensor keeps the data's
        shape and datatype and gains the shared-memory parameters, which tell the fronts to
        send no data for it."""
        for position, tensor in enumerate(response.outputs):
            target = targets.get(tensor.name)
            if target is None:
                continue
            _write(target, tensor)
            response.outputs[position] = Tensor(
                tensor.name,
                tensor.datatype,
                tensor.data,
                {**tensor.parameters, **target.parameters},
            )

    def release_targets(self, targets: dict[str, OutputTarget]) -> None:
        for target in targets.values():
            region = target.region
            region.writers -= 1
            if region.retired:
                region.release()


def _write(target: OutputTarget, tensor: Tensor) -> None:
    where = f"output '{tensor.name}'"
    data = tensor.data
    if tensor.datatype == "BYTES":
        blob = np.frombuffer(serialize_bytes(data), np.uint8)
        _check_fits(target, where, blob.size)
        target.region.write(blob, target.offset)
        return
    wire = WIRE_DTYPES[tensor.datatype]
    _check_fits(target, where, data.size * wire.itemsize)
    # The same conversion as to_raw's astype; no copy when the output is already wire-ready.
    target.region.write(np.ascontiguousarray(data, dtype=wire), target.offset)


def _check_fits(target: OutputTarget, where: str, needed: int) -> None:
    if needed > target.byte_size:
        raise InvalidArgument(
            f"{where} needs {needed} bytes but its window of region {target.region.name!r} has "
            f"{target.byte_size} ({BYTE_SIZE}); request a larger one"
        )
