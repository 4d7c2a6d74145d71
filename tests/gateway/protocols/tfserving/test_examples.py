"""tf.Examples for classify and regress (examples.py): a request's Input as the bytes its
signature parses, and REST's JSON features by TF Serving's typing rules."""

from __future__ import annotations

import pytest

from accel_base.proto.tfserving.tensorflow.core.example import example_pb2
from accel_base.proto.tfserving.tensorflow_serving.apis import input_pb2
from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.examples import input_from_json, serialized_examples


def _features(serialized: bytes) -> dict:
    example = example_pb2.Example.FromString(serialized)
    found = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        found[name] = (kind, list(getattr(feature, kind).value)) if kind else (None, [])
    return found


def test_a_context_joins_each_example_and_the_example_wins_a_clash() -> None:
    given = input_from_json({
        "context": {"shared": 1, "both": "context"},
        "examples": [{}, {"both": "example", "own": 2.5}],
    })  # fmt: skip
    first, second = (_features(b) for b in serialized_examples(given, 1 << 20))
    assert first == {"shared": ("int64_list", [1]), "both": ("bytes_list", [b"context"])}
    assert second == {"shared": ("int64_list", [1]), "both": ("bytes_list", [b"example"]),
                      "own": ("float_list", [2.5])}  # fmt: skip


def test_a_feature_s_first_value_fixes_its_kind() -> None:
    (serialized,) = serialized_examples(input_from_json({"examples": [{
        "ints": [1, True, False], "floats": [1.5, 2.0], "nan": float("nan"),
        "text": ["a", {"b64": "aGk="}, {"b64": "aGk"}], "empty": [], "huge": 2**70,
        "vast": -(10**400), "scalar": 7,
    }]}), 1 << 20)  # fmt: skip
    found = _features(serialized)
    assert found["ints"] == ("int64_list", [1, 1, 0])
    assert found["floats"] == ("float_list", [1.5, 2.0])
    assert found["nan"][0] == "float_list"
    assert found["text"] == ("bytes_list", [b"a", b"hi", b"hi"])  # padding may be left out
    assert found["empty"] == (None, [])
    assert found["huge"][0] == "float_list"  # past uint64: a double, as rapidjson reads it
    assert found["vast"] == ("float_list", [float("-inf")])
    assert found["scalar"] == ("int64_list", [7])


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "When method is classify, key 'examples' is expected and was not found"),
        ({"examples": {}}, "Expecting 'examples' value to be an list/array"),
        ({"examples": []}, "'examples' value is an empty array"),
        ({"examples": [7]}, "Example must be JSON object but got JSON Number"),
        ({"examples": [None]}, "Example must be JSON object but got JSON Null"),
        ({"examples": [{"f": [10, 10.0]}]},
         "Unexpected element type in feature: f expecting type: int64"),
        ({"examples": [{"f": [1.0, 2]}]},
         "Unexpected element type in feature: f expecting type: float"),
        ({"examples": [{"f": ["a", 1]}]},
         "Unexpected element type in feature: f expecting type: bytes"),
        ({"examples": [{"f": [[1]]}]}, "Feature: f has element with unexpected JSON type: Array"),
        ({"examples": [{"f": {"x": 1}}]},
         "Feature: f has element with unexpected JSON type: Object"),
        ({"examples": [{"f": 2**63}]},
         "Feature: f has uint64_t element. Only int64_t is supported."),
        ({"examples": [{"f": {"b64": "not base64!"}}]}, "Unable to base64 decode"),
        ({"context": 3}, "Example must be JSON object but got JSON Number"),  # context first
        ({"examples": [{"f": ["a", 2**63]}]},
         "Unexpected element type in feature: f expecting type: bytes"),
        ({"examples": [{"f": [1, 2**63]}]},
         "Feature: f has uint64_t element. Only int64_t is supported."),
    ],
)  # fmt: skip
def test_json_refusals_in_tf_serving_s_words(body, words) -> None:
    with pytest.raises(TfsError) as refused:
        input_from_json(body)
    assert refused.value.http_status == 400
    assert words in refused.value.message


def test_an_input_with_no_examples_is_refused() -> None:
    for given in (input_pb2.Input(), input_pb2.Input(example_list=input_pb2.ExampleList())):
        with pytest.raises(TfsError, match=r"^Input is empty\.$"):
            serialized_examples(given, 1 << 20)
    with_context = input_pb2.Input()
    with_context.example_list_with_context.context.SetInParent()
    with pytest.raises(TfsError, match=r"^Input is empty\.$"):
        serialized_examples(with_context, 1 << 20)


def test_a_context_copied_into_each_example_is_bounded() -> None:
    given = input_from_json({"context": {"f": "x" * 1000}, "examples": [{}] * 100})
    assert len(serialized_examples(given, 200_000)) == 100
    with pytest.raises(TfsError) as refused:
        serialized_examples(given, 50_000)  # a 1 KB context, 100 times
    assert refused.value.http_status == 400
    assert "over the 50000-byte limit" in refused.value.message
