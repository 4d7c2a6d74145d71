"""Backends: one module per framework, all behind `backends.base.Backend`.

Modules are imported on first use so a missing optional framework only fails
the models that need it, with a message that says what to install. What the server
must know before loading (the artifact's file name, whether inputs may be left out)
is in PLATFORMS, so that it never imports a framework for a model that runs in a
worker process.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from backends.base import Backend, BackendUnavailable, Device, TensorSpec

__all__ = [
    "Backend", "BackendUnavailable", "Device", "TensorSpec", "Platform", "PLATFORMS",
    "backend_class", "platform_info",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Platform:
    module: str
    class_name: str
    extra: str  # the pip extra that installs the framework
    # The file a version directory holds when the config names none ("": the directory).
    artifact: str
    optional_inputs: bool = False  # whether run() accepts a batch without `optional` inputs
    # Whether its batches go as the requests they merge (run_requests), each answered
    # on its own: Triton's Python backend, whose execute() takes a list of requests.
    per_request: bool = False
    warm_up: bool = True  # whether a batch of zeros may run at load (not a user's code)


_ONNX = Platform("backends.onnx_runtime", "OnnxRuntimeBackend", "onnx", "model.onnx", True)
_TORCHSCRIPT = Platform("backends.torchscript", "TorchScriptBackend", "torch", "model.pt")
_SAVEDMODEL = Platform(
    "backends.tensorflow_savedmodel", "SavedModelBackend", "tensorflow", "model.savedmodel"
)

# Triton `platform` or `backend` name -> where its backend lives and what it reads.
PLATFORMS: dict[str, Platform] = {
    "onnxruntime_onnx": _ONNX,
    "onnxruntime": _ONNX,
    "pytorch_libtorch": _TORCHSCRIPT,
    "pytorch": _TORCHSCRIPT,
    "pytorch_export": Platform("backends.torch_export", "TorchExportBackend", "torch", "model.pt2"),
    "tensorflow_savedmodel": _SAVEDMODEL,
    "tensorflow": _SAVEDMODEL,
    "jax_export": Platform("backends.jax_export", "JaxExportBackend", "jax", "model.jax"),
    "tvm": Platform("backends.tvm_backend", "TvmBackend", "tvm", "model.onnx"),
    "opencl": Platform("backends.opencl", "OpenClBackend", "opencl", "model.onnx"),
    "python": Platform(
        "backends.python.backend",
        "PythonBackend",
        "",
        "model.py",
        optional_inputs=True,
        per_request=True,
        warm_up=False,
    ),  # fmt: skip
    # Another V2 server runs it: the version directory holds no file, and zeros are
    # not sent to someone else's model at load.
    "remote": Platform(
        "backends.remote.backend", "RemoteBackend", "", "", optional_inputs=True, warm_up=False
    ),
}


def platform_info(name: str) -> Platform:
    try:
        return PLATFORMS[name]
    except KeyError:
        known = ", ".join(sorted(PLATFORMS))
        raise BackendUnavailable(
            f"unknown platform/backend '{name}', expected one of: {known}"
        ) from None


def backend_class(name: str) -> type[Backend]:
    """The backend class for a config's platform/backend name (imports its framework)."""
    info = platform_info(name)
    try:
        module = importlib.import_module(info.module)
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend '{name}' needs a package that is not installed ({exc.name}); "
            f"install it with: pip install 'accel-gateway[{info.extra}]'"
        ) from exc
    return getattr(module, info.class_name)
