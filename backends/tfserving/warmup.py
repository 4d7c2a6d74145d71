"""A SavedModel's warm-up records, as TF Serving replays them before a version serves:
`assets.extra/tf_serving_warmup_requests` in the version directory, a TFRecord file of
tensorflow.serving.PredictionLog. Here, without TensorFlow: the records (TFRecord's
framing: a little-endian 64-bit length, its 32-bit checksum, the data, the data's
checksum) and, for one signature, the requests that call it with their inputs as
TensorProtos (or, for classify and regress, the serialized examples).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving's bound on a warm-up file's records
DEFAULT_SIGNATURE = "serving_default"
_LENGTH = struct.Struct("<Q")


class WarmupError(ValueError):
    """A warm-up file that cannot be replayed; the message says why."""


def example_bytes(given: Any) -> list[bytes]:
    """The examples of a tensorflow.serving.Input as TF Serving feeds them: each
    serialized, after the context's bytes when there is one (so that, parsed as one
    Example, a feature in both is the example's)."""
    kind = given.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in given.example_list.examples]
    if kind == "example_list_with_context":
        listed = given.example_list_with_context
        context = listed.context.SerializeToString()
        return [context + e.SerializeToString() for e in listed.examples]
    return []


def records(path: Path) -> Iterator[bytes]:
    """The records of a TFRecord file (checksums are not verified: a damaged record
    fails as the message it no longer is)."""
    data = path.read_bytes()
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise WarmupError(f"{path}: a record's header is cut short at byte {offset}")
        (length,) = _LENGTH.unpack_from(data, offset)
        start = offset + 12
        if start + length + 4 > len(data):
            raise WarmupError(f"{path}: a record of {length} bytes runs past the file's end")
        yield data[start : start + length]
        offset = start + length + 4


def _signature(spec: Any) -> str:
    return spec.signature_name or DEFAULT_SIGNATURE


def warmup_requests(version_dir: Path, signature: str) -> list[dict[str, Any]]:
    """The warm-up requests of a version that call `signature`, in the file's order:
    each as {input name: TensorProto}, or {"inputs": list of example bytes} for a
    classify or regress record. [] when the version has no warm-up file."""
    from accel_base.proto.tfserving.tensorflow_serving.apis import prediction_log_pb2

    path = version_dir / WARMUP_FILE
    if not path.is_file():
        return []
    found: list[dict[str, Any]] = []
    for index, record in enumerate(records(path)):
        if index >= MAX_RECORDS:
            raise WarmupError(f"{path}: more than {MAX_RECORDS} warm-up records "
                              "(TF Serving's bound)")  # fmt: skip
        try:
            log = prediction_log_pb2.PredictionLog.FromString(record)
        except Exception as exc:  # protobuf's DecodeError
            raise WarmupError(f"{path}: record {index} is not a PredictionLog: {exc}") from None
        kind = log.WhichOneof("log_type")
        if kind == "predict_log":
            request = log.predict_log.request
            if _signature(request.model_spec) == signature:
                found.append(dict(request.inputs))
        elif kind in ("classify_log", "regress_log"):
            request = getattr(log, kind).request
            if _signature(request.model_spec) == signature:
                found.append({"inputs": example_bytes(request.input)})
        elif kind == "multi_inference_log":
            request = log.multi_inference_log.request
            if any(_signature(t.model_spec) == signature for t in request.tasks):
                found.append({"inputs": example_bytes(request.input)})
        else:
            raise WarmupError(f"{path}: record {index} is a {kind or 'empty log'}, which "
                              "TF Serving does not replay either")  # fmt: skip
    return found
