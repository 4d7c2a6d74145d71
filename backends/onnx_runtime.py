"""ONNX Runtime backend, configured the way Triton's onnxruntime backend reads config.pbtxt.

Execution providers come from the instance's device and the config's
`optimization.execution_accelerators`, in priority order, keeping only those this
onnxruntime build has; the log says which provider actually runs.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort

from accel_base.cpu import pool_threads
from accel_base.errors import InvalidArgument
from accel_base.paths import anchored, is_path_key, model_directory_of
from accel_base.proto import model_config_pb2 as mc
from backends.base import Backend, BackendUnavailable, Device, TensorSpec
from backends.parameters import int_parameter, string_parameter

log = logging.getLogger(__name__)

# ONNX Runtime type strings -> V2 datatypes.
_ORT_TO_V2 = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(bfloat16)": "BF16",
    "tensor(string)": "BYTES",
}
_ONNX_BFLOAT16 = 16  # TensorProto.BFLOAT16

# Triton's accelerator names -> onnxruntime execution providers.
_ACCELERATORS = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}

# Triton's `optimization { graph { level } }`: -1 basic only, 1 extended, anything else all.
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}


def _anchored(options: dict[str, str], model_dir: Path | None) -> dict[str, str]:
    """Relative paths in options (a TensorRT engine cache, an OpenVINO cache_dir) made
    absolute under the model's directory: onnxruntime would resolve them against the
    server's working directory. The sealed repository has checked that they stay in it."""
    if model_dir is None:
        return options
    return {k: anchored(v, model_dir) if is_path_key(k) else v for k, v in options.items()}


