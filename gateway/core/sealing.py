"""The sealed repository: a model reads files from its own directory only.

A model's directory must lie inside the repository, and every path its config names
(`default_model_filename`, `cc_model_filenames`, a warm-up sample's `input_data_file`, and
parameters or accelerator options whose key names a file or directory, such as
`trt_engine_cache_path` or `cache_dir`) must stay inside the model's directory once `..`
and symbolic links are resolved. The check runs before any file is looked at, so a
refusal says nothing about whether the file exists. No symbolic link under the model's
directory may lead out of it (or loop).
Messages that leave the server name paths relative to the repository.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePath

from accel_base.errors import InvalidArgument
from accel_base.paths import is_path_key, split_paths
from accel_base.proto import model_config_pb2 as mc


def model_directory(root: Path, name: str) -> Path:
    """`root/name`, refused when it leads outside the repository (a symbolic link)."""
    model_dir = root / name
    if not _inside(model_dir, root):
        raise InvalidArgument(
            f"model '{name}': its directory links to a place outside the model repository; "
            "the repository must hold the model's files itself"
        )
    return model_dir


def check_config_paths(config: mc.ModelConfig, model_dir: Path) -> None:
    """Refuse a config that names any path outside `model_dir` (400, before any file is read)."""
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    for what, value in _named_paths(config):
        where = f"model '{config.name}': {what} '{value}'"
        if "\0" in value:
            raise InvalidArgument(f"{where} contains a NUL character")
        pure = PurePath(value)
        if pure.is_absolute() or value.startswith("~"):
            raise InvalidArgument(f"{where} is an absolute path; name a path inside the model's "
                                  "directory, relative to it")  # fmt: skip
        if ".." in pure.parts:
            raise InvalidArgument(f"{where} contains '..'; paths must stay inside the model's "
                                  "directory")  # fmt: skip
        # File names are relative to each version directory, other paths to the model's.
        file_name = what == "default_model_filename" or what.startswith("cc_model")
        bases = versions if file_name else []
        if what.startswith(
            "model_warmup"
        ):  # read from the model's warmup/ (gateway/core/warmup.py)
            bases = [model_dir / "warmup"]
        for base in bases or [model_dir]:
            if not _inside(base / value, model_dir):
                raise InvalidArgument(
                    f"{where} leads outside the model's directory through a symbolic link"
                )


def check_links(model_dir: Path, model: str) -> None:
    """No symbolic link anywhere under the model's directory leads outside it: a directory
    artifact (a SavedModel, an OpenVINO pair) or a file a model names inside itself (ONNX
    external data) could otherwise read any file of the server."""
    for folder, directories, files in os.walk(model_dir):  # does not follow links
        for name in [*directories, *files]:
            path = Path(folder, name)
            if path.is_symlink() and not _inside(path, model_dir):
                raise InvalidArgument(
                    f"model '{model}': {path.relative_to(model_dir.parent)} is a symbolic "
                    "link that leads outside the model's directory or loops; copy the file in "
                    "instead"
                )


def check_artifact(artifact: Path, model_dir: Path, model: str) -> None:
    """The file a version loads resolves inside the model's directory (a version directory
    or the artifact itself may be a symbolic link)."""
    if not _inside(artifact, model_dir):
        raise InvalidArgument(
            f"model '{model}': {artifact.relative_to(model_dir)} leads outside the model's "
            "directory through a symbolic link"
        )


def repository_prefixes(root: Path) -> list[str]:
    """The repository's absolute path as messages may spell it, longest first (one may
    contain the other, through a symbolic link)."""
    return sorted({str(root.resolve()), str(root.absolute())}, key=len, reverse=True)


def relative_to_repository(text: str, prefixes: list[str]) -> str:
    """`text` with the repository's absolute path (its `repository_prefixes`) taken out of
    every path in it."""
    for prefix in prefixes:
        # Only where the path ends or goes on into the repository: not /models-cache.
        pattern = re.escape(prefix) + r"(?:" + re.escape(os.sep) + r"|(?![\w.-]))"
        text = re.sub(pattern, lambda m: "" if m.group().endswith(os.sep) else ".", text)
    return text


def _named_paths(config: mc.ModelConfig) -> Iterator[tuple[str, str]]:
    if config.default_model_filename:
        yield "default_model_filename", config.default_model_filename
    for sample in config.model_warmup:
        for name, given in sample.inputs.items():
            if given.WhichOneof("input_data_type") == "input_data_file":
                where = f"model_warmup '{sample.name}' input '{name}' input_data_file"
                yield where, given.input_data_file
    for capability, filename in config.cc_model_filenames.items():
        yield f"cc_model_filenames[{capability}]", filename
    for key, value in config.parameters.items():
        if is_path_key(key):
            for path in split_paths(value.string_value):
                yield f"parameter {key}", path
    accelerators = config.optimization.execution_accelerators
    for accelerator in [*accelerators.gpu_execution_accelerator,
                        *accelerators.cpu_execution_accelerator]:  # fmt: skip
        for key, value in accelerator.parameters.items():
            if is_path_key(key):
                for path in split_paths(value):
                    yield f"{accelerator.name} option {key}", path


def _inside(path: Path, directory: Path) -> bool:
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except (RuntimeError, OSError):  # a symbolic link loop leads nowhere: not inside
        return False
