"""TorchServe's config.properties, and what `accel-gateway torchserve` takes from it.

The file is a Java properties file (`key=value` or `key: value`, `#` and `!` comments,
a trailing backslash continuing a line). With `enable_envvars_config=true`, a `TS_<KEY>`
environment variable (upper case) overrides the file's `<key>`, as in TorchServe.
Keys this gateway does not act on are named in a warning, never dropped unsaid.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# What the gateway acts on; the V2 ports are our own keys (TorchServe has no V2 front).
KNOWN = {
    "inference_address", "management_address", "metrics_address", "grpc_inference_port",
    "grpc_management_port", "model_store", "load_models", "models",
    "default_workers_per_model", "job_queue_size", "max_request_size",
    "default_response_timeout", "service_envelope", "token_expiration_min",
    "install_py_dep_per_model", "number_of_gpu",
    "enable_envvars_config", "disable_token_authorization", "enable_model_api",
    "allowed_urls", "v2_address", "v2_http_port", "v2_grpc_port",
}  # fmt: skip


class PropertiesError(ValueError):
    """A config.properties value that cannot be used, named."""


def parse(text: str) -> dict[str, str]:
    """A Java properties file's keys and values (the escapes TorchServe's files use)."""
    values: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:cut], line[cut + 1 :]) if cut >= 0 else (line, "")
        values[key.strip()] = value.strip()
    return values


def _address(value: str, key: str) -> tuple[str, int]:
    parts = urlsplit(value if "://" in value else f"http://{value}")
    if parts.scheme != "http" or parts.port is None or not parts.hostname:
        raise PropertiesError(
            f"{key}={value}: expected http://HOST:PORT (HTTPS addresses are not served yet)"
        )
    return parts.hostname, parts.port


def _integer(values: Mapping[str, str], key: str, default: int) -> int:
    text = values.get(key)
    if text is None:
        return default
    try:
        number = int(text)
    except ValueError:
        raise PropertiesError(f"{key}={text}: expected a whole number") from None
    if number < 0:
        raise PropertiesError(f"{key}={text}: expected a number >= 0")
    return number


def _flag(values: Mapping[str, str], key: str) -> bool:
    text = values.get(key, "false").lower()
    if text not in ("true", "false"):
        raise PropertiesError(f"{key}={values[key]}: expected true or false")
    return text == "true"


# What the per-model JSON (`models`) may set for a version, and its type.
MODEL_KEYS = {
    "defaultVersion": bool, "marName": str, "minWorkers": int, "maxWorkers": int,
    "batchSize": int, "maxBatchDelay": int, "responseTimeout": int,
}  # fmt: skip


def _per_model(text: str) -> dict[str, dict[str, dict[str, Any]]]:
    """`models`: {"<name>": {"<version>": {"minWorkers": 1, ...}}}, checked key by key."""
    try:
        models = json.loads(text)
    except ValueError as exc:
        raise PropertiesError(f"models: not JSON ({exc})") from None
    if not isinstance(models, dict):
        raise PropertiesError('models: expected {"<name>": {"<version>": {...}}}')
    for name, versions in models.items():
        if not isinstance(versions, dict):
            raise PropertiesError(f"models: {name}: expected an object of versions")
        for version, settings in versions.items():
            if not isinstance(settings, dict):
                raise PropertiesError(f"models: {name} {version}: expected an object")
            for key, value in settings.items():
                kind = MODEL_KEYS.get(key)
                if kind is None:
                    raise PropertiesError(
                        f"models: {name} {version}: unknown key {key}; expected some of "
                        f"{', '.join(MODEL_KEYS)}"
                    )
                if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                    raise PropertiesError(
                        f"models: {name} {version}: {key} must be a {kind.__name__}"
                    )
    return models


@dataclass
class Properties:
    host: str = "127.0.0.1"  # inference_address's (HTTP and gRPC inference)
    inference_port: int = 8080
    management_host: str = "127.0.0.1"
    management_port: int = 8081
    metrics_port: int = 8082
    grpc_inference_port: int = 7070
    grpc_management_port: int = 7071
    v2_host: str = "127.0.0.1"  # V2 and metrics (our own key v2_address: a host)
    v2_http_port: int = 8000
    v2_grpc_port: int = 8001
    model_store: Path | None = None
    load_models: list[str] = field(default_factory=list)
    models: dict[str, Any] = field(default_factory=dict)  # per model and version
    default_workers_per_model: int = 1
    job_queue_size: int = 100
    default_response_timeout: int = 120  # seconds
    service_envelope: str = ""  # json, kserve or kservev2; "": none
    install_py_dep_per_model: bool = False  # an archive's requirementsFile, per model
    max_request_size: int = 6553500  # TorchServe's default, bytes
    token_authorization: bool = True
    token_expiration_min: int = 60  # how long an inference or management key lives
    model_api: bool = False
    allowed_urls: list[str] = field(default_factory=list)
    number_of_gpu: int = 0


def from_values(values: Mapping[str, str], environ: Mapping[str, str]) -> Properties:
    values = dict(values)
    if _flag(values, "enable_envvars_config"):
        for key, value in environ.items():
            if key.startswith("TS_"):
                values[key[3:].lower()] = value
    unknown = sorted(set(values) - KNOWN)
    if unknown:
        log.warning("config.properties: not acted on by accel-gateway: %s", ", ".join(unknown))
    props = Properties()
    host, props.inference_port = _address(
        values.get("inference_address", "http://127.0.0.1:8080"), "inference_address"
    )
    props.host = host
    props.management_host, props.management_port = _address(
        values.get("management_address", "http://127.0.0.1:8081"), "management_address"
    )
    if "metrics_address" in values:  # its port: the metrics listen with V2 (v2_address)
        props.metrics_port = _address(values["metrics_address"], "metrics_address")[1]
    props.grpc_inference_port = _integer(values, "grpc_inference_port", 7070)
    props.grpc_management_port = _integer(values, "grpc_management_port", 7071)
    props.v2_host = values.get("v2_address", "127.0.0.1").strip() or "127.0.0.1"
    props.v2_http_port = _integer(values, "v2_http_port", 8000)
    props.v2_grpc_port = _integer(values, "v2_grpc_port", 8001)
    if "model_store" in values:
        props.model_store = Path(values["model_store"])
    if values.get("load_models"):
        props.load_models = [m.strip() for m in values["load_models"].split(",") if m.strip()]
    if values.get("models"):
        props.models = _per_model(values["models"])
    props.default_workers_per_model = _integer(values, "default_workers_per_model", 1) or 1
    props.job_queue_size = _integer(values, "job_queue_size", 100)
    props.default_response_timeout = _integer(values, "default_response_timeout", 120) or 120
    props.install_py_dep_per_model = _flag(values, "install_py_dep_per_model")
    props.service_envelope = values.get("service_envelope", "").strip()
    if props.service_envelope not in ("", "json", "body", "kserve", "kservev2"):
        raise PropertiesError(
            f"service_envelope={props.service_envelope}: expected json, body, kserve or kservev2"
        )
    props.max_request_size = _integer(values, "max_request_size", 6553500)
    props.token_authorization = not _flag(values, "disable_token_authorization")
    props.token_expiration_min = _integer(values, "token_expiration_min", 60) or 60
    props.model_api = _flag(values, "enable_model_api")
    props.allowed_urls = [u.strip() for u in values.get("allowed_urls", "").split(",") if u]
    for pattern in props.allowed_urls:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PropertiesError(
                f"allowed_urls: {pattern}: not a regular expression ({exc})"
            ) from None
    props.number_of_gpu = _integer(values, "number_of_gpu", 0)
    return props


def read(path: Path | None, environ: Mapping[str, str]) -> Properties:
    if path is None:
        return from_values({}, environ)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PropertiesError(f"--ts-config {path}: {exc.strerror}") from None
    return from_values(parse(text), environ)
