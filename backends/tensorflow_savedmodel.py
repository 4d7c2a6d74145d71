"""`tensorflow_savedmodel`: a SavedModel directory (`model.savedmodel/`) and one signature.

The `signature_name` parameter picks the signature (default `serving_default`); its
input and output names, datatypes and shapes complete the config. `jit_compile: true`
runs the signature through XLA, compiled per batch bucket before the model is ready.

TensorFlow takes the whole GPU by default. Here it grows its memory on demand, or stays
under `gpu_memory_limit_mb` (a process-wide setting, so the first model to load sets it).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from pathlib import Path
from typing import Any

# Quiet TensorFlow's C++ start-up chatter unless the user asked for it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import ml_dtypes  # noqa: E402  (TensorFlow depends on it; numpy's view of bfloat16)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from accel_base.cpu import usable_cores  # noqa: E402
from accel_base.errors import InvalidArgument  # noqa: E402
from accel_base.proto import model_config_pb2 as mc  # noqa: E402
from backends.base import BackendUnavailable, Device, TensorSpec, first_line  # noqa: E402
from backends.buckets import (
    BucketedBackend,  # noqa: E402
    batch_buckets,
    check_batch_dimension,
    zero_feed,
)
from backends.parameters import bool_parameter, int_parameter, string_parameter  # noqa: E402

log = logging.getLogger(__name__)

_TF_TO_V2 = {
    tf.bool: "BOOL",
    tf.uint8: "UINT8",
    tf.uint16: "UINT16",
    tf.uint32: "UINT32",
    tf.uint64: "UINT64",
    tf.int8: "INT8",
    tf.int16: "INT16",
    tf.int32: "INT32",
    tf.int64: "INT64",
    tf.float16: "FP16",
    tf.float32: "FP32",
    tf.float64: "FP64",
    tf.bfloat16: "BF16",
    tf.string: "BYTES",
}

_gpu_memory_configured = False


def configure_gpu_memory(config: mc.ModelConfig) -> None:
    """Memory growth, or a limit, on every GPU; TensorFlow allows this once per process."""
    global _gpu_memory_configured
    if _gpu_memory_configured:
        return
    limit_mb = int_parameter(config, "gpu_memory_limit_mb")
    try:
        for gpu in tf.config.list_physical_devices("GPU"):
            if limit_mb:
                logical = tf.config.LogicalDeviceConfiguration(memory_limit=limit_mb)
                tf.config.set_logical_device_configuration(gpu, [logical])
            else:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:  # TensorFlow already started its GPUs: keep what they have
        log.warning("TensorFlow's GPUs were initialised before their memory could be capped")
    _gpu_memory_configured = True


def configure_threads() -> None:
    """Both of TensorFlow's pools sized to the usable cores, which its own default (the
    cores in the affinity) caps by no CPU quota; settable only before TensorFlow starts."""
    cores = usable_cores()
    try:
        if tf.config.threading.get_intra_op_parallelism_threads() == 0:
            tf.config.threading.set_intra_op_parallelism_threads(cores)
        if tf.config.threading.get_inter_op_parallelism_threads() == 0:
            tf.config.threading.set_inter_op_parallelism_threads(cores)
    except RuntimeError:  # TensorFlow has started: its pools keep their size
        log.warning("TensorFlow started before its thread pools could be sized")


def _spec(name: str, spec: tf.TensorSpec, model: str) -> TensorSpec:
    datatype = _TF_TO_V2.get(spec.dtype)
    if datatype is None:
        raise BackendUnavailable(
            f"model '{model}': tensor '{name}' has TensorFlow dtype {spec.dtype.name}, "
            "which has no V2 datatype"
        )
    if spec.shape.rank is None:  # a config has no "any rank": served as one dimension
        return TensorSpec(name, datatype, (-1,))
    return TensorSpec(name, datatype, tuple(-1 if d is None else d for d in spec.shape.as_list()))


class SavedModelBackend(BucketedBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        configure_threads()
        configure_gpu_memory(config)
        self._tf_device = self._device_name(device)
        signature_name = string_parameter(config, "signature_name") or "serving_default"
        self._signature = self._load(artifact, signature_name)
        _, input_specs = self._signature.structured_input_signature
        self._inputs = [_spec(name, spec, config.name) for name, spec in input_specs.items()]
        outputs = self._signature.structured_outputs
        if not isinstance(outputs, dict):
            raise BackendUnavailable(
                f"model '{config.name}': signature '{signature_name}' must return a dict of "
                "named tensors"
            )
        self._outputs = [_spec(name, spec, config.name) for name, spec in outputs.items()]
        if config.max_batch_size > 0:
            check_batch_dimension(
                self._inputs, config.name, "variable", "save the signature with shape [None, ...]"
            )
        self._call = self._signature
        self._buckets: tuple[int, ...] = ()
        if bool_parameter(config, "jit_compile", default=False):
            self._compile_with_xla()
        if bool_parameter(config, "tf_serving_warmup", default=False):
            self._replay_warmup(artifact, signature_name)
        log.info(
            "model '%s' (SavedModel signature %s%s) on %s",
            config.name,
            signature_name,
            ", XLA" if self._buckets else "",
            self._tf_device,
        )

    def _load(self, artifact: Path, signature_name: str) -> Any:
        """The signature, as TensorFlow's TF2 loader makes it, or for a TF1 graph that
        loader refuses (ValueError: its signatures' shapes), run in a TF1 session."""
        name = self.config.name
        with tf.device(self._tf_device):
            try:
                self._loaded = tf.saved_model.load(str(artifact))
                signatures = dict(self._loaded.signatures)
            except ValueError as refused:
                from backends.tfserving.session import SessionSignature

                try:
                    self._loaded = SessionSignature(artifact, signature_name, self._tf_device)
                except KeyError as exc:
                    raise BackendUnavailable(f"model '{name}': {exc.args[0]}") from None
                except Exception:  # not that case: the TF2 loader's reason is the one
                    raise BackendUnavailable(
                        f"model '{name}': cannot load {artifact.name} "
                        f"as a SavedModel: {first_line(refused)}"
                    ) from None
                log.info("model '%s': a TF1 graph, run in a session", name)
                return self._loaded
            except Exception as exc:  # TensorFlow raises many types for a bad directory
                raise BackendUnavailable(
                    f"model '{name}': cannot load {artifact.name} as a "
                    f"SavedModel: {first_line(exc)}"
                ) from None
        if signature_name not in signatures:
            raise BackendUnavailable(
                f"model '{name}': the SavedModel has no signature '{signature_name}'; "
                f"it has: {', '.join(signatures) or 'none'} (set parameter signature_name)"
            )
        return signatures[signature_name]

    def _device_name(self, device: Device) -> str:
        if device.kind == "cpu":
            return "/CPU:0"
        gpus = tf.config.list_physical_devices("GPU")
        if device.index >= len(gpus):
            raise BackendUnavailable(
                f"model '{self.config.name}' asks for GPU {device.index} but TensorFlow sees "
                f"{len(gpus)} GPU(s); use KIND_CPU or install a TensorFlow build with CUDA"
            )
        return f"/GPU:{device.index}"

    def _compile_with_xla(self) -> None:
        signature = self._signature
        self._call = tf.function(lambda **feed: signature(**feed), jit_compile=True)
        self._buckets = batch_buckets(self.config)
        started = time.perf_counter()
        for rows in self._buckets:
            self._run_signature(zero_feed(self._inputs, rows))
        log.info(
            "model '%s': XLA-compiled for batch sizes %s in %.1f s",
            self.config.name,
            list(self._buckets),
            time.perf_counter() - started,
        )

    def _replay_warmup(self, artifact: Path, signature_name: str) -> None:
        """TF Serving's warm-up records for this signature (backends/tfserving/warmup.py),
        each run `tf_serving_warmup_iterations` times (1) before the version serves; a
        record that fails fails the load, as in TF Serving."""
        from tensorflow.core.framework import tensor_pb2

        from backends.tfserving.warmup import WarmupError, warmup_requests

        name = self.config.name
        try:
            requests = warmup_requests(artifact, signature_name)
        except (OSError, WarmupError) as exc:
            raise BackendUnavailable(f"model '{name}': warm-up: {exc}") from None
        iterations = int_parameter(self.config, "tf_serving_warmup_iterations") or 1
        expected = sorted(spec.name for spec in self._inputs)
        for index, inputs in enumerate(requests):
            if sorted(inputs) != expected:
                raise BackendUnavailable(
                    f"model '{name}': warm-up request {index} has inputs {sorted(inputs)}; "
                    f"signature '{signature_name}' takes {expected}"
                )
            feed = {
                key: np.array(value, dtype=object) if isinstance(value, list)
                else tf.make_ndarray(tensor_pb2.TensorProto.FromString(value.SerializeToString()))
                for key, value in inputs.items()
            }  # fmt: skip
            try:
                for _ in range(iterations):
                    self._run_signature(feed)
            except Exception as exc:  # TensorFlow's errors, and ours for the inputs
                reason = getattr(exc, "message", None) or first_line(exc)
                raise BackendUnavailable(
                    f"model '{name}': warm-up request {index} failed: {reason}"
                ) from None
        if requests:
            log.info("model '%s': %d warm-up request(s) replayed", name, len(requests))

    @classmethod
    def gpu_capable(cls) -> bool:
        return bool(tf.config.list_physical_devices("GPU"))

    @classmethod
    def inline_capable(cls) -> bool:
        return True  # TensorFlow functions may be called from any thread

    def _run_bucket(
        self, feed: dict[str, np.ndarray], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        results = self._run_signature(feed)
        outputs = {}
        for name in output_names:
            array = results[name].numpy()
            outputs[name] = array.view(np.uint16) if array.dtype == ml_dtypes.bfloat16 else array
        return outputs

    def _run_signature(self, inputs: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
        feed = {}
        for spec in self._inputs:
            array = inputs[spec.name]
            if spec.datatype == "BF16":  # BF16 travels as uint16 bit patterns
                array = array.view(ml_dtypes.bfloat16)
            feed[spec.name] = tf.constant(array)
        try:
            with tf.device(self._tf_device):
                return self._call(**feed)
        except tf.errors.InvalidArgumentError as exc:  # the inputs' values, not the model
            raise InvalidArgument(
                f"TensorFlow refused the inputs: {first_line(exc.message)}"
            ) from None

    def memory_bytes(self) -> int:
        return sum(v.shape.num_elements() * v.dtype.size for v in self._signature.variables)

    def unload(self) -> None:
        if hasattr(self._loaded, "close"):  # a TF1 session's
            self._loaded.close()
        del self._call, self._signature, self._loaded
        gc.collect()  # TensorFlow's loaded objects hold reference cycles
