"""A front process: HTTP and gRPC on the server's ports (shared with the other fronts by
SO_REUSEPORT), every request handed to the model host over the channel it inherited.

    python -m gateway.front_processes.main --channel-fd N [--log-level info]

Started by the host's FrontSupervisor, never by hand. It serves until the host says
"stop", or until SIGTERM/SIGINT: either way it turns unready, refuses new requests,
answers those in flight, and exits. When the host is gone it exits at once: without the
models there is nothing to serve.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pickle
import signal
import socket
import sys

from accel_base.cpu import share_cores
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel
from gateway.front_processes.remote import RemoteCore
from gateway.listeners import Listeners, event_loop_factory
from gateway.operation import heap

log = logging.getLogger("accel_gateway")

HELLO_TIMEOUT_S = 30.0


async def _hello(sock: socket.socket) -> tuple:
    """The host's first message: ("hello", index, pickled options, server metadata)."""
    loop = asyncio.get_running_loop()
    arrived: asyncio.Future = loop.create_future()

    def readable() -> None:
        try:
            message, _ = wire.receive(sock, bytearray(wire.MAX_MESSAGE_BYTES))
        except BlockingIOError:
            return
        except (EOFError, OSError, ValueError) as exc:
            arrived.set_exception(SystemExit(f"front: no hello from the host: {exc}"))
        else:
            arrived.set_result(message)
        loop.remove_reader(sock.fileno())

    loop.add_reader(sock.fileno(), readable)
    try:
        return await asyncio.wait_for(arrived, HELLO_TIMEOUT_S)
    finally:
        loop.remove_reader(sock.fileno())


async def serve(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    kind, index, pickled, metadata = await _hello(sock)
    if kind != "hello":
        raise SystemExit(f"front: the host's first message was {kind!r}, not hello")
    options = pickle.loads(pickled)
    options.log.apply()  # the server's format and levels
    share_cores(options.workers)  # every front holds copies of the same models
    core = RemoteCore(
        metadata, options.admin_token, options.shed_lag_ms, options.allow_shared_memory
    )
    stop = asyncio.Event()  # the host says stop (the whole server drains)
    alone = asyncio.Event()  # a signal to this front only, as far as it knows
    drain_s = options.drain_seconds
    listeners = Listeners(core, options, reuse_port=True)

    def on_control(message: tuple) -> None:
        nonlocal drain_s
        if message[0] == "serving":
            core.serving = bool(message[1])
            asyncio.ensure_future(listeners.set_serving(core.ready()))
        elif message[0] == "stop":
            drain_s = float(message[1])
            stop.set()

    def host_gone() -> None:
        core.host_gone()
        stop.set()

    core.on_control = on_control
    core.channel = Channel(sock, core.on_message, host_gone)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, alone.set)
    context = options.tls.ssl_context() if options.tls else None
    listeners.bind()
    await listeners.start(context)
    shedding = asyncio.ensure_future(core.shedder.watch()) if options.shed_lag_ms > 0 else None
    await listeners.set_serving(core.ready())
    log.debug("front %d serving HTTP %s:%d and gRPC %s", index, options.host,
              options.http_port, listeners.grpc_address)  # fmt: skip
    await asyncio.wait(
        [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(alone.wait())],
        return_when=asyncio.FIRST_COMPLETED,
    )
    # Drain: unready and refusing at once; the host answers what is in flight.
    core.stopping = True
    await listeners.set_serving(False)
    if not stop.is_set():
        # Stopping alone, this front stops listening at once, so that new connections
        # go to the other fronts rather than get 503s here.
        listeners.stop_accepting(drain_s)
    if not core.channel.closed and not await core.in_flight.wait_idle(drain_s):
        log.warning("front %d: %d request(s) still in flight after the drain",
                    index, core.in_flight.count)  # fmt: skip
    await listeners.stop(1.0)
    if shedding is not None:
        shedding.cancel()
    await core.copies.close()
    core.channel.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s front: %(message)s"
    )
    heap.keep_freed_buffers()  # as the server's own process (gateway/run.py)
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(serve(args.channel_fd))


if __name__ == "__main__":
    sys.exit(main())
