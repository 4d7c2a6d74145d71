"""The Kubernetes and KServe manifests in deploy/, checked against the APIs' own models
(the `kubernetes` and `kserve` packages, generated from those APIs' schemas): every
field known and of its type, every required field there, every enum value allowed;
and against each other and the gateway (ports, names, selectors, serve options)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")


def _kserve_models() -> Any:
    """kserve.models without kserve's own __init__: that starts its model server's
    imports, whose V2 proto clashes with tritonclient's in protobuf's default pool
    (both name `inference.ServerLiveRequest`). The API models need none of it."""
    spec = importlib.util.find_spec("kserve")
    if spec is None:
        pytest.skip("kserve is not installed")
    if "kserve" not in sys.modules:
        package = types.ModuleType("kserve")
        package.__path__ = list(spec.submodule_search_locations or [])
        sys.modules["kserve"] = package
    return importlib.import_module("kserve.models")


kserve_models = _kserve_models()

from gateway.cli import build_parser  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

# (apiVersion, kind) -> the model class that API's schema generated.
KINDS = {
    ("apps/v1", "Deployment"): "V1Deployment",
    ("v1", "Service"): "V1Service",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}
_PRIMITIVES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


def model_class(name: str) -> type:
    for module in (kubernetes.client.models, kserve_models):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no generated model named {name}")


def problems(value: Any, type_name: str, where: str) -> list[str]:
    """What in `value` does not fit the generated type `type_name`."""
    if type_name in ("object", "datetime"):
        return []
    if type_name in _PRIMITIVES:
        fits = isinstance(value, _PRIMITIVES[type_name]) and not (
            type_name != "bool" and isinstance(value, bool)
        )
        return [] if fits else [f"{where}: {value!r} is not {type_name}"]
    if match := re.fullmatch(r"[lL]ist\[(.+)\]", type_name):
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [p for i, v in enumerate(value) for p in problems(v, match[1], f"{where}[{i}]")]
    if match := re.fullmatch(r"dict\((\w+), (.+)\)|Dict\[(\w+), (.+)\]", type_name):
        if not isinstance(value, dict):
            return [f"{where}: not a mapping"]
        inner = match[2] or match[4]
        return [p for k, v in value.items() for p in problems(v, inner, f"{where}.{k}")]
    cls = model_class(type_name)
    if hasattr(cls, "model_validate"):  # kubernetes' models: pydantic, no unknown fields
        try:
            cls.model_validate(value)
        except pydantic.ValidationError as exc:
            return [f"{where}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        return []
    if not isinstance(value, dict):
        return [f"{where}: not a mapping ({type_name})"]
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    found = [f"{where}.{key}: no such field in {type_name}" for key in value if key not in by_json]
    for key, item in value.items():
        if key in by_json:
            found += problems(item, cls.openapi_types[by_json[key]], f"{where}.{key}")
    try:  # the generated setters refuse a missing required field and enum values
        cls(**{by_json[k]: v for k, v in value.items() if k in by_json})
    except ValueError as exc:
        found.append(f"{where} ({type_name}): {exc}")
    return found


def manifests(folder: str) -> list[tuple[Path, dict]]:
    return [
        (path, document)
        for path in sorted((DEPLOY / folder).rglob("*.yaml"))
        if path.name != "kustomization.yaml"
        for document in yaml.safe_load_all(path.read_text())
    ]


# The Prometheus operator's ServiceMonitor has no generated models here: it is checked
# against the Service it scrapes (test_the_service_monitor_scrapes_metrics).
SERVICE_MONITOR = ("monitoring.coreos.com/v1", "ServiceMonitor")
EVERY = manifests("kserve") + manifests("kubernetes")
ALL = [(p, d) for p, d in EVERY if (d["apiVersion"], d["kind"]) != SERVICE_MONITOR]


@pytest.mark.parametrize(
    ("path", "document"), ALL, ids=[str(p.relative_to(DEPLOY)) for p, _ in ALL]
)
def test_each_manifest_fits_its_api_schema(path, document):
    key = (document["apiVersion"], document["kind"])
    assert key in KINDS, f"{path.name}: unexpected {key}"
    assert problems(document, KINDS[key], path.name) == []


def test_every_manifest_is_checked():
    assert len(EVERY) == len(ALL) + 1 and len(ALL) >= 12


def test_the_checker_catches_what_it_should():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replica": 2}}
    assert problems(deployment, "V1Deployment", "d") == [
        "d.spec.selector: Field required",
        "d.spec.template: Field required",
        "d.spec.replica: Extra inputs are not permitted",
    ]
    assert problems({"port": "80"}, "V1ServicePort", "p") == [
        "p.port: Input should be a valid integer"
    ]
    runtime = {"spec": {"containers": [{"name": "c", "argz": []}], "protocolVersion": ["v2"]}}
    assert problems(runtime, "V1alpha1ServingRuntime", "r") == [
        "r.spec.protocolVersion: no such field in V1alpha1ServingRuntimeSpec",
        "r.spec.containers[0].argz: Extra inputs are not permitted",
    ]


def _serve_args(container: dict) -> None:
    """The container's args are options `accel-gateway serve` takes."""
    parser = build_parser()
    parser.exit_on_error = False
    parser.parse_args(["serve", "--model-repository", "/models", *container["args"]])


