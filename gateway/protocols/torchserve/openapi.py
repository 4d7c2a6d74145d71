"""`OPTIONS /`: the OpenAPI description of TorchServe's inference or management API as this
server serves it, made from the tables below (the routes the apps answer)."""

from __future__ import annotations

from typing import Any

from gateway import __version__

# (method, path, what it does, query parameters)
INFERENCE = (
    ("get", "/ping", "Health of the server", ()),
    ("post", "/predictions/{model_name}", "A prediction from the model's default version", ()),
    ("post", "/predictions/{model_name}/{model_version}", "A prediction from one version", ()),
    ("post", "/explanations/{model_name}", "The handler's explanation of a prediction", ()),
    ("post", "/explanations/{model_name}/{model_version}", "An explanation from one version",
     ()),
)  # fmt: skip
MANAGEMENT = (
    ("get", "/models", "Registered models, a page at a time", ("limit", "next_page_token")),
    ("post", "/models", "Register an archive from the model store or an allowed URL",
     ("url", "model_name", "initial_workers", "batch_size", "max_batch_delay", "handler",
      "synchronous", "response_timeout")),
    ("get", "/models/{model_name}", "Describe the default version", ("customized",)),
    ("get", "/models/{model_name}/{model_version}", "Describe a version, or all",
     ("customized",)),
    ("put", "/models/{model_name}", "Scale the model's workers",
     ("min_worker", "max_worker", "synchronous")),
    ("put", "/models/{model_name}/{model_version}", "Scale the model's workers",
     ("min_worker", "max_worker", "synchronous")),
    ("delete", "/models/{model_name}", "Unregister the default version", ()),
    ("delete", "/models/{model_name}/{model_version}", "Unregister a version", ()),
    ("put", "/models/{model_name}/{model_version}/set-default", "Make it the default version",
     ()),
)  # fmt: skip


def description(title: str, routes: tuple[tuple[str, str, str, tuple[str, ...]], ...]) -> dict:
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, query in routes:
        parameters = [
            {"in": "path", "name": name, "required": True, "schema": {"type": "string"}}
            for name in ("model_name", "model_version")
            if f"{{{name}}}" in path
        ]
        parameters += [{"in": "query", "name": name, "required": name == "url",
                        "schema": {"type": "string"}} for name in query]  # fmt: skip
        paths.setdefault(path, {})[method] = {
            "summary": summary, "parameters": parameters,
            "responses": {"200": {"description": "OK"}, "default": {"description": "Error"}},
        }  # fmt: skip
    return {
        "openapi": "3.0.1", "info": {"title": title, "version": __version__}, "paths": paths,
    }  # fmt: skip
