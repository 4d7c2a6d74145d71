"""TorchServe's model archives and handlers, run by TorchServe's own Python package (`ts`).

archive.py unpacks an archive safely; otf.py speaks the frame format TorchServe's frontend
and its Python worker exchange, so that `ts` decodes each request and encodes each answer
exactly as it does under TorchServe; backend.py runs a handler on a batch.

The names below are the contract an archive's model keeps with the gateway: the config
store.py writes, this backend, and TorchServe's front
(gateway/protocols/torchserve) all use them."""

BODY, RESPONSE, RESPONSE_INFO = "body", "response", "response_info"  # its tensors
# Config parameters: TorchServe's versions as JSON ({"1.0": "1"}: its name -> the
# repository's version), and the handlers registrations named over their manifests', as
# JSON by the repository's version ({"2": "my_handler:handle"}).
VERSIONS = "torchserve_versions"
HANDLER = "torchserve_handler"
# A version directory's own Python packages: its archive's requirementsFile, installed
# there (install_py_dep_per_model); its worker puts them on its path, no one else does.
PACKAGES = ".python-packages"
