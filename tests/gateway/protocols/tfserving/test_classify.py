"""A classify or regress signature's answer read as TF Serving reads it (classify.py):
the shapes and dtypes it takes, its refusals' words, and REST's `results` text."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.core.inference import Tensor
from gateway.protocols.tfserving.classify import (
    _classifications,
    _regressions,
    classify_json,
    regress_json,
)
from gateway.protocols.tfserving.errors import TfsError


def _strings(rows: list[list[str]]) -> np.ndarray:
    array = np.empty((len(rows), len(rows[0])), dtype=object)
    array[:] = [[s.encode() for s in row] for row in rows]
    return array


def _answer(**tensors: tuple[str, np.ndarray]) -> dict[str, Tensor]:
    return {name: Tensor(name, datatype, data) for name, (datatype, data) in tensors.items()}


def test_classes_and_scores_become_a_class_per_column() -> None:
    answer = _answer(classes=("BYTES", _strings([["a", "b"], ["c", "d"]])),
                     scores=("FP32", np.array([[0.25, 0.75], [1.0, 0.0]], np.float32)))  # fmt: skip
    result = _classifications(answer, 2)
    assert [[(c.label, c.score) for c in row.classes] for row in result.classifications] == [
        [("a", 0.25), ("b", 0.75)], [("c", 1.0), ("d", 0.0)]]  # fmt: skip
    assert classify_json(result) == (
        '{"results": [[["a", 0.25], ["b", 0.75]], [["c", 1.0], ["d", 0.0]]]}')  # fmt: skip
    # Scores alone: empty labels; classes alone: scores of 0.
    alone = _classifications(_answer(scores=("FP32", np.array([[3.0]], np.float32))), 1)
    assert classify_json(alone) == '{"results": [[["", 3.0]]]}'
    labels = _classifications(_answer(classes=("BYTES", _strings([["x"]]))), 1)
    assert classify_json(labels) == '{"results": [[["x", 0.0]]]}'


@pytest.mark.parametrize(
    ("answer", "count", "words"),
    [
        (_answer(scores=("FP32", np.zeros(3, np.float32))), 3,
         "Expected Tensor shape: [batch_size num_classes] but got [3]"),
        (_answer(classes=("INT32", np.zeros((3, 2), np.int32))), 3,
         "Expected classes Tensor of DT_STRING. Got: DT_INT32"),
        (_answer(scores=("FP64", np.zeros((3, 2)))), 3,
         "Expected scores Tensor of DT_FLOAT. Got: DT_DOUBLE"),
        (_answer(scores=("FP32", np.zeros((2, 2), np.float32))), 3,
         "Expected scores output batch size of 3. Got: 2"),
        (_answer(classes=("BYTES", _strings([["a", "b"]])),
                 scores=("FP32", np.zeros((1, 3), np.float32))), 1,
         "Tensors class and score should match in dim_size(1). Got 2 vs. 3"),
    ],
)  # fmt: skip
def test_classify_answers_tf_serving_refuses(answer, count, words) -> None:
    with pytest.raises(TfsError) as refused:
        _classifications(answer, count)
    assert refused.value.message == words


def test_regress_takes_a_column_or_a_vector_of_floats() -> None:
    for data in (np.array([3.5, 4.0], np.float32), np.array([[3.5], [4.0]], np.float32)):
        result = _regressions(_answer(outputs=("FP32", data)), 2)
        assert regress_json(result) == '{"results": [3.5, 4.0]}'


@pytest.mark.parametrize(
    ("data", "datatype", "count", "words"),
    [
        (np.zeros((2, 2), np.float32), "FP32", 2,
         "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got [2,2]"),
        (np.zeros(3, np.float32), "FP32", 2,
         "Input batch size did not match output batch size: 2 vs. 3"),
        (np.zeros(2), "FP64", 2, "Expected output Tensor of DT_FLOAT.  Got: DT_DOUBLE"),
    ],
)  # fmt: skip
def test_regress_answers_tf_serving_refuses(data, datatype, count, words) -> None:
    with pytest.raises(TfsError) as refused:
        _regressions(_answer(outputs=(datatype, data)), count)
    assert refused.value.message == words
