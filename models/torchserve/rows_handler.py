"""A handler that answers each row it is given with that row: under a request envelope
(config.properties' service_envelope), the rows are the envelope's instances, and the
answer shows how `ts` split and joined them."""


def handle(data, context):
    if data is None:  # the initialize call
        return None
    return [{"row": row} for row in data]
