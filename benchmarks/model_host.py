"""The model host's capacity: requests a second that one host process answers for `simple`
when its fronts cost nothing. N front processes together serve at most this (issue 15).

    .venv/bin/python -m benchmarks.model_host [--host-core 0] [--feeder-cores 1] [--feeders 1]
        [--window 128] [--seconds 5] [--batching] [--bundle K]

The host (this process, on --host-core) runs the gateway's own repository, InferenceCore,
FrontLink and Channel, as `--workers N` does. Feeder processes on --feeder-cores, one a
channel, stand in for the fronts: together they keep --window requests outstanding, as
already-encoded "infer" messages, and send a new one for each answer, the answers of one
read together (as a front gathers one turn's requests). With `--bundle K` (and
`--batching`), the feeders send K requests as one bundle of K rows
(gateway/front_processes/bundles.py), as fronts do with requests that meet in one turn: an answer
then counts K, and --window still counts requests. Printed: the host's answers per second,
against the in-process floor (ONNX Runtime at batch 1 on the host core) measured in the
same run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.perf import pin_to
from benchmarks.serving_simple import in_process_floor
from gateway.core.inference import InferRequest, Tensor
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel
from gateway.front_processes.host import FrontLink
from gateway.listeners import event_loop_factory
from models import simple
from models.config_text import DynamicBatching

WARMUP_S = 1.0


def infer_message(call: int, rows: int = 1) -> bytes:
    """An "infer" message for `simple`, or with `rows` above 1 a bundle of that many."""
    inputs = [
        Tensor("INPUT0", "INT32", np.tile(np.arange(16, dtype=np.int32), (rows, 1))),
        Tensor("INPUT1", "INT32", np.ones((rows, 16), dtype=np.int32)),
    ]
    if rows > 1:
        packed, arena = wire.pack_tensors(inputs)
        message = ("bundle", call, "simple", "", packed, [], rows)
    else:
        message, arena = wire.request_message(call, InferRequest("simple", inputs=inputs), None)
    assert arena is None  # small tensors travel inline
    return wire.encode(message)


def feed(fd: int, window: int, seconds: float, rows: int) -> None:
    """The feeder process: keep `window` requests outstanding for WARMUP_S + `seconds`;
    print the answers counted after the warm-up and the seconds they took."""
    import socket

    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    buffer = bytearray(wire.MAX_MESSAGE_BYTES)
    calls = itertools.count()
    sock.send(wire.join([infer_message(next(calls), rows) for _ in range(window)]))
    start = time.perf_counter()
    counted, mark, errors = 0, None, 0
    while True:
        message, arena = wire.receive(sock, buffer)
        answers = message if type(message) is list else [message]
        errors += sum(1 for answer in answers if answer[0] != "answer")
        now = time.perf_counter()
        if mark is None and now - start >= WARMUP_S:
            mark = now
        elif mark is not None:
            counted += len(answers) * rows
            if now - mark >= seconds:
                break
        sock.send(wire.join([infer_message(next(calls), rows) for _ in answers]))
    print(counted, now - mark, errors, flush=True)
    sock.close()


async def serve(repository_path: Path, host_ends: list) -> None:
    repository = ModelRepository(repository_path)
    await repository.load_startup_models([])
    core = InferenceCore(repository)
    open_channels = len(host_ends)
    closed = asyncio.Event()

    def on_close() -> None:
        nonlocal open_channels
        open_channels -= 1
        if not open_channels:
            closed.set()

    for index, host_end in enumerate(host_ends):
        link = FrontLink(index, core)
        link.attach(Channel(host_end, link.on_message, on_close))
    await closed.wait()
    await repository.unload_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-core", type=int, default=0)
    parser.add_argument("--feeder-cores", default="1", help="taskset list for the feeders")
    parser.add_argument("--feeders", type=int, default=1, help="channels, as --workers N has")
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batching", action="store_true", help="dynamic batching on `simple`")
    parser.add_argument(
        "--bundle", type=int, default=1, help="requests a bundle carries (needs --batching)"
    )
    parser.add_argument("--feed-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.feed_fd is not None:
        feed(args.feed_fd, args.window, args.seconds, args.bundle)
        return
    if args.bundle > 1 and not args.batching:
        parser.error("--bundle needs --batching: the host runs bundles for batching models only")
    if not 1 <= args.bundle <= simple.MAX_BATCH_SIZE:
        parser.error(f"--bundle must be 1 to {simple.MAX_BATCH_SIZE} (simple's max_batch_size)")
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        batching = DynamicBatching() if args.batching else None
        simple.build(repository, batching=batching)
        floor = in_process_floor(repository, args.host_core)
        host_ends, feeders = [], []
        for _ in range(args.feeders):
            host_end, front_end = wire.channel_pair()
            feeders.append(subprocess.Popen(
                ["taskset", "-c", args.feeder_cores, sys.executable, "-m",
                 "benchmarks.model_host", "--feed-fd", str(front_end.fileno()),
                 "--window", str(max(1, args.window // args.feeders // args.bundle)),
                 "--seconds", str(args.seconds), "--bundle", str(args.bundle)],
                pass_fds=[front_end.fileno()], stdout=subprocess.PIPE, text=True,
            ))  # fmt: skip
            front_end.close()
            host_ends.append(host_end)
        pin_to(args.host_core)
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve(repository, host_ends))
        reports = [f.communicate(timeout=60)[0].split() for f in feeders]
    rate = sum(int(counted) / float(elapsed) for counted, elapsed, _ in reports)
    errors = sum(int(e) for _, _, e in reports)
    print(f"\nfloor: ONNX Runtime in-process, batch 1: {floor:,.0f} /s")
    print(f"model host on core {args.host_core}, {args.feeders} channel(s), window "
          f"{args.window}, batching {'on' if args.batching else 'off'}, bundles of "
          f"{args.bundle}: {rate:,.0f} answers/s "
          f"({rate / floor:.3f} x floor, {1e6 / rate:.1f} us each), {errors} errors")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
