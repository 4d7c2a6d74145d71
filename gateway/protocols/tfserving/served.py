"""TF Serving's models as the gateway serves them, and a request's model spec resolved.

Each TF Serving model (`--model_name` and `--model_base_path`, or an entry of the model
config file) is a mount of its base path (gateway/core/mounts.py, made by the server
from `mounts()`): the repository model
of the same name serves its `serving_default` signature, with the config's version
policy. Each other signature is a repository model of its own, `<model>:<signature>`,
mounting the same directory, loaded with the model. A signature is a model
because requests of different signatures must never share a batch, and each has its own
inputs and outputs for V2.

Version labels map to version numbers here; the repository knows only numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from accel_base.errors import GatewayError, NotFound
from backends.tfserving.signatures import signature_versions
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.interface import Core, Mounted
from gateway.protocols.tfserving.errors import TfsError, from_gateway, invalid, not_found
from gateway.protocols.tfserving.monitoring import RequestMetrics
from gateway.protocols.tfserving.shapes import fitted

DEFAULT_SIGNATURE = "serving_default"
# A name's characters that would not survive a URL path segment or the repository.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True)
class Batching:
    """`--enable_batching` with its parameters file, as the batcher's bounds."""

    max_batch_size: int = 1000  # TF Serving's defaults
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 1000000
    allowed_batch_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class TfModel:
    name: str
    base_path: Path
    policy: dict[str, Any] = field(default_factory=dict)  # Triton's version_policy JSON
    labels: dict[str, int] = field(default_factory=dict)


class SignatureMissing(TfsError):
    """A signature the model does not have: REST's words here, gRPC's its own."""

    def __init__(self, signature: str) -> None:
        message = f'Serving signature name: "{signature}" not found in signature def'
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message)
        self.signature = signature


def missing(name: str, version: int | None) -> TfsError:
    """TF Serving's words for a model or version it does not serve (a label's version
    shows as the number it stands for), which clients wait on."""
    what = f"Latest({name})" if version is None else f"Specific({name}, {version})"
    return not_found(f"Servable not found for request: {what}")


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"model name {name!r}: use letters, digits, '_', '.' and '-'")
    return name


def repository_name(model: str, signature: str) -> str:
    return model if signature in ("", DEFAULT_SIGNATURE) else f"{model}:{signature}"


def policy_versions(model: TfModel, on_disk: frozenset[int]) -> set[int]:
    """The versions on disk that the model's version policy serves."""
    policy = model.policy
    if "all" in policy:
        return set(on_disk)
    if "specific" in policy:
        return set(policy["specific"]["versions"]) & on_disk
    count = policy.get("latest", {}).get("num_versions", 1)
    return set(sorted(on_disk)[-count:])


def mount_config(
    model: TfModel, signature: str, batching: Batching | None, warmup_iterations: int = 0
) -> dict[str, Any]:
    """`warmup_iterations`: how often each of a version's warm-up records is replayed
    before it serves (0: they are not)."""
    # Threads of the server's process, as TF Serving runs every model: one TensorFlow
    # runtime for all of them, where a worker process each would import it again (a few
    # seconds and a few hundred MB per signature and version).
    parameters = {"signature_name": {"string_value": signature},
                  "execution": {"string_value": "thread"}}  # fmt: skip
    if warmup_iterations > 0:
        parameters["tf_serving_warmup"] = {"string_value": "true"}
        parameters["tf_serving_warmup_iterations"] = {"string_value": str(warmup_iterations)}
    config: dict[str, Any] = {
        "platform": "tensorflow_savedmodel",
        "default_model_filename": ".",  # the version directory is the SavedModel
        "parameters": parameters,
        "max_batch_size": batching.max_batch_size if batching else 0,
    }
    if model.policy:  # (shown; what loads is the mount's versions: policy_versions())
        config["version_policy"] = model.policy
    if batching:
        # TF Serving's queue holds max_enqueued_batches batches: as many requests of a
        # row (the server's own bound per model version holds as well).
        queued = min(batching.max_enqueued_batches * batching.max_batch_size, 2**31 - 1)
        config["dynamic_batching"] = {
            "max_queue_delay_microseconds": batching.batch_timeout_micros,
            **({"preferred_batch_size": list(batching.allowed_batch_sizes)}
               if batching.allowed_batch_sizes else {}),
            "default_queue_policy": {"max_queue_size": queued},
        }  # fmt: skip
    return config


