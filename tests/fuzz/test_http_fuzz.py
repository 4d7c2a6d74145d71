"""schemathesis against the OpenAPI document that a real gateway serves (GET /v2/openapi.json).

For every documented operation, generated requests, valid and invalid (schemathesis'
positive and negative modes), must be answered within REQUEST_TIMEOUT_S and never with a
5xx: bad input is a 4xx. The one 5xx allowed is the documented 501 of CUDA shared-memory
registration, which this server does not implement (as Triton answers without CUDA). The
answers must also match the document: documented status, content type and body schema.

The default run sends FUZZ_EXAMPLES (12) cases per operation, about 350 requests in
well under a minute. For a longer hunt, set ACCEL_FUZZ_EXAMPLES:

    ACCEL_FUZZ_EXAMPLES=1000 .venv/bin/pytest tests/fuzz/test_http_fuzz.py
"""

from __future__ import annotations

import os
import re

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.protocols.http.openapi import OPENAPI_PATH, openapi_document

FUZZ_EXAMPLES = int(os.environ.get("ACCEL_FUZZ_EXAMPLES", "12"))
REQUEST_TIMEOUT_S = 10.0
# Served models, so that generated requests get past "unknown model" to the decoders.
MODELS = ("simple", "identity_fp32", "identity_int8", "identity_bool", "identity_bytes")

OPERATIONS = [
    (method.upper(), path) for path, item in openapi_document()["paths"].items() for method in item
]


@pytest.fixture(scope="module")
def served_schema(fuzz_gateway):
    return schemathesis.openapi.from_url(f"http://{fuzz_gateway.http_url}{OPENAPI_PATH}")


def cases(operation) -> st.SearchStrategy:
    """Valid and invalid cases; the valid half also name served models (and version 1), so
    that requests get past "unknown model"."""
    strategies = [operation.as_strategy(GenerationMode.POSITIVE)]
    names = set(re.findall(r"{(\w+)}", operation.path))
    for model in MODELS:
        fixed = {k: v for k, v in {"name": model, "version": "1"}.items() if k in names}
        if fixed:
            strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed))
    if names or operation.body:  # something to get wrong
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE))
    found = st.one_of(strategies)
    if operation.path == "/v2/models/{name}":
        # GET /v2/models/stats is the statistics route, not the metadata of a model "stats".
        found = found.filter(lambda case: case.path_parameters.get("name") != "stats")
    return found


# CUDA shared-memory registration is documented as not implemented (as in Triton).
NOT_IMPLEMENTED = ("POST", "/v2/cudasharedmemory/region/{name}/register")


def allowed_5xx(method: str, path: str) -> set[int]:
    return {501} if (method, path) == NOT_IMPLEMENTED else set()


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_request_gets_a_prompt_non_5xx_answer(served_schema, method, path):
    operation = served_schema[path][method]

    @given(case=cases(operation))
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case) -> None:
        response = case.call(timeout=REQUEST_TIMEOUT_S)  # a hang fails with a Timeout
        assert response.status_code < 500 or response.status_code in allowed_5xx(method, path), (
            f"{method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
        )
        case.validate_response(
            response,
            checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
        )

    check()


def test_the_gateway_survived_with_no_unexpected_error(fuzz_gateway):
    """Runs after the fuzzing above (pytest keeps file order): still serving, and nothing
    reached the handlers of unexpected exceptions, which log 'unexpected error'."""
    assert fuzz_gateway.process.poll() is None
    ready = httpx.get(f"http://{fuzz_gateway.http_url}/v2/health/ready", timeout=5)
    assert ready.status_code == 200
    assert "unexpected error" not in fuzz_gateway.log()
