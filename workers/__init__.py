"""Model instances in worker processes: one process per instance, tensors in shared memory.

The gateway (parent) and a worker (child) share two memfd-backed arenas per instance:
the parent writes each batch's inputs into its input arena, the worker writes the
outputs into its output arena, and only a small descriptor message crosses the
socket between them. memfd segments have no name in /dev/shm, so nothing is left
behind when either side dies.

This package imports the transport-free base and the backends, never the gateway,
so a worker starts without FastAPI, uvicorn or grpc.
"""
