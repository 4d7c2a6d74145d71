"""TF Serving's warm-up file read without TensorFlow (backends/tfserving/warmup.py):
TFRecord framing, the records of one signature, and what is refused."""

from __future__ import annotations

import struct

import pytest

from accel_base.proto.tfserving.tensorflow_serving.apis import prediction_log_pb2
from backends.tfserving.warmup import WARMUP_FILE, WarmupError, warmup_requests


def _write(version_dir, logs) -> None:
    path = version_dir / WARMUP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    framed = b""
    for log in logs:
        data = log.SerializeToString()
        # (checksums are not read: zeros stand in for them)
        framed += struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4
    path.write_bytes(framed)


def _predict(signature: str = "") -> prediction_log_pb2.PredictionLog:
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.model_spec.signature_name = signature
    log.predict_log.request.inputs["x"].float_val.append(1.0)
    return log


def _classify(signature: str) -> prediction_log_pb2.PredictionLog:
    log = prediction_log_pb2.PredictionLog()
    request = log.classify_log.request
    request.model_spec.signature_name = signature
    request.input.example_list.examples.add()
    return log


def test_each_signature_gets_its_own_records(tmp_path) -> None:
    _write(tmp_path, [_predict(), _predict("other"), _classify("classify"),
                      _predict("serving_default")])  # fmt: skip
    default = warmup_requests(tmp_path, "serving_default")
    assert [list(r) for r in default] == [["x"], ["x"]]
    assert list(default[0]["x"].float_val) == [1.0]
    assert warmup_requests(tmp_path, "classify") == [{"inputs": [b""]}]
    assert warmup_requests(tmp_path, "nothing") == []
    assert warmup_requests(tmp_path / "no-such-version", "serving_default") == []


def test_what_cannot_be_replayed_is_refused(tmp_path) -> None:
    _write(tmp_path, [_predict()])
    path = tmp_path / WARMUP_FILE
    path.write_bytes(path.read_bytes()[:-8])  # the record runs past the end
    with pytest.raises(WarmupError, match="runs past the file's end"):
        warmup_requests(tmp_path, "serving_default")
    session = prediction_log_pb2.PredictionLog()
    session.session_run_log.SetInParent()
    _write(tmp_path, [session])
    with pytest.raises(WarmupError, match="record 0 is a session_run_log"):
        warmup_requests(tmp_path, "serving_default")
    _write(tmp_path, [_predict()] * 1001)
    with pytest.raises(WarmupError, match="more than 1000 warm-up records"):
        warmup_requests(tmp_path, "serving_default")
