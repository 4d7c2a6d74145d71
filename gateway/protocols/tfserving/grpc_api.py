"""TF Serving's gRPC services on `--port` (8500), under their own names, so that the
unmodified `tensorflow-serving-api` stubs call them:

- `tensorflow.serving.PredictionService`: Predict, Classify, Regress, MultiInference
  (classify.py) and GetModelMetadata;
- `tensorflow.serving.ModelService`: GetModelStatus and HandleReloadConfigRequest
  (reload.py).

Errors carry TF Serving's codes and words (errors.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from accel_base.errors import GatewayError
from accel_base.proto.tfserving.tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from gateway.core.inference import Tensor
from gateway.core.interface import Core
from gateway.protocols.tfserving.classify import CLASSIFY, Methods, Spec
from gateway.protocols.tfserving.errors import TfsError, from_gateway, invalid
from gateway.protocols.tfserving.metadata import signature_def_map
from gateway.protocols.tfserving.model_configs import ModelConfigError, models_of
from gateway.protocols.tfserving.reload import Reloader
from gateway.protocols.tfserving.served import (
    DEFAULT_SIGNATURE,
    SignatureMissing,
    TfServing,
)
from gateway.protocols.tfserving.status import version_states
from gateway.protocols.tfserving.tensor_proto import fill, to_array

log = logging.getLogger("accel_gateway")
_STATES = get_model_status_pb2.ModelVersionStatus.State


def add_tfserving_services(
    server: Any, core: Core, tfs: TfServing, max_bytes: int, reloader: Reloader
) -> None:
    """`max_bytes`: the largest input a request may make (gRPC's message limit)."""
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(core, tfs, max_bytes), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(
        ModelServicer(core, tfs, reloader), server
    )


def _tfs_error(exc: TfsError | GatewayError) -> TfsError:
    return from_gateway(exc) if isinstance(exc, GatewayError) else exc


async def _abort(context: Any, exc: TfsError | GatewayError) -> None:
    error = _tfs_error(exc)
    await context.abort(error.code, error.message)


def _spec(request: Any) -> tuple[str, int | None, str]:
    if not request.HasField("model_spec"):
        raise invalid("Missing ModelSpec")
    spec = request.model_spec
    if not spec.name:
        raise invalid("ModelSpec has no name specified.")
    version = spec.version.value if spec.HasField("version") else None
    return spec.name, version, spec.version_label


def _check_inputs(given: list[str], expected: list[str]) -> None:
    if sorted(given) == sorted(expected):
        return
    extra = sorted(set(given) - set(expected))
    missing_ = sorted(set(expected) - set(given))
    raise invalid(
        f"input size does not match signature: {len(given)}!={len(expected)} "
        f"len({{{','.join(sorted(given))}}}) != len({{{','.join(sorted(expected))}}}). "
        f"Sent extra: {{{','.join(extra)}}}. Missing but required: {{{','.join(missing_)}}}."
    )


def _filtered(output_filter: list[str], outputs: list[str]) -> list[str]:
    if not output_filter:
        return outputs
    seen: set[str] = set()
    for alias in output_filter:
        if alias not in outputs:
            names = ",".join(sorted(outputs))
            raise invalid(f"output tensor alias not found in signature: {alias} Outputs "
                          f"expected to be in the set {{{names}}}.")  # fmt: skip
        if alias in seen:
            raise invalid(f"duplicate output tensor alias: {alias}")
        seen.add(alias)
    return list(output_filter)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, core: Core, tfs: TfServing, max_bytes: int) -> None:
        self.core, self.tfs, self.max_bytes = core, tfs, max_bytes
        self.methods = Methods(core, tfs, max_bytes)

    async def _counted(self, api: str, request: Any, context: Any,
                       answer: Callable[[], Awaitable[Any]]) -> Any:  # fmt: skip
        """`answer()`'s response, or its error as the call's status; counted in TF
        Serving's metrics (monitoring.py) as its `api`."""
        start = time.perf_counter()
        try:
            response = await answer()
        except (TfsError, GatewayError) as exc:
            name, error = request.model_spec.name, _tfs_error(exc)
            self.tfs.metrics.record(name, error.code.name,
                                    known=name in self.tfs.models)  # fmt: skip
            await _abort(context, error)
            return None
        micros = int((time.perf_counter() - start) * 1e6)
        self.tfs.metrics.record(request.model_spec.name, "OK", api, "GRPC", micros)
        return response

    async def Predict(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC's name)
        return await self._counted("Predict", request, context, lambda: self._predict(request))

    async def _predict(self, request: Any) -> Any:
        self.core.shedder.check()
        name, version, label = _spec(request)
        signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
        try:
            served = await self.tfs.served(self.core, name, version, label, signature)
        except SignatureMissing as exc:  # over gRPC, as TF Serving: a failed precondition
            message = f'Serving signature key "{exc.signature}" not found.'
            raise TfsError(grpc.StatusCode.FAILED_PRECONDITION, message) from None
        await self.methods.check_predict(served, signature)
        _check_inputs(list(request.inputs), list(served.inputs))
        tensors = []
        for input_name, proto in request.inputs.items():
            try:
                array, datatype = to_array(proto, input_name, self.max_bytes)
            except (ValueError, OverflowError) as exc:  # values that do not fit their dtype
                raise invalid(f"tensor parsing error: {input_name} ({exc})") from None
            tensors.append(Tensor(input_name, datatype, array))
        outputs = _filtered(list(request.output_filter), list(served.outputs))
        answer = await served.run(self.core, tensors, outputs)
        response = predict_pb2.PredictResponse()
        response.model_spec.name = name
        response.model_spec.signature_name = signature
        response.model_spec.version.value = int(answer.model_version)
        for tensor in answer.outputs:
            fill(response.outputs[tensor.name], tensor.data, tensor.datatype)
        return response

    async def GetModelMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            name, version, label = _spec(request)
            fields = list(request.metadata_field)
            if not fields:
                raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
            for field in fields:
                if field != "signature_def":
                    raise invalid(f"Metadata field {field} is not supported")
            loaded, defs = await signature_def_map(self.core, self.tfs, name, version, label)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = name
            response.model_spec.version.value = loaded
            response.metadata["signature_def"].Pack(defs)
            return response
        except (TfsError, GatewayError) as exc:
            await _abort(context, exc)

    async def Classify(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self._counted(
            "Classify",
            request,
            context,
            lambda: self.methods.classify(request, self._spec(request)),
        )

    async def Regress(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self._counted(
            "Regress", request, context, lambda: self.methods.regress(request, self._spec(request))
        )

    def _spec(self, request: Any) -> Spec:
        self.core.shedder.check()
        name, version, label = _spec(request)
        return Spec(name, version, label, request.model_spec.signature_name)

    async def MultiInference(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self.core.shedder.check()
            first = request.tasks[0].model_spec if request.tasks else None
            if first is None or not first.name:
                raise invalid("ModelSpec has no name specified.")
            version = first.version.value if first.HasField("version") else None
            spec = Spec(first.name, version, first.version_label, first.signature_name)
            tasks = [(task.model_spec, task.method_name) for task in request.tasks]
            done = await self.methods.multi_inference(tasks, spec, request.input)
        except (TfsError, GatewayError) as exc:
            await _abort(context, exc)
            return None
        response = inference_pb2.MultiInferenceResponse()
        for model_spec, method, result in done:
            row = response.results.add()
            row.model_spec.CopyFrom(model_spec)
            if method == CLASSIFY:
                row.classification_result.CopyFrom(result)
            else:
                row.regression_result.CopyFrom(result)
        return response


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, core: Core, tfs: TfServing, reloader: Reloader) -> None:
        self.core, self.tfs, self.reloader = core, tfs, reloader

    async def GetModelStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            name, version, _ = _spec(request)
            states = await version_states(self.core, self.tfs, name, version)
        except (TfsError, GatewayError) as exc:
            await _abort(context, exc)
            return None
        response = get_model_status_pb2.GetModelStatusResponse()
        for state in states["model_version_status"]:
            row = response.model_version_status.add()
            row.version = int(state["version"])
            row.state = _STATES.Value(state["state"])
            row.status.error_code = 0 if state["status"]["error_code"] == "OK" else 2
            row.status.error_message = state["status"]["error_message"]
        return response

    async def HandleReloadConfigRequest(self, request: Any, context: Any) -> Any:  # noqa: N802
        """Serve the request's model config instead; relative base paths are relative to
        the server's working directory."""
        try:
            if request.config.WhichOneof("config") != "model_config_list":
                raise invalid("ServerModelConfig type not supported by "
                              "HandleReloadConfigRequest. Only ModelConfigList is currently "
                              "supported")  # fmt: skip
            where = Path.cwd() / "reload"
            try:
                models = models_of(request.config, where)
            except ModelConfigError as exc:
                raise invalid(str(exc).removeprefix(f"{where}: ")) from None
            self.reloader.check_roots(models)
            await self.reloader.apply(models)
        except (TfsError, GatewayError) as exc:
            await _abort(context, exc)
            return None
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = 0  # OK
        return response
