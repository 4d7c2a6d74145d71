"""TorchServe's users, served as they are: a model store of archives becomes a model
repository (store.py), and `accel-gateway torchserve` takes TorchServe's command line
and config.properties (command.py, properties.py)."""
