"""`accel-gateway tensorflow-model-server`'s command line: TF Serving's flags as its
binary spells them, its model config file and batching parameters, and the refusals
(each by name) that stop a start before anything is served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.protocols.tfserving.served import Batching
from gateway.tools.tfserving.command import _options
from gateway.tools.tfserving.flags import add_flags
from gateway.tools.tfserving.model_config import ConfigFileError, parse_models, read_batching


def _args(*flags: str):
    import argparse

    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(list(flags))


def _run(*flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "tensorflow-model-server", *flags],
                          cwd=cwd, capture_output=True, text=True, timeout=120)  # fmt: skip


def test_flags_are_spelled_as_tf_serving_s() -> None:
    args = _args("--port=9000", "--rest_api_port=9001", "--model_name=m",
                 "--model_base_path=/models/m", "--enable_batching",
                 "--allow_version_labels_for_unavailable_models=false",
                 "--tensorflow_intra_op_parallelism=4")  # fmt: skip
    assert (args.port, args.rest_api_port, args.model_name) == (9000, 9001, "m")
    assert (
        args.enable_batching is True and args.allow_version_labels_for_unavailable_models is False
    )
    assert args.tensorflow_intra_op_parallelism == "4"  # accepted, ignored
    assert _args().port == 8500 and _args().rest_api_port == 0  # TF Serving's defaults


def test_unknown_and_unserved_flags_are_refused_by_name(tmp_path) -> None:
    unknown = _run("--model_base_path=/m", "--no_such_flag=1", cwd=tmp_path)
    assert unknown.returncode == 2 and "--no_such_flag" in unknown.stderr
    ssl = _run("--model_base_path=/m", "--ssl_config_file=x", cwd=tmp_path)
    assert ssl.returncode == 2 and "--ssl_config_file" in ssl.stderr
    monitoring = _run("--model_base_path=/m", "--monitoring_config_file=x", cwd=tmp_path)
    assert monitoring.returncode == 2 and "--monitoring_config_file x:" in monitoring.stderr
    neither = _run(cwd=tmp_path)
    assert neither.returncode == 2 and "--model_base_path" in neither.stderr
    batching = _run("--model_base_path=/m", "--batching_parameters_file=b", cwd=tmp_path)
    assert batching.returncode == 2 and "without --enable_batching" in batching.stderr


def test_a_bad_config_file_stops_the_start_in_tf_serving_s_words(tmp_path) -> None:
    (tmp_path / "bad.config").write_text("improperly formatted file")
    bad = _run("--model_config_file=bad.config", cwd=tmp_path)
    assert bad.returncode == 2
    assert "Error parsing text-format tensorflow.serving.ModelServerConfig" in bad.stderr


def test_model_name_and_base_path_from_the_container_s_variables(tmp_path) -> None:
    (tmp_path / "half" / "1").mkdir(parents=True)
    env = {"MODEL_NAME": "half", "MODEL_BASE_PATH": str(tmp_path)}
    one = _options(_args(), env)
    (model,) = one.serving.models.values()
    assert (model.name, model.base_path) == ("half", tmp_path / "half")  # /models/<name>
    assert one.grpc_port == 8500 and one.rest_port is None
    # The flags win over the variables, and name "default" when no name is given.
    given = _options(_args(f"--model_base_path={tmp_path}"), env)
    assert list(given.serving.models) == ["default"]
    assert given.serving.models["default"].base_path == tmp_path
    # A config file wins over --model_base_path, as in TF Serving (its image passes both).
    config = tmp_path / "models.config"
    config.write_text(f'model_config_list {{ config {{ name: "c" base_path: "{tmp_path}" }} }}')
    both = _options(_args(f"--model_config_file={config}", "--model_base_path=/x"), env)
    assert list(both.serving.models) == ["c"]


def test_ports_as_tf_serving_takes_them(tmp_path) -> None:
    with pytest.raises(ConfigFileError, match="--port=0"):
        _options(_args(f"--model_base_path={tmp_path}", "--port=0"), {})
    same = _options(_args(f"--model_base_path={tmp_path}", "--port=9000",
                          "--rest_api_port=9000"), {})  # fmt: skip
    assert (same.grpc_port, same.rest_port) == (9000, None)  # REST skipped, as TF Serving


def test_a_label_must_name_a_version_there_is(tmp_path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    config = tmp_path / "models.config"
    config.write_text(f'model_config_list {{ config {{ name: "m" base_path: "{tmp_path / "m"}" '
                      'version_labels { key: "canary" value: 2 } } }')  # fmt: skip
    with pytest.raises(ConfigFileError, match="label to version 2 of model m"):
        _options(_args(f"--model_config_file={config}"), {})
    allowed = _options(_args(f"--model_config_file={config}",
                             "--allow_version_labels_for_unavailable_models"), {})  # fmt: skip
    assert allowed.serving.models["m"].labels == {"canary": 2}


def test_a_model_config_file_gives_policies_and_labels(tmp_path) -> None:
    text = """model_config_list {
      config { name: "a" base_path: "/models/a" model_platform: "tensorflow"
               model_version_policy { specific { versions: 1 versions: 3 } }
               version_labels { key: "stable" value: 1 } }
      config { name: "b" base_path: "relative/b" model_version_policy { all {} } }
      config { name: "c" base_path: "/models/c"
               model_version_policy { latest { num_versions: 2 } } }
    }"""
    models = parse_models(text, tmp_path / "models.config")
    assert models["a"].policy == {"specific": {"versions": [1, 3]}}
    assert models["a"].labels == {"stable": 1}
    assert models["b"].policy == {"all": {}} and models["b"].base_path == tmp_path / "relative/b"
    assert models["c"].policy == {"latest": {"num_versions": 2}}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('model_config_list { config { name: "a" } }', "no base_path"),
        (
            'model_config_list { config { name: "a" base_path: "/a" model_platform: "onnx" } }',
            "only 'tensorflow'",
        ),
        (
            'model_config_list { config { name: "a" base_path: "/a" } '
            'config { name: "a" base_path: "/b" } }',
            "named twice",
        ),
        ('model_config_list { config { name: "a/b" base_path: "/a" } }', "model name"),
        ("", "give a model_config_list"),
    ],
)
def test_config_files_that_cannot_start_a_server(tmp_path, text, words) -> None:
    with pytest.raises(ConfigFileError, match=words):
        parse_models(text, tmp_path / "models.config")


def test_batching_parameters(tmp_path) -> None:
    path = tmp_path / "batching.config"
    path.write_text("max_batch_size { value: 128 } batch_timeout_micros { value: 500 } "
                    "max_enqueued_batches { value: 1000000 } "
                    "num_batch_threads { value: 8 }")  # fmt: skip
    assert read_batching(path) == Batching(128, 500, 1000000, ())
    path.write_text("max_batch_size { value: 8 } allowed_batch_sizes: 4 allowed_batch_sizes: 2")
    with pytest.raises(ConfigFileError, match="must increase"):
        read_batching(path)
