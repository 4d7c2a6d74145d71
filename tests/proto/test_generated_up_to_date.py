"""The committed accel_base/proto/*_pb2*.py must match what protos/*.proto generate."""

from gateway.tools.proto.regenerate import stale_files


def test_generated_modules_are_up_to_date() -> None:
    assert stale_files() == [], "run: python -m gateway.tools.proto.regenerate"
