"""Backends: one module per framework, all behind `backends.base.Backend`.

Modules are imported on first use so a missing optional framework only fails
the models that need it, with a message that says what to install.
"""

from __future__ import annotations

import importlib

from backends.base import Backend, BackendUnavailable, Device, TensorSpec

__all__ = ["Backend", "BackendUnavailable", "Device", "TensorSpec", "backend_class", "PLATFORMS"]

# Triton `platform` or `backend` name -> (module, class, pip extra that provides it).
PLATFORMS: dict[str, tuple[str, str, str]] = {
    "onnxruntime_onnx": ("backends.onnx_runtime", "OnnxRuntimeBackend", "onnx"),
    "onnxruntime": ("backends.onnx_runtime", "OnnxRuntimeBackend", "onnx"),
    "pytorch_libtorch": ("backends.torchscript", "TorchScriptBackend", "torch"),
    "pytorch": ("backends.torchscript", "TorchScriptBackend", "torch"),
    "pytorch_export": ("backends.torch_export", "TorchExportBackend", "torch"),
    "tensorflow_savedmodel": ("backends.tensorflow_savedmodel", "SavedModelBackend", "tensorflow"),
    "tensorflow": ("backends.tensorflow_savedmodel", "SavedModelBackend", "tensorflow"),
    "jax_export": ("backends.jax_export", "JaxExportBackend", "jax"),
    "tvm": ("backends.tvm_backend", "TvmBackend", "tvm"),
    "opencl": ("backends.opencl", "OpenClBackend", "opencl"),
}


def backend_class(name: str) -> type[Backend]:
    """The backend class for a config's platform/backend name."""
    try:
        module_name, class_name, extra = PLATFORMS[name]
    except KeyError:
        known = ", ".join(sorted(PLATFORMS))
        raise BackendUnavailable(
            f"unknown platform/backend '{name}', expected one of: {known}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend '{name}' needs a package that is not installed ({exc.name}); "
            f"install it with: pip install 'accel-gateway[{extra}]'"
        ) from exc
    return getattr(module, class_name)
