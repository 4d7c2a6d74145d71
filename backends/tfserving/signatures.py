"""A SavedModel's signatures, read from its `saved_model.pb` without TensorFlow: the
names the fronts serve and the SignatureDefs GetModelMetadata returns. Only the
MetaGraph tagged `serve` (TF Serving's default `--saved_model_tags`) is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel_base.version_dirs import available_versions, version_dir

SERVE_TAG = "serve"
# Entries of the signature map that are a SavedModel's own machinery, not signatures.
_INTERNAL = "__saved_model_init_op"


class SavedModelError(ValueError):
    """A version directory whose saved_model.pb cannot be read; the message says why."""


def signature_defs(directory: Path) -> dict[str, Any]:
    """The `serve` MetaGraph's SignatureDefs (messages of tensorflow.SignatureDef)."""
    from accel_base.proto.tfserving.tensorflow.core.protobuf import saved_model_pb2

    path = directory / "saved_model.pb"
    try:
        model = saved_model_pb2.SavedModel.FromString(path.read_bytes())
    except OSError as exc:  # (FileNotFoundError too: a base path removed under us)
        raise SavedModelError(f"{path}: {exc.strerror or exc}") from None
    except Exception as exc:  # protobuf's DecodeError, and its kin
        raise SavedModelError(f"{path} is not a SavedModel: {exc}") from None
    for meta_graph in model.meta_graphs:
        if SERVE_TAG in meta_graph.meta_info_def.tags:
            return {k: v for k, v in meta_graph.signature_def.items() if k != _INTERNAL}
    raise SavedModelError(f"{path} has no MetaGraph tagged '{SERVE_TAG}'")


# saved_model.pb -> ((mtime, size) when read, its signature names or None: unreadable)
ParseCache = dict[Path, tuple[tuple[int, int], list[str] | None]]


def _signature_names(directory: Path, cache: ParseCache | None) -> list[str] | None:
    path = directory / "saved_model.pb"
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_mtime_ns, stat.st_size)
    if cache is not None and path in cache and cache[path][0] == key:
        return cache[path][1]
    try:
        names: list[str] | None = list(signature_defs(directory))
    except SavedModelError:
        names = None
    if cache is not None:
        cache[path] = (key, names)
    return names


def signature_versions(base_path: Path, cache: ParseCache | None = None) -> dict[str, list[int]]:
    """Each signature under a base path, with the versions that have it; versions whose
    saved_model.pb cannot be read are left to their load to report. With `cache`, a
    saved_model.pb is parsed again only when it changed (a poll every second must not
    parse every version every second)."""
    found: dict[str, list[int]] = {}
    if not base_path.is_dir():
        return found
    for version in available_versions(base_path):
        for name in _signature_names(version_dir(base_path, version), cache) or ():
            found.setdefault(name, []).append(version)
    return dict(sorted(found.items()))
