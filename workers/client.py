"""The gateway's handle on one worker process: start it, load a model, send batches, read
replies, stop or kill it. Blocking calls only; the gateway's instance adds the event loop.
"""

from __future__ import annotations

import contextlib
import math
import select
import signal
import socket
import struct
import subprocess
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accel_base.datatypes import element_count
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device, TensorSpec
from workers import protocol
from workers.arena import Arena, aligned, grown_size
from workers.leases import OutputLeases


class WorkerError(Exception):
    """The worker answered with a failure; `kind` is the exception's class name there."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class WorkerGone(Exception):
    """The worker process ended or its socket closed."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    allowed_batch_sizes: tuple[int, ...] | None
    memory_bytes: int


class WorkerProcess:
    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.sock, child = protocol.socket_pair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "workers.main", str(child.fileno()), name],
                pass_fds=(child.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                # Terminal signals go to the gateway, which stops its workers itself.
                start_new_session=True,
            )
        except BaseException:
            self.sock.close()
            raise
        finally:
            child.close()
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)
        self._receive_timeout_us = 0  # SO_RCVTIMEO as last set (0: none)
        self.inputs: Arena | None = None
        self._send_inputs_fd = False
        self._staged: dict[str, tuple[np.ndarray, int]] = {}  # name -> (view, offset)
        self.outputs: Arena | None = None
        self.leases = OutputLeases()

    @property
    def pid(self) -> int:
        return self.process.pid

    def fileno(self) -> int:
        return self.sock.fileno()

    # ---- load and unload (blocking, with a timeout) ----------------------------------

    def load(
        self,
        platform: str,
        artifact: Path,
        config: mc.ModelConfig,
        device: Device,
        timeout_s: float,
    ) -> LoadedModel:
        message = ("load", platform, str(artifact), config.SerializeToString(), device.kind,
                   device.index)  # fmt: skip
        protocol.send(self.sock, message)
        reply, fds = self._wait_reply(timeout_s, "load the model")
        if reply[0] == "failed":
            raise WorkerError(reply[1], reply[2])
        _, inputs, outputs, allowed, memory, output_size = reply
        self.outputs = Arena(output_size, fd=fds[0])
        return LoadedModel(
            [TensorSpec(n, d, tuple(s)) for n, d, s in inputs],
            [TensorSpec(n, d, tuple(s)) for n, d, s in outputs],
            tuple(allowed) if allowed is not None else None,
            memory,
        )

    def unload(self, timeout_s: float) -> None:
        """Ask the worker to free its model and exit; kill it if it does not in time."""
        try:
            protocol.send(self.sock, ("unload",))
            reply, _ = self._wait_reply(timeout_s, "unload the model")
            if reply[0] == "failed":
                raise WorkerError(reply[1], reply[2])
            self.process.wait(timeout_s)
        except (OSError, WorkerGone, subprocess.TimeoutExpired):
            pass  # it is killed below either way
        finally:
            self.kill()
            self.close()

    def _wait_reply(self, timeout_s: float, what: str) -> tuple[tuple, list[int]]:
        if not self.wait_readable(timeout_s):
            self.kill()
            raise WorkerGone(f"the worker did not {what} within {timeout_s:g} s and was killed")
        try:
            return protocol.receive(self.sock, protocol.MAX_MESSAGE_BYTES)
        except (EOFError, ConnectionError):
            raise WorkerGone(f"the worker process {self.exit_description()}") from None

    # ---- batches ---------------------------------------------------------------------

    def stage(self, specs: list[tuple[str, tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
        """Arrays for the next batch's inputs, inside the input arena (BYTES outside it):
        a batch merged straight into them crosses to the worker without another copy."""
        placed, end = [], 0  # (name, shape, dtype, element count, offset) in the arena
        for name, shape, dtype in specs:
            if dtype != np.object_:
                count = element_count(shape)
                placed.append((name, shape, dtype, count, end))
                end = aligned(end + count * dtype.itemsize)
        arena = self._input_arena(end)
        self._staged = {}
        for name, shape, dtype, count, offset in placed:
            view = np.frombuffer(arena.buffer, dtype, count, offset).reshape(shape)
            self._staged[name] = (view, offset)
        return {
            name: self._staged[name][0] if name in self._staged else np.empty(shape, dtype)
            for name, shape, dtype in specs
        }

    def send_run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> None:
        staged, self._staged = self._staged, {}
        descriptors: list[protocol.Descriptor] = []
        loose: dict[str, np.ndarray] = {}
        for name, array in inputs.items():
            entry = staged.get(name)
            if entry is not None and entry[0] is array:
                descriptors.append((name, array.dtype.str, array.shape, entry[1], array.nbytes))
            else:
                loose[name] = array
        start = max((offset + view.nbytes for view, offset in staged.values()), default=0)
        arena = self._input_arena(start)
        if loose:
            placed = protocol.write_tensors(arena.buffer, loose, start, arena.size)
            if isinstance(placed, int):  # a bigger arena, and everything written into it
                arena = self._input_arena(start + placed, replace=True)
                descriptors = []
                placed = protocol.write_tensors(arena.buffer, dict(inputs), 0, arena.size)
                assert not isinstance(placed, int)
            descriptors += placed[0]
        assert self.inputs is not None and self.outputs is not None
        start, limit = self.leases.window(self.outputs.size)
        message = ("run", descriptors, output_names, start, limit, self.inputs.size)
        fds = (self.inputs.fd,) if self._send_inputs_fd else ()
        protocol.send(self.sock, message, fds)
        self._send_inputs_fd = False

    def _input_arena(self, needed: int, replace: bool = False) -> Arena:
        if self.inputs is None or replace or needed > self.inputs.size:
            old = self.inputs
            self.inputs = Arena(grown_size(needed, old.size if old else 0), name=self.name)
            self._send_inputs_fd = True
            if old is not None:
                old.close()
        return self.inputs

    def wait_readable(self, timeout_s: float) -> bool:
        # poll, not select: select refuses descriptors numbered 1024 and up.
        return bool(self._poll.poll(max(math.ceil(timeout_s * 1000), 0)))

    def reply_within(self, timeout_s: float) -> tuple[dict[str, np.ndarray], int] | None:
        """take_reply() if the reply comes within `timeout_s`, else None (it may come later).

        One blocking receive with a kernel timeout (SO_RCVTIMEO) rather than a poll and then
        a receive: a system call less on every short batch."""
        # Rounded down to a power of two, so that the timeout (which follows a moving
        # average) changes, and costs a setsockopt, only when the run time moves a lot.
        timeout_us = max(int(timeout_s * 1e6), 1000)  # 0 would mean "wait for ever"
        timeout_us = max(1 << (timeout_us.bit_length() - 1), 1000)
        if timeout_us != self._receive_timeout_us:
            timeval = struct.pack("ll", timeout_us // 1_000_000, timeout_us % 1_000_000)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            self._receive_timeout_us = timeout_us
        try:
            return self.take_reply()
        except BlockingIOError:
            return None

    def take_reply(self) -> tuple[dict[str, np.ndarray], int]:
        """The outputs (views leased from the output arena) and the backend's run time."""
        try:
            reply, fds = protocol.receive(self.sock)
        except (EOFError, ConnectionError):
            # No waiting for its exit status here: this runs on the gateway's event loop.
            raise WorkerGone("the worker process closed its socket") from None
        if reply[0] == "failed":
            raise WorkerError(reply[1], reply[2])
        _, descriptors, run_ns, output_size = reply
        if fds:  # the worker grew its output arena
            assert self.outputs is not None
            self.outputs.close()
            self.outputs = Arena(output_size, fd=fds[0])
            self.leases.forget()
        return self._lease(descriptors), run_ns

    def _lease(self, descriptors: list[protocol.Descriptor]) -> dict[str, np.ndarray]:
        assert self.outputs is not None
        start = min((d[3] for d in descriptors), default=0)
        end = max((d[3] + d[4] for d in descriptors), default=0)
        if end == start:
            return protocol.read_tensors(self.outputs.buffer, descriptors)
        # Every output views this holder; the range is free again when the holder dies.
        holder = np.frombuffer(self.outputs.buffer, np.uint8, end - start, start)
        relative = [(n, d, s, offset - start, size) for n, d, s, offset, size in descriptors]
        outputs = protocol.read_tensors(holder, relative)
        weakref.finalize(holder, self.leases.release, self.leases.hold(start, end))
        return outputs

    # ---- the process -----------------------------------------------------------------

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def exit_description(self, wait_s: float = 2.0) -> str:
        """How the process ended, e.g. 'was killed by signal SIGKILL' (waits for it briefly)."""
        try:
            code = self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            return "closed its socket but is still running"
        if code < 0:
            try:
                return f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def close(self) -> None:
        """Free the socket and this side's arenas (a killed worker's are freed by the kernel)."""
        self.sock.close()
        for arena in (self.inputs, self.outputs):
            if arena is not None:
                arena.close()
        self.inputs = self.outputs = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
