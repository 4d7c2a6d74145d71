"""TorchServe's model archives and handlers, run by TorchServe's own Python package (`ts`).

archive.py unpacks an archive safely; otf.py speaks the frame format TorchServe's frontend
and its Python worker exchange, so that `ts` decodes each request and encodes each answer
exactly as it does under TorchServe; backend.py runs a handler on a batch."""
