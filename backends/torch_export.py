"""`pytorch_export`: a torch.export archive (`model.pt2`), run eager or through torch.compile.

Input names, datatypes and shapes come from the exported program (a dynamic dimension
becomes -1), output names from the keys of the dict `forward` returns (`OUTPUT__<i>`
for a tensor or a tuple), so a config with a name, platform and max_batch_size is enough.

The `compile_mode` parameter picks eager (default) or one of torch.compile's modes
(default, reduce-overhead, max-autotune). Compiled models are compiled for fixed batch
sizes, the `batch_buckets` parameter (default: powers of two up to max_batch_size), and
every bucket runs once before the model reports ready, so no request pays for a compile.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable, Device, TensorSpec, first_line
from backends.buckets import BucketedBackend, batch_buckets, dynamic_beyond_batch
from backends.parameters import choice_parameter
from backends.torch_common import (
    INDEX_SUFFIX,
    V2_TO_TORCH,
    apply_thread_parameters,
    check_export_archive,
    positions,
    spec_datatype,
    to_numpy,
    to_torch,
    torch_device,
)

log = logging.getLogger(__name__)

COMPILE_MODES = ("eager", "default", "reduce-overhead", "max-autotune")


def _dims(shape, ranges: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape with -1 for symbolic dims, the smallest size each dim allows)."""
    dims, smallest = [], []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
            smallest.append(dim)
        else:
            dims.append(-1)
            bound = ranges.get(dim.node.expr)
            smallest.append(max(int(bound.lower), 1) if bound is not None else 1)
    return tuple(dims), tuple(smallest)


def _by_index(specs: list[TensorSpec], declared: list[str]) -> list[TensorSpec]:
    """`specs` renamed as the config's `NAME__<index>` names say, where the config's
    names are not the program's own and every one of them carries an index in range."""
    found = {spec.name for spec in specs}
    if not declared or all(name in found for name in declared):
        return specs
    by_position = positions(declared)
    if sorted(by_position) != sorted(declared) or any(
        not INDEX_SUFFIX.search(name) or index >= len(specs) for name, index in by_position.items()
    ):
        return specs  # complete_config names what does not match
    renamed = list(specs)
    for name, index in by_position.items():
        renamed[index] = TensorSpec(name, specs[index].datatype, specs[index].shape)
    if len({spec.name for spec in renamed}) < len(renamed):
        return specs  # two tensors would share a name: complete_config says what differs
    return renamed


def _batch_limit(shape, ranges: dict) -> int | None:
    """The largest batch the program accepts (None: unbounded or not symbolic)."""
    dim = shape[0]
    if isinstance(dim, int):
        return dim
    bound = ranges.get(dim.node.expr)
    if bound is None or not bound.upper.is_finite:
        return None
    return int(bound.upper)


