"""`opencl`: an ONNX model run by tinygrad on an OpenCL device.

tinygrad turns the ONNX graph into OpenCL kernels; each batch bucket is captured once
with `TinyJit` at load, so a request replays compiled kernels rather than tracing the
graph again. Any OpenCL driver works: PoCL on a CPU (Debian `pocl-opencl-icd`), or a
GPU vendor's. Batches are padded up to the next bucket.

Config parameters:
- `opencl_device`: the index of the device on the first OpenCL platform (default 0);
- `batch_buckets`: comma-separated batch sizes to capture (default powers of two up to
  max_batch_size).

tinygrad keeps global state (its scheduler and caches) that is not safe to use from two
threads at once, so every call into it holds one process-wide lock.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import logging
import os
import threading
import time
from pathlib import Path

from accel_base.cpu import usable_cores

# tinygrad's default device, which it otherwise finds by opening every backend it knows
# (CUDA, AMD, ...) at import, and then writes into DEV for child processes. Tensors here
# name their device anyway; an environment that sets DEV keeps its own.
os.environ.setdefault("DEV", "CL")
# PoCL (OpenCL on the CPU) starts a thread per core in the affinity, whatever the cgroup's
# CPU quota; its own variable caps the count.
os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", str(usable_cores()))


def _preload_icd_drivers() -> None:
    """Load each registered OpenCL driver with RTLD_DEEPBIND before the ICD loader does.

    TensorFlow loads its libraries with global symbols, LLVM's among them; a driver that
    links its own LLVM (PoCL does) and is loaded after TensorFlow binds to those and
    crashes in its static initializers. Deep binding keeps the driver on its own LLVM;
    the ICD loader's later dlopen then gets the already-loaded library.
    """
    vendors = Path(os.environ.get("OCL_ICD_VENDORS", "/etc/OpenCL/vendors"))
    with contextlib.suppress(OSError):
        for icd in sorted(vendors.glob("*.icd")) if vendors.is_dir() else ():
            library = icd.read_text().strip()
            with contextlib.suppress(OSError):
                ctypes.CDLL(library, mode=os.RTLD_DEEPBIND | os.RTLD_LOCAL)


_preload_icd_drivers()

import numpy as np  # noqa: E402
from tinygrad import Device as TinygradDevice  # noqa: E402
from tinygrad import Tensor, TinyJit  # noqa: E402
from tinygrad.nn.onnx import OnnxRunner, get_onnx_ops  # noqa: E402
from tinygrad.runtime.ops_cl import CLDevice  # noqa: E402

from accel_base.proto import model_config_pb2 as mc  # noqa: E402
from backends import onnx_graph  # noqa: E402
from backends.base import BackendUnavailable, Device, first_line  # noqa: E402
from backends.buckets import (  # noqa: E402
    BucketedBackend,
    batch_buckets,
    check_batch_dimension,
    dynamic_beyond_batch,
    zero_feed,
)
from backends.parameters import int_parameter  # noqa: E402

log = logging.getLogger(__name__)

_TINYGRAD = threading.Lock()
# Warm-up calls per bucket: TinyJit runs the function once plainly, captures its kernels
# on the second call and replays them from the third.
_JIT_CALLS_TO_CAPTURE = 3
_CL_PLATFORM_NOT_FOUND = "-1001"


def open_device(index: int, model: str) -> str:
    """tinygrad's name for OpenCL device `index`, opened; a clear error without one."""
    try:
        TinygradDevice["CL"]
    except Exception as exc:  # tinygrad raises RuntimeError, ctypes OSError
        hint = (
            "no OpenCL platform is installed"
            if _CL_PLATFORM_NOT_FOUND in str(exc)
            else f"OpenCL failed to start ({exc})"
        )
        raise BackendUnavailable(
            f"model '{model}' needs an OpenCL device, but {hint}; install an OpenCL "
            "driver (on Debian: apt-get install pocl-opencl-icd) or use another backend"
        ) from None
    count = len(CLDevice.device_ids or ())
    if not 0 <= index < count:
        raise BackendUnavailable(
            f"model '{model}': parameter opencl_device is {index}, but the OpenCL platform "
            f"has {count} device(s)"
        )
    name = "CL" if index == 0 else f"CL:{index}"
    TinygradDevice[name]
    return name


