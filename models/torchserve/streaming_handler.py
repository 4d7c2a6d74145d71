"""A handler that streams, as TorchServe's LLM examples do: each request's body is split
into words, every word but the last is sent at once as an intermediate response
(`send_intermediate_predict_response`), and the last is the request's answer. So a
client that reads the stream sees "one ", "two ", "three" for "one two three"."""

from ts.handler_utils.utils import send_intermediate_predict_response


def handle(data, context):
    if data is None:  # the initialize call
        return None
    words = []
    for request in data:
        body = request.get("body") or b""
        text = body.decode() if isinstance(body, (bytes, bytearray)) else str(body)
        words.append(text.split() or [""])
    for step in range(max(len(w) for w in words) - 1):
        # One intermediate response for every request of the batch, as ts sends them.
        sent = [f"{w[step]} " if step < len(w) - 1 else "" for w in words]
        send_intermediate_predict_response(sent, context.request_ids, "Intermediate", 200, context)
    return [w[-1] for w in words]
