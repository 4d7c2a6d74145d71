"""The Python backend in process: requests split back out of a merged batch, per-request
failures, the config a model completes, and triton_python_backend_utils itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from accel_base.proto import model_config_pb2 as mc
from backends import Device
from backends.python import pb_utils
from backends.python.backend import ALL, PythonBackend
from gateway.core.model_config import read_config
from models import python_models


def load(repo: Path, name: str, source: str | None = None) -> PythonBackend:
    if source is not None:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 4\n'
            'input [ { name: "X", data_type: TYPE_FP32, dims: [ 2 ] } ]\n'
            'output [ { name: "Y", data_type: TYPE_FP32, dims: [ 2 ] } ]\n'
        )
        (repo / name / "1" / "model.py").write_text(source)
    config = read_config(repo / name)
    return PythonBackend(repo / name / "1" / "model.py", config, Device())


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    python_models.build(tmp_path)
    return tmp_path


def test_a_merged_batch_goes_to_execute_as_its_requests(repo):
    backend = load(repo, "py_identity")
    merged = {"INPUT0": np.arange(6, dtype=np.float32).reshape(3, 2)}
    infos = [(1, ("OUTPUT0",), {}, "a", 0), (2, ("OUTPUT0",), {"k": 1}, "b", 7)]
    outputs, failures = backend.run_requests(merged, ["OUTPUT0"], infos)
    assert failures == []
    np.testing.assert_array_equal(outputs["0:OUTPUT0"], [[0, 1]])
    np.testing.assert_array_equal(outputs["1:OUTPUT0"], [[2, 3], [4, 5]])
    backend.unload()


def test_the_model_completes_its_own_config(repo):
    backend = load(repo, "py_strings")
    completed = backend.completed_config()
    assert completed is not None and completed.max_batch_size == 8
    assert completed.HasField("dynamic_batching")
    assert [(s.name, s.datatype, s.shape) for s in backend.outputs()] == [
        ("UPPER", "BYTES", (-1, -1)),
        ("LENGTH", "INT32", (-1, -1)),
    ]
    text = np.array([[b"ab"], [b""]], dtype=object)
    infos = [(1, ("UPPER", "LENGTH"), {}, "", 0), (1, ("UPPER",), {}, "", 0)]
    outputs, failures = backend.run_requests({"TEXT": text}, ["LENGTH", "UPPER"], infos)
    assert outputs["0:UPPER"].tolist() == [[b"AB"]] and outputs["0:LENGTH"].tolist() == [[2]]
    assert failures == [(1, "InvalidArgument", "TEXT has an empty string")]


MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args

    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()
        {body}
"""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("raise ValueError('no')", "ValueError: no"),  # the whole batch (index ALL)
        ("return []", "execute returned 0 responses for 1 requests"),  # the same
        ("return [None]", "execute returned a NoneType, not InferenceResponse"),
        (
            "return [pb_utils.InferenceResponse([pb_utils.Tensor('Y', x.astype(np.float64))])]",
            "output 'Y' is FP64, the config says FP32",
        ),
        (
            "return [pb_utils.InferenceResponse([pb_utils.Tensor('Y', x[:0])])]",
            "output 'Y' has shape [0, 2], not 1 rows",
        ),
        ("return [pb_utils.InferenceResponse([])]", "the response has no output Y"),
    ],
)
def test_what_a_model_gets_wrong_fails_its_requests_with_a_reason(tmp_path, body, message):
    backend = load(tmp_path, "broken", MODEL.format(body=body))
    info = (1, ("Y",), {}, "", 0)
    outputs, failures = backend.run_requests({"X": np.ones((1, 2), np.float32)}, ["Y"], [info])
    assert outputs == {}
    whole_batch = body.startswith(("raise", "return []"))
    assert failures == [(ALL if whole_batch else 0, "Internal", message)]


def test_initialize_gets_tritons_arguments(tmp_path):
    body = "return [pb_utils.InferenceResponse([pb_utils.Tensor('Y', x)])]"
    backend = load(tmp_path, "args", MODEL.format(body=body))
    args = backend.model.args
    assert args["model_name"] == "args" and args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    config = json.loads(args["model_config"])
    assert config["max_batch_size"] == 4 and config["input"][0]["dims"] == [2]
    assert pb_utils.get_input_config_by_name(config, "X")["data_type"] == "TYPE_FP32"
    assert backend.run({"X": np.ones((2, 2), np.float32)}, ["Y"])["Y"].shape == (2, 2)


