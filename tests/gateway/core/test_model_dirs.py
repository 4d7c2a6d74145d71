from __future__ import annotations

import pytest

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from accel_base.version_dirs import available_versions, version_dir
from gateway.core.model_dirs import versions_to_load


def policy(text: str) -> mc.ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(f'name: "m" {text}', mc.ModelConfig())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", [3]),
        ("version_policy { latest { num_versions: 2 } }", [2, 3]),
        ("version_policy { all { } }", [1, 2, 3]),
        ("version_policy { specific { versions: [ 3, 1 ] } }", [1, 3]),
    ],
)
def test_version_policy(text, expected):
    assert versions_to_load(policy(text), [1, 2, 3]) == expected


def test_specific_version_must_exist():
    with pytest.raises(InvalidArgument, match=r"version\(s\) \[7\]"):
        versions_to_load(policy("version_policy { specific { versions: [ 7 ] } }"), [1])


def test_a_version_directory_may_have_leading_zeros(tmp_path):
    # TF Serving's base paths number versions so: 00000123/ is version 123.
    (tmp_path / "00000123").mkdir()
    (tmp_path / "7").mkdir()
    assert available_versions(tmp_path) == [7, 123]
    assert version_dir(tmp_path, 123) == tmp_path / "00000123"
    assert version_dir(tmp_path, 7) == tmp_path / "7"
