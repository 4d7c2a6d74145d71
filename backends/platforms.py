"""What the server knows about each built-in backend before it imports the backend's
framework: its platform names, the file it reads, how much memory it takes, and where
its instances run by default. The registry (backends/registry.py) reads this list and
the `accel_gateway.backends` entry points, through which a backend shipped as a package
of its own declares its `Platform` the same way."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 2**20


@dataclass(frozen=True, slots=True)
class Platform:
    """One backend, as a config names it (`platform` or `backend`)."""

    name: str  # the canonical name (Triton's where Triton has one)
    module: str  # the module that holds the backend class, imported on first use
    class_name: str
    extra: str  # the pip extra that installs the framework ("" when none is needed)
    # The file a version directory holds when the config names none ("": the directory).
    artifact: str
    aliases: tuple[str, ...] = ()  # other names a config may give it
    # Whether a version directory holding only `artifact` (no config at all) means this
    # platform (the first such platform listed wins).
    claims_artifact: bool = False
    optional_inputs: bool = False  # whether run() accepts a batch without `optional` inputs
    # Whether its batches go as the requests they merge (run_requests), each answered
    # on its own: Triton's Python backend, whose execute() takes a list of requests.
    per_request: bool = False
    warm_up: bool = True  # whether a batch of zeros may run at load (not a user's code)
    # Whether a request on a stream may get responses before its answer, though the model
    # is not decoupled (a TorchServe handler's intermediate responses): gateway/core/streamed.py.
    streams: bool = False
    # Memory of one instance, before it is measured: bytes per byte of artifact, and what
    # a worker process with the framework imported holds before any model.
    expansion: float = 2.0
    worker_base_bytes: int = 300 * MiB
    # Where its CPU instances run unless the config says: "thread" (in the gateway) or
    # "process" (a worker process); "process only": never anywhere else (a user's code,
    # whose crash must end only its own process).
    execution: str = "process"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# What a platform no backend claims (an ensemble, a router) is estimated with.
UNKNOWN = Platform("", "", "", "", "")

BUILT_IN: tuple[Platform, ...] = (
    Platform(
        "onnxruntime_onnx", "backends.onnx_runtime", "OnnxRuntimeBackend", "onnx",
        "model.onnx", aliases=("onnxruntime",), claims_artifact=True, optional_inputs=True,
        expansion=1.5, worker_base_bytes=80 * MiB, execution="thread",
    ),
    Platform(
        "pytorch_export", "backends.torch_export", "TorchExportBackend", "torch", "model.pt2",
        claims_artifact=True, expansion=1.3, worker_base_bytes=350 * MiB,
    ),
    Platform(
        "pytorch_libtorch", "backends.torchscript", "TorchScriptBackend", "torch", "model.pt",
        aliases=("pytorch",), claims_artifact=True, expansion=1.3, worker_base_bytes=350 * MiB,
    ),
    Platform(
        "tensorflow_savedmodel", "backends.tensorflow_savedmodel", "SavedModelBackend",
        "tensorflow", "model.savedmodel", aliases=("tensorflow",), claims_artifact=True,
        expansion=2.0, worker_base_bytes=600 * MiB,
    ),
    Platform(
        "jax_export", "backends.jax_export", "JaxExportBackend", "jax", "model.jax",
        claims_artifact=True, expansion=1.5, worker_base_bytes=300 * MiB,
    ),
    Platform(
        "tvm", "backends.tvm_backend", "TvmBackend", "tvm", "model.onnx",
        expansion=2.0, worker_base_bytes=250 * MiB,
    ),
    Platform(
        "opencl", "backends.opencl", "OpenClBackend", "opencl", "model.onnx",
        expansion=2.0, worker_base_bytes=300 * MiB,
    ),
    Platform(
        "python", "backends.python.backend", "PythonBackend", "", "model.py",
        claims_artifact=True, optional_inputs=True, per_request=True, warm_up=False,
        execution="process only",
    ),
    # A TorchServe archive, unpacked as the version directory; its handler is a user's code.
    Platform(
        "torchserve", "backends.torchserve.backend", "TorchServeBackend", "torchserve", "",
        per_request=True, warm_up=False, streams=True, execution="process only",
        expansion=1.3, worker_base_bytes=350 * MiB,
    ),
    # Another V2 server runs it: the version directory holds no file, and zeros are not
    # sent to someone else's model at load.
    Platform(
        "remote", "backends.remote.backend", "RemoteBackend", "", "", optional_inputs=True,
        warm_up=False, execution="thread",
    ),
)  # fmt: skip
