"""The gateway's HTTP/2 gRPC server against grpc's own client, over 127.0.0.1: calls of
every shape, statuses and metadata, deadlines, cancellation, compression, messages past
every flow-control window, and limits."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.launch import free_port
from gateway.listeners import listen
from gateway.protocols.grpc.h2.server import H2Server

SERVICE = "test.Echo"
LIMIT = 8 * 1024 * 1024  # the server's largest request message


async def _echo(request: bytes, context) -> bytes:
    return request


async def _length(request: bytes, context) -> bytes:
    return str(len(request)).encode()


async def _sleepy(request: bytes, context) -> bytes:
    await asyncio.sleep(float(request.decode()))
    return b"woke"


async def _fail(request: bytes, context) -> bytes:
    context.set_trailing_metadata((("retry-hint", "later"),))
    await context.abort(grpc.StatusCode.UNAVAILABLE, "down for now: 100% ünïcode")


async def _metadata(request: bytes, context) -> bytes:
    found = dict(context.invocation_metadata())
    remaining = context.time_remaining()
    fields = (found.get("user"), found.get("blob-bin"), found.get("tenant-id"), remaining)
    return "|".join(map(str, fields[:3])).encode() + f"|{remaining is not None}".encode()


async def _crash(request: bytes, context) -> bytes:
    raise ValueError("a bug")


async def _unimplemented(request: bytes, context) -> bytes:
    context.set_code(grpc.StatusCode.UNIMPLEMENTED)  # as grpc's generated servicer does
    context.set_details("Method not implemented!")
    raise NotImplementedError("Method not implemented!")


CHATS = {"entered": 0, "left": 0}


async def _chat(requests, context):
    CHATS["entered"] += 1
    try:
        async for request in requests:
            yield request.upper()
    finally:
        CHATS["left"] += 1


async def _lengths(requests, context):
    async for request in requests:
        yield str(len(request)).encode()


async def _count(request: bytes, context) -> None:
    for k in range(int(request.decode())):
        await context.write(str(k).encode())


HANDLERS = {
    "Echo": grpc.unary_unary_rpc_method_handler(_echo),
    "Length": grpc.unary_unary_rpc_method_handler(_length),
    "Sleepy": grpc.unary_unary_rpc_method_handler(_sleepy),
    "Fail": grpc.unary_unary_rpc_method_handler(_fail),
    "Metadata": grpc.unary_unary_rpc_method_handler(_metadata),
    "Crash": grpc.unary_unary_rpc_method_handler(_crash),
    "Unimplemented": grpc.unary_unary_rpc_method_handler(_unimplemented),
    "Chat": grpc.stream_stream_rpc_method_handler(_chat),
    "Lengths": grpc.stream_stream_rpc_method_handler(_lengths),
    "Count": grpc.unary_stream_rpc_method_handler(_count),
}


def open_streams(server: H2Server) -> int:
    return sum(len(c.streams) for c in server.connections)


async def until(condition, timeout_s: float = 10.0) -> None:
    """Wait for a state the server reaches on its own time; the deadline is generous,
    since reaching it is a failure, never a measurement."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def serve(scenario, max_streams: int = 64, idle_s: float = 30.0):
    """Run `scenario(channel, server)` against a fresh server."""

    async def run():
        server = H2Server(LIMIT, max_streams, idle_s, max_connections=16)
        server.add_registered_method_handlers(SERVICE, HANDLERS)
        port = free_port()
        await server.start(listen("127.0.0.1", port, "gRPC"))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await scenario(channel, server)
        finally:
            await server.stop(1.0)

    return asyncio.run(run())


def unary(channel, name: str, **kwargs):
    return channel.unary_unary(f"/{SERVICE}/{name}")


def test_unary_calls_many_at_once_come_back_each_to_its_caller():
    async def scenario(channel, server):
        call = unary(channel, "Echo")
        return await asyncio.gather(*(call(str(k).encode()) for k in range(300)))

    assert serve(scenario) == [str(k).encode() for k in range(300)]


