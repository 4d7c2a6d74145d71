"""Configuration keys that name files or directories, and the paths in their values.

The sealed repository (gateway/core/sealing.py) refuses such a path when it leads outside
the model's directory; the backends resolve the relative ones against that directory,
since a framework would resolve them against the server's working directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# trt_engine_cache_path, cache_dir, ep.context_file_path, trt_extra_plugin_lib_paths,
# load_config, trt_int8_calibration_table_name, ... Broad on purpose: a false match only
# means a value is treated as a path.
_PATH_KEY = re.compile(
    r"(?:^|[_.])(?:paths?|dirs?|directory|folder|files?|filenames?|filepaths?|lib|libs|"
    r"config|table_name)$"
)
# Lists of paths (trt_extra_plugin_lib_paths) are split on these.
_SEPARATOR = "[;," + re.escape(os.pathsep) + "]"


def is_path_key(key: str) -> bool:
    """Whether a parameter or option key names files or directories."""
    return _PATH_KEY.search(key.lower()) is not None


def split_paths(value: str) -> list[str]:
    """The paths in a value that may list several."""
    return [part.strip() for part in re.split(_SEPARATOR, value) if part.strip()]


def model_directory_of(artifact: Path, filename: str) -> Path:
    """The model's directory for `artifact`, which is <model>/<version>/<filename> and
    `filename` may hold folders of its own (`weights/model.onnx`)."""
    return artifact.parents[len(Path(filename).parts)]


def anchored(value: str, model_dir: Path) -> str:
    """`value` with each relative path in it made absolute under `model_dir`, separators
    kept as they were."""
    parts = re.split(f"({_SEPARATOR})", value)
    return "".join(
        part
        if index % 2 or not part.strip() or Path(part.strip()).is_absolute()
        else str(model_dir.absolute() / part.strip())
        for index, part in enumerate(parts)
    )
