"""Triton's `model_warmup`: samples a version runs on every instance before it serves.

Each sample names a batch size, how to fill each input (`zero_data`, `random_data`, or
`input_data_file`: one row's raw bytes in the model's `warmup/` directory, BYTES as
length-prefixed elements) and how many times to run (`count`, 0 meaning once). They are
read and checked when the version loads (a bad sample fails the load, named), run on
every instance once it is loaded, before the version reports READY, and stand in for the
zeros batch that placement measures memory with (placement/warm_up.py). A sequence
model's control and state inputs that a sample leaves out are filled as for a sequence
of one request. A decoupled model refuses samples: its responses would have no stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accel_base.batch import BatchShapeError, padded_size
from accel_base.datatypes import (
    NUMPY_DTYPES,
    datatype_of,
    deserialize_bytes,
    element_count,
    v2_datatype,
)
from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.scheduling.per_request import run_requests
from gateway.core.scheduling.sequence.controls import sequence_of_one

log = logging.getLogger(__name__)
WARMUP_DIR = "warmup"  # under the model's directory, as Triton's
# Bounds on the zeros batch (a failure or a timeout there is only logged) and on a
# model's own samples (past it, the load fails).
ZEROS_TIMEOUT_S = 120.0
SAMPLES_TIMEOUT_S = 600.0
RANDOM_SEED = 0  # random_data is the same on every load and every instance


@dataclass(frozen=True)
class Sample:
    name: str
    runs: int
    rows: int  # the batch size; 0 for a model without batching
    feed: dict[str, np.ndarray]


def read_samples(config: mc.ModelConfig, model_dir: Path) -> list[Sample]:
    """The config's warm-up samples with their data, checked against its inputs (blocking:
    a sample may read a file). InvalidArgument names the sample and what is wrong."""
    if config.model_warmup and config.model_transaction_policy.decoupled:
        raise InvalidArgument(
            f"model '{config.name}': model_warmup is not supported for a decoupled model "
            "(its responses would have no stream to go to); remove model_warmup"
        )
    samples = []
    for index, sample in enumerate(config.model_warmup):
        if sample.batch_size == 0:  # as Triton: a sample of no rows is not run
            log.info("model '%s': warm-up sample '%s' has batch_size 0 and is skipped",
                     config.name, sample.name or f"#{index}")  # fmt: skip
            continue
        samples.append(_sample(config, model_dir, index, sample))
    return samples


def _sample(config: mc.ModelConfig, model_dir: Path, index: int, sample: Any) -> Sample:
    name = sample.name or f"#{index}"
    where = f"model '{config.name}': warm-up sample '{name}'"
    batching = config.max_batch_size > 0
    if batching and sample.batch_size > config.max_batch_size:
        raise InvalidArgument(
            f"{where}: batch_size {sample.batch_size} is over the model's max_batch_size "
            f"{config.max_batch_size}"
        )
    if not batching and sample.batch_size > 1:
        raise InvalidArgument(
            f"{where}: batch_size {sample.batch_size}, but the model does not batch "
            "(max_batch_size 0): give batch_size 1"
        )
    rows = sample.batch_size if batching else 0
    declared = {t.name: (v2_datatype(t.data_type), tuple(t.dims)) for t in config.input}
    filled = sequence_of_one(config, max(rows, 1), batching)
    unknown = sorted(set(sample.inputs) - set(declared) - set(filled))
    if unknown:
        raise InvalidArgument(
            f"{where}: the model has no input {', '.join(map(repr, unknown))}; its inputs "
            f"are {', '.join(map(repr, declared))}"
        )
    missing = [t.name for t in config.input if t.name not in sample.inputs and not t.optional]
    if missing:
        raise InvalidArgument(
            f"{where} gives no data for input {', '.join(map(repr, missing))}; every input "
            "the model needs must have zero_data, random_data or input_data_file"
        )
    feed = {k: v for k, v in filled.items() if k not in sample.inputs}
    rng = np.random.default_rng(RANDOM_SEED)
    for input_name, given in sorted(sample.inputs.items()):
        what = f"{where}, input '{input_name}'"
        datatype = v2_datatype(given.data_type)
        expected = declared.get(input_name)
        if expected is None:  # a control or state input: its datatype as the server fills it
            expected = (datatype_of(filled[input_name]), tuple(given.dims))
        _check_spec(what, datatype, tuple(given.dims), *expected)
        row = _row(what, given, datatype, tuple(given.dims), model_dir, rng)
        feed[input_name] = np.stack([row] * rows) if rows else row
    for array in feed.values():  # the same arrays on every run: none may change them
        array.flags.writeable = False
    return Sample(name, max(sample.count, 1), rows, feed)


def _check_spec(
    what: str, datatype: str, dims: tuple[int, ...], want_type: str, want_dims: tuple[int, ...]
) -> None:
    if datatype != want_type:
        raise InvalidArgument(f"{what}: data_type TYPE_{datatype}, but the model's input is "
                              f"TYPE_{want_type}")  # fmt: skip
    fits = len(dims) == len(want_dims) and all(
        d >= 0 and (w < 0 or d == w) for d, w in zip(dims, want_dims, strict=True)
    )
    if not fits:
        raise InvalidArgument(
            f"{what}: dims {list(dims)} do not fit the model's {list(want_dims)} (one row, "
            "without the batch dimension; -1 in the model's takes any size)"
        )


def _row(
    what: str, given: Any, datatype: str, dims: tuple[int, ...], model_dir: Path,
    rng: np.random.Generator,
) -> np.ndarray:  # fmt: skip
    """One row of an input, as the sample says to fill it."""
    kind = given.WhichOneof("input_data_type")
    count = element_count(dims)
    if kind == "input_data_file":
        return _from_file(what, model_dir / WARMUP_DIR / given.input_data_file, datatype, dims)
    if kind is None:
        raise InvalidArgument(f"{what} needs one of zero_data, random_data, input_data_file")
    if datatype == "BYTES":
        if kind == "zero_data":
            return np.full(dims, b"", dtype=object)
        letters = rng.integers(ord("a"), ord("z") + 1, size=(count, 8), dtype=np.uint8)
        return np.array([bytes(r) for r in letters], dtype=object).reshape(dims)
    dtype = NUMPY_DTYPES[datatype]
    if kind == "zero_data":
        return np.zeros(dims, dtype)
    if dtype.kind == "f" or datatype == "BF16":  # BF16 lives as uint16 bit patterns
        values = rng.random(count, dtype=np.float32)
        if datatype == "BF16":
            return (values.view(np.uint32) >> 16).astype(np.uint16).reshape(dims)
        return values.astype(dtype).reshape(dims)
    return rng.integers(0, 2 if dtype.kind == "b" else 100, size=dims).astype(dtype)


def _from_file(what: str, path: Path, datatype: str, dims: tuple[int, ...]) -> np.ndarray:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(
            f"{what}: cannot read input_data_file {path.name!r} in the model's {WARMUP_DIR}/ "
            f"directory: {exc.strerror}"
        ) from None
    count = element_count(dims)
    if datatype == "BYTES":
        # Longer is fine, as for fixed-size types: the row is its first elements.
        return deserialize_bytes(raw, count, what, rest_allowed=True).reshape(dims)
    dtype = NUMPY_DTYPES[datatype]
    needed = count * dtype.itemsize
    if len(raw) < needed:  # longer is fine, as Triton: the row is its first bytes
        raise InvalidArgument(
            f"{what}: input_data_file {path.name!r} holds {len(raw)} bytes, but one row of "
            f"TYPE_{datatype} {list(dims)} is {needed}"
        )
    return np.frombuffer(raw[:needed], dtype.newbyteorder("<")).astype(dtype).reshape(dims)


async def run_samples(
    model: str, instances: list[Any], samples: list[Sample], outputs: list[str],
    per_request: bool,
) -> None:  # fmt: skip
    """Each sample, `runs` times, on every instance; the first failure raises, naming the
    sample and the instance. Bounded by SAMPLES_TIMEOUT_S in all."""
    try:
        async with asyncio.timeout(SAMPLES_TIMEOUT_S):
            for instance in instances:
                for sample in samples:
                    for _ in range(sample.runs):
                        await _run(model, instance, sample, outputs, per_request)
    except TimeoutError:
        raise Unavailable(
            f"model '{model}': its warm-up samples took over {SAMPLES_TIMEOUT_S:g} s"
        ) from None


async def _run(
    model: str, instance: Any, sample: Sample, outputs: list[str], per_request: bool
) -> None:
    where = f"model '{model}': warm-up sample '{sample.name}' failed on instance {instance.name}"
    try:
        if not per_request:
            await instance.run(_padded(sample, instance.allowed_batch_sizes), outputs)
            return
        infos = _requests(sample, outputs)
        _, _, failures = await run_requests(instance, sample.feed, outputs, infos, model)
    except GatewayError as exc:
        raise Unavailable(f"{where}: {exc.message}") from None
    except Exception as exc:  # the backend's own failure
        raise Unavailable(f"{where}: {type(exc).__name__}: {exc}") from None
    if failures:
        raise Unavailable(f"{where}: {next(iter(failures.values())).message}")


def _padded(sample: Sample, allowed: tuple[int, ...] | None) -> dict[str, np.ndarray]:
    """The sample's feed grown to a batch size a compiled backend allows (its last row
    repeated), as the batcher pads a batch."""
    if not sample.rows or not allowed or sample.rows in allowed:
        return sample.feed
    try:
        rows = padded_size(sample.rows, allowed)
    except BatchShapeError:  # more rows than any allowed size: the backend says why
        return sample.feed
    return {k: np.concatenate([v, v[-1:].repeat(rows - sample.rows, axis=0)])
            for k, v in sample.feed.items()}  # fmt: skip


def _requests(sample: Sample, outputs: list[str]) -> list[tuple]:
    """As Triton sends a sample to a per-request backend: one request of one row each
    (workers/protocol.py's request tuples)."""
    return [(1, tuple(outputs), {}, f"warmup-{sample.name}-{i}", 0, "", "")
            for i in range(max(sample.rows, 1))]  # fmt: skip


def warm_worker(
    model: str, samples: list[Sample], outputs: list[str], per_request: bool, worker: Any,
    allowed: tuple[int, ...] | None,
) -> None:  # fmt: skip
    """The samples on a restarted instance's new worker process (workers.client's), before
    it serves (blocking: the restart's thread runs it); raises Unavailable on a failure."""
    deadline = time.monotonic() + SAMPLES_TIMEOUT_S  # for them all, as at the load
    for sample in samples:
        where = f"model '{model}': warm-up sample '{sample.name}' failed on a new worker"
        feed = sample.feed if per_request else _padded(sample, allowed)
        for _ in range(sample.runs):
            worker.send_run(feed, outputs, _requests(sample, outputs) if per_request else None)
            try:
                reply = worker.reply_within(max(deadline - time.monotonic(), 0.0))
            except Exception as exc:  # the worker's error, or its end
                raise Unavailable(f"{where}: {exc}") from None
            if reply is None:
                raise Unavailable(f"{where}: no answer in {SAMPLES_TIMEOUT_S:g} s")
            if reply[2]:  # a per-request run's failed requests: (index, kind, message)
                raise Unavailable(f"{where}: {reply[2][0][2]}")