def test_statuses_details_and_trailing_metadata_reach_the_client():
    async def scenario(channel, server):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await unary(channel, "Fail")(b"")
        with pytest.raises(grpc.aio.AioRpcError) as crashed:
            await unary(channel, "Crash")(b"")
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await channel.unary_unary(f"/{SERVICE}/Nope")(b"")
        with pytest.raises(grpc.aio.AioRpcError) as unimplemented:
            await unary(channel, "Unimplemented")(b"")
        return failed.value, crashed.value, unknown.value, unimplemented.value

    failed, crashed, unknown, unimplemented = serve(scenario)
    assert unimplemented.code() == grpc.StatusCode.UNIMPLEMENTED
    assert failed.code() == grpc.StatusCode.UNAVAILABLE
    assert failed.details() == "down for now: 100% ünïcode"
    assert ("retry-hint", "later") in tuple(failed.trailing_metadata())
    assert crashed.code() == grpc.StatusCode.INTERNAL and "ValueError: a bug" in crashed.details()
    assert unknown.code() == grpc.StatusCode.UNIMPLEMENTED and "Nope" in unknown.details()


def test_the_handler_sees_the_callers_metadata_and_deadline():
    async def scenario(channel, server):
        metadata = (("user", "ada"), ("blob-bin", b"\x00\xff"), ("tenant-id", "7"))
        return await unary(channel, "Metadata")(b"", metadata=metadata, timeout=5)

    assert serve(scenario) == b"ada|b'\\x00\\xff'|7|True"


def test_a_call_past_its_deadline_ends_deadline_exceeded_and_the_server_goes_on():
    async def scenario(channel, server):
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await unary(channel, "Sleepy")(b"30", timeout=0.1)
        answer = await unary(channel, "Sleepy")(b"0", timeout=5)
        await until(lambda: open_streams(server) == 0)  # long before the 30 s sleep ends
        return late.value.code(), answer

    assert serve(scenario) == (grpc.StatusCode.DEADLINE_EXCEEDED, b"woke")


def test_a_call_the_client_cancels_is_forgotten_by_the_server():
    async def scenario(channel, server):
        call = unary(channel, "Sleepy")(b"30")
        await until(lambda: open_streams(server) == 1)
        call.cancel()
        await until(lambda: open_streams(server) == 0)  # long before the 30 s sleep ends
        return True

    assert serve(scenario)


def test_messages_past_every_window_flow_both_ways_whole():
    # grpc's client starts with 64 KiB windows; 3 MiB each way needs many WINDOW_UPDATEs
    # (and stays under its own 4 MiB limit on answers).
    big = bytes(range(256)) * (3 * 4096)

    async def scenario(channel, server):
        return await asyncio.gather(*(unary(channel, "Echo")(big) for _ in range(3)))

    assert serve(scenario) == [big] * 3


def test_compressed_requests_are_read():
    async def scenario(channel, server):
        call = unary(channel, "Echo")
        gzip = await call(b"z" * 100_000, compression=grpc.Compression.Gzip)
        deflate = await call(b"d" * 1000, compression=grpc.Compression.Deflate)
        return gzip, deflate

    assert serve(scenario) == (b"z" * 100_000, b"d" * 1000)


def test_a_message_past_the_limit_is_refused_resource_exhausted():
    async def scenario(channel, server):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await unary(channel, "Echo")(b"x" * (LIMIT + 1))
        # Compressed small, past the limit once inflated.
        with pytest.raises(grpc.aio.AioRpcError) as bomb:
            await unary(channel, "Echo")(b"\x00" * (LIMIT + 10), compression=grpc.Compression.Gzip)
        return refused.value, bomb.value, await unary(channel, "Echo")(b"ok")

    refused, bomb, after = serve(scenario)
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and str(LIMIT) in refused.details()
    assert bomb.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert after == b"ok"


def test_streams_both_ways_and_server_streaming():
    async def scenario(channel, server):
        chat = channel.stream_stream(f"/{SERVICE}/Chat")
        words = [b"a" * 300_000, b"b", b"c" * 70_000] * 5  # past the windows, in order

        async def requests():
            for word in words:
                yield word

        replies = [reply async for reply in chat(requests())]
        counted = [m async for m in channel.unary_stream(f"/{SERVICE}/Count")(b"5")]
        return replies == [w.upper() for w in words], counted

    assert serve(scenario) == (True, [b"0", b"1", b"2", b"3", b"4"])


