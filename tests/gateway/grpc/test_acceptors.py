"""The extra call acceptors on a real grpc.aio server and client, over 127.0.0.1."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.grpc import acceptors
from gateway.grpc.acceptors import Acceptors
from gateway.launch import free_port

METHOD = "/test.Echo/Call"


def test_this_grpcio_has_what_the_acceptors_use():
    # A grpcio that moved its internals fails here, before the gateway silently falls back.
    assert acceptors.available()


def _server(handler, max_rpcs: int | None = None) -> tuple[grpc.aio.Server, dict, int]:
    server = grpc.aio.server(maximum_concurrent_rpcs=max_rpcs)
    handlers = {"Call": grpc.unary_unary_rpc_method_handler(handler)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    server.add_registered_method_handlers("test.Echo", handlers)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    return server, {METHOD: handlers["Call"]}, port


async def _echo(request: bytes, context) -> bytes:
    await asyncio.sleep(0.005)  # so that calls overlap
    return request


def test_many_calls_at_once_are_all_answered_most_through_the_acceptors():
    async def run() -> tuple[list[bytes], int, int]:
        server, hot, port = _server(_echo)
        await server.start()
        extra = Acceptors(server, hot, per_method=16, max_calls=1000)
        assert extra.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(METHOD)
            answers = await asyncio.gather(*(call(b"%d" % i) for i in range(500)))
        await server.stop(grace=1.0)
        await asyncio.sleep(0)  # the acceptors see the shutdown
        return answers, extra.accepted, extra.running

    answers, accepted, running = asyncio.run(run())
    assert answers == [b"%d" % i for i in range(500)]
    # 16 acceptors against the server's one outstanding request: most calls come here.
    assert accepted > 250
    assert running == 0  # a stopped server ends them


def test_calls_past_the_limits_are_refused_not_queued():
    async def run() -> list[grpc.StatusCode]:
        release = asyncio.Event()

        async def held(request: bytes, context) -> bytes:
            await release.wait()
            return request

        server, hot, port = _server(held, max_rpcs=1)
        await server.start()
        Acceptors(server, hot, per_method=8, max_calls=1).start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(METHOD)
            pending = [asyncio.ensure_future(call(b"x", timeout=10)) for _ in range(4)]
            # Refusals come back while the admitted calls are still held.
            await asyncio.wait(pending, timeout=2.0, return_when=asyncio.FIRST_COMPLETED)
            release.set()
            results = await asyncio.gather(*pending, return_exceptions=True)
        await server.stop(grace=1.0)
        return [
            r.code() if isinstance(r, grpc.aio.AioRpcError) else grpc.StatusCode.OK for r in results
        ]

    codes = asyncio.run(run())
    # One call admitted by each path at most (the server's limit and the acceptors'), the rest
    # refused at once.
    assert 1 <= codes.count(grpc.StatusCode.OK) <= 2
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 4 - codes.count(grpc.StatusCode.OK)


@pytest.mark.parametrize("change", ["no cython layer", "a changed signature"])
def test_without_the_internals_the_server_runs_as_grpc_ships_it(monkeypatch, change):
    if change == "no cython layer":
        monkeypatch.setattr(acceptors, "cygrpc", None)
    else:  # as if grpcio had renamed a parameter
        needs = {**acceptors._NEEDS, "_schedule_rpc_coro": ("coro", "state", "loop", "name")}
        monkeypatch.setattr(acceptors, "_NEEDS", needs)
    assert not acceptors.available()

    async def run() -> bytes:
        server, hot, port = _server(_echo)
        await server.start()
        assert not Acceptors(server, hot, per_method=4, max_calls=10).start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await channel.unary_unary(METHOD)(b"plain")
        await server.stop(grace=1.0)
        return answer

    assert asyncio.run(run()) == b"plain"
