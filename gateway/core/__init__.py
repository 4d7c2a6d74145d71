"""The server's core: models on disk and loaded, their placement in memory, their queues
and batches, routes and ensembles, and the in-process Core (service.py)."""