def versions_of(signatures: dict[str, list[int]]) -> frozenset[int]:
    """Every version that has one of these signatures."""
    return frozenset(v for versions in signatures.values() for v in versions)


def served_signatures(model: TfModel, signatures: dict[str, list[int]]) -> dict[str, list[int]]:
    """The signatures of the versions the model's policy serves, with those versions: a
    signature only versions out of the policy have is not served (its model unmounts)."""
    served = policy_versions(model, versions_of(signatures))
    kept = {name: [v for v in versions if v in served] for name, versions in signatures.items()}
    return {name: versions for name, versions in kept.items() if versions}


@dataclass(frozen=True)
class Served:
    """What a request's model spec and signature run on: the repository's model and
    version, and the signature's inputs and outputs (name -> V2 datatype)."""

    name: str  # TF Serving's model name, for its errors
    model: str
    version: int | None  # None: the latest
    inputs: dict[str, str]
    outputs: dict[str, str]
    shapes: dict[str, list[int]] = field(default_factory=dict)  # each input's, -1: any

    @property
    def number(self) -> str:
        return "" if self.version is None else str(self.version)

    async def run(self, core: Core, inputs: list[Tensor], outputs: list[str]) -> InferResponse:
        """The signature on these inputs, answering `outputs`; inputs fitted to their
        declared shapes as TF Serving would have taken them (shapes.py)."""
        given: dict[tuple[int, ...], tuple[int, ...]] = {}  # fitted shape -> the request's
        for i, tensor in enumerate(inputs):
            declared = self.shapes.get(tensor.name)
            shape = None if declared is None else fitted(tensor.shape, declared)
            if shape is not None and shape != tensor.shape:
                given[shape] = tensor.shape
                inputs[i] = Tensor(tensor.name, tensor.datatype, tensor.data.reshape(shape))
        request = InferRequest(model_name=self.model, model_version=self.number, inputs=inputs,
                               outputs=[RequestedOutput(o) for o in outputs])  # fmt: skip
        try:
            response = await core.infer(request)
        except NotFound:  # unloaded since it was resolved
            raise missing(self.name, self.version) from None
        for tensor in response.outputs if given else ():
            if tensor.shape in given:
                tensor.data = tensor.data.reshape(given[tensor.shape])
        return response


