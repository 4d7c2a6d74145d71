import numpy as np
import orjson
import pytest

from gateway.tools.compare.inputs import DataError, Signature, generate, load

METADATA = {
    "inputs": [
        {"name": "pixels", "datatype": "FP32", "shape": [-1, 64]},
        {"name": "mask", "datatype": "INT32", "shape": [-1, -1]},
    ],
    "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}],
}
SIGNATURE = Signature.from_metadata(METADATA)


def test_signature_from_metadata():
    assert SIGNATURE.batching
    assert [(s.name, s.datatype, s.shape) for s in SIGNATURE.inputs] == [
        ("pixels", "FP32", (64,)),
        ("mask", "INT32", (-1,)),
    ]
    flat = Signature.from_metadata({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [3]}],
                                    "outputs": []})  # fmt: skip
    assert not flat.batching and flat.inputs[0].shape == (3,)


def test_generated_data_is_seeded_and_shaped():
    a, b = generate(SIGNATURE, 20, seed=3), generate(SIGNATURE, 20, seed=3)
    assert a.inputs["pixels"].shape == (20, 64) and a.inputs["pixels"].dtype == np.float32
    assert a.inputs["mask"].shape == (20, 8) and a.inputs["mask"].dtype == np.int32
    assert np.array_equal(a.inputs["pixels"], b.inputs["pixels"])
    assert [len(batch["pixels"]) for batch in a.batches(8, True)] == [8, 8]  # whole batches


def test_npz_with_labels(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, pixels=np.ones((5, 64)), mask=np.zeros((5, 2), np.int64), labels=np.arange(5))
    data = load(path, SIGNATURE)
    assert data.count == 5 and data.labels.tolist() == [0, 1, 2, 3, 4]
    assert data.inputs["pixels"].dtype == np.float32  # cast to what the model takes
    assert data.inputs["mask"].dtype == np.int32


def test_v2_json_body(tmp_path):
    path = tmp_path / "request.json"
    body = {"inputs": [
        {"name": "pixels", "datatype": "FP32", "shape": [2, 64], "data": [0.5] * 128},
        {"name": "mask", "datatype": "INT32", "shape": [2, 1], "data": [1, 2]},
    ]}  # fmt: skip
    path.write_bytes(orjson.dumps(body))
    assert load(path, SIGNATURE).inputs["mask"].tolist() == [[1], [2]]


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"pixels": np.ones((5, 64))}, r"no data for input\(s\) mask"),
        ({"pixels": np.ones((5, 63)), "mask": np.ones((5, 1), np.int32)},
         r"'pixels': a sample is shaped \[63\], the model takes \[64\]"),
        ({"pixels": np.ones((5, 64)), "mask": np.ones((5, 1))},
         "'mask': data is float64, the model takes INT32"),
        ({"pixels": np.ones((5, 64)), "mask": np.ones((4, 1), np.int32)},
         "the same number of samples"),
    ],
)  # fmt: skip
def test_data_that_does_not_fit_is_refused_by_name(tmp_path, arrays, message):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=message):
        load(path, SIGNATURE)


def test_other_files_are_refused(tmp_path):
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(DataError, match=r"\.npz or \.json"):
        load(tmp_path / "data.csv", SIGNATURE)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DataError, match="not a V2 request body"):
        load(tmp_path / "bad.json", SIGNATURE)