def session_options(config: mc.ModelConfig, model_dir: Path | None = None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    # Left at 0, ORT sizes its pools from the machine's physical cores and pins each
    # thread to one of them, outside `taskset` or a CPU quota. Given a count, it pins
    # nothing: its threads inherit the process's affinity. So 0 means the usable cores.
    cores = pool_threads()  # this process's share, when several hold copies
    options.intra_op_num_threads = int_parameter(config, "intra_op_thread_count") or cores
    options.inter_op_num_threads = int_parameter(config, "inter_op_thread_count") or cores
    if int_parameter(config, "execution_mode") == 1:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    if string_parameter(config, "enable_mem_arena") in ("0", "false"):
        options.enable_cpu_mem_arena = False
    if string_parameter(config, "enable_mem_pattern") in ("0", "false"):
        options.enable_mem_pattern = False
    options.graph_optimization_level = _GRAPH_LEVELS.get(
        config.optimization.graph.level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    # Spinning pool threads would steal the core the event loop needs between requests;
    # a config can turn spinning back on with the same key.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # Triton passes `session.*` parameters straight to the session's config entries.
    entries = {k: v.string_value for k, v in config.parameters.items() if k.startswith("session.")}
    for key, value in _anchored(entries, model_dir).items():
        options.add_session_config_entry(key, value)
    return options


def choose_providers(
    config: mc.ModelConfig, device: Device, available: list[str], model_dir: Path | None = None
) -> list[tuple[str, dict[str, str]]]:
    """Providers in priority order for this device; those not in `available` are dropped.
    Relative paths in their options are taken as relative to `model_dir`."""
    accelerators = config.optimization.execution_accelerators
    wanted: list[tuple[str, dict[str, str]]] = []
    if device.kind == "gpu":
        for accelerator in accelerators.gpu_execution_accelerator:
            provider = _ACCELERATORS.get(accelerator.name.lower())
            if provider is None:
                raise BackendUnavailable(
                    f"model '{config.name}': unknown gpu_execution_accelerator "
                    f"'{accelerator.name}', expected tensorrt or cuda"
                )
            options = _anchored(dict(accelerator.parameters), model_dir)
            if provider == "TensorrtExecutionProvider":
                options = _tensorrt_options(options, device)
            wanted.append((provider, options))
        wanted.append(("CUDAExecutionProvider", {"device_id": str(device.index)}))
        if "CUDAExecutionProvider" not in available:
            raise BackendUnavailable(
                f"model '{config.name}' asks for a GPU instance but this onnxruntime has no "
                "CUDAExecutionProvider; install onnxruntime-gpu or use KIND_CPU"
            )
    else:
        for accelerator in accelerators.cpu_execution_accelerator:
            provider = _ACCELERATORS.get(accelerator.name.lower())
            if provider != "OpenVINOExecutionProvider":
                raise BackendUnavailable(
                    f"model '{config.name}': unknown cpu_execution_accelerator "
                    f"'{accelerator.name}', expected openvino"
                )
            wanted.append((provider, _anchored(dict(accelerator.parameters), model_dir)))
    wanted.append(("CPUExecutionProvider", {}))
    chosen = []
    for provider, options in wanted:
        if provider in available:
            chosen.append((provider, options))
        else:
            log.warning("model '%s': %s is not available here, falling back", config.name, provider)
    return chosen


def _tensorrt_options(parameters: dict[str, str], device: Device) -> dict[str, str]:
    """Triton's TensorRT accelerator parameters -> onnxruntime's provider options."""
    renames = {
        "precision_mode": "trt_fp16_enable",
        "max_workspace_size_bytes": "trt_max_workspace_size",
        "trt_engine_cache_enable": "trt_engine_cache_enable",
        "trt_engine_cache_path": "trt_engine_cache_path",
    }
    options = {"device_id": str(device.index)}
    for key, value in parameters.items():
        if key == "precision_mode":
            options["trt_fp16_enable"] = "True" if value.upper() == "FP16" else "False"
        else:
            options[renames.get(key, key)] = value
    return options


def _spec(node: ort.NodeArg, model: str) -> TensorSpec:
    datatype = _ORT_TO_V2.get(node.type)
    if datatype is None:
        raise BackendUnavailable(
            f"model '{model}': tensor '{node.name}' has unsupported type {node.type}"
        )
    shape = tuple(dim if isinstance(dim, int) and dim >= 0 else -1 for dim in node.shape)
    return TensorSpec(node.name, datatype, shape)


class OnnxRuntimeBackend(Backend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        model_dir = model_directory_of(artifact, config.default_model_filename or artifact.name)
        providers = choose_providers(config, device, ort.get_available_providers(), model_dir)
        try:
            self._session = ort.InferenceSession(
                str(artifact),
                sess_options=session_options(config, model_dir),
                providers=[name for name, _ in providers],
                provider_options=[options for _, options in providers],
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise BackendUnavailable(f"onnxruntime could not load {artifact}: {exc}") from exc
        threads = self._session.get_session_options()
        log.info(
            "model '%s' on %s runs with %s; onnxruntime threads: %d intra-op, %d inter-op",
            config.name,
            device,
            ", ".join(self._session.get_providers()),
            threads.intra_op_num_threads,
            threads.inter_op_num_threads,
        )
        self._inputs = [_spec(node, config.name) for node in self._session.get_inputs()]
        self._outputs = [_spec(node, config.name) for node in self._session.get_outputs()]
        self._string_inputs = {s.name for s in self._inputs if s.datatype == "BYTES"}
        self._string_outputs = any(s.datatype == "BYTES" for s in self._outputs)
        self._bf16 = any(s.datatype == "BF16" for s in self._inputs + self._outputs)
        self._bf16_inputs = {s.name for s in self._inputs if s.datatype == "BF16"}

    @classmethod
    def inline_capable(cls) -> bool:
        return True  # an InferenceSession may be run from any thread

    @classmethod
    def gpu_capable(cls) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def providers(self) -> list[str]:
        return self._session.get_providers()

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        feed = inputs
        if self._string_inputs:
            feed = dict(inputs)
            for name in self._string_inputs & feed.keys():
                feed[name] = _to_str_array(feed[name], name)
        if self._bf16:
            return self._run_with_ort_values(feed, output_names)
        results = self._session.run(output_names, feed)
        if self._string_outputs:
            results = [_from_ort(value) for value in results]
        return dict(zip(output_names, results, strict=True))

    def _run_with_ort_values(
        self, feed: dict[str, np.ndarray], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        # numpy has no bfloat16: hand ORT the uint16 bit patterns typed as BFLOAT16,
        # and read BFLOAT16 results back as uint16 from host memory.
        values = {
            name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                np.ascontiguousarray(array), _ONNX_BFLOAT16
            )
            if name in self._bf16_inputs
            else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
            for name, array in feed.items()
        }
        results = self._session.run_with_ort_values(output_names, values)
        outputs = {}
        for name, value in zip(output_names, results, strict=True):
            if value.data_type() == "tensor(bfloat16)":
                count = int(np.prod(value.shape()))
                buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr())
                outputs[name] = np.ctypeslib.as_array(buffer).copy().reshape(value.shape())
            else:
                outputs[name] = _from_ort(value.numpy())
        return outputs

    def memory_bytes(self) -> int:
        # Weights dominate for ONNX models; the file size is a fair, cheap estimate.
        return self.artifact.stat().st_size

    def unload(self) -> None:
        del self._session


def _to_str_array(array: np.ndarray, name: str) -> np.ndarray:
    """ORT string tensors take Python str; V2 BYTES are bytes, so decode them as UTF-8."""
    out = np.empty(array.shape, dtype=np.object_)
    flat_in, flat_out = array.reshape(-1), out.reshape(-1)
    for i, element in enumerate(flat_in):
        if isinstance(element, bytes):
            try:
                element = element.decode()
            except UnicodeDecodeError:
                raise InvalidArgument(
                    f"input '{name}': element {i} is not UTF-8, which ONNX string tensors need"
                ) from None
        flat_out[i] = element
    return out


def _from_ort(value: np.ndarray) -> np.ndarray:
    if value.dtype == np.object_:
        return np.array(
            [s.encode() if isinstance(s, str) else s for s in value.reshape(-1)], dtype=np.object_
        ).reshape(value.shape)
    return value
