from __future__ import annotations

import numpy as np
import pytest

from accel_base.batch import (
    BatchShapeError,
    merge,
    merge_key,
    merge_padded,
    pad,
    padded_size,
    split,
)


def feed(rows: int, width: int = 3, dtype=np.float32, start: int = 0) -> dict[str, np.ndarray]:
    data = np.arange(start, start + rows * width, dtype=dtype).reshape(rows, width)
    strings = np.array([[f"r{start + i}".encode()] for i in range(rows)], dtype=object)
    return {"x": data, "s": strings}


def test_merge_concatenates_along_the_batch_dimension():
    merged = merge([feed(1), feed(2, start=100)])
    assert merged["x"].shape == (3, 3)
    assert merged["x"][1].tolist() == [100, 101, 102]
    assert merged["s"][:, 0].tolist() == [b"r0", b"r100", b"r101"]


def test_single_request_is_not_copied():
    one = feed(2)
    assert merge([one])["x"] is one["x"]


@pytest.mark.parametrize("other", [feed(1, width=4), feed(1, dtype=np.float64)])
def test_merge_refuses_other_trailing_shapes_or_dtypes(other):
    assert merge_key(other) != merge_key(feed(1))
    with pytest.raises(BatchShapeError, match="request 1 of the batch"):
        merge([feed(1), other])


def test_padding_and_split_drop_padding_rows():
    assert padded_size(3, (1, 4, 8)) == 4
    assert padded_size(3, None) == 3
    with pytest.raises(BatchShapeError, match="larger than every allowed size"):
        padded_size(9, (4, 8))
    padded = pad(merge([feed(1), feed(2, start=10)]), 3, 4)
    assert padded["x"].shape == (4, 3) and padded["x"][3].tolist() == [0, 0, 0]
    assert padded["s"][3, 0] == b""
    parts = split({"y": padded["x"] * 2}, [1, 2], 4)
    assert [p["y"].shape[0] for p in parts] == [1, 2]
    assert parts[1]["y"][1].tolist() == [26, 28, 30]


def test_split_checks_the_backend_returned_one_row_per_input_row():
    with pytest.raises(BatchShapeError, match="output 'y' has shape \\[3\\], but the batch had 4"):
        split({"y": np.zeros(3)}, [2, 2], 4)


def test_merge_padded_writes_rows_and_padding_into_allocated_arrays():
    feeds = [
        {"x": np.arange(4, dtype=np.float32).reshape(2, 2), "s": np.array([b"a", b"b"], object)},
        {"x": np.ones((1, 2), np.float32), "s": np.array([b"c"], object)},
    ]
    given = {}

    def allocate(specs):
        for name, shape, dtype in specs:
            given[name] = np.full(shape, 7, dtype=dtype)
        return given

    merged = merge_padded(feeds, 3, 4, allocate)
    assert merged["x"] is given["x"]
    np.testing.assert_array_equal(merged["x"], [[0, 1], [2, 3], [1, 1], [0, 0]])
    assert list(merged["s"]) == [b"a", b"b", b"c", b""]
    # Without an allocator: the same rows through merge() and pad().
    np.testing.assert_array_equal(merge_padded(feeds, 3, 4, None)["x"], merged["x"])
    with pytest.raises(BatchShapeError):
        merge_padded([feeds[0], {"x": np.ones((1, 3), np.float32)}], 3, 3, allocate)
