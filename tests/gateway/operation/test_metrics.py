from __future__ import annotations

import socket
from types import SimpleNamespace

from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from backends.torchserve import VERSIONS
from gateway.core.placement.footprint import Footprint
from gateway.core.placement.inventory import DeviceMemory
from gateway.core.placement.manager import MemoryManager
from gateway.core.statistics import ModelStatistics
from gateway.operation.gpu import GpuReading
from gateway.operation.metrics import render


def fake_repository(config: mc.ModelConfig | None = None):
    stats = ModelStatistics("m", "1")
    stats.record_execution(4, 2, 100, 4000, 50)
    stats.record_execution(1, 1, 100, 1000, 50)
    stats.record_execution(32, 20, 100, 9000, 50, rows=30)
    stats.record_success(5000, 1000)
    stats.record_failure(10, "REJECTED")
    model = SimpleNamespace(
        name="m",
        version=1,
        config=config or mc.ModelConfig(name="m"),
        stats=stats,
        pending=3,
        instances=[],  # threads only: no worker metrics
        footprints=[Footprint("m/1/0#0", Device("cpu"), 3000, 2500)],
    )
    memory = MemoryManager([DeviceMemory(Device("cpu"), 10**6, 10**6, 9000)])
    memory.ledger.book("m/1/0#0", "m", Device("cpu"), 3000)
    memory.stats.hits, memory.stats.misses, memory.stats.evictions = 7, 2, 1
    memory.stats.load_seconds.observe(0.3)
    memory.stats.load_seconds.observe(7.0)
    return SimpleNamespace(ready_models=lambda: [model], memory=memory)


def samples(text: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


def test_triton_names_and_batch_histogram():
    values = samples(render(fake_repository(), read_gpus=list))
    labels = 'model="m",version="1"'
    assert values[f"nv_inference_exec_count{{{labels}}}"] == "3"
    assert values[f"nv_inference_count{{{labels}}}"] == "35"  # padding rows excluded
    assert values[f'nv_inference_request_failure{{{labels},reason="REJECTED"}}'] == "1"
    assert values[f"nv_inference_pending_request_count{{{labels}}}"] == "3"
    # Per-request compute infer: each request is charged its batch's duration.
    assert values[f"nv_inference_compute_infer_duration_us{{{labels}}}"] == str(
        (4000 * 2 + 1000 + 9000 * 20) // 1000
    )
    assert values[f'accel_gateway_batch_size_bucket{{{labels},le="1"}}'] == "1"
    assert values[f'accel_gateway_batch_size_bucket{{{labels},le="4"}}'] == "2"
    assert values[f'accel_gateway_batch_size_bucket{{{labels},le="+Inf"}}'] == "3"
    assert values[f"accel_gateway_batch_size_sum{{{labels}}}"] == "37"
    assert "nv_gpu_utilization" not in values


def test_gpu_gauges_when_a_gpu_is_there():
    reading = GpuReading(0, "GPU-1234", 0.5, 80 * 2**30, 2**30)
    values = samples(render(fake_repository(), read_gpus=lambda: [reading]))
    assert values['nv_gpu_utilization{gpu_uuid="GPU-1234"}'] == "0.5"
    assert values['nv_gpu_memory_total_bytes{gpu_uuid="GPU-1234"}'] == str(80 * 2**30)
    assert values['nv_gpu_memory_used_bytes{gpu_uuid="GPU-1234"}'] == str(2**30)


def test_memory_budgets_footprints_loads_and_evictions():
    values = samples(render(fake_repository(), read_gpus=list))
    assert values['accel_gateway_memory_budget_bytes{device="cpu"}'] == "9000"
    assert values['accel_gateway_memory_booked_bytes{device="cpu"}'] == "3000"
    where = 'model="m",version="1",device="cpu"'
    assert values[f"accel_gateway_model_memory_predicted_bytes{{{where}}}"] == "3000"
    assert values[f"accel_gateway_model_memory_measured_bytes{{{where}}}"] == "2500"
    assert values["accel_gateway_model_cache_hits"] == "7"
    assert values["accel_gateway_model_cache_misses"] == "2"
    assert values["accel_gateway_model_evictions"] == "1"
    assert values['accel_gateway_model_load_duration_seconds_bucket{le="0.5"}'] == "1"
    assert values['accel_gateway_model_load_duration_seconds_bucket{le="5"}'] == "1"
    assert values['accel_gateway_model_load_duration_seconds_bucket{le="10"}'] == "2"
    assert values['accel_gateway_model_load_duration_seconds_bucket{le="+Inf"}'] == "2"
    assert values["accel_gateway_model_load_duration_seconds_count"] == "2"


def test_torchserve_names_for_archives_only():
    """A TorchServe archive's model also counts under TorchServe's names, by its version's
    name; any other model does not; `names` keeps only the families asked for."""
    assert "ts_inference_requests_total" not in render(fake_repository(), read_gpus=list)
    config = mc.ModelConfig(name="m")
    config.parameters[VERSIONS].string_value = '{"1.0": "1"}'
    text = render(fake_repository(config), read_gpus=list)
    values = samples(text)
    labels = f'model_name="m",model_version="1.0",hostname="{socket.gethostname()}"'
    assert values[f"ts_inference_requests_total{{{labels}}}"] == "2.0"  # a success, a failure
    assert values[f"ts_inference_latency_microseconds{{{labels}}}"] == "5.01"
    assert values[f"ts_queue_latency_microseconds{{{labels}}}"] == "1.0"
    assert "# TYPE ts_queue_latency_microseconds counter" in text
    only = render(
        fake_repository(config), read_gpus=list, names=frozenset({"ts_inference_requests_total"})
    )
    assert [line for line in only.splitlines() if not line.startswith("#")] == [
        f"ts_inference_requests_total{{{labels}}} 2.0"
    ]
