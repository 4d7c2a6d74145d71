"""TorchServe archives where they need more than this project's CPU machines have:
TorchServe's vision handlers (`image_classifier` and its kin import torchvision, whose PyPI
builds need the CUDA build of torch, and captum), and workers on a GPU (`number_of_gpu`).
Each test says what it needs and is skipped where that is missing; scripts/device-check
runs them on the lent GPU machine."""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("ts")

from backends.torchserve.store import Defaults, add_archive  # noqa: E402
from gateway.launch import GatewayProcess, free_ports, start_gateway  # noqa: E402
from models.digits import held_out  # noqa: E402
from models.torchserve.archives import build_archive  # noqa: E402


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _vision_imports() -> str:
    """Why TorchServe's vision handlers cannot run here ("" where they can)."""
    try:
        import captum  # noqa: F401
        import torchvision  # noqa: F401
        from PIL import Image  # noqa: F401
    except Exception as exc:  # (a torchvision built for CUDA torch fails past ImportError)
        return (
            f"TorchServe's vision handlers need torchvision, captum and Pillow ({exc}); "
            "torchvision's PyPI builds need the CUDA build of torch: run on the GPU machine "
            "(scripts/device-check)"
        )
    return ""


def serve(tmp: Path, kind: str, defaults: Defaults) -> tuple[GatewayProcess, httpx.Client, str]:
    """A gateway serving one archive: a client of TorchServe's inference API, and the
    address of its management API."""
    repository = tmp / "repository"
    add_archive(build_archive(kind, tmp / "store"), repository, defaults)
    *ports, inference, management = free_ports(5)
    server = start_gateway(
        repository, "--torchserve-port", str(inference),
        "--torchserve-management-port", str(management),
        log_path=tmp / "gateway.log", ports=tuple(ports), timeout_s=300,
    )  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{inference}", timeout=120)
    return server, client, f"http://127.0.0.1:{management}"


@pytest.fixture
def vision(tmp_path) -> Iterator[httpx.Client]:
    reason = _vision_imports()
    if reason:
        pytest.skip(reason)
    server, client, _ = serve(tmp_path, "vision", Defaults(gpus=1 if _has_gpu() else 0))
    yield client
    assert server.stop() == 0, server.log()


def digit_png(index: int) -> bytes:
    """A held-out digit (8x8, 0-16) as an RGB PNG, as a client would send a photo."""
    from PIL import Image

    pixels = (held_out()[0][index].reshape(8, 8) * 255 / 16).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(np.stack([pixels] * 3, axis=-1)).resize((64, 64)).save(out, "PNG")
    return out.getvalue()


@functools.cache
def vision_reference(png: bytes) -> dict[str, float]:
    """What ImageClassifier answers, computed here: its own transforms, the archive's
    network (the same seed), softmax, the top 5 by the names in index_to_name.json."""
    import torch
    from PIL import Image
    from ts.torch_handler.image_classifier import ImageClassifier

    from models.torchserve.vision_model import DigitsCNN

    torch.manual_seed(0)
    net = DigitsCNN().eval()
    image = ImageClassifier.image_processing(Image.open(io.BytesIO(png)))
    with torch.no_grad():
        probabilities = torch.softmax(net(image[None]), dim=1)[0]
    top = torch.topk(probabilities, 5)
    return {f"digit {c}": p for p, c in zip(top.values.tolist(), top.indices.tolist(), strict=True)}


def test_image_classifier_answers_as_it_does_in_process(vision):
    for index in range(3):
        png = digit_png(index)
        reply = vision.post("/predictions/vision", content=png)
        assert reply.status_code == 200, reply.text
        answer, expected = reply.json(), vision_reference(png)
        assert list(answer) == list(expected)  # the same five, in order
        assert answer == pytest.approx(expected, abs=1e-4)  # (a GPU's sums may differ)
    # A form upload (TorchServe's `data` field) reaches the handler the same way.
    png = digit_png(0)
    form = vision.post("/predictions/vision", files={"data": ("digit.png", png, "image/png")})
    assert form.status_code == 200 and form.json() == pytest.approx(vision_reference(png), abs=1e-4)


def test_image_classifier_refuses_what_is_no_image_with_its_own_error(vision):
    reply = vision.post("/predictions/vision", content=b"not an image")
    assert reply.status_code == 503  # PIL cannot open it: the handler failed, as in ts
    assert reply.json()["message"] == "Prediction failed"


@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU (scripts/device-check)")
def test_workers_run_on_the_gpu_torchserve_gives_them(tmp_path):
    import torch

    from models import digits_torch

    server, client, management = serve(tmp_path, "digits", Defaults(gpus=1))
    try:
        pixels, _ = held_out()
        net = digits_torch.train()  # (deterministic: the archive's own weights)
        with torch.no_grad():
            expected = net(torch.from_numpy(pixels[:8])).numpy()
        for row, probabilities in zip(pixels[:8], expected, strict=True):
            reply = client.post("/predictions/digits", json={"pixels": row.tolist()})
            assert reply.status_code == 200, reply.text
            answer = reply.json()
            # (TorchServe's BaseHandler turns TF32 on for Ampere and later: sums differ in
            # the fourth decimal, the digit does not.)
            assert answer["digit"] == int(np.argmax(probabilities))
            assert np.allclose(answer["probabilities"], probabilities, atol=1e-3)
        # Where the handler runs (BaseHandler's self.device, from the worker's gpu_id),
        # as its customized description says, and the worker as TorchServe describes it.
        [described] = httpx.get(
            f"{management}/models/digits", params={"customized": "true"}, timeout=60
        ).json()
        assert described["customizedMetadata"]["device"] == "cuda:0"
        assert described["deviceType"] == "gpu"
        assert all(worker["gpu"] for worker in described["workers"])
    finally:
        assert server.stop() == 0, server.log()
