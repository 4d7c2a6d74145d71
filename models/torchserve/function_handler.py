"""A module-level entry point: called once with (None, context) to initialize, then with
each batch. It answers in text, and uses the context as TorchServe gives it: a request
header, and the response's status, content type and headers per request."""

_state = {}


def handle(data, context):
    if data is None:  # the initialize call
        _state["model"] = context.manifest["model"]["modelName"]
        _state["version"] = context.manifest["model"]["modelVersion"]
        return None
    answers = []
    for index, request in enumerate(data):
        body = request.get("body") or b""
        text = body.decode() if isinstance(body, (bytes, bytearray)) else str(body)
        context.set_response_content_type(index, "text/plain")
        context.set_response_header(index, "x-model", _state["model"])
        context.set_response_header(index, "x-model-version", _state["version"])
        if request.get("shout"):
            context.set_response_status(201, "Created", index)
            text = text.upper()
        if context.get_request_header(index, "explain") == "True":  # /explanations
            text = f"why {text}"
        echo = context.get_request_header(index, "x-echo") or ""
        answers.append(f"{text}|{echo}|{len(data)}")
    return answers
