"""A TF Serving model's metadata: the SignatureDefs of the version asked (the latest
loaded one when none is), read from its saved_model.pb (signatures.py), for gRPC's
GetModelMetadata and REST's `GET .../metadata`."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.protobuf import json_format

from accel_base.errors import NotFound
from accel_base.proto.tfserving.tensorflow_serving.apis import get_model_metadata_pb2
from accel_base.version_dirs import version_dir
from backends.tfserving.signatures import SavedModelError, signature_defs
from gateway.core.interface import Core
from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.served import DEFAULT_SIGNATURE, Served, TfServing, missing
from gateway.protocols.tfserving.tensor_proto import V2_TO_DT


async def _ready_versions(core: Core, name: str) -> list[int]:
    return [
        int(row["version"]) for row in await core.repository_index(ready_only=True)
        if row["name"] == name and row["version"]
    ]  # fmt: skip


async def latest_version(core: Core, tfs: TfServing, name: str) -> int:
    """The newest version of `name` that is ready, or TF Serving's not-found."""
    ready = await _ready_versions(core, name)
    if not ready:
        raise missing(name, None)
    return max(ready)


async def _version_defs(tfs: TfServing, name: str, version: int) -> dict[str, Any]:
    """A version's SignatureDefs (read once: a version's files do not change under it)."""
    defs = tfs.signature_defs.get((name, version))
    if defs is None:
        model = tfs.models.get(name)
        if model is None:  # dropped by a reload meanwhile
            raise missing(name, version)
        directory = version_dir(model.base_path, version)
        try:  # (a saved_model.pb may be large: read off the event loop)
            defs = await asyncio.to_thread(signature_defs, directory)
        except SavedModelError as exc:
            where = str(model.base_path)  # the client is told the name, not the path
            raise TfsError(grpc.StatusCode.INTERNAL, str(exc).replace(where, name)) from None
        tfs.signature_defs[(name, version)] = defs
    return defs


async def method_name(core: Core, tfs: TfServing, served: Served, signature: str) -> str:
    """The `method_name` of a signature as the version it runs on declares it."""
    if tfs.from_repository(served.name):
        return "tensorflow/serving/predict"  # (_v2_signature's)
    version = served.version
    if version is None:
        version = await latest_version(core, tfs, served.name)
    definition = (await _version_defs(tfs, served.name, version)).get(signature)
    return "" if definition is None else definition.method_name


async def _v2_signature(core: Core, name: str, version: int) -> Any:
    """A repository model's one signature, `serving_default`, made from its V2 metadata:
    each input and output by name, with its dtype and shape (-1: any size)."""
    from accel_base.proto.tfserving.tensorflow.core.protobuf import meta_graph_pb2

    try:
        metadata = await core.model_metadata(name, str(version))
    except NotFound:
        raise missing(name, version) from None
    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    for side, tensors in ((signature.inputs, metadata["inputs"]),
                          (signature.outputs, metadata["outputs"])):  # fmt: skip
        for tensor in tensors:
            info = side[tensor["name"]]
            info.name = tensor["name"]
            info.dtype = V2_TO_DT.get(tensor["datatype"], 0)  # 0: DT_INVALID (none fits)
            for size in tensor["shape"]:
                info.tensor_shape.dim.add().size = int(size)
    return signature


async def signature_def_map(
    core: Core, tfs: TfServing, name: str, version: int | None, label: str
) -> tuple[int, Any]:
    """The version answered and its tensorflow.serving.SignatureDefMap."""
    _, version = tfs.labelled(name, version, label)
    if version is None:
        version = await latest_version(core, tfs, name)
    elif version not in await _ready_versions(core, name):
        raise missing(name, version)
    if tfs.from_repository(name):
        defs = {DEFAULT_SIGNATURE: await _v2_signature(core, name, version)}
    else:
        defs = await _version_defs(tfs, name, version)
    answer = get_model_metadata_pb2.SignatureDefMap()
    for key, definition in defs.items():
        answer.signature_def[key].CopyFrom(definition)
    return version, answer


async def metadata_json(
    core: Core, tfs: TfServing, name: str, version: int | None, label: str
) -> dict[str, Any]:
    """REST's answer: the model spec, and the SignatureDefMap as protobuf's JSON."""
    loaded, defs = await signature_def_map(core, tfs, name, version, label)
    as_json = json_format.MessageToDict(
        defs, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return {
        "model_spec": {"name": name, "signature_name": "", "version": str(loaded)},
        "metadata": {"signature_def": as_json},
    }