def test_streams_past_the_connections_limit_are_refused_and_retried_by_grpc():
    async def scenario(channel, server):
        call = unary(channel, "Sleepy")
        # Past 4 open streams the server refuses; grpc waits for a stream and retries.
        return await asyncio.gather(*(call(b"0.05") for _ in range(12)))

    assert serve(scenario, max_streams=4) == [b"woke"] * 12


def test_an_idle_connection_is_closed_and_the_client_reconnects():
    async def scenario(channel, server):
        first = await unary(channel, "Echo")(b"1")
        await until(lambda: not server.connections)
        return first, await unary(channel, "Echo")(b"2")

    assert serve(scenario, idle_s=0.2) == (b"1", b"2")


def test_a_streaming_call_sent_a_message_past_the_limit_ends_and_its_handler_with_it():
    async def scenario(channel, server):
        chat = channel.stream_stream(f"/{SERVICE}/Chat")

        async def requests():
            yield b"fine"
            yield b"x" * (LIMIT + 1)

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in chat(requests()):
                pass
        await asyncio.sleep(0.1)
        return refused.value.code(), sum(len(c.streams) for c in server.connections)

    CHATS.update(entered=0, left=0)
    assert serve(scenario) == (grpc.StatusCode.RESOURCE_EXHAUSTED, 0)
    assert CHATS == {"entered": 1, "left": 1}


# Legitimate clients at the server's limits: none may trip a flood budget or the bound on
# what a connection holds, and none may wait on credit that never comes.


def test_many_calls_at_once_each_with_its_own_metadata_all_succeed():
    async def scenario(channel, server):
        call = unary(channel, "Echo")

        async def caller(k: int) -> int:
            done = 0
            for n in range(60):  # a trace id and request id new on every call
                metadata = (("traceparent", f"00-{k:016x}{n:016x}-{n:016x}-01"),
                            ("x-request-id", f"{k}-{n}-" + "r" * 24))  # fmt: skip
                done += await call(b"x" * 64, metadata=metadata, timeout=30) == b"x" * 64
            return done

        return await asyncio.gather(*(caller(k) for k in range(64)))

    assert serve(scenario) == [60] * 64


def test_large_messages_interleaved_on_one_connection_all_arrive():
    async def scenario(channel, server):
        call = unary(channel, "Length")  # each past half the window: credit withheld
        sizes = [int(LIMIT * 0.7)] * 3 + [LIMIT // 2] * 2  # until whole never came
        answers = await asyncio.gather(*(call(b"y" * n, timeout=60) for n in sizes))
        return [int(a) for a in answers], sizes

    got, sizes = serve(scenario)
    assert got == sizes


def test_a_streaming_call_whose_second_message_is_larger_than_credit_given_goes_on():
    async def scenario(channel, server):
        chat = channel.stream_stream(f"/{SERVICE}/Lengths")

        async def requests():
            yield b"a" * (LIMIT // 10)
            yield b"b" * (LIMIT - 1024)

        return [int(r) async for r in chat(requests(), timeout=60)]

    assert serve(scenario) == [LIMIT // 10, LIMIT - 1024]


def test_a_server_with_a_small_message_limit_serves():
    async def run():
        server = H2Server(32 * 1024, 8, 30.0, max_connections=4)
        server.add_registered_method_handlers(SERVICE, HANDLERS)
        port = free_port()
        await server.start(listen("127.0.0.1", port, "gRPC"))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await unary(channel, "Echo")(b"z" * 30_000, timeout=10)
        finally:
            await server.stop(1.0)

    assert asyncio.run(run()) == b"z" * 30_000


def test_a_stream_of_many_small_messages_is_not_taken_for_a_window_update_flood():
    # grpc's client credits each message of a streamed answer with a WINDOW_UPDATE or
    # two; a streamed answer has no trailers until its end.
    async def scenario(channel, server):
        chat = channel.stream_stream(f"/{SERVICE}/Chat")

        async def requests():
            for k in range(5000):
                yield b"m%d" % k

        return sum([1 async for _ in chat(requests(), timeout=60)])

    assert serve(scenario) == 5000
