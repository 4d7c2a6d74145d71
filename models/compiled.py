"""The compiled-backend examples: ONNX models already in the repository, served by `tvm`
and by `opencl` (tinygrad) instead of ONNX Runtime.

Each is a copy of a model another builder made (the PyTorch-trained digits classifier,
the MLP, the FP16/FP32 model), so a test can compare the compiled backend with ONNX
Runtime on the very same file. The configs compile three batch buckets rather than every
power of two, to keep the first load short.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from models import digits_torch, mixed_precision, mlp
from models.config_text import DynamicBatching, model_config_text, write_config

BACKENDS = ("tvm", "opencl")
# source model -> (suffix of the compiled variant's name, buckets)
SOURCES = {
    digits_torch.ONNX: ("digits", "1,8,64"),
    mlp.NAME: ("mlp", "1,8,64"),
    mixed_precision.ONNX: ("mixed", "1,8"),
}


def variant_name(source: str, backend: str) -> str:
    """digits_torch_onnx -> digits_tvm, mlp -> mlp_opencl, ..."""
    return f"{SOURCES[source][0]}_{backend}"


def build(repo: Path, backend: str) -> list[str]:
    """Copy each source model into `<name>_<backend>/1/model.onnx` with a config for
    `backend`; the sources must already be built in `repo`."""
    names = []
    for source, (_, buckets) in SOURCES.items():
        name = variant_name(source, backend)
        source_config = (repo / source / "config.pbtxt").read_text()
        max_batch_size = int(source_config.split("max_batch_size:")[1].split()[0])
        version_dir = repo / name / "1"
        version_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo / source / "1" / "model.onnx", version_dir / "model.onnx")
        batching = DynamicBatching(max_queue_delay_us=2000) if source == mlp.NAME else None
        text = model_config_text(
            name,
            max_batch_size,
            backend=backend,
            dynamic_batching=batching,
            parameters={"batch_buckets": buckets},
        )
        write_config(repo / name, text)
        names.append(name)
    return names
