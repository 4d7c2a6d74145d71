"""What the PyTorch backends share: device choice, threads, dtypes, and the numpy edges."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from accel_base.cpu import usable_cores
from accel_base.datatypes import v2_datatype
from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable, Device, TensorSpec
from backends.parameters import int_parameter

log = logging.getLogger(__name__)

V2_TO_TORCH: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "UINT16": torch.uint16,
    "UINT32": torch.uint32,
    "UINT64": torch.uint64,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
}
TORCH_TO_V2 = {dtype: name for name, dtype in V2_TO_TORCH.items()}


def torch_device(device: Device, model: str) -> torch.device:
    if device.kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            f"model '{model}' asks for a GPU instance but this torch build sees no CUDA device "
            f"(torch {torch.__version__}); use KIND_CPU or install a CUDA build of torch"
        )
    if device.index >= torch.cuda.device_count():
        raise BackendUnavailable(
            f"model '{model}' asks for GPU {device.index} but torch sees "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )
    return torch.device("cuda", device.index)


def apply_thread_parameters(config: mc.ModelConfig) -> None:
    """Triton's INTRA_OP/INTER_OP_THREAD_COUNT parameters, or else the usable cores: torch
    sizes its pools from the machine, and its inter-op pool ignores even `taskset`.
    Torch's pools are per process, so the last model to set them wins, and the inter-op
    count can be set only once, before that pool starts; the log says so."""
    cores = usable_cores()
    intra = int_parameter(config, "INTRA_OP_THREAD_COUNT")
    inter = int_parameter(config, "INTER_OP_THREAD_COUNT")
    if intra:
        torch.set_num_threads(intra)
        log.info("model '%s': torch intra-op threads (process-wide) = %d", config.name, intra)
    elif not os.environ.get("OMP_NUM_THREADS"):  # torch reads it itself; workers have it
        torch.set_num_threads(cores)
    try:
        torch.set_num_interop_threads(inter or cores)
    except RuntimeError:
        if inter:
            log.warning(
                "model '%s': INTER_OP_THREAD_COUNT ignored, torch's inter-op count is set "
                "once per process and was set already",
                config.name,
            )


def spec_datatype(dtype: torch.dtype, model: str, tensor: str) -> str:
    try:
        return TORCH_TO_V2[dtype]
    except KeyError:
        raise BackendUnavailable(
            f"model '{model}': tensor '{tensor}' has torch dtype {dtype}, which has no V2 datatype"
        ) from None


def sequence_specs(config: mc.ModelConfig) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The (inputs, outputs) a sequence batcher fills in and keeps, which the config
    declares in `sequence_batching` rather than in `input` and `output`: each control
    input ([1] a row, of its values' type) and each implicit state."""
    batch = (-1,) if config.max_batch_size > 0 else ()
    settings = config.sequence_batching
    inputs, outputs = [], []
    corrid = mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
    for control_input in settings.control_input:
        control = control_input.control[0] if control_input.control else None
        if control is None:
            continue
        if control.kind == corrid:
            datatype = v2_datatype(control.data_type)
        else:
            datatype = (
                "FP32"
                if control.fp32_false_true
                else "BOOL"
                if control.bool_false_true
                else "INT32"
            )
        inputs.append(TensorSpec(control_input.name, datatype, (*batch, 1)))
    for state in settings.state:
        datatype = v2_datatype(state.data_type)
        inputs.append(TensorSpec(state.input_name, datatype, (*batch, *state.dims)))
        outputs.append(TensorSpec(state.output_name, datatype, (*batch, *state.dims)))
    return inputs, outputs


def config_specs(config: mc.ModelConfig, tensors) -> list[TensorSpec]:
    """TensorSpecs of the config's declared tensors, batch dimension included."""
    batch = (-1,) if config.max_batch_size > 0 else ()
    specs = []
    for tensor in tensors:
        datatype = v2_datatype(tensor.data_type)
        if datatype not in V2_TO_TORCH:
            raise BackendUnavailable(
                f"model '{config.name}': tensor '{tensor.name}' is {datatype}, which torch "
                "tensors cannot hold"
            )
        specs.append(TensorSpec(tensor.name, datatype, batch + tuple(tensor.dims)))
    return specs


def to_torch(array: np.ndarray, datatype: str, device: torch.device) -> torch.Tensor:
    """A tensor on `device` sharing the array's memory where it can (one copy to a GPU)."""
    if not array.flags.writeable:
        # Request buffers are read-only views of the received bytes; a model that works
        # in place must not write into them.
        array = array.copy()
    tensor = torch.from_numpy(array)
    if datatype == "BF16":  # BF16 travels as uint16 bit patterns
        tensor = tensor.view(torch.bfloat16)
    return tensor.to(device, non_blocking=True)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.uint16)
    return tensor.cpu().numpy()


def check_export_archive(path: Path, model: str) -> None:
    """Refuse a torch.export archive that torch.export.load would unpickle or run code from.

    Model files are not trusted. torch.export.load reads plain tensors safely, but falls
    back to full unpickling for some payloads (pickled weights or constants, opaque
    objects, legacy files, sample inputs that weights_only cannot read) and loads the
    native code of AOTInductor packages. Such archives are refused before it runs.
    """

    def refuse(what: str) -> BackendUnavailable:
        return BackendUnavailable(
            f"model '{model}': {path.name} is refused because it holds {what}, which loading "
            "would run as code; export plain tensors with torch.export.save"
        )

    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise BackendUnavailable(
            f"model '{model}': cannot load {path.name} as a torch.export archive written by "
            f"torch.export.save: {exc}"
        ) from None
    with archive:
        for name in archive.namelist():
            parts = name.split("/")
            if "aotinductor" in parts:
                raise refuse("an AOTInductor package (native code)")
            if len(parts) >= 2 and parts[-2] in ("weights", "constants"):
                if name.endswith(".pt"):
                    raise refuse(f"a legacy pickled payload ({name})")
                if name.endswith("_config.json"):
                    _check_payload_config(json.loads(archive.read(name)), name, refuse)
            if len(parts) >= 2 and parts[-2] == "sample_inputs":
                try:
                    torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                except Exception:
                    raise refuse(f"sample inputs that are not plain tensors ({name})") from None


def _check_payload_config(config: dict, name: str, refuse) -> None:
    for entry in config.get("config", {}).values():
        path_name = str(entry.get("path_name", ""))
        if entry.get("use_pickle"):
            raise refuse(f"a pickled payload ({name}: {path_name})")
        if path_name.startswith(("opaque_obj_", "custom_obj_")):
            raise refuse(f"a pickled object ({name}: {path_name})")


INDEX_SUFFIX = re.compile(r"__(\d+)$")


def positions(names: list[str], forward_args: list[str] | None = None) -> dict[str, int]:
    """Where each of `names` sits among the model's arguments (or results).

    By argument name when the names are forward's; else by the `__<index>` suffix when
    every name has one (a config may declare only some outputs: `OUTPUT__2` alone is the
    third result); else in config order.
    """
    if forward_args is not None and sorted(names) == sorted(forward_args):
        return {name: forward_args.index(name) for name in names}
    matches = [INDEX_SUFFIX.search(name) for name in names]
    if matches and all(matches):
        by_name = {name: int(m.group(1)) for m, name in zip(matches, names, strict=True)}
        if len(set(by_name.values())) == len(names):
            return by_name
    return {name: i for i, name in enumerate(names)}
