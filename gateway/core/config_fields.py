"""Triton's ModelConfig fields that the gateway does not honour: refused at load with the
field named, never ignored in silence (docs/reference/configuration.md lists every field
as supported, partly, or refused).

Performance hints that change no answer (pinned memory, gather kernels, CUDA stream
options) are accepted and logged once at load: the gateway's data path has no such
choice to make.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc

log = logging.getLogger(__name__)
Group = mc.ModelInstanceGroup


def check_fields(config: mc.ModelConfig) -> None:
    """InvalidArgument naming the first field set that the gateway cannot honour."""
    for field, why in _refused(config):
        raise InvalidArgument(f"model '{config.name}': {field} is not supported: {why}")
    hints = list(_hints(config))
    if hints:
        log.info("model '%s': %s only tune(s) Triton's GPU data path; accepted, no effect here",
                 config.name, ", ".join(hints))  # fmt: skip


def _refused(config: mc.ModelConfig) -> Iterator[tuple[str, str]]:
    if config.cc_model_filenames:
        yield ("cc_model_filenames", "one artifact serves every device here; name it with "
               "default_model_filename")  # fmt: skip
    if config.metric_tags:
        yield "metric_tags", "metrics carry the model and version labels only; remove it"
    if config.model_operations.op_library_filename:
        yield ("model_operations.op_library_filename", "custom operator libraries are not "
               "loaded (native code from a repository); build the ops into the model")  # fmt: skip
    if config.batch_input or config.batch_output:
        yield "batch_input/batch_output", "ragged batches are not assembled; remove them"
    if config.model_repository_agents.agents:
        yield "model_repository_agents", "repository agents do not run; remove them"
    if config.runtime:
        yield "runtime", "the backend is chosen by platform or backend; remove it"
    if config.model_metrics.metric_control:
        yield "model_metrics", "metric families and their buckets are fixed; remove it"
    if config.sequence_batching.iterative_sequence:
        yield ("sequence_batching.iterative_sequence", "iterative scheduling is not "
               "supported; use a decoupled Python model")  # fmt: skip
    optimization = config.optimization
    if optimization.priority != mc.ModelOptimizationPolicy.PRIORITY_DEFAULT:
        yield ("optimization.priority", "instances run --backend-nice steps below the "
               "fronts; remove it")  # fmt: skip
    if optimization.cuda.graphs or optimization.cuda.graph_spec:
        yield ("optimization.cuda.graphs", "CUDA graphs are not captured by the "
               "gateway's backends; remove it")  # fmt: skip
    for group in config.instance_group:
        where = f"instance_group '{group.name}'" if group.name else "instance_group"
        if group.kind == Group.KIND_MODEL:
            yield f"{where} kind KIND_MODEL", "use KIND_CPU, KIND_GPU or KIND_AUTO"
        if group.profile:
            yield f"{where} profile", "TensorRT optimization profiles are not chosen"
        if group.passive:
            yield f"{where} passive", "every instance takes requests"
        if group.secondary_devices:
            yield f"{where} secondary_devices", "instances use one device"
        if group.host_policy:
            yield f"{where} host_policy", "host policies are not applied"
    tensors = [("input", t) for t in config.input] + [("output", t) for t in config.output]
    for kind, tensor in tensors:
        what = f"{kind} '{tensor.name}'"
        if tensor.is_shape_tensor:
            yield f"{what} is_shape_tensor", "shape tensors are not supported"
        if tensor.is_non_linear_format_io:
            yield f"{what} is_non_linear_format_io", "non-linear I/O formats are not supported"
    for tensor in config.input:
        if tensor.allow_ragged_batch:
            yield (f"input '{tensor.name}' allow_ragged_batch", "requests batch together only "
                   "when their shapes match")  # fmt: skip


def _hints(config: mc.ModelConfig) -> Iterator[str]:
    optimization = config.optimization
    for name in ("input_pinned_memory", "output_pinned_memory"):
        if optimization.HasField(name):
            yield f"optimization.{name}"
    if optimization.gather_kernel_buffer_threshold:
        yield "optimization.gather_kernel_buffer_threshold"
    if optimization.eager_batching:
        yield "optimization.eager_batching"
    if optimization.cuda.busy_wait_events or optimization.cuda.output_copy_stream:
        yield "optimization.cuda"
