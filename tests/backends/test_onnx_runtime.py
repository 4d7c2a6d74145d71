from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.cpu import usable_cores
from accel_base.proto import model_config_pb2 as mc
from backends import BackendUnavailable, Device, backend_class
from backends.onnx_runtime import OnnxRuntimeBackend, choose_providers, session_options


def config(text: str = "") -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" platform: "onnxruntime_onnx" {text}', mc.ModelConfig())


def test_platform_and_backend_names_resolve():
    assert backend_class("onnxruntime_onnx") is OnnxRuntimeBackend
    assert backend_class("onnxruntime") is OnnxRuntimeBackend
    with pytest.raises(BackendUnavailable, match="unknown platform/backend 'caffe'"):
        backend_class("caffe")


def test_cpu_providers_fall_back_in_priority_order():
    cfg = config(
        "optimization { execution_accelerators { cpu_execution_accelerator "
        '[ { name: "openvino" } ] } }'
    )
    chosen = choose_providers(cfg, Device("cpu"), ["CPUExecutionProvider"])
    assert [name for name, _ in chosen] == ["CPUExecutionProvider"]
    chosen = choose_providers(
        cfg, Device("cpu"), ["OpenVINOExecutionProvider", "CPUExecutionProvider"]
    )
    assert [name for name, _ in chosen] == ["OpenVINOExecutionProvider", "CPUExecutionProvider"]


def test_gpu_providers_translate_triton_tensorrt_parameters():
    cfg = config(
        "optimization { execution_accelerators { gpu_execution_accelerator [ { "
        'name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } '
        'parameters { key: "trt_engine_cache_path" value: "/cache" } } ] } }'
    )
    available = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    chosen = dict(choose_providers(cfg, Device("gpu", 1), available))
    assert list(chosen) == available
    assert chosen["TensorrtExecutionProvider"] == {
        "device_id": "1",
        "trt_fp16_enable": "True",
        "trt_engine_cache_path": "/cache",
    }
    assert chosen["CUDAExecutionProvider"] == {"device_id": "1"}


def test_relative_cache_paths_are_taken_inside_the_model_directory(tmp_path):
    cfg = config(
        "optimization { execution_accelerators { gpu_execution_accelerator [ { "
        'name: "tensorrt" parameters { key: "trt_engine_cache_path" value: "trt" } '
        'parameters { key: "trt_extra_plugin_lib_paths" value: "a.so;libs/b.so" } '
        'parameters { key: "trt_max_workspace_size" value: "1024" } } ] } }'
    )
    available = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    chosen = dict(choose_providers(cfg, Device("gpu", 0), available, tmp_path))
    trt = chosen["TensorrtExecutionProvider"]
    assert trt["trt_engine_cache_path"] == str(tmp_path / "trt")  # not the server's CWD
    assert trt["trt_extra_plugin_lib_paths"] == f"{tmp_path / 'a.so'};{tmp_path / 'libs/b.so'}"
    assert trt["trt_max_workspace_size"] == "1024"  # not a path: as it was
    openvino = config(
        "optimization { execution_accelerators { cpu_execution_accelerator [ { "
        'name: "openvino" parameters { key: "cache_dir" value: "ov" } } ] } }'
    )
    chosen = dict(
        choose_providers(openvino, Device("cpu"), ["OpenVINOExecutionProvider"], tmp_path)
    )
    assert chosen["OpenVINOExecutionProvider"] == {"cache_dir": str(tmp_path / "ov")}


def test_gpu_instance_without_cuda_is_a_clear_error():
    with pytest.raises(BackendUnavailable, match="no CUDAExecutionProvider"):
        choose_providers(config(), Device("gpu", 0), ["CPUExecutionProvider"])


def test_unknown_accelerator_is_named():
    cfg = config(
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "fpga" } ] } }'
    )
    with pytest.raises(BackendUnavailable, match="'fpga'"):
        choose_providers(cfg, Device("cpu"), ["CPUExecutionProvider"])


def test_triton_parameters_reach_the_session():
    cfg = config(
        'parameters { key: "intra_op_thread_count" value { string_value: "3" } } '
        'parameters { key: "inter_op_thread_count" value { string_value: "2" } } '
        "optimization { graph { level: 1 } }"
    )
    options = session_options(cfg)
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 2
    bad = config('parameters { key: "intra_op_thread_count" value { string_value: "many" } }')
    with pytest.raises(BackendUnavailable, match="intra_op_thread_count must be an integer"):
        session_options(bad)


def test_runs_bf16_and_strings(example_repository):
    bf16 = OnnxRuntimeBackend(
        example_repository / "identity_bf16" / "1" / "model.onnx", config(), Device("cpu")
    )
    bits = np.array([[0x3FC0, 0xC000]], dtype=np.uint16)
    np.testing.assert_array_equal(bf16.run({"INPUT0": bits}, ["OUTPUT0"])["OUTPUT0"], bits)
    strings = OnnxRuntimeBackend(
        example_repository / "identity_bytes" / "1" / "model.onnx", config(), Device("cpu")
    )
    data = np.array([[b"a", "ü".encode()]], dtype=object)
    assert strings.run({"INPUT0": data}, ["OUTPUT0"])["OUTPUT0"].tolist() == data.tolist()
    assert strings.memory_bytes() > 0
    for backend in (bf16, strings):
        backend.unload()


def test_thread_counts_default_to_the_usable_cores():
    cores = usable_cores()
    for unset in (
        config(),
        config('parameters { key: "intra_op_thread_count" value { string_value: "0" } }'),
    ):
        options = session_options(unset)
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (cores, cores)
