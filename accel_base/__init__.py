"""The transport-free base every layer imports: V2 datatypes, errors, the model config
proto, batch merge/pad/split, and where things are cached.

Nothing here imports HTTP, gRPC or a framework, so a worker process that runs one
backend imports this package and that backend only.
"""
