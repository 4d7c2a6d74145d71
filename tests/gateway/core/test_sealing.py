"""The sealed repository, on real directories: paths a config names stay inside the
model's directory, through `..`, absolute paths and symbolic links alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.sealing import (
    check_artifact,
    check_config_paths,
    check_links,
    model_directory,
    relative_to_repository,
    repository_prefixes,
)


@pytest.fixture
def repository(tmp_path) -> Path:
    root = tmp_path / "repository"
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "1" / "model.onnx").write_bytes(b"onnx")
    (tmp_path / "secret.onnx").write_bytes(b"not yours")
    return root


def config(**fields) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m", platform="onnxruntime_onnx")
    for key, value in fields.items():
        setattr(result, key, value)
    return result


def test_a_plain_file_name_and_a_subdirectory_are_fine(repository):
    (repository / "m" / "1" / "weights").mkdir()
    check_config_paths(config(default_model_filename="model.onnx"), repository / "m")
    check_config_paths(config(default_model_filename="weights/model.onnx"), repository / "m")


@pytest.mark.parametrize(
    ("filename", "fragment"),
    [
        ("/etc/passwd", "absolute path"),
        ("../../secret.onnx", "contains '..'"),
        ("sub/../../model.onnx", "contains '..'"),
        ("~/model.onnx", "absolute path"),
    ],
)
def test_default_model_filename_outside_is_refused(repository, filename, fragment):
    with pytest.raises(InvalidArgument, match=fragment):
        check_config_paths(config(default_model_filename=filename), repository / "m")


def test_a_symbolic_link_out_of_the_model_is_refused(repository):
    (repository / "m" / "1" / "link.onnx").symlink_to(repository.parent / "secret.onnx")
    with pytest.raises(InvalidArgument, match="symbolic link"):
        check_config_paths(config(default_model_filename="link.onnx"), repository / "m")
    # The same file reached as the platform's default name, which no config names.
    artifact = repository / "m" / "2" / "model.onnx"
    artifact.parent.mkdir()
    artifact.symlink_to(repository.parent / "secret.onnx")
    with pytest.raises(InvalidArgument, match="2/model.onnx leads outside"):
        check_artifact(artifact, repository / "m", "m")
    check_artifact(repository / "m" / "1" / "model.onnx", repository / "m", "m")


def test_a_link_inside_a_directory_artifact_must_stay_inside(repository):
    saved = repository / "m" / "1" / "model.savedmodel" / "variables"
    saved.mkdir(parents=True)
    (saved / "index").symlink_to(repository / "m" / "1" / "model.onnx")  # inside: fine
    (repository / "m" / "2").symlink_to(repository / "m" / "1")  # a version linked: fine
    check_links(repository / "m", "m")
    (saved / "data").symlink_to(repository.parent / "secret.onnx")
    with pytest.raises(InvalidArgument, match="m/1/model.savedmodel/variables/data is a symb"):
        check_links(repository / "m", "m")
    (saved / "data").unlink()
    (saved / "shards").symlink_to(repository.parent)  # a directory out
    with pytest.raises(InvalidArgument, match="variables/shards is a symbolic link"):
        check_links(repository / "m", "m")


def test_a_symbolic_link_loop_is_refused_not_a_crash(repository):
    (repository / "m" / "1" / "a").symlink_to(repository / "m" / "1" / "b")
    (repository / "m" / "1" / "b").symlink_to(repository / "m" / "1" / "a")
    with pytest.raises(InvalidArgument, match="m/1/[ab] is a symbolic link .* or loops"):
        check_links(repository / "m", "m")


def test_path_parameters_and_accelerator_options_are_checked(repository):
    for key in ("trt_engine_cache_path", "cache_dir", "session.ep.context_file_path"):
        outside = config()
        outside.parameters[key].string_value = "/tmp/elsewhere"
        with pytest.raises(InvalidArgument, match=f"parameter {key}"):
            check_config_paths(outside, repository / "m")
    accelerated = config()
    accelerator = accelerated.optimization.execution_accelerators.gpu_execution_accelerator.add()
    accelerator.name = "tensorrt"
    accelerator.parameters["trt_engine_cache_path"] = "../engines"
    with pytest.raises(InvalidArgument, match="tensorrt option trt_engine_cache_path"):
        check_config_paths(accelerated, repository / "m")
    inside = config()
    inside.parameters["trt_engine_cache_path"].string_value = "engines"
    inside.parameters["execution"].string_value = "/not/a/path/key"  # not a path parameter
    check_config_paths(inside, repository / "m")


def test_a_model_directory_linked_from_elsewhere_is_refused(repository, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "1").mkdir(parents=True)
    (repository / "linked").symlink_to(elsewhere)
    with pytest.raises(InvalidArgument, match="outside the model repository"):
        model_directory(repository, "linked")
    assert model_directory(repository, "m") == repository / "m"


def test_messages_lose_the_repository_path(repository):
    message = f"{repository.resolve()}/m/1/model.onnx is bad; so is {repository}"
    prefixes = repository_prefixes(repository)
    assert relative_to_repository(message, prefixes) == "m/1/model.onnx is bad; so is ."
    # Another directory whose name starts like the repository's keeps its path.
    sibling = f"{repository}-cache/x"
    assert relative_to_repository(sibling, prefixes) == sibling