@dataclass
class TfServing:
    """What TF Serving's fronts (REST, gRPC) share: its models and their signatures."""

    models: dict[str, TfModel]
    # Each model's signatures and the versions that have them, as its SavedModels on
    # disk at start declared them.
    signatures: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    batching: Batching | None = None
    labels_for_unavailable: bool = False  # --allow_version_labels_for_unavailable_models
    method_check: bool = False  # --enable_signature_method_name_check
    # --enable_model_warmup (0: off) and --num_request_iterations_for_warmup
    warmup_iterations: int = 1
    # Whether every model of the repository is served too (`serve --tfserving-port`).
    repository_models: bool = False
    # Where a reload (HandleReloadConfigRequest) may find base paths: the directories
    # that hold the start's (a request never mounts a directory the operator did not name).
    reload_roots: tuple[Path, ...] = ()
    # Each version's SignatureDefs, once read (a version's files do not change under it).
    signature_defs: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    metrics: RequestMetrics = field(default_factory=RequestMetrics)  # (its Prometheus page)
    # served()'s answers by (repository model, version asked), with the metadata they
    # were made from (only versions the core knows reach it: bounded).
    _served: dict[tuple[str, str], tuple[dict, Served]] = field(default_factory=dict, repr=False)

    def discover_signatures(self) -> dict[str, dict[str, list[int]]]:
        """Each model's served signatures, as the versions on disk declare them now."""
        return {name: served_signatures(m, signature_versions(m.base_path))
                for name, m in self.models.items()}  # fmt: skip

    def mounts(self) -> dict[str, Mounted]:
        """The repository models to mount: name -> (directory, config as JSON, the
        versions it serves: the model's, those its policy serves; a signature's, those of
        them that have it)."""
        mounts = {}
        for model in self.models.values():
            mounts.update(self.model_mounts(model, self.signatures.get(model.name) or {}))
        return mounts

    def model_mounts(self, model: TfModel, signatures: dict[str, list[int]]) -> dict[str, Mounted]:
        """One model's mounts: its own (serving_default) and one per other signature,
        for `signatures` as served_signatures() gives them."""
        mounts = {}
        for signature in {DEFAULT_SIGNATURE, *signatures}:
            config = mount_config(model, signature, self.batching, self.warmup_iterations)
            if signature == DEFAULT_SIGNATURE:  # (a version without it fails to load)
                versions = versions_of(signatures)
            else:
                versions = frozenset(signatures[signature])
            mounts[repository_name(model.name, signature)] = (model.base_path, config, versions)
        return mounts

    def forget_versions(self, model: str) -> None:
        """Drop what was read of a TF Serving model's versions (SignatureDefs, served()
        answers) once they changed: nothing of a version gone stays."""
        for key in [k for k in self.signature_defs if k[0] == model]:
            del self.signature_defs[key]
        for key in [k for k in self._served if k[0].partition(":")[0] == model]:
            del self._served[key]

    def from_repository(self, name: str) -> bool:
        """Whether `name` is served as a model of the repository (`serve`'s TF Serving
        fronts: any model, by its V2 inputs and outputs, as its one signature)."""
        return self.repository_models and name not in self.models

    def labelled(
        self, name: str, version: int | None, label: str
    ) -> tuple[TfModel | None, int | None]:
        """The model asked for (None: a repository model), and the version: the one
        given, its label's, or None."""
        model = self.models.get(name)
        if model is None:
            if not self.from_repository(name):
                raise missing(name, version)
            if label:  # a repository model has no labels
                raise invalid(f"Unrecognized servable version label: {label}")
            return None, version
        if label:
            if label not in model.labels:
                raise invalid(f"Unrecognized servable version label: {label}")
            version = model.labels[label]
        return model, version

    async def served(
        self, core: Core, name: str, version: int | None, label: str, signature: str
    ) -> Served:
        """resolve(), with the signature's inputs and outputs."""
        model, resolved = await self.resolve(core, name, version, label, signature)
        number = "" if resolved is None else str(resolved)
        try:
            metadata = await core.model_metadata(model, number)
        except NotFound:
            raise missing(name, resolved) from None
        cached = self._served.get((model, number))
        if cached is not None and cached[0] is metadata:  # (the core's, made once per
            return cached[1]  # set of ready versions: the same object, the same answer)
        inputs = {t["name"]: t["datatype"] for t in metadata["inputs"]}
        outputs = {t["name"]: t["datatype"] for t in metadata["outputs"]}
        shapes = {t["name"]: [int(d) for d in t["shape"]] for t in metadata["inputs"]}
        served = Served(name, model, resolved, inputs, outputs, shapes)
        self._served[(model, number)] = (metadata, served)
        return served

    async def resolve(
        self, core: Core, name: str, version: int | None, label: str, signature: str
    ) -> tuple[str, int | None]:
        """The repository model and version (None: its latest) a request for `name` at
        `version` or `label` and `signature` goes to; its signature's model loaded."""
        model, version = self.labelled(name, version, label)
        signature = signature or DEFAULT_SIGNATURE
        if signature == DEFAULT_SIGNATURE:
            return name, version
        if model is None:  # a repository model: one signature
            raise SignatureMissing(signature)
        signatures = self.signatures.get(name, {})
        known = versions_of(signatures)  # (the served ones)
        having = signatures.get(signature, [])
        if version is None:
            # As TF Serving: the latest version must have the signature. The request then
            # goes to the signature's latest, not to a number: while versions roll over,
            # the model and its signature's model change versions at different moments.
            if not known or max(known) not in having:
                raise SignatureMissing(signature)
        elif version not in known:
            raise missing(name, version)
        elif version not in having:
            raise SignatureMissing(signature)
        target = repository_name(name, signature)
        try:
            await core.load_on_first_use(target)
        except GatewayError as exc:
            raise from_gateway(exc) from None
        return target, version
