"""Front processes (`--workers N`): HTTP and gRPC served by N processes on the same ports,
each request handed to the one model host that keeps the models, queues, batchers and
statistics."""
