"""A model's Ray Serve deployment options, from its config's `ray` section and
instance groups."""

from __future__ import annotations

import pytest

from gateway.core.model_config import parse_config_text
from gateway.tools.ray.deployments import deployment_options, gpu_share
from gateway.tools.ray.replica import one_instance

GIB = 1 << 30


def options(text: str, gpu_bytes: int = 80 * GIB, predicted: int = 0) -> dict:
    config = parse_config_text(f'name: "m" backend: "onnxruntime" {text}', "test")
    return deployment_options(config, gpu_bytes, predicted)


def test_replicas_follow_the_instance_count_by_default():
    assert options("")["num_replicas"] == 1
    text = "instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_CPU } ]"
    assert options(text)["num_replicas"] == 3
    assert options(f"{text} ray {{ num_replicas: 5 }}")["num_replicas"] == 5


def test_a_sequence_model_gets_one_replica_whatever_it_asks():
    text = "sequence_batching { } instance_group [ { count: 4 } ] ray { max_replicas: 3 }"
    found = options(text)
    assert found["num_replicas"] == 1 and "autoscaling_config" not in found


def test_autoscaling_replaces_a_fixed_count():
    found = options("ray { min_replicas: 1 max_replicas: 4 target_ongoing_requests: 3 }")
    assert "num_replicas" not in found
    assert found["autoscaling_config"] == {
        "min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 3.0,
    }  # fmt: skip


def test_a_batching_replica_holds_enough_requests_to_fill_a_batch():
    assert options("")["max_ongoing_requests"] == 5
    batched = "max_batch_size: 32 dynamic_batching { }"
    assert options(batched)["max_ongoing_requests"] == 64
    assert options(f"{batched} ray {{ max_ongoing_requests: 9 }}")["max_ongoing_requests"] == 9


def test_gpu_models_reserve_their_share_of_a_gpu():
    gpu = "instance_group [ { kind: KIND_GPU } ]"
    assert "ray_actor_options" not in options("")
    assert options(gpu, predicted=12 * GIB)["ray_actor_options"] == {"num_gpus": 0.15}
    assert options(f"{gpu} ray {{ num_gpus: 0.5 num_cpus: 2 }}")["ray_actor_options"] == {
        "num_cpus": 2.0, "num_gpus": 0.5,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("predicted", "total", "share"),
    [(0, 80, 0.05), (1, 80, 0.05), (4, 80, 0.05), (5, 80, 0.1), (200, 80, 1.0), (1, 0, 1.0)],
)
def test_gpu_share_rounds_up_in_steps(predicted, total, share):
    assert gpu_share(predicted * GIB, total * GIB) == pytest.approx(share)


def test_a_replica_runs_one_instance_of_the_kind_configured():
    two_gpus = {"instance_group": [{"count": 4, "kind": "KIND_GPU", "gpus": [0, 1]}]}
    assert one_instance(two_gpus)["instance_group"] == [{"count": 1, "kind": "KIND_GPU"}]
    assert one_instance({})["instance_group"] == [{"count": 1, "kind": "KIND_AUTO"}]
