"""`tvm`: an ONNX model compiled by TVM for the instance's device (llvm on CPU, cuda on GPU).

The first load compiles one library per batch bucket (`backends.tvm_compile`) and keeps
them on disk; later loads find them and compile nothing. Libraries built ahead of time by
`accel-gateway compile` in the version directory are used first when they match. Batches
are padded up to the next bucket.

Config parameters:
- `batch_buckets`: comma-separated batch sizes to compile (default powers of two up to
  max_batch_size);
- `tune_trials`: MetaSchedule trials per bucket when compiling at load (default 0: TVM's
  default schedules); a library compiled ahead of time is used whatever it was tuned with.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from accel_base.cpu import usable_cores

# TVM's worker threads spin between runs by default, stealing the core the event loop
# needs between requests; an environment that sets the count keeps its own.
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
# TVM sizes its pool from the whole machine (TVM_NUM_THREADS, else OMP_NUM_THREADS, else
# half the machine's cores) and pins worker i to the machine's core i, outside `taskset`
# or a cpuset. So: the usable cores unless a count is set, and threads that inherit the
# process's affinity.
if not (os.environ.get("TVM_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")):
    os.environ["TVM_NUM_THREADS"] = str(usable_cores())
os.environ.setdefault("TVM_BIND_THREADS", "0")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from accel_base.proto import model_config_pb2 as mc  # noqa: E402
from backends import onnx_graph  # noqa: E402
from backends.base import BackendUnavailable, Device  # noqa: E402
from backends.buckets import BucketedBackend, batch_buckets, check_batch_dimension  # noqa: E402
from backends.parameters import int_parameter  # noqa: E402
from backends.tvm_compile import (  # noqa: E402
    MANIFEST,
    Manifest,
    aot_directory,
    build_target,
    cache_directory,
    compile_libraries,
    load_libraries,
    locked,
    target_kind,
    wanted_manifest,
)

log = logging.getLogger(__name__)


def tune_trials_of(config: mc.ModelConfig) -> int:
    trials = int_parameter(config, "tune_trials") or 0
    if trials < 0:
        raise BackendUnavailable(
            f"model '{config.name}': parameter tune_trials must be >= 0, got {trials}"
        )
    return trials


Libraries = dict[int, tvm.runtime.Module]


def find_or_compile(
    artifact: Path, config: mc.ModelConfig, target: tvm.target.Target
) -> tuple[Path, Manifest, Libraries, str]:
    """The libraries serving this model on `target`, loaded, with their directory and
    manifest and where they came from ("ahead-of-time", "cache" or "compiled"). Libraries
    that do not match or do not load are passed over with a log line saying why."""
    buckets = batch_buckets(config)
    wanted = wanted_manifest(artifact, target, buckets, tune_trials_of(config))
    aot = aot_directory(artifact.parent, target_kind(target))
    found = Manifest.read(aot)
    if found is None and aot.exists():
        log.warning("model '%s': %s has no readable %s; compiling", config.name, aot, MANIFEST)
    elif found is not None:
        reason = found.mismatch(wanted, ignore_tuning=True)
        try:
            if reason is None:
                return aot, found, load_libraries(aot, found, config.name), "ahead-of-time"
        except BackendUnavailable as exc:
            reason = str(exc)
        log.warning(
            "model '%s': not using the libraries in %s: %s; compiling instead",
            config.name, aot, reason,
        )  # fmt: skip
    cached = cache_directory(wanted)
    with locked(cached):  # another process may be compiling the same key right now
        found = Manifest.read(cached)
        if found is not None and found.mismatch(wanted, ignore_tuning=False) is None:
            try:
                return cached, found, load_libraries(cached, found, config.name), "cache"
            except BackendUnavailable as exc:
                log.warning("model '%s': cached libraries unusable (%s); compiling again",
                            config.name, exc)  # fmt: skip
        manifest = compile_libraries(
            artifact, config.name, target, buckets, wanted.tune_trials, cached,
            progress=_log_progress(config.name),
        )  # fmt: skip
        return cached, manifest, load_libraries(cached, manifest, config.name), "compiled"


def _log_progress(model: str):
    last_logged = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last_logged[0] > 5:
            last_logged[0] = now
            log.info("model '%s': tuning, %d of %d trials", model, done, total)

    return progress


class TvmBackend(BucketedBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        graph = onnx_graph.load(artifact, config.name)
        self._inputs, self._outputs = onnx_graph.tensor_specs(
            graph, config.name, unsupported={"BYTES", "BF16"}
        )
        del graph
        if config.max_batch_size > 0:
            check_batch_dimension(
                self._inputs, config.name, "dynamic", "export the ONNX model with a named batch dim"
            )
        self._buckets = batch_buckets(config)
        started = time.perf_counter()
        if device.kind == "gpu":
            target = build_target("cuda", gpu=device.index)
            self._device = tvm.cuda(device.index)
        else:
            target = build_target("llvm")
            self._device = tvm.cpu(0)
        # Where the libraries came from: "ahead-of-time", "cache" or "compiled".
        directory, manifest, libraries, self.source = find_or_compile(artifact, config, target)
        self._memory = sum(
            (directory / name).stat().st_size for name in manifest.libraries.values()
        )
        self._functions = {
            bucket: relax.VirtualMachine(library, self._device)["main"]
            for bucket, library in libraries.items()
        }
        log.info(
            "model '%s' (tvm, %s) on %s: %s libraries for batch sizes %s, ready in %.1f s",
            config.name, target_kind(target), device, self.source,
            list(self._buckets) or "[unbatched]", time.perf_counter() - started,
        )  # fmt: skip

    @classmethod
    def gpu_capable(cls) -> bool:
        return bool(tvm.cuda(0).exist)

    def inline_capable(self) -> bool:  # type: ignore[override]
        return self.device.kind == "cpu"  # compiled C code; a GPU run waits on the device

    def _run_bucket(
        self, feed: dict[str, np.ndarray], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        rows = len(next(iter(feed.values()))) if self._buckets else 0
        function = self._functions[rows]
        arguments = [
            tvm.runtime.tensor(np.ascontiguousarray(feed[spec.name]), self._device)
            for spec in self._inputs
        ]
        result = function(*arguments)
        results = [result] if len(self._outputs) == 1 else list(result)
        by_name = {spec.name: value for spec, value in zip(self._outputs, results, strict=True)}
        return {name: by_name[name].numpy() for name in output_names}

    def memory_bytes(self) -> int:
        return self._memory

    def unload(self) -> None:
        del self._functions
