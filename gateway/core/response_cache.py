"""Triton's response cache: a model with `response_cache { enable: true }` answers a
request it answered before from memory, without running (`--cache-config local,size=N`).

The key is what decides the answer: the model and version, each input's name, datatype,
shape and bytes, the outputs asked for with their parameters, and the request's
parameters, less those that only say how the answer travels or when it runs (binary
data, shared memory, priority, timeout). Keys are compared whole, never by a hash alone,
so two requests share an entry only if they are the same. One cache serves every model,
bounded in bytes (each entry's key and output bytes), least recently used first out.
A cached model is served by the host process alone (gateway/core/copies.py).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from accel_base.datatypes import serialize_bytes
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse, Tensor
from gateway.core.statistics import ModelStatistics

log = logging.getLogger(__name__)

# Parameters that change how an answer travels or when a request runs, not what it says.
TRANSPORT = frozenset({
    "binary_data", "binary_data_size", "binary_data_output", "shared_memory_region",
    "shared_memory_byte_size", "shared_memory_offset", "priority", "timeout",
    "triton_enable_empty_final_response",
})  # fmt: skip
ENTRY_OVERHEAD = 256  # bytes an entry costs beyond its data: its objects and its slot


def cache_setting(value: str) -> int:
    """The bytes one of Triton's `--cache-config local,size=N` gives the cache."""
    name, _, setting = value.partition(",")
    if name != "local":
        raise InvalidArgument(
            f"--cache-config {value!r}: only the 'local' cache is built in "
            "(--cache-config local,size=BYTES)"
        )
    key, _, number = setting.partition("=")
    if key != "size" or not number.isdigit():
        raise InvalidArgument(
            f"--cache-config {value!r}: the local cache takes size=BYTES, nothing else"
        )
    return int(number)


# An answer kept: ((name, datatype, read-only array) of each output, the response's
# parameters as items, bytes booked). Plain tuples of numbers, text and arrays: the
# garbage collector stops tracking them, so a full cache costs its collections nothing.
_Entry = tuple[tuple[tuple[str, str, np.ndarray], ...], tuple[tuple[str, Any], ...], int]


class ResponseCache:
    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.used_bytes = 0
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self.lookups = self.hits = self.misses = self.insertions = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: tuple, request: InferRequest) -> InferResponse | None:
        """The cached answer to `request` (its own id), or None."""
        self.lookups += 1
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        # Tensors of its own: a front may replace a tensor's data (a reshape), never the
        # cache's (whose arrays nobody can write).
        outputs = [Tensor(name, datatype, data, {}) for name, datatype, data in entry[0]]
        return InferResponse(key[0], key[1], request.id, dict(entry[1]), outputs)

    def insert(self, key: tuple, key_bytes: int, response: InferResponse) -> None:
        """Keep `response` for `key`, making room by evicting the least recently used; an
        answer larger than the whole cache is not kept."""
        nbytes = key_bytes + ENTRY_OVERHEAD + sum(_nbytes(t.data) for t in response.outputs)
        if nbytes > self.size_bytes or key in self._entries:
            return
        outputs = tuple((t.name, t.datatype, _frozen(t.data)) for t in response.outputs)
        while self.used_bytes + nbytes > self.size_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.used_bytes -= evicted[2]
            self.evictions += 1
        self._entries[key] = (outputs, tuple(response.parameters.items()), nbytes)
        self.used_bytes += nbytes
        self.insertions += 1

    def drop(self, generation: int) -> None:
        """Free the answers of one load of a version (it was unloaded)."""
        self.drop_where(lambda key: key[2] == generation)

    def drop_where(self, unloaded: Callable[[tuple], bool]) -> None:
        for key in [k for k in self._entries if unloaded(k)]:
            self.used_bytes -= self._entries.pop(key)[2]


def next_generation() -> int:
    """A number for one load of a model version: keys carry it, so a version reloaded
    under the same number (new files) never answers from its last load's entries."""
    return next(_generations)


_generations = itertools.count(1)


def request_key(
    name: str, version: str, generation: Any, request: InferRequest
) -> tuple[tuple, int]:
    """The cache key of a request to `name` version `version` (`generation`: its load's
    number, or what else its answer depends on), and the key's size in bytes."""
    parts: list[Any] = [name, version, generation]
    size = 0
    for tensor in request.inputs:
        data = tensor.data
        raw = serialize_bytes(data) if data.dtype.hasobject else data.tobytes()
        size += len(raw)
        parts.append((tensor.name, tensor.datatype, data.shape, raw))
    outputs = request.outputs
    parts.append(tuple([(o.name, _kept(o.parameters)) for o in outputs]) if outputs else ())
    parts.append(_kept(request.parameters))
    return tuple(parts), size


def _kept(parameters: dict[str, Any]) -> tuple:
    if not parameters:
        return ()
    kept = [(k, repr(v)) for k, v in parameters.items() if k not in TRANSPORT]
    if not kept:  # the common case: binary_data and the like only
        return ()
    kept.sort()
    return tuple(kept)


def _frozen(array: np.ndarray) -> np.ndarray:
    """A copy nobody else holds or can change (an output may view a worker's arena)."""
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy


def _nbytes(array: np.ndarray) -> int:
    if array.dtype.hasobject:
        return sum(len(v) if isinstance(v, bytes | str) else 64 for v in array.flat)
    return array.nbytes


def check_cacheable(config: mc.ModelConfig) -> None:
    """Refuse response_cache where an answer depends on more than the request."""
    if not config.response_cache.enable:
        return
    if config.model_transaction_policy.decoupled:
        why = "a decoupled model's answer is a stream of responses"
    elif config.HasField("sequence_batching"):
        why = "a sequence model's answer depends on the requests before it"
    else:
        return
    raise InvalidArgument(
        f"model '{config.name}': response_cache cannot be enabled: {why}; remove it"
    )


def model_cache(config: mc.ModelConfig, cache: ResponseCache | None) -> ResponseCache | None:
    """The cache a loaded version answers from: the server's, where its config enables it."""
    if config.response_cache.enable and cache is None:
        log.warning("model '%s' enables response_cache, but the server has no cache: start "
                    "it with --cache-config local,size=BYTES", config.name)  # fmt: skip
    return cache if config.response_cache.enable else None


async def answer_cached(
    cache: ResponseCache, stats: ModelStatistics, generation: Any, request: InferRequest,
    run: Callable[[InferRequest], Awaitable[InferResponse]],
) -> InferResponse:  # fmt: skip
    """The cached answer to `request`, or `run(request)`'s, kept for the next."""
    start = time.perf_counter_ns()
    key, key_bytes = request_key(stats.name, stats.version, generation, request)
    response = cache.lookup(key, request)
    if response is not None:
        stats.record_cache_hit(time.perf_counter_ns() - start)
        return response
    looked = time.perf_counter_ns() - start
    response = await run(request)
    start = time.perf_counter_ns()
    cache.insert(key, key_bytes, response)
    stats.cache_miss.add(looked + time.perf_counter_ns() - start)
    return response
