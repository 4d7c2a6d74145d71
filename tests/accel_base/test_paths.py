"""Keys that name paths, and relative paths anchored in the model's directory."""

from __future__ import annotations

from pathlib import Path

from accel_base.paths import anchored, is_path_key, model_directory_of, split_paths


def test_path_keys():
    for key in ("trt_engine_cache_path", "cache_dir", "ep.context_file_path",
                "trt_extra_plugin_lib_paths", "load_config", "trt_int8_calibration_table_name",
                "Cache_Dir"):  # fmt: skip
        assert is_path_key(key), key
    for key in ("trt_max_workspace_size", "precision_mode", "device_id", "dirty"):
        assert not is_path_key(key), key


def test_split_and_anchor_keep_absolute_paths_and_separators():
    assert split_paths(" a.so ; b.so,") == ["a.so", "b.so"]
    model = Path("/repo/m")
    assert anchored("cache", model) == "/repo/m/cache"
    assert anchored("/abs/cache", model) == "/abs/cache"
    assert anchored("a.so;/lib/b.so", model) == "/repo/m/a.so;/lib/b.so"
    assert anchored("", model) == ""


def test_the_model_directory_of_an_artifact_whose_file_name_has_folders():
    model = Path("/repo/m")
    assert model_directory_of(model / "1" / "model.onnx", "model.onnx") == model
    assert model_directory_of(model / "3" / "weights" / "model.onnx", "weights/model.onnx") == model
