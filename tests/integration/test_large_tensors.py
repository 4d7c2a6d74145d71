"""Large tensors through the unmodified tritonclient, HTTP binary and gRPC: the bytes the
server keeps as views of the request and of the model's output (issue 41's data path)
come back whole, beside small requests on the same connection."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_4_mib_tensor_and_a_small_one_come_back_whole(gateway, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = gateway.http_url if protocol == "http" else gateway.grpc_url
    client = module.InferenceServerClient(url)
    rng = np.random.default_rng(41)
    # 4 MiB less 64 bytes: the answer's header must fit grpc's default 4 MiB limit.
    for size in (1_048_560, 16, 700_000):
        data = rng.standard_normal((1, size), dtype=np.float32)
        tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, **({"binary_data": True} if protocol == "http" else {}))
        outputs = [module.InferRequestedOutput("OUTPUT0", **_binary(protocol))]
        result = client.infer("identity_fp32", [tensor], outputs=outputs)
        assert np.array_equal(result.as_numpy("OUTPUT0"), data)
    client.close()


def _binary(protocol: str) -> dict:
    return {"binary_data": True} if protocol == "http" else {}
