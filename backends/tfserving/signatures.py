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


def signature_versions(base_path: Path) -> dict[str, list[int]]:
    """Each signature under a base path, with the versions that have it; versions whose
    saved_model.pb cannot be read are left to their load to report."""
    found: dict[str, list[int]] = {}
    if not base_path.is_dir():
        return found
    for version in available_versions(base_path):
        try:
            names = signature_defs(version_dir(base_path, version))
        except SavedModelError:
            continue
        for name in names:
            found.setdefault(name, []).append(version)
    return dict(sorted(found.items()))