def test_a_decoupled_request_without_a_stream_is_refused_and_senders_are_for_decoupled(
    tmp_path,
):
    (tmp_path / "d" / "1").mkdir(parents=True)
    (tmp_path / "d" / "1" / "model.py").write_text("class TritonPythonModel: pass\n")
    config = mc.ModelConfig(name="d", backend="python")
    config.model_transaction_policy.decoupled = True
    backend = PythonBackend(tmp_path / "d" / "1" / "model.py", config, Device())
    _, failures = backend.run_requests({}, [], [(1, (), {}, "", 0, "")])
    assert failures == [
        (ALL, "InvalidArgument", "model 'd' is decoupled: call it over a gRPC stream")
    ]
    with pytest.raises(pb_utils.TritonModelException, match="for decoupled models"):
        pb_utils.InferenceRequest("m").get_response_sender()


def test_pb_utils_tensors_types_and_dlpack():
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(mc.TYPE_INT64) is np.int64
    assert pb_utils.numpy_to_triton_type(np.float16) == mc.TYPE_FP16
    tensor = pb_utils.Tensor("x", np.frombuffer(np.arange(4, dtype=np.int32).tobytes(), np.int32))
    back = pb_utils.Tensor.from_dlpack("y", tensor.to_dlpack())  # a read-only view: copied
    assert back.name() == "y" and back.as_numpy().tolist() == [0, 1, 2, 3]
    assert pb_utils.Tensor.from_dlpack("z", np.ones(2)).as_numpy().tolist() == [1.0, 1.0]
    strings = pb_utils.Tensor("s", np.array(["é", "b"]))
    assert strings.as_numpy().tolist() == ["é".encode(), b"b"]
    assert strings.triton_dtype() == mc.TYPE_STRING
    with pytest.raises(pb_utils.TritonModelException, match="numpy array"):
        pb_utils.Tensor("x", [1, 2])
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    assert error.message() == "bad" and error.code() == pb_utils.TritonError.INVALID_ARG
    response = pb_utils.InferenceResponse([tensor], parameters={"a": 1})
    assert pb_utils.get_output_tensor_by_name(response, "x") is tensor
    assert json.loads(response.parameters()) == {"a": 1} and not response.has_error()


SEEN = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        self.seen = [(r.request_id(), r.parameters(), r.correlation_id(),
                      r.requested_output_names()) for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", r.inputs()[0].as_numpy())])
                for r in requests]
"""


def test_each_request_keeps_its_id_parameters_and_correlation_id(tmp_path):
    backend = load(tmp_path, "seen", SEEN)
    infos = [(1, ("Y",), {"a": 1}, "first", 0), (1, ("Y",), {"sequence_id": 9}, "second", 9)]
    backend.run_requests({"X": np.ones((2, 2), np.float32)}, ["Y"], infos)
    assert [(i, json.loads(p), c, o) for i, p, c, o in backend.model.seen] == [
        ("first", {"a": 1}, 0, ["Y"]),
        ("second", {"sequence_id": 9}, 9, ["Y"]),
    ]


COMPLETING = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        config.set_max_batch_size(8)
        {extra}
        return config

    def execute(self, requests):
        return []
"""


def test_auto_complete_merges_with_what_the_config_already_declares(tmp_path):
    """The same call again on its own completed config (a second instance, a restarted
    worker) changes nothing, as in Triton; a different datatype is refused."""
    backend = load(tmp_path, "again", COMPLETING.replace("{extra}", ""))  # X, Y declared already
    completed = backend.completed_config()
    assert [t.name for t in completed.input] == ["X"] and completed.max_batch_size == 4
    again = PythonBackend(tmp_path / "again" / "1" / "model.py", completed, Device())
    assert again.completed_config().SerializeToString() == completed.SerializeToString()
    (tmp_path / "again" / "1" / "model.py").write_text(
        COMPLETING.replace("{extra}", "config.add_output({'name': 'Y', 'data_type': 'TYPE_INT32'})")
    )
    with pytest.raises(pb_utils.TritonModelException, match="'Y' is TYPE_INT32 here but TYPE_FP32"):
        load(tmp_path, "again")


def test_decoupled_may_be_declared_by_the_model_itself(tmp_path):
    extra = "config.set_model_transaction_policy({'decoupled': True})"
    backend = load(tmp_path, "d2", COMPLETING.replace("{extra}", extra))
    assert backend.completed_config().model_transaction_policy.decoupled
