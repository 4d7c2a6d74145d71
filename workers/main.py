"""A worker process: loads one backend and runs the batches the gateway sends it.

    python -m workers.main <socket fd> <instance name>

The instance name is only there so that `ps` shows which model a worker serves.
The worker exits when the gateway says so, when its socket closes, or when the
gateway process is gone (a watchdog notices a new parent), so a crashed gateway
leaves no worker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

from accel_base.errors import GatewayError
from accel_base.logs import FORMAT_VARIABLE, JsonFormatter
from accel_base.proto import model_config_pb2 as mc
from backends import Backend, Device, backend_class
from workers import protocol
from workers.arena import Arena, grown_size

log = logging.getLogger("accel_gateway.worker")
PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>
MAX_ERROR_CHARS = 8192  # a reply must fit in one run message
MAX_VIEWS = 256  # input views kept for the next batches
# multiprocessing's own exit (below) ends a framework's pool; one that hangs is cut off.
MULTIPROCESSING_EXIT_S = 5.0


def _failure(exc: BaseException) -> tuple:
    """An exception as a reply: GatewayErrors keep their class (and so their status)."""
    message = exc.message if isinstance(exc, GatewayError) else str(exc)
    return ("failed", type(exc).__name__, message[:MAX_ERROR_CHARS])


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.backend: Backend | None = None
        self.inputs: Arena | None = None  # the gateway's, mapped here
        # Views of the input arena by descriptor: the gateway places inputs of one shape
        # at the same offsets batch after batch, and a view costs microseconds to make.
        self._views: dict[protocol.Descriptor, np.ndarray] = {}
        self.outputs = Arena(grown_size(0), name="accel-gateway-outputs")

    def serve(self) -> None:
        while True:
            # Until its model is loaded, the load's message carries a whole config.
            loaded = self.backend is not None
            limit = protocol.RUN_MESSAGE_BYTES if loaded else protocol.MAX_MESSAGE_BYTES
            try:
                message, fds = protocol.receive(self.sock, limit)
            except EOFError:
                return  # the gateway is gone or closed the instance
            kind = message[0]
            if kind == "run":
                self._run(message, fds)
            elif kind == "load":
                self._load(message)
            elif kind == "prepare":  # a spare: import the framework while nobody waits
                _prepare(message[1])
            elif kind == "unload":
                self._unload()
                return
            else:
                protocol.send(self.sock, ("failed", "Internal", f"unknown message {kind!r}"))

    def _load(self, message: tuple) -> None:
        _, platform, artifact, config_bytes, device_kind, device_index, name = message
        _name_in_logs(name)  # a spare learns whose it is
        try:
            config = mc.ModelConfig.FromString(config_bytes)
            backend_type = backend_class(platform)
            self.backend = backend_type(Path(artifact), config, Device(device_kind, device_index))
            specs = [
                [(t.name, t.datatype, tuple(t.shape)) for t in tensors]
                for tensors in (self.backend.inputs(), self.backend.outputs())
            ]
            allowed = self.backend.allowed_batch_sizes()
            memory = self.backend.memory_bytes()
            completed = self.backend.completed_config()
            completed_bytes = completed.SerializeToString() if completed is not None else None
            reply = ("loaded", specs[0], specs[1], allowed, memory, self.outputs.size,
                     completed_bytes)  # fmt: skip
        except Exception as exc:  # the reason goes to the gateway's repository index
            protocol.send(self.sock, _failure(exc))
            return
        protocol.send(self.sock, reply, (self.outputs.fd,))

    def _run(self, message: tuple, fds: list[int]) -> None:
        _, descriptors, output_names, start, limit, input_size, requests = message
        if fds:  # the gateway grew its input arena
            self._views.clear()
            if self.inputs is not None:
                self.inputs.close()
            self.inputs = Arena(input_size, fd=fds[0])
        try:
            if self.backend is None or self.inputs is None:
                raise RuntimeError("the worker has no model loaded")
            inputs = self._read_inputs(descriptors)
            began = time.perf_counter_ns()
            failures: list = []
            if requests is None:
                outputs = self.backend.run(inputs, output_names)
            else:  # each request answered on its own (backends.python)
                outputs, failures = self.backend.run_requests(inputs, output_names, requests)
            run_ns = time.perf_counter_ns() - began
            placed = protocol.write_tensors(self.outputs.buffer, outputs, start, limit)
            new_fd: tuple[int, ...] = ()
            if isinstance(placed, int):  # no room left in the window: a bigger arena
                self.outputs.close()
                self.outputs = Arena(grown_size(placed, self.outputs.size), name="accel-gateway")
                placed = protocol.write_tensors(self.outputs.buffer, outputs, 0, self.outputs.size)
                assert not isinstance(placed, int)
                new_fd = (self.outputs.fd,)
            reply: tuple = ("ran", placed[0], run_ns, self.outputs.size, failures)
        except Exception as exc:  # the backend's failure fails this batch only
            reply, new_fd = _failure(exc), ()
        try:
            protocol.send(self.sock, reply, new_fd)
        except ValueError as exc:  # over one message (a batch of very many requests)
            protocol.send(self.sock, _failure(exc), new_fd)

    def _read_inputs(self, descriptors: list[protocol.Descriptor]) -> dict[str, np.ndarray]:
        assert self.inputs is not None
        views, arrays = self._views, {}
        for descriptor in descriptors:
            view = views.get(descriptor)
            if view is None:
                name = descriptor[0]
                view = protocol.read_tensors(self.inputs.buffer, [descriptor])[name]
                if descriptor[1] != protocol.BYTES:  # BYTES are parsed, not viewed
                    if len(views) >= MAX_VIEWS:
                        views.clear()
                    views[descriptor] = view
            arrays[descriptor[0]] = view
        return arrays

    def _unload(self) -> None:
        try:
            if self.backend is not None:
                self.backend.unload()
            reply: tuple = ("unloaded",)
        except Exception as exc:
            reply = _failure(exc)
        self.backend = None
        protocol.send(self.sock, reply)


def _prepare(platform: str) -> None:
    try:
        backend_class(platform)  # imports the backend's module and its framework
    except Exception as exc:  # the load will say so, with the model's name
        log.warning("could not prepare for %s: %s", platform, exc)


def _name_in_logs(name: str) -> None:
    """Every line names the worker, as JSON where the gateway logs JSON."""
    json_lines = os.environ.get(FORMAT_VARIABLE) == "json"
    logging.captureWarnings(True)  # a framework's warnings as lines in that format too
    for handler in logging.getLogger().handlers:
        handler.setFormatter(
            JsonFormatter(worker=name)
            if json_lines
            else logging.Formatter(f"%(asctime)s worker {name} %(levelname)s %(message)s")
        )


def _exit_with_parent(parent: int) -> None:
    """Exit as soon as the gateway process is gone, even in the middle of a long run: the
    kernel's parent-death signal where there is one, and a watchdog thread besides (it
    also covers a parent that died before the signal was asked for)."""
    with contextlib.suppress(OSError, AttributeError):  # Linux only
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _end_multiprocessing(timeout_s: float = MULTIPROCESSING_EXIT_S) -> None:
    """Run multiprocessing's exit handler, which os._exit skips: it ends the pools a
    framework started (tinygrad's compile pool) and unlinks their semaphores. Skipped, the
    resource tracker finds them at its end and prints "leaked semaphore objects"."""
    util = sys.modules.get("multiprocessing.util")
    exit_function = getattr(util, "_exit_function", None)
    if exit_function is None:  # nothing used multiprocessing (or a Python without it)
        return
    # A thread with a bound: a pool with a wedged process must not hold up the stop.
    ending = threading.Thread(target=exit_function, name="multiprocessing-exit", daemon=True)
    ending.start()
    ending.join(timeout_s)
    if ending.is_alive():
        log.warning("multiprocessing's exit did not finish in %g s; exiting anyway", timeout_s)


def main(argv: list[str]) -> None:
    fd, name = int(argv[1]), argv[2]
    # Children of the backend (tinygrad's compile pool, say) must not hold the socket open:
    # the gateway learns of this worker's death from the socket's end.
    os.set_inheritable(fd, False)
    # Ctrl-C reaches the whole process group; the gateway decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO)
    _name_in_logs(name)
    _exit_with_parent(int(os.environ.get("ACCEL_GATEWAY_PARENT_PID", os.getppid())))
    Worker(socket.socket(fileno=fd)).serve()
    # The model is unloaded; skip the interpreter's teardown, where frameworks' exit
    # handlers can take seconds or hang (tinygrad's compile pool has), all but
    # multiprocessing's, bounded.
    _end_multiprocessing()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