class TorchExportBackend(BucketedBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        self._device = torch_device(device, config.name)
        apply_thread_parameters(config)
        self._mode = choice_parameter(config, "compile_mode", COMPILE_MODES)
        check_export_archive(artifact, config.name)
        try:
            program = torch.export.load(str(artifact))
        except Exception as exc:  # torch raises many types for a bad archive
            reason = first_line(exc)
            raise BackendUnavailable(
                f"model '{config.name}': cannot load {artifact.name} as a torch.export archive "
                f"written by torch.export.save: {reason}"
            ) from None
        self._describe(program)
        self._adopt_index_names()
        if self._device.type != "cpu":
            # Export records the device of tensors the graph creates (torch.zeros(...,
            # device="cpu")); this pass rewrites them along with the weights.
            program = torch.export.passes.move_to_device_pass(program, self._device)
        self._module = program.module()
        self._call = self._module
        self._buckets: tuple[int, ...] = ()
        if self._mode != "eager":
            self._compile()
        log.info("model '%s' (torch.export, %s) on %s", config.name, self._mode, self._device)

    def _describe(self, program: torch.export.ExportedProgram) -> None:
        name = self.config.name
        ranges = program.range_constraints
        placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
        self._inputs: list[TensorSpec] = []
        self._smallest: list[tuple[int, ...]] = []
        for input_name in program.graph_signature.user_inputs:
            value = placeholders[input_name].meta.get("val")
            if not isinstance(value, torch.Tensor):
                raise BackendUnavailable(
                    f"model '{name}': input '{input_name}' is not a tensor; only tensor "
                    "arguments can be served"
                )
            dims, smallest = _dims(value.shape, ranges)
            self._inputs.append(
                TensorSpec(input_name, spec_datatype(value.dtype, name, input_name), dims)
            )
            self._smallest.append(smallest)
            if self.config.max_batch_size > 0:
                self._check_batch_dim(input_name, value.shape, ranges)
        output_node = next(n for n in program.graph.nodes if n.op == "output")
        user_outputs = output_node.args[0][-len(program.graph_signature.user_outputs) :]
        out_spec = program.module_call_graph[0].signature.out_spec
        if out_spec.type is dict:
            self._output_keys: list[str | int] = list(out_spec.context)
            names = [str(key) for key in out_spec.context]
        else:
            self._output_keys = list(range(len(user_outputs)))
            names = [f"OUTPUT__{i}" for i in range(len(user_outputs))]
        self._outputs = []
        for output_name, node in zip(names, user_outputs, strict=True):
            value = node.meta["val"]
            dims, _ = _dims(value.shape, ranges)
            self._outputs.append(
                TensorSpec(output_name, spec_datatype(value.dtype, name, output_name), dims)
            )
        self._key_of = dict(zip(names, self._output_keys, strict=True))

    def _adopt_index_names(self) -> None:
        """Triton's PyTorch convention: config names ending in `__<index>` (INPUT__0,
        OUTPUT__1) name the program's inputs and results by position, whatever forward
        called them, so a config written for Triton's PyTorch backend fits."""
        self._inputs = _by_index(self._inputs, [t.name for t in self.config.input])
        outputs = _by_index(self._outputs, [t.name for t in self.config.output])
        self._key_of = {
            new.name: self._key_of[old.name]
            for old, new in zip(self._outputs, outputs, strict=True)
        }
        self._outputs = outputs

    def _check_batch_dim(self, input_name: str, shape, ranges: dict) -> None:
        limit = _batch_limit(shape, ranges)
        max_batch = self.config.max_batch_size
        if isinstance(shape[0], int) or (limit is not None and limit < max_batch):
            raise BackendUnavailable(
                f"model '{self.config.name}': input '{input_name}' takes batches of at most "
                f"{limit} but max_batch_size is {max_batch}; export with a dynamic batch "
                f"dimension up to {max_batch} (torch.export.Dim('batch', max={max_batch})) "
                "or lower max_batch_size"
            )

    def _compile(self) -> None:
        self._buckets = batch_buckets(self.config)
        # One compiled graph per bucket: dynamo must neither generalise shapes nor give up.
        limit = max(torch._dynamo.config.recompile_limit, len(self._buckets) + 1)
        torch._dynamo.config.recompile_limit = limit
        self._call = torch.compile(self._module, mode=self._mode, dynamic=False)
        started = time.perf_counter()
        for rows in self._buckets or (None,):
            self._warm_up(rows)
        log.info(
            "model '%s': compiled (%s) for batch sizes %s in %.1f s",
            self.config.name,
            self._mode,
            list(self._buckets) or "[unbatched]",
            time.perf_counter() - started,
        )

    def _warm_up(self, rows: int | None) -> None:
        feed = {}
        for spec, smallest in zip(self._inputs, self._smallest, strict=True):
            shape = smallest if rows is None else (rows, *smallest[1:])
            dtype = V2_TO_TORCH[spec.datatype]
            feed[spec.name] = torch.zeros(shape, dtype=dtype, device=self._device)
        with torch.inference_mode():
            self._call(*feed.values())

    @classmethod
    def gpu_capable(cls) -> bool:
        return torch.cuda.is_available()

    def inline_capable(self) -> bool:  # type: ignore[override]
        # CUDA graphs (reduce-overhead, max-autotune) are recorded per thread: keep runs
        # on the instance's thread. A dynamic dimension besides the batch may meet a new
        # shape and compile, which must not happen on the event loop.
        if self._mode == "eager":
            return True
        from torch._inductor import list_mode_options

        cuda_graphs = list_mode_options(self._mode).get("triton.cudagraphs", False)
        return not cuda_graphs and not dynamic_beyond_batch(self._inputs)

    def _run_bucket(
        self, feed: dict[str, np.ndarray], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        args = [to_torch(feed[s.name], s.datatype, self._device) for s in self._inputs]
        with torch.inference_mode():
            result = self._call(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        return {name: to_numpy(result[self._key_of[name]]) for name in output_names}

    def memory_bytes(self) -> int:
        tensors = [*self._module.parameters(), *self._module.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def unload(self) -> None:
        del self._call, self._module
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
