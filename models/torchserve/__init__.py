"""TorchServe archives built by `torch-model-archiver` from models trained here
(archives.py), with the handler sources they carry (this directory's other files, which
run inside TorchServe's `ts` package, not the gateway)."""
