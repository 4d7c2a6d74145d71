from __future__ import annotations

import pytest
from google.protobuf import text_format

from accel_base.proto import model_config_pb2 as mc
from backends import BackendUnavailable
from backends.buckets import batch_buckets, default_buckets


def config(max_batch_size: int, buckets: str | None = None) -> mc.ModelConfig:
    text = f'name: "m" platform: "p" max_batch_size: {max_batch_size}'
    if buckets is not None:
        text += f' parameters {{ key: "batch_buckets" value: {{ string_value: "{buckets}" }} }}'
    return text_format.Parse(text, mc.ModelConfig())


def test_default_buckets_are_powers_of_two_up_to_the_max():
    assert default_buckets(64) == (1, 2, 4, 8, 16, 32, 64)
    assert default_buckets(24) == (1, 2, 4, 8, 16, 24)
    assert default_buckets(1) == (1,)
    assert batch_buckets(config(8)) == (1, 2, 4, 8)


def test_configured_buckets_are_sorted_and_deduplicated():
    assert batch_buckets(config(64, "64, 8,1,8")) == (1, 8, 64)


def test_unbatched_model_has_no_buckets():
    assert batch_buckets(config(0, "1,2")) == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [("1,x", "comma-separated integers"), ("1,8", "ending at max_batch_size 64"), ("0,64", ">= 1")],
)
def test_bad_buckets_are_named(text, message):
    with pytest.raises(BackendUnavailable, match=message):
        batch_buckets(config(64, text))