class OpenClBackend(BucketedBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        if device.kind == "gpu":
            raise BackendUnavailable(
                f"model '{config.name}': the opencl backend picks its OpenCL device with the "
                "opencl_device parameter, not instance_group gpus; use KIND_CPU or KIND_AUTO"
            )
        graph = onnx_graph.load(artifact, config.name)
        self._inputs, self._outputs = onnx_graph.tensor_specs(
            graph, config.name, unsupported={"BYTES", "BF16"}
        )
        missing = sorted(onnx_graph.operators(graph) - set(get_onnx_ops()))
        del graph
        if missing:
            raise BackendUnavailable(
                f"model '{config.name}': tinygrad cannot run ONNX operator(s) "
                f"{', '.join(missing)}; serve it with onnxruntime_onnx or tvm"
            )
        if config.max_batch_size > 0:
            check_batch_dimension(
                self._inputs, config.name, "dynamic", "export the ONNX model with a named batch dim"
            )
        if dynamic_beyond_batch(self._inputs) or (
            not config.max_batch_size and any(-1 in spec.shape for spec in self._inputs)
        ):
            raise BackendUnavailable(
                f"model '{config.name}': the opencl backend captures fixed shapes, and an "
                f"input has a dynamic dimension besides the batch "
                f"({', '.join(f'{s.name} {list(s.shape)}' for s in self._inputs)}); "
                "fix it in the ONNX model or use the tvm or onnxruntime_onnx backend"
            )
        index = int_parameter(config, "opencl_device") or 0
        self._buckets = batch_buckets(config)
        started = time.perf_counter()
        with _TINYGRAD:
            self._cl_device = open_device(index, config.name)
            try:
                self._runner = OnnxRunner(artifact).to(self._cl_device)
                self._steps = {rows: self._capture() for rows in self._buckets or (0,)}
                for rows, step in self._steps.items():
                    feed = zero_feed(self._inputs, rows or None)
                    for _ in range(_JIT_CALLS_TO_CAPTURE):
                        self._call(step, feed)
            except Exception as exc:  # tinygrad's compile errors, a missing tool, ...
                raise BackendUnavailable(
                    f"model '{config.name}': tinygrad could not compile it for OpenCL: "
                    f"{type(exc).__name__}: {first_line(exc)[:500]}"
                ) from None
        log.info(
            "model '%s' (opencl, tinygrad) on %s (%s): captured batch sizes %s in %.1f s",
            config.name, self._cl_device, TinygradDevice[self._cl_device].device_name,
            list(self._buckets) or "[unbatched]", time.perf_counter() - started,
        )  # fmt: skip

    def _capture(self) -> TinyJit:
        # A runner per bucket: OnnxRunner remembers the first sizes of symbolic dims and
        # the values of shape computations, both of which differ between buckets. The
        # weights (the initializers in graph_values) are shared.
        runner = copy.copy(self._runner)
        runner.graph_values = dict(self._runner.graph_values)
        runner.variable_dims = {}
        runner._python_const_cache = {}
        output_names = [spec.name for spec in self._outputs]

        def step(**tensors: Tensor) -> list[Tensor]:
            results = runner(tensors)
            # clone: an output no kernel computes (an Identity of an input, a reshape)
            # would otherwise be the warm-up's buffer, replayed unchanged forever.
            return [results[name].clone().realize() for name in output_names]

        return TinyJit(step)

    def _call(self, step: TinyJit, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensors = {
            spec.name: Tensor(_writable(feed[spec.name]), device=self._cl_device)
            for spec in self._inputs
        }
        return [result.numpy() for result in step(**tensors)]

    def _run_bucket(
        self, feed: dict[str, np.ndarray], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        rows = len(next(iter(feed.values()))) if self._buckets else 0
        with _TINYGRAD:
            results = self._call(self._steps[rows], feed)
        by_name = {spec.name: value for spec, value in zip(self._outputs, results, strict=True)}
        return {name: by_name[name] for name in output_names}

    def memory_bytes(self) -> int:
        return self.artifact.stat().st_size  # the weights, copied once onto the device

    def unload(self) -> None:
        with _TINYGRAD:
            del self._steps, self._runner


def _writable(array: np.ndarray) -> np.ndarray:
    """tinygrad copies from a writable buffer only; request bodies arrive read-only."""
    if array.flags.writeable and array.flags.c_contiguous:
        return array
    return np.array(array, order="C")
