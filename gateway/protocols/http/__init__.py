"""The HTTP/REST front: V2 over FastAPI, with the binary tensor extension."""