def _kustomize_docs() -> dict[str, dict]:
    base = DEPLOY / "kubernetes"
    listed = yaml.safe_load((base / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in base.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    return {
        yaml.safe_load((base / name).read_text())["kind"]: yaml.safe_load((base / name).read_text())
        for name in listed
    }


def test_the_deployment_service_and_autoscaler_agree():
    docs = _kustomize_docs()
    deployment, service, hpa = docs["Deployment"], docs["Service"], docs["HorizontalPodAutoscaler"]
    pod = deployment["spec"]["template"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    _serve_args(container)
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named == {"http": 8000, "grpc": 8001, "metrics": 8002}
    for arg, port in (("--http-port", 8000), ("--grpc-port", 8001), ("--metrics-port", 8002)):
        assert f"{arg}={port}" in container["args"]
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= named.keys()
    claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert claim == docs["PersistentVolumeClaim"]["metadata"]["name"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])


def test_the_autoscaler_scales_on_a_metric_the_gateway_exports(gateway):
    import urllib.request

    hpa = _kustomize_docs()["HorizontalPodAutoscaler"]
    names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/metrics") as reply:
        exported = reply.read().decode()
    for name in names:
        assert f"# TYPE {name} " in exported


def test_the_service_monitor_scrapes_metrics():
    docs = _kustomize_docs()
    monitor, service = docs["ServiceMonitor"], docs["Service"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    kustomize = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    common = kustomize["labels"][0]["pairs"]  # kustomize puts these on the Service too
    assert monitor["spec"]["selector"]["matchLabels"].items() <= common.items()


def test_inference_services_name_the_runtime_and_its_formats():
    runtime = yaml.safe_load((DEPLOY / "kserve" / "serving-runtime.yaml").read_text())
    cluster = yaml.safe_load((DEPLOY / "kserve" / "cluster-serving-runtime.yaml").read_text())
    assert runtime["spec"] == cluster["spec"]
    container = runtime["spec"]["containers"][0]
    _serve_args(container)
    formats = {(f["name"], f["version"]) for f in runtime["spec"]["supportedModelFormats"]}
    services = list((DEPLOY / "kserve" / "inferenceservices").glob("*.yaml"))
    assert len(services) >= 7
    for path in services:
        model = yaml.safe_load(path.read_text())["spec"]["predictor"]["model"]
        assert model["runtime"] == runtime["metadata"]["name"], path.name
        assert (model["modelFormat"]["name"], model["modelFormat"]["version"]) in formats
        assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
        for port in model.get("ports", []):
            assert f"--grpc-port={port['containerPort']}" in container["args"]
