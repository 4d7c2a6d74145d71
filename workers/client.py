"""The gateway's handle on one worker process: start it, load a model, send batches, read
replies, stop or kill it. Blocking calls only; the gateway's instance adds the event loop.
"""

from __future__ import annotations

import contextlib
import math
import select
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accel_base.cpu import MAX_NICE
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
    completed_config: mc.ModelConfig | None = None  # where the backend completed it


# (outputs, run ns, failures: (request index, error class name, message) of a per-request
# run, else empty)
Reply = tuple[dict[str, np.ndarray], int, list]

MAX_LAYOUTS = 64  # input shapes whose places in the arena are remembered


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where one batch's fixed-size inputs sit in the input arena."""

    views: dict[str, np.ndarray]  # by input name
    descriptors: list[protocol.Descriptor]
    end: int  # the first byte after them
    loose: tuple[str, ...]  # the BYTES inputs, written after `end` for each batch


def _lowered(command: list[str], nice: int) -> list[str]:
    """`command` run `nice` steps below this process's priority (accel_base/cpu.py), set
    before the interpreter starts, so that every thread it will have inherits it."""
    if nice <= 0 or shutil.which("nice") is None:
        return command
    return ["nice", "-n", str(min(nice, MAX_NICE)), *command]


class WorkerProcess:
    def __init__(self, name: str, env: dict[str, str], nice: int = 0) -> None:
        self.name = name
        self.sock, child = protocol.socket_pair()
        try:
            command = [sys.executable, "-m", "workers.main", str(child.fileno()), name]
            self.process = subprocess.Popen(
                _lowered(command, nice),
                pass_fds=(child.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                # Terminal signals go to the gateway, which stops its workers itself. A
                # process group of its own, not a session: a new session would be a new
                # scheduler autogroup, and the nice would not count against the gateway.
                process_group=0,
            )
        except BaseException:
            self.sock.close()
            raise
        finally:
            child.close()
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)
        self.inputs: Arena | None = None
        self._send_inputs_fd = False
        self._layouts: dict[tuple, _Layout] = {}  # by the inputs' (name, shape, dtype)
        # The arrays stage() gave out for the next run, and where they are.
        self._staged: tuple[dict[str, np.ndarray], _Layout] | None = None
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
                   device.index, self.name)  # fmt: skip
        protocol.send(self.sock, message)
        reply, fds = self._wait_reply(timeout_s, "load the model")
        if reply[0] == "failed":
            raise WorkerError(reply[1], reply[2])
        _, inputs, outputs, allowed, memory, output_size, completed = reply
        self.outputs = Arena(output_size, fd=fds[0])
        return LoadedModel(
            [TensorSpec(n, d, tuple(s)) for n, d, s in inputs],
            [TensorSpec(n, d, tuple(s)) for n, d, s in outputs],
            tuple(allowed) if allowed is not None else None,
            memory,
            mc.ModelConfig.FromString(completed) if completed is not None else None,
        )

    def prepare(self, platform: str) -> None:
        """Have a spare worker import the platform's framework now, before its load
        (gateway/core/scheduling/spares.py); no reply: a failure shows at the load."""
        protocol.send(self.sock, ("prepare", platform))

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
        a batch merged straight into them crosses to the worker without another copy.
        send_run() given this very dict sends the arrays in place; keep them in it."""
        layout = self._layout(specs)
        arrays = dict(layout.views)
        for name, shape, dtype in specs:
            if dtype.hasobject:
                arrays[name] = np.empty(shape, dtype)
        self._staged = (arrays, layout)
        return arrays

    def _layout(self, specs: list[tuple[str, tuple[int, ...], np.dtype]]) -> _Layout:
        """Where inputs of these shapes sit in the arena; remembered, as most batches have
        the shapes of one before them and views cost microseconds to make."""
        key = tuple(specs)
        layout = self._layouts.get(key)
        if layout is not None:
            return layout
        placed, end, loose = [], 0, []  # (name, shape, dtype, nbytes, offset) in the arena
        for name, shape, dtype in specs:
            if dtype.hasobject:
                loose.append(name)
            else:
                nbytes = element_count(shape) * dtype.itemsize
                placed.append((name, shape, dtype, nbytes, end))
                end = aligned(end + nbytes)
        arena = self._input_arena(end)  # a new arena forgets every layout
        views, descriptors = {}, []
        for name, shape, dtype, nbytes, offset in placed:
            count = nbytes // dtype.itemsize
            views[name] = np.frombuffer(arena.buffer, dtype, count, offset).reshape(shape)
            descriptors.append((name, dtype.str, shape, offset, nbytes))
        if len(self._layouts) >= MAX_LAYOUTS:
            self._layouts.clear()
        layout = self._layouts[key] = _Layout(views, descriptors, end, tuple(loose))
        return layout

    def send_run(
        self,
        inputs: dict[str, np.ndarray],
        output_names: list[str],
        requests: list[tuple] | None = None,
    ) -> None:
        """Send a batch; `requests`, for a per-request backend, says which rows are whose
        (workers/protocol.py)."""
        staged, self._staged = self._staged, None
        if staged is not None and staged[0] is inputs:  # merged into the staged arrays
            layout = staged[1]
        else:  # copied into the arena now: the one copy on the way to the worker
            layout = self._layout(
                [(name, array.shape, array.dtype) for name, array in inputs.items()]
            )
            for name, view in layout.views.items():
                view[...] = inputs[name]
        descriptors = layout.descriptors
        if layout.loose:  # BYTES, in their wire form after the fixed-size inputs
            loose = {name: inputs[name] for name in layout.loose}
            arena = self._input_arena(layout.end)
            placed = protocol.write_tensors(arena.buffer, loose, layout.end, arena.size)
            if isinstance(placed, int):  # a bigger arena, and everything written into it
                arena = self._input_arena(layout.end + placed, replace=True)
                placed = protocol.write_tensors(arena.buffer, dict(inputs), 0, arena.size)
                assert not isinstance(placed, int)
                descriptors = placed[0]
            else:
                descriptors = descriptors + placed[0]
        assert self.inputs is not None and self.outputs is not None
        start, limit = self.leases.window(self.outputs.size)
        message = ("run", descriptors, output_names, start, limit, self.inputs.size, requests)
        fds = (self.inputs.fd,) if self._send_inputs_fd else ()
        protocol.send(self.sock, message, fds)
        self._send_inputs_fd = False

    def _input_arena(self, needed: int, replace: bool = False) -> Arena:
        if self.inputs is None or replace or needed > self.inputs.size:
            old = self.inputs
            self.inputs = Arena(grown_size(needed, old.size if old else 0), name=self.name)
            self._send_inputs_fd = True
            self._layouts.clear()
            if old is not None:
                old.close()
        return self.inputs

    def wait_readable(self, timeout_s: float) -> bool:
        # poll, not select: select refuses descriptors numbered 1024 and up.
        return bool(self._poll.poll(max(math.ceil(timeout_s * 1000), 0)))

    def reply_within(self, timeout_s: float) -> Reply | None:
        """take_reply() if the reply comes within `timeout_s`, else None (it may come later).

        A poll, then the receive: the socket may be in non-blocking mode, as uvloop puts
        every descriptor it watches (so a receive with a kernel timeout would not wait)."""
        if not self.wait_readable(timeout_s):
            return None
        return self.take_reply()

    def take_reply(self) -> Reply:
        """The outputs (views leased from the output arena), the backend's run time, and
        the failed requests of a per-request run."""
        try:
            reply, fds = protocol.receive(self.sock)
        except (EOFError, ConnectionError):
            # No waiting for its exit status here: this runs on the gateway's event loop.
            raise WorkerGone("the worker process closed its socket") from None
        if reply[0] == "failed":
            raise WorkerError(reply[1], reply[2])
        _, descriptors, run_ns, output_size, failures = reply
        if fds:  # the worker grew its output arena
            assert self.outputs is not None
            self.outputs.close()
            self.outputs = Arena(output_size, fd=fds[0])
            self.leases.forget()
        return self._lease(descriptors), run_ns, failures

    def _lease(self, descriptors: list[protocol.Descriptor]) -> dict[str, np.ndarray]:
        assert self.outputs is not None
        if not descriptors:
            return {}
        # The worker wrote them in order: the range runs from the first to the end of the last.
        start, last = descriptors[0][3], descriptors[-1]
        end = last[3] + last[4]
        if end == start:  # nothing but empty tensors
            return protocol.read_tensors(self.outputs.buffer, descriptors)
        # Every output views this holder; the range is free again when the holder dies.
        holder = np.frombuffer(self.outputs.buffer, np.uint8, end - start, start)
        outputs = protocol.read_tensors(holder, descriptors, start)
        self.leases.lease(holder, start, end)
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
        self._layouts.clear()  # their views would keep the input mapping alive
        self._staged = None
        for arena in (self.inputs, self.outputs):
            if arena is not None:
                arena.close()
        self.inputs = self.outputs = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
