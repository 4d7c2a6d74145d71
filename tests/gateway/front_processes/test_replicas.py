"""The host's Replicas and the fronts' FrontCopies on one event loop, joined by real
channels: a load copies a CPU model into every front before it is ready, requests for it
are answered by the front's copy, statistics sum the copies, an unload drops every copy,
and a copy that fails (a front speaking the wire by hand here) fails the load."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from accel_base.errors import Unavailable
from gateway.core.inference import InferRequest, Tensor
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel
from gateway.front_processes.host import FrontLink
from gateway.front_processes.remote import RemoteCore
from gateway.front_processes.replicas import Replicas
from models import simple
from models.config_text import DynamicBatching


@pytest.fixture(scope="module")
def repository_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("replicas") / "repository"
    simple.build(path)
    simple.build(path, "batched", DynamicBatching())
    return path


def request(model: str, value: int, version: str = "") -> InferRequest:
    data = np.full((1, 16), value, dtype=np.int32)
    inputs = [Tensor("INPUT0", "INT32", data), Tensor("INPUT1", "INT32", np.ones_like(data))]
    return InferRequest(model, version, id=f"id{value}", inputs=inputs)


async def crossed() -> None:
    """Messages sent this turn have crossed their channels (a routes message follows a
    load: a front serves through the host until it arrives)."""
    await asyncio.sleep(0.05)


async def received(peer, kind: str) -> tuple:
    """The first message of `kind` that a scripted front's end of the channel receives."""
    buffer = bytearray(wire.MAX_MESSAGE_BYTES)
    while True:
        try:
            batch, _ = wire.receive(peer, buffer)
        except BlockingIOError:
            await asyncio.sleep(0.01)
            continue
        for message in batch if isinstance(batch, list) else [batch]:
            if message[0] == kind:
                return message


class Joined:
    """The host's core and Replicas, and a RemoteCore for each front."""

    def __init__(self, core: InferenceCore, replicas: Replicas, fronts: list) -> None:
        self.core = core
        self.replicas = replicas
        self.fronts = fronts


def run(repository_path: Path, scenario, scripted: int = 0) -> None:
    """`scenario(joined, peers)` with two real fronts, plus `scripted` fronts whose channel
    ends (sockets) the scenario reads and answers itself."""

    async def main():
        repository = ModelRepository(repository_path, control_mode="explicit")
        core = InferenceCore(repository)
        links, fronts, peers = [], [], []
        for index in range(2 + scripted):
            host_end, front_end = wire.channel_pair()
            link = FrontLink(index, core)
            link.attach(Channel(host_end, link.on_message, lambda: None))
            links.append(link)
            if index < 2:
                front = RemoteCore({}, None, 0.0)
                front.channel = Channel(front_end, front.on_message, front.host_gone)
                front.serving = True
                fronts.append(front)
            else:
                peers.append(front_end)
        replicas = Replicas(repository, links, lambda: True)
        repository.copies = replicas
        for link in links:
            link.on_reply = replicas.on_reply
            replicas.attached(link)
        try:
            await scenario(Joined(core, replicas, fronts), peers)
        finally:
            await repository.unload_all()
            for front in fronts:
                await front.copies.close()
                front.channel.close()
            for link in links:
                link.channel.close()
            for peer in peers:
                peer.close()

    asyncio.run(main())


def test_a_load_copies_the_model_into_every_front_which_serves_it_itself(repository_path):
    async def scenario(joined, _):
        await joined.core.load_model("batched", None)
        await crossed()
        for front in joined.fronts:
            copy = front.copies.route("batched", "")
            assert copy is not None and copy.version == 1
            assert front.copies.route("batched", "1") is copy
            assert front.copies.route("batched", "01") is copy
            assert front.copies.route("batched", "2") is None  # the host says it is unknown
            assert front.copies.route("simple", "") is None  # not loaded
        answers = [await f.infer(request("batched", 5)) for f in joined.fronts for _ in "ab"]
        for answer in answers:
            np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 16), 6))
        # No request crossed to the host; its statistics count the fronts' four.
        host_model = joined.core.repository.get("batched")
        assert host_model.stats.success.count == 0
        (row,) = await joined.core.statistics("batched")
        assert row["inference_stats"]["success"]["count"] == 4
        assert sorted(host_model.copy_stats) == [(0, 1), (1, 1)]

    run(repository_path, scenario)


def test_an_unload_drops_every_copy_and_requests_go_to_the_host(repository_path):
    async def scenario(joined, _):
        await joined.core.load_model("simple", None)
        await joined.fronts[0].infer(request("simple", 1))
        await joined.core.unload_model("simple", None)
        await crossed()
        for front in joined.fronts:
            assert front.copies.route("simple", "") is None and not front.copies.models
        with pytest.raises(Exception, match="simple"):  # the host's own word: not loaded
            await joined.fronts[1].infer(request("simple", 1))

    run(repository_path, scenario)


def test_a_copy_that_fails_in_one_front_fails_the_load_everywhere(repository_path):
    async def scenario(joined, peers):
        async def answer_copy_with_failure() -> None:
            copy = await received(peers[0], "copy")
            peers[0].send(wire.encode(("copied", copy[1], "no memory left for the copy")))

        answering = asyncio.ensure_future(answer_copy_with_failure())
        with pytest.raises(Unavailable, match="front 2: no memory left for the copy"):
            await joined.core.load_model("simple", None)
        await answering
        assert not await joined.core.model_ready("simple")
        for front in joined.fronts:  # the copies that did load are gone again
            assert not front.copies.models and front.copies.route("simple", "") is None

    run(repository_path, scenario, scripted=1)


def test_a_front_gone_during_a_copy_is_not_waited_for(repository_path):
    async def scenario(joined, peers):
        loading = asyncio.ensure_future(joined.core.load_model("simple", None))
        await received(peers[0], "copy")
        joined.replicas.links[2].channel.close()  # the silent front died: it gets
        joined.replicas.detached(2)  # copies when it is back (and is not asked to drop them)
        await asyncio.wait_for(loading, 60)
        assert await joined.core.model_ready("simple")

    run(repository_path, scenario, scripted=1)


def test_fronts_send_requests_to_the_host_while_it_logs_or_traces_each(repository_path):
    async def scenario(joined, _):
        await joined.core.load_model("simple", None)
        joined.replicas.local = lambda: False  # as when the access log is on
        joined.replicas.settings_changed()
        await crossed()
        assert joined.fronts[0].copies.route("simple", "") is None
        await joined.fronts[0].infer(request("simple", 2))
        assert joined.core.repository.get("simple").stats.success.count == 1  # the host's

    run(repository_path, scenario)


def test_a_copy_dropped_while_it_loads_is_closed_once_loaded(repository_path):
    async def scenario(joined, _):
        from accel_base.proto import model_config_pb2 as mc
        from gateway.core.model_config import read_config

        front = joined.fronts[0]
        config = read_config(repository_path / "simple").SerializeToString()
        assert isinstance(config, bytes) and mc.ModelConfig.FromString(config).name == "simple"
        copy = ("copy", 99, str(repository_path / "simple"), 1, config, 1, 16, None, 0)
        front.copies.on_message(copy)
        front.copies.on_message(("drop", 99, 0.0))  # the host unloaded it meanwhile
        for _ in range(500):
            if not front.copies._loading:
                break
            await asyncio.sleep(0.01)
        assert not front.copies._loading and 99 not in front.copies.models

    run(repository_path, scenario)
