"""A front (RemoteCore) and the model host (FrontLink over a real InferenceCore) on one
event loop, joined by a real channel: requests gathered in one turn travel as bundles,
and every caller hears about its own request, as it would alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from accel_base.errors import Cancelled, Internal, InvalidArgument
from gateway.core.inference import InferRequest, Tensor
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel
from gateway.front_processes.host import FrontLink
from gateway.front_processes.remote import RemoteCore
from models import simple
from models.config_text import DynamicBatching


@pytest.fixture(scope="module")
def repository_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bundles") / "repository"
    simple.build(path)  # no batcher: never bundled
    simple.build(path, "batched", DynamicBatching())
    return path


def request(model: str, value: int, width: int = 16, request_id: str = "") -> InferRequest:
    data = np.full((1, width), value, dtype=np.int32)
    inputs = [Tensor("INPUT0", "INT32", data), Tensor("INPUT1", "INT32", np.ones_like(data))]
    return InferRequest(model, id=request_id or f"id{value}", inputs=inputs)


def run(repository_path: Path, scenario) -> None:
    """`scenario(front, link, core)` with the pair joined, then both taken down."""

    async def main():
        repository = ModelRepository(repository_path)
        await repository.load_startup_models([])
        core = InferenceCore(repository)
        host_end, front_end = wire.channel_pair()
        link = FrontLink(0, core)
        link.attach(Channel(host_end, link.on_message, lambda: None))
        front = RemoteCore({}, None, 0.0)
        front.channel = Channel(front_end, front.on_message, front.host_gone)
        front.serving = True
        try:
            await scenario(front, link, core)
        finally:
            front.channel.close()
            link.channel.close()
            await repository.unload_all()

    asyncio.run(main())


async def hinted(front: RemoteCore, model: str) -> None:
    """One request alone, then the host's word on bundles for `model` is in."""
    await front.infer(request(model, 0))
    for _ in range(100):
        if (model, "") in front.bundler.rows:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the host never said whether the model takes bundles")


def success_count(core: InferenceCore, model: str) -> tuple[int, int]:
    stats = core.repository.get(model, "").stats
    return stats.success.count, stats.fail.count


def test_one_turns_requests_go_as_one_bundle_and_each_gets_its_answer(repository_path):
    async def scenario(front, link, core):
        await hinted(front, "batched")
        answers = await asyncio.gather(*(front.infer(request("batched", v)) for v in range(1, 13)))
        for value, answer in enumerate(answers, start=1):
            assert answer.id == f"id{value}"
            np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 16), value + 1))
        # 12 requests, 8 rows a bundle at most: two bundles, counted as 12 requests.
        assert (link.bundles, link.bundled, link.requests) == (2, 12, 13)
        assert success_count(core, "batched") == (13, 0)

    run(repository_path, scenario)


def test_a_model_without_a_batcher_gets_no_bundles_even_on_a_stale_word(repository_path):
    async def scenario(front, link, core):
        await hinted(front, "simple")
        assert front.bundler.rows[("simple", "")][0] == 0
        front.bundler.rows[("simple", "")] = (8, 1e18)  # as if the model had batched
        answers = await asyncio.gather(*(front.infer(request("simple", v)) for v in range(4)))
        assert [a.id for a in answers] == ["id0", "id1", "id2", "id3"]
        assert link.bundles == 0 and link.requests == 5
        assert front.bundler.rows[("simple", "")][0] == 0  # the host's answer set it right
        assert success_count(core, "simple") == (5, 0)

    run(repository_path, scenario)


def test_a_malformed_bundle_fails_each_member_with_its_own_words_counted_once(repository_path):
    async def scenario(front, link, core):
        await hinted(front, "batched")
        wrong = [front.infer(request("batched", v, width=15)) for v in range(5)]
        errors = await asyncio.gather(*wrong, return_exceptions=True)
        for error in errors:
            assert isinstance(error, InvalidArgument)
            assert "got [1,15]" in error.message, error.message
        assert link.bundles == link.bundled == 0 and link.requests == 6
        assert success_count(core, "batched") == (1, 5)

    run(repository_path, scenario)


def test_a_member_whose_caller_left_is_not_sent_and_the_rest_are_answered(repository_path):
    async def scenario(front, link, core):
        await hinted(front, "batched")
        tasks = [asyncio.ensure_future(front.infer(request("batched", v))) for v in range(4)]
        await asyncio.sleep(0)  # every member waits in this turn's bundle
        tasks[1].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[1], asyncio.CancelledError)
        assert [r.id for i, r in enumerate(results) if i != 1] == ["id0", "id2", "id3"]
        assert link.requests == 4 and link.bundles == 1
        assert not front._waiting and not front.bundler._sent and not front.bundler._bundle_of

    run(repository_path, scenario)


def test_a_disconnected_member_stops_waiting_and_a_bundle_nobody_waits_for_is_cancelled(
    repository_path,
):
    async def scenario(front, link, core):
        await hinted(front, "batched")
        cancels = []
        sent = front.channel.send

        def watching(message, arena=None):
            if message[0] == "cancel":
                cancels.append(message[1])
            sent(message, arena)

        front.channel.send = watching
        gone = {"a": False, "b": False}
        members = []
        for name in gone:
            one = request("batched", 1, request_id=name)
            one.client_gone = lambda name=name: gone[name]
            members.append(asyncio.ensure_future(front.infer(one)))
        await asyncio.sleep(0)  # both leave in one bundle at the end of this turn
        await asyncio.sleep(0)
        (bundle,) = front.bundler._sent
        assert front.bundler.client_gone(front.bundler._sent[bundle][0][0])
        assert not cancels  # the other member still waits
        for member, _ in list(front.bundler._sent[bundle]):
            front.bundler.client_gone(member)
        results = await asyncio.gather(*members, return_exceptions=True)
        assert all(isinstance(r, Cancelled) for r in results)
        assert cancels == [bundle]

    run(repository_path, scenario)


def test_a_bundle_that_cannot_be_sent_fails_its_members_not_the_turns_others(
    repository_path, monkeypatch
):
    async def scenario(front, link, core):
        await hinted(front, "batched")
        packed = wire.pack_tensors

        def failing(tensors):
            if tensors[0].data.shape[0] > 1:  # a bundle's merged rows
                raise OSError("no memory for an arena")
            return packed(tensors)

        monkeypatch.setattr(wire, "pack_tensors", failing)
        bundled = [front.infer(request("batched", v)) for v in range(3)]
        alone = front.infer(request("simple", 7))  # another key in the same turn
        results = await asyncio.gather(*bundled, alone, return_exceptions=True)
        assert all(isinstance(r, Internal) and "no memory" in r.message for r in results[:3])
        assert results[3].id == "id7"
        assert not front._waiting and not front.bundler._sent

    run(repository_path, scenario)
