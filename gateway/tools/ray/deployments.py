"""A model repository as a Ray Serve application: one deployment per model (its options
from the model's config), and the ingress in front of them all."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from accel_base.errors import GatewayError
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from gateway.core.model_config import platform_of, read_config
from gateway.core.placement import footprint

log = logging.getLogger(__name__)

APP_NAME = "accel-gateway"
INGRESS = "ingress"
GPU_SHARE_STEP = 0.05  # a model's share of a GPU is rounded up to this
DEFAULT_MAX_QUEUED = 1024  # as the gateway's --max-queue-size


def gpu_share(predicted_bytes: int, gpu_bytes: int) -> float:
    """The fraction of one GPU that a model of `predicted_bytes` takes, rounded up."""
    if gpu_bytes <= 0:
        return 1.0
    steps = math.ceil(predicted_bytes / gpu_bytes / GPU_SHARE_STEP)
    return min(1.0, round(max(1, steps) * GPU_SHARE_STEP, 6))


def deployment_options(config: mc.ModelConfig, gpu_bytes: int, predicted_gpu_bytes: int) -> dict:
    """serve.deployment options from the config's `ray` section and instance groups.

    Replicas: ray.num_replicas, else the instance_group count (each replica runs one
    instance); ray.max_replicas above 0 turns autoscaling on instead; a sequence model
    gets one. A KIND_GPU model
    with no ray.num_gpus reserves the share of a GPU its predicted footprint takes.
    """
    ray = config.ray
    options: dict[str, Any] = {}
    if config.HasField("sequence_batching"):
        # A sequence's requests must all reach the replica that holds its state, and a
        # Serve handle cannot route by correlation id.
        options["num_replicas"] = 1
    elif ray.max_replicas > 0:
        autoscaling: dict[str, Any] = {
            "min_replicas": ray.min_replicas,
            "max_replicas": ray.max_replicas,
        }
        if ray.target_ongoing_requests > 0:
            autoscaling["target_ongoing_requests"] = ray.target_ongoing_requests
        options["autoscaling_config"] = autoscaling
    else:
        counts = [group.count or 1 for group in config.instance_group]
        options["num_replicas"] = ray.num_replicas or sum(counts) or 1
    # A batch forms from requests the replica holds at once: let it hold a batch's worth.
    batch = config.max_batch_size if config.HasField("dynamic_batching") else 0
    options["max_ongoing_requests"] = ray.max_ongoing_requests or max(5, 2 * batch)
    # Requests waiting for a replica are bounded as the gateway's own queue is; past it,
    # the caller gets a 503 at once.
    policy = config.dynamic_batching.default_queue_policy
    options["max_queued_requests"] = policy.max_queue_size or DEFAULT_MAX_QUEUED
    actor: dict[str, Any] = {}
    if ray.num_cpus > 0:
        actor["num_cpus"] = ray.num_cpus
    gpu = any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)
    if ray.num_gpus > 0:
        actor["num_gpus"] = ray.num_gpus
    elif gpu:
        actor["num_gpus"] = gpu_share(predicted_gpu_bytes, gpu_bytes)
    if actor:
        options["ray_actor_options"] = actor
    return options


def _gpu_bytes() -> int:
    from gateway.operation.gpu import read_gpus

    readings = read_gpus()
    return min((r.memory_total_bytes for r in readings), default=0)


def model_deployments(repository: Path) -> dict[str, dict]:
    """Each model of the repository whose config reads, with its deployment options."""
    from gateway.core.repository import ModelRepository

    gpu_bytes = _gpu_bytes()
    found = {}
    for name in ModelRepository(repository).model_names_on_disk():
        try:
            config = read_config(repository / name)
        except GatewayError as exc:
            log.error("model '%s' is not deployed: %s", name, exc.message)
            continue
        versions = [p for p in (repository / name).iterdir() if p.name.isdigit()]
        version_dir = max(versions, key=lambda p: int(p.name), default=repository / name)
        predicted = footprint.predict(config, platform_of(config), version_dir, Device("gpu"), True)
        found[name] = deployment_options(config, gpu_bytes, predicted)
    return found


def application(
    repository: Path, ingress_options: dict, ingress_replicas: int, node_ip: str
) -> Any:
    """The Serve application: the models' deployments bound into the ingress, whose
    replicas run on the node at `node_ip` (where `ray serve` runs: the address it was
    told to serve on is that node's)."""
    from ray import serve

    from gateway.tools.ray.ingress import Ingress
    from gateway.tools.ray.replica import ModelReplica

    handles = {}
    for name, options in model_deployments(repository).items():
        deployment = serve.deployment(ModelReplica, name=f"model-{name}", **options)
        handles[name] = deployment.bind(str(repository), name)
    on_node = {"num_cpus": 0, "resources": {f"node:{node_ip}": 0.001}}
    ingress = serve.deployment(
        Ingress, name=INGRESS, num_replicas=ingress_replicas, ray_actor_options=on_node
    )
    return ingress.bind(handles, ingress_options)
