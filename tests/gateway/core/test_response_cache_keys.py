"""The response cache's keys, bound and eviction (gateway/core/response_cache.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.cli import _options, build_parser
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.response_cache import (
    ENTRY_OVERHEAD,
    ResponseCache,
    answer_cached,
    cache_setting,
    check_cacheable,
    request_key,
)
from gateway.core.statistics import ModelStatistics


def request(values, request_id: str = "", **parameters) -> InferRequest:
    data = np.array(values, dtype=np.float32)
    return InferRequest("m", id=request_id, parameters=parameters,
                        inputs=[Tensor("X", "FP32", data)])  # fmt: skip


def answer(values) -> InferResponse:
    return InferResponse("m", "1", outputs=[Tensor("Y", "FP32", np.array(values, np.float32))])


def test_keys_hold_what_decides_the_answer_and_nothing_else():
    key, size = request_key("m", "1", 1, request([[1, 2]]))
    assert size == 8
    assert key == request_key("m", "1", 1, request([[1, 2]], "another id"))[0]
    # How the answer travels or when the request runs changes nothing
    assert key == request_key("m", "1", 1, request([[1, 2]], priority=1, timeout=5))[0]
    assert key != request_key("m", "2", 1, request([[1, 2]]))[0]
    assert key != request_key("m", "1", 2, request([[1, 2]]))[0]  # another load
    assert key != request_key("m", "1", 1, request([[1, 3]]))[0]
    assert key != request_key("m", "1", 1, request([1, 2]))[0]  # the shape
    assert key != request_key("m", "1", 1, request([[1, 2]], custom="x"))[0]
    wanted = request([[1, 2]])
    wanted.outputs = [RequestedOutput("Y", {"classification": 2})]
    assert key != request_key("m", "1", 1, wanted)[0]
    binary = request([[1, 2]])
    binary.outputs = [RequestedOutput("Y", {"binary_data": True})]
    plain = request([[1, 2]])
    plain.outputs = [RequestedOutput("Y")]
    assert request_key("m", "1", 1, binary)[0] == request_key("m", "1", 1, plain)[0]
    strings = InferRequest("m", inputs=[Tensor("S", "BYTES", np.array([b"ab"], dtype=object))])
    assert request_key("m", "1", 1, strings)[1] == 6  # length-prefixed, as on the wire


def test_a_hit_answers_with_its_own_id_and_a_copy_nobody_can_change():
    cache = ResponseCache(1 << 20)
    key, size = request_key("m", "1", 1, request([[1, 2]]))
    assert cache.lookup(key, request([[1, 2]])) is None
    produced = answer([[3.0]])
    cache.insert(key, size, produced)
    produced.outputs[0].data[0, 0] = 99  # the run's own array, reused by its producer
    hit = cache.lookup(key, request([[1, 2]], "second"))
    assert hit is not None and hit.id == "second"
    assert hit.outputs[0].data.tolist() == [[3.0]]
    assert not hit.outputs[0].data.flags.writeable
    hit.outputs[0].data = hit.outputs[0].data.reshape(-1)  # as TF Serving's front does
    again = cache.lookup(key, request([[1, 2]]))
    assert again is not None and again.outputs[0].data.shape == (1, 1)
    assert (cache.lookups, cache.hits, cache.misses, len(cache)) == (3, 2, 1, 1)


def test_the_cache_keeps_to_its_bytes_least_recently_used_first_out():
    entry = 8 + ENTRY_OVERHEAD + 4  # key bytes, overhead, one FP32 output
    cache = ResponseCache(3 * entry)
    keys = [request_key("m", "1", 1, request([[float(i), 0]])) for i in range(4)]
    for key, size in keys[:3]:
        cache.insert(key, size, answer([[1.0]]))
    assert cache.used_bytes == 3 * entry
    assert cache.lookup(keys[0][0], request([[0, 0]])) is not None  # now the most recent
    cache.insert(*keys[3], answer([[1.0]]))
    assert cache.evictions == 1 and cache.used_bytes == 3 * entry
    assert cache.lookup(keys[1][0], request([[1, 0]])) is None  # the least recent went
    assert cache.lookup(keys[0][0], request([[0, 0]])) is not None
    big = request_key("m", "1", 1, request(np.zeros((1, 1000))))
    cache.insert(*big, answer([[1.0]]))  # larger than the whole cache: not kept
    assert len(cache) == 3 and cache.evictions == 1
    cache.drop(2)  # another load's: nothing of these goes
    assert len(cache) == 3
    cache.drop(1)
    assert len(cache) == 0 and cache.used_bytes == 0


def test_answer_cached_counts_hits_and_misses_in_the_statistics():
    cache, stats = ResponseCache(1 << 20), ModelStatistics("m", "1")
    runs = []

    async def run(req: InferRequest) -> InferResponse:
        runs.append(req.id)
        produced = answer([[5.0], [6.0]])
        produced.id = req.id  # as the scheduler answers
        return produced

    async def main() -> list[InferResponse]:
        return [
            await answer_cached(cache, stats, 1, request([[1, 2], [3, 4]], str(i)), run)
            for i in range(3)
        ]

    answers = asyncio.run(main())
    assert runs == ["0"]
    assert [a.id for a in answers] == ["0", "1", "2"]
    assert stats.cache_hit.count == 2 and stats.cache_miss.count == 1
    assert stats.success.count == 2  # the hits: successes, but as Triton, no inferences
    assert stats.inference_count == 0 and stats.execution_count == 0  # (the run's: the scheduler's)
    row = stats.as_dict()["inference_stats"]
    assert row["cache_hit"]["count"] == 2 and row["cache_miss"]["count"] == 1


def test_cache_config_is_tritons_flag():
    def cache_bytes(*flags: str) -> int | None:  # as the server's options take them
        options = _options(build_parser().parse_args(["serve", *flags]), Path("."), None, None)
        return options.cache_bytes

    assert cache_bytes() is None
    assert cache_bytes("--cache-config", "local,size=1048576") == 1048576
    assert cache_bytes("--cache-config", "local,size=1", "--cache-config", "local,size=2") == 2
    assert cache_setting("local,size=1048576") == 1048576
    with pytest.raises(InvalidArgument, match="only the 'local' cache"):
        cache_setting("redis,host=x")
    with pytest.raises(InvalidArgument, match="takes size=BYTES"):
        cache_setting("local,size=big")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ("model_transaction_policy { decoupled: true }", "a decoupled model's answer"),
        ("sequence_batching { }", "depends on the requests before it"),
    ],
)
def test_models_whose_answer_is_not_the_requests_alone_refuse_the_cache(extra, reason):
    text = f'name: "m" response_cache {{ enable: true }} {extra}'
    with pytest.raises(InvalidArgument, match=reason):
        check_cacheable(text_format.Parse(text, mc.ModelConfig()))
    check_cacheable(text_format.Parse(f'name: "m" {extra}', mc.ModelConfig()))
